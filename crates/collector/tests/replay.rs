//! Done notes logged before the index and proved by it (`Aggregator::set_note_log`,
//! `sluice_collector::exactly_once`): a crash at any point of a flush replays every logged event
//! exactly once. Deterministic counterparts of `crates/cli/tests/crashes.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_collector::aggregate::{Aggregator, AggregatorConfig};
use sluice_collector::exactly_once::replay;
use sluice_collector::wal::{FsyncPolicy, Wal, WalConfig};
use sluice_collector::{IngestConfig, Ingestor};
use sluice_store::{Faults, FaultyStore, InMemoryStore, Store};

mod common;
use common::{read_back, E0};
use sluice_test_support::temp_dir;

fn wal_cfg() -> WalConfig {
    WalConfig {
        fsync: FsyncPolicy::Never,
        ..WalConfig::default()
    }
}

/// An aggregator whose note log appends to `wal`; after appending it runs `after_note`.
fn logged_aggregator(
    store: Arc<dyn Store>,
    wal: &Arc<Wal>,
    after_note: impl Fn() + Send + 'static,
) -> Aggregator {
    let mut agg = Aggregator::new(AggregatorConfig::default(), store).unwrap();
    let wal = wal.clone();
    agg.set_note_log(Box::new(move |note| {
        wal.append_note(&note.encode(), E0)?;
        after_note();
        Ok(())
    }));
    agg
}

/// One payload: a late event of `E0` (whose second was already stored) and a current one of
/// `E0 + 3`. The late group is flushed, then the process "crashes" (everything dropped, no
/// `take_done`, no checkpoint). A new run replays the WAL; every event must be stored once.
fn crash_after_late_flush(name: &str, fail_index: bool) -> (BTreeMap<String, usize>, u64) {
    let dir = temp_dir(name);
    let (store, faults) = FaultyStore::new(InMemoryStore::new());
    let store: Arc<FaultyStore<InMemoryStore>> = Arc::new(store);
    let first = b"{\"epoch\":1700000000,\"type\":\"A\",\"n\":0}\n".to_vec();
    let payload = b"{\"epoch\":1700000000,\"type\":\"A\",\"n\":1}\n{\"epoch\":1700000003,\"type\":\"A\",\"n\":2}\n".to_vec();
    {
        let (wal, _) = Wal::open(&dir, wal_cfg()).unwrap();
        let wal = Arc::new(wal);
        let f: Faults = faults.clone();
        let fail = std::sync::atomic::AtomicBool::new(false);
        let fail = Arc::new(fail);
        let armed = fail.clone();
        let mut agg = logged_aggregator(store.clone(), &wal, move || {
            if armed.load(std::sync::atomic::Ordering::SeqCst) {
                // The crash lands between the note and the index write.
                f.fail_next_writes(1);
            }
        });
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let seq = wal.append(&first, E0).unwrap();
        agg.add_logged(ing.ingest(&first, E0).events, E0, seq);
        assert!(agg.flush_due(E0 + 2).is_ok());
        let _ = agg.take_done();
        wal.checkpoint(agg.min_pending_seq().map_or(wal.last_seq(), |s| s - 1))
            .unwrap();
        // The late event's group is a further chunk of E0, stored at once; E0+3 stays open.
        let seq = wal.append(&payload, E0 + 3).unwrap();
        agg.add_logged(ing.ingest(&payload, E0 + 3).events, E0 + 3, seq);
        fail.store(fail_index, std::sync::atomic::Ordering::SeqCst);
        let r = agg.flush_due(E0 + 3);
        assert_eq!(r.is_ok(), !fail_index, "{:?}", r.errors);
        assert_eq!(agg.min_pending_seq(), Some(seq));
        // Crash: no take_done, no checkpoint.
    }
    let (_wal, records) = Wal::open(&dir, wal_cfg()).unwrap();
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
    let report = replay(&records, &mut ing, &mut agg, |now| now);
    assert!(report.bad_notes.is_empty(), "{:?}", report.bad_notes);
    let r = agg.flush_all(E0 + 10);
    assert!(r.is_ok(), "{:?}", r.errors);
    (read_back(store.inner(), E0, E0 + 10), report.unproven)
}

#[test]
fn late_group_stored_before_a_crash_is_not_stored_again() {
    // The note went to the WAL before the index: the replay skips the stored late event.
    let (got, unproven) = crash_after_late_flush("late-stored", false);
    assert_eq!(
        got.values().copied().collect::<Vec<_>>(),
        vec![1, 1, 1],
        "{got:?}"
    );
    assert_eq!(unproven, 0);
}

#[test]
fn note_without_its_index_entry_skips_nothing() {
    // The note is in the WAL but the index write never happened: the event is replayed.
    let (got, unproven) = crash_after_late_flush("late-unindexed", true);
    assert_eq!(
        got.values().copied().collect::<Vec<_>>(),
        vec![1, 1, 1],
        "{got:?}"
    );
    assert_eq!(unproven, 1);
}

/// A sharded server adds a record routed from another shard after later records it
/// parsed itself. Records 2 then 1 go into one group, which is stored (its note logged); record
/// 3's event of the same second arrives late and is still open at the crash. The replay must
/// skip records 1 and 2 and give back record 3: each event stored once (the note's runs used to
/// name records 2 and 3, so 1 was stored twice and 3 lost).
#[test]
fn records_added_out_of_order_are_noted_as_they_are() {
    let dir = temp_dir("out-of-order");
    let store: Arc<InMemoryStore> = Arc::new(InMemoryStore::new());
    let payload =
        |n: u32| format!("{{\"epoch\":1700000000,\"type\":\"A\",\"n\":{n}}}\n").into_bytes();
    {
        let (wal, _) = Wal::open(&dir, wal_cfg()).unwrap();
        let wal = Arc::new(wal);
        let mut agg = logged_aggregator(store.clone(), &wal, || {});
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let seqs: Vec<u64> = (1..=3)
            .map(|n| wal.append(&payload(n), E0).unwrap())
            .collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        agg.add_logged(ing.ingest(&payload(2), E0).events, E0, 2);
        agg.add_logged(ing.ingest(&payload(1), E0).events, E0, 1);
        assert!(agg.flush_due(E0 + 2).is_ok());
        agg.add_logged(ing.ingest(&payload(3), E0).events, E0 + 2, 3);
        assert_eq!(agg.min_pending_seq(), Some(3));
        // Crash: record 3 is pending, nothing checkpointed.
    }
    let (_wal, records) = Wal::open(&dir, wal_cfg()).unwrap();
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
    let report = replay(&records, &mut ing, &mut agg, |now| now);
    assert_eq!((report.skipped, report.events), (2, 1), "{report:?}");
    let r = agg.flush_all(E0 + 10);
    assert!(r.is_ok(), "{:?}", r.errors);
    let got = read_back(store.as_ref(), E0, E0 + 10);
    assert_eq!(
        got.values().copied().collect::<Vec<_>>(),
        vec![1, 1, 1],
        "{got:?}"
    );
}
