//! The aggregator: group per second, flush after the grace period, read everything back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_blob::{BlobOptions, EpochKey, EventKey, IndexEntry};
use sluice_collector::aggregate::{Aggregator, AggregatorConfig, FlushReport};
use sluice_collector::{EventBody, ParsedEvent};
use sluice_gen::GenConfig;
use sluice_store::{
    BlobKey, EmbeddedStore, FaultyStore, InMemoryStore, Namespace, Store, StoreError,
};

mod common;
use sluice_test_support::temp_dir;

use common::{
    bag, for_each_stored, ingest_generated, json, total_counts, Hooked, WriteHook, WriteOp, E0,
};

/// `count` generated events, `per_sec` per second from `E0`, as the ingest layer gives them.
fn events(seed: u64, count: usize, per_sec: u32, web_only: bool) -> Vec<ParsedEvent> {
    let base = if web_only {
        GenConfig::web(seed, count)
    } else {
        GenConfig::mixed(seed, count)
    };
    let cfg = GenConfig {
        epoch_start: E0,
        events_per_second: per_sec,
        ..base
    };
    let events = ingest_generated(&cfg);
    assert_eq!(events.len(), count);
    events
}

/// Every event the store lists for epochs `[from, to)`, read through the index; also checks that
/// every indexed blob exists and that the events carry the tags of their key.
fn read_back(store: &dyn Store, from: i64, to: i64) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for_each_stored(store, from, to, |epoch, dc, key, v| {
        let j = sereal::json::to_json_value(v);
        assert_eq!(j["epoch"].as_i64(), Some(epoch), "{key}");
        assert_eq!(j["dc"].as_str(), Some(dc), "{key}");
        assert!(
            key.contains(&format!(":{}:", j["type"].as_str().unwrap())),
            "{key}"
        );
        *m.entry(j.to_string()).or_insert(0) += 1;
    });
    m
}

fn agg(store: Arc<dyn Store>, collector_id: Option<&str>, blob: BlobOptions) -> Aggregator {
    let cfg = AggregatorConfig {
        collector_id: collector_id.map(str::to_owned),
        blob,
        ..Default::default()
    };
    Aggregator::new(cfg, store).unwrap()
}

/// Blob options with 16 KiB chunks: a flush of a few hundred events writes many blobs.
fn small_chunks() -> BlobOptions {
    BlobOptions {
        chunk_limit: 16 << 10,
        ..BlobOptions::default()
    }
}

/// `store` holds exactly the events `want` of `E0..E0 + 10`, counted 600 stored, none late.
fn assert_all_stored_once(store: &dyn Store, want: &BTreeMap<String, usize>, ctx: &str) {
    assert_eq!(read_back(store, E0, E0 + 10), *want, "{ctx}");
    let c = total_counts(store, E0, E0 + 10);
    assert_eq!((c.stored, c.late), (600, 0), "{ctx}");
}

fn ok(r: FlushReport) -> FlushReport {
    assert!(r.is_ok(), "{:?}", r.errors);
    r
}

fn round_trip(store: Arc<dyn Store>) {
    // 4 seconds x 4 dcs x several types.
    let input = events(7, 2_000, 500, false);
    let mut a = agg(store.clone(), None, BlobOptions::default());
    a.add(input.clone(), E0);
    // Within the grace period of E0 (E0 + 1 < now is false): nothing written.
    let r = ok(a.flush_due(E0 + 1));
    assert_eq!((r.blobs, r.events), (0, 0));
    assert!(store.list_epochs(None, E0, E0 + 10).unwrap().is_empty());
    // E0 is due at E0 + 2, the other seconds not yet.
    let r = ok(a.flush_due(E0 + 2));
    assert_eq!(r.events, 500);
    assert_eq!(
        store
            .list_epochs(None, E0, E0 + 10)
            .unwrap()
            .iter()
            .filter(|(e, _)| *e != E0)
            .count(),
        0
    );
    assert_eq!(a.pending_events(), 1_500);
    let r = ok(a.flush_due(E0 + 5));
    assert_eq!((r.events, r.late_events), (1_500, 0));
    assert_eq!(a.pending_events(), 0);
    assert_eq!(read_back(&*store, E0, E0 + 10), bag(&input));
    let c = total_counts(&*store, E0, E0 + 10);
    assert_eq!((c.stored, c.late), (2_000, 0));
    // Plain chunk numbers from 0.
    for (epoch, dc) in store.list_epochs(None, E0, E0 + 10).unwrap() {
        assert!(store
            .get_epoch_index(epoch, &dc)
            .unwrap()
            .iter()
            .all(|e| e.ends_with(":0")));
    }
    // Nothing left: a further flush writes nothing.
    let r = ok(a.flush_all(E0 + 6));
    assert_eq!(r.blobs, 0);
}

