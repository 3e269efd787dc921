//! `sluice cat` on a data directory written by the collector's own pipeline
//! (ingest → aggregate → embedded store).

use std::path::Path;
use std::process::Command;

use sluice_collector::ingest::IngestConfig;

mod common;
use common::{ams1, assert_success, now};

const EPOCH: i64 = 1_700_000_000;

fn write_store(dir: &Path) -> Vec<serde_json::Value> {
    let cfg = sluice_gen::GenConfig {
        epoch_start: EPOCH,
        events_per_second: 400,
        ..sluice_gen::GenConfig::mixed(4, 2000)
    };
    common::write_store(dir, &cfg, ams1(), EPOCH + 10)
}

fn cat(dir: &Path, extra: &[&str]) -> std::process::Output {
    common::cat_data_with(dir, &EPOCH.to_string(), &(EPOCH + 100).to_string(), extra)
}

fn lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn key(e: &serde_json::Value) -> String {
    e.to_string()
}

#[test]
fn cat_returns_every_event_once_and_filters() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cat-data");
    let _ = std::fs::remove_dir_all(&dir);
    let written = write_store(&dir);

    let out = cat(&dir, &[]);
    assert_success(&out);
    let got = lines(&out);
    assert_eq!(got.len(), written.len());
    let mut a: Vec<String> = got.iter().map(key).collect();
    let mut b: Vec<String> = written.iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same events, each once");
    let epochs: Vec<i64> = got
        .iter()
        .map(|e| e["epoch"].as_i64().expect("epoch"))
        .collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "epoch order");

    let web = lines(&cat(&dir, &["--type", "WEB", "--where", "status >= 500"]));
    let expected = written
        .iter()
        .filter(|e| e["type"] == "WEB" && e["status"].as_i64().is_some_and(|s| s >= 500))
        .count();
    assert_eq!(web.len(), expected);
    assert!(expected > 0);

    let sel = lines(&cat(&dir, &["--type", "LB", "--select", "dc,status"]));
    assert_eq!(
        sel.len(),
        written.iter().filter(|e| e["type"] == "LB").count()
    );
    assert!(sel
        .iter()
        .all(|e| e.as_object().is_some_and(|o| o.len() == 2)));

    let none = cat(&dir, &["--dc", "nowhere"]);
    assert!(none.status.success() && none.stdout.is_empty());
    let bad = cat(&dir, &["--where", "status >"]);
    assert_eq!(bad.status.code(), Some(1));
    let missing = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cat", "--data", "/nonexistent/sluice", "--from", "-5m"])
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(1));
}

fn write_at(dir: &Path, epoch: i64, seed: u64, count: usize) -> Vec<String> {
    let cfg = sluice_gen::GenConfig {
        epoch_start: epoch,
        events_per_second: 500,
        ..sluice_gen::GenConfig::mixed(seed, count)
    };
    common::write_store(dir, &cfg, IngestConfig::default(), epoch + 30)
        .iter()
        .map(key)
        .collect()
}

/// `out` succeeded and printed exactly the events `want` (in any order).
fn assert_printed(out: &std::process::Output, want: &[String], what: &str) {
    assert_success(out);
    let mut got: Vec<String> = lines(out).iter().map(key).collect();
    let mut want = want.to_vec();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{what}");
}

#[test]
fn tail_reads_history_then_resumes_from_its_cursor() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tail-data");
    let _ = std::fs::remove_dir_all(&dir);
    let now = now();
    let first = write_at(&dir, now - 40, 1, 1500);
    let cursor_file = dir.with_extension("cursor");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "tail",
            "--data",
            dir.to_str().expect("path"),
            "--from",
            &(now - 45).to_string(),
            "--limit",
            "1500",
        ])
        .args(["--cursor-file", cursor_file.to_str().expect("path")])
        .output()
        .expect("tail");
    assert_printed(&out, &first, "");
    let token = std::fs::read_to_string(&cursor_file).expect("cursor file");
    assert!(String::from_utf8_lossy(&out.stderr).contains(token.trim()));

    // More data (newer seconds); the resumed tail prints exactly it.
    let second = write_at(&dir, now - 20, 2, 700);
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "tail",
            "--data",
            dir.to_str().expect("path"),
            "--cursor",
            token.trim(),
            "--limit",
            "700",
        ])
        .output()
        .expect("tail");
    assert_printed(
        &out,
        &second,
        "exactly the new events: no gap, no duplicate",
    );
}
