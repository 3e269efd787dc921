//! A real VictoriaMetrics single node for the export tests (Prometheus remote write, Graphite
//! plaintext, the text-format import, the query API): started by `scripts/victoriametrics.sh
//! start` (idempotent; a file lock keeps test binaries from starting it twice) and left running
//! for the next test binary (`make test` stops it at the end).
//!
//! It fails to start → the test fails, unless `SLUICE_SKIP_VM=1` ([`victoriametrics`] then says
//! SKIPPED and returns `None`).

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

/// Starts the server if it is not up (under a lock shared by test binaries); panics when it
/// cannot.
fn start() -> VmServer {
    const SCRIPT: &str = "victoriametrics.sh";
    let home = crate::script_server::home("SLUICE_VM_HOME", "victoriametrics");
    let vars = crate::script_server::start(SCRIPT, &home, SKIP_VAR);
    VmServer {
        http: crate::script_server::var(&vars, SCRIPT, "SLUICE_VM_HTTP"),
        graphite: crate::script_server::var(&vars, SCRIPT, "SLUICE_VM_GRAPHITE"),
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