#[test]
fn round_trip_in_memory() {
    round_trip(Arc::new(InMemoryStore::new()));
}

#[test]
fn round_trip_embedded() {
    let dir = temp_dir("round-trip");
    {
        let store = Arc::new(EmbeddedStore::open(&dir).unwrap());
        round_trip(store.clone());
        store.flush().unwrap();
    }
    // Reopened, everything is still there.
    let store = EmbeddedStore::open(&dir).unwrap();
    assert_eq!(
        read_back(&store, E0, E0 + 10),
        bag(&events(7, 2_000, 500, false))
    );
    drop(store);
}

#[test]
fn late_events_become_a_further_chunk() {
    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let input = events(3, 300, 1_000, true);
    let (dc, sub) = (input[0].dc.clone(), input[0].subtype.clone());
    let first: Vec<ParsedEvent> = input
        .iter()
        .filter(|e| e.dc == dc && e.subtype == sub)
        .cloned()
        .collect();
    assert!(first.len() > 4);
    let listed = |store: &Arc<dyn Store>| -> Vec<String> {
        let prefix = format!("WEB:{sub}:");
        let index = store.get_epoch_index(E0, &dc).unwrap();
        index
            .into_iter()
            .filter_map(|e| e.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    };
    let (on_time, late) = first.split_at(first.len() - 3);
    let mut a = agg(store.clone(), None, BlobOptions::default());
    a.add(on_time.to_vec(), E0);
    ok(a.flush_due(E0 + 2));
    assert_eq!(listed(&store), ["0"]);
    // Arrive after the flush: accepted, late, written as chunk 1.
    a.add(late.to_vec(), E0 + 2);
    let r = ok(a.flush_due(E0 + 3));
    assert_eq!((r.events, r.late_events, r.blobs), (3, 3, 1));
    assert_eq!(listed(&store), ["0", "1"]);
    let counts = &store.get_counts(E0, &dc).unwrap()[&("WEB".to_string(), sub.clone())];
    assert_eq!((counts.stored, counts.late), (first.len() as u64, 3));
    // Later still, one more: chunk 2. Then a restarted aggregator continues from the index.
    a.add(late[..1].to_vec(), E0 + 9);
    assert_eq!(ok(a.flush_due(E0 + 9)).late_events, 1);
    let mut restarted = agg(store.clone(), None, BlobOptions::default());
    restarted.add(late[1..2].to_vec(), E0 + 20);
    assert_eq!(ok(restarted.flush_due(E0 + 20)).late_events, 1);
    assert_eq!(listed(&store), ["0", "1", "2", "3"]);
    let mut want: Vec<ParsedEvent> = first.clone();
    want.extend(late[..2].iter().cloned());
    assert_eq!(read_back(&*store, E0, E0 + 1), bag(&want));
}

#[test]
fn small_chunk_limit_gives_several_chunks() {
    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let input: Vec<ParsedEvent> = events(5, 2_000, 2_000, true);
    let opts = BlobOptions {
        chunk_limit: 8 << 10,
        ..BlobOptions::default()
    };
    let mut a = agg(store.clone(), Some("c1"), opts);
    a.add(input.clone(), E0);
    let r = ok(a.flush_all(E0));
    assert_eq!(r.events, 2_000);
    let mut max_chunks = 0;
    for (epoch, dc) in store.list_epochs(None, E0, E0 + 1).unwrap() {
        let mut per_group: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for e in store.get_epoch_index(epoch, &dc).unwrap() {
            let entry = IndexEntry::parse(&e).unwrap();
            assert_eq!(entry.chunk().collector_id(), Some("c1"));
            per_group
                .entry(format!("{}:{}", entry.type_(), entry.subtype()))
                .or_default()
                .push(entry.chunk().n());
        }
        for (group, mut ns) in per_group {
            ns.sort();
            assert_eq!(ns, (0..ns.len() as u32).collect::<Vec<_>>(), "{dc} {group}");
            max_chunks = max_chunks.max(ns.len());
        }
    }
    assert!(max_chunks >= 3, "{max_chunks}");
    assert_eq!(r.blobs, read_back_count(&*store));
    assert_eq!(read_back(&*store, E0, E0 + 1), bag(&input));
}

fn read_back_count(store: &dyn Store) -> usize {
    store
        .list_epochs(None, E0, E0 + 100)
        .unwrap()
        .iter()
        .map(|(e, dc)| store.get_epoch_index(*e, dc).unwrap().len())
        .sum()
}

#[test]
fn two_collectors_do_not_overwrite_each_other() {
    let dir = temp_dir("two-collectors");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir).unwrap());
    let input = events(11, 400, 1_000, true);
    let (x, y) = input.split_at(200);
    let mut a = agg(store.clone(), Some("c1"), BlobOptions::default());
    let mut b = agg(store.clone(), Some("c2"), BlobOptions::default());
    a.add(x.to_vec(), E0);
    b.add(y.to_vec(), E0);
    ok(a.flush_due(E0 + 2));
    ok(b.flush_due(E0 + 2));
    // Late data for both: each continues its own numbering.
    a.add(x[..1].to_vec(), E0 + 3);
    b.add(y[..1].to_vec(), E0 + 3);
    ok(b.flush_due(E0 + 3));
    ok(a.flush_due(E0 + 3));
    for (epoch, dc) in store.list_epochs(None, E0, E0 + 1).unwrap() {
        let index: Vec<String> = store
            .get_epoch_index(epoch, &dc)
            .unwrap()
            .into_iter()
            .collect();
        let has = |s: &str| index.iter().any(|e| e.ends_with(s));
        assert!(has(":c1.0") && has(":c2.0"), "{dc}: {index:?}");
    }
    let mut want = input.clone();
    want.push(x[0].clone());
    want.push(y[0].clone());
    assert_eq!(read_back(&*store, E0, E0 + 1), bag(&want));
    let c = total_counts(&*store, E0, E0 + 1);
    assert_eq!((c.stored, c.late), (402, 2));
    // Each late event became a further chunk of its own writer (number 1).
    let late_chunks: Vec<String> = store
        .list_epochs(None, E0, E0 + 1)
        .unwrap()
        .iter()
        .flat_map(|(e, dc)| store.get_epoch_index(*e, dc).unwrap())
        .filter(|e| e.ends_with(".1"))
        .collect();
    assert_eq!(late_chunks.len(), 2, "{late_chunks:?}");
    drop(store);
}

