//! Origins: every chunk the aggregator stores (default profile) says which WAL record each of its
//! events came from, in event order — through several chunks of one group, an event that could
//! not be encoded, the rebuild after a failed build (`isolate`), the spool and a replay after a
//! crash; the original profile's chunks carry none.

use std::collections::BTreeMap;
use std::sync::Arc;

use sereal::Limits;
use sluice_blob::{Blob, BlobOptions, EpochKey, EventKey, IndexEntry, Profile};
use sluice_collector::aggregate::{Aggregator, AggregatorConfig, FlushReport, SpoolConfig};
use sluice_collector::exactly_once::replay;
use sluice_collector::wal::{FsyncPolicy, Wal, WalConfig};
use sluice_collector::{EventBody, IngestConfig, Ingestor, ParsedEvent};
use sluice_gen::GenConfig;
use sluice_store::{BlobKey, FaultyStore, InMemoryStore, Namespace, Store, StoredBatch};

mod common;
use common::{ingest_generated, json, E0};
use sluice_test_support::temp_dir;

/// A group: (dc, type, subtype).
type GroupTags = (String, String, String);

/// How a run stores its chunks.
struct Setup {
    profile: Profile,
    /// Refuse an event too big for a chunk: its group's build fails and is rebuilt event by
    /// event (`isolate`).
    refuse_oversized: bool,
    /// The store fails while the groups close: every batch goes through the spool.
    spool: bool,
}

/// One second of events in three WAL records (seqs 11, 12, 13), record 12 with an event that is
/// not a map (never encoded) and, with `huge`, record 13 with an event too big for a chunk.
/// Returns the records and, per group, what its stored chunks must hold in order: each encoded
/// event's JSON and seq (the huge one only when `huge_stored`).
#[allow(clippy::type_complexity)]
fn records(
    huge: bool,
    huge_stored: bool,
) -> (
    Vec<(u64, Vec<ParsedEvent>)>,
    BTreeMap<GroupTags, Vec<(String, u64)>>,
) {
    // Three groups (one dc, three subtypes) of about 300 events: several chunks each.
    let mut cfg = GenConfig::web(31, 900);
    cfg.dcs = vec!["ams1".into()];
    cfg.subtypes.web = vec!["www".into(), "api".into(), "img".into()];
    cfg.epoch_start = E0;
    cfg.events_per_second = 900;
    let events = ingest_generated(&cfg);
    let mut parts: Vec<(u64, Vec<ParsedEvent>)> = events
        .chunks(300)
        .zip(11..)
        .map(|(part, seq)| (seq, part.to_vec()))
        .collect();
    let mut not_a_map = parts[1].1[7].clone();
    not_a_map.event = EventBody::Value(sereal::Value::Int(5));
    parts[1].1.insert(8, not_a_map);
    let mut want: BTreeMap<GroupTags, Vec<(String, u64)>> = BTreeMap::new();
    let mut huge_event = None;
    if huge {
        let mut e = parts[2].1[0].clone();
        let mut value = e.event.to_value().unwrap();
        if let sereal::Value::Hash(h) = &mut value {
            // Incompressible, so that its chunk stays over the limit.
            let mut x = 7u64;
            let text: String = (0..20_000)
                .map(|_| {
                    x = sluice_gen::mix64(x);
                    char::from(b'a' + (x % 26) as u8)
                })
                .collect();
            h.push((sereal::Key::from("huge"), sereal::Value::String(text)));
        }
        e.event = EventBody::Value(value);
        huge_event = Some(e.clone());
        parts[2].1.insert(3, e);
    }
    for (seq, part) in &parts {
        for (i, e) in part.iter().enumerate() {
            let value = e.event.to_value().unwrap();
            let encoded = matches!(value, sereal::Value::Hash(_));
            let is_huge = *seq == 13 && i == 3 && huge_event.is_some();
            if encoded && (!is_huge || huge_stored) {
                want.entry((e.dc.clone(), e.type_.clone(), e.subtype.clone()))
                    .or_default()
                    .push((json(&value), *seq));
            }
        }
    }
    (parts, want)
}

