//! The disk guard: whether acknowledged ingest may go on, given the free space of the disks
//! holding the data, WAL and spool directories and the health of the WAL.
//!
//! Contract:
//! - Ingest is *unavailable* while a watched disk has less than `min_free_bytes` free (the
//!   reserve: the store can still flush, the WAL still take done notes and shrink by
//!   checkpoints), or while the last WAL write failed. Unavailable payloads are refused before
//!   anything of them is logged or counted (HTTP 503, TCP `error unavailable …`), so the sender
//!   keeps them and retries; nothing refused is ever acknowledged.
//! - It is a state, not a failure: [`DiskGuard::refresh`] (every pipeline tick, 100 ms) measures
//!   again, and ingest resumes by itself once the space is back and a WAL write succeeded (the
//!   pipeline probes the WAL while it fails). No restart.
//! - Logged once when entered, once when left, and at most every [`REMIND_EVERY`] while it
//!   lasts (with how many payloads were refused): never one line per payload.
//! - Shown in `/metrics` (`sluice_disk_unavailable`, `sluice_disk_free_bytes`, …) and by
//!   `/healthz` (503, not ready, with the reason).

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// While ingest stays unavailable, a reminder is logged at most this often.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// Free bytes for unprivileged writers on the file system holding `dir` (`statvfs`).
pub fn free_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct DiskGuard {
    /// Directories whose disks are watched (data, WAL, spool; existing ones).
    dirs: Vec<PathBuf>,
    /// The reserve, bytes (0: free space not checked).
    min_free: u64,
    /// Why ingest is unavailable now, if it is.
    why: Option<String>,
    /// When it became unavailable, and when it was last logged.
    since: Option<Instant>,
    last_log: Option<Instant>,
    /// Payloads refused since it became unavailable.
    refused: u64,
    /// Lowest free space of the watched disks at the last refresh.
    pub free: u64,
    /// A WAL write failed and the log has not been seen working, with the reserve free,
    /// since (see [`recovered`](Self::recovered)).
    pub wal_failed: bool,
}

impl DiskGuard {
    /// Watches the disks of `dirs` with a reserve of `min_free` bytes.
    pub fn new(dirs: Vec<PathBuf>, min_free: u64) -> DiskGuard {
        DiskGuard {
            dirs,
            min_free,
            why: None,
            since: None,
            last_log: None,
            refused: 0,
            free: u64::MAX,
            wal_failed: false,
        }
    }

    /// Measures the free space again; `wal_failing` is the WAL's last write error, if it still
    /// stands. Logs a change of state (rate limited).
    pub fn refresh(&mut self, wal_failing: Option<String>) {
        let mut free = u64::MAX;
        let mut low = None;
        for d in &self.dirs {
            // A directory not created yet (spool) or unreadable is not measured.
            if let Ok(f) = free_bytes(d) {
                if f < self.min_free && low.is_none() {
                    low = Some(format!(
                        "disk nearly full: {f} bytes free under {}, below the reserve min_free_bytes = {}",
                        d.display(),
                        self.min_free
                    ));
                }
                free = free.min(f);
            }
        }
        self.free = free;
        let why = match (low, wal_failing) {
            (Some(l), _) => Some(l),
            (None, Some(w)) => Some(format!("write-ahead log failing: {w}")),
            (None, None) => None,
        };
        self.set(why);
    }

    /// Marks ingest unavailable at once (a WAL write just failed), until the next refresh.
    pub fn failed(&mut self, why: String) {
        self.wal_failed = true;
        self.set(Some(format!("write-ahead log failing: {why}")));
    }

    /// After a WAL failure: whether the reserve is free again (at the last refresh), so that a
    /// WAL that takes a write now will also take the done notes of what is stored next — a
    /// write that fits in the slack of a full disk proves nothing.
    pub fn reserve_free(&self) -> bool {
        self.free >= self.min_free
    }

    /// Why ingest is refused now, if it is; counts the refusal.
    pub fn refuse(&mut self) -> Option<String> {
        let why = self.why.clone()?;
        self.refused += 1;
        Some(why)
    }

    /// Why ingest is unavailable, if it is.
    pub fn why(&self) -> Option<&str> {
        self.why.as_deref()
    }

    fn set(&mut self, why: Option<String>) {
        let now = Instant::now();
        match (&self.why, why) {
            (None, None) => {}
            (None, Some(w)) => {
                eprintln!("sluice-server: ingest unavailable (503 / TCP error unavailable until it clears): {w}");
                self.why = Some(w);
                self.since = Some(now);
                self.last_log = Some(now);
                self.refused = 0;
            }
            (Some(_), Some(w)) => {
                if self
                    .last_log
                    .is_none_or(|t| now.duration_since(t) >= REMIND_EVERY)
                {
                    eprintln!(
                        "sluice-server: ingest still unavailable, {} payloads refused so far: {w}",
                        self.refused
                    );
                    self.last_log = Some(now);
                }
                self.why = Some(w);
            }
            (Some(_), None) => {
                let secs = self
                    .since
                    .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
                eprintln!("sluice-server: ingest available again after {secs:.1} s ({} payloads refused meanwhile)", self.refused);
                self.why = None;
                self.since = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_and_wal_failures_make_ingest_unavailable_until_cleared() {
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).unwrap();
        assert!(free > 0);
        let mut g = DiskGuard::new(vec![dir.clone()], 0);
        g.refresh(None);
        assert!(g.refuse().is_none());
        g.failed("No space left on device".into());
        assert!(g.refuse().unwrap().contains("No space left"));
        g.refresh(None);
        assert!(g.why().is_none());
        let mut g = DiskGuard::new(vec![dir], u64::MAX);
        g.refresh(None);
        assert!(g.refuse().unwrap().contains("below the reserve"));
    }
}
