//! Done notes: "the events of WAL records `seqs` that belong to `group` are stored or spooled",
//! and their byte form in the WAL. Written by the [`Aggregator`](crate::aggregate::Aggregator),
//! read by [`crate::replay`] (which owns the protocol); here so that neither depends on the other.

use std::fmt;

/// A group of events: `(epoch, dc, type, subtype)`.
pub type GroupKey = (i64, String, String, String);

const MAGIC: &[u8; 2] = b"D1";
/// A note with a proof entry (after the three tags).
const MAGIC_PROOF: &[u8; 2] = b"D2";
/// Largest tag (dc, type, subtype) a note may hold, bytes; ingest allows at most 255.
const MAX_TAG: usize = 1 << 16;
/// Most sequence numbers one note may name (a group holds at most one per payload record).
const MAX_SEQS: u64 = 1 << 24;

/// "The events of WAL records `seqs` that belong to `group` are stored or spooled."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneNote {
    /// (epoch, dc, type, subtype).
    pub group: GroupKey,
    /// WAL sequence numbers (encoded ascending without repeats, whatever their order here).
    pub seqs: Vec<u64>,
    /// The batch went to the spool (already durable: the note need not wait for a store sync).
    /// Not encoded; [`decode`](Self::decode) gives `false`.
    pub spooled: bool,
    /// The epoch-index entry (`type:subtype:chunk`) of the batch's first chunk: the note holds
    /// only if the epoch index of (epoch, dc) lists it. `None`: the note holds as it is (spooled
    /// batches, batches without chunks).
    pub proof: Option<String>,
}

/// A note that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadNote(pub String);

impl fmt::Display for BadNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad done note: {}", self.0)
    }
}

impl std::error::Error for BadNote {}

impl DoneNote {
    /// Bytes of the note: `D1` (`D2` with a proof), epoch (i64 LE), three tags (u16 LE length +
    /// bytes), the proof entry for `D2` (the same form), then the sequence numbers as runs `(start - previous end) varint, length varint`: a group's records
    /// are mostly consecutive, so a second of many payloads is a few bytes.
    pub fn encode(&self) -> Vec<u8> {
        let (epoch, dc, type_, subtype) = &self.group;
        let mut out = Vec::with_capacity(16 + dc.len() + type_.len() + subtype.len());
        out.extend_from_slice(if self.proof.is_some() {
            MAGIC_PROOF
        } else {
            MAGIC
        });
        out.extend_from_slice(&epoch.to_le_bytes());
        for tag in [dc, type_, subtype].into_iter().chain(self.proof.as_ref()) {
            // Tags are validated at ingest (≤ 255 bytes); clamp rather than panic.
            let t = &tag.as_bytes()[..tag.len().min(MAX_TAG - 1)];
            out.extend_from_slice(&(t.len() as u16).to_le_bytes());
            out.extend_from_slice(t);
        }
        // Runs are gaps from the previous run's end: they need ascending numbers. A list out of
        // order (never made by the aggregator, see `Group::hold`) is sorted first rather than
        // written as runs that name other records.
        let sorted;
        let seqs: &[u64] = if self.seqs.windows(2).all(|w| w[0] < w[1]) {
            &self.seqs
        } else {
            let mut s = self.seqs.clone();
            s.sort_unstable();
            s.dedup();
            sorted = s;
            &sorted
        };
        let mut prev_end = 0u64;
        let mut i = 0;
        while i < seqs.len() {
            let start = seqs[i];
            let mut len = 1u64;
            while i + (len as usize) < seqs.len() && seqs[i + len as usize] == start + len {
                len += 1;
            }
            sereal::varint::write(&mut out, start.saturating_sub(prev_end));
            sereal::varint::write(&mut out, len);
            prev_end = start + len;
            i += len as usize;
        }
        out
    }

