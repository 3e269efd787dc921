//! Substreams: registered transformations run once on every newly stored blob, their small
//! results stored beside the events so that consumers read only what they need.
//!
//! - [`registry`]: definitions in the store's catalog (validation, add / enable / disable / rm).
//! - [`declarative`]: every `--select` / `--where` substream of a blob in one pass; results as
//!   normal blobs.
//! - [`exec`]: the one executor (declarative pass + Python pool) behind the runner, backfill
//!   and the readers' fallback.
//! - [`runner`]: the bounded queue fed by the collector's flush hook, the worker thread(s),
//!   misses and their counters.
//! - [`view`]: a substream as a reader sees it ([`sluice_reader::SubstreamView`]), computing a
//!   missing result client-side; and [`backfill`].
//!
//! Results live in `substreams/<name>` under the key of the event blob they came from, listed in
//! the substream's namespace index (`type:subtype:chunk` per (epoch, dc), like the epoch index).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod declarative;
pub mod exec;
pub mod registry;
pub mod runner;
pub mod view;

use std::path::{Path, PathBuf};

pub use registry::{Definition, Error, Spec, Transform};
pub use runner::{Runner, RunnerConfig, RunnerSnapshot, SubstreamStats};
pub use view::{backfill, BackfillReport, SubstreamReader};

/// Writes `source` to `dir/<name>-<sha1 prefix>.py` (once: the content names the file, so a
/// changed source is a new module for the workers, which cache imports by file) and returns
/// its path.
pub fn code_file(dir: &Path, name: &str, source: &str) -> std::io::Result<PathBuf> {
    let digest = sluice_blob::sha1(source.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    // Python module names: no `.` or `-`.
    let stem: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let path = dir.join(format!("ss_{stem}_{hex}.py"));
    if !path.exists() {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".ss_{stem}_{hex}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, source)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}
