//! The UDP source allow-list (`udp_allow`) on real sockets: the server's UDP bound
//! beyond loopback, datagrams sent from two loopback addresses (127.0.0.0/8 split into allowed
//! and refused), read back over HTTP, refusals counted in `/metrics`.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_server::{spawn, ServerConfig};

mod common;
use common::*;
use sluice_test_support::metrics::series;

const REFUSED: &str = "sluice_udp_refused_total{reason=\"source\"}";

/// Sends `count` one-event datagrams of `type` "UDP" from `from` to `to`, marked `src`.
fn send(from: &str, to: SocketAddr, src: &str, epoch: i64, count: u64) {
    let sock = UdpSocket::bind(from).unwrap_or_else(|e| panic!("binding {from}: {e}"));
    for n in 0..count {
        let ev = json!({"type": "UDP", "epoch": epoch, "src": src, "n": n});
        sock.send_to(ev.to_string().as_bytes(), to).unwrap();
        if n % 16 == 15 {
            // Stay far below the receive buffer: a kernel drop would spoil the exact counts.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Waits (20 s at most) until the refused counter reaches `n`.
fn wait_refused(http: SocketAddr, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(http, REFUSED) < n {
        assert!(Instant::now() < deadline, "{}", metrics(http));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `src` marks of the events read back, with their counts.
fn sources(http: SocketAddr, epoch: i64) -> std::collections::BTreeMap<String, u64> {
    let mut by = std::collections::BTreeMap::new();
    for e in read_events(http, epoch, epoch + 1) {
        *by.entry(e["src"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    by
}

#[test]
fn udp_sources_outside_the_allow_list_are_refused_and_counted() {
    let dir = temp_dir("udp-allow");
    // UDP beyond loopback with auth off and without insecure_no_auth: the start takes it (only
    // HTTP and TCP beyond loopback need auth; UDP is governed by udp_allow).
    let server = spawn(ServerConfig {
        udp: Some("0.0.0.0:0".parse().unwrap()),
        udp_allow: vec!["127.0.0.1/32".into()],
        auth: false,
        insecure_no_auth: false,
        ..config(&dir, 1)
    })
    .expect("UDP on 0.0.0.0 without auth starts");
    let http = server.http_addr.unwrap();
    let udp = server.udp_addr.unwrap();
    assert!(udp.ip().is_unspecified(), "{udp}");
    let to: SocketAddr = ([127, 0, 0, 1], udp.port()).into();
    // The counter is there from the start, at 0.
    assert_eq!(metric(http, REFUSED), 0.0);

    let epoch = now() - 5;
    // Refused first: once the accepted ones that follow are stored, every refused datagram went
    // through the same socket queue before them.
    send("127.0.0.2:0", to, "refused", epoch, 40);
    send("127.0.0.1:0", to, "allowed", epoch, 30);
    wait_flushed_within(http, 30, Duration::from_secs(30));
    wait_refused(http, 40.0);

    let got = sources(http, epoch);
    assert_eq!(got.get("allowed"), Some(&30), "{got:?}");
    assert_eq!(
        got.get("refused"),
        None,
        "refused datagrams were stored: {got:?}"
    );
    let text = metrics(http);
    assert_eq!(series(&text, REFUSED), 40.0, "{text}");
    // Refused before parsing: nothing of theirs reached ingest.
    assert_eq!(
        series(
            &text,
            "sluice_events_in_total{transport=\"udp\",type=\"UDP\"}"
        ),
        30.0,
        "{text}"
    );
    // No drop (the UDP samples are exported from the start, so a missing one fails).
    assert_eq!(
        series(&text, "sluice_events_dropped_total{transport=\"udp\"}"),
        0.0,
        "{text}"
    );

    // More later, from both: the counter keeps adding.
    send("127.0.0.2:0", to, "refused", epoch, 5);
    wait_refused(http, 45.0);
    assert_eq!(metric(http, REFUSED), 45.0);
    server.shutdown().unwrap();
}

#[test]
fn ipv4_mapped_sources_count_as_ipv4() {
    let dir = temp_dir("udp-allow-mapped");
    // A dual-stack socket sees IPv4 senders as ::ffff:a.b.c.d; the IPv4 networks must apply.
    let server = spawn(ServerConfig {
        udp: Some("[::]:0".parse().unwrap()),
        udp_allow: vec!["127.0.0.1/32".into(), "::1/128".into()],
        ..config(&dir, 1)
    })
    .unwrap();
    let http = server.http_addr.unwrap();
    let port = server.udp_addr.unwrap().port();
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let v6: SocketAddr = (std::net::Ipv6Addr::LOCALHOST, port).into();

    let epoch = now() - 5;
    send("127.0.0.2:0", v4, "refused", epoch, 12);
    send("127.0.0.1:0", v4, "mapped", epoch, 10);
    send("[::1]:0", v6, "v6", epoch, 7);
    wait_flushed_within(http, 17, Duration::from_secs(30));
    wait_refused(http, 12.0);

    let got = sources(http, epoch);
    assert_eq!(got.get("mapped"), Some(&10), "{got:?}");
    assert_eq!(got.get("v6"), Some(&7), "{got:?}");
    assert_eq!(got.get("refused"), None, "{got:?}");
    assert_eq!(metric(http, REFUSED), 12.0);
    server.shutdown().unwrap();
}

#[test]
fn a_udp_allow_entry_that_is_no_cidr_refuses_the_start() {
    let dir = temp_dir("udp-allow-bad");
    let err = match spawn(ServerConfig {
        udp_allow: vec!["127.0.0.1/33".into()],
        ..config(&dir, 1)
    }) {
        Ok(s) => {
            s.shutdown().unwrap();
            panic!("started with udp_allow 127.0.0.1/33");
        }
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("udp_allow") && err.contains("127.0.0.1/33"),
        "{err}"
    );
}
