//! Live spans: the WAL records whose events a tail delivered from memory, so that the chunks
//! that later hold them are not delivered again.
//!
//! A span `(collector, from, to]` says: every WAL record of that collector's server with a
//! sequence number in `from + 1 ..= to` was given to this tail live, whole (the live hub hands
//! a tail every record after its start, in order; the tail's filters chose among the events).
//! A stored chunk names the record of each of its events (its origins, [`sluice_blob::Origins`]),
//! so an event of a chunk of that collector is skipped exactly when its record is in a span.
//!
//! `max_epoch` is the latest epoch of any event of the span's records: once the cursor's
//! watermark passes it, no chunk holding those events is ever looked at again, and the span is
//! forgotten. So a cursor holds spans for about the late window (60 s), longer only for events
//! dated ahead (ingest allows at most `max_future_secs`, 300 s by default).
//!
//! Token form (inside the cursor's `t2.` token): one line per span,
//! `<collector>|<from>|<to>|<max_epoch - watermark>`, lines sorted by (collector, from), spans of
//! one collector not overlapping, `from < to`; `<collector>` is empty for plain chunk ids.

use sluice_blob::Origins;

/// One run of WAL records delivered live: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    /// The chunk ids' collector (`""`: plain ids).
    pub collector: String,
    /// Records after this one…
    pub from: u64,
    /// …up to this one (inclusive).
    pub to: u64,
    /// The latest epoch of the records' events.
    pub max_epoch: i64,
}

/// What a chunk of a collector with live spans comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No event of it was delivered live: read it as it is.
    Keep,
    /// Every event of it was delivered live: record it as delivered, read nothing.
    SkipAll,
    /// Some events were delivered live: read only the elements marked `true`.
    Partial(Vec<bool>),
    /// It holds a record the open live subscription has not handed over yet: look again at
    /// the next poll (reading it now could deliver an event twice).
    Defer,
}

/// The spans of one cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LiveSpans {
    spans: Vec<Span>,
}

impl LiveSpans {
    /// No spans.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Whether any span is of `collector`.
    pub fn has_collector(&self, collector: &str) -> bool {
        self.spans.iter().any(|s| s.collector == collector)
    }

    /// Records `(from, to]` of `collector` as delivered live, their events' latest epoch
    /// `max_epoch`: extends the span that ends at `from`, or starts a new one.
    pub fn record(&mut self, collector: &str, from: u64, to: u64, max_epoch: i64) {
        if to <= from {
            return;
        }
        if let Some(s) = self
            .spans
            .iter_mut()
            .find(|s| s.collector == collector && s.to == from)
        {
            s.to = to;
            s.max_epoch = s.max_epoch.max(max_epoch);
            return;
        }
        self.spans.push(Span {
            collector: collector.to_owned(),
            from,
            to,
            max_epoch,
        });
        self.spans
            .sort_by(|a, b| (&a.collector, a.from).cmp(&(&b.collector, b.from)));
    }

    /// Forgets the spans of `collector` that end after record `last` (see `Tail::go_live`).
    pub fn forget_beyond(&mut self, collector: &str, last: u64) {
        self.spans
            .retain(|s| s.collector != collector || s.to <= last);
    }

    /// Forgets the spans whose events all lie below the watermark `w`.
    pub fn prune(&mut self, w: i64) {
        self.spans.retain(|s| s.max_epoch >= w);
    }

    /// Whether record `seq` of `collector` was delivered live.
    pub fn covers(&self, collector: &str, seq: u64) -> bool {
        self.spans
            .iter()
            .any(|s| s.collector == collector && s.from < seq && seq <= s.to)
    }

    /// What a chunk of `collector` with `origins` comes to; `open`: the last record handed to
    /// the open live subscription of this collector, if one is open.
    pub fn verdict(&self, collector: &str, origins: &Origins, open: Option<u64>) -> Verdict {
        let mut keep = Vec::new();
        let (mut kept, mut skipped) = (0usize, 0usize);
        for seq in origins.seqs() {
            // Seq 0: the event had no WAL record, so it was never live.
            if seq != 0 && open.is_some_and(|to| seq > to) {
                return Verdict::Defer;
            }
            let live = seq != 0 && self.covers(collector, seq);
            keep.push(!live);
            if live {
                skipped += 1;
            } else {
                kept += 1;
            }
        }
        match (kept, skipped) {
            (_, 0) => Verdict::Keep,
            (0, _) => Verdict::SkipAll,
            _ => Verdict::Partial(keep),
        }
    }

