//! The feed's sliding windows (count-like aggregates) against the whole merge of the same
//! states: random steps and groups, late and out-of-order states, steps with no state and gaps
//! longer than every window, states that are not well formed, windows asked out of time order,
//! trims — the answer must be exactly `StateMerger::merge`'s.

use std::collections::BTreeMap;

use sereal::{Key, Value};
use sluice_alerts::feed::Feed;
use sluice_reader::reduce::Reducer;
use sluice_rollups::StateMerger;
use sluice_substreams::registry::{self, Definition, Spec};

const T0: i64 = 1_800_000_000;

/// Window lengths asked, seconds (the rollup's step is 1 s).
const LENGTHS: [i64; 4] = [1, 3, 10, 25];

fn rollup() -> Definition {
    let spec = Spec {
        name: "web".into(),
        type_: Some("WEB".into()),
        group_by: vec!["path".into(), "dc".into()],
        agg: vec![
            "count".into(),
            "count_if:status >= 500".into(),
            "ratio:status >= 500".into(),
            "p95:ms".into(),
            "sum:ms".into(),
        ],
        step: Some("1s".into()),
        ..Spec::default()
    };
    registry::validate(&spec, T0, None).expect("rollup")
}

/// The (`by`, aggregates) rules read: count-like ones slide, the others are merged whole.
fn readings() -> Vec<(Vec<String>, Vec<String>)> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        (s(&["path"]), s(&["count", "count_if:status >= 500"])),
        (s(&[]), s(&["count"])),
        (s(&["dc", "path"]), s(&["ratio:status >= 500"])),
        (s(&["path"]), s(&["count_if:status >= 500"])),
        (s(&["path"]), s(&["p95:ms"])),
        (s(&["path"]), s(&["count", "sum:ms"])),
    ]
}

/// The states of step `w` as the rollup stores them: `events` random events reduced, in a
/// random order.
fn step_states(def: &Definition, rng: &mut fastrand::Rng, w: i64, events: usize) -> Vec<Value> {
    let spec = def.rollup_spec().expect("a rollup").expect("its spec");
    let mut reducer = Reducer::new(spec);
    for _ in 0..events {
        let dc = if rng.bool() {
            Value::String("ams".into())
        } else {
            Value::Int(rng.i64(1..3))
        };
        let event = Value::Hash(vec![
            (
                Key::from("path"),
                Value::String(format!("/p{}", rng.u32(0..7))),
            ),
            (Key::from("dc"), dc),
            (
                Key::from("status"),
                Value::Int(if rng.u8(0..4) == 0 { 503 } else { 200 }),
            ),
            (Key::from("ms"), Value::Int(rng.i64(0..300))),
        ]);
        reducer.push(w, &event).expect("push");
    }
    let mut states = reducer.finish_states();
    rng.shuffle(&mut states);
    states
}

/// A state the merger skips or merges in part: a negative count, a negative matched count, no
/// key.
fn malformed(rng: &mut fastrand::Rng, w: i64) -> Value {
    let key = (
        Key::from("k"),
        Value::Array(vec![
            Value::String("/p1".into()),
            Value::String("ams".into()),
        ]),
    );
    let accs = |m: i64| {
        (
            Key::from("a"),
            Value::Array(vec![
                Value::Hash(vec![]),
                Value::Hash(vec![(Key::from("m"), Value::Int(m))]),
                Value::Hash(vec![(Key::from("m"), Value::Int(m))]),
                Value::Hash(vec![]),
                Value::Hash(vec![]),
            ]),
        )
    };
    let w = (Key::from("w"), Value::Int(w));
    match rng.u8(0..3) {
        0 => Value::Hash(vec![w, key, (Key::from("n"), Value::Int(-2)), accs(1)]),
        1 => Value::Hash(vec![w, key, (Key::from("n"), Value::Int(4)), accs(-1)]),
        _ => Value::Hash(vec![w, (Key::from("n"), Value::Int(4)), accs(1)]),
    }
}

#[test]
fn sliding_windows_equal_the_whole_merge() {
    let def = rollup();
    let readings = readings();
    let mergers: Vec<StateMerger> = readings
        .iter()
        .map(|(by, aggs)| {
            StateMerger::new(&def, Some(by))
                .and_then(|m| m.only_aggregates(aggs))
                .expect("merger")
        })
        .collect();
    let (mut slides, mut merges, mut compared) = (0, 0, 0);
    for seed in 0..6 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut feed = Feed::new(def.clone());
        let mut stored: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
        let push = |feed: &mut Feed, stored: &mut BTreeMap<i64, Vec<Value>>, s: Value| {
            let w = sluice_rollups::states::state_step(&s).expect("a step");
            stored.entry(w).or_default().push(s.clone());
            feed.push(s);
        };
        let mut t = T0;
        for _ in 0..250 {
            // Most steps follow the last; now and then a gap longer than every window.
            t += if rng.u8(0..25) == 0 {
                rng.i64(26..60)
            } else {
                1
            };
            let w = t - 1;
            // Most steps have states, some none (a window then slides over empty steps).
            if rng.u8(0..5) != 0 {
                let n = rng.usize(0..30);
                for s in step_states(&def, &mut rng, w, n) {
                    push(&mut feed, &mut stored, s);
                }
            }
            // A late state of an earlier step (possibly one trimmed already).
            if rng.u8(0..4) == 0 {
                let late = w - rng.i64(1..35);
                let n = rng.usize(1..5);
                for s in step_states(&def, &mut rng, late, n) {
                    push(&mut feed, &mut stored, s);
                }
            }
            if rng.u8(0..30) == 0 {
                let at = w - rng.i64(0..12);
                let s = malformed(&mut rng, at);
                push(&mut feed, &mut stored, s);
            }
            feed.clear_cache();
            for ((by, aggs), merger) in readings.iter().zip(&mergers) {
                for len in LENGTHS {
                    // Mostly the current time; sometimes an earlier one (a rule behind).
                    let at = if rng.u8(0..8) == 0 {
                        t - rng.i64(1..30)
                    } else {
                        t
                    };
                    let got = feed.merged(by, aggs, at - len, at).expect("merged");
                    let want = merger.merge(stored.range(at - len..at).flat_map(|(_, v)| v));
                    assert_eq!(
                        *got,
                        want,
                        "seed {seed}, window [{}, {at}), by {by:?}, {aggs:?}",
                        at - len
                    );
                    compared += 1;
                }
            }
            // Keep what the longest window reads, sometimes a few steps more.
            if rng.bool() {
                let keep = t - 30 - rng.i64(0..5);
                feed.trim(keep);
                stored.retain(|w, _| *w >= keep);
            }
        }
        slides += feed.slides;
        merges += feed.merges;
    }
    // Both ways were taken: sliding for the count-like readings, whole merges for the others
    // and for windows holding a malformed state.
    assert!(slides > compared / 2, "{slides} slides of {compared}");
    assert!(merges > compared / 4, "{merges} merges of {compared}");
}
