//! Connection limits of `sluice serve`, with real processes and real sockets on loopback: HTTP
//! header / idle timeouts, the HTTP and TCP connection caps (eviction of idle connections,
//! refusal when all are busy), the tail stream cap, a TCP frame over the limit, SIGTERM with
//! idle connections and a tail stream attached, and a socket flood under a low `ulimit -n`.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{assert_success, free_port, id_of, now, Proc};
use sluice_test_support::http::{Http, Resp};
use sluice_test_support::{metrics, temp_dir};

struct Server {
    child: Proc,
    http: SocketAddr,
    tcp: SocketAddr,
    dir: PathBuf,
}

impl Server {
    /// `sluice serve` on fresh ports with `extra` TOML settings; `nofile` lowers its descriptor
    /// limit (`ulimit -n`) first. A port taken between choosing and binding it (other tests
    /// open many sockets) means another try with new ports.
    fn start(dir: &Path, extra: &str, nofile: Option<u32>) -> Server {
        for _ in 0..5 {
            if let Some(server) = Server::try_start(dir, extra, nofile) {
                return server;
            }
        }
        panic!("sluice serve: no free ports after 5 tries");
    }

    fn try_start(dir: &Path, extra: &str, nofile: Option<u32>) -> Option<Server> {
        std::fs::create_dir_all(dir).expect("dir");
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let tcp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let config = dir.join("serve.toml");
        let toml = format!(
            "data_dir = {:?}\nhttp = \"{http}\"\ntcp = \"{tcp}\"\nudp = \"off\"\ngrace_secs = 1\n{extra}\n",
            dir.join("data")
        );
        std::fs::write(&config, toml).expect("config");
        let stderr = std::fs::File::create(dir.join("stderr.log")).expect("log");
        let bin = env!("CARGO_BIN_EXE_sluice");
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), bin]);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(["serve", "--config", config.to_str().expect("path")])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn sluice serve");
        let mut server = Server {
            child: Proc(child),
            http,
            tcp,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while try_request(http, "GET", "/healthz", b"").map(|r| r.0) != Some(200) {
            if server.child.0.try_wait().expect("wait").is_some()
                && server.log().contains("Address already in use")
            {
                return None;
            }
            assert!(
                Instant::now() < deadline,
                "server did not come up: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(server)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// SIGTERM, then the exit status, waited for at most `bound`.
    fn terminate(&mut self, bound: Duration) -> std::process::ExitStatus {
        self.child.sigterm();
        self.child.wait_exit(bound).unwrap_or_else(|| {
            panic!(
                "serve still running {bound:?} after SIGTERM: {}",
                self.log()
            )
        })
    }

    /// The sum of the samples of `name` (a family, or a family with labels in any order) in
    /// `/metrics`. Panics when no sample matches: a missing metric is a failure, not a zero.
    fn metric(&self, name: &str) -> f64 {
        let (value, body) = self.try_metric(name);
        value.unwrap_or_else(|| panic!("no metric {name} in /metrics:\n{body}"))
    }

    /// [`Server::metric`], `None` when no sample matches (a labelled counter appears only once
    /// it has counted), with the `/metrics` text.
    fn try_metric(&self, name: &str) -> (Option<f64>, String) {
        let (status, body) = request(self.http, "GET", "/metrics", b"");
        assert_eq!(status, 200, "{body}");
        (metrics::try_series(&body, name), body)
    }
}

/// This file's bounds on one exchange: connect 5 s, read 20 s.
const HTTP: Http = Http {
    connect: Some(Duration::from_secs(5)),
    read: Duration::from_secs(20),
    write: None,
    early_answer: false,
    lenient_chunks: false,
};

/// One request on its own connection (`connection: close`): status and body; `None` when the
/// server cannot be reached or does not answer.
fn try_request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    HTTP.try_request(addr, method, path, body)
        .ok()
        .map(Resp::into_pair)
}

fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    try_request(addr, method, path, body).unwrap_or_else(|| panic!("{method} {path}: no response"))
}

