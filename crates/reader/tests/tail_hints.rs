//! A tail's field hints (`sluice_reader::hints::for_tail`): a field that few events carry is
//! not called "never seen" after a first batch without it, and never once the tail met it; a
//! field unseen over many events, or a likely typo, is still named. In-memory store, time
//! passed in.

use sereal::Value;
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey};
use sluice_reader::hints::TAIL_UNSEEN_AFTER;
use sluice_reader::{Cursor, Selection, Tail, TailOptions};
use sluice_store::{BlobKey, InMemoryStore, Namespace, Store};

const T0: i64 = 1_795_928_400;

/// Stores one chunk of (epoch, `local`, WEB, "") holding `events` and lists it.
fn put(store: &dyn Store, epoch: i64, chunk: u32, events: &[serde_json::Value]) {
    let events: Vec<Value> = events.iter().map(sereal::json::from_json_value).collect();
    let blobs = BlobBuilder::new(BlobOptions::default())
        .unwrap()
        .build(&events)
        .unwrap();
    let key = EventKey::new(epoch, "local", "WEB", "", ChunkId::plain(chunk)).unwrap();
    store
        .put_blob(
            &Namespace::Events,
            BlobKey::new(epoch, &key.to_string()),
            blobs[0].as_bytes(),
        )
        .unwrap();
    store
        .add_to_epoch_index(epoch, "local", &[&key.index_entry().to_string()])
        .unwrap();
}

fn ok(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| serde_json::json!({"type": "WEB", "path": "/ok", "status": 200, "i": i}))
        .collect()
}

fn tail(store: &InMemoryStore, selection: Selection) -> Tail<&InMemoryStore> {
    Tail::new(store, selection, Cursor::at(T0), TailOptions::default())
}

fn select(paths: &str) -> Selection {
    let mut s = Selection::default();
    for p in paths.split(',') {
        assert!(s.accept("select", p).unwrap());
    }
    s
}

/// Polls at `now` and returns the hints the tail gives then (`None`: not judged yet).
fn poll(t: &mut Tail<&InMemoryStore>, now: i64) -> Option<Vec<String>> {
    t.poll(now).unwrap();
    t.hints(now)
}

#[test]
fn a_field_few_events_carry_is_not_called_missing_after_the_first_batch() {
    let store = InMemoryStore::new();
    put(&store, T0, 0, &ok(3));
    let mut t = tail(&store, select("path,error"));
    // The first batch has no `error`: too early to say.
    assert_eq!(poll(&mut t, T0 + 1), None);
    put(
        &store,
        T0 + 1,
        0,
        &[serde_json::json!({"type": "WEB", "path": "/b", "error": "boom"})],
    );
    // Its rows had `error`: judged, nothing to say.
    assert_eq!(poll(&mut t, T0 + 2), Some(vec![]));
}

#[test]
fn a_field_never_met_is_named_after_enough_events() {
    let store = InMemoryStore::new();
    put(&store, T0, 0, &ok(10));
    let mut t = tail(&store, select("path,error"));
    assert_eq!(poll(&mut t, T0 + 1), None);
    put(&store, T0 + 1, 0, &ok(TAIL_UNSEEN_AFTER as usize));
    assert_eq!(
        poll(&mut t, T0 + 2),
        Some(vec!["field `error` never seen in this range".to_string()])
    );
}

#[test]
fn a_likely_typo_is_named_at_once() {
    let store = InMemoryStore::new();
    put(&store, T0, 0, &ok(3));
    let mut t = tail(&store, select("stauts"));
    let hints = poll(&mut t, T0 + 1).expect("judged at once");
    assert_eq!(
        hints,
        vec!["field `stauts` never seen in this range; did you mean `status`?".to_string()]
    );
}
