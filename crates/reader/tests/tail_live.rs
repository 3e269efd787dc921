//! A tail fed live records as well as stored chunks delivers every event exactly once, whatever
//! the interleaving of acknowledgements, hand-overs, flushes, polls, dropped subscriptions and
//! reconnects from a printed cursor (a restart is a reconnect whose hub starts at the last
//! record). A seeded model of the server drives a real `Tail` over an in-memory store; chunks
//! carry their events' origins as the aggregator writes them.

use std::collections::{BTreeMap, VecDeque};

use sereal::{ArrayEncoder, Value};
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey};
use sluice_reader::{Cursor, LiveDoc, LivePart, ReadItem, Tail, TailOptions, TailRequest};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sluice_store::{
    BlobKey, Counts, InMemoryStore, Namespace, ReadStore, Retention, Store, StoreError, TypeSubtype,
};
use sluice_test_support::rng::Rng;

const T0: i64 = 1_700_000_000;
const DC: &str = "ams1";

/// The store as a tail sees it: every third blob fetch fails (a transient error) while `flaky`.
struct Flaky<'a> {
    inner: &'a InMemoryStore,
    flaky: AtomicBool,
    fetches: AtomicU64,
}

impl ReadStore for Flaky<'_> {
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> sluice_store::Result<Option<Vec<u8>>> {
        self.get_blobs(ns, &[key]).pop().unwrap_or(Ok(None))
    }
    fn get_blobs(
        &self,
        ns: &Namespace,
        keys: &[BlobKey<'_>],
    ) -> Vec<sluice_store::Result<Option<Vec<u8>>>> {
        keys.iter()
            .map(|k| {
                let n = self.fetches.fetch_add(1, Ordering::Relaxed);
                if self.flaky.load(Ordering::Relaxed) && n % 3 == 2 {
                    Err(StoreError::Unavailable {
                        reason: "flaky".into(),
                    })
                } else {
                    ReadStore::get_blob(self.inner, ns, *k)
                }
            })
            .collect()
    }
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> sluice_store::Result<BTreeSet<String>> {
        ReadStore::get_epoch_index(self.inner, epoch, dc)
    }
    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> sluice_store::Result<BTreeSet<String>> {
        ReadStore::get_namespace_index(self.inner, ns, epoch, dc)
    }
    fn get_catalog(
        &self,
        kind: &str,
    ) -> sluice_store::Result<std::collections::BTreeMap<String, Vec<u8>>> {
        ReadStore::get_catalog(self.inner, kind)
    }
    fn get_counts(
        &self,
        epoch: i64,
        dc: &str,
    ) -> sluice_store::Result<std::collections::BTreeMap<TypeSubtype, Counts>> {
        ReadStore::get_counts(self.inner, epoch, dc)
    }
    fn list_epochs(
        &self,
        dc: Option<&str>,
        from: i64,
        to: i64,
    ) -> sluice_store::Result<Vec<(i64, String)>> {
        ReadStore::list_epochs(self.inner, dc, from, to)
    }
    fn retention(&self) -> Retention {
        ReadStore::retention(self.inner)
    }
}

fn event(epoch: i64, type_: &str, id: u64) -> Value {
    sereal::json::from_json_value(&serde_json::json!({
        "epoch": epoch, "dc": DC, "type": type_, "subtype": "", "id": id,
    }))
}

/// A blob of the default profile: `events` with their origins, as the aggregator writes one.
fn blob(events: &[(u64, Value)]) -> sluice_blob::Blob {
    // The aggregator's encoder: the builder's options (element index on).
    let builder = BlobBuilder::new(BlobOptions::default()).unwrap();
    let mut doc = ArrayEncoder::new(builder.encoder_options().clone()).unwrap();
    for (seq, v) in events {
        doc.push(v).unwrap();
        doc.push_origin(*seq);
    }
    let mut bytes = Vec::new();
    doc.finish_into(&mut bytes).unwrap();
    let mut blobs = builder.build_document(&bytes).unwrap();
    assert_eq!(blobs.len(), 1);
    let seqs: Vec<u64> = events.iter().map(|e| e.0).collect();
    let got = blobs[0].as_blob_ref().origins().expect("origins");
    assert_eq!(got.seqs().collect::<Vec<_>>(), seqs);
    blobs.remove(0)
}

