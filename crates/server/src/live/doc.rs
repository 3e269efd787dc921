//! One WAL record's accepted events as the [`LiveDoc`] a live tail receives: grouped by
//! (epoch, dc, type, subtype) in payload order, each group encoded as the aggregator encodes it
//! into the group's chunk.

use sereal::{ArrayEncoder, Value};
use sluice_blob::BlobBuilder;
use sluice_collector::{EventBody, ParsedEvent};
use sluice_reader::{LiveDoc, LivePart};

/// Builds the [`LiveDoc`]s of records: one encoder and one document buffer kept between records.
pub(crate) struct DocBuilder {
    /// The server's blob options with a chunk limit no document reaches (one blob per part).
    blobs: BlobBuilder,
    /// Cleared after each part.
    encoder: ArrayEncoder,
    /// The encoded document of one part.
    bytes: Vec<u8>,
}

impl DocBuilder {
    /// A builder of parts in `profile`'s blobs (the server's, so that a tail prints live events
    /// exactly as it prints them read back from the store). Errors: a bad profile.
    pub fn new(profile: sluice_blob::Profile) -> Result<DocBuilder, String> {
        let blobs = BlobBuilder::new(sluice_blob::BlobOptions {
            profile,
            chunk_limit: usize::MAX,
            ..sluice_blob::BlobOptions::default()
        })
        .map_err(|e| e.to_string())?;
        let encoder =
            ArrayEncoder::new(blobs.encoder_options().clone()).map_err(|e| e.to_string())?;
        Ok(DocBuilder {
            blobs,
            encoder,
            bytes: Vec::new(),
        })
    }

    /// The document of WAL record `seq` holding `events` (its accepted events, in payload
    /// order). An event the aggregator would refuse (a value that is not a hash, nesting too
    /// deep) is left out, as it is left out of the stored chunk.
    pub fn build(&mut self, seq: u64, events: &[ParsedEvent]) -> LiveDoc {
        let max_epoch = events.iter().map(|e| e.epoch).max().unwrap_or(0);
        let mut parts = Vec::new();
        for group in groups(events) {
            let first = tags(&events[group[0]]);
            self.encoder.clear();
            self.encoder.expect_len(group.len());
            for &i in &group {
                let pushed = match &events[i].event {
                    EventBody::Fragment(f) => self.encoder.push_fragment_ref(f.as_ref()),
                    EventBody::Value(v) => match v.resolve() {
                        Value::Hash(_) => self.encoder.push(v),
                        _ => continue,
                    },
                };
                if pushed.is_ok() {
                    self.encoder.push_origin(seq);
                }
            }
            if self.encoder.is_empty() {
                continue;
            }
            self.bytes.clear();
            let built = self
                .encoder
                .finish_into(&mut self.bytes)
                .map_err(sluice_blob::BlobError::from)
                .and_then(|()| self.blobs.build_document(&self.bytes));
            // One blob: no document reaches the chunk limit; a part that cannot be built is not
            // stored either (the aggregator isolates such events the same way).
            if let Ok(mut blobs) = built {
                if blobs.len() == 1 {
                    let (epoch, dc, type_, subtype) = first;
                    parts.push(LivePart {
                        epoch,
                        dc,
                        type_,
                        subtype,
                        blob: blobs.remove(0),
                    });
                }
            }
        }
        self.encoder.clear();
        LiveDoc {
            seq,
            max_epoch,
            parts,
        }
    }
}

/// An event's four tags, owned.
fn tags(e: &ParsedEvent) -> (i64, String, String, String) {
    (e.epoch, e.dc.clone(), e.type_.clone(), e.subtype.clone())
}

/// The indices of `events` by (epoch, dc, type, subtype): groups in order of their first event,
/// each group's events in payload order. Payloads are mostly runs of one group, and a payload
/// holds few groups: a linear search over the groups met so far, checked against the last one
/// first.
fn groups(events: &[ParsedEvent]) -> Vec<Vec<usize>> {
    let same = |a: &ParsedEvent, b: &ParsedEvent| {
        a.epoch == b.epoch && a.dc == b.dc && a.type_ == b.type_ && a.subtype == b.subtype
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut last: Option<usize> = None;
    for (i, e) in events.iter().enumerate() {
        let found = match last {
            Some(g) if same(&events[groups[g][0]], e) => Some(g),
            _ => groups.iter().position(|g| same(&events[g[0]], e)),
        };
        match found {
            Some(g) => {
                groups[g].push(i);
                last = Some(g);
            }
            None => {
                groups.push(vec![i]);
                last = Some(groups.len() - 1);
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(epoch: i64, type_: &str, id: i64) -> ParsedEvent {
        let v = sereal::json::from_json_value(&serde_json::json!({
            "epoch": epoch, "dc": "ams1", "type": type_, "subtype": "", "id": id,
        }));
        ParsedEvent {
            epoch,
            dc: "ams1".into(),
            type_: type_.into(),
            subtype: String::new(),
            event: EventBody::Value(v),
        }
    }

    fn ids(part: &LivePart) -> Vec<i64> {
        let events = part
            .blob
            .as_blob_ref()
            .decode(&sereal::Limits::default())
            .unwrap();
        events
            .iter()
            .map(|e| e.get("id").and_then(Value::as_i64).unwrap())
            .collect()
    }

    #[test]
    fn parts_are_groups_in_payload_order_and_skip_what_the_aggregator_refuses() {
        let mut b = DocBuilder::new(sluice_blob::Profile::default()).unwrap();
        let mut events = vec![
            event(10, "WEB", 1),
            event(10, "CRON", 2),
            event(11, "WEB", 3),
            event(10, "WEB", 4),
        ];
        // Not a hash: the aggregator refuses it, so the live part leaves it out too.
        events.push(ParsedEvent {
            event: EventBody::Value(Value::Int(5)),
            ..event(10, "CRON", 0)
        });
        let doc = b.build(7, &events);
        assert_eq!(doc.seq, 7);
        assert_eq!(doc.max_epoch, 11);
        let got: Vec<_> = doc
            .parts
            .iter()
            .map(|p| (p.epoch, p.type_.as_str(), ids(p)))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, "WEB", vec![1, 4]),
                (10, "CRON", vec![2]),
                (11, "WEB", vec![3]),
            ]
        );
    }
}
