//! A reduce read takes the lazy path (`Plan::narrow_read`: sparse events, or each chunk cut to
//! its own top N) and gives the rows a reduce of the whole events gives: a corpus of reduce
//! specs over `sluice_gen` events (and a few awkward hand-made ones) stored as real blobs in an
//! `InMemoryStore`, each run twice — the reducer fed whole decoded events (the full-event path,
//! kept here as the reference) and the reducer fed what the narrowed read hands out — with and
//! without a `--where`. The rows must be identical, and the narrowed read must really be
//! narrow (sparse events; fewer events than the range for a top-N).

use std::collections::BTreeMap;

use sereal::{Path, Value};
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey, Profile};
use sluice_gen::{GenConfig, Generator};
use sluice_reader::reduce::{Plan, PlanArgs, Sink};
use sluice_reader::request::SparseShape;
use sluice_reader::{RangeReader, ReadItem, ReadOptions, ReadRequest, Selection};
use sluice_store::{BlobKey, InMemoryStore, Namespace, Store};

const START: i64 = 1_700_000_000;
const EPOCHS: i64 = 4;

/// Events with shapes `sluice_gen` never makes: numeric strings, nested arrays, a `[*]` over a
/// hash, refs, null vs missing, a key with a dot, a float group key equal to an int one.
const AWKWARD: &[&str] = &[
    r#"{"type":"ODD","dc":"ams1","subtype":"","status":"503","timings":{"total_ms":"12.5"},"experiments":[{"id":"4001"},{"id":4002.5},{"id":null}],"k.dot":{"x":1}}"#,
    r#"{"type":"ODD","dc":"ams1","subtype":"","status":503.0,"timings":null,"experiments":{"a":{"id":7},"b":{"id":8}},"k.dot":{"x":2}}"#,
    r#"{"type":"ODD","dc":"ams1","subtype":"","status":null,"timings":[{"total_ms":1}],"experiments":[[{"id":1}]],"search":"x"}"#,
    r#"{"type":"ODD","dc":"ams1","subtype":"","timings":{"total_ms":1e300,"db_ms":-0.0},"experiments":[],"search":["a","b"]}"#,
    r#"{"type":"ODD","dc":"ams1","subtype":"","status":{"nested":200},"timings":{"total_ms":-3},"experiments":[{"id":-1,"variant":1},{"id":2}]}"#,
];

/// (epoch, dc, type, subtype) → events, in generation order.
type Groups = BTreeMap<(i64, String, String, String), Vec<Value>>;

fn groups() -> Groups {
    let cfg = GenConfig {
        dcs: vec!["ams1".into(), "lhr2".into()],
        events_per_second: 300,
        ..GenConfig::mixed(11, 300 * EPOCHS as usize)
    };
    let mut out = Groups::new();
    let s = |ev: &Value, k: &str| {
        ev.get(k)
            .and_then(|v| v.as_str())
            .expect("gen tag")
            .to_string()
    };
    for ev in Generator::new(cfg) {
        let epoch = ev.get("epoch").and_then(|v| v.as_i64()).expect("epoch");
        out.entry((epoch, s(&ev, "dc"), s(&ev, "type"), s(&ev, "subtype")))
            .or_default()
            .push(ev);
    }
    for (i, json) in AWKWARD.iter().enumerate() {
        let epoch = START + (i as i64 % EPOCHS);
        let ev = sereal::json::from_json_slice(json.as_bytes()).expect("awkward json");
        out.entry((epoch, "ams1".into(), "ODD".into(), String::new()))
            .or_default()
            .push(ev);
    }
    out
}

/// Stores every group as blobs (both profiles, small chunks: many chunks per second).
fn store() -> InMemoryStore {
    let store = InMemoryStore::new();
    let opts = |profile| BlobOptions {
        chunk_limit: 8 << 10,
        split_threads: 1,
        ..BlobOptions::with_profile(profile)
    };
    let mut original = BlobBuilder::new(opts(Profile::Original)).expect("builder");
    let mut default = BlobBuilder::new(opts(Profile::default())).expect("builder");
    for (n, ((epoch, dc, type_, subtype), events)) in groups().iter().enumerate() {
        let builder = if n % 2 == 0 {
            &mut original
        } else {
            &mut default
        };
        let mut entries = Vec::new();
        for blob in builder.build(events).expect("blobs") {
            let key = EventKey::new(*epoch, dc, type_, subtype, ChunkId::plain(blob.index()))
                .expect("key");
            let text = key.to_string();
            store
                .put_blob(
                    &Namespace::Events,
                    BlobKey::new(*epoch, &text),
                    blob.as_bytes(),
                )
                .expect("put");
            entries.push(key.index_entry().to_string());
        }
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        store.add_to_epoch_index(*epoch, dc, &refs).expect("index");
    }
    store
}

