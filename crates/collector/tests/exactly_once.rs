//! The exactly-once protocol driven without a server: two "shards" (an aggregator and
//! an [`ExactlyOnce`] each) over one WAL and one store, payloads of four groups with late events,
//! each shard's events of another shard's payload delivered one payload later (so groups get
//! their records out of order, as a sharded server routes them), flushes, settles and
//! checkpoints over the floor of both shards. For every crash point the collector reaches
//! (`sluice_collector::failpoint`), the run crashes there (twice: once in the first run, once
//! after the replay), restarts from what a crash leaves (the WAL, the spools, the store) and
//! must end with every acknowledged event stored once and the completeness counts equal to
//! what is stored. The spool points run with the store failing for a stretch.
//!
//! The server's own points (ingest, route, ack, publish, replay) are crashed in a real process
//! by `crates/cli/tests/failpoints.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_collector::aggregate::{Aggregator, AggregatorConfig, SpoolConfig};
use sluice_collector::exactly_once::{replay_log_routed, ExactlyOnce};
use sluice_collector::failpoint::{self, Crash};
use sluice_collector::wal::{FsyncPolicy, Wal, WalConfig};
use sluice_collector::{IngestConfig, Ingestor, ParsedEvent};
use sluice_store::{Faults, FaultyStore, InMemoryStore, Store};

mod common;
use common::{for_each_stored, E0};

const SHARDS: usize = 2;
/// Events per payload: the last two late (dated two seconds back).
const BATCH: u64 = 10;
const GROUPS: [&str; 4] = ["A", "B", "C", "D"];
/// Payloads per simulated second.
const PER_SECOND: u64 = 4;

fn owner(type_: &str) -> usize {
    GROUPS.iter().position(|g| *g == type_).unwrap_or(0) % SHARDS
}

struct Shard {
    agg: Aggregator,
    eo: ExactlyOnce,
    /// The oldest record this shard published as pending (`u64::MAX`: none).
    published: u64,
}

/// One run of the "server": what a crash throws away.
struct Run {
    wal: Arc<Wal>,
    shards: Vec<Shard>,
    ing: Ingestor,
    /// Events parsed by one shard for another, delivered one payload later.
    in_flight: VecDeque<(usize, u64, Vec<ParsedEvent>)>,
}

/// What outlives runs: the directories, the store, what was acknowledged.
struct World {
    dir: PathBuf,
    store: Arc<FaultyStore<InMemoryStore>>,
    faults: Faults,
    /// Payload numbers whose WAL record was durable (acknowledged).
    acked: Vec<u64>,
    next_payload: u64,
    /// Store writes fail for payloads in this range (spool points).
    outage: std::ops::Range<u64>,
}

fn wal_cfg() -> WalConfig {
    WalConfig {
        fsync: FsyncPolicy::Never,
        ..WalConfig::default()
    }
}

fn agg_cfg(dir: &Path, shard: usize) -> AggregatorConfig {
    AggregatorConfig {
        grace_secs: 1,
        spool: Some(SpoolConfig {
            memory_batches: 1,
            ..SpoolConfig::new(dir.join(format!("spool-{shard}")))
        }),
        ..AggregatorConfig::default()
    }
}

fn payload(n: u64) -> (Vec<u8>, i64) {
    let now = E0 + (n / PER_SECOND) as i64;
    let body = (0..BATCH)
        .map(|i| {
            let epoch = if i >= BATCH - 2 { now - 2 } else { now };
            let type_ = GROUPS[((n + i) % GROUPS.len() as u64) as usize];
            format!(
                "{{\"epoch\":{epoch},\"type\":\"{type_}\",\"id\":{}}}\n",
                n * BATCH + i
            )
        })
        .collect::<String>();
    (body.into_bytes(), now)
}

