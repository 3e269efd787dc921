//! Exactly once, proven without luck: a real `sluice serve` (2 pipeline threads) under
//! acknowledged load over four groups with late events is made to die at one named step of the
//! path (`SLUICE_FAILPOINT=POINT@N`, see `sluice_collector::failpoint`), then restarted (the
//! replay, more load, a SIGKILL), then started cleanly: every acknowledged id must be read back
//! exactly once. One test per crash point; each fails if its point was never reached.
//!
//! The two points that need a failing store (`spool.pushed`, `settle.noted`) are crashed in
//! process by `crates/collector/tests/exactly_once.rs`, which also covers every other point
//! without a server.
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod common;
mod load;
mod process;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::now;
use load::{Clients, Load, Targets};
use process::{sluice_bin, Server};

const THREADS: &str = "2";

/// `sluice serve` armed to abort at hit `n` of `point`; `None` once it serves (its address), or
/// the child exits first (a point reached during the start: `replay.done`).
fn spawn_armed(
    config: &Path,
    data: &Path,
    point: &str,
    n: u64,
) -> (Child, Option<std::net::SocketAddr>) {
    let server_file = data.join("SERVER");
    let _ = std::fs::remove_file(&server_file);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.parent().expect("data has a parent").join("server.log"))
        .expect("server log");
    let mut child = Command::new(sluice_bin())
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(["--http", "127.0.0.1:0", "--pipeline-threads", THREADS])
        .env("SLUICE_FAILPOINT", format!("{point}@{n}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn sluice serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(a) = std::fs::read_to_string(&server_file).ok().and_then(|t| {
            let t = t.trim();
            let a = t
                .strip_prefix("http://")
                .or_else(|| t.strip_prefix("https://"))?;
            a.parse().ok()
        }) {
            return (child, Some(a));
        }
        if let Ok(Some(_)) = child.try_wait() {
            return (child, None);
        }
        assert!(Instant::now() < deadline, "sluice serve did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (30 s at most) for `child` to die of its crash point; panics if it lives on.
fn wait_for_crash(child: &mut Child, point: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            assert!(!status.success(), "{point}: the server exited cleanly");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{point}: the crash point was not reached within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Crashes a loaded server at hit `n` of `point`, restarts it under load and SIGKILLs it, starts
/// it cleanly and checks every acknowledged id once.
fn crash_at(point: &str, n: u64) {
    let dir = sluice_test_support::temp_dir(&format!("fp-{point}"));
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\n"),
    )
    .unwrap();
    let flags = ["--pipeline-threads", THREADS];
    let start = now();
    let load = Load::start_mixed(Clients {
        http: 2,
        tcp: 1,
        udp: 1,
    });
    let log = dir.join("server.log");
    if point == "replay.done" {
        // Something to replay first: a loaded server killed mid-stream.
        let mut s = Server::start_with(&config, &data, &flags);
        load.target_all(Some(Targets::of(s.addr, &log)));
        std::thread::sleep(Duration::from_millis(1500));
        s.kill();
        load.target(None);
    }
    let (mut child, addr) = spawn_armed(&config, &data, point, n);
    // (A server that died during its start has no listeners to send to.)
    load.target_all(addr.map(|a| Targets::of(a, &log)));
    wait_for_crash(&mut child, point);
    load.target(None);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains(&format!("crash point {point} reached")),
        "{point}: the server died of something else:\n{text}"
    );
    // The replay of what the crash left, under load, itself killed mid-flush.
    let mut s = Server::start_with(&config, &data, &flags);
    load.target_all(Some(Targets::of(s.addr, &log)));
    std::thread::sleep(Duration::from_millis(1200));
    s.kill();
    let sent = load.stop();
    assert!(
        !sent.acked.is_empty(),
        "{point}: nothing was acknowledged before the crash"
    );
    let server = Server::start_with(&config, &data, &flags);
    server.wait_idle(Duration::from_secs(60));
    let (from, to) = (start - 10, now() + 10);
    let events = server.read(from, to);
    let verdict = load::check(&sent, &events);
    println!("{point}@{n}: {}", verdict.summary());
    verdict.assert_exactly_once();
    // The completeness counts say what is stored: none lost between index and counts writes.
    assert_eq!(
        load::counted(&server, from, to),
        load::read_by_group(&events),
        "{point}: completeness counts"
    );
    server.stop();
}

/// One test per crash point reached by a server on the embedded store, with the hit it crashes
/// at (after some load: per-payload points late, per-flush points after a few flushes).
macro_rules! crash_points {
    ($($name:ident: $point:literal @ $n:literal,)*) => {
        $(
            #[test]
            fn $name() {
                crash_at($point, $n);
            }
        )*
        /// Every point of `sluice_collector::failpoint::POINTS` has a test here or in process.
        #[test]
        fn every_crash_point_is_tested() {
            let here = [$($point),*];
            let in_process = ["spool.pushed", "settle.noted"];
            for p in sluice_collector::failpoint::POINTS {
                assert!(
                    here.contains(p) || in_process.contains(p),
                    "crash point {p} has no test"
                );
            }
        }
    };
}

crash_points! {
    ingest_parsed: "ingest.parsed" @ 300,
    ingest_logged: "ingest.logged" @ 300,
    route_sent: "route.sent" @ 300,
    route_added: "route.added" @ 300,
    ack_durable: "ack.durable" @ 300,
    flush_stored: "flush.stored" @ 4,
    flush_noted: "flush.noted" @ 4,
    flush_indexed: "flush.indexed" @ 4,
    flush_counted: "flush.counted" @ 4,
    settle_synced: "settle.synced" @ 25,
    settle_published: "settle.published" @ 25,
    checkpoint_written: "checkpoint.written" @ 4,
    replay_done: "replay.done" @ 1,
}