/// The model server: acknowledged records, open groups, stored chunks.
struct Server<'a> {
    collector: Option<&'static str>,
    store: &'a InMemoryStore,
    /// Every acknowledged record, by seq: its events (epoch, type, id).
    records: BTreeMap<u64, Vec<(i64, &'static str, u64)>>,
    /// Per (epoch, type): the events not stored yet, in the order they were added.
    open: BTreeMap<(i64, &'static str), Vec<(u64, u64)>>,
    /// Next chunk number per (epoch, type).
    next_chunk: BTreeMap<(i64, &'static str), u32>,
    last_seq: u64,
    next_id: u64,
}

impl Server<'_> {
    fn ack(&mut self, rng: &mut Rng, now: i64) -> u64 {
        // Notes take numbers too: records are not consecutive.
        self.last_seq += 1 + rng.below(2);
        let seq = self.last_seq;
        let mut events = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let epoch = now - rng.below(3) as i64 - if rng.below(8) == 0 { 20 } else { 0 };
            let type_ = if rng.below(2) == 0 { "WEB" } else { "API" };
            self.next_id += 1;
            events.push((epoch, type_, self.next_id));
            let group = self.open.entry((epoch, type_)).or_default();
            // A shard may add a record routed from another after later ones of its own.
            let at = if rng.below(4) == 0 {
                rng.below(group.len() as u64 + 1) as usize
            } else {
                group.len()
            };
            group.insert(at, (seq, self.next_id));
        }
        self.records.insert(seq, events);
        seq
    }

    fn live_doc(&self, seq: u64) -> LiveDoc {
        let events = &self.records[&seq];
        let mut parts: BTreeMap<(i64, &str), Vec<(u64, Value)>> = BTreeMap::new();
        for &(epoch, type_, id) in events {
            parts
                .entry((epoch, type_))
                .or_default()
                .push((seq, event(epoch, type_, id)));
        }
        LiveDoc {
            seq,
            max_epoch: events.iter().map(|e| e.0).max().unwrap(),
            parts: parts
                .into_iter()
                .map(|((epoch, type_), evs)| LivePart {
                    epoch,
                    dc: DC.into(),
                    type_: type_.into(),
                    subtype: String::new(),
                    blob: blob(&evs),
                })
                .collect(),
        }
    }

    /// Stores the open events of one group as its next chunk (split in two now and then).
    fn flush_one(&mut self, rng: &mut Rng) {
        let keys: Vec<_> = self.open.keys().copied().collect();
        if keys.is_empty() {
            return;
        }
        let key = keys[rng.below(keys.len() as u64) as usize];
        let events = self.open.remove(&key).unwrap();
        let cut = if events.len() > 1 && rng.below(3) == 0 {
            1 + rng.below(events.len() as u64 - 1) as usize
        } else {
            events.len()
        };
        for part in [&events[..cut], &events[cut..]] {
            if part.is_empty() {
                continue;
            }
            let n = self.next_chunk.entry(key).or_insert(0);
            let chunk = match self.collector {
                Some(c) => ChunkId::collector(c, *n).unwrap(),
                None => ChunkId::plain(*n),
            };
            *n += 1;
            let with_values: Vec<(u64, Value)> = part
                .iter()
                .map(|&(seq, id)| (seq, event(key.0, key.1, id)))
                .collect();
            let b = blob(&with_values);
            let k = EventKey::new(key.0, DC, key.1, "", chunk).unwrap();
            let text = k.to_string();
            self.store
                .put_blob(&Namespace::Events, BlobKey::new(key.0, &text), b.as_bytes())
                .unwrap();
            self.store
                .add_to_epoch_index(key.0, DC, &[&k.index_entry().to_string()])
                .unwrap();
        }
    }
}

fn ids(items: &[ReadItem], out: &mut Vec<u64>) {
    for i in items {
        match i {
            ReadItem::Event(e) => {
                out.push(e.value.get("id").and_then(|v| v.as_i64()).unwrap() as u64)
            }
            // A failed fetch: the chunk is tried again at the next poll.
            ReadItem::Warning(w) if w.reason.contains("flaky") => {}
            ReadItem::Warning(w) => panic!("warning: {w}"),
            ReadItem::Notice(_) => {}
        }
    }
}