impl World {
    fn new(name: &str, outage: std::ops::Range<u64>) -> World {
        let dir =
            std::env::temp_dir().join(format!("sluice-exactly-once-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (store, faults) = FaultyStore::new(InMemoryStore::new());
        World {
            dir,
            store: Arc::new(store),
            faults,
            acked: Vec::new(),
            next_payload: 0,
            outage,
        }
    }

    /// A start: the WAL opened and replayed into fresh aggregators over the spools.
    fn start(&self) -> Run {
        // The store is back at each start (its outage was the last run's).
        self.faults.fail_writes(false);
        let (wal, log, _) = Wal::open_replay(self.dir.join("wal"), wal_cfg(), false).unwrap();
        let wal = Arc::new(wal);
        let store: Arc<dyn Store> = self.store.clone();
        let mut aggs: Vec<Aggregator> = (0..SHARDS)
            .map(|i| Aggregator::new(agg_cfg(&self.dir, i), store.clone()).unwrap())
            .collect();
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let report = replay_log_routed(&log, &mut ing, &mut aggs, |e| owner(&e.type_), |n| n)
            .expect("replay");
        assert!(report.bad_notes.is_empty(), "{:?}", report.bad_notes);
        assert!(
            report.counts_errors.is_empty(),
            "{:?}",
            report.counts_errors
        );
        let shards = aggs
            .into_iter()
            .map(|mut agg| {
                let eo = ExactlyOnce::new(wal.clone());
                agg.set_note_log(eo.note_log(|_| {}));
                let published = agg.min_pending_seq().unwrap_or(u64::MAX);
                Shard { agg, eo, published }
            })
            .collect();
        Run {
            wal,
            shards,
            ing,
            in_flight: VecDeque::new(),
        }
    }

    /// `count` more payloads: each logged, acknowledged once durable, routed; every simulated
    /// second both shards flush, settle and checkpoint.
    fn drive(&mut self, run: &mut Run, count: u64) {
        for _ in 0..count {
            let n = self.next_payload;
            self.next_payload += 1;
            self.faults.fail_writes(self.outage.contains(&n));
            let (body, now) = payload(n);
            let events = run.ing.ingest(&body, now).events;
            let seq = run.wal.append(&body, now).unwrap();
            run.wal.wait_durable(seq).unwrap();
            self.acked.push(n);
            let parser = (n % SHARDS as u64) as usize;
            let mut parts: Vec<Vec<ParsedEvent>> = (0..SHARDS).map(|_| Vec::new()).collect();
            for e in events {
                parts[owner(&e.type_)].push(e);
            }
            // Last payload's routed events arrive after this payload's own.
            let late_delivery: Vec<_> = run.in_flight.drain(..).collect();
            for (i, part) in parts.into_iter().enumerate() {
                if part.is_empty() {
                    continue;
                }
                if i == parser {
                    add(&mut run.shards[i], part, now, seq);
                } else {
                    run.in_flight.push_back((i, seq, part));
                }
            }
            for (i, s, part) in late_delivery {
                add(&mut run.shards[i], part, now, s);
            }
            if (n + 1).is_multiple_of(PER_SECOND) {
                for i in 0..SHARDS {
                    flush(run, &*self.store, i, now, false);
                }
            }
        }
    }

    /// Everything delivered and flushed (a clean stop).
    fn finish(&mut self, run: &mut Run) {
        self.faults.fail_writes(false);
        let now = E0 + (self.next_payload / PER_SECOND) as i64 + 10;
        for (i, s, part) in run.in_flight.drain(..).collect::<Vec<_>>() {
            add(&mut run.shards[i], part, now, s);
        }
        for _ in 0..3 {
            for i in 0..SHARDS {
                flush(run, &*self.store, i, now, true);
            }
        }
        for sh in &run.shards {
            assert_eq!(sh.agg.pending_events(), 0);
            assert_eq!(sh.agg.pending_batches(), 0);
        }
    }

    /// Every acknowledged id once, nothing else, and counts equal to what is stored.
    fn check(&self, what: &str) {
        let store = self.store.inner();
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        let mut stored_by_type: BTreeMap<String, u64> = BTreeMap::new();
        let to = E0 + (self.next_payload / PER_SECOND) as i64 + 20;
        for_each_stored(store, E0 - 10, to, |_, _, _, v| {
            let j = sereal::json::to_json_value(v);
            *seen.entry(j["id"].as_u64().unwrap()).or_default() += 1;
            *stored_by_type
                .entry(j["type"].as_str().unwrap().to_string())
                .or_default() += 1;
        });
        let expected: Vec<u64> = self
            .acked
            .iter()
            .flat_map(|n| n * BATCH..(n + 1) * BATCH)
            .collect();
        let lost: Vec<u64> = expected
            .iter()
            .filter(|id| !seen.contains_key(id))
            .copied()
            .collect();
        let twice: Vec<(&u64, &u32)> = seen.iter().filter(|(_, c)| **c > 1).collect();
        assert!(lost.is_empty(), "{what}: lost {lost:?}");
        assert!(twice.is_empty(), "{what}: twice {twice:?}");
        assert_eq!(seen.len(), expected.len(), "{what}: events nobody sent");
        let mut counted: BTreeMap<String, u64> = BTreeMap::new();
        for (epoch, dc) in store.list_epochs(None, E0 - 10, to).unwrap() {
            for ((type_, _), c) in store.get_counts(epoch, &dc).unwrap() {
                *counted.entry(type_).or_default() += c.stored;
            }
        }
        assert_eq!(counted, stored_by_type, "{what}: completeness counts");
    }
}

fn add(shard: &mut Shard, events: Vec<ParsedEvent>, now: i64, seq: u64) {
    shard.agg.add_logged(events, now, seq);
    shard.published = shard.published.min(seq);
}

/// The oldest record some shard still needs: in flight, or published as pending.
fn floor(run: &Run) -> u64 {
    run.in_flight
        .iter()
        .map(|(_, s, _)| *s)
        .chain(run.shards.iter().map(|s| s.published))
        .min()
        .unwrap_or(u64::MAX)
}

/// One shard's flush, settle, publish and checkpoint, as the server's pipeline does them.
fn flush(run: &mut Run, store: &dyn Store, i: usize, now: i64, all: bool) {
    let before = floor(run);
    let sh = &mut run.shards[i];
    let report = if all {
        sh.agg.flush_all(now)
    } else {
        sh.agg.flush_due(now)
    };
    let due = sh.eo.checkpoint_upto(&sh.agg, before).is_some();
    let settled = sh.eo.settle(&mut sh.agg, store, report.blobs > 0, due);
    if !settled.durable {
        return;
    }
    sh.published = sh.agg.min_pending_seq().unwrap_or(u64::MAX);
    let after = floor(run);
    let sh = &run.shards[i];
    if let Some(upto) = sh.eo.checkpoint_upto(&sh.agg, after) {
        sh.eo.checkpoint(upto).unwrap();
    }
}

/// Crashes at hit `n` of `point` in the first run and at hit `m` after the replay, then finishes.
fn crash_twice(point: &'static str, n: u64, m: u64, outage: std::ops::Range<u64>) {
    let mut world = World::new(point, outage);
    for (round, hit) in [n, m].into_iter().enumerate() {
        let mut run = world.start();
        failpoint::arm_thread(Some((point, hit)));
        let crashed = std::panic::catch_unwind(AssertUnwindSafe(|| world.drive(&mut run, 200)));
        failpoint::arm_thread(None);
        match crashed {
            Err(p) => assert_eq!(
                p.downcast_ref::<Crash>(),
                Some(&Crash(point)),
                "{point}: another panic"
            ),
            Ok(()) => panic!("{point}: round {round} never reached hit {hit}"),
        }
        // A crash: nothing of the run is cleaned up or flushed.
        std::mem::forget(run);
    }
    let mut run = world.start();
    world.drive(&mut run, 20);
    world.finish(&mut run);
    world.check(point);
    let _ = std::fs::remove_dir_all(&world.dir);
}

#[test]
fn a_run_without_crashes_is_exactly_once() {
    let mut world = World::new("none", 40..60);
    let mut run = world.start();
    world.drive(&mut run, 200);
    world.finish(&mut run);
    world.check("no crash");
    let _ = std::fs::remove_dir_all(&world.dir);
}

#[test]
fn crash_after_blobs_stored() {
    crash_twice("flush.stored", 7, 3, 0..0);
}

#[test]
fn crash_after_note_logged() {
    crash_twice("flush.noted", 7, 3, 0..0);
}

#[test]
fn crash_after_index_written() {
    crash_twice("flush.indexed", 7, 3, 0..0);
}

#[test]
fn crash_after_counts_written() {
    crash_twice("flush.counted", 7, 3, 0..0);
}

#[test]
fn crash_after_sync() {
    crash_twice("settle.synced", 9, 4, 0..0);
}

#[test]
fn crash_after_checkpoint() {
    crash_twice("checkpoint.written", 5, 3, 0..0);
}

#[test]
fn crash_after_spool_push() {
    crash_twice("spool.pushed", 3, 2, 20..200);
}

#[test]
fn crash_after_spooled_notes() {
    crash_twice("settle.noted", 2, 1, 20..200);
}
