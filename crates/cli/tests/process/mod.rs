//! A real `sluice serve` process for the crash, memory, auth and TLS tests: started from the binary
//! cargo built for these tests (`SLUICE_BIN` overrides the path), SIGKILLed or stopped with SIGTERM,
//! with its address read from `DATA/SERVER` and its RSS from `/proc/PID/status`.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use sluice_test_support::http::{Resp, BOUNDED};

/// The `sluice` binary: `SLUICE_BIN`, else the one cargo built for these tests.
pub fn sluice_bin() -> PathBuf {
    sluice_test_support::sluice_bin!()
}

/// An HTTP answer.
pub type Answer = Resp;

/// One HTTP/1.1 request with timeouts on connect, write and read; `Err` when the server is gone.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<Answer> {
    BOUNDED.try_request(addr, method, path, body)
}

/// The JSON values of the NDJSON lines of `text` (empty lines skipped).
pub fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A running `sluice serve`; SIGKILLed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// When the process was spawned.
    pub spawned: Instant,
}

impl Server {
    /// Starts `sluice serve --config CONFIG --http 127.0.0.1:0` (stderr appended to
    /// `DATA/../server.log`) and waits (30 s at most) until it serves (`DATA/SERVER` names it).
    pub fn start(config: &Path, data: &Path) -> Server {
        Server::start_with(config, data, &[])
    }

    /// [`start`](Self::start) with extra flags.
    pub fn start_with(config: &Path, data: &Path, extra: &[&str]) -> Server {
        let server_file = data.join("SERVER");
        let _ = std::fs::remove_file(&server_file);
        let log = data
            .parent()
            .expect("data dir has a parent")
            .join("server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("server log");
        let spawned = Instant::now();
        let mut child = Command::new(sluice_bin())
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--http", "127.0.0.1:0"])
            // The sharded pipeline is what the tests test, unless `extra` says how many.
            .args(
                ["--pipeline-threads", "2"]
                    .into_iter()
                    .filter(|_| !extra.contains(&"--pipeline-threads")),
            )
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn sluice serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            if let Ok(text) = std::fs::read_to_string(&server_file) {
                // `https://` when the server serves TLS.
                let t = text.trim();
                if let Some(a) = t
                    .strip_prefix("http://")
                    .or_else(|| t.strip_prefix("https://"))
                    .and_then(|a| a.parse().ok())
                {
                    break a;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("sluice serve exited before serving: {status}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sluice serve did not start within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Server {
            child,
            addr,
            spawned,
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (clean shutdown: open seconds flushed), waiting 60 s at most (then SIGKILL and fail).
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "sluice serve exited with {status}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sluice serve did not stop within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET` with a panic on failure.
    pub fn get(&self, path: &str) -> Answer {
        try_request(self.addr, "GET", path, b"").unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// The value of metric `name` (labels as printed); panics when it is missing.
    pub fn metric(&self, name: &str) -> f64 {
        sluice_test_support::metrics::series(&self.get("/metrics").text(), name)
    }

    /// Waits (at most `limit`) until nothing is pending: no event in memory, no batch in memory
    /// or in the spool.
    pub fn wait_idle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        // Events replayed for the current second are due only after the grace period.
        std::thread::sleep(Duration::from_millis(2500));
        while self.metric("sluice_pending_events") > 0.0
            || self.metric("sluice_memory_batches") > 0.0
            || self.metric("sluice_spool_batches") > 0.0
        {
            assert!(
                Instant::now() < deadline,
                "not idle in time:\n{}",
                self.get("/metrics").text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every event of `from..to` as JSON values.
    pub fn read(&self, from: i64, to: i64) -> Vec<Value> {
        let r = self.get(&format!("/v1/events?from={from}&to={to}"));
        assert_eq!(r.status, 200, "{}", r.text());
        lines(&r.text())
    }

    /// Resident set size (`VmRSS` of `/proc/PID/status`), bytes.
    pub fn rss(&self) -> u64 {
        rss_of(self.child.id())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `VmRSS` of process `pid`, bytes. Panics when the process is gone.
pub fn rss_of(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// The size in line `field` of `/proc/PID/status`, bytes. Panics when the process is gone (no
/// such file) or has exited (a zombie has no memory lines): a bound on the memory of a process
/// that is not there must fail, not pass with 0.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("process {pid} is gone: /proc/{pid}/status: {e}"));
    let value = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("process {pid} has no {field} (exited?):\n{status}"));
    let kb: u64 = value
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("process {pid}: {field} {value:?}: {e}"));
    kb * 1024
}

/// A small deterministic random generator (xorshift64*), seeded by the test.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `VmHWM` (peak resident set size) of process `pid`, bytes. Panics when the process is gone.
pub fn peak_rss_of(pid: u32) -> u64 {
    status_bytes(pid, "VmHWM:")
}
