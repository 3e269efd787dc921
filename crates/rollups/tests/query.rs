//! The rollup query over a real embedded store: states computed by the substream executor
//! (`backfill`, the runner's code), merged per step. A range with more groups than the rollup's
//! cap in all, but fewer in each step, keeps every group (the cap bounds a blob and step, not a
//! whole query); a step with more groups than the cap in one blob puts the rest in `_other`,
//! counted.

use sereal::Value;
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey, Profile};
use sluice_rollups::{query, RollupQuery};
use sluice_store::{BlobKey, EmbeddedStore, Namespace, Store};
use sluice_substreams::{registry, Spec};

const T0: i64 = 1_700_000_000 - 1_700_000_000 % 60;

/// One blob per second for `seconds` s, `per_second` events each with paths `/s<second>-<i>`.
fn store_events(store: &EmbeddedStore, seconds: i64, per_second: i64) {
    let mut builder =
        BlobBuilder::new(BlobOptions::with_profile(Profile::default())).expect("builder");
    for s in 0..seconds {
        let events: Vec<Value> = (0..per_second)
            .map(|i| {
                sereal::json::from_json_slice(
                    format!(r#"{{"path":"/s{s}-{i}","ms":{}}}"#, i * 10).as_bytes(),
                )
                .expect("event")
            })
            .collect();
        let epoch = T0 + s;
        for blob in builder.build(&events).expect("blob") {
            let key =
                EventKey::new(epoch, "ams", "WEB", "", ChunkId::plain(blob.index())).expect("key");
            store
                .put_blob(
                    &Namespace::Events,
                    BlobKey::new(epoch, &key.to_string()),
                    blob.as_bytes(),
                )
                .expect("put");
            store
                .add_to_epoch_index(epoch, "ams", &[&key.index_entry().to_string()])
                .expect("index");
        }
    }
    store.flush().expect("flush");
}

fn rollup(store: &EmbeddedStore, max_groups: usize, seconds: i64) -> registry::Definition {
    let spec = Spec {
        name: "web".into(),
        type_: Some("WEB".into()),
        group_by: vec!["path".into()],
        agg: vec!["count".into(), "max:ms".into()],
        step: Some("10s".into()),
        max_groups: Some(max_groups),
        ..Spec::default()
    };
    let def = registry::add(store, &spec, T0, None).expect("rollup");
    let r = sluice_substreams::backfill(store, "web", T0, T0 + seconds, Default::default())
        .expect("backfill");
    assert_eq!(r.stored, r.chunks, "{r:?}");
    assert_eq!(r.chunks as i64, seconds);
    def
}

#[test]
fn the_cap_bounds_a_blob_and_step_not_a_query() {
    let dir = tempfile::tempdir().expect("dir");
    let store = EmbeddedStore::open(dir.path()).expect("store");
    // 60 s × 3 paths, each path in one second only: 180 groups over 6 steps, 30 per step.
    store_events(&store, 60, 3);
    let def = rollup(&store, 5, 60);
    let q = |step| RollupQuery {
        from: T0,
        to: T0 + 60,
        step: Some(step),
        filter: None,
    };
    let a = query(&store, &def, &q(10)).expect("query");
    assert_eq!(a.events, 180);
    assert_eq!(a.other_events, 0, "{:?}", a.warnings);
    assert_eq!(a.rows.len(), 180);
    assert!(a.rows.iter().all(|r| r.group[0].1 != "_other"));
    let a = query(&store, &def, &q(60)).expect("query");
    assert_eq!((a.rows.len(), a.other_events), (180, 0));
}

#[test]
fn past_the_cap_in_one_blob_the_rest_is_other_and_counted() {
    let dir = tempfile::tempdir().expect("dir");
    let store = EmbeddedStore::open(dir.path()).expect("store");
    // One blob of 8 paths a second: 5 kept by the cap, 3 in `_other`.
    store_events(&store, 10, 8);
    let def = rollup(&store, 5, 10);
    let q = RollupQuery {
        from: T0,
        to: T0 + 10,
        step: Some(10),
        filter: None,
    };
    let a = query(&store, &def, &q).expect("query");
    assert_eq!(a.events, 80);
    assert_eq!(a.other_events, 30);
    let other = a
        .rows
        .iter()
        .find(|r| r.group[0].1 == "_other")
        .expect("an _other row");
    assert_eq!(other.values[0], ("count".to_string(), Some(30.0)));
}