/// What happens to the writes a [`Window`] hits.
#[derive(Clone, Copy)]
enum Injected {
    /// Refused as unavailable, not applied.
    Unavailable,
    /// Applied, and then answered `StoreError::UnknownOutcome`, as from a network backend whose
    /// answer timed out.
    LostReply,
}

/// The hook that injects `what` into writes number `from..from + n` (counting from 0).
struct Window {
    writes: AtomicU64,
    from: u64,
    n: u64,
    what: Injected,
}

/// An in-memory store whose writes number `from..from + n` (counting from 0) fail as unavailable.
fn fail_at(from: u64, n: u64) -> Hooked<InMemoryStore, Window> {
    window(from, n, Injected::Unavailable)
}

/// An in-memory store that applies writes `from..from + n` (counting from 0) and then loses
/// their reply.
fn lost_reply(from: u64, n: u64) -> Hooked<InMemoryStore, Window> {
    window(from, n, Injected::LostReply)
}

fn window(from: u64, n: u64, what: Injected) -> Hooked<InMemoryStore, Window> {
    Hooked {
        inner: InMemoryStore::new(),
        hook: Window {
            writes: AtomicU64::new(0),
            from,
            n,
            what,
        },
    }
}

impl WriteHook for Window {
    fn write<S: Store, T>(
        &self,
        inner: &S,
        op: WriteOp<'_>,
        apply: impl FnOnce(&S) -> sluice_store::Result<T>,
    ) -> sluice_store::Result<T> {
        let i = self.writes.fetch_add(1, Ordering::SeqCst);
        let hit = i >= self.from && i < self.from + self.n;
        match self.what {
            // A transient error, as a network backend would give.
            Injected::Unavailable if hit => Err(StoreError::Io {
                location: "fail-at".into(),
                source: std::io::Error::other("injected"),
            }),
            Injected::Unavailable => apply(inner),
            Injected::LostReply => {
                let v = apply(inner)?;
                if hit {
                    return Err(StoreError::UnknownOutcome {
                        op: op.name().to_owned(),
                    });
                }
                Ok(v)
            }
        }
    }
}

