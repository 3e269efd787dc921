//! Durable acknowledgements (SIGKILL of a real server process, restart, read back), the TCP
//! protocol and the UDP listener, on real sockets.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_server::{spawn, ServerConfig};

mod common;
use common::*;

const CHILD_ENV: &str = "SLUICE_TEST_CHILD_DATA_DIR";

/// The bounds of this file's own requests: no connect bound, reads 60 s.
const HTTP: Http = Http {
    early_answer: false,
    ..PLAIN
};

/// Not a test on its own: the server process of `sigkill_loses_no_acknowledged_event`, run when
/// the test binary is started again with `CHILD_ENV` set.
#[test]
fn child_server() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let server = spawn(ServerConfig {
        tcp: None,
        udp: None,
        // Nothing is flushed before the kill: every acknowledged event lives only in the WAL.
        grace_secs: Some(3600),
        fsync: "batch".parse().expect("fsync policy"),
        ..config(Path::new(&dir), 3600)
    })
    .unwrap();
    println!("ADDR {}", server.http_addr.unwrap());
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn sigkill_loses_no_acknowledged_event() {
    let dir = temp_dir("sigkill");
    let mut child = ChildServer::start("child_server", CHILD_ENV, &dir);
    let addr = child.addrs[0];

    // Every payload lies inside one epoch: exactly once holds after replay.
    let epoch = now() - 30;
    let acked: Arc<Mutex<Vec<u64>>> = Arc::default();
    let poster = {
        let acked = acked.clone();
        std::thread::spawn(move || {
            for batch in 0u64.. {
                let body: String = (0..20)
                    .map(|n| {
                        json!({"type": "CRASH", "subtype": "s", "epoch": epoch, "dc": "local", "batch": batch, "n": n})
                            .to_string()
                            + "\n"
                    })
                    .collect();
                match HTTP.try_request(addr, "POST", "/v1/events", body.as_bytes()) {
                    Ok(r) if r.status == 200 => acked.lock().unwrap().push(batch),
                    Ok(r) => panic!("batch {batch}: {} {}", r.status, r.text()),
                    Err(_) => return batch, // the server is gone
                }
            }
            unreachable!()
        })
    };
    while acked.lock().unwrap().len() < 40 {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.proc.kill().unwrap(); // SIGKILL, mid-stream
    child.proc.wait().unwrap();
    let sent = poster.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 40);

    // Restart on the same data dir: the WAL is replayed, the epoch flushed.
    let server = spawn(config(&dir, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    assert!(metric(addr, "sluice_wal_replayed_records") >= acked.len() as f64);
    wait_flushed_within(addr, acked.len() as u64 * 20, Duration::from_secs(30));
    let events = read_events(addr, epoch, epoch + 1);
    let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for e in &events {
        *seen
            .entry((e["batch"].as_u64().unwrap(), e["n"].as_u64().unwrap()))
            .or_default() += 1;
    }
    for b in &acked {
        for n in 0..20 {
            assert_eq!(
                seen.get(&(*b, n)),
                Some(&1),
                "event {b}/{n} of an acknowledged batch"
            );
        }
    }
    // Nothing was stored before the kill, so nothing (acknowledged or in flight) is doubled.
    assert!(seen.values().all(|&c| c == 1));
    assert!(seen.keys().all(|(b, _)| *b <= sent));
    server.shutdown().unwrap();

    // The checkpoint covers everything now: a second restart replays nothing, stores nothing twice.
    let server = spawn(config(&dir, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    assert_eq!(metric(addr, "sluice_wal_replayed_records"), 0.0);
    assert_eq!(read_events(addr, epoch, epoch + 1).len(), events.len());
    server.shutdown().unwrap();
}

#[test]
fn tcp_lines_and_frames_acknowledged_in_order() {
    let dir = temp_dir("tcp");
    let server = spawn(ServerConfig {
        max_body_bytes: 10_000,
        ..config(&dir, 1)
    })
    .unwrap();
    let addr = server.http_addr.unwrap();
    let epoch = now() - 5;
    let mut s = TcpStream::connect(server.tcp_addr.unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();

    let ev = |n: u64| json!({"type": "TCP", "epoch": epoch, "n": n});
    let mut msg = Vec::new();
    msg.extend(format!("{}\n", ev(1)).as_bytes()); // one event
    msg.extend(b"{\"type\": \"TCP\", \"n\":\n"); // malformed
    msg.extend(format!("{}\r\n", json!([ev(2), ev(3)])).as_bytes()); // an array, CRLF
    msg.extend(b"\n"); // blank: no reply
    msg.extend(vec![b' '; 20_000]); // oversized: skipped to the newline
    msg.extend(b"{}\n");
    msg.extend(format!("{}\n{}\n", ev(4), json!({"n": 5})).as_bytes()); // a bare event has no type
                                                                        // A Sereal frame: S, u32 BE length, document.
    let doc = sereal::to_vec(
        &sereal::json::from_json_value(&json!([ev(6), ev(7)])),
        &sereal::EncoderOptions::default(),
    )
    .unwrap();
    msg.push(b'S');
    msg.extend((doc.len() as u32).to_be_bytes());
    msg.extend(&doc);
    msg.extend(format!("{}\n", ev(8)).as_bytes());
    s.write_all(&msg).unwrap();

    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut replies = Vec::new();
    for _ in 0..7 {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        replies.push(line.trim_end().to_string());
    }
    assert_eq!(replies[0], "ok 1 0");
    assert!(replies[1].starts_with("error payload_error"), "{replies:?}");
    assert_eq!(replies[2], "ok 2 0");
    assert!(replies[3].starts_with("error oversized"), "{replies:?}");
    assert_eq!(replies[4], "ok 1 0");
    assert!(replies[5].starts_with("error missing_type"), "{replies:?}");
    assert_eq!(replies[6], "ok 2 0");
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "ok 1 0\n");

    // A Sereal document on a line is refused and the connection closed.
    s.write_all(b"=srl\x01\x00\x28\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("error sereal_unframed"), "{line}");
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).unwrap(), 0);

    wait_flushed_within(addr, 6, Duration::from_secs(30));
    let mut ns: Vec<u64> = read_events(addr, epoch, epoch + 1)
        .iter()
        .map(|e| e["n"].as_u64().unwrap())
        .collect();
    ns.sort();
    assert_eq!(ns, [1, 2, 3, 4, 6, 7, 8]);
    assert!(metric(addr, "sluice_tcp_connections_total") >= 1.0);
    server.shutdown().unwrap();
}

#[test]
fn udp_datagrams_stored_and_malformed_counted() {
    let dir = temp_dir("udp");
    let server = spawn(config(&dir, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    let udp = server.udp_addr.unwrap();
    let epoch = now() - 5;
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let ev = |n: u64| json!({"type": "UDP", "epoch": epoch, "n": n});
    let mut expected = Vec::new();
    for i in 0..10u64 {
        // A JSON array, then NDJSON, then a single event.
        let arr = json!([ev(i * 10), ev(i * 10 + 1)]).to_string();
        let nd = format!("{}\n{}\n", ev(i * 10 + 2), ev(i * 10 + 3));
        let one = ev(i * 10 + 4).to_string();
        for d in [arr, nd, one] {
            sock.send_to(d.as_bytes(), udp).unwrap();
        }
        expected.extend([i * 10, i * 10 + 1, i * 10 + 2, i * 10 + 3, i * 10 + 4]);
        sock.send_to(b"{\"type\": nope", udp).unwrap(); // malformed
        sock.send_to(json!({"n": 1}).to_string().as_bytes(), udp)
            .unwrap(); // no type
    }
    wait_flushed_within(addr, expected.len() as u64, Duration::from_secs(30));
    let mut ns: Vec<u64> = read_events(addr, epoch, epoch + 1)
        .iter()
        .map(|e| e["n"].as_u64().unwrap())
        .collect();
    ns.sort();
    expected.sort();
    assert_eq!(ns, expected);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(addr, "sluice_udp_datagrams_total") < 50.0 {
        assert!(Instant::now() < deadline, "{}", metrics(addr));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        metric(
            addr,
            "sluice_events_dropped_total{reason=\"payload_error\"}"
        ),
        10.0
    );
    assert_eq!(
        metric(addr, "sluice_events_dropped_total{reason=\"missing_type\"}"),
        10.0
    );
    assert_eq!(
        metric(
            addr,
            "sluice_events_in_total{transport=\"udp\",type=\"UDP\"}"
        ),
        50.0
    );
    assert!(metrics(addr).contains("sluice_udp_kernel_drops_total 0"));
    server.shutdown().unwrap();
}
