//! The disk guard: whether acknowledged ingest may go on, given the free space of the disks
//! holding the data, WAL and spool directories and the health of the WAL.
//!
//! Contract:
//! - Ingest is *unavailable* while a watched disk has less than its reserve free (the
//!   reserve: the store can still flush, the WAL still take done notes and shrink by
//!   checkpoints), or while the last WAL write failed. Unavailable payloads are refused before
//!   anything of them is logged or counted (HTTP 503, TCP `error unavailable …`), so the sender
//!   keeps them and retries; nothing refused is ever acknowledged.
//! - The reserve ([`reserve_for`]): `min_free_bytes` as given when it is set (TOML, `sluice
//!   serve --min-free`; 0 = off), else per disk the smaller of 64 MiB and 5 % of the disk's
//!   total size, so a small volume still takes data. Logged at start, one line
//!   ([`DiskGuard::reserve_line`]), saying plainly when it exceeds the whole disk or its free
//!   space (ingest refused) and which setting to lower.
//! - It is a state, not a failure: [`DiskGuard::refresh`] (every pipeline tick, 100 ms) measures
//!   again, and ingest resumes by itself once the space is back and a WAL write succeeded (the
//!   pipeline probes the WAL while it fails). No restart.
//! - Logged once when entered, once when left, and at most every [`REMIND_EVERY`] while it
//!   lasts (with how many payloads were refused): never one line per payload.
//! - Shown in `/metrics` (`sluice_disk_unavailable`, `sluice_disk_free_bytes`,
//!   `sluice_disk_min_free_bytes`, …) and by `/healthz` (503, not ready, with the reason).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{DEFAULT_MIN_FREE_BYTES, DEFAULT_MIN_FREE_PERCENT};

/// While ingest stays unavailable, a reminder is logged at most this often.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// What to change, named in the messages about the reserve.
const SETTING: &str = "min_free_bytes (sluice serve --min-free)";

/// Free bytes for unprivileged writers on the file system holding `dir` (`statvfs`).
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    Ok(space(dir)?.free)
}

/// The size of the file system holding a directory (`statvfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Total size, bytes (`f_blocks * f_frsize`).
    pub total: u64,
    /// Free for unprivileged writers, bytes (`f_bavail * f_frsize`).
    pub free: u64,
}

/// The size and free space of the file system holding `dir`.
pub fn space(dir: &Path) -> std::io::Result<Space> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let frsize = st.fragment_size() as u64;
    Ok(Space {
        total: (st.blocks() as u64).saturating_mul(frsize),
        free: (st.blocks_available() as u64).saturating_mul(frsize),
    })
}

/// The default reserve of a disk of `total` bytes: the smaller of [`DEFAULT_MIN_FREE_BYTES`]
/// (64 MiB) and [`DEFAULT_MIN_FREE_PERCENT`] (5 %) of `total`.
pub fn default_reserve(total: u64) -> u64 {
    let share = u128::from(total) * u128::from(DEFAULT_MIN_FREE_PERCENT) / 100;
    u64::try_from(share).map_or(DEFAULT_MIN_FREE_BYTES, |s| s.min(DEFAULT_MIN_FREE_BYTES))
}

/// The reserve in force on a disk of `total` bytes: `configured` (`min_free_bytes`) as given
/// when set, else [`default_reserve`].
pub fn reserve_for(configured: Option<u64>, total: u64) -> u64 {
    configured.unwrap_or_else(|| default_reserve(total))
}

/// `bytes` for a person: `512 bytes`, `2.4 MiB`, `64 MiB`, `1.5 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let text = format!("{v:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {}", UNITS[unit])
}

/// How the reserve of a disk came about, for the log: `64 MiB (min_free_bytes)`,
/// `2.4 MiB (5 % of the 48 MiB disk holding DIR; min_free_bytes to change)`.
fn reserve_text(configured: Option<u64>, reserve: u64, total: u64, dir: &Path) -> String {
    let r = human_bytes(reserve);
    let t = human_bytes(total);
    let d = dir.display();
    match configured {
        Some(_) => format!("{r} (min_free_bytes)"),
        None if reserve < DEFAULT_MIN_FREE_BYTES => format!(
            "{r} ({DEFAULT_MIN_FREE_PERCENT} % of the {t} disk holding {d}; min_free_bytes to change)"
        ),
        None => format!(
            "{r} (the default; {DEFAULT_MIN_FREE_PERCENT} % of the {t} disk holding {d} would be more; min_free_bytes to change)"
        ),
    }
}

