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
    let _ = std::fs::remove_dir_all(&dir);
}
