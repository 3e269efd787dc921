//! Durable acknowledgements (SIGKILL of a real server process, restart, read back), the TCP
//! protocol and the UDP listener, on real sockets.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_server::{spawn, ServerConfig};

const CHILD_ENV: &str = "SLUICE_TEST_CHILD_DATA_DIR";

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no response head"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
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

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-transports-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(dir: &Path, grace: u64) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        http: Some("127.0.0.1:0".parse().unwrap()),
        tcp: Some("127.0.0.1:0".parse().unwrap()),
        udp: Some("127.0.0.1:0".parse().unwrap()),
        grace_secs: grace,
        ..ServerConfig::default()
    }
}

fn metrics(addr: SocketAddr) -> String {
    request(addr, "GET", "/metrics", b"").unwrap().1
}

/// The value of a metric line starting with `name` (labels included in `name`).
fn metric(addr: SocketAddr, name: &str) -> f64 {
    let m = metrics(addr);
    m.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in {m}"))
        .parse()
        .unwrap()
}

fn wait_flushed(addr: SocketAddr, events: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
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

fn read_back(addr: SocketAddr, from: i64, to: i64) -> Vec<Value> {
    let (status, body) =
        request(addr, "GET", &format!("/v1/events?from={from}&to={to}"), b"").unwrap();
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

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
        grace_secs: 3600,
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

/// Kills the child server if the test fails before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sigkill_loses_no_acknowledged_event() {
    let dir = temp_dir("sigkill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut child = KillOnDrop(child);
    let addr: SocketAddr = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child exited before serving"
        );
        // The harness prints "test child_server ... " before the line.
        if let Some(i) = line.find("ADDR ") {
            break line[i + 5..].trim().parse().unwrap();
        }
    };

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
                match request(addr, "POST", "/v1/events", body.as_bytes()) {
                    Ok((200, _)) => acked.lock().unwrap().push(batch),
                    Ok((status, body)) => panic!("batch {batch}: {status} {body}"),
                    Err(_) => return batch, // the server is gone
                }
            }
            unreachable!()
        })
    };
    while acked.lock().unwrap().len() < 40 {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.0.kill().unwrap(); // SIGKILL, mid-stream
    child.0.wait().unwrap();
    let sent = poster.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 40);

    // Restart on the same data dir: the WAL is replayed, the epoch flushed.
    let server = spawn(config(&dir, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    assert!(metric(addr, "sluice_wal_replayed_records") >= acked.len() as f64);
    wait_flushed(addr, acked.len() as u64 * 20);
    let events = read_back(addr, epoch, epoch + 1);
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
    assert_eq!(read_back(addr, epoch, epoch + 1).len(), events.len());
    server.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
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

    wait_flushed(addr, 6);
    let mut ns: Vec<u64> = read_back(addr, epoch, epoch + 1)
        .iter()
        .map(|e| e["n"].as_u64().unwrap())
        .collect();
    ns.sort();
    assert_eq!(ns, [1, 2, 3, 4, 6, 7, 8]);
    assert!(metric(addr, "sluice_tcp_connections_total") >= 1.0);
    server.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
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
    wait_flushed(addr, expected.len() as u64);
    let mut ns: Vec<u64> = read_back(addr, epoch, epoch + 1)
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
    let _ = std::fs::remove_dir_all(&dir);
}