/// Why a disk below its reserve refuses ingest (the reason `/healthz`, the 503s and the log
/// give).
fn below_reserve(configured: Option<u64>, reserve: u64, s: Space, dir: &Path) -> String {
    let d = dir.display();
    if reserve > s.total {
        format!(
            "the reserve min_free_bytes = {} is larger than the whole disk ({}) holding {d}: lower {SETTING}",
            human_bytes(reserve),
            human_bytes(s.total)
        )
    } else {
        let what = match configured {
            Some(_) => format!("min_free_bytes = {}", human_bytes(reserve)),
            None => format!(
                "{} (the default for this disk; min_free_bytes to change)",
                human_bytes(reserve)
            ),
        };
        format!(
            "disk nearly full: {} free under {d}, below the reserve {what}",
            human_bytes(s.free)
        )
    }
}

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct DiskGuard {
    /// Directories whose disks are watched (data, WAL, spool; existing ones).
    dirs: Vec<PathBuf>,
    /// `min_free_bytes`: the reserve of every disk, bytes (0: free space not checked); `None`:
    /// each disk's [`default_reserve`].
    configured: Option<u64>,
    /// A disk was below its reserve at the last refresh.
    low: bool,
    /// Why ingest is unavailable now, if it is.
    why: Option<String>,
    /// When it became unavailable, and when it was last logged.
    since: Option<Instant>,
    last_log: Option<Instant>,
    /// Payloads refused since it became unavailable.
    refused: u64,
    /// Lowest free space of the watched disks at the last refresh.
    pub free: u64,
    /// The reserve in force on the first watched disk measured at the last refresh (the data
    /// directory's), bytes (`sluice_disk_min_free_bytes`).
    pub reserve: u64,
    /// A WAL write failed and the log has not been seen working, with the reserve free,
    /// since (see [`recovered`](Self::recovered)).
    pub wal_failed: bool,
}

impl DiskGuard {
    /// Watches the disks of `dirs` with the reserve `min_free_bytes` (see [`reserve_for`]).
    pub fn new(dirs: Vec<PathBuf>, min_free_bytes: Option<u64>) -> DiskGuard {
        DiskGuard {
            dirs,
            configured: min_free_bytes,
            low: false,
            why: None,
            since: None,
            last_log: None,
            refused: 0,
            free: u64::MAX,
            reserve: min_free_bytes.unwrap_or(DEFAULT_MIN_FREE_BYTES),
            wal_failed: false,
        }
    }

    /// The reserve in force, one line for the start (without the `sluice-server: ` prefix):
    /// `free-space reserve 2.4 MiB (5 % of the 48 MiB disk holding DIR; min_free_bytes to
    /// change)`, per disk when the directories are on several; when the reserve is larger than
    /// a whole disk or than its free space, says so and which setting to lower.
    pub fn reserve_line(&self) -> String {
        let mut seen = Vec::new();
        let mut parts = Vec::new();
        for d in &self.dirs {
            let (Ok(s), Ok(meta)) = (space(d), std::fs::metadata(d)) else {
                continue;
            };
            // One part per file system (the first directory on it names it).
            let dev = std::os::unix::fs::MetadataExt::dev(&meta);
            if seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
            let reserve = reserve_for(self.configured, s.total);
            let mut part = if reserve == 0 {
                "off (min_free_bytes = 0)".to_owned()
            } else {
                reserve_text(self.configured, reserve, s.total, d)
            };
            if reserve > s.total {
                part.push_str(&format!(
                    " is larger than the whole disk ({}) holding {}: ingest will be refused; lower {SETTING}",
                    human_bytes(s.total),
                    d.display()
                ));
            } else if reserve > s.free {
                part.push_str(&format!(
                    " is more than the {} free on the {} disk holding {}: ingest is refused until space is freed or {SETTING} is lowered",
                    human_bytes(s.free),
                    human_bytes(s.total),
                    d.display()
                ));
            }
            parts.push(part);
        }
        if parts.is_empty() {
            let how = match self.configured {
                Some(n) => format!("{} (min_free_bytes)", human_bytes(n)),
                None => format!("the smaller of {} and {DEFAULT_MIN_FREE_PERCENT} % of each disk (min_free_bytes to change)", human_bytes(DEFAULT_MIN_FREE_BYTES)),
            };
            return format!("free-space reserve {how}; no data directory measured yet");
        }
        format!("free-space reserve {}", parts.join(", "))
    }

