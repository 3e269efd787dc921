//! Twenty substreams sharing one pass over a blob (shared paths, identical `where`s evaluated
//! once per event, `[*]` paths walked only when needed) give, byte for byte, the results each
//! gives run alone; a rollup among them too.

use std::sync::Arc;

use sereal::Value;
use sluice_blob::{Blob, BlobBuilder, ChunkId, EventKey};
use sluice_substreams::exec::{Compiled, Executor, PythonPool, PythonSettings};
use sluice_substreams::registry::{self, Spec};

/// Overlapping predicates: repeated texts (`status >= 500` three times, `status >= 400`
/// twice), shared paths, `[*]` outputs, conjunctions over the same fields.
const CONSUMERS: [(&str, Option<&str>); 20] = [
    ("status,path", Some("status >= 500")),
    (
        "dc,status,timings.total_ms",
        Some("timings.total_ms > 1000"),
    ),
    ("path,user_id", Some("status == 404")),
    ("lang,currency", Some("lang == \"nl\" and status >= 400")),
    ("experiments[*].id,status", Some("status >= 400")),
    ("host,timings.db_ms", Some("timings.db_ms > 100")),
    ("ip,user_agent", Some("is_bot == true")),
    ("search,lang", Some("status >= 400")),
    ("status,bytes", Some("bytes > 100000")),
    ("dc,host,status", Some("status >= 500")),
    ("request_id", Some("status == 503")),
    ("timings.render_ms", Some("timings.render_ms > 200")),
    (
        "currency,user_id",
        Some("currency == \"EUR\" and status >= 400"),
    ),
    ("path", Some("method == \"POST\"")),
    ("user_agent,status", Some("status == 429 or status >= 500")),
    ("lang,path", Some("lang == \"nl\" and status == 404")),
    ("dc,bytes", None),
    (
        "experiments[*].variant",
        Some("status == 401 or status >= 500"),
    ),
    ("host,status", Some("status == 302")),
    ("ip,status", Some("status >= 500")),
];

fn compile(spec: Spec, dir: &std::path::Path) -> Arc<Compiled> {
    let def = registry::validate(&spec, 0, None).expect("valid spec");
    Arc::new(Compiled::new(def, dir).expect("compiles"))
}

fn subs(dir: &std::path::Path) -> Vec<Arc<Compiled>> {
    let mut out: Vec<Arc<Compiled>> = CONSUMERS
        .iter()
        .enumerate()
        .map(|(i, (select, where_))| {
            compile(
                Spec {
                    name: format!("c{i}"),
                    type_: Some("WEB".into()),
                    select: select.split(',').map(str::to_owned).collect(),
                    where_: where_.map(str::to_owned),
                    budget_ms: Some(60_000),
                    ..Spec::default()
                },
                dir,
            )
        })
        .collect();
    // One more with a predicate others have (outside the type filter: every type), and a
    // rollup with one too.
    out.push(compile(
        Spec {
            name: "any_type".into(),
            select: vec!["status".into(), "experiments[*].id".into()],
            where_: Some("status >= 500".into()),
            budget_ms: Some(60_000),
            ..Spec::default()
        },
        dir,
    ));
    out.push(compile(
        Spec {
            name: "roll".into(),
            group_by: vec!["status".into()],
            agg: vec!["count".into(), "sum:bytes".into()],
            where_: Some("status >= 400".into()),
            budget_ms: Some(60_000),
            ..Spec::default()
        },
        dir,
    ));
    out
}

fn events_of(result: &[u8]) -> Vec<Value> {
    Blob::parse(result)
        .expect("result blob")
        .decode(&sereal::Limits::default())
        .expect("decodes")
}

#[test]
fn twenty_substreams_in_one_pass_equal_each_run_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = subs(dir.path());
    let mut gen = sluice_gen::Generator::new(sluice_gen::GenConfig::web(7, 3000));
    let events: Vec<Value> = (0..3000).map(|i| gen.event(i).1).collect();
    let mut builder = BlobBuilder::with_profile(Default::default()).expect("builder");
    let blobs: Vec<Vec<u8>> = events
        .chunks(1000)
        .flat_map(|c| builder.build(c).expect("builds"))
        .map(Blob::into_bytes)
        .collect();
    assert!(blobs.len() >= 3);
    let python = Arc::new(PythonPool::new(PythonSettings::default()));
    let mut shared = Executor::new(python.clone());
    let mut kept = vec![0usize; all.len()];
    for (n, data) in blobs.iter().enumerate() {
        let key = EventKey::new(
            1_700_000_000 + n as i64,
            "ams1",
            "WEB",
            "",
            ChunkId::plain(0),
        )
        .expect("key");
        let together = shared.run(&all, &key, data);
        assert_eq!(together.len(), all.len());
        for (i, sub) in all.iter().enumerate() {
            let alone = Executor::new(python.clone()).run(std::slice::from_ref(sub), &key, data);
            let t = together[i].as_ref().expect("ran together");
            let a = alone[0].as_ref().expect("ran alone");
            assert_eq!(events_of(t), events_of(a), "{} on blob {n}", sub.def.name);
            assert_eq!(t, a, "{} on blob {n}: the same bytes", sub.def.name);
            kept[i] += events_of(t).len();
        }
    }
    // The predicates keep some events and drop others (the comparison is not vacuous).
    let total = events.len();
    for (i, k) in kept.iter().enumerate() {
        assert!(
            *k < total || all[i].def.name == "c16",
            "{}: kept {k}",
            all[i].def.name
        );
    }
    assert!(
        kept.iter().filter(|k| **k > 0).count() >= 15,
        "kept: {kept:?}"
    );
    assert_eq!(kept[16], total, "c16 has no predicate");
    // The 5xx substreams agree with each other.
    assert_eq!(kept[0], kept[9]);
    assert_eq!(kept[0], kept[19]);
    assert_eq!(kept[0], kept[20]);
}

#[test]
fn a_blob_of_another_type_is_not_theirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = subs(dir.path());
    let key = EventKey::new(1_700_000_000, "ams1", "CRON", "", ChunkId::plain(0)).expect("key");
    let applying: Vec<&str> = all
        .iter()
        .filter(|c| c.def.applies(key.dc(), key.type_(), key.subtype()))
        .map(|c| c.def.name.as_str())
        .collect();
    assert_eq!(applying, ["any_type", "roll"]);
}
