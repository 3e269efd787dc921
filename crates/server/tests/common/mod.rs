//! Helpers shared by the server tests: the raw HTTP client and temp dirs of sluice-test-support, test configs,
//! order-independent comparison of events, waiting for flushes, and this test binary re-run as a
//! child server process.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_server::ServerConfig;

// Not every test binary that includes this module uses each of them.
#[allow(unused_imports)]
pub use sluice_test_support::http::{request, Http, Resp, PLAIN};
use sluice_test_support::metrics::series;
pub use sluice_test_support::temp_dir;

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn config(dir: &Path, grace: u64) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        http: Some("127.0.0.1:0".parse().unwrap()),
        tcp: Some("127.0.0.1:0".parse().unwrap()),
        udp: Some("127.0.0.1:0".parse().unwrap()),
        grace_secs: Some(grace),
        // The sharded pipeline is what the tests test (the default is the available cores).
        pipeline_threads: Some(2),
        ..ServerConfig::default()
    }
}

/// A JSON value with every map's keys sorted, as a string: an order-independent identity.
pub fn canon(v: &Value) -> String {
    pub fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

pub fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn sorted_canon(vs: &[Value]) -> Vec<String> {
    let mut c: Vec<String> = vs.iter().map(canon).collect();
    c.sort();
    c
}

/// The `/metrics` text.
pub fn metrics(addr: SocketAddr) -> String {
    request(addr, "GET", "/metrics", b"").text()
}

/// The value of metric `name` (a family, or a family with labels as printed): the sum of the
/// matching samples. Panics when there is none: a missing metric fails, never reads 0.
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    series(&metrics(addr), name)
}

/// Waits (20 s at most) until `events` are flushed and nothing is pending.
pub fn wait_flushed(addr: SocketAddr, events: u64) {
    wait_flushed_within(addr, events, Duration::from_secs(20));
}

/// [`wait_flushed`] with its bound.
pub fn wait_flushed_within(addr: SocketAddr, events: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while metric(addr, "sluice_events_flushed_total") < events as f64
        || metric(addr, "sluice_pending_events") > 0.0
    {
        assert!(
            Instant::now() < deadline,
            "not flushed in time:\n{}",
            metrics(addr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every event of `from..to` read over HTTP, as JSON values; asserts a 200.
pub fn read_events(addr: SocketAddr, from: i64, to: i64) -> Vec<Value> {
    let r = request(addr, "GET", &format!("/v1/events?from={from}&to={to}"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    lines(&r.text())
}

/// This test binary started again to run only the test `test` (a server that prints a line
/// `ADDR <addr> [<addr>...]`) with `env` = `value`; SIGKILLed on drop.
pub struct ChildServer {
    pub proc: std::process::Child,
    /// The addresses the child printed, in its order.
    pub addrs: Vec<SocketAddr>,
}

impl ChildServer {
    /// Starts the child and waits until it prints its addresses (panics if it exits first).
    pub fn start(test: &str, env: &str, value: impl AsRef<OsStr>) -> ChildServer {
        let mut proc = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(env, value)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(proc.stdout.take().unwrap());
        let addrs = loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                let _ = proc.kill();
                let _ = proc.wait();
                panic!("child exited before serving");
            }
            // The harness prints "test <name> ... " before the line.
            if let Some(i) = line.find("ADDR ") {
                break line[i + 5..]
                    .split_whitespace()
                    .map(|a| a.parse::<SocketAddr>().unwrap())
                    .collect();
            }
        };
        ChildServer { proc, addrs }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill();
    }
}