/// One run of the model: returns how many events went out live and from chunks.
fn run(seed: u64, collector: Option<&'static str>, flaky: bool) -> (usize, usize) {
    let mut rng = Rng::new(seed);
    let store = InMemoryStore::new();
    let seen = Flaky {
        inner: &store,
        flaky: AtomicBool::new(flaky),
        fetches: AtomicU64::new(0),
    };
    let mut server = Server {
        collector,
        store: &store,
        records: BTreeMap::new(),
        open: BTreeMap::new(),
        next_chunk: BTreeMap::new(),
        last_seq: 0,
        next_id: 0,
    };
    let mut now = T0;
    let opts = TailOptions::default();
    let mut tail = Tail::new(
        &seen,
        TailRequest::default(),
        Cursor::at(T0 - 30),
        opts.clone(),
    );
    // The records the hub holds for the tail's subscription (None: not subscribed).
    let mut queue: Option<VecDeque<u64>> = None;
    let (mut live, mut stored) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        match rng.below(10) {
            0..=2 => {
                let seq = server.ack(&mut rng, now);
                if let Some(q) = queue.as_mut() {
                    q.push_back(seq);
                }
            }
            3 | 4 => {
                if let Some(seq) = queue.as_mut().and_then(VecDeque::pop_front) {
                    let doc = server.live_doc(seq);
                    ids(&tail.deliver_live(&doc), &mut live);
                }
            }
            5 => server.flush_one(&mut rng),
            6 | 7 => {
                if rng.below(3) == 0 {
                    now += 1;
                }
                let items = tail.poll(now).unwrap();
                ids(&items, &mut stored);
            }
            8 => {
                if queue.is_none() {
                    // Subscribe: the hub starts after the last record it released.
                    tail.go_live(collector, server.last_seq);
                    queue = Some(VecDeque::new());
                } else {
                    // Dropped (slow) or the server went away.
                    tail.end_live();
                    queue = None;
                }
            }
            _ => {
                // Reconnect (or a server restart) from the printed cursor.
                let token = tail.cursor().to_token();
                let cursor: Cursor = token.parse().unwrap();
                assert_eq!(cursor.to_token(), token);
                tail = Tail::new(&seen, TailRequest::default(), cursor, opts.clone());
                queue = None;
            }
        }
    }
    // The end: every record handed over or dropped, everything stored, polled until quiet.
    while let Some(seq) = queue.as_mut().and_then(VecDeque::pop_front) {
        ids(&tail.deliver_live(&server.live_doc(seq)), &mut live);
    }
    while !server.open.is_empty() {
        server.flush_one(&mut rng);
    }
    seen.flaky.store(false, Ordering::Relaxed);
    for _ in 0..3 {
        ids(&tail.poll(now).unwrap(), &mut stored);
    }
    let mut all: Vec<u64> = live.iter().chain(&stored).copied().collect();
    all.sort_unstable();
    let expected: Vec<u64> = (1..=server.next_id).collect();
    let dups: Vec<u64> = all
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    let missing: Vec<u64> = expected
        .iter()
        .filter(|i| all.binary_search(i).is_err())
        .copied()
        .collect();
    assert!(
        dups.is_empty() && missing.is_empty(),
        "seed {seed}: duplicates {dups:?}, missing {missing:?}"
    );
    (live.len(), stored.len())
}

#[test]
fn every_event_once_across_live_flush_drop_and_reconnect() {
    let (mut live, mut stored) = (0, 0);
    for seed in 0..200 {
        let (l, s) = run(seed, if seed % 2 == 0 { None } else { Some("c1") }, false);
        live += l;
        stored += s;
    }
    // Both paths were exercised (the check above is per run).
    assert!(live > 1000 && stored > 1000, "live {live}, stored {stored}");
}

#[test]
fn every_event_once_when_fetches_fail_now_and_then() {
    let (mut live, mut stored) = (0, 0);
    for seed in 0..200 {
        let (l, s) = run(seed, if seed % 2 == 0 { None } else { Some("c1") }, true);
        live += l;
        stored += s;
    }
    assert!(live > 1000 && stored > 1000, "live {live}, stored {stored}");
}