/// One reduce spec as a user writes it.
#[derive(Default, Clone)]
struct Spec {
    group_by: &'static [&'static str],
    agg: &'static [&'static str],
    count_by: &'static [&'static str],
    window: Option<&'static str>,
    top: Option<usize>,
    by: Option<&'static str>,
}

impl Spec {
    fn plan(&self) -> Plan {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PlanArgs {
            group_by: own(self.group_by),
            agg: own(self.agg),
            count_by: own(self.count_by),
            window: self.window.map(str::to_owned),
            top: self.top,
            by: self.by.map(str::to_owned),
            max_groups: None,
        }
        .plan(false)
        .expect("plan")
        .expect("a reduce or top plan")
    }
}

fn corpus() -> Vec<Spec> {
    let s = Spec::default;
    vec![
        Spec {
            count_by: &["status"],
            ..s()
        },
        Spec {
            count_by: &["type", "status"],
            window: Some("2s"),
            ..s()
        },
        // Missing fields group under null (WEB without `search`, CRON/LB without any).
        Spec {
            count_by: &["search"],
            top: Some(5),
            ..s()
        },
        Spec {
            group_by: &["user_id"],
            agg: &["count"],
            window: Some("1s"),
            ..s()
        },
        Spec {
            group_by: &["type"],
            agg: &[
                "count",
                "sum:timings.total_ms",
                "min:timings.total_ms",
                "max:timings.total_ms",
                "avg:timings.total_ms",
            ],
            ..s()
        },
        // `[*]` aggregates every match; a `[*]` group-by takes its first.
        Spec {
            group_by: &["dc"],
            agg: &[
                "sum:experiments[*].id",
                "avg:queries[*].ms",
                "max:queries[*].rows",
            ],
            window: Some("3s"),
            ..s()
        },
        Spec {
            group_by: &["experiments[*].id"],
            agg: &["count", "min:experiments[*].variant"],
            ..s()
        },
        Spec {
            group_by: &["experiments[0].variant", "experiments[-1].id"],
            agg: &["max:timings.db_queries", "sum:bytes"],
            window: Some("2s"),
            ..s()
        },
        // A whole map as the group key, and a path under a path read whole.
        Spec {
            group_by: &["timings"],
            agg: &["sum:timings.total_ms", "count"],
            ..s()
        },
        Spec {
            group_by: &["tls.version", "stats"],
            agg: &["avg:stats.user_s", "max:timings.response_ms"],
            ..s()
        },
        // Quoted keys, a key with a dot.
        Spec {
            group_by: &[r#""k.dot".x"#],
            agg: &[r#"sum:"timings".total_ms"#],
            ..s()
        },
        // No group: the sparse event is empty.
        Spec {
            agg: &["count"],
            window: Some("1s"),
            ..s()
        },
        // A path starting with `[*]`: whole events (every top-level value summed).
        Spec {
            group_by: &["type"],
            agg: &["sum:[*]", "count"],
            ..s()
        },
        // Ranked rows.
        Spec {
            group_by: &["path"],
            agg: &["count", "max:timings.total_ms"],
            top: Some(3),
            by: Some("max:timings.total_ms"),
            window: Some("2s"),
            ..s()
        },
        // Top events (whole), by a number, a tied field, text, a missing field; none.
        Spec {
            top: Some(5),
            by: Some("timings.total_ms"),
            ..s()
        },
        Spec {
            top: Some(7),
            by: Some("status"),
            ..s()
        },
        Spec {
            top: Some(4),
            by: Some("search"),
            ..s()
        },
        Spec {
            top: Some(3),
            by: Some("no_such_field"),
            ..s()
        },
        Spec {
            top: Some(2),
            by: Some("experiments[*].id"),
            ..s()
        },
        Spec {
            top: Some(0),
            by: Some("status"),
            ..s()
        },
    ]
}

const WHERES: &[Option<&str>] = &[
    None,
    Some("status >= 500"),
    Some(r#"type == "WEB" and timings.total_ms > 50"#),
    Some("experiments[*].id == 4001"),
    Some("not exists search"),
];

/// What a read handed the sink: the rows, and how many events (and of those, how many held a
/// field the plan does not read) came out of the reader.
struct Run {
    rows: Vec<String>,
    events: u64,
    with_request_id: u64,
    chunks: usize,
}

fn run(store: &dyn Store, plan: &Plan, selection: &Selection, narrow: bool) -> Run {
    let mut opts = ReadOptions::default();
    if narrow {
        plan.narrow_read(&mut opts);
    }
    let req = ReadRequest::selected(START, START + EPOCHS, selection.clone());
    let mut sink = Sink::new(plan.clone()).expect("sink");
    let mut rows = Vec::new();
    let (mut events, mut with_request_id) = (0, 0);
    let mut reader = RangeReader::new(store, req, opts).expect("read");
    for item in &mut reader {
        match item {
            ReadItem::Event(e) => {
                events += e.repeat;
                if e.value.get("request_id").is_some() {
                    with_request_id += e.repeat;
                }
                rows.extend(sink.push_read(&e).expect("push"));
            }
            ReadItem::Warning(w) => panic!("warning: {w}"),
            ReadItem::Notice(n) => panic!("notice: {n}"),
        }
    }
    let (rest, late) = sink.finish();
    assert_eq!(late, 0, "reads come in epoch order");
    rows.extend(rest);
    Run {
        rows: rows.iter().map(sereal::json::to_string).collect(),
        events,
        with_request_id,
        chunks: reader.stats().chunks,
    }
}

fn uses_whole_events(spec: &Spec) -> bool {
    spec.agg.iter().any(|a| a.contains(":["))
}

#[test]
fn narrowed_reduce_reads_give_the_rows_of_whole_events() {
    let store = store();
    let mut checked = 0;
    for spec in corpus() {
        let plan = spec.plan();
        for where_ in WHERES {
            let selection =
                Selection::from_texts(None, None, None, &[] as &[String], *where_).expect("where");
            let full = run(&store, &plan, &selection, false);
            let lazy = run(&store, &plan, &selection, true);
            let what = format!("{plan:?} where {where_:?}");
            assert_eq!(lazy.rows, full.rows, "{what}");
            let top_zero = matches!(plan, Plan::Top { n: 0, .. });
            assert!(
                !full.rows.is_empty() || top_zero,
                "{what}: no rows (the comparison would prove nothing)"
            );
            assert!(full.with_request_id > 0, "{what}: the full read is whole");
            match &plan {
                Plan::Reduce(_) if uses_whole_events(&spec) => {
                    assert_eq!(lazy.events, full.events, "{what}");
                }
                Plan::Reduce(_) => {
                    assert_eq!(lazy.events, full.events, "{what}: every event is reduced");
                    assert_eq!(
                        lazy.with_request_id, 0,
                        "{what}: the lazy read's events are sparse"
                    );
                }
                Plan::Top { n, .. } => {
                    // Each chunk gives at most its own top n: fewer than the range (unless
                    // the where keeps fewer than that).
                    let fewer =
                        lazy.events < full.events || full.events <= (n * lazy.chunks) as u64;
                    assert!(
                        lazy.events <= (n * lazy.chunks) as u64 && fewer,
                        "{what}: {} of {} events out of {} chunks",
                        lazy.events,
                        full.events,
                        lazy.chunks
                    );
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, corpus().len() * WHERES.len());
}

/// The rule itself: on every stored event, each needed path evaluates on the sparse event the
/// lazy read gives exactly as on the whole event (same matches, same order).
#[test]
fn sparse_events_evaluate_needed_paths_as_whole_events_do() {
    let store = store();
    let needs: Vec<Path> = [
        "status",
        "timings.total_ms",
        "timings",
        "timings.db_ms",
        "experiments[*].id",
        "experiments[0]",
        "experiments[*]",
        "queries[*].ms",
        r#""k.dot".x"#,
        "search",
        "tls.version",
        "stats.user_s",
        "no.such.path",
    ]
    .iter()
    .map(|p| Path::parse(p).expect("path"))
    .collect();
    let shape = SparseShape::of(&needs).expect("key prefixes");
    let prefixes: Vec<String> = shape.paths().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        prefixes,
        [
            "status",
            "timings",
            "experiments",
            "queries",
            r#""k.dot".x"#,
            "search",
            "tls.version",
            "stats.user_s",
            "no.such.path"
        ]
    );
    let read = |opts: ReadOptions| -> Vec<Value> {
        RangeReader::new(&store, ReadRequest::new(START, START + EPOCHS), opts)
            .expect("read")
            .map(|item| match item {
                ReadItem::Event(e) => e.value,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let whole = read(ReadOptions::default());
    let sparse = read(ReadOptions {
        needs: Some(needs.clone()),
        ..ReadOptions::default()
    });
    assert_eq!(whole.len(), sparse.len());
    assert!(whole.len() > 1000, "{} events", whole.len());
    let mut matched = 0;
    for (w, s) in whole.iter().zip(&sparse) {
        assert!(
            s.get("request_id").is_none(),
            "sparse: {}",
            sereal::json::to_string(s)
        );
        for p in &needs {
            assert_eq!(
                p.eval(s),
                p.eval(w),
                "{p} on {}",
                sereal::json::to_string(w)
            );
            matched += p.eval(w).len();
        }
    }
    assert!(matched > whole.len() * 3, "{matched} matches");
}

/// A where on the reduce's own path, and a where that keeps nothing: still the same rows (an
/// empty answer included).
#[test]
fn a_where_on_the_reduced_field_and_an_empty_answer() {
    let store = store();
    for (spec, where_) in [
        (
            Spec {
                count_by: &["status"],
                ..Spec::default()
            },
            "status in [200, 404] or timings.total_ms < 3",
        ),
        (
            Spec {
                group_by: &["type"],
                agg: &["sum:timings.total_ms"],
                ..Spec::default()
            },
            "status == 999",
        ),
    ] {
        let plan = spec.plan();
        let selection = Selection::from_texts(
            None,
            Some("WEB".into()),
            None,
            &[] as &[String],
            Some(where_),
        )
        .expect("where");
        let full = run(&store, &plan, &selection, false);
        let lazy = run(&store, &plan, &selection, true);
        assert_eq!(lazy.rows, full.rows, "{where_}");
        assert_eq!(lazy.with_request_id, 0);
    }
}

/// A chunk that cannot be decoded gives no events on either path, so the events it held must
/// not raise the bar of a top-N: here its events rank first, and the next chunk's must still
/// make the top.
#[test]
fn an_unreadable_chunk_does_not_raise_the_top_bar() {
    let store = InMemoryStore::new();
    let big: Vec<Value> = (0..20_000).map(Value::Int).collect();
    let ev = |json: &str| sereal::json::from_json_slice(json.as_bytes()).expect("json");
    let mut first = ev(r#"{"ms":1000}"#);
    if let Value::Hash(pairs) = &mut first {
        pairs.push((sereal::Key::Utf8("big".into()), Value::Array(big)));
    }
    let chunks = [
        (START, vec![first, ev(r#"{"ms":900}"#)]),
        (
            START + 1,
            vec![ev(r#"{"ms":5}"#), ev(r#"{"ms":3}"#), ev(r#"{"ms":4}"#)],
        ),
    ];
    let mut builder = BlobBuilder::new(BlobOptions::default()).expect("builder");
    for (epoch, events) in &chunks {
        let blobs = builder.build(events).expect("blob");
        assert_eq!(blobs.len(), 1);
        let key = EventKey::new(*epoch, "ams1", "WEB", "", ChunkId::plain(0)).expect("key");
        store
            .put_blob(
                &Namespace::Events,
                BlobKey::new(*epoch, &key.to_string()),
                blobs[0].as_bytes(),
            )
            .expect("put");
        store
            .add_to_epoch_index(*epoch, "ams1", &[&key.index_entry().to_string()])
            .expect("index");
    }
    let plan = Spec {
        top: Some(2),
        by: Some("ms"),
        ..Spec::default()
    }
    .plan();
    // The first chunk's 20,000 values are more than a decode may make.
    let limits = sereal::Limits {
        max_values: 10_000,
        ..sereal::Limits::default()
    };
    let rows = |narrow: bool| {
        let mut opts = ReadOptions {
            limits: limits.clone(),
            ..ReadOptions::default()
        };
        if narrow {
            plan.narrow_read(&mut opts);
        }
        let mut sink = Sink::new(plan.clone()).expect("sink");
        let mut warnings = 0;
        let req = ReadRequest::new(START, START + 2);
        for item in RangeReader::new(&store, req, opts).expect("read") {
            match item {
                ReadItem::Event(e) => assert!(sink
                    .push_repeated(0, &e.value, e.repeat)
                    .expect("push")
                    .is_empty()),
                ReadItem::Warning(_) => warnings += 1,
                ReadItem::Notice(n) => panic!("{n}"),
            }
        }
        let rows: Vec<String> = sink
            .finish()
            .0
            .iter()
            .map(sereal::json::to_string)
            .collect();
        (rows, warnings)
    };
    let full = rows(false);
    assert_eq!(
        full,
        (vec![r#"{"ms":5}"#.to_owned(), r#"{"ms":4}"#.to_owned()], 1)
    );
    assert_eq!(rows(true), full);
}
