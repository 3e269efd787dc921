//! A full disk and a damaged WAL, with real processes: a tmpfs holding the data directory (WAL,
//! store, spool) is filled and freed while clients ingest over HTTP and TCP with acks; the
//! server refuses while full (503 / `error unavailable`, `/healthz` not ready, metric set) and
//! resumes by itself; after a SIGKILL and a restart every acknowledged id is read back exactly
//! once. A restart on a nearly full disk replays fully. WAL damage: a garbage last segment
//! stops the start with a message naming `--salvage-wal`, which copies it aside and starts; a
//! bad checkpoint file warns and stores nothing twice.
//!
//! The tmpfs tests need root (`mount`); without it they print `SKIPPED: needs root`.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_server::{spawn, ServerConfig};

mod common;
#[path = "../../collector/tests/common/tmpfs.rs"]
mod tmpfs;
use common::{now, temp_dir, ChildServer, Http, Resp};
use sluice_test_support::metrics::series;
use sluice_test_support::wait_for;
use tmpfs::{fill, is_root, Tmpfs};

const CHILD_ENV: &str = "SLUICE_TEST_DISK_CHILD";

/// The bounds of this file's requests: connect 10 s, read and write 30 s each; a body cut short
/// by a killed server gives what arrived.
const HTTP: Http = Http {
    connect: Some(Duration::from_secs(10)),
    read: Duration::from_secs(30),
    write: Some(Duration::from_secs(30)),
    early_answer: false,
    lenient_chunks: true,
};

fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> io::Result<(u16, String)> {
    HTTP.try_request(addr, method, path, body)
        .map(Resp::into_pair)
}

fn metric(addr: SocketAddr, name: &str) -> f64 {
    series(&request(addr, "GET", "/metrics", b"").unwrap().1, name)
}

/// Waits until everything accepted is stored (nothing pending, nothing in the spool).
fn wait_stored(addr: SocketAddr) {
    wait_for(Duration::from_secs(60), "every event stored", || {
        metric(addr, "sluice_pending_events") == 0.0
            && metric(addr, "sluice_spool_batches") == 0.0
            && metric(addr, "sluice_memory_batches") == 0.0
    });
}