    /// Parses [`encode`](Self::encode)'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<DoneNote, BadNote> {
        let bad = |why: &str| BadNote(why.to_string());
        let (rest, with_proof) = match (bytes.strip_prefix(MAGIC), bytes.strip_prefix(MAGIC_PROOF))
        {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => return Err(bad("no D1/D2 prefix")),
        };
        let (epoch, mut rest) = rest.split_at_checked(8).ok_or_else(|| bad("short epoch"))?;
        let epoch = i64::from_le_bytes(epoch.try_into().map_err(|_| bad("short epoch"))?);
        let mut tags = Vec::with_capacity(4);
        for _ in 0..3 + usize::from(with_proof) {
            let (len, r) = rest
                .split_at_checked(2)
                .ok_or_else(|| bad("short tag length"))?;
            let len = u16::from_le_bytes([len[0], len[1]]) as usize;
            let (tag, r) = r.split_at_checked(len).ok_or_else(|| bad("short tag"))?;
            tags.push(String::from_utf8(tag.to_vec()).map_err(|_| bad("tag is not UTF-8"))?);
            rest = r;
        }
        let mut seqs = Vec::new();
        let mut prev_end = 0u64;
        while !rest.is_empty() {
            let (gap, r) = get_varint(rest).ok_or_else(|| bad("bad run start"))?;
            let (len, r) = get_varint(r).ok_or_else(|| bad("bad run length"))?;
            let start = prev_end
                .checked_add(gap)
                .ok_or_else(|| bad("run start overflows"))?;
            let end = start
                .checked_add(len)
                .ok_or_else(|| bad("run end overflows"))?;
            if len == 0 || seqs.len() as u64 + len > MAX_SEQS {
                return Err(bad("bad run length"));
            }
            seqs.extend(start..end);
            prev_end = end;
            rest = r;
        }
        let proof = if with_proof { tags.pop() } else { None };
        let subtype = tags.pop().unwrap_or_default();
        let type_ = tags.pop().unwrap_or_default();
        let dc = tags.pop().unwrap_or_default();
        Ok(DoneNote {
            group: (epoch, dc, type_, subtype),
            seqs,
            spooled: false,
            proof,
        })
    }
}

/// The varint at the start of `bytes` (the codec's, see `sereal::varint`) and what follows it.
fn get_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut pos = 0;
    let v = sereal::varint::read(bytes, &mut pos).ok()?;
    Some((v, &bytes[pos..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_round_trip_and_compress_runs() {
        let note = DoneNote {
            group: (1_700_000_000, "ams1".into(), "WEB".into(), "".into()),
            seqs: vec![5, 6, 7, 8, 20, 21, 1000],
            spooled: false,
            proof: None,
        };
        let bytes = note.encode();
        assert_eq!(DoneNote::decode(&bytes).unwrap(), note);
        let proved = DoneNote {
            proof: Some("WEB::3".into()),
            ..note.clone()
        };
        assert!(proved.encode().starts_with(b"D2"));
        assert_eq!(DoneNote::decode(&proved.encode()).unwrap(), proved);
        let many = DoneNote {
            group: note.group.clone(),
            seqs: (1..=100_000).collect(),
            spooled: false,
            proof: None,
        };
        assert!(many.encode().len() < 40, "consecutive records are one run");
        assert_eq!(DoneNote::decode(&many.encode()).unwrap(), many);
    }

    /// Issue 21: a sharded aggregator held records out of order ([105, 103]); the runs then
    /// named 105 and 106, so a replay stored 103's events twice and skipped 106's.
    #[test]
    fn records_out_of_order_are_named_as_they_are() {
        let note = DoneNote {
            group: (1, "a".into(), "b".into(), "c".into()),
            seqs: vec![105, 103, 104, 103, 7],
            spooled: false,
            proof: Some("b:c:2".into()),
        };
        let back = DoneNote::decode(&note.encode()).unwrap();
        assert_eq!(back.seqs, vec![7, 103, 104, 105]);
    }

    #[test]
    fn bad_notes_are_errors() {
        let bytes = DoneNote {
            group: (1, "a".into(), "b".into(), "c".into()),
            seqs: vec![3],
            spooled: false,
            proof: None,
        }
        .encode();
        for cut in 0..bytes.len() - 1 {
            // Every strict prefix that cuts a field is refused (cuts between runs are valid).
            let r = DoneNote::decode(&bytes[..cut]);
            assert!(r.is_err() || cut == bytes.len() - 2, "prefix {cut}: {r:?}");
        }
        assert!(DoneNote::decode(b"D1\x01\x02").is_err());
        let mut zero_run = DoneNote {
            group: (1, "a".into(), "b".into(), "c".into()),
            seqs: vec![],
            spooled: false,
            proof: None,
        }
        .encode();
        zero_run.extend_from_slice(&[1, 0]);
        assert!(DoneNote::decode(&zero_run).is_err());
        let mut huge = DoneNote {
            group: (1, "a".into(), "b".into(), "c".into()),
            seqs: vec![],
            spooled: false,
            proof: None,
        }
        .encode();
        huge.push(0);
        sereal::varint::write(&mut huge, 1 << 41);
        assert!(
            DoneNote::decode(&huge).is_err(),
            "a run longer than any group is refused, not allocated"
        );
    }
}