    /// Measures the free space again; `wal_failing` is the WAL's last write error, if it still
    /// stands. Logs a change of state (rate limited).
    pub fn refresh(&mut self, wal_failing: Option<String>) {
        let mut free = u64::MAX;
        let mut first_reserve = None;
        let mut low = None;
        for d in &self.dirs {
            // A directory not created yet (spool) or unreadable is not measured.
            if let Ok(s) = space(d) {
                let reserve = reserve_for(self.configured, s.total);
                first_reserve.get_or_insert(reserve);
                if s.free < reserve && low.is_none() {
                    low = Some(below_reserve(self.configured, reserve, s, d));
                }
                free = free.min(s.free);
            }
        }
        self.free = free;
        if let Some(r) = first_reserve {
            self.reserve = r;
        }
        self.low = low.is_some();
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
        !self.low
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
        let mut g = DiskGuard::new(vec![dir.clone()], Some(0));
        g.refresh(None);
        assert!(g.refuse().is_none());
        g.failed("No space left on device".into());
        assert!(g.refuse().unwrap().contains("No space left"));
        g.refresh(None);
        assert!(g.why().is_none());
        let mut g = DiskGuard::new(vec![dir], Some(u64::MAX));
        g.refresh(None);
        assert!(!g.reserve_free());
        let why = g.refuse().unwrap();
        assert!(
            why.contains("min_free_bytes") && why.contains("larger than the whole disk"),
            "{why}"
        );
    }

    const MB: u64 = 1_000_000;
    const MIB: u64 = 1 << 20;

    #[test]
    fn default_reserve_is_5_percent_of_a_small_disk_and_64_mib_at_most() {
        // A 48 MB volume: 5 %, 2.4 MB (not 64 MiB, larger than the disk).
        assert_eq!(default_reserve(48 * MB), 2_400_000);
        assert_eq!(default_reserve(48 * MIB), 2_516_582);
        // A 10 GB disk: 5 % would be 500 MB, the default stops at 64 MiB.
        assert_eq!(default_reserve(10_000 * MB), 64 * MIB);
        // The turning point: 64 MiB is 5 % of 1280 MiB.
        assert_eq!(default_reserve(1280 * MIB), 64 * MIB);
        assert_eq!(default_reserve(1280 * MIB - 20), 64 * MIB - 1);
        assert_eq!(default_reserve(0), 0);
        assert_eq!(default_reserve(u64::MAX), 64 * MIB);
    }

    #[test]
    fn an_explicit_reserve_wins_as_given() {
        assert_eq!(reserve_for(None, 48 * MB), 2_400_000);
        assert_eq!(reserve_for(None, 10_000 * MB), 64 * MIB);
        assert_eq!(reserve_for(Some(64 * MIB), 48 * MB), 64 * MIB);
        assert_eq!(reserve_for(Some(1), 10_000 * MB), 1);
        assert_eq!(reserve_for(Some(0), 48 * MB), 0);
    }

    #[test]
    fn min_free_bytes_unset_is_none_and_the_toml_key_still_reads_bytes() {
        use crate::config::ServerConfig;
        assert_eq!(ServerConfig::default().min_free_bytes, None);
        assert_eq!(ServerConfig::from_toml("").unwrap().min_free_bytes, None);
        let c = ServerConfig::from_toml("min_free_bytes = 67108864").unwrap();
        assert_eq!(c.min_free_bytes, Some(64 * MIB));
        let c = ServerConfig::from_toml("min_free_bytes = 0").unwrap();
        assert_eq!(c.min_free_bytes, Some(0));
        assert!(ServerConfig::from_toml("min_free_bytes = -1").is_err());
    }

    #[test]
    fn human_bytes_reads_like_the_log() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(2_516_582), "2.4 MiB");
        assert_eq!(human_bytes(48 * MIB), "48 MiB");
        assert_eq!(human_bytes(64 * MIB), "64 MiB");
        assert_eq!(human_bytes(3 << 30), "3 GiB");
    }

    #[test]
    fn the_reserve_line_names_the_setting() {
        let dir = std::env::temp_dir();
        let s = space(&dir).unwrap();
        let g = DiskGuard::new(vec![dir.clone(), dir.clone()], None);
        let line = g.reserve_line();
        let r = human_bytes(default_reserve(s.total));
        assert!(
            line.starts_with(&format!("free-space reserve {r} (")),
            "{line}"
        );
        assert!(line.contains("min_free_bytes to change"), "{line}");
        assert_eq!(line.matches(&r).count(), 1, "one part per disk: {line}");
        let g = DiskGuard::new(vec![dir.clone()], Some(s.total + 1));
        let line = g.reserve_line();
        assert!(
            line.contains("(min_free_bytes) is larger than the whole disk")
                && line.contains(
                    "ingest will be refused; lower min_free_bytes (sluice serve --min-free)"
                ),
            "{line}"
        );
        let line = DiskGuard::new(vec![dir], Some(0)).reserve_line();
        assert_eq!(line, "free-space reserve off (min_free_bytes = 0)");
    }
}
