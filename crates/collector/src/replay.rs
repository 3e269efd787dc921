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

use crate::aggregate::Aggregator;
use crate::ingest::{Ingestor, ParsedEvent};
pub use crate::note::{BadNote, DoneNote, GroupKey};
use crate::wal::{RecordKind, ReplayLog, WalError, WalRecord};

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
    let aggregators = std::slice::from_mut(aggregator);
    records
        .iter()
        .for_each(|rec| r.payload(rec, ingestor, aggregators, &|_| 0, &aggregator_now));
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
    replay_log_routed(
        log,
        ingestor,
        std::slice::from_mut(aggregator),
        |_| 0,
        aggregator_now,
    )
}

/// [`replay_log`] into several aggregators (a sharded server): each replayed event goes to
/// `aggregators[route(event)]` (`route` must return an index below `aggregators.len()`, which
/// must not be empty); every aggregator must write to the same store (the first one looks up
/// the notes' proofs).
pub fn replay_log_routed(
    log: &ReplayLog,
    ingestor: &mut Ingestor,
    aggregators: &mut [Aggregator],
    route: impl Fn(&ParsedEvent) -> usize,
    aggregator_now: impl Fn(i64) -> i64,
) -> Result<ReplayReport, WalError> {
    let mut r = Replayer::default();
    log.for_each(|rec| r.note(&rec, &aggregators[0]))?;
    log.for_each(|rec| r.payload(&rec, ingestor, aggregators, &route, &aggregator_now))?;
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
        aggregators: &mut [Aggregator],
        route: &impl Fn(&ParsedEvent) -> usize,
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
        let now = aggregator_now(r.now);
        if aggregators.len() == 1 {
            aggregators[0].add_logged(events, now, r.seq);
            return;
        }
        let mut parts: Vec<Vec<ParsedEvent>> = aggregators.iter().map(|_| Vec::new()).collect();
        for e in events {
            parts[route(&e)].push(e);
        }
        for (agg, part) in aggregators.iter_mut().zip(parts) {
            if !part.is_empty() {
                agg.add_logged(part, now, r.seq);
            }
        }
    }
}
