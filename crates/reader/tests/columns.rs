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

    // A reduce reads only the fields it names from the columns (equal events of a chunk as one
    // with a count, for count / min / max): same rows as from the blobs.
    for (group, aggs) in [
        (vec!["status"], vec!["count"]),
        (
            vec!["status", "method"],
            vec!["count", "min:bytes", "max:bytes"],
        ),
        (
            vec!["type", "path"],
            vec!["count", "avg:timings.total_ms", "max:bytes"],
        ),
        (vec!["tls.version"], vec!["count", "sum:bytes_out"]),
    ] {
        let spec = ReduceSpec::parse(&group, &aggs, Some("60s")).expect("spec");
        let plan = Plan::Reduce(spec.clone());
        let rows = |view: Option<&Arc<ColumnsView>>| {
            let mut opts = ReadOptions {
                columns: view.cloned(),
                ..ReadOptions::default()
            };
            plan.narrow_read(&mut opts);
            let req = ReadRequest::new(START, START + SECONDS);
            let mut r = Reducer::new(spec.clone());
            let mut reader = RangeReader::new(&*store, req, opts).expect("reader");
            let mut items = 0u64;
            for item in &mut reader {
                if let ReadItem::Event(e) = item {
                    items += 1;
                    r.push_repeated(e.key.epoch(), &e.value, e.repeat)
                        .expect("push");
                }
            }
            let stats = reader.stats();
            let rows = r.finish().iter().map(canonical).collect::<Vec<_>>();
            (rows, stats.from_columns, items, stats.events)
        };
        let (from_blobs, _, _, blob_events) = rows(None);
        let (from_columns, used, items, events) = rows(Some(&view));
        assert!(used > 0 && !from_blobs.is_empty());
        assert_eq!(from_blobs, from_columns, "{group:?} {aggs:?}");
        assert_eq!(events, blob_events, "{group:?}: every event counted");
        if aggs == ["count"] {
            // Chunks of ~700 bytes hold a few events each: fewer items all the same.
            assert!(
                items < events,
                "{group:?}: {items} items for {events} events"
            );
        }
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

/// Events whose fields change type: strings in an integer field (its `__str` sibling), integers
/// in a float field (`_ints`), `null`s and a nested conflict (`_rest`, in the first 10 s only,
/// so later files have every path in its column), booleans, arrays, missing fields.
fn conflicting(from: i64, seconds: i64) -> Groups {
    let mut out = Groups::new();
    for second in 0..seconds {
        let epoch = from + second;
        for i in 0..30i64 {
            let n = second * 30 + i;
            let status = match (n + 4) % 7 {
                0 => serde_json::json!("503"),
                1 => serde_json::json!("abc"),
                2 if second < 10 => serde_json::Value::Null,
                3 => serde_json::json!(null).take(),
                _ => serde_json::json!(200 + (n % 5) * 100),
            };
            let ms = match n % 5 {
                0 => serde_json::json!(n),
                1 if second < 10 => serde_json::json!("slow"),
                _ => serde_json::json!(n as f64 + 0.5),
            };
            let mut event = serde_json::json!({
                "epoch": epoch, "type": "T", "dc": "dc1",
                "t": {"ms": ms, "unit": "ms"},
                "ok": n % 3 == 0,
                "tags": [n % 2, "x"],
                "path": format!("/api/{}", n % 4),
            });
            if (n + 4) % 7 != 3 {
                event["status"] = status;
            }
            let value = sereal::json::from_json_slice(event.to_string().as_bytes()).expect("json");
            out.entry((epoch, "dc1".into(), "T".into(), format!("s{}", n % 2)))
                .or_default()
                .push(value);
        }
    }
    out
}

#[test]
fn filters_on_columns_agree_with_blobs_on_conflicting_types() {
    let dir = temp_dir("columns-conflicts");
    let store = Arc::new(EmbeddedStore::open(dir.join("store")).expect("store"));
    let start = HOUR_START + 100;
    write(&*store, &conflicting(start, 40), 0);
    let view = Arc::new(ColumnsView::new(Arc::new(
        LocalDir::open(&dir.join("columns")).expect("columns dir"),
    )));
    let read_store: Arc<dyn ReadStore> = store.clone();
    let config = TierConfig {
        every: 10,
        settle: 0,
        start: Some(start),
        ..TierConfig::default()
    };
    let tier = Tier::open(view.clone(), read_store, config, start).expect("tier");
    let report = tier.run_due(start + 40).expect("run");
    assert!(report.files >= 4, "{report:?}");
    for filter in [
        "status >= 500",
        "status == \"503\"",
        "status == \"abc\" or status < 300",
        "status != null",
        "status == null",
        "not exists status",
        "t.ms > 100",
        "t.ms == \"slow\"",
        "exists t.ms and t.unit == \"ms\"",
        "ok == true and path ~ \"/api/[12]\"",
        "tags[0] == 1",
        "nope == 1 or not exists t.nope",
        "path in [\"/api/0\", \"/api/3\"] and status >= 300",
    ] {
        for select in [None, Some("status,t.ms"), Some("path,tags[*]")] {
            let mut args = vec![("where", filter)];
            if let Some(s) = select {
                args.push(("select", s));
            }
            let sel = selection(&args);
            let read_facts = |view: Option<&Arc<ColumnsView>>| {
                let opts = ReadOptions {
                    columns: view.cloned(),
                    ..ReadOptions::default()
                };
                let req = ReadRequest::selected(start, start + 40, sel.clone());
                let mut reader = RangeReader::new(&*store, req, opts).expect("reader");
                let mut events = Vec::new();
                for item in &mut reader {
                    match item {
                        ReadItem::Event(e) => {
                            events.push(format!("{} {}", e.key, canonical(&e.value)))
                        }
                        other => panic!("{filter}: {other:?}"),
                    }
                }
                let facts = reader.facts().clone();
                (
                    events,
                    facts.path_seen,
                    facts.path_kinds,
                    facts.scanned,
                    reader.stats(),
                )
            };
            let (blobs, seen_b, kinds_b, scanned_b, _) = read_facts(None);
            let (cols, seen_c, kinds_c, scanned_c, stats) = read_facts(Some(&view));
            assert!(
                stats.from_columns > 0,
                "{filter}: no chunk read from columns"
            );
            assert_eq!(blobs, cols, "{filter} / {select:?}");
            assert_eq!(seen_b, seen_c, "{filter} / {select:?}: paths seen");
            assert_eq!(kinds_b, kinds_c, "{filter} / {select:?}: kinds met");
            assert_eq!(scanned_b, scanned_c, "{filter} / {select:?}");
        }
    }
}

/// Retention per subtype and type in the columns (`sluice_columns::retention`): a file holding
/// a subtype past its retention is rewritten without it, the columns alone then answer with
/// every other event, and with the blobs the answer is still whole (the uncovered chunks are
/// read from the blobs); a type past its retention loses its files.
#[test]
fn subtypes_and_types_past_their_retention_leave_the_columns() {
    use sluice_columns::parquet_file::WriteOptions;
    use sluice_columns::retention::{expire, FOREVER};
    use sluice_store::TypeRetention;

    let dir = temp_dir("columns-retention");
    let store = Arc::new(EmbeddedStore::open(dir.join("store")).expect("store"));
    let data = groups(11, 40, START, SECONDS);
    write(&*store, &data, 0);
    let view = Arc::new(ColumnsView::new(Arc::new(
        LocalDir::open(&dir.join("columns")).expect("columns dir"),
    )));
    let read_store: Arc<dyn ReadStore> = store.clone();
    let tier = tier(&view, read_store, START);
    tier.run_due(START + SECONDS + 5).expect("run");
    // A type with several subtypes: one of them gets a short retention.
    let mut subtypes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, _, t, s) in data.keys() {
        let list = subtypes.entry(t.clone()).or_default();
        if !list.contains(s) {
            list.push(s.clone());
        }
    }
    let (type_, subs) = subtypes
        .iter()
        .find(|(_, s)| s.len() >= 2)
        .expect("a type with two subtypes");
    let gone = &subs[0];
    let empty = EmbeddedStore::open(dir.join("empty")).expect("empty store");
    let all = Selection::default();
    let (blobs, _, _) = read(&*store, None, START, START + SECONDS, &all);
    let of = |line: &String, t: &str, s: Option<&str>| {
        let mut key = line.split(' ').next().unwrap_or("").split(':').skip(2);
        key.next() == Some(t) && s.is_none_or(|s| key.next() == Some(s))
    };
    assert!(blobs.iter().any(|l| of(l, type_, Some(gone))));

    let mut rules = TypeRetention::new(FOREVER);
    rules.insert(&format!("{type_}/{gone}"), 60).expect("rule");
    let now = START + SECONDS + 2 * HOUR;
    let report = expire(&view, &rules, &WriteOptions::default(), 1, now).expect("expire");
    assert!(report.files > 0, "no file rewritten: {report:?}");
    let (only, warnings, _) = read(&empty, Some(&view), START, START + SECONDS, &all);
    assert!(warnings.is_empty(), "{warnings:?}");
    let want: Vec<String> = blobs
        .iter()
        .filter(|l| !of(l, type_, Some(gone)))
        .cloned()
        .collect();
    assert_eq!(only.len(), want.len());
    assert_eq!(only, want);
    let (whole, _, _) = read(&*store, Some(&view), START, START + SECONDS, &all);
    assert_eq!(
        whole, blobs,
        "with the blobs, the purged subtype is read from them"
    );
    // Done once: the next pass finds nothing to do.
    let again = expire(&view, &rules, &WriteOptions::default(), 1, now).expect("expire");
    assert_eq!((again.files, again.deleted), (0, 0), "{again:?}");

    // The whole type past its retention: its files go.
    rules.insert(type_, 60).expect("rule");
    let report = expire(&view, &rules, &WriteOptions::default(), 1, now).expect("expire");
    assert!(report.deleted > 0, "{report:?}");
    let (only, _, _) = read(&empty, Some(&view), START, START + SECONDS, &all);
    let want: Vec<String> = blobs
        .iter()
        .filter(|l| !of(l, type_, None))
        .cloned()
        .collect();
    assert_eq!(only, want);
}