/// Adds the records to an aggregator over a store with `setup`, flushes everything (through the
/// spool when asked) and returns the store, the batches it stored and the events it dropped.
fn run(
    setup: &Setup,
    records: &[(u64, Vec<ParsedEvent>)],
) -> (Arc<dyn Store>, Vec<StoredBatch>, u64) {
    let (store, faults) = FaultyStore::new(InMemoryStore::new());
    let store = Arc::new(store);
    let dir = temp_dir("origins");
    let cfg = AggregatorConfig {
        blob: BlobOptions {
            chunk_limit: 8_000,
            allow_oversized_events: !setup.refuse_oversized,
            ..BlobOptions::with_profile(setup.profile)
        },
        spool: setup.spool.then(|| SpoolConfig {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 30,
            memory_batches: 0,
        }),
        ..AggregatorConfig::default()
    };
    let mut agg = Aggregator::new(cfg, store.clone()).unwrap();
    for (seq, part) in records {
        agg.add_logged(part.clone(), E0, *seq);
    }
    let (mut stored, mut dropped) = (Vec::new(), 0);
    let mut keep = |r: FlushReport| {
        dropped += r.dropped_events;
        stored.extend(r.stored);
    };
    if setup.spool {
        faults.fail_writes(true);
        let r = agg.flush_all(E0 + 10);
        assert!(r.stored.is_empty());
        keep(r);
        assert!(agg.spooled_batches() > 0, "the batches went to the spool");
        faults.fail_writes(false);
        let r = agg.flush_due(E0 + 11);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        keep(r);
    } else {
        let r = agg.flush_all(E0 + 10);
        keep(r);
    }
    assert_eq!(agg.pending_batches(), 0);
    (store, stored, dropped)
}

/// Reads every stored chunk back from the store and checks its events and origins against
/// `want`; returns (chunks, groups stored in more than one chunk).
fn check(
    setup: &Setup,
    store: &dyn Store,
    stored: &[StoredBatch],
    want: &BTreeMap<GroupTags, Vec<(String, u64)>>,
) -> (usize, usize) {
    let (mut chunks, mut split_groups) = (0, 0);
    assert_eq!(stored.len(), want.len(), "one batch per group");
    for b in stored {
        let tags = (b.dc.clone(), b.type_.clone(), b.subtype.clone());
        let want = &want[&tags];
        let mut at = 0;
        for c in &b.chunks {
            let bytes = store
                .get_blob(&Namespace::Events, BlobKey::new(b.epoch, &c.key))
                .unwrap()
                .unwrap_or_else(|| panic!("{} is not in the store", c.key));
            let blob = Blob::parse(&bytes).unwrap();
            let events = blob.decode(&Limits::default()).unwrap();
            let expect = &want[at..at + events.len()];
            let got: Vec<String> = events.iter().map(json).collect();
            let expect_json: Vec<String> = expect.iter().map(|(j, _)| j.clone()).collect();
            assert!(got == expect_json, "{}: not the group's next events", c.key);
            let origins = blob.origins();
            match setup.profile {
                Profile::Original => assert_eq!(origins, None, "{}", c.key),
                Profile::Default { .. } => {
                    let origins = origins.unwrap_or_else(|| panic!("{}: no origins", c.key));
                    let seqs: Vec<u64> = origins.seqs().collect();
                    let expect_seqs: Vec<u64> = expect.iter().map(|&(_, s)| s).collect();
                    assert_eq!(seqs, expect_seqs, "{}: its events' seqs", c.key);
                    assert_eq!(origins.len(), events.len());
                }
            }
            at += events.len();
            chunks += 1;
        }
        assert_eq!(at, want.len(), "{tags:?}: every encoded event stored once");
        split_groups += usize::from(b.chunks.len() > 1);
    }
    (chunks, split_groups)
}

#[test]
fn each_stored_chunk_lists_its_events_wal_records() {
    for spool in [false, true] {
        for profile in [Profile::default(), Profile::Original] {
            let setup = Setup {
                profile,
                refuse_oversized: false,
                spool,
            };
            let (records, want) = records(false, false);
            let (store, stored, dropped) = run(&setup, &records);
            assert_eq!(dropped, 1, "the event that is not a map");
            let (chunks, split_groups) = check(&setup, &*store, &stored, &want);
            assert!(
                chunks > want.len(),
                "{profile}: some group takes several chunks"
            );
            assert!(split_groups > 0);
            // Every record reached some chunk, and a group holds more than one.
            let mut seqs_per_group = want.values().map(|v| {
                let mut s: Vec<u64> = v.iter().map(|&(_, s)| s).collect();
                s.dedup();
                s.len()
            });
            assert!(
                seqs_per_group.any(|n| n == 3),
                "a group of all three records"
            );
        }
    }
}

