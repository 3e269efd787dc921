//! Done notes: "the events of WAL records `seqs` that belong to `group` are stored or spooled",
//! and their byte form in the WAL. Written by the [`Aggregator`](crate::aggregate::Aggregator),
//! read by [`crate::exactly_once`] (which owns the protocol); here so that neither depends on the other.

use std::collections::BTreeMap;
use std::fmt;

use sluice_store::Counts;

/// A group of events: `(epoch, dc, type, subtype)`.
pub type GroupKey = (i64, String, String, String);

const MAGIC: &[u8; 2] = b"D1";
/// A note with a proof entry (after the three tags).
const MAGIC_PROOF: &[u8; 2] = b"D2";
/// A note with a proof entry and the batch's completeness counts (after the proof).
const MAGIC_COUNTS: &[u8; 2] = b"D3";
/// Most drop reasons one note's counts may hold.
const MAX_REASONS: u64 = 1 << 10;
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
    /// The batch's completeness counts, as its writer adds them under the token `proof` (only
    /// with a proof): a replay adds them again once per token, so a crash between the index
    /// write and the counts write loses no counts.
    pub counts: Option<Counts>,
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
    /// Bytes of the note: `D1` (`D2` with a proof, `D3` with a proof and counts), epoch (i64
    /// LE), three tags (u16 LE length + bytes), the proof entry for `D2`/`D3` (the same form);
    /// for `D3` the counts: stored, late, kernel-dropped, the number of drop reasons (varints),
    /// then each reason (a tag) and its count (varint); then the sequence numbers as runs
    /// `(start - previous end) varint, length varint`: a group's records are mostly
    /// consecutive, so a second of many payloads is a few bytes.
    pub fn encode(&self) -> Vec<u8> {
        let (epoch, dc, type_, subtype) = &self.group;
        let mut out = Vec::with_capacity(32 + dc.len() + type_.len() + subtype.len());
        let counts = self.counts.as_ref().filter(|_| self.proof.is_some());
        out.extend_from_slice(match (&self.proof, counts) {
            (Some(_), Some(_)) => MAGIC_COUNTS,
            (Some(_), None) => MAGIC_PROOF,
            (None, _) => MAGIC,
        });
        out.extend_from_slice(&epoch.to_le_bytes());
        for tag in [dc, type_, subtype].into_iter().chain(self.proof.as_ref()) {
            put_tag(&mut out, tag);
        }
        if let Some(c) = counts {
            for n in [c.stored, c.late, c.kernel_dropped, c.dropped.len() as u64] {
                sereal::varint::write(&mut out, n);
            }
            for (reason, n) in &c.dropped {
                put_tag(&mut out, reason);
                sereal::varint::write(&mut out, *n);
            }
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
        let (rest, with_proof, with_counts) = if let Some(rest) = bytes.strip_prefix(MAGIC) {
            (rest, false, false)
        } else if let Some(rest) = bytes.strip_prefix(MAGIC_PROOF) {
            (rest, true, false)
        } else if let Some(rest) = bytes.strip_prefix(MAGIC_COUNTS) {
            (rest, true, true)
        } else {
            return Err(bad("no D1/D2/D3 prefix"));
        };
        let (epoch, mut rest) = rest.split_at_checked(8).ok_or_else(|| bad("short epoch"))?;
        let epoch = i64::from_le_bytes(epoch.try_into().map_err(|_| bad("short epoch"))?);
        let mut tags = Vec::with_capacity(4);
        for _ in 0..3 + usize::from(with_proof) {
            let (tag, r) = get_tag(rest)?;
            tags.push(tag);
            rest = r;
        }
        let counts = if with_counts {
            let mut n = [0u64; 4];
            for v in &mut n {
                let (x, r) = get_varint(rest).ok_or_else(|| bad("bad count"))?;
                *v = x;
                rest = r;
            }
            let [stored, late, kernel_dropped, reasons] = n;
            if reasons > MAX_REASONS {
                return Err(bad("too many drop reasons"));
            }
            let mut dropped = BTreeMap::new();
            for _ in 0..reasons {
                let (reason, r) = get_tag(rest)?;
                let (x, r) = get_varint(r).ok_or_else(|| bad("bad drop count"))?;
                dropped.insert(reason, x);
                rest = r;
            }
            Some(Counts {
                stored,
                late,
                dropped,
                kernel_dropped,
            })
        } else {
            None
        };
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
            counts,
        })
    }
}