/// How many times each `id` is stored in `from..=to`.
fn stored_ids(addr: SocketAddr, from: i64, to: i64) -> BTreeMap<String, u32> {
    let (status, body) = request(
        addr,
        "GET",
        &format!("/v1/events?from={from}&to={}", to + 1),
        b"",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let mut seen = BTreeMap::new();
    for l in body.lines().filter(|l| !l.is_empty()) {
        let e: Value = serde_json::from_str(l).unwrap();
        *seen
            .entry(e["id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    seen
}

/// Every acknowledged id stored exactly once, and no id (acknowledged or not) twice.
fn assert_exactly_once(seen: &BTreeMap<String, u32>, acked: &[String]) {
    let lost: Vec<&String> = acked.iter().filter(|id| !seen.contains_key(*id)).collect();
    let twice: Vec<(&String, &u32)> = seen.iter().filter(|(_, &n)| n != 1).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged ids lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        twice.is_empty(),
        "{} ids stored more than once, e.g. {:?}",
        twice.len(),
        &twice[..twice.len().min(5)]
    );
}

fn server_config(data: &Path, grace_secs: u64) -> ServerConfig {
    ServerConfig {
        data_dir: data.to_path_buf(),
        http: Some("127.0.0.1:0".parse().unwrap()),
        tcp: Some("127.0.0.1:0".parse().unwrap()),
        udp: None,
        grace_secs: Some(grace_secs),
        fsync: "batch".parse().expect("fsync policy"),
        min_free_bytes: Some(2 << 20),
        wal_segment_bytes: 256 << 10,
        spool_max_bytes: 4 << 20,
        pipeline_threads: Some(2),
        ..ServerConfig::default()
    }
}

/// Not a test on its own: the server process the tests SIGKILL, run when the test binary is
/// started again with `CHILD_ENV` = `<data dir>:<grace secs>`.
#[test]
fn child_server() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, grace) = arg.rsplit_once(':').unwrap();
    let server = spawn(server_config(Path::new(dir), grace.parse().unwrap())).unwrap();
    println!(
        "ADDR {} {}",
        server.http_addr.unwrap(),
        server.tcp_addr.unwrap()
    );
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The child server process (addresses: HTTP, TCP); SIGKILLed on drop.
fn start_child(data: &Path, grace: u64) -> ChildServer {
    ChildServer::start(
        "child_server",
        CHILD_ENV,
        format!("{}:{grace}", data.display()),
    )
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    acked: Mutex<Vec<String>>,
    http_refused: AtomicU64,
    tcp_refused: AtomicU64,
    refusal_texts: Mutex<Vec<String>>,
}

fn events(prefix: &str, batch: u64, n: u64) -> Vec<Value> {
    let epoch = now();
    let pad = "p".repeat(200);
    (0..n).map(|i| json!({"type": "DISK", "epoch": epoch, "id": format!("{prefix}-{batch}-{i}"), "pad": pad})).collect()
}

/// Posts batches of 20 events over HTTP until `stop`; a refused batch is sent again (same ids).
fn http_client(
    addr: SocketAddr,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut batch = 0;
        while !stop.load(Ordering::Relaxed) {
            let evs = events("h", batch, 20);
            let body: String = evs.iter().map(|e| e.to_string() + "\n").collect();
            match request(addr, "POST", "/v1/events", body.as_bytes()) {
                Ok((200, _)) => {
                    seen.acked
                        .lock()
                        .unwrap()
                        .extend(evs.iter().map(|e| e["id"].as_str().unwrap().to_string()));
                    batch += 1;
                }
                Ok((503, text)) => {
                    seen.http_refused.fetch_add(1, Ordering::Relaxed);
                    seen.refusal_texts.lock().unwrap().push(text);
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok((status, text)) => panic!("HTTP {status}: {text}"),
                Err(_) => return, // the server is gone
            }
        }
    })
}

/// Sends one array line of 10 events per message over TCP, waiting for each ack; a refused
/// message is sent again.
fn tcp_client(
    addr: SocketAddr,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(10)) else {
            return;
        };
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut batch = 0;
        while !stop.load(Ordering::Relaxed) {
            let evs = events("t", batch, 10);
            if w.write_all(format!("{}\n", Value::Array(evs.clone())).as_bytes())
                .is_err()
            {
                return;
            }
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return; // the server is gone
            }
            if line.starts_with("ok 10 0") {
                seen.acked
                    .lock()
                    .unwrap()
                    .extend(evs.iter().map(|e| e["id"].as_str().unwrap().to_string()));
                batch += 1;
            } else {
                assert!(line.starts_with("error unavailable"), "TCP reply {line:?}");
                seen.tcp_refused.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    })
}

#[test]
fn full_disk_is_a_state_the_server_leaves_and_a_restart_stores_nothing_twice() {
    full_disk(false);
}

#[test]
fn sigkill_while_the_disk_is_full_then_restart_stores_nothing_twice() {
    full_disk(true);
}

