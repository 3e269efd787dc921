//! Tails against an in-memory store: history then live, late chunks, resume from a printed
//! cursor, filters, corrupt chunks, cursor parse errors. Time is passed in; no clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sereal::Value;
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey};
use sluice_reader::{Cursor, CursorError, Filter, ReadItem, Tail, TailOptions, TailRequest};
use sluice_store::{BlobKey, InMemoryStore, Namespace, Store};

const T0: i64 = 1_700_000_000;

/// Stores one chunk of `ids` (events `{epoch, dc, type, subtype: "", id, status}`) and lists it.
fn put(store: &dyn Store, epoch: i64, dc: &str, type_: &str, chunk: ChunkId, ids: &[i64]) {
    let events: Vec<Value> = ids
        .iter()
        .map(|id| {
            sereal::json::from_json_value(&serde_json::json!({
                "epoch": epoch, "dc": dc, "type": type_, "subtype": "", "id": id, "status": 200 + id % 400,
            }))
        })
        .collect();
    let blobs = BlobBuilder::new(BlobOptions::default())
        .unwrap()
        .build(&events)
        .unwrap();
    assert_eq!(blobs.len(), 1);
    let key = EventKey::new(epoch, dc, type_, "", chunk).unwrap();
    let text = key.to_string();
    store
        .put_blob(
            &Namespace::Events,
            BlobKey::new(epoch, &text),
            blobs[0].as_bytes(),
        )
        .unwrap();
    store
        .add_to_epoch_index(epoch, dc, &[&key.index_entry().to_string()])
        .unwrap();
}

/// Event ids `epoch * 100 + k` for chunk 0 of (epoch, dc, WEB) and (epoch, dc, API).
fn write_epoch(store: &dyn Store, epoch: i64) {
    for (d, dc) in ["ams1", "lhr2"].iter().enumerate() {
        let base = (epoch - T0) * 100 + d as i64 * 10;
        put(
            store,
            epoch,
            dc,
            "WEB",
            ChunkId::plain(0),
            &[base, base + 1],
        );
        put(store, epoch, dc, "API", ChunkId::plain(0), &[base + 5]);
    }
}

fn ids(items: &[ReadItem]) -> Vec<i64> {
    items
        .iter()
        .filter_map(|i| match i {
            ReadItem::Event(e) => Some(e.value.get("id").and_then(|v| v.as_i64()).unwrap()),
            ReadItem::Warning(_) | ReadItem::Notice(_) => None,
        })
        .collect()
}

fn warnings(items: &[ReadItem]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match i {
            ReadItem::Warning(w) => Some(w.to_string()),
            ReadItem::Event(_) | ReadItem::Notice(_) => None,
        })
        .collect()
}

fn expected(epochs: std::ops::Range<i64>) -> Vec<i64> {
    let mut out = Vec::new();
    for e in epochs {
        let b = (e - T0) * 100;
        // Order: epoch, dc, then type (API before WEB).
        out.extend([b + 5, b, b + 1, b + 15, b + 10, b + 11]);
    }
    out
}

fn opts() -> TailOptions {
    TailOptions {
        late_window_secs: 10,
        ..TailOptions::default()
    }
}

#[test]
fn history_then_live_then_late() {
    let store = InMemoryStore::new();
    for e in T0 + 1..T0 + 6 {
        write_epoch(&store, e);
    }
    let mut tail = Tail::new(&store, TailRequest::default(), Cursor::at(T0 + 1), opts());
    let now = T0 + 7;
    let first = tail.poll(now).unwrap();
    assert_eq!(ids(&first), expected(T0 + 1..T0 + 6));
    assert!(warnings(&first).is_empty());
    assert!(tail.caught_up());
    assert!(
        tail.poll(now).unwrap().is_empty(),
        "nothing new, nothing repeated"
    );

    write_epoch(&store, T0 + 6);
    write_epoch(&store, T0 + 7);
    let live = tail.poll(T0 + 8).unwrap();
    assert_eq!(ids(&live), expected(T0 + 6..T0 + 8));

    // A late chunk of epoch 4 (plain number) and one from another collector.
    put(&store, T0 + 4, "ams1", "WEB", ChunkId::plain(1), &[9001]);
    put(
        &store,
        T0 + 4,
        "lhr2",
        "WEB",
        ChunkId::collector("c2", 0).unwrap(),
        &[9002, 9003],
    );
    let late = tail.poll(T0 + 9).unwrap();
    assert_eq!(ids(&late), vec![9001, 9002, 9003]);
    assert!(tail.poll(T0 + 9).unwrap().is_empty());
    assert!(tail.poll(T0 + 12).unwrap().is_empty());
    assert_eq!(tail.cursor().watermark(), T0 + 2);

    // Later than the window: not followed by the tail (a range read still has it).
    put(&store, T0 + 1, "ams1", "WEB", ChunkId::plain(7), &[9999]);
    assert!(tail.poll(T0 + 13).unwrap().is_empty());
}

