//! The replay at start (step 5 of the protocol in [`super`]): WAL payload records after the
//! checkpoint go back to the aggregators, without the events that done notes and spools name.

use std::collections::{HashMap, HashSet};

use sluice_store::Counts;

use crate::aggregate::Aggregator;
use crate::ingest::{Ingestor, ParsedEvent};
use crate::note::{DoneNote, GroupKey};
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
    /// Batches held in the spools, honoured like notes (a crash between a spool's fsync and the
    /// batch's note).
    pub spooled: u64,
    /// Proven notes whose counts were added again (at most once per token: a no-op for a
    /// batch whose counts were written).
    pub counts_restored: u64,
    /// Counts that could not be added again (the store failed): those batches' completeness
    /// counts may be missing.
    pub counts_errors: Vec<String>,
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
    r.spooled_and_counts(aggregators);
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
    r.spooled_and_counts(aggregators);
    log.for_each(|rec| r.payload(&rec, ingestor, aggregators, &route, &aggregator_now))?;
    Ok(r.report)
}

/// The state of one replay: which groups of which records the notes name.
#[derive(Default)]
struct Replayer {
    report: ReplayReport,
    done: HashMap<u64, HashSet<GroupKey>>,
    indexes: HashMap<(i64, String), Option<HashSet<String>>>,
    /// (group, token, counts) of proven notes that carry counts.
    counts: Vec<(GroupKey, String, Counts)>,
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
                for s in &note.seqs {
                    self.done.entry(*s).or_default().insert(note.group.clone());
                }
                if let (Some(proof), Some(counts)) = (note.proof, note.counts) {
                    if !counts.is_zero() {
                        self.counts.push((note.group, proof, counts));
                    }
                }
            }
            Err(e) => report.bad_notes.push(format!("record {}: {e}", r.seq)),
        }
    }

    /// After the notes: the spools' batches are done facts too, and the counts of proven notes
    /// are added again (once per token).
    fn spooled_and_counts(&mut self, aggregators: &[Aggregator]) {
        for agg in aggregators {
            for (group, seqs) in agg.spooled_groups() {
                self.report.spooled += 1;
                for s in seqs {
                    self.done.entry(s).or_default().insert(group.clone());
                }
            }
        }
        let counts = std::mem::take(&mut self.counts);
        if counts.is_empty() {
            return;
        }
        let items: Vec<(&GroupKey, &str, &Counts)> =
            counts.iter().map(|(g, t, c)| (g, t.as_str(), c)).collect();
        for r in aggregators[0].restore_counts(&items) {
            match r {
                Ok(()) => self.report.counts_restored += 1,
                Err(e) => self.report.counts_errors.push(e.to_string()),
            }
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