/// Clients ingest over HTTP and TCP; the disk fills and is freed; SIGKILL (while full with
/// `kill_while_full`, then the disk is freed before the restart), restart, read back.
fn full_disk(kill_while_full: bool) {
    if !is_root() {
        println!("SKIPPED: needs root (mounts a tmpfs)");
        return;
    }
    // Unmounted (fs drops first) before its mount point is removed.
    let mount_point = temp_dir(if kill_while_full { "full-kill" } else { "full" });
    let fs = Tmpfs::mount(mount_point.to_path_buf(), 48);
    let data = fs.0.join("data");
    let start = now();
    let mut child = start_child(&data, 1);
    let (http, tcp) = (child.addrs[0], child.addrs[1]);
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = [
        http_client(http, seen.clone(), stop.clone()),
        tcp_client(tcp, seen.clone(), stop.clone()),
    ];
    let acked = || seen.acked.lock().unwrap().len();
    wait_for(
        Duration::from_secs(30),
        "acks before the disk fills",
        || acked() >= 2000,
    );

    // Full: every acknowledged write is refused, health and metrics say so, nothing is acked.
    let filler = fill(&fs.0, 0);
    wait_for(Duration::from_secs(30), "HTTP and TCP refusals", || {
        seen.http_refused.load(Ordering::Relaxed) >= 3
            && seen.tcp_refused.load(Ordering::Relaxed) >= 3
    });
    let (status, body) = request(http, "GET", "/healthz", b"").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not ready"), "{body}");
    assert_eq!(metric(http, "sluice_disk_unavailable"), 1.0);
    assert!(
        metric(http, "sluice_payloads_refused_unavailable_total")
            + metric(http, "sluice_wal_errors_total")
            > 0.0
    );
    let during = acked();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        acked(),
        during,
        "nothing is acknowledged while the disk is full"
    );
    let text = seen
        .refusal_texts
        .lock()
        .unwrap()
        .first()
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("unavailable"), "{text}");
    if kill_while_full {
        // The groups closed while full could be neither stored nor noted: a restart must store
        // them once, from the WAL.
        std::thread::sleep(Duration::from_millis(1500));
        let acked = kill_and_stop_clients(&mut child, &stop, clients, &seen);
        std::fs::remove_file(&filler).unwrap();
        let stored = restart_stores_each_once(&data, start, &acked);
        println!(
            "acked {} ids, killed while full, stored {stored} ids once each",
            acked.len()
        );
        return;
    }

    // Freed: ingest resumes in the same process.
    std::fs::remove_file(&filler).unwrap();
    wait_for(Duration::from_secs(30), "healthz ready again", || {
        request(http, "GET", "/healthz", b"").is_ok_and(|(s, _)| s == 200)
    });
    wait_for(
        Duration::from_secs(30),
        "acks after the disk is freed",
        || acked() >= during + 2000,
    );
    assert_eq!(metric(http, "sluice_disk_unavailable"), 0.0);
    let refused_http = seen.http_refused.load(Ordering::Relaxed);
    let refused_tcp = seen.tcp_refused.load(Ordering::Relaxed);

    // SIGKILL mid-stream, then a restart on the same data dir.
    let acked = kill_and_stop_clients(&mut child, &stop, clients, &seen);
    let stored = restart_stores_each_once(&data, start, &acked);
    println!(
        "acked {} ids, refused {refused_http} HTTP / {refused_tcp} TCP payloads while full, stored {stored} ids once each",
        acked.len()
    );
}

/// SIGKILLs the child mid-stream, stops the clients and waits for them; the ids they saw acked.
fn kill_and_stop_clients(
    child: &mut ChildServer,
    stop: &AtomicBool,
    clients: impl IntoIterator<Item = std::thread::JoinHandle<()>>,
    seen: &Seen,
) -> Vec<String> {
    child.kill();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    seen.acked.lock().unwrap().clone()
}