/// Fails writes `k..k + n` of a flush, for every `k`: the flush reports errors, never indexes a
/// blob that is not stored, and the next flush completes with nothing lost and nothing counted
/// twice.
#[test]
fn store_errors_at_any_write_lose_nothing() {
    let input = events(13, 600, 300, false);
    let want = bag(&input);
    let opts = small_chunks();
    let clean = Arc::new(fail_at(0, 0));
    let mut a = agg(clean.clone(), None, opts.clone());
    a.add(input.clone(), E0);
    let r = ok(a.flush_all(E0));
    assert!(r.blobs > 8, "{}", r.blobs);
    let writes = clean.hook.writes.load(Ordering::SeqCst);
    for from in 0..writes {
        for n in [1, 3] {
            let store = Arc::new(fail_at(from, n));
            let mut a = agg(store.clone(), None, opts.clone());
            a.add(input.clone(), E0);
            let r = a.flush_due(E0 + 10);
            assert!(!r.is_ok(), "from {from}");
            assert!(r.errors.iter().all(|e| e.is_transient()));
            // Everything indexed is stored (read_back panics otherwise), nothing twice.
            for (k, got) in &read_back(&store.inner, E0, E0 + 10) {
                assert!(
                    want.get(k).is_some_and(|w| w >= got),
                    "from {from}: unexpected or duplicated event"
                );
            }
            let mut rounds = 0;
            while !a.flush_due(E0 + 11).is_ok() || a.pending_batches() > 0 {
                rounds += 1;
                assert!(rounds < 5, "from {from}");
            }
            assert_eq!(a.pending_events(), 0);
            assert_all_stored_once(&store.inner, &want, &format!("from {from} n {n}"));
        }
    }
}

#[test]
fn failed_blob_is_not_indexed_and_retry_succeeds() {
    let (faulty, faults) = FaultyStore::new(InMemoryStore::new());
    let store = Arc::new(faulty);
    let input = events(17, 50, 1_000, true);
    let dc = input[0].dc.clone();
    let mut a = agg(store.clone(), Some("c7"), BlobOptions::default());
    a.add(input.clone(), E0);
    faults.fail_writes(true);
    let r = a.flush_due(E0 + 2);
    assert!(!r.is_ok());
    assert!(r.errors[0].is_transient(), "{}", r.errors[0]);
    assert!(
        r.errors[0].to_string().contains("storing"),
        "{}",
        r.errors[0]
    );
    assert_eq!((r.blobs, r.events), (0, 0));
    assert!(store.inner().get_epoch_index(E0, &dc).unwrap().is_empty());
    assert!(store
        .inner()
        .list_epochs(None, E0, E0 + 1)
        .unwrap()
        .is_empty());
    assert_eq!(a.pending_events(), 50);
    faults.fail_writes(false);
    // Now retry the first aggregator: succeeds, nothing lost.
    let r = ok(a.flush_due(E0 + 3));
    assert_eq!(r.events, 50);
    assert_eq!(a.pending_events(), 0);
    assert_eq!(read_back(store.inner(), E0, E0 + 1), bag(&input));
    let c = total_counts(store.inner(), E0, E0 + 1);
    assert_eq!(c.stored, 50);
}

