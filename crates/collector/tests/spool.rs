//! The spool: store outages spill batches to disk, replay in order, survive a crash, drop a torn
//! tail, and apply backpressure when full.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sluice_blob::{EpochKey, EventKey, IndexEntry};
use sluice_collector::aggregate::{AggregateError, Aggregator, AggregatorConfig, FlushReport};
use sluice_collector::spool::{Spool, SpoolConfig, SpoolError, SpooledBatch, SpooledChunk};
use sluice_collector::ParsedEvent;
use sluice_gen::GenConfig;
use sluice_store::{BlobKey, Counts, Faults, FaultyStore, InMemoryStore, Namespace, Store};

mod common;
use sluice_test_support::temp_dir;

use common::{bag, ingest_generated, read_back, total_counts, Hooked, WriteHook, WriteOp, E0};

/// `per_sec` mixed events per second for `secs` seconds from `E0`, grouped per second.
fn seconds(seed: u64, secs: usize, per_sec: u32) -> Vec<Vec<ParsedEvent>> {
    let cfg = GenConfig {
        epoch_start: E0,
        events_per_second: per_sec,
        ..GenConfig::mixed(seed, secs * per_sec as usize)
    };
    let events = ingest_generated(&cfg);
    let mut per: BTreeMap<i64, Vec<ParsedEvent>> = BTreeMap::new();
    for e in events {
        per.entry(e.epoch).or_default().push(e);
    }
    assert_eq!(per.len(), secs);
    per.into_values().collect()
}

fn stored_count(store: &dyn Store, from: i64, to: i64) -> u64 {
    total_counts(store, from, to).stored
}

/// Passes everything to `inner` and records the order of successful writes; checks that an
/// index entry is only added once its blob is stored.
type Recording<S> = Hooked<S, WriteLog>;

