//! Helpers of the Cassandra end-to-end tests: events with unique ids, sending them with
//! `sluice emit` (HTTP, TCP, UDP), reading them back with `sluice cat --store`, and the
//! exactly-once check.
//!
//! Contract: every wait is bounded by its caller's limit; a keyspace made by [`Keyspace`] is
//! dropped when it goes out of scope.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_store::Retention;
use sluice_store_cassandra::testing::fresh_keyspace;
use sluice_store_cassandra::{CassandraConfig, CassandraStore};
use sluice_test_support::metrics;

/// A keyspace of the test's own on `hosts`, dropped at the end.
pub struct Keyspace {
    pub hosts: Vec<String>,
    pub name: String,
}

impl Keyspace {
    pub fn new(hosts: &[String], prefix: &str) -> Keyspace {
        Keyspace {
            hosts: hosts.to_vec(),
            name: fresh_keyspace(prefix),
        }
    }

    /// The store URL with extra query options (e.g. `rf=3&write_cl=quorum`).
    pub fn url(&self, options: &str) -> String {
        format!(
            "cassandra://{}/{}?{options}",
            self.hosts.join(","),
            self.name
        )
    }
}

impl Drop for Keyspace {
    fn drop(&mut self) {
        let config = CassandraConfig::new(self.hosts.clone(), &self.name);
        if let Ok(s) = CassandraStore::open_read_only(config, Retention::default()) {
            let _ = s.drop_keyspace();
        }
    }
}

/// `n` NDJSON events of `epoch` and `dc`, ids `<prefix>-<i>`, over three (type, subtype)s.
pub fn events(prefix: &str, n: usize, epoch: i64, dc: &str) -> Vec<String> {
    (0..n)
        .map(|i| {
            let (t, s) = [("WEB", "www"), ("WEB", "api"), ("CRON", "")][i % 3];
            format!(
                "{{\"epoch\":{epoch},\"dc\":\"{dc}\",\"type\":\"{t}\",\"subtype\":\"{s}\",\"id\":\"{prefix}-{i}\",\"pad\":\"{}\"}}",
                "x".repeat(i % 50)
            )
        })
        .collect()
}

/// Sends `lines` with `sluice emit --<transport> <addr>`; whether emit succeeded (for TCP and
/// HTTP: every event acknowledged).
pub fn emit(transport: &str, addr: &str, lines: &[String]) -> bool {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["emit", &format!("--{transport}"), addr, "--timeout", "10"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn emit");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for l in lines {
            if stdin.write_all(l.as_bytes()).is_err() || stdin.write_all(b"\n").is_err() {
                break;
            }
        }
    }
    let out = child.wait_with_output().expect("emit");
    if !out.status.success() {
        eprintln!("emit failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

/// The `id` of each event `sluice cat --store url` prints for `[from, to)`, with how often.
pub fn cat_ids(url: &str, from: i64, to: i64) -> Option<BTreeMap<String, usize>> {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "cat",
            "--store",
            url,
            "--from",
            &from.to_string(),
            "--to",
            &to.to_string(),
        ])
        .output()
        .expect("cat");
    if !out.status.success() {
        eprintln!("cat failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let mut ids = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("cat prints JSON");
        let id = v["id"].as_str().unwrap_or("").to_owned();
        *ids.entry(id).or_insert(0) += 1;
    }
    Some(ids)
}

/// Waits (up to `within`) until `cat` returns every id of `want`, then asserts each of them
/// exactly once and no id outside `allowed` (ids sent without an acknowledgement may be
/// there, once).
pub fn assert_exactly_once(
    url: &str,
    from: i64,
    to: i64,
    want: &BTreeSet<String>,
    allowed: &BTreeSet<String>,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let got = cat_ids(url, from, to).unwrap_or_default();
        let missing = want.iter().filter(|id| !got.contains_key(*id)).count();
        if missing == 0 {
            let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
            assert!(twice.is_empty(), "ids read more than once: {twice:?}");
            let unknown: Vec<_> = got
                .keys()
                .filter(|id| !want.contains(*id) && !allowed.contains(*id))
                .collect();
            assert!(unknown.is_empty(), "ids never sent: {unknown:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} acknowledged ids not readable after {within:?}",
            want.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The ids of `lines`.
pub fn ids(lines: &[String]) -> BTreeSet<String> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            v["id"].as_str().expect("id").to_owned()
        })
        .collect()
}

/// A metric's value from `GET /metrics` (`name` is a family, or a family with labels as
/// printed). Panics when the server does not answer or has no such series: a missing metric is
/// a failure, never a zero.
pub fn metric(base: &str, name: &str) -> f64 {
    metrics::series(&metrics::fetch_url(base), name)
}
