//! Exactly-once replay of the write-ahead log: *done notes* say which groups of which payloads
//! already left memory (stored, or spooled to disk), so replaying a payload after a crash
//! re-adds only its events that are nowhere else.
//!
//! Why: one payload often holds events of several (epoch, dc, type, subtype) groups, flushed at
//! different times (a late event's group is stored at the next tick, the current second's a
//! second later). The WAL can be checkpointed past a payload only once all of its groups are
//! stored; until then a crash replays the whole payload. Without notes its already stored groups
//! would be stored twice, and a group spooled while the store was down would come back twice
//! (from the spool and from the WAL).
//!
//! The protocol, driven by the server's pipeline:
//! 1. A stored batch: with a note log ([`Aggregator::set_note_log`]) the [`Aggregator`] appends
//!    the batch's [`DoneNote`] to the WAL *before* it writes the batch's epoch-index entries,
//!    naming the first of them as its *proof* ([`DoneNote::proof`]). Without a note log the note
//!    is recorded once the batch is written and the caller appends it
//!    ([`Aggregator::take_done`]). A spooled batch: its note (no proof) is recorded when the
//!    batch is pushed (fsynced) to the spool and the caller appends it at once.
//! 2. The caller syncs the WAL (before the store, so a note is never less durable than the index
//!    entries it speaks for), then checkpoints.
//! 3. At start, [`replay`] feeds every payload record after the checkpoint to the ingestor and
//!    drops the events whose (record, group) a note names — a note with a proof only if the
//!    store's epoch index lists the proof entry (the index entries of one batch are written in
//!    one store call, and a reader sees only indexed chunks). A note whose proof is missing (a
//!    crash between the note and the index) skips nothing: its events are replayed and stored
//!    once ([`ReplayReport::unproven`]).
//!
//! Why proofs (issue 8, finding 3): notes used to be appended after the store write *and* the
//! store fsync. Under load that fsync takes tens of milliseconds, and right after a restart the
//! first flush writes every replayed group at once: a SIGKILL in between replayed those groups
//! again under new chunk numbers (1,534 events twice in 24 kills of
//! `crates/server/tests/crashes.rs`, all of them late events). Writing the note first and
//! proving it by the index closes that window for any kill timing: an indexed batch always has
//! its note in the WAL, and a note without its index entry is ignored.
//!
//! What remains: a batch's completeness counts are added just after its index entries (two
//! appends to the store's metadata log, microseconds apart); a crash between them loses that
//! batch's counts (its events are stored once). A spooled batch's note follows the spool's fsync:
//! a crash between the two (milliseconds, only while the store is failing) replays that batch
//! once more. A note that does not parse is reported and skips nothing (at least once).
//!
//! The caller must not go on storing batches while notes cannot be logged (the server stops
//! flushing while the WAL fails, e.g. on a full disk). An empty note is a probe (the server's,
//! while the WAL fails) and names nothing.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::aggregate::{Aggregator, GroupKey};
use crate::ingest::Ingestor;
use crate::wal::{RecordKind, ReplayLog, WalError, WalRecord};

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
    /// WAL sequence numbers, ascending.
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
        let mut prev_end = 0u64;
        let mut i = 0;
        while i < self.seqs.len() {
            let start = self.seqs[i];
            let mut len = 1u64;
            while i + (len as usize) < self.seqs.len() && self.seqs[i + len as usize] == start + len
            {
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

/// What [`replay`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// Payload records replayed.
    pub records: u64,
    /// Events given back to the aggregator.
    pub events: u64,
    /// Events skipped because a done note says they are stored or spooled.
    pub skipped: u64,
    /// Notes read.
    pub notes: u64,
    /// Notes that did not parse, or whose proof could not be looked up (their events are
    /// replayed: at least once, never lost).
    pub bad_notes: Vec<String>,
    /// Notes whose proof entry is not in the epoch index (a crash between the note and the
    /// index write): they skip nothing.
    pub unproven: u64,
}

/// Replays WAL records (as returned by [`Wal::open`](crate::wal::Wal::open)) into `aggregator`
/// through `ingestor`, skipping the events that done notes name. `aggregator_now` maps a
/// record's arrival second to the `now` given to [`Aggregator::add_logged`] (the identity, or
/// the server's clock set back by its grace period). See the [module docs](self).
pub fn replay(
    records: &[WalRecord],
    ingestor: &mut Ingestor,
    aggregator: &mut Aggregator,
    aggregator_now: impl Fn(i64) -> i64,
) -> ReplayReport {
    let mut r = Replayer::default();
    records.iter().for_each(|rec| r.note(rec, aggregator));
    records
        .iter()
        .for_each(|rec| r.payload(rec, ingestor, aggregator, &aggregator_now));
    r.report
}

/// [`replay`] from a [`ReplayLog`] (what a server uses): two passes over the log, one segment in
/// memory at a time — the notes first (they follow the records they name), then the payloads.
pub fn replay_log(
    log: &ReplayLog,
    ingestor: &mut Ingestor,
    aggregator: &mut Aggregator,
    aggregator_now: impl Fn(i64) -> i64,
) -> Result<ReplayReport, WalError> {
    let mut r = Replayer::default();
    log.for_each(|rec| r.note(&rec, aggregator))?;
    log.for_each(|rec| r.payload(&rec, ingestor, aggregator, &aggregator_now))?;
    Ok(r.report)
}

/// The state of one replay: which groups of which records the notes name.
#[derive(Default)]
struct Replayer {
    report: ReplayReport,
    done: HashMap<u64, HashSet<GroupKey>>,
    indexes: HashMap<(i64, String), Option<HashSet<String>>>,
}

impl Replayer {
    fn note(&mut self, r: &WalRecord, aggregator: &Aggregator) {
        // An empty note is a probe the server writes while the WAL fails: it names nothing.
        if r.kind != RecordKind::Note || r.payload.is_empty() {
            return;
        }
        let report = &mut self.report;
        report.notes += 1;
        match DoneNote::decode(&r.payload) {
            Ok(note) => {
                if let Some(proof) = &note.proof {
                    let (epoch, dc) = (note.group.0, note.group.1.clone());
                    let index =
                        self.indexes
                            .entry((epoch, dc.clone()))
                            .or_insert_with(|| match aggregator.epoch_index_entries(epoch, &dc) {
                                Ok(entries) => Some(entries.into_iter().collect()),
                                Err(e) => {
                                    report.bad_notes.push(format!("record {}: {e}", r.seq));
                                    None
                                }
                            });
                    if !index
                        .as_ref()
                        .is_some_and(|entries| entries.contains(proof))
                    {
                        report.unproven += u64::from(index.is_some());
                        return;
                    }
                }
                for s in note.seqs {
                    self.done.entry(s).or_default().insert(note.group.clone());
                }
            }
            Err(e) => report.bad_notes.push(format!("record {}: {e}", r.seq)),
        }
    }

    fn payload(
        &mut self,
        r: &WalRecord,
        ingestor: &mut Ingestor,
        aggregator: &mut Aggregator,
        aggregator_now: &impl Fn(i64) -> i64,
    ) {
        if r.kind != RecordKind::Payload {
            return;
        }
        self.report.records += 1;
        let mut events = ingestor.ingest(&r.payload, r.now).events;
        if let Some(groups) = self.done.get(&r.seq) {
            let before = events.len();
            // The key is built per event only for records that have notes (rare: crash replay).
            events.retain(|e| {
                !groups.contains(&(e.epoch, e.dc.clone(), e.type_.clone(), e.subtype.clone()))
            });
            self.report.skipped += (before - events.len()) as u64;
        }
        self.report.events += events.len() as u64;
        aggregator.add_logged(events, aggregator_now(r.now), r.seq);
    }
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