/// Events that cannot be encoded (not a map, nested beyond the encoder's limit) or that do not
/// fit a chunk (with oversized events refused) are dropped and counted; the rest of their group
/// is stored.
#[test]
fn unencodable_events_are_dropped_and_counted() {
    let input = events(21, 300, 1_000, true);
    let mut bad = input[0].clone();
    bad.event = EventBody::Value(sereal::Value::Int(5));
    let mut deep = input[1].clone();
    let mut v = sereal::Value::Int(1);
    for _ in 0..600 {
        v = sereal::Value::Array(vec![v]);
    }
    let mut deep_value = deep.event.to_value().unwrap();
    if let sereal::Value::Hash(h) = &mut deep_value {
        h.push((sereal::Key::from("deep"), v));
    }
    deep.event = EventBody::Value(deep_value);
    let mut huge = input[2].clone();
    let mut huge_value = huge.event.to_value().unwrap();
    if let sereal::Value::Hash(h) = &mut huge_value {
        // Incompressible, so that its chunk stays over the limit.
        let mut x = 1u64;
        let text: String = (0..20_000)
            .map(|_| {
                x = sluice_gen::mix64(x);
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        h.push((sereal::Key::from("huge"), sereal::Value::String(text)));
    }
    huge.event = EventBody::Value(huge_value.clone());
    for allow_oversized_events in [true, false] {
        let store = Arc::new(InMemoryStore::new());
        let blob = BlobOptions {
            chunk_limit: 8_000,
            allow_oversized_events,
            ..BlobOptions::default()
        };
        let mut agg = Aggregator::new(
            AggregatorConfig {
                blob,
                ..AggregatorConfig::default()
            },
            store.clone(),
        )
        .unwrap();
        let mut all = input.clone();
        all.extend([bad.clone(), deep.clone(), huge.clone()]);
        agg.add(all, E0);
        let report = agg.flush_all(E0 + 10);
        let dropped = if allow_oversized_events { 2 } else { 3 };
        assert_eq!(report.dropped_events, dropped);
        assert!(!report.errors.is_empty());
        let mut want = bag(&input);
        if allow_oversized_events {
            *want.entry(json(&huge_value)).or_insert(0) += 1;
        }
        assert_eq!(read_back(&*store, E0, E0 + 10), want);
        let counts = total_counts(&*store, E0, E0 + 10);
        assert_eq!(counts.stored, want.values().sum::<usize>() as u64);
        assert_eq!(counts.dropped.values().sum::<u64>(), dropped);
    }
}

/// Writes `k..k + n` of a flush are applied but answered `UnknownOutcome`, for every `k`: the
/// aggregator retries them, and in the end every event is stored once and counted once (the
/// counts token makes the retried add a no-op). `FlushReport::stored` lists each stored chunk
/// exactly once, with the bytes the store holds, and only once it is indexed.
#[test]
fn unknown_outcomes_are_retried_without_double_counts() {
    let input = events(23, 600, 300, false);
    let want = bag(&input);
    let opts = small_chunks();
    let clean = Arc::new(lost_reply(0, 0));
    let mut a = agg(clean.clone(), Some("c1"), opts.clone());
    a.add(input.clone(), E0);
    ok(a.flush_all(E0));
    let writes = clean.hook.writes.load(Ordering::SeqCst);
    assert!(writes > 10, "{writes}");
    for from in 0..writes {
        for n in [1, 2] {
            let store = Arc::new(lost_reply(from, n));
            let mut a = agg(store.clone(), Some("c1"), opts.clone());
            a.add(input.clone(), E0);
            let mut listed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            let mut rounds = 0;
            loop {
                let r = a.flush_due(E0 + 10 + rounds);
                assert!(r.errors.iter().all(|e| e.is_transient()), "{:?}", r.errors);
                let clean_round = r.is_ok();
                for b in r.stored {
                    let ek = EpochKey::new(b.epoch, &b.dc).unwrap();
                    let indexed = store.inner.get_epoch_index(b.epoch, &b.dc).unwrap();
                    assert!(b.events > 0 && !b.chunks.is_empty(), "{b:?}");
                    for c in b.chunks {
                        assert!(
                            indexed.contains(&c.entry),
                            "{} reported before it is indexed",
                            c.key
                        );
                        assert_eq!(
                            EventKey::from_parts(&ek, &IndexEntry::parse(&c.entry).unwrap())
                                .to_string(),
                            c.key
                        );
                        assert!(
                            listed.insert(c.key.clone(), c.data).is_none(),
                            "{} reported twice",
                            c.key
                        );
                    }
                }
                if clean_round && a.pending_batches() == 0 {
                    break;
                }
                rounds += 1;
                assert!(rounds < 5, "from {from} n {n}");
            }
            assert_all_stored_once(&store.inner, &want, &format!("from {from} n {n}"));
            // The hook listed every indexed chunk, with the stored bytes.
            let mut indexed = 0;
            for (epoch, dc) in store.inner.list_epochs(None, E0, E0 + 10).unwrap() {
                let ek = EpochKey::new(epoch, &dc).unwrap();
                for entry in store.inner.get_epoch_index(epoch, &dc).unwrap() {
                    let key =
                        EventKey::from_parts(&ek, &IndexEntry::parse(&entry).unwrap()).to_string();
                    let stored = store
                        .inner
                        .get_blob(&Namespace::Events, BlobKey::new(epoch, &key))
                        .unwrap();
                    assert_eq!(listed.get(&key), stored.as_ref(), "{key}");
                    indexed += 1;
                }
            }
            assert_eq!(indexed, listed.len());
        }
    }
}

/// The blobs (key, bytes) a flush stored, in flush order.
fn stored_blobs(r: &FlushReport) -> Vec<(String, Vec<u8>)> {
    r.stored
        .iter()
        .flat_map(|b| &b.chunks)
        .map(|c| (c.key.clone(), c.data.clone()))
        .collect()
}

#[test]
fn reused_buffers_leak_nothing_into_the_next_second() {
    // The aggregator keeps its closed groups' encoders (body, dedupe tables) and its finished-
    // document buffer for the next groups. A big second followed by a small one, both through
    // the reused buffers, must store the small second byte for byte as a fresh aggregator does.
    for profile in [
        sluice_blob::Profile::default(),
        sluice_blob::Profile::Original,
    ] {
        let blob = BlobOptions::with_profile(profile);
        let gen = |seed: u64, count: usize, second: i64| {
            ingest_generated(&GenConfig {
                epoch_start: E0 + second,
                events_per_second: count as u32,
                ..GenConfig::mixed(seed, count)
            })
        };
        let (big, small) = (gen(11, 4_000, 0), gen(12, 300, 1));

        let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
        let mut reused = agg(store, None, blob.clone());
        reused.add(big, E0);
        let first = stored_blobs(&ok(reused.flush_due(E0 + 2)));
        // Opened after the big second closed: these groups take its encoders and buffer.
        reused.add(small.clone(), E0 + 2);
        let second = stored_blobs(&ok(reused.flush_due(E0 + 3)));

        let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
        let mut fresh = agg(store, None, blob);
        fresh.add(small, E0 + 2);
        let want = stored_blobs(&ok(fresh.flush_due(E0 + 3)));

        assert!(
            !want.is_empty(),
            "{profile}: the small second stored nothing"
        );
        let size = |v: &[(String, Vec<u8>)]| v.iter().map(|(_, b)| b.len()).sum::<usize>();
        assert!(
            size(&first) > 4 * size(&want),
            "{profile}: the first second must be the bigger one ({} vs {} bytes)",
            size(&first),
            size(&want)
        );
        assert_eq!(second.len(), want.len(), "{profile}: chunk count");
        for ((key, got), (want_key, want_bytes)) in second.iter().zip(&want) {
            assert_eq!(key, want_key, "{profile}");
            assert!(
                got == want_bytes,
                "{profile}: {key} differs from a fresh aggregator's"
            );
        }
    }
}

#[test]
fn a_big_streams_encoder_is_kept_and_its_next_second_stored_as_by_a_fresh_one() {
    // One stream big enough that its encoder passes 4 MiB: kept (within `max_spare_bytes`) for
    // the stream's next second, whose blob must be byte for byte a fresh aggregator's.
    let gen = |seed: u64, count: usize, second: i64| {
        let mut cfg = GenConfig::web(seed, count);
        cfg.dcs = vec!["ams1".into()];
        cfg.subtypes.web = vec!["www".into()];
        cfg.epoch_start = E0 + second;
        cfg.events_per_second = count as u32;
        ingest_generated(&cfg)
    };
    // (Two payloads: one would pass the 8 MiB payload limit.)
    let big_second = || [gen(21, 10_000, 0), gen(23, 10_000, 0)].concat();
    let (big, next) = (big_second(), gen(22, 3_000, 1));
    let blob = BlobOptions::default();

    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let mut reused = agg(store, None, blob.clone());
    assert_eq!(reused.spare_bytes(), 0);
    reused.add(big, E0);
    ok(reused.flush_due(E0 + 2));
    let kept = reused.spare_bytes();
    assert!(
        kept > 4 << 20,
        "the big encoder was not kept ({kept} bytes)"
    );
    reused.add(next.clone(), E0 + 2);
    assert_eq!(
        reused.spare_bytes(),
        0,
        "the stream's next second took it back"
    );
    let second = stored_blobs(&ok(reused.flush_due(E0 + 3)));
    assert_eq!(reused.spare_bytes(), kept, "and gave it back");

    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let mut fresh = agg(store, None, blob);
    fresh.add(next, E0 + 2);
    let want = stored_blobs(&ok(fresh.flush_due(E0 + 3)));
    assert!(!want.is_empty());
    assert_eq!(second, want, "the reused encoder changed the stored bytes");

    // A budget below the encoder: nothing big is kept.
    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let cfg = AggregatorConfig {
        grace_secs: 0,
        blob: BlobOptions::default(),
        max_spare_bytes: 1 << 20,
        ..AggregatorConfig::default()
    };
    let mut small_budget = Aggregator::new(cfg, store).unwrap();
    small_budget.add(big_second(), E0);
    ok(small_budget.flush_due(E0 + 2));
    assert_eq!(small_budget.spare_bytes(), 0);
}