/// Whether the server closes `s` within `bound` (EOF or reset), reading and discarding data.
fn closed_within(s: &mut TcpStream, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).expect("timeout");
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true, // reset
        }
    }
}

/// Whether `s` is still open now (no EOF within a short look).
fn still_open(s: &mut TcpStream) -> bool {
    !closed_within(s, Duration::from_millis(200))
}

fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect")
}

/// Opens `GET /v1/tail` and reads its response head: the status.
fn open_tail(addr: SocketAddr) -> (TcpStream, u16) {
    let mut s = connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET /v1/tail?from=now HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).expect("tail head"),
            1,
            "tail closed before its head"
        );
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head)
        .split(' ')
        .nth(1)
        .expect("status")
        .parse()
        .expect("code");
    (s, status)
}

/// One TCP exchange: sends `msg`, reads one reply line (with a bound).
fn tcp_line(s: &mut TcpStream, msg: &[u8]) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(msg).expect("write");
    let mut line = String::new();
    BufReader::new(s.try_clone().expect("clone"))
        .read_line(&mut line)
        .expect("reply line");
    line.trim_end().to_owned()
}

fn cat(dir: &Path, from: i64, to: i64) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cat", "--data", dir.join("data").to_str().expect("path")])
        .args(["--from", &from.to_string(), "--to", &to.to_string()])
        .output()
        .expect("sluice cat")
}

