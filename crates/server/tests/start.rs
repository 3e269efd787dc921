//! `Server::start` returns once the server serves, or with the reason it cannot: here a data
//! directory whose store another running server holds. Real sockets on loopback.

use sluice_server::Server;

mod common;
use common::*;

#[test]
fn start_serves_at_once_and_a_failed_start_is_its_error() {
    let dir = temp_dir("start");
    let first = Server::start(config(&dir, 0)).unwrap();
    let addr = first.http_addr.unwrap();
    // Serving when `start` returns: no wait for readiness.
    let r = request(addr, "GET", "/healthz", b"");
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    let body = format!("{{\"type\":\"WEB\",\"epoch\":{}}}\n", now());
    let r = request(addr, "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());

    // A second server on the same data directory: the store is locked, so `start` fails (its
    // sockets are closed again) and the first one is untouched.
    let err = Server::start(config(&dir, 0)).unwrap_err().to_string();
    assert!(err.starts_with("store: "), "{err}");
    assert_eq!(request(addr, "GET", "/healthz", b"").status, 200);

    first.shutdown().unwrap();
    // Released: a new start on the directory serves what the first one stored.
    let again = Server::start(config(&dir, 0)).unwrap();
    let q = format!("/v1/events?from={}", now() - 60);
    let r = request(again.http_addr.unwrap(), "GET", &q, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(lines(&r.text()).len(), 1, "{}", r.text());
    again.shutdown().unwrap();
}

/// `Server::ingester` takes payloads in-process as a POST does: parsed, logged, acknowledged
/// once durable, routed to both shards, stored and readable, counted under `inproc`.
#[test]
fn an_ingester_acknowledges_payloads_in_process_like_a_post() {
    let dir = temp_dir("ingester");
    let server = Server::start(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();
    let t = now();
    let mut body = String::new();
    for (i, dc) in ["ams1", "lhr2", "fra3", "ams4"].iter().enumerate() {
        body.push_str(&format!(
            "{{\"epoch\":{t},\"dc\":\"{dc}\",\"type\":\"WEB\",\"id\":{i}}}\n"
        ));
    }
    body.push_str("{not json\n");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ingester = server.ingester();
    let summary = rt
        .block_on(ingester.ingest(sluice_server::Bytes::from(body)))
        .unwrap();
    assert_eq!(summary.accepted, 4);
    assert_eq!(summary.dropped.len(), 1, "{:?}", summary.dropped);
    assert!(summary.wal_seq.is_some());
    wait_flushed(addr, 4);
    let mut ids: Vec<i64> = read_events(addr, t - 1, t + 1)
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert_eq!(
        metric(addr, "sluice_payloads_total{transport=\"inproc\"}"),
        1.0
    );
    server.shutdown().unwrap();
    // Stopped: the handle refuses instead of hanging.
    let err = rt
        .block_on(ingester.ingest(sluice_server::Bytes::from_static(b"{}\n")))
        .unwrap_err();
    assert!(!err.to_string().is_empty());
}
