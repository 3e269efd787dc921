//! A real VictoriaMetrics single node for the export tests (Prometheus remote write, Graphite
//! plaintext, the text-format import, the query API): started by `scripts/victoriametrics.sh
//! start` (idempotent; a file lock keeps test binaries from starting it twice) and left running
//! for the next test binary (`make test` stops it at the end).
//!
//! It fails to start → the test fails, unless `SLUICE_SKIP_VM=1` ([`victoriametrics`] then says
//! SKIPPED and returns `None`).

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The environment variable that skips the VictoriaMetrics tests.
pub const SKIP_VAR: &str = "SLUICE_SKIP_VM";

/// What `scripts/victoriametrics.sh start` says about the running server.
#[derive(Debug, Clone)]
pub struct VmServer {
    /// `http://127.0.0.1:PORT`: `/api/v1/write`, `/api/v1/export`, `/api/v1/import/prometheus`.
    pub http: String,
    /// `127.0.0.1:PORT`: the Graphite plaintext listener (TCP).
    pub graphite: String,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn home() -> PathBuf {
    std::env::var_os("SLUICE_VM_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/victoriametrics"))
}

/// Starts the server if it is not up (under a lock shared by test binaries); panics when it
/// cannot.
fn start() -> VmServer {
    std::fs::create_dir_all(home()).expect("creating the VictoriaMetrics state directory");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(home().join("lock"))
        .expect("opening the VictoriaMetrics lock file");
    lock.lock()
        .expect("locking the VictoriaMetrics state (exclusive)");
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/victoriametrics.sh"))
        .arg("start")
        .output()
        .expect("running scripts/victoriametrics.sh start");
    lock.unlock().expect("unlocking the VictoriaMetrics state");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/victoriametrics.sh start failed (set {SKIP_VAR}=1 to skip the VictoriaMetrics \
         tests):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: HashMap<&str, &str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .collect();
    let var = |name: &str| {
        vars.get(name)
            .unwrap_or_else(|| panic!("scripts/victoriametrics.sh start printed no {name}"))
            .to_string()
    };
    VmServer {
        http: var("SLUICE_VM_HTTP"),
        graphite: var("SLUICE_VM_GRAPHITE"),
    }
}

/// The running server (started once per process), or `None` after printing SKIPPED when
/// `SLUICE_SKIP_VM=1`.
pub fn victoriametrics(test: &str) -> Option<&'static VmServer> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {test}: {SKIP_VAR}=1 (VictoriaMetrics tests opted out)");
        return None;
    }
    static SERVER: OnceLock<VmServer> = OnceLock::new();
    Some(SERVER.get_or_init(start))
}
