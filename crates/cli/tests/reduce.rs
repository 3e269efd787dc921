//! `sluice cat --group-by … --agg … --window …` on a data directory written by the collector's
//! own pipeline: the rows equal the same grouping done here on the events as written.

use std::collections::BTreeMap;
use std::path::Path;

mod common;
use common::{ams1, assert_success};

const EPOCH: i64 = 1_700_000_000;

fn cat(dir: &Path, extra: &[&str]) -> std::process::Output {
    common::cat_data_with(dir, &EPOCH.to_string(), &(EPOCH + 100).to_string(), extra)
}

#[test]
fn reduce_rows_equal_the_grouping_of_the_written_events() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reduce-data");
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = sluice_gen::GenConfig {
        epoch_start: EPOCH,
        events_per_second: 300,
        ..sluice_gen::GenConfig::mixed(9, 1500)
    };
    let written = common::write_store(&dir, &cfg, ams1(), EPOCH + 10);

    let out = cat(
        &dir,
        &[
            "--group-by",
            "type,status",
            "--agg",
            "count,avg:ms",
            "--agg",
            "max:ms",
            "--window",
            "2s",
        ],
    );
    assert_success(&out);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json row"))
        .collect();

    // The same grouping, done here: (window, type, status) → (count, ms values).
    let mut want: BTreeMap<(i64, String, String), (u64, Vec<f64>)> = BTreeMap::new();
    for e in &written {
        let epoch = e["epoch"].as_i64().expect("epoch");
        let k = (
            epoch - epoch % 2,
            e["type"].to_string(),
            e["status"].to_string(),
        );
        let g = want.entry(k).or_default();
        g.0 += 1;
        if let Some(ms) = e.get("ms").and_then(|v| v.as_f64()) {
            g.1.push(ms);
        }
    }
    assert_eq!(rows.len(), want.len());
    let mut windows = Vec::new();
    for r in &rows {
        let keys: Vec<&str> = r
            .as_object()
            .expect("row")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["window", "type", "status", "count", "avg:ms", "max:ms"]
        );
        let k = (
            r["window"].as_i64().expect("window"),
            r["type"].to_string(),
            r["status"].to_string(),
        );
        windows.push(k.0);
        let (count, ms) = want.get(&k).unwrap_or_else(|| panic!("unexpected row {r}"));
        assert_eq!(r["count"].as_u64(), Some(*count), "{r}");
        if ms.is_empty() {
            assert!(r["avg:ms"].is_null() && r["max:ms"].is_null(), "{r}");
        } else {
            let avg = ms.iter().sum::<f64>() / ms.len() as f64;
            let got = r["avg:ms"].as_f64().expect("avg");
            assert!(
                (got - avg).abs() <= 1e-9 * avg.abs().max(1.0),
                "{r} vs {avg}"
            );
            let max = ms.iter().cloned().fold(f64::MIN, f64::max);
            assert_eq!(r["max:ms"].as_f64(), Some(max), "{r}");
        }
    }
    assert!(
        windows.windows(2).all(|w| w[0] <= w[1]),
        "rows in window order"
    );
    assert!(windows.len() > 3);

    // Sereal output: the same rows, one document each.
    let ser = cat(&dir, &["--group-by", "type", "--format", "sereal"]);
    assert_success(&ser);
    let mut docs = Vec::new();
    let mut at = 0;
    let mut decoder = sereal::Decoder::new();
    while at < ser.stdout.len() {
        let doc = decoder
            .decode_document(&ser.stdout[at..])
            .unwrap_or_else(|e| panic!("sereal row: {e}"));
        docs.push(doc.body);
        at += doc.len;
    }
    let total: i64 = docs
        .iter()
        .map(|d| {
            d.get("count")
                .and_then(sereal::Value::as_i64)
                .expect("count")
        })
        .sum();
    assert_eq!(total as usize, written.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reduce_flags_are_checked() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reduce-empty");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    for (args, want) in [
        (
            vec!["--group-by", "a", "--select", "b"],
            "--select cannot be combined",
        ),
        (vec!["--agg", "median:ms"], "unknown function \"median\""),
        (vec!["--agg", "sum"], "sum needs a path"),
        (vec!["--window", "0s"], "at least 1 second"),
        (vec!["--group-by", "a["], "--group-by \"a[\""),
    ] {
        let out = cat(&dir, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--count-by` is a ranked `--group-by … --agg count`; `--top N --by FIELD` keeps the N events
/// with the largest field: both equal the same computation done here on the written events.
#[test]
fn count_by_and_top_rank_like_the_written_events() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rank-data");
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = sluice_gen::GenConfig {
        epoch_start: EPOCH,
        events_per_second: 300,
        ..sluice_gen::GenConfig::mixed(11, 900)
    };
    let written = common::write_store(&dir, &cfg, ams1(), EPOCH + 10);

    let out = cat(&dir, &["--count-by", "type", "--top", "2"]);
    assert_success(&out);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json row"))
        .collect();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for e in &written {
        *counts
            .entry(e["type"].as_str().unwrap_or("").to_owned())
            .or_default() += 1;
    }
    let mut want: Vec<(String, u64)> = counts.into_iter().collect();
    want.sort_by_key(|w| std::cmp::Reverse(w.1));
    want.truncate(2);
    let got: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["type"].as_str().unwrap().to_owned(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);

    let out = cat(
        &dir,
        &["--type", "WEB", "--top", "5", "--by", "timings.total_ms"],
    );
    assert_success(&out);
    let top: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["timings"]["total_ms"]
                .as_f64()
                .expect("ms")
        })
        .collect();
    let mut all: Vec<f64> = written
        .iter()
        .filter(|e| e["type"] == "WEB")
        .filter_map(|e| e["timings"]["total_ms"].as_f64())
        .collect();
    all.sort_by(|a, b| b.total_cmp(a));
    all.truncate(5);
    assert_eq!(top, all);

    for (args, needle) in [
        (&["--top", "3"][..], "--top N needs --by"),
        (&["--by", "ms"][..], "--by needs --top"),
        (&["--count-by", "type", "--by", "nope"][..], "not a column"),
        (
            &["--count-by", "type", "--group-by", "status"][..],
            "use one or the other",
        ),
    ] {
        let out = cat(&dir, args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `--agg p95:…,distinct:…,count_if:…,ratio:…` equal what the written events give, computed
/// here: quantiles within 1 % of the exact value (rank ⌊q·(n−1)⌋), distinct counts exact while
/// small and within 3 × 1.04/√2048 beyond, conditional counts exact.
#[test]
fn sketch_and_conditional_aggregates_match_the_written_events() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reduce-sketch-data");
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = sluice_gen::GenConfig {
        epoch_start: EPOCH,
        events_per_second: 1000,
        ..sluice_gen::GenConfig::mixed(13, 6000)
    };
    let written = common::write_store(&dir, &cfg, ams1(), EPOCH + 10);
    let out = cat(
        &dir,
        &[
            "--group-by",
            "type",
            "--agg",
            "count,p95:timings.total_ms,p50:bytes,distinct:ip,distinct:host",
            "--agg",
            "count_if:status >= 500,ratio:status in (500, 502, 503)",
        ],
    );
    assert_success(&out);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json row"))
        .collect();
    let types: std::collections::BTreeSet<&str> =
        written.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(rows.len(), types.len());
    let bound = 3.0 * 1.04 / 2048f64.sqrt();
    let mut checked = (0, 0, 0);
    for r in &rows {
        let ty = r["type"].as_str().expect("type");
        let events: Vec<&serde_json::Value> = written.iter().filter(|e| e["type"] == ty).collect();
        assert_eq!(r["count"].as_u64(), Some(events.len() as u64), "{r}");
        for (label, path, q) in [
            ("p95:timings.total_ms", &["timings", "total_ms"][..], 0.95),
            ("p50:bytes", &["bytes"][..], 0.5),
        ] {
            let mut values: Vec<f64> = events
                .iter()
                .filter_map(|e| path.iter().try_fold(*e, |v, k| v.get(k))?.as_f64())
                .collect();
            values.sort_by(f64::total_cmp);
            if values.is_empty() {
                assert!(r[label].is_null(), "{r}");
                continue;
            }
            let want = values[(q * (values.len() as f64 - 1.0)) as usize];
            let got = r[label].as_f64().expect(label);
            eprintln!(
                "{ty} {label}: {got} vs exact {want} ({:.3} %)",
                100.0 * (got - want).abs() / want.abs()
            );
            assert!(
                (got - want).abs() <= 0.01 * want.abs(),
                "{ty} {label}: {got} vs {want}"
            );
            checked.0 += 1;
        }
        for (label, key) in [("distinct:ip", "ip"), ("distinct:host", "host")] {
            let exact: std::collections::HashSet<String> = events
                .iter()
                .filter(|e| !e[key].is_null())
                .filter_map(|e| e.get(key).map(|v| v.to_string()))
                .collect();
            let got = r[label].as_u64().expect(label) as f64;
            let n = exact.len() as f64;
            eprintln!("{ty} {label}: {got} vs exact {n}");
            if exact.len() <= 160 {
                assert_eq!(got, n, "{ty} {label}: exact while small");
            } else {
                assert!((got - n).abs() <= bound * n, "{ty} {label}: {got} vs {n}");
                checked.1 += 1;
            }
        }
        let status = |e: &&&serde_json::Value| e["status"].as_i64();
        let errors = events
            .iter()
            .filter(|e| status(e).is_some_and(|s| s >= 500))
            .count();
        let listed = events
            .iter()
            .filter(|e| status(e).is_some_and(|s| [500, 502, 503].contains(&s)))
            .count();
        assert_eq!(
            r["count_if:status >= 500"].as_u64(),
            Some(errors as u64),
            "{r}"
        );
        let ratio = r["ratio:status in (500, 502, 503)"]
            .as_f64()
            .expect("ratio");
        assert!(
            (ratio - listed as f64 / events.len() as f64).abs() < 1e-12,
            "{r}"
        );
        checked.2 += errors;
    }
    assert!(
        checked.0 >= 2 && checked.2 > 0,
        "{checked:?}: quantiles and errors were checked"
    );
    assert!(
        checked.1 >= 1,
        "{checked:?}: a distinct count past the explicit form was checked"
    );

    for (args, want) in [
        (vec!["--agg", "p101:ms"], "unknown function \"p101\""),
        (
            vec!["--agg", "count_if"],
            "count_if needs a --where expression",
        ),
        (vec!["--agg", "ratio:status >"], "ratio:status >"),
    ] {
        let out = cat(&dir, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