#[test]
fn catches_up_over_several_polls() {
    let store = InMemoryStore::new();
    for e in T0..T0 + 30 {
        write_epoch(&store, e);
    }
    let o = TailOptions {
        late_window_secs: 2,
        catch_up_secs: 3,
        ..TailOptions::default()
    };
    let mut tail = Tail::new(&store, TailRequest::default(), Cursor::at(T0), o);
    let mut all = Vec::new();
    let mut polls = 0;
    loop {
        polls += 1;
        all.extend(ids(&tail.poll(T0 + 40).unwrap()));
        if tail.caught_up() {
            break;
        }
    }
    assert!(polls > 1);
    assert_eq!(all, expected(T0..T0 + 30));
    assert!(tail.poll(T0 + 41).unwrap().is_empty());
}

#[test]
fn resume_from_token() {
    let store = InMemoryStore::new();
    for e in T0..T0 + 4 {
        write_epoch(&store, e);
    }
    let mut seen = Vec::new();
    let token = {
        let mut tail = Tail::new(&store, TailRequest::default(), Cursor::at(T0), opts());
        seen.extend(ids(&tail.poll(T0 + 4).unwrap()));
        put(
            &store,
            T0 + 3,
            "ams1",
            "WEB",
            ChunkId::collector("late", 3).unwrap(),
            &[7001],
        );
        put(
            &store,
            T0 + 3,
            "ams1",
            "WEB",
            ChunkId::collector("late", 4).unwrap(),
            &[7002],
        );
        seen.extend(ids(&tail.poll(T0 + 5).unwrap()));
        tail.cursor().to_token()
    };
    assert!(token.starts_with("t1."), "{token}");
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
        "{token}"
    );
    let cursor: Cursor = token.parse().unwrap();
    assert_eq!(cursor.to_token(), token);
    assert!(cursor.delivered_len() > 0);

    // While stopped: new epochs, late chunks of epochs already (partly) delivered.
    write_epoch(&store, T0 + 4);
    write_epoch(&store, T0 + 5);
    put(
        &store,
        T0 + 3,
        "ams1",
        "WEB",
        ChunkId::collector("late", 5).unwrap(),
        &[7003],
    );
    put(&store, T0 + 2, "lhr2", "API", ChunkId::plain(1), &[7004]);

    let mut tail = Tail::new(&store, TailRequest::default(), cursor, opts());
    let resumed = ids(&tail.poll(T0 + 7).unwrap());
    let mut want = vec![7004, 7003];
    want.extend(expected(T0 + 4..T0 + 6));
    assert_eq!(resumed, want);
    seen.extend(resumed);

    let mut all_stored = expected(T0..T0 + 6);
    all_stored.extend([7001, 7002, 7003, 7004]);
    all_stored.sort();
    seen.sort();
    assert_eq!(seen, all_stored, "each stored event exactly once");
    assert!(tail.poll(T0 + 8).unwrap().is_empty());
}

#[test]
fn filters_apply() {
    let store = InMemoryStore::new();
    for e in T0..T0 + 3 {
        write_epoch(&store, e);
    }
    let req = TailRequest {
        dc: Some("lhr2".into()),
        type_: Some("WEB".into()),
        filter: Some(Filter::parse("status != 210").unwrap()),
        ..TailRequest::default()
    };
    let mut tail = Tail::new(&store, req, Cursor::at(T0), opts());
    let got = ids(&tail.poll(T0 + 3).unwrap());
    assert_eq!(got, vec![11, 110, 111, 210, 211]);
    for id in &got {
        assert_eq!(id % 100 / 10, 1, "lhr2 only: {id}");
        assert!(id % 10 == 0 || id % 10 == 1, "WEB only: {id}");
    }
    // Only WEB chunks of lhr2 are recorded.
    assert_eq!(tail.cursor().delivered_len(), 3);
    write_epoch(&store, T0 + 3);
    let more = ids(&tail.poll(T0 + 4).unwrap());
    assert!(
        more.iter().all(|id| id / 100 == 3 && id % 100 / 10 == 1),
        "{more:?}"
    );
}

#[test]
fn where_filter_selects_events() {
    let store = InMemoryStore::new();
    write_epoch(&store, T0);
    let req = TailRequest {
        filter: Some(Filter::parse("status == 201").unwrap()),
        ..TailRequest::default()
    };
    let mut tail = Tail::new(&store, req, Cursor::at(T0), opts());
    assert_eq!(ids(&tail.poll(T0 + 1).unwrap()), vec![1]);
}

