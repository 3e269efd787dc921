//! Store outages end to end: a real server on loopback over a store whose writes fail on demand
//! (`FaultyStore` around the real embedded store). Batches go to the on-disk spool, `/metrics`
//! shows the backlog, the store comes back and every event is stored exactly once; a crash
//! during the outage (the data directory as a SIGKILL leaves it) is replayed exactly once;
//! a full spool turns into backpressure (503) instead of unbounded memory.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_server::{spawn_with_store, RunningServer, ServerConfig};
use sluice_store::{EmbeddedStore, Faults, FaultyStore, Store};

mod common;
use common::*;

fn outage_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        http: Some("127.0.0.1:0".parse().unwrap()),
        tcp: None,
        udp: None,
        grace_ms: Some(0),
        // Spill at the first failure, so the test sees the spool at once.
        spool_memory_batches: 0,
        pipeline_threads: Some(2),
        ..ServerConfig::default()
    }
}

fn start(dir: &Path, cfg: ServerConfig) -> (RunningServer, Faults) {
    let store = EmbeddedStore::open(dir.join("store")).unwrap();
    let (faulty, faults) = FaultyStore::new(store);
    let server = spawn_with_store(cfg, Arc::new(faulty) as Arc<dyn Store>).unwrap();
    (server, faults)
}

