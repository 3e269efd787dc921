//! A real Alertmanager for one test (`scripts/alertmanager.sh`, built once from the Go module
//! proxy into ~/.cache/sluice/bin): started on a free loopback port, routing every alert to the
//! test's own webhook URL (one group per alert, group_wait 0s, group_interval 1s), stopped by
//! its PID when the handle drops.
//!
//! It cannot be built or started → the test fails, unless `SLUICE_SKIP_ALERTMANAGER=1`
//! ([`alertmanager`] then says SKIPPED and returns `None`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::script_server::repo_root;

/// The environment variable that skips the Alertmanager tests.
pub const SKIP_VAR: &str = "SLUICE_SKIP_ALERTMANAGER";

/// A running Alertmanager; stopped (and its state directory removed) on drop.
#[derive(Debug)]
pub struct Alertmanager {
    /// `http://127.0.0.1:PORT`: `POST /api/v2/alerts`, `GET /api/v2/alerts`.
    pub url: String,
    home: PathBuf,
}

/// Starts an Alertmanager that routes every alert to `webhook_url` (building it first if the
/// cache lacks it); panics with the script's output when it cannot. `None`, after printing
/// SKIPPED, when `SLUICE_SKIP_ALERTMANAGER=1`.
pub fn alertmanager(test: &str, webhook_url: &str) -> Option<Alertmanager> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {test}: {SKIP_VAR}=1 (Alertmanager tests opted out)");
        return None;
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    // Under target/alertmanager/, where `scripts/alertmanager.sh stop-all` (make test) finds
    // an instance a killed test left.
    let home = repo_root().join("target/alertmanager").join(format!(
        "{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/alertmanager.sh"))
        .args(["start", webhook_url])
        .env("SLUICE_AM_HOME", &home)
        .output()
        .unwrap_or_else(|e| panic!("running scripts/alertmanager.sh start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/alertmanager.sh start failed (set {SKIP_VAR}=1 to skip these tests):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export SLUICE_AM_URL="))
        .unwrap_or_else(|| {
            panic!("scripts/alertmanager.sh start printed no SLUICE_AM_URL:\n{stdout}")
        })
        .to_owned();
    Some(Alertmanager { url, home })
}

impl Alertmanager {
    /// The alerts it holds now (`GET /api/v2/alerts`, as JSON).
    pub fn alerts(&self) -> serde_json::Value {
        crate::http::get(crate::http::addr_of(&self.url), "/api/v2/alerts").json()
    }

    /// Its log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.join("logs/alertmanager.log")).unwrap_or_default()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/alertmanager.sh"))
            .arg("stop")
            .env("SLUICE_AM_HOME", &self.home)
            .output();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}