#[test]
fn corrupt_chunk_warns_once_and_tail_goes_on() {
    let store = InMemoryStore::new();
    write_epoch(&store, T0);
    let key = EventKey::new(T0 + 1, "ams1", "WEB", "", ChunkId::plain(0))
        .unwrap()
        .to_string();
    store
        .put_blob(
            &Namespace::Events,
            BlobKey::new(T0 + 1, &key),
            b"not a blob",
        )
        .unwrap();
    store
        .add_to_epoch_index(T0 + 1, "ams1", &["WEB::0"])
        .unwrap();
    store
        .add_to_epoch_index(T0 + 1, "ams1", &["bad entry"])
        .unwrap();
    put(&store, T0 + 1, "ams1", "WEB", ChunkId::plain(1), &[4242]);

    let mut tail = Tail::new(&store, TailRequest::default(), Cursor::at(T0), opts());
    let items = tail.poll(T0 + 2).unwrap();
    let mut want = expected(T0..T0 + 1);
    want.push(4242);
    assert_eq!(ids(&items), want);
    let w = warnings(&items);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w.iter().any(|w| w.starts_with(&key)), "{w:?}");
    assert!(
        tail.poll(T0 + 3).unwrap().is_empty(),
        "warnings are not repeated"
    );
    write_epoch(&store, T0 + 2);
    assert_eq!(ids(&tail.poll(T0 + 3).unwrap()), expected(T0 + 2..T0 + 3));
}

#[test]
fn cursor_tokens() {
    let empty = Cursor::at(T0);
    assert_eq!(empty.to_token(), format!("t1.{T0}."));
    assert_eq!(Cursor::parse(&empty.to_token()).unwrap(), empty);

    assert_eq!(Cursor::parse("x1.5."), Err(CursorError::Version));
    assert_eq!(Cursor::parse(""), Err(CursorError::Version));
    assert!(matches!(Cursor::parse("t1.5"), Err(CursorError::Syntax(_))));
    assert!(matches!(
        Cursor::parse("t1.abc."),
        Err(CursorError::Watermark(_))
    ));
    assert!(matches!(
        Cursor::parse("t1.5.!!!"),
        Err(CursorError::Encoding)
    ));
    let b64 = |s: &str| {
        // Tiny encoder for the test (standard alphabet, then made URL-safe, no padding).
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for c in s.as_bytes().chunks(3) {
            let n = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..=c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    };
    let good = Cursor::parse(&format!(
        "t1.5.{}",
        b64("0:ams1|WEB::0+2|WEB::c1.4\n3:lhr2|API:x:0")
    ))
    .unwrap();
    assert_eq!(good.delivered_len(), 5);
    assert_eq!(
        good.to_token(),
        format!("t1.5.{}", b64("0:ams1|WEB::0+2|WEB::c1.4\n3:lhr2|API:x:0"))
    );
    for bad in [
        "ams1|WEB::0",                  // no offset
        "-1:ams1|WEB::0",               // below the watermark
        "0:ams1",                       // no entries
        "0:ams1|WEB",                   // bad entry
        "0:ams1|WEB::01",               // not canonical
        "0:ams1|WEB::1|WEB::0",         // out of order
        "0:ams1|WEB::0|WEB::1",         // should be a run
        "0:ams1|WEB::0+0",              // empty run
        "1:ams1|WEB::0\n0:ams1|WEB::0", // lines out of order
    ] {
        let token = format!("t1.5.{}", b64(bad));
        assert!(
            matches!(Cursor::parse(&token), Err(CursorError::Line { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn follow_stops() {
    let store = Arc::new(InMemoryStore::new());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    put(&*store, now - 2, "ams1", "WEB", ChunkId::plain(0), &[1, 2]);
    let o = TailOptions {
        poll_interval: Duration::from_millis(20),
        ..TailOptions::default()
    };
    let mut tail = Tail::new(
        store.clone(),
        TailRequest::default(),
        Cursor::at(now - 5),
        o,
    );
    let stop = AtomicBool::new(false);
    let mut got = Vec::new();
    tail.follow(&stop, |item| {
        got.push(item);
        stop.store(true, Ordering::Relaxed);
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(ids(&got), vec![1, 2]);
    // A failing sink rolls the cursor back to before the batch.
    put(&*store, now - 1, "ams1", "WEB", ChunkId::plain(0), &[3]);
    let stop = AtomicBool::new(false);
    let before = tail.cursor().clone();
    assert_eq!(tail.follow(&stop, |_| Err("closed")), Err("closed"));
    assert_eq!(tail.cursor(), &before);
}

#[test]
fn store_outage_loses_nothing() {
    let (store, faults) = sluice_store::FaultyStore::new(InMemoryStore::new());
    write_epoch(&store, T0);
    let mut tail = Tail::new(&store, TailRequest::default(), Cursor::at(T0), opts());
    faults.fail_reads(true);
    let before = tail.cursor().clone();
    if let Ok(items) = tail.poll(T0 + 1) {
        assert!(ids(&items).is_empty() && !warnings(&items).is_empty());
    }
    assert_eq!(
        tail.cursor(),
        &before,
        "nothing recorded as delivered during the outage"
    );
    faults.fail_reads(false);
    assert_eq!(ids(&tail.poll(T0 + 2).unwrap()), expected(T0..T0 + 1));
}