/// Restarts (in process) on `data`, waits until everything is stored and checks that every id
/// in `acked` is stored exactly once, and no id twice; the number of ids stored.
fn restart_stores_each_once(data: &Path, start: i64, acked: &[String]) -> usize {
    let server = spawn(server_config(data, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    wait_stored(addr);
    let stored = stored_ids(addr, start - 2, now() + 2);
    assert_exactly_once(&stored, acked);
    server.shutdown().unwrap();
    stored.len()
}

#[test]
fn restart_on_a_nearly_full_disk_replays_fully() {
    if !is_root() {
        println!("SKIPPED: needs root (mounts a tmpfs)");
        return;
    }
    // Unmounted (fs drops first) before its mount point is removed.
    let mount_point = temp_dir("nearly");
    let fs = Tmpfs::mount(mount_point.to_path_buf(), 24);
    let data = fs.0.join("data");
    let start = now();
    // A grace of an hour: nothing is stored before the kill, every event is in the WAL only.
    let mut child = start_child(&data, 3600);
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let client = http_client(child.addrs[0], seen.clone(), stop.clone());
    wait_for(Duration::from_secs(60), "a WAL of 6 MB", || {
        dir_bytes(&data.join("wal")) >= 6 << 20
    });
    let acked = kill_and_stop_clients(&mut child, &stop, [client], &seen);
    // Leave less free than the reserve (2 MiB): ingest is refused, the replay still stores
    // everything and the checkpoint frees the WAL's space.
    let filler = fill(&fs.0, 1 << 20);
    let server = spawn(server_config(&data, 1)).unwrap();
    let addr = server.http_addr.unwrap();
    wait_stored(addr);
    wait_for(
        Duration::from_secs(30),
        "the WAL shrinks and ingest is available",
        || request(addr, "GET", "/healthz", b"").is_ok_and(|(s, _)| s == 200),
    );
    assert!(
        dir_bytes(&data.join("wal")) < 1 << 20,
        "the replayed segments are deleted"
    );
    let stored = stored_ids(addr, start - 2, now() + 2);
    assert_exactly_once(&stored, &acked);
    server.shutdown().unwrap();
    drop(filler);
}

/// The bytes of the files in `dir`. Panics when `dir` cannot be read: a bound on the size of a
/// directory that is not there must fail, not pass with 0.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let m = e
                .metadata()
                .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
            if m.is_file() {
                m.len()
            } else {
                0
            }
        })
        .sum()
}

/// Posts `batches` batches of 20 events; returns their ids.
fn post_batches(addr: SocketAddr, prefix: &str, batches: u64) -> Vec<String> {
    let mut ids = Vec::new();
    for b in 0..batches {
        let evs = events(prefix, b, 20);
        let body: String = evs.iter().map(|e| e.to_string() + "\n").collect();
        let (status, text) = request(addr, "POST", "/v1/events", body.as_bytes()).unwrap();
        assert_eq!(status, 200, "{text}");
        ids.extend(evs.iter().map(|e| e["id"].as_str().unwrap().to_string()));
    }
    ids
}

fn segments(wal: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .collect();
    v.sort();
    v
}