    /// The token lines (see the [module docs](self)), relative to the watermark `w`; spans below
    /// `w` are left out.
    pub fn to_text(&self, w: i64) -> String {
        let mut out = String::new();
        for s in self.spans.iter().filter(|s| s.max_epoch >= w) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "{}|{}|{}|{}",
                s.collector,
                s.from,
                s.to,
                s.max_epoch - w
            ));
        }
        out
    }

    /// Parses [`to_text`](Self::to_text)'s lines (only the canonical form).
    pub fn parse(text: &str, w: i64) -> Result<LiveSpans, String> {
        let mut spans = LiveSpans::default();
        if text.is_empty() {
            return Ok(spans);
        }
        for (n, line) in text.split('\n').enumerate() {
            let bad = |why: &str| format!("span line {}: {why} in {line:?}", n + 1);
            let fields: Vec<&str> = line.split('|').collect();
            let [collector, from, to, off] = fields[..] else {
                return Err(bad("expected <collector>|<from>|<to>|<epoch offset>"));
            };
            if !collector.is_empty() {
                sluice_blob::ChunkId::collector(collector, 0)
                    .map_err(|e| bad(&format!("bad collector: {e}")))?;
            }
            let num = |s: &str| -> Option<u64> {
                // Canonical decimal: digits, no leading zero.
                (!s.is_empty()
                    && s.bytes().all(|b| b.is_ascii_digit())
                    && (s == "0" || !s.starts_with('0')))
                .then(|| s.parse().ok())
                .flatten()
            };
            let (Some(from), Some(to), Some(off)) = (num(from), num(to), num(off)) else {
                return Err(bad("bad number"));
            };
            if from >= to {
                return Err(bad("empty span (from ≥ to)"));
            }
            let max_epoch = i64::try_from(off)
                .ok()
                .and_then(|o| w.checked_add(o))
                .ok_or_else(|| bad("epoch offset out of range"))?;
            if let Some(prev) = spans.spans.last() {
                let order = (prev.collector.as_str(), prev.from).cmp(&(collector, from));
                if order != std::cmp::Ordering::Less
                    || (prev.collector == collector && prev.to >= from)
                {
                    return Err(bad("spans out of order, overlapping or to be joined"));
                }
            }
            spans.spans.push(Span {
                collector: collector.to_owned(),
                from,
                to,
                max_epoch,
            });
        }
        Ok(spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(runs: &[(u64, u32)]) -> Origins {
        Origins::from_runs(runs.to_vec()).expect("valid runs")
    }

    #[test]
    fn spans_join_prune_and_round_trip() {
        let mut s = LiveSpans::default();
        s.record("", 10, 12, 100);
        s.record("", 12, 15, 103); // joins
        s.record("c2", 3, 4, 90);
        s.record("", 20, 21, 99);
        assert_eq!(s.spans.len(), 3);
        assert!(s.covers("", 11) && s.covers("", 15) && !s.covers("", 10));
        assert!(!s.covers("", 16) && s.covers("", 21) && !s.covers("c2", 11));
        let text = s.to_text(90);
        assert_eq!(text, "|10|15|13\n|20|21|9\nc2|3|4|0");
        assert_eq!(LiveSpans::parse(&text, 90).unwrap(), s);
        let mut wiped = s.clone();
        wiped.forget_beyond("", 16);
        assert_eq!(wiped.to_text(90), "|10|15|13\nc2|3|4|0");
        s.prune(100);
        assert_eq!(s.to_text(100), "|10|15|3");
        for bad in [
            "|10|10|0",
            "|10|9|0",
            "|1|5|0\n|3|9|0",
            "|1|5|0\n|5|9|0",
            "b|1|2|0\na|1|2|0",
            "|01|2|0",
            "|1|2",
            "bad id!|1|2|0",
            "|1|2|-1",
        ] {
            assert!(LiveSpans::parse(bad, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn verdicts() {
        let mut s = LiveSpans::default();
        s.record("", 10, 20, 0);
        assert_eq!(
            s.verdict("", &origins(&[(11, 2), (20, 1)]), None),
            Verdict::SkipAll
        );
        assert_eq!(
            s.verdict("", &origins(&[(5, 1), (0, 2)]), None),
            Verdict::Keep
        );
        assert_eq!(
            s.verdict("", &origins(&[(9, 1), (10, 1), (11, 2), (21, 1)]), None),
            Verdict::Partial(vec![true, true, false, false, true])
        );
        assert_eq!(
            s.verdict("other", &origins(&[(11, 1)]), None),
            Verdict::Keep
        );
        // A record after what the open subscription handed over: wait for it.
        assert_eq!(
            s.verdict("", &origins(&[(11, 1), (21, 1)]), Some(20)),
            Verdict::Defer
        );
        assert_eq!(
            s.verdict("", &origins(&[(11, 1), (0, 1)]), Some(20)),
            Verdict::Partial(vec![false, true])
        );
    }
}
