//! Helpers shared by the server tests: a minimal HTTP/1.1 client on a TcpStream, test configs,
//! order-independent comparison of events, waiting for flushes, and this test binary re-run as a
//! child server process.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_server::ServerConfig;

/// An HTTP answer.
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
    /// The status and the body as text.
    pub fn into_pair(self) -> (u16, String) {
        let text = self.text();
        (self.status, text)
    }
}

/// How one raw HTTP/1.1 exchange (one request on its own connection) is bounded and read.
#[derive(Clone, Copy)]
pub struct Http {
    /// Bound on the connect; `None`: the system's own.
    pub connect: Option<Duration>,
    /// Read timeout.
    pub read: Duration,
    /// Write timeout; `None`: none.
    pub write: Option<Duration>,
    /// The server may answer (413) before reading the whole body: a failed write of the body or
    /// a failed read is not an error, what arrived is parsed.
    pub early_answer: bool,
    /// A malformed chunked body gives what was decoded before the damage instead of a panic
    /// (a server killed mid-answer).
    pub lenient_chunks: bool,
}

/// [`request`]'s bounds: no connect bound, reads 60 s, an early answer accepted.
pub const PLAIN: Http = Http {
    connect: None,
    read: Duration::from_secs(60),
    write: None,
    early_answer: true,
    lenient_chunks: false,
};

impl Http {
    /// One request with `Connection: close`; `Err` when the server cannot be reached or its
    /// answer has no head or status.
    pub fn try_request(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<Resp> {
        let mut s = match self.connect {
            Some(bound) => TcpStream::connect_timeout(&addr, bound)?,
            None => TcpStream::connect(addr)?,
        };
        s.set_read_timeout(Some(self.read))?;
        if self.write.is_some() {
            s.set_write_timeout(self.write)?;
        }
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())?;
        let mut raw = Vec::new();
        if self.early_answer {
            let _ = s.write_all(body);
            let _ = s.read_to_end(&mut raw);
        } else {
            s.write_all(body)?;
            s.read_to_end(&mut raw)?;
        }
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no response head"))?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("bad status line"))?;
        let mut body = raw[split + 4..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = match try_dechunk(&body) {
                Ok(b) => b,
                Err(partial) if self.lenient_chunks => partial,
                Err(_) => panic!("malformed chunked body from {method} {path}"),
            };
        }
        Ok(Resp { status, head, body })
    }
}

/// One request with [`PLAIN`] bounds; panics when there is no answer.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    PLAIN
        .try_request(addr, method, path, body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// A chunked body decoded; `Err` with what was decoded before a malformed or missing chunk.
pub fn try_dechunk(mut b: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return Err(out);
        };
        let Ok(size) = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16) else {
            return Err(out);
        };
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if size > b.len() {
            return Err(out);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[(size + 2).min(b.len())..];
    }
}

/// The value of the metric line starting with `name` (labels included) in exposition `text`.
pub fn metric_value(text: &str, name: &str) -> f64 {
    try_metric_value(text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The value of `name` — a family (`sluice_x`) or a family with labels (`sluice_x{k="v"}`):
/// the sum of the family's samples whose labels include every label given (in any order).
/// `None` when no sample matches.
pub fn try_metric_value(text: &str, name: &str) -> Option<f64> {
    fn split(s: &str) -> (&str, Vec<String>) {
        match s.split_once('{') {
            None => (s, Vec::new()),
            Some((family, rest)) => {
                let inner = rest.trim_end_matches('}');
                let labels = inner
                    .split("\",")
                    .filter(|l| !l.is_empty())
                    .map(|l| l.trim_end_matches('"').to_owned())
                    .collect();
                (family, labels)
            }
        }
    }
    let (family, want) = split(name.trim());
    let mut sum = None;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let (f, have) = split(series);
        if f == family && want.iter().all(|w| have.contains(w)) {
            let v: f64 = value
                .parse()
                .unwrap_or_else(|e| panic!("{series}: {value}: {e}"));
            sum = Some(sum.unwrap_or(0.0) + v);
        }
    }
    sum
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
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

/// The value of a metric line starting with `name` (labels included in `name`).
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    metric_value(&metrics(addr), name)
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