#[test]
fn garbage_last_wal_segment_stops_the_start_and_salvage_starts_past_it() {
    let dir = temp_dir("salvage");
    let start = now();
    let cfg = ServerConfig {
        udp: None,
        tcp: None,
        ..server_config(&dir, 1)
    };
    let server = spawn(cfg.clone()).unwrap();
    let first = post_batches(server.http_addr.unwrap(), "a", 5);
    server.shutdown().unwrap(); // clean: stored, checkpointed
                                // A real process, SIGKILLed before it stores anything: its records are only in the WAL.
    let mut child = start_child(&dir, 3600);
    let lost = post_batches(child.addrs[0], "b", 5);
    child.kill();
    let seg = segments(&dir.join("wal")).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len() as usize;
    let garbage: Vec<u8> = (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(&seg, &garbage).unwrap();

    // The start refuses, says how to get past it, and touches nothing.
    let err = spawn(cfg.clone()).unwrap_err().to_string();
    assert!(
        err.contains("corrupted record") && err.contains("--salvage-wal"),
        "{err}"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), garbage, "nothing cut");

    // Salvage: the damaged file is copied aside byte for byte, the server starts and serves.
    let server = spawn(ServerConfig {
        salvage_wal: true,
        ..cfg.clone()
    })
    .unwrap();
    let addr = server.http_addr.unwrap();
    wait_for(
        Duration::from_secs(30),
        "the salvaged server serving",
        || request(addr, "GET", "/healthz", b"").is_ok_and(|(s, _)| s == 200),
    );
    let aside: Vec<PathBuf> = std::fs::read_dir(dir.join("wal").join("damaged"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        garbage,
        "the damaged file is kept"
    );
    let more = post_batches(addr, "c", 2);
    wait_stored(addr);
    server.shutdown().unwrap();
    let server = spawn(cfg).unwrap();
    let stored = stored_ids(server.http_addr.unwrap(), start - 2, now() + 2);
    // Stored before the damage and after the salvage: once each. The damaged records are
    // what the salvage gave up (kept aside, and logged).
    assert_exactly_once(&stored, &[first, more].concat());
    assert!(lost.iter().all(|id| !stored.contains_key(id)));
    server.shutdown().unwrap();
}

#[test]
fn bad_checkpoint_file_warns_and_stores_nothing_twice() {
    let dir = temp_dir("checkpoint");
    let start = now();
    let cfg = ServerConfig {
        udp: None,
        tcp: None,
        wal_segment_bytes: 64 << 20,
        ..server_config(&dir, 1)
    };
    let server = spawn(cfg.clone()).unwrap();
    let addr = server.http_addr.unwrap();
    let ids = post_batches(addr, "k", 30);
    wait_stored(addr);
    server.shutdown().unwrap();
    // Everything is stored and checkpointed, but the records are still in the (only) segment.
    let cp = dir.join("wal").join("checkpoint");
    let mut bytes = std::fs::read(&cp).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&cp, bytes).unwrap();
    let server = spawn(cfg).unwrap();
    let addr = server.http_addr.unwrap();
    assert!(
        metric(addr, "sluice_wal_replayed_records") >= 30.0,
        "every record present is replayed"
    );
    assert!(
        metric(addr, "sluice_wal_replay_skipped_events") >= 600.0,
        "done notes skip what is stored"
    );
    wait_stored(addr);
    assert_exactly_once(&stored_ids(addr, start - 2, now() + 2), &ids);
    server.shutdown().unwrap();
}

const RESERVE_CHILD_ENV: &str = "SLUICE_TEST_RESERVE_CHILD";

