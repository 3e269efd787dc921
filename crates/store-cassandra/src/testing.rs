//! A real local cluster for tests (`scripts/cassandra.sh`), shared by every test binary.
//!
//! # Contract
//! - [`cluster`] returns `None` (and prints `SKIPPED: … SLUICE_SKIP_CASSANDRA=1`) only when the
//!   opt-out variable `SLUICE_SKIP_CASSANDRA=1` is set; otherwise it starts the cluster shape
//!   asked for if it is not up (the script is idempotent) and panics if that fails.
//! - The returned [`ClusterGuard`] holds a shared lock on `target/cassandra/lock` for as long as
//!   the test uses the cluster; a change of shape (1 node ↔ 3 nodes) takes the lock exclusively,
//!   so it waits for every user of the other shape. The cluster is left running for the next
//!   test binary; `make test` stops it at the end (`scripts/cassandra.sh stop`).
//! - [`fresh_keyspace`] names a keyspace no other test uses (process id + counter).

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that skips every Cassandra test.
pub const SKIP_VAR: &str = "SLUICE_SKIP_CASSANDRA";

/// Holds the cluster for a test (a shared lock); drop it when done.
pub struct ClusterGuard {
    _lock: File,
    /// The CQL contact points, `127.0.0.K:9042`.
    pub hosts: Vec<String>,
}

impl ClusterGuard {
    /// The hosts joined with `,` (the URL form).
    pub fn hosts_csv(&self) -> String {
        self.hosts.join(",")
    }
}

/// The repository's `scripts/cassandra.sh`.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cassandra.sh")
}

fn home() -> PathBuf {
    std::env::var_os("SLUICE_CASSANDRA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/cassandra"))
}

fn shape() -> usize {
    std::fs::read_to_string(home().join("shape"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `scripts/cassandra.sh ARGS`, panicking with its output if it fails.
pub fn run_script(args: &[&str]) {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("running scripts/cassandra.sh");
    assert!(
        out.status.success(),
        "scripts/cassandra.sh {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The running cluster of `nodes` nodes (1 or 3), started if needed; `None` when skipped.
pub fn cluster(nodes: usize, test: &str) -> Option<ClusterGuard> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {test}: {SKIP_VAR}=1 (Cassandra tests opted out)");
        return None;
    }
    std::fs::create_dir_all(home()).expect("creating target/cassandra");
    let path = home().join("lock");
    loop {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .expect("opening the cluster lock file");
        f.lock_shared().expect("locking the cluster (shared)");
        let up = shape() == nodes
            && Command::new("bash")
                .arg(script())
                .arg("status")
                .output()
                .map(|o| o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("down"))
                .unwrap_or(false);
        if up {
            let hosts = (1..=nodes)
                .map(|k| format!("{}:9042", node_ip(k)))
                .collect();
            return Some(ClusterGuard { _lock: f, hosts });
        }
        f.unlock().expect("unlocking the cluster");
        f.lock().expect("locking the cluster (exclusive)");
        run_script(&["start", &nodes.to_string()]);
        f.unlock().expect("unlocking the cluster");
    }
}

/// The address of node `k` (1-based) of the script's cluster: `127.0.0.K`, or
/// `$SLUICE_CASSANDRA_NET.K` (a cluster beside another one on the machine; see the script).
pub fn node_ip(k: usize) -> String {
    let net = std::env::var("SLUICE_CASSANDRA_NET").unwrap_or_else(|_| "127.0.0".into());
    format!("{net}.{k}")
}

/// A keyspace name no other test of any process uses.
pub fn fresh_keyspace(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
