//! The columnar history tier gives the same answers as the blobs: events from `sluice_gen`
//! (two dcs, three types, several subtypes, chunks of ~700 bytes so a second has many chunks),
//! stored as blobs in a real embedded store, converted by the real tier into Parquet files in a
//! real directory, then every query of a corpus read twice — blobs only, and columns where they
//! cover — and compared event by event (as JSON with sorted keys: the columns keep values, not
//! key order). Late chunks stored after a part was written, a range across an hour boundary,
//! and reads past the blobs' retention (only the columns left) are covered.

use std::collections::BTreeMap;
use std::sync::Arc;

use sereal::Value;
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey, Profile};
use sluice_columns::layout::HOUR;
use sluice_columns::location::LocalDir;
use sluice_columns::tier::{Tier, TierConfig};
use sluice_columns::verify::{canonical, verify};
use sluice_columns::view::ColumnsView;
use sluice_gen::{GenConfig, Generator};
use sluice_reader::reduce::{Plan, ReduceSpec, Reducer};
use sluice_reader::{RangeReader, ReadItem, ReadOptions, ReadRequest, Selection};
use sluice_store::{BlobKey, EmbeddedStore, Namespace, ReadStore, Store};
use sluice_test_support::temp::temp_dir;

/// An hour boundary; the data starts 90 s before it and ends 90 s after.
const HOUR_START: i64 = 1_700_002_800;
const START: i64 = HOUR_START - 90;
const SECONDS: i64 = 180;

type Groups = BTreeMap<(i64, String, String, String), Vec<Value>>;