/// Not a test on its own: a server with the default config but for its addresses (HTTP only)
/// and, when given, `min_free_bytes`, run when the test binary is started again with
/// `RESERVE_CHILD_ENV` = `<data dir>:<min_free_bytes, or "default">`. Its log is its stderr.
#[test]
fn reserve_child_server() {
    let Ok(arg) = std::env::var(RESERVE_CHILD_ENV) else {
        return;
    };
    let (dir, reserve) = arg.rsplit_once(':').expect("<dir>:<reserve>");
    let server = spawn(ServerConfig {
        data_dir: PathBuf::from(dir),
        http: Some("127.0.0.1:0".parse().unwrap()),
        tcp: None,
        udp: None,
        min_free_bytes: (reserve != "default").then(|| reserve.parse().expect("reserve bytes")),
        ..ServerConfig::default()
    })
    .unwrap();
    println!("ADDR {}", server.http_addr.unwrap());
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// A [`reserve_child_server`] process with its log (stderr) collected; SIGKILLed on drop.
struct LoggedChild {
    proc: std::process::Child,
    http: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl LoggedChild {
    fn start(data: &Path, min_free_bytes: Option<u64>) -> LoggedChild {
        use std::process::{Command, Stdio};
        let reserve = min_free_bytes.map_or("default".to_owned(), |n| n.to_string());
        let mut proc = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "reserve_child_server",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(RESERVE_CHILD_ENV, format!("{}:{reserve}", data.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let mut err = BufReader::new(proc.stderr.take().unwrap());
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).unwrap_or(0) > 0 {
                eprint!("child: {line}");
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut out = BufReader::new(proc.stdout.take().unwrap());
        let http = loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                let _ = proc.kill();
                let _ = proc.wait();
                panic!("child exited before serving: {}", log.lock().unwrap());
            }
            if let Some(i) = line.find("ADDR ") {
                break line[i + 5..].trim().parse().unwrap();
            }
        };
        LoggedChild { proc, http, log }
    }

    /// The first log line containing `what` (waits up to 10 s for it).
    fn log_line(&self, what: &str) -> String {
        let mut found = None;
        wait_for(
            Duration::from_secs(10),
            &format!("a log line with {what:?}"),
            || {
                found = self
                    .log
                    .lock()
                    .unwrap()
                    .lines()
                    .find(|l| l.contains(what))
                    .map(str::to_owned);
                found.is_some()
            },
        );
        found.unwrap()
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// One small payload over HTTP: the status and the reply.
fn post_one(addr: SocketAddr) -> (u16, String) {
    let body = format!("{}\n", events("r", 0, 1)[0]);
    request(addr, "POST", "/v1/events", body.as_bytes()).unwrap()
}

#[test]
fn default_reserve_fits_a_48_mib_disk_ingest_and_healthz_work_and_the_log_says_so() {
    if !is_root() {
        println!("SKIPPED: needs root (mounts a tmpfs)");
        return;
    }
    // Unmounted (fs drops first) before its mount point is removed.
    let mount_point = temp_dir("reserve-default");
    let fs = Tmpfs::mount(mount_point.to_path_buf(), 48);
    let data = fs.0.join("data");
    let child = LoggedChild::start(&data, None);
    let (status, text) = post_one(child.http);
    assert_eq!(status, 200, "{text}");
    let (status, text) = request(child.http, "GET", "/healthz", b"").unwrap();
    assert_eq!(status, 200, "{text}");
    // 5 % of 48 MiB = 2516582 bytes.
    let line = child.log_line("free-space reserve");
    assert!(
        line.contains(&format!(
            "free-space reserve 2.4 MiB (5 % of the 48 MiB disk holding {}",
            data.display()
        )) && line.contains("min_free_bytes"),
        "{line}"
    );
    assert!(!line.contains("refused"), "{line}");
    let metrics = request(child.http, "GET", "/metrics", b"").unwrap().1;
    assert_eq!(series(&metrics, "sluice_disk_min_free_bytes"), 2_516_582.0);
    assert_eq!(series(&metrics, "sluice_disk_unavailable"), 0.0);
}

#[test]
fn explicit_reserve_larger_than_the_disk_is_used_and_the_log_names_the_setting() {
    if !is_root() {
        println!("SKIPPED: needs root (mounts a tmpfs)");
        return;
    }
    // Unmounted (fs drops first) before its mount point is removed.
    let mount_point = temp_dir("reserve-explicit");
    let fs = Tmpfs::mount(mount_point.to_path_buf(), 48);
    let data = fs.0.join("data");
    let child = LoggedChild::start(&data, Some(64 << 20));
    let line = child.log_line("free-space reserve");
    assert!(
        line.contains(&format!(
            "free-space reserve 64 MiB (min_free_bytes) is larger than the whole disk (48 MiB) holding {}: ingest will be refused; lower min_free_bytes (sluice serve --min-free)",
            data.display()
        )),
        "{line}"
    );
    // As given, not scaled: ingest is refused, health says why.
    let (status, text) = post_one(child.http);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("min_free_bytes"), "{text}");
    let (status, text) = request(child.http, "GET", "/healthz", b"").unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("larger than the whole disk") && text.contains("min_free_bytes"),
        "{text}"
    );
    let metrics = request(child.http, "GET", "/metrics", b"").unwrap().1;
    assert_eq!(
        series(&metrics, "sluice_disk_min_free_bytes"),
        (64u64 << 20) as f64
    );
    assert_eq!(series(&metrics, "sluice_disk_unavailable"), 1.0);
}