fn wait_metric(addr: SocketAddr, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = metric(addr, name);
        if ok(v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{name} = {v}, never as expected:\n{}",
            request(addr, "GET", "/metrics", b"").text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Events of several past seconds, two types and two dcs in one NDJSON payload, plus one event
/// of a future second (its group stays open, so the payload's WAL record stays needed).
fn payload(t0: i64, tag: &str) -> (Vec<u8>, Vec<Value>, Value) {
    let mut past = Vec::new();
    for s in 0..4 {
        for i in 0..5 {
            past.push(serde_json::json!({
                "epoch": t0 - 6 + s, "dc": if i % 2 == 0 { "ams1" } else { "lhr2" },
                "type": if i % 3 == 0 { "WEB" } else { "CRON" }, "subtype": "", "tag": tag, "s": s, "i": i,
            }));
        }
    }
    let future = serde_json::json!({"epoch": t0 + 200, "dc": "ams1", "type": "LB", "subtype": "", "tag": tag, "future": true});
    let mut body = String::new();
    for e in past.iter().chain(std::iter::once(&future)) {
        body.push_str(&e.to_string());
        body.push('\n');
    }
    (body.into_bytes(), past, future)
}

fn read_all(addr: SocketAddr, from: i64, to: i64) -> Vec<Value> {
    let r = request(addr, "GET", &format!("/v1/events?from={from}&to={to}"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    lines(&r.text())
}

fn wait_events(addr: SocketAddr, from: i64, to: i64, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = read_all(addr, from, to);
        if got.len() >= n {
            // A little longer: more than expected would show up now.
            std::thread::sleep(Duration::from_millis(600));
            return read_all(addr, from, to);
        }
        assert!(Instant::now() < deadline, "{} of {n} events", got.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

#[test]
fn outage_spools_then_recovers_and_a_crash_replays_exactly_once() {
    let dir = temp_dir("spool-outage");
    let (server, faults) = start(&dir, outage_config(&dir));
    let addr = server.http_addr.unwrap();
    faults.fail_writes(true);
    let t0 = now();
    let (body, past, future) = payload(t0, "outage");
    let r = request(addr, "POST", "/v1/events", &body);
    assert_eq!(r.status, 200, "{}", r.text());

    // Every past group is closed, fails to store and lands in the spool; the WAL gets notes.
    wait_metric(addr, "sluice_spool_events", |v| v >= past.len() as f64);
    assert!(metric(addr, "sluice_spool_batches") >= 4.0);
    assert!(metric(addr, "sluice_spool_bytes") > 0.0);
    assert!(metric(addr, "sluice_store_errors_total") > 0.0);
    assert_eq!(metric(addr, "sluice_backpressure"), 0.0);
    wait_metric(addr, "sluice_wal_notes_total", |v| v >= 1.0);
    assert!(
        read_all(addr, t0 - 10, t0).is_empty(),
        "nothing is readable during the outage"
    );

    // The directory as a crash would leave it, taken while the outage lasts.
    std::thread::sleep(Duration::from_millis(300));
    let crashed = temp_dir("spool-crashed");
    copy_dir(&dir, &crashed);

    // The store comes back: the spool drains in order, each event once.
    faults.fail_writes(false);
    wait_metric(addr, "sluice_spool_batches", |v| v == 0.0);
    let got = wait_events(addr, t0 - 10, t0, past.len());
    assert_eq!(sorted_canon(&got), sorted_canon(&past));
    server.shutdown().unwrap();

    // Restart on the crashed copy with a healthy store: the spool is replayed, and the WAL
    // replay skips the spooled groups of the payload (its future event is still needed).
    let (server, _faults) = start(&crashed, outage_config(&crashed));
    let addr = server.http_addr.unwrap();
    assert_eq!(
        metric(addr, "sluice_wal_replay_skipped_events"),
        past.len() as f64
    );
    assert_eq!(metric(addr, "sluice_wal_replayed_records"), 1.0);
    let got = wait_events(addr, t0 - 10, t0, past.len());
    assert_eq!(
        sorted_canon(&got),
        sorted_canon(&past),
        "exactly once after the crash"
    );
    server.shutdown().unwrap(); // stores the future second's open group
    let (server, _faults) = start(&crashed, outage_config(&crashed));
    let addr = server.http_addr.unwrap();
    let mut all = past.clone();
    all.push(future);
    let got = wait_events(addr, t0 - 10, t0 + 300, all.len());
    assert_eq!(sorted_canon(&got), sorted_canon(&all));
    server.shutdown().unwrap();
}

#[test]
fn full_spool_means_backpressure_not_memory() {
    let dir = temp_dir("spool-full");
    let cfg = ServerConfig {
        // Every spill is refused: the spool is "full" from the start.
        spool_max_bytes: 1,
        udp: Some("127.0.0.1:0".parse().unwrap()),
        tcp: Some("127.0.0.1:0".parse().unwrap()),
        ..outage_config(&dir)
    };
    let (server, faults) = start(&dir, cfg);
    let addr = server.http_addr.unwrap();
    faults.fail_writes(true);
    let t0 = now();
    let (body, past, _) = payload(t0, "full");
    let body_past: Vec<u8> = body
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.windows(6).any(|w| w == b"future"))
        .flat_map(|l| l.iter().copied().chain(std::iter::once(b'\n')))
        .collect();
    let r = request(addr, "POST", "/v1/events", &body_past);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_metric(addr, "sluice_backpressure", |v| v == 1.0);
    // Acknowledged input is refused with a retryable status; nothing accepted is lost.
    let (more, more_past, _) = payload(t0, "refused");
    let r = request(addr, "POST", "/v1/events", &more);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("backpressure"), "{}", r.text());
    assert!(metric(addr, "sluice_payloads_shed_total") >= 1.0);
    // TCP: the message is answered with an error line (not acknowledged: the sender resends).
    {
        use std::io::{BufRead, BufReader, Write};
        let mut conn = std::net::TcpStream::connect(server.tcp_addr.unwrap()).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn.write_all(format!("{{\"epoch\":{},\"type\":\"TCPSHED\"}}\n", t0 - 2).as_bytes())
            .unwrap();
        let mut line = String::new();
        BufReader::new(&conn).read_line(&mut line).unwrap();
        assert!(
            line.starts_with("error unavailable backpressure"),
            "{line:?}"
        );
    }
    assert_eq!(metric(addr, "sluice_spool_batches"), 0.0);
    // UDP cannot be told to retry: its events are shed and counted, in /metrics and in the
    // second's completeness counts.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let shed_epoch = t0 - 2;
    for i in 0..3 {
        let d = format!("{{\"epoch\":{shed_epoch},\"type\":\"UDPSHED\",\"i\":{i}}}");
        udp.send_to(d.as_bytes(), server.udp_addr.unwrap()).unwrap();
    }
    let shed = "sluice_events_dropped_total{reason=\"shed\"}";
    wait_metric(addr, shed, |v| v >= 3.0);

    faults.fail_writes(false);
    wait_metric(addr, "sluice_backpressure", |v| v == 0.0);
    let got = wait_events(addr, t0 - 10, t0, past.len());
    assert_eq!(sorted_canon(&got), sorted_canon(&past));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = request(
            addr,
            "GET",
            &format!("/v1/counts?from={shed_epoch}&to={}", shed_epoch + 1),
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.text());
        if r.text()
            .lines()
            .any(|l| l.contains("UDPSHED") && l.contains("\"shed\":3"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no shed count: {}", r.text());
        std::thread::sleep(Duration::from_millis(100));
    }
    // Accepting again once the backlog moved.
    let _ = more_past;
    let r = request(addr, "POST", "/v1/events", &more);
    assert_eq!(r.status, 200, "{}", r.text());
    server.shutdown().unwrap();
}