fn groups(seed: u64, per_second: usize, from: i64, seconds: i64) -> Groups {
    let cfg = GenConfig {
        dcs: vec!["ams1".into(), "lhr2".into()],
        events_per_second: per_second as u32,
        epoch_start: from,
        ..GenConfig::mixed(seed, per_second * seconds as usize)
    };
    let mut out = Groups::new();
    for ev in Generator::new(cfg) {
        let s = |k: &str| {
            ev.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let epoch = ev.get("epoch").and_then(|v| v.as_i64()).expect("epoch");
        out.entry((epoch, s("dc"), s("type"), s("subtype")))
            .or_default()
            .push(ev);
    }
    out
}

/// Stores every group as blobs (chunk ids from `first_chunk` on, so late chunks can be added).
fn write(store: &dyn Store, groups: &Groups, first_chunk: u32) {
    let mut builder = BlobBuilder::new(BlobOptions {
        chunk_limit: 700,
        split_threads: 1,
        ..BlobOptions::with_profile(Profile::default())
    })
    .expect("builder");
    for ((epoch, dc, type_, subtype), events) in groups {
        let mut entries = Vec::new();
        for blob in builder.build(events).expect("blobs") {
            let chunk = ChunkId::plain(first_chunk + blob.index());
            let key = EventKey::new(*epoch, dc, type_, subtype, chunk).expect("key");
            store
                .put_blob(
                    &Namespace::Events,
                    BlobKey::new(*epoch, &key.to_string()),
                    blob.as_bytes(),
                )
                .expect("put");
            entries.push(key.index_entry().to_string());
        }
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        store.add_to_epoch_index(*epoch, dc, &refs).expect("index");
    }
}

/// (events as canonical JSON in read order, warnings, chunks read from columns).
fn read(
    store: &dyn ReadStore,
    view: Option<&Arc<ColumnsView>>,
    from: i64,
    to: i64,
    selection: &Selection,
) -> (Vec<String>, Vec<String>, u64) {
    let opts = ReadOptions {
        columns: view.cloned(),
        ..ReadOptions::default()
    };
    let req = ReadRequest::selected(from, to, selection.clone());
    let mut reader = RangeReader::new(store, req, opts).expect("reader");
    let mut events = Vec::new();
    let mut warnings = Vec::new();
    for item in &mut reader {
        match item {
            ReadItem::Event(e) => events.push(format!("{} {}", e.key, canonical(&e.value))),
            ReadItem::Warning(w) => warnings.push(format!("{}: {}", w.key, w.reason)),
            ReadItem::Notice(n) => warnings.push(format!("notice {}: {}", n.key, n.reason)),
        }
    }
    (events, warnings, reader.stats().from_columns)
}

fn selection(args: &[(&str, &str)]) -> Selection {
    let mut s = Selection::default();
    for (k, v) in args {
        assert!(s.accept(k, v).expect("selection"), "{k}");
    }
    s
}

/// The query corpus: every kind of selection the readers take.
fn corpus(needle: &str) -> Vec<Selection> {
    vec![
        selection(&[]),
        selection(&[("where", "status >= 500")]),
        selection(&[("where", "status >= 500"), ("select", "request_id,status")]),
        selection(&[("where", &format!("request_id == \"{needle}\""))]),
        selection(&[("type", "WEB"), ("select", "timings.total_ms,path")]),
        selection(&[("dc", "lhr2"), ("type", "LB")]),
        selection(&[("select", "tls.version,nope")]),
        selection(&[
            ("where", "exists user_id"),
            ("select", "user_id,experiments[*]"),
        ]),
    ]
}

fn tier(view: &Arc<ColumnsView>, store: Arc<dyn ReadStore>, start: i64) -> Tier {
    let config = TierConfig {
        every: 30,
        settle: 0,
        start: Some(start),
        ..TierConfig::default()
    };
    Tier::open(view.clone(), store, config, start).expect("tier")
}

#[test]
fn columns_answer_as_the_blobs_do() {
    let dir = temp_dir("columns-equal");
    let store = Arc::new(EmbeddedStore::open(dir.join("store")).expect("store"));
    let data = groups(7, 60, START, SECONDS);
    write(&*store, &data, 0);
    let needle = data
        .values()
        .flatten()
        .find_map(|e| {
            let j = sereal::json::to_json_value(e);
            j.get("request_id")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .expect("a request id");
    let view = Arc::new(ColumnsView::new(Arc::new(
        LocalDir::open(&dir.join("columns")).expect("columns dir"),
    )));
    let read_store: Arc<dyn ReadStore> = store.clone();
    let tier = tier(&view, read_store, START);
    // Parts for the first 120 s (the first hour is then closed and merged).
    let report = tier.run_due(START + 120).expect("run");
    assert!(report.files > 0 && report.rows > 0, "{report:?}");
    assert!(report.skipped.is_empty(), "{report:?}");
    assert_eq!(tier.watermark(), Some(START + 120));
    // Late chunks, stored after their seconds were written: read from blobs.
    let late = groups(8, 5, START + 10, 3);
    write(&*store, &late, 1000);

    for sel in corpus(&needle) {
        let (blobs, w1, none) = read(&*store, None, START, START + SECONDS, &sel);
        let (cols, w2, used) = read(&*store, Some(&view), START, START + SECONDS, &sel);
        assert!(w1.is_empty() && w2.is_empty(), "{sel:?}: {w1:?} {w2:?}");
        assert_eq!(none, 0);
        assert!(used > 0, "{sel:?}: no chunk read from columns");
        assert!(!blobs.is_empty(), "{sel:?}: the query finds nothing");
        assert_eq!(blobs.len(), cols.len(), "{sel:?}");
        for (i, (b, c)) in blobs.iter().zip(&cols).enumerate() {
            assert_eq!(b, c, "{sel:?}: event {i} differs");
        }
    }

    // A reduce reads only the fields it names from the columns: same rows as from the blobs.
    for (group, aggs) in [
        (vec!["status"], vec!["count"]),
        (
            vec!["type", "path"],
            vec!["count", "avg:timings.total_ms", "max:bytes"],
        ),
        (vec!["tls.version"], vec!["count", "sum:bytes_out"]),
    ] {
        let spec = ReduceSpec::parse(&group, &aggs, Some("60s")).expect("spec");
        let plan = Plan::Reduce(spec.clone());
        let rows = |view: Option<&Arc<ColumnsView>>| {
            let opts = ReadOptions {
                columns: view.cloned(),
                needs: plan.paths(),
                ..ReadOptions::default()
            };
            let req = ReadRequest::new(START, START + SECONDS);
            let mut r = Reducer::new(spec.clone());
            let mut reader = RangeReader::new(&*store, req, opts).expect("reader");
            for item in &mut reader {
                if let ReadItem::Event(e) = item {
                    r.push(e.key.epoch(), &e.value).expect("push");
                }
            }
            let used = reader.stats().from_columns;
            (r.finish().iter().map(canonical).collect::<Vec<_>>(), used)
        };
        let (from_blobs, _) = rows(None);
        let (from_columns, used) = rows(Some(&view));
        assert!(used > 0 && !from_blobs.is_empty());
        assert_eq!(from_blobs, from_columns, "{group:?} {aggs:?}");
    }

    // The merged hour replaced its parts; verify finds every covered chunk equal to its blob.
    let report = verify(&view, &*store, START, START + SECONDS).expect("verify");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.chunks > 0 && report.blobs_gone == 0, "{report:?}");
    let first_hour = view.hour(HOUR_START - HOUR).expect("hour");
    assert!(
        first_hour.files.iter().all(|f| f.path.contains("/hour-")),
        "parts of a merged hour are gone: {:?}",
        first_hour.files.iter().map(|f| &f.path).collect::<Vec<_>>()
    );

    // Rebuilding the hours takes the late chunks in.
    let rebuilt = tier.rebuild(START, START + SECONDS).expect("rebuild");
    assert!(rebuilt.files >= 2, "{rebuilt:?}");
    let (blobs, _, _) = read(&*store, None, START, START + SECONDS, &Selection::default());
    let (cols, _, _) = read(
        &*store,
        Some(&view),
        START,
        START + SECONDS,
        &Selection::default(),
    );
    assert_eq!(blobs, cols);

    // Past the blobs' retention (an empty store): the columns alone answer, same events.
    let empty = EmbeddedStore::open(dir.join("empty")).expect("empty store");
    let (only, warnings, _) = read(
        &empty,
        Some(&view),
        START,
        START + 120,
        &Selection::default(),
    );
    let (blobs, _, _) = read(&*store, None, START, START + 120, &Selection::default());
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(only, blobs);
}