/// The hook of [`Recording`].
struct WriteLog {
    /// ("blob" | "index" | "counts", epoch)
    log: Mutex<Vec<(&'static str, i64)>>,
}

impl WriteHook for WriteLog {
    fn write<S: Store, T>(
        &self,
        inner: &S,
        op: WriteOp<'_>,
        apply: impl FnOnce(&S) -> sluice_store::Result<T>,
    ) -> sluice_store::Result<T> {
        if let WriteOp::AddToEpochIndex { epoch, dc, entries } = op {
            let ek = EpochKey::new(epoch, dc).unwrap();
            for e in entries {
                let key = EventKey::from_parts(&ek, &IndexEntry::parse(e).unwrap()).to_string();
                assert!(
                    inner
                        .get_blob(&Namespace::Events, BlobKey::new(epoch, &key))
                        .unwrap()
                        .is_some(),
                    "{key} indexed before stored"
                );
            }
        }
        let r = apply(inner)?;
        let kind = match op {
            WriteOp::PutBlob { .. } => "blob",
            WriteOp::AddToEpochIndex { .. } => "index",
            WriteOp::AddCounts { .. } | WriteOp::AddCountsOnce { .. } => "counts",
        };
        self.log.lock().unwrap().push((kind, op.epoch()));
        Ok(r)
    }
}

fn faulty() -> (Arc<FaultyStore<Recording<InMemoryStore>>>, Faults) {
    let (s, f) = FaultyStore::new(Recording {
        inner: InMemoryStore::new(),
        hook: WriteLog {
            log: Mutex::new(Vec::new()),
        },
    });
    (Arc::new(s), f)
}

fn cfg(dir: &Path, memory_batches: usize, max_bytes: u64) -> AggregatorConfig {
    AggregatorConfig {
        spool: Some(SpoolConfig {
            dir: dir.to_path_buf(),
            max_bytes,
            memory_batches,
        }),
        ..Default::default()
    }
}

fn only_store_errors(r: &FlushReport) {
    for e in &r.errors {
        assert!(
            matches!(
                e,
                AggregateError::Store { .. }
                    | AggregateError::Spool {
                        source: SpoolError::Full { .. },
                        ..
                    }
                    | AggregateError::Backpressure { .. }
            ),
            "{e}"
        );
    }
}

#[test]
fn outage_spills_to_disk_and_replays_in_order_exactly_once() {
    let dir = temp_dir("outage");
    let (store, faults) = faulty();
    let memory = 4;
    let mut a = Aggregator::new(cfg(&dir, memory, 1 << 30), store.clone()).unwrap();
    let input = seconds(11, 60, 200);
    let mut noted = std::collections::BTreeSet::new();
    faults.fail_writes(true);
    // 60 seconds of events arrive while every write fails.
    for (i, evs) in input.iter().enumerate() {
        let now = E0 + i as i64;
        a.add_logged(evs.clone(), now, i as u64 + 1);
        let r = a.flush_due(now);
        only_store_errors(&r);
        assert!(
            a.memory_batches() <= memory,
            "{} batches in memory",
            a.memory_batches()
        );
        // A spooled batch releases its WAL records; its done note keeps a replay from adding
        // it again. Every record below the pending minimum must be covered by a note.
        noted.extend(a.take_done().into_iter().flat_map(|n| n.seqs));
        if let Some(min) = a.min_pending_seq() {
            assert!(
                (1..min).all(|s| noted.contains(&s)),
                "record below {min} released without a note"
            );
        }
    }
    assert!(
        a.min_pending_seq().is_some_and(|m| m > 1),
        "spooled batches no longer hold the WAL"
    );
    assert!(a.spooled_batches() > 0);
    assert!(a.spooled_bytes() > 0);
    assert!(a.spooled_events() > 0);
    assert_eq!(
        a.pending_batches(),
        a.memory_batches() + a.spooled_batches()
    );
    assert!(a.pending_batches() > memory);
    assert!(!a.is_backpressured());
    assert!(store.list_epochs(None, E0, E0 + 100).unwrap().is_empty());
    assert!(std::fs::read_dir(&dir).unwrap().count() > 0);

    // The store comes back: everything is replayed in order, each event stored once.
    faults.fail_writes(false);
    let r = a.flush_due(E0 + 60);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(a.spooled_batches(), 0);
    assert_eq!(a.spooled_bytes(), 0);
    let r = a.flush_all(E0 + 61);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(a.pending_batches(), 0);
    assert_eq!(a.min_pending_seq(), None);
    let all: Vec<&ParsedEvent> = input.iter().flatten().collect();
    assert_eq!(
        read_back(store.inner(), E0, E0 + 100),
        bag(all.iter().copied())
    );
    assert_eq!(stored_count(store.inner(), E0, E0 + 100), all.len() as u64);
    // In order: epochs never go backwards in the write log; data before metadata is checked by
    // the recording store.
    let log = store.inner().hook.log.lock().unwrap();
    assert!(
        log.windows(2).all(|w| w[0].1 <= w[1].1),
        "writes out of epoch order"
    );
    drop(log);
    // The spool is cleaned up: a single empty segment.
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    assert_eq!(files, vec![0]);
}

#[test]
fn spool_survives_a_crash_and_is_replayed_by_a_new_aggregator() {
    let dir = temp_dir("crash");
    let (store, faults) = faulty();
    let input = seconds(12, 20, 100);
    faults.fail_writes(true);
    let spooled;
    {
        let mut a = Aggregator::new(cfg(&dir, 0, 1 << 30), store.clone()).unwrap();
        for (i, evs) in input.iter().enumerate() {
            a.add_logged(evs.clone(), E0 + i as i64, 100 + i as u64);
        }
        let r = a.flush_all(E0 + 30);
        only_store_errors(&r);
        assert_eq!(a.memory_batches(), 0);
        spooled = a.spooled_batches();
        assert!(spooled > 0);
        assert_eq!(
            a.min_pending_seq(),
            None,
            "spooled batches hold no WAL record"
        );
        let noted: std::collections::BTreeSet<u64> =
            a.take_done().into_iter().flat_map(|n| n.seqs).collect();
        assert_eq!(
            noted,
            (100..120).collect(),
            "every spooled record has a done note"
        );
        // Crash: the aggregator is dropped, the spool directory stays.
    }
    faults.fail_writes(false);
    let mut b = Aggregator::new(cfg(&dir, 0, 1 << 30), store.clone()).unwrap();
    assert_eq!(b.spooled_batches(), spooled);
    assert_eq!(
        b.min_pending_seq(),
        None,
        "spooled batches hold no WAL record after reopen"
    );
    let r = b.flush_due(E0 + 31);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!((b.pending_batches(), b.min_pending_seq()), (0, None));
    let all: Vec<&ParsedEvent> = input.iter().flatten().collect();
    assert_eq!(r.events, all.len() as u64);
    assert_eq!(
        read_back(store.inner(), E0, E0 + 100),
        bag(all.iter().copied())
    );
    assert_eq!(stored_count(store.inner(), E0, E0 + 100), all.len() as u64);
    drop(b);
    // Nothing left for a third run.
    let c = Aggregator::new(cfg(&dir, 0, 1 << 30), store.clone()).unwrap();
    assert_eq!(c.spooled_batches(), 0);
}

fn batch(n: u8) -> SpooledBatch {
    SpooledBatch {
        epoch: E0 + i64::from(n),
        dc: "ams1".into(),
        type_: "WEB".into(),
        subtype: String::new(),
        chunks: vec![SpooledChunk {
            key: format!("{}:ams1:WEB::0", E0 + i64::from(n)),
            entry: "WEB::0".into(),
            bytes: vec![n; 1000],
        }],
        stored: 0,
        indexed: false,
        events: u64::from(n),
        counts: Counts {
            stored: u64::from(n),
            ..Counts::default()
        },
        seqs: vec![u64::from(n)],
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn spool_is_fifo_and_acks_survive_reopen() {
    let dir = temp_dir("fifo");
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    for n in 1..=5 {
        s.push(&batch(n)).unwrap();
    }
    assert_eq!((s.batches(), s.events()), (5, 15));
    assert_eq!(s.front().unwrap(), Some(batch(1)));
    s.pop_front().unwrap();
    s.pop_front().unwrap();
    drop(s);
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    assert_eq!(s.batches(), 3);
    assert_eq!(s.dropped_bytes_on_open(), 0);
    for n in 3..=5 {
        assert_eq!(s.front().unwrap(), Some(batch(n)));
        s.pop_front().unwrap();
    }
    assert!(s.is_empty());
    assert_eq!(s.bytes(), 0);
    assert_eq!(s.front().unwrap(), None);
}

#[test]
fn torn_tail_is_dropped_on_open() {
    let dir = temp_dir("torn");
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    for n in 1..=3 {
        s.push(&batch(n)).unwrap();
    }
    let full = s.bytes();
    drop(s);
    let files = segments(&dir);
    assert_eq!(files.len(), 1);
    let len = std::fs::metadata(&files[0]).unwrap().len();
    // A crash in the middle of writing the third batch.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    assert_eq!(s.batches(), 2);
    assert_eq!(s.dropped_bytes_on_open(), full / 3 - 100);
    assert_eq!(s.front().unwrap(), Some(batch(1)));
    // Appending after the cut works, and survives a reopen.
    s.push(&batch(4)).unwrap();
    drop(s);
    // Garbage after the last record (a torn frame header) is dropped too.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&files[0])
        .unwrap()
        .write_all(&[7, 0, 0])
        .unwrap();
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    assert_eq!(s.dropped_bytes_on_open(), 3);
    let mut got = Vec::new();
    while let Some(b) = s.front().unwrap() {
        got.push(b.events);
        s.pop_front().unwrap();
    }
    assert_eq!(got, vec![1, 2, 4]);
    // A corrupted (bad CRC) record ends the segment the same way.
    s.push(&batch(5)).unwrap();
    s.push(&batch(6)).unwrap();
    drop(s);
    let f = segments(&dir).pop().unwrap();
    let mut data = std::fs::read(&f).unwrap();
    let last = data.len() - 10;
    data[last] ^= 0xff;
    std::fs::write(&f, &data).unwrap();
    let s = Spool::open(&dir, 1 << 20).unwrap();
    assert_eq!(s.batches(), 1);
    assert_eq!(s.front().unwrap().map(|b| b.events), Some(5));
}

#[test]
fn full_spool_refuses_and_the_aggregator_applies_backpressure() {
    let dir = temp_dir("full");
    // The spool by itself: a push that does not fit is refused and nothing is written.
    {
        let mut s = Spool::open(&dir, 2_500).unwrap();
        s.push(&batch(1)).unwrap();
        s.push(&batch(2)).unwrap();
        let before = s.bytes();
        assert!(matches!(s.push(&batch(3)), Err(SpoolError::Full { .. })));
        assert_eq!((s.batches(), s.bytes()), (2, before));
        drop(s);
        let s = Spool::open(&dir, 2_500).unwrap();
        assert_eq!(s.batches(), 2);
    }
    let _ = std::fs::remove_dir_all(&dir);

    // The aggregator: a tiny spool fills up; batches stay in memory, due groups stay open, and
    // nothing is lost once the store is back.
    let (store, faults) = faulty();
    let memory = 2;
    let mut a = Aggregator::new(cfg(&dir, memory, 64 << 10), store.clone()).unwrap();
    let input = seconds(13, 30, 300);
    faults.fail_writes(true);
    let mut saw_full = false;
    let mut saw_backpressure = false;
    for (i, evs) in input.iter().enumerate() {
        let now = E0 + i as i64;
        a.add(evs.clone(), now);
        let r = a.flush_due(now);
        only_store_errors(&r);
        saw_full |= r.errors.iter().any(|e| {
            matches!(
                e,
                AggregateError::Spool {
                    source: SpoolError::Full { .. },
                    ..
                }
            )
        });
        saw_backpressure |= r
            .errors
            .iter()
            .any(|e| matches!(e, AggregateError::Backpressure { .. }));
        assert!(a.spooled_bytes() <= 64 << 10);
    }
    assert!(saw_full && saw_backpressure);
    assert!(a.is_backpressured());
    // Under backpressure the pending batches stay put; the due groups are held open.
    let held = a.memory_batches();
    let r = a.flush_due(E0 + 40);
    assert!(r
        .errors
        .iter()
        .any(|e| matches!(e, AggregateError::Backpressure { .. })));
    assert_eq!(a.memory_batches(), held);
    assert!(a.pending_events() > 0);

    faults.fail_writes(false);
    let r = a.flush_due(E0 + 41);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert!(!a.is_backpressured());
    let r = a.flush_all(E0 + 42);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(
        (a.pending_batches(), a.pending_events(), a.spooled_batches()),
        (0, 0, 0)
    );
    let all: Vec<&ParsedEvent> = input.iter().flatten().collect();
    assert_eq!(
        read_back(store.inner(), E0, E0 + 100),
        bag(all.iter().copied())
    );
    assert_eq!(stored_count(store.inner(), E0, E0 + 100), all.len() as u64);
}

#[test]
fn no_spool_keeps_the_old_behaviour() {
    let (store, faults) = faulty();
    let mut a = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
    faults.fail_writes(true);
    for (i, evs) in seconds(14, 10, 50).iter().enumerate() {
        a.add(evs.clone(), E0 + i as i64);
        a.flush_due(E0 + i as i64);
    }
    assert_eq!(a.spooled_batches(), 0);
    assert!(!a.is_backpressured());
    assert_eq!(a.pending_batches(), a.memory_batches());
    assert!(a.pending_batches() > 16);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A crash after the store took a spooled batch's counts but before the spool's ack reached disk
/// (simulated by restoring the spool directory as it was before the drain): the next aggregator
/// replays those batches, and their counts are not added a second time (the counts token is the
/// batch's first chunk entry, stored in the spool with it).
#[test]
fn a_replayed_spool_batch_does_not_count_twice() {
    let dir = temp_dir("recount");
    let before_drain = temp_dir("recount-copy");
    let (store, faults) = faulty();
    let input = seconds(14, 10, 100);
    let all: Vec<&ParsedEvent> = input.iter().flatten().collect();
    let id = || AggregatorConfig {
        collector_id: Some("c3".into()),
        ..cfg(&dir, 0, 1 << 30)
    };
    {
        let mut a = Aggregator::new(id(), store.clone()).unwrap();
        faults.fail_writes(true);
        for (i, evs) in input.iter().enumerate() {
            a.add(evs.clone(), E0 + i as i64);
        }
        only_store_errors(&a.flush_all(E0 + 20));
        assert!(a.spooled_batches() > 0);
        copy_dir(&dir, &before_drain);
        faults.fail_writes(false);
        let r = a.flush_due(E0 + 21);
        assert!(r.is_ok(), "{:?}", r.errors);
        assert_eq!(a.pending_batches(), 0);
    }
    assert_eq!(stored_count(store.inner(), E0, E0 + 100), all.len() as u64);
    // The crash: the acks never reached disk.
    std::fs::remove_dir_all(&dir).unwrap();
    copy_dir(&before_drain, &dir);
    let mut b = Aggregator::new(id(), store.clone()).unwrap();
    assert!(b.spooled_batches() > 0);
    let r = b.flush_due(E0 + 22);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(b.pending_batches(), 0);
    assert_eq!(
        read_back(store.inner(), E0, E0 + 100),
        bag(all.iter().copied())
    );
    assert_eq!(stored_count(store.inner(), E0, E0 + 100), all.len() as u64);
}

/// With the store down (reads and writes fail), one flush closing many groups asks the store
/// once, not once per group: with a real store each failed request is a timeout (2 s), and
/// asking per group held a flush for a minute while nothing reached the spool.
#[test]
fn a_flush_with_the_store_down_asks_it_once_not_per_group() {
    let dir = temp_dir("down-once");
    let (store, faults) = faulty();
    let memory = 2;
    let mut a = Aggregator::new(cfg(&dir, memory, 1 << 30), store.clone()).unwrap();
    let input = seconds(12, 10, 300);
    faults.fail_reads(true);
    faults.fail_writes(true);
    let all: Vec<ParsedEvent> = input.iter().flatten().cloned().collect();
    let groups = all
        .iter()
        .map(|e| (e.epoch, e.dc.clone(), e.type_.clone(), e.subtype.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    a.add_logged(all.clone(), E0 + 20, 1);
    let r = a.flush_due(E0 + 20);
    only_store_errors(&r);
    let asked = faults.injected();
    assert!(
        asked <= 3,
        "{asked} failed store requests for one flush of {groups} groups"
    );
    assert!(groups > 20, "{groups} groups");
    assert!(a.memory_batches() <= memory);
    assert_eq!(a.spooled_batches() + a.memory_batches(), groups);
    // Back up: every event stored once.
    faults.fail_reads(false);
    faults.fail_writes(false);
    let r = a.flush_all(E0 + 21);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(a.pending_batches(), 0);
    assert_eq!(read_back(store.inner(), E0, E0 + 100), bag(all.iter()));
}