#[test]
fn a_group_rebuilt_event_by_event_keeps_its_events_origins() {
    for (refuse_oversized, huge_stored) in [(true, false), (false, true)] {
        let setup = Setup {
            profile: Profile::default(),
            refuse_oversized,
            spool: false,
        };
        let (records, want) = records(true, huge_stored);
        let (store, stored, dropped) = run(&setup, &records);
        // Refused, the huge event fails its group's build: the group is rebuilt without it.
        assert_eq!(dropped, if refuse_oversized { 2 } else { 1 });
        let (chunks, _) = check(&setup, &*store, &stored, &want);
        assert!(chunks > want.len());
    }
}

/// Every chunk indexed in `store` for `E0..E0 + 10`: its key, events and origins.
fn indexed_chunks(store: &dyn Store) -> Vec<(String, Vec<sereal::Value>, Option<Vec<u64>>)> {
    let mut out = Vec::new();
    for (epoch, dc) in store.list_epochs(None, E0, E0 + 10).unwrap() {
        let ek = EpochKey::new(epoch, &dc).unwrap();
        for entry in store.get_epoch_index(epoch, &dc).unwrap() {
            let key = EventKey::from_parts(&ek, &IndexEntry::parse(&entry).unwrap()).to_string();
            let bytes = store
                .get_blob(&Namespace::Events, BlobKey::new(epoch, &key))
                .unwrap()
                .unwrap_or_else(|| panic!("{key} is indexed but not stored"));
            let blob = Blob::parse(&bytes).unwrap();
            let events = blob.decode(&Limits::default()).unwrap();
            let origins = blob.origins().map(|o| o.seqs().collect());
            out.push((key, events, origins));
        }
    }
    out
}

#[test]
fn a_replay_after_a_crash_stores_the_records_old_seqs() {
    let dir = temp_dir("origins-replay");
    let wal_cfg = || WalConfig {
        fsync: FsyncPolicy::Never,
        ..WalConfig::default()
    };
    let store = Arc::new(InMemoryStore::new());
    // Three payloads of events `n` of two types; the WAL gives each its seq.
    let mut seq_of_n = BTreeMap::new();
    {
        let (wal, _) = Wal::open(&dir, wal_cfg()).unwrap();
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
        for p in 0..3 {
            let payload: String = (0..40)
                .map(|i| {
                    let (n, t) = (p * 40 + i, ["A", "B"][i % 2]);
                    format!("{{\"epoch\":{E0},\"type\":\"{t}\",\"n\":{n}}}\n")
                })
                .collect();
            let seq = wal.append(payload.as_bytes(), E0).unwrap();
            seq_of_n.extend((p * 40..p * 40 + 40).map(|n| (n as i64, seq)));
            agg.add_logged(ing.ingest(payload.as_bytes(), E0).events, E0, seq);
        }
        // Crash before the second is flushed: nothing stored, no checkpoint.
    }
    assert!(indexed_chunks(&*store).is_empty());
    let (_wal, records) = Wal::open(&dir, wal_cfg()).unwrap();
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
    replay(&records, &mut ing, &mut agg, |now| now);
    let r = agg.flush_all(E0 + 10);
    assert!(r.is_ok(), "{:?}", r.errors);
    let chunks = indexed_chunks(&*store);
    assert_eq!(chunks.len(), 2, "one chunk per type");
    let mut seen = 0;
    for (key, events, origins) in chunks {
        let want: Vec<u64> = events
            .iter()
            .map(|e| {
                let n = sereal::json::to_json_value(e)["n"].as_i64().unwrap();
                seq_of_n[&n]
            })
            .collect();
        assert_eq!(
            origins,
            Some(want),
            "{key}: the records' seqs from before the crash"
        );
        seen += events.len();
    }
    assert_eq!(seen, 120);
}
