//! Helpers shared by the server tests: a minimal HTTP/1.1 client on a TcpStream, test configs,
//! order-independent comparison of events, and waiting for flushes.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_server::ServerConfig;

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
}

pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body); // the server may answer (413) before reading it all
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Resp { status, head, body }
}

pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        b = &b[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
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
        grace_secs: grace,
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

/// The value of an unlabelled metric.
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    let m = request(addr, "GET", "/metrics", b"").text();
    m.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in {m}"))
        .parse()
        .unwrap()
}

pub fn wait_flushed(addr: SocketAddr, events: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(addr, "sluice_events_flushed_total") < events as f64
        || metric(addr, "sluice_pending_events") > 0.0
    {
        assert!(
            Instant::now() < deadline,
            "not flushed in time:\n{}",
            request(addr, "GET", "/metrics", b"").text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