/// The `id`s of the events in NDJSON output, sorted.
fn ids(out: &Output) -> Vec<i64> {
    let mut ids: Vec<i64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(id_of)
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn idle_and_half_sent_connections_are_closed_after_their_timeouts() {
    let dir = temp_dir("net-timeouts");
    let server = Server::start(
        &dir,
        "http_header_timeout_secs = 1\nhttp_idle_timeout_secs = 2\ntcp_idle_timeout_secs = 1",
        None,
    );
    let mut fresh = connect(server.http);
    let mut half = connect(server.http);
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    // A keep-alive connection after one complete request.
    let mut kept = connect(server.http);
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = Vec::new();
    while !answer.ends_with(b"ok\n") {
        let mut buf = [0u8; 512];
        let n = kept.read(&mut buf).expect("response");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    let mut tcp_idle = connect(server.tcp);

    // Bounds well above the configured timeouts (1-2 s): only that they close is asserted.
    assert!(
        closed_within(&mut fresh, Duration::from_secs(10)),
        "an idle new connection stays open"
    );
    assert!(
        closed_within(&mut half, Duration::from_secs(10)),
        "a half-sent request stays open"
    );
    assert!(
        closed_within(&mut kept, Duration::from_secs(10)),
        "an idle keep-alive connection stays open"
    );
    assert!(
        closed_within(&mut tcp_idle, Duration::from_secs(10)),
        "an idle TCP connection stays open"
    );

    assert!(
        server.metric("sluice_connection_timeouts_total{transport=\"http\",kind=\"header\"}")
            >= 2.0
    );
    assert!(
        server.metric("sluice_connection_timeouts_total{transport=\"http\",kind=\"idle\"}") >= 1.0
    );
    assert!(
        server.metric("sluice_connection_timeouts_total{transport=\"tcp\",kind=\"idle\"}") >= 1.0
    );
    // A real client is served as before.
    assert_eq!(request(server.http, "GET", "/healthz", b"").0, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http_cap_evicts_idle_connections_and_refuses_when_all_are_busy() {
    let dir = temp_dir("net-http-cap");
    let server = Server::start(
        &dir,
        "http_max_connections = 4\nhttp_max_tail_streams = 2",
        None,
    );
    assert!(
        server.log().contains("http_max_connections 4"),
        "{}",
        server.log()
    );
    let mut idle: Vec<TcpStream> = (0..6).map(|_| connect(server.http)).collect();
    std::thread::sleep(Duration::from_millis(600)); // idle long enough to be evicted
                                                    // The cap is full of idle connections: a fresh client still gets served.
    for _ in 0..3 {
        assert_eq!(request(server.http, "GET", "/healthz", b"").0, 200);
    }
    assert!(server.metric("sluice_connections_evicted_total{transport=\"http\"}") >= 3.0);
    assert!(
        idle.iter_mut()
            .any(|s| closed_within(s, Duration::from_secs(5))),
        "no idle connection was evicted"
    );

    // Two tail streams (the cap), a third gets 503.
    let (_tail1, s1) = open_tail(server.http);
    let (_tail2, s2) = open_tail(server.http);
    assert_eq!((s1, s2), (200, 200));
    let (status, body) = request(server.http, "GET", "/v1/tail?from=now", b"");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("too many tail streams"), "{body}");
    assert_eq!(server.metric("sluice_tail_streams"), 2.0);

    // Every connection busy (2 tails, 2 requests whose body never comes): refused with 503.
    let mut slow: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = connect(server.http);
            s.write_all(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
                .expect("write");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = request(server.http, "GET", "/healthz", b"");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("too many connections"), "{body}");
    for s in &mut slow {
        assert!(still_open(s), "a busy connection was evicted");
    }
    // One busy connection ends: the next client gets in.
    drop(slow.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    while request(server.http, "GET", "/healthz", b"").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "no room after a connection closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        server.metric("sluice_connections_refused_total{transport=\"http\",reason=\"cap\"}") >= 1.0
    );
    assert!(
        server.metric("sluice_connections_refused_total{transport=\"http\",reason=\"tail_cap\"}")
            >= 1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_idle_connections_do_not_lock_out_new_clients() {
    let dir = temp_dir("net-tcp-cap");
    let server = Server::start(&dir, "tcp_max_connections = 4", None);
    let epoch = now();
    let mut idle: Vec<TcpStream> = (0..4).map(|_| connect(server.tcp)).collect();
    std::thread::sleep(Duration::from_millis(600)); // idle long enough to be evicted
    let mut fresh = connect(server.tcp);
    let line = format!("{{\"type\":\"CAP\",\"epoch\":{epoch},\"id\":1}}\n");
    assert_eq!(
        tcp_line(&mut fresh, line.as_bytes()),
        "ok 1 0",
        "a new client behind idle connections"
    );
    assert!(
        idle.iter_mut()
            .any(|s| closed_within(s, Duration::from_secs(5))),
        "no idle connection was evicted"
    );
    drop(fresh);
    drop(idle);

    // Every connection in the middle of a message: the new client is told, then closed.
    let busy: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = connect(server.tcp);
            s.write_all(b"{\"type\":\"CAP\"").expect("write"); // no newline yet
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut refused = connect(server.tcp);
    let reply = tcp_line(&mut refused, line.as_bytes());
    assert!(
        reply.starts_with("error unavailable too many connections"),
        "{reply}"
    );
    assert!(closed_within(&mut refused, Duration::from_secs(5)));
    // The busy ones finish their messages and are answered.
    for mut s in busy {
        assert_eq!(
            tcp_line(
                &mut s,
                format!(",\"epoch\":{epoch},\"id\":2}}\n").as_bytes()
            ),
            "ok 1 0"
        );
    }
    assert!(
        server.metric("sluice_connections_refused_total{transport=\"tcp\",reason=\"cap\"}") >= 1.0
    );
    assert!(server.metric("sluice_connections_evicted_total{transport=\"tcp\"}") >= 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_frame_claiming_4_gib_gets_an_error_line_then_close() {
    let dir = temp_dir("net-tcp-frame");
    let server = Server::start(&dir, "", None);
    let mut s = connect(server.tcp);
    let reply = tcp_line(&mut s, b"S\xff\xff\xff\xff=srl");
    assert!(
        reply.starts_with("error oversized frame of 4294967295 bytes"),
        "{reply}"
    );
    assert!(
        closed_within(&mut s, Duration::from_secs(5)),
        "the connection stays open"
    );
    let mut ok = connect(server.tcp);
    assert_eq!(
        tcp_line(
            &mut ok,
            format!("{{\"type\":\"F\",\"epoch\":{}}}\n", now()).as_bytes()
        ),
        "ok 1 0"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_with_idle_connections_and_a_tail_exits_promptly_and_keeps_acked_events() {
    let dir = temp_dir("net-sigterm");
    let mut server = Server::start(&dir, "", None);
    let epoch = now() - 1;
    let body: String = (0..50)
        .map(|i| format!("{{\"type\":\"TERM\",\"epoch\":{epoch},\"id\":{i}}}\n"))
        .collect();
    let (status, reply) = request(server.http, "POST", "/v1/events", body.as_bytes());
    assert_eq!(status, 200, "{reply}");
    let mut tcp = connect(server.tcp);
    let line = format!("{{\"type\":\"TERM\",\"epoch\":{epoch},\"id\":50}}\n");
    assert_eq!(tcp_line(&mut tcp, line.as_bytes()), "ok 1 0");

    let _idle_http: Vec<TcpStream> = (0..3).map(|_| connect(server.http)).collect();
    let mut half = connect(server.http);
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    let _idle_tcp: Vec<TcpStream> = (0..3).map(|_| connect(server.tcp)).collect();
    let (mut tail, status) = open_tail(server.http);
    assert_eq!(status, 200);
    // And the real client: `sluice tail --server` following the live stream.
    let mut tail_cli = Proc(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "tail",
                "--server",
                &format!("http://{}", server.http),
                "--from",
                "now",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sluice tail"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.metric("sluice_tail_streams") < 2.0 {
        assert!(Instant::now() < deadline, "sluice tail did not attach");
        std::thread::sleep(Duration::from_millis(50));
    }

    let started = Instant::now();
    let status = server.terminate(Duration::from_secs(5));
    assert!(
        status.success(),
        "serve exited with {status:?}: {}",
        server.log()
    );
    eprintln!("SIGTERM to exit: {:?}", started.elapsed());
    let mut rest = Vec::new();
    tail.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = tail.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.contains("event: shutdown"),
        "the tail was not told: {rest:?}"
    );
    // The CLI tail is told too: it stays up to reconnect from its cursor (tail_restart.rs),
    // and SIGTERM then stops it promptly with its cursor on stderr.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        tail_cli.0.try_wait().expect("wait tail").is_none(),
        "sluice tail exited when the server stopped"
    );
    tail_cli.sigterm();
    let tail_status = tail_cli
        .wait_exit(Duration::from_secs(5))
        .expect("sluice tail still running after SIGTERM");
    let mut tail_err = String::new();
    let _ = tail_cli
        .0
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut tail_err);
    assert!(
        tail_status.success(),
        "sluice tail: {tail_status:?}: {tail_err}"
    );
    assert!(tail_err.contains("shutting down"), "{tail_err}");
    assert!(tail_err.contains("sluice: cursor t1."), "{tail_err}");

    // Every acknowledged event is stored exactly once: in the store as left by the shutdown,
    // and through a restarted server (its WAL replay adds nothing twice).
    let out = cat(&dir, epoch - 5, epoch + 5);
    assert_success(&out);
    assert_eq!(ids(&out), (0..=50).collect::<Vec<i64>>());
    drop(server);
    let server = Server::start(&dir, "", None);
    let (status, body) = request(
        server.http,
        "GET",
        &format!("/v1/events?from={}&to={}", epoch - 5, epoch + 5),
        b"",
    );
    assert_eq!(status, 200, "{body}");
    let mut again: Vec<i64> = body
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["id"]
                .as_i64()
                .expect("id")
        })
        .collect();
    again.sort_unstable();
    assert_eq!(again, (0..=50).collect::<Vec<i64>>(), "after a restart");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn socket_flood_under_a_low_descriptor_limit_leaves_store_writes_working() {
    let dir = temp_dir("net-flood");
    let mut server = Server::start(&dir, "", Some(256));
    let log = server.log();
    assert!(log.contains("RLIMIT_NOFILE 256"), "{log}");
    // More sockets than the process may open at all.
    let mut flood = Vec::new();
    for i in 0..600 {
        let addr = if i % 2 == 0 { server.http } else { server.tcp };
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            flood.push(s);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    // Events in three past hours: each needs new store partitions (new files) during the flood.
    let base = now();
    let mut sent = 0i64;
    for hours_back in [3, 2, 1] {
        let epoch = base - hours_back * 3600;
        let body: String = (0..20)
            .map(|i| {
                format!(
                    "{{\"type\":\"FLOOD\",\"epoch\":{epoch},\"id\":{}}}\n",
                    sent + i
                )
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match try_request(server.http, "POST", "/v1/events", body.as_bytes()) {
                Some((200, _)) => break,
                other => assert!(
                    Instant::now() < deadline,
                    "ingest during the flood: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        sent += 20;
    }
    let mut tcp = connect(server.tcp);
    let line = format!(
        "{{\"type\":\"FLOOD\",\"epoch\":{},\"id\":{sent}}}\n",
        base - 1
    );
    assert_eq!(tcp_line(&mut tcp, line.as_bytes()), "ok 1 0");
    sent += 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.metric("sluice_events_flushed_total") < sent as f64 {
        assert!(
            Instant::now() < deadline,
            "events not stored during the flood: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        server.metric("sluice_store_errors_total"),
        0.0,
        "{}",
        server.log()
    );
    assert_eq!(server.metric("sluice_wal_errors_total"), 0.0);
    assert!(server.metric("sluice_connections_evicted_total{transport=\"http\"}") >= 1.0);
    let status = server.terminate(Duration::from_secs(15));
    assert!(
        status.success(),
        "serve exited with {status:?}: {}",
        server.log()
    );
    drop(flood);
    let log = server.log();
    assert!(!log.contains("Too many open files"), "{log}");
    let out = cat(&dir, base - 4 * 3600, base + 5);
    assert_success(&out);
    assert_eq!(ids(&out), (0..sent).collect::<Vec<i64>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_that_stops_reading_is_cut_after_the_write_timeout() {
    let dir = temp_dir("net-write-stall");
    let server = Server::start(&dir, "request_timeout_secs = 2", None);
    // ~7 MB of NDJSON: more than the socket buffers of both ends can hold.
    let epoch = now() - 60;
    let url = format!("http://{}", server.http);
    let gen = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "gen",
            "--count",
            "15000",
            "--seed",
            "5",
            "--rate",
            "1000",
            "--epoch",
            &epoch.to_string(),
        ])
        .args(["--http", &url])
        .output()
        .expect("sluice gen");
    assert_success(&gen);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.metric("sluice_events_flushed_total") < 15000.0 {
        assert!(Instant::now() < deadline, "events not stored");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut stalled = connect(server.http);
    write!(
        stalled,
        "GET /v1/events?from={}&to={} HTTP/1.1\r\nHost: x\r\n\r\n",
        epoch - 1,
        epoch + 60
    )
    .expect("write");
    // Never read: the server's writes stall, and after 2 s of stall the connection is cut.
    let deadline = Instant::now() + Duration::from_secs(30);
    // Absent until the first write timeout is counted.
    while !matches!(
        server.try_metric("sluice_connection_timeouts_total{transport=\"http\",kind=\"write\"}"),
        (Some(n), _) if n >= 1.0
    ) {
        assert!(Instant::now() < deadline, "a stalled response is never cut");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Only the metrics request itself stays open (earlier ones close just after answering).
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.metric("sluice_http_connections") > 1.0 {
        assert!(
            Instant::now() < deadline,
            "the stalled connection is still counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The stalled response arrives incomplete: the connection ends before the last chunk.
    let mut raw = Vec::new();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = stalled.read_to_end(&mut raw);
    assert!(!raw.ends_with(b"0\r\n\r\n"), "the whole response was sent");
    let _ = std::fs::remove_dir_all(&dir);
}