/// Appends `tag` as u16 LE length + bytes. Tags are validated at ingest (≤ 255 bytes); a longer
/// one is clamped rather than a panic.
fn put_tag(out: &mut Vec<u8>, tag: &str) {
    let t = &tag.as_bytes()[..tag.len().min(MAX_TAG - 1)];
    out.extend_from_slice(&(t.len() as u16).to_le_bytes());
    out.extend_from_slice(t);
}

/// The tag at the start of `bytes` ([`put_tag`]'s form) and what follows it.
fn get_tag(bytes: &[u8]) -> Result<(String, &[u8]), BadNote> {
    let bad = |why: &str| BadNote(why.to_string());
    let (len, r) = bytes
        .split_at_checked(2)
        .ok_or_else(|| bad("short tag length"))?;
    let len = u16::from_le_bytes([len[0], len[1]]) as usize;
    let (tag, r) = r.split_at_checked(len).ok_or_else(|| bad("short tag"))?;
    let tag = String::from_utf8(tag.to_vec()).map_err(|_| bad("tag is not UTF-8"))?;
    Ok((tag, r))
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
            counts: None,
        };
        let bytes = note.encode();
        assert_eq!(DoneNote::decode(&bytes).unwrap(), note);
        let proved = DoneNote {
            proof: Some("WEB::3".into()),
            ..note.clone()
        };
        assert!(proved.encode().starts_with(b"D2"));
        assert_eq!(DoneNote::decode(&proved.encode()).unwrap(), proved);
        let counted = DoneNote {
            counts: Some(Counts {
                stored: 7,
                late: 2,
                dropped: [("shed".to_string(), 3), ("malformed".to_string(), 1)].into(),
                kernel_dropped: 0,
            }),
            ..proved.clone()
        };
        assert!(counted.encode().starts_with(b"D3"));
        assert_eq!(DoneNote::decode(&counted.encode()).unwrap(), counted);
        // Every cut before the runs (inside the tags, the proof or the counts) is an error,
        // never a note with other counts.
        let head = DoneNote {
            seqs: Vec::new(),
            ..counted.clone()
        }
        .encode();
        for cut in 0..head.len() {
            let r = DoneNote::decode(&head[..cut]);
            assert!(r.is_err(), "prefix {cut}: {r:?}");
        }
        let many = DoneNote {
            group: note.group.clone(),
            seqs: (1..=100_000).collect(),
            spooled: false,
            proof: None,
            counts: None,
        };
        assert!(many.encode().len() < 40, "consecutive records are one run");
        assert_eq!(DoneNote::decode(&many.encode()).unwrap(), many);
    }

    /// A sharded aggregator once held records out of order ([105, 103]); the runs then
    /// named 105 and 106, so a replay stored 103's events twice and skipped 106's.
    #[test]
    fn records_out_of_order_are_named_as_they_are() {
        let note = DoneNote {
            group: (1, "a".into(), "b".into(), "c".into()),
            seqs: vec![105, 103, 104, 103, 7],
            spooled: false,
            proof: Some("b:c:2".into()),
            counts: None,
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
            counts: None,
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
            counts: None,
        }
        .encode();
        zero_run.extend_from_slice(&[1, 0]);
        assert!(DoneNote::decode(&zero_run).is_err());
        let mut huge = DoneNote {
            group: (1, "a".into(), "b".into(), "c".into()),
            seqs: vec![],
            spooled: false,
            proof: None,
            counts: None,
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
