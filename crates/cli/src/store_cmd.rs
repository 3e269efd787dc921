//! `sluice store check|repair`: find damage in a data directory, and rewrite clean copies of the
//! damaged logs.
//!
//! `check` opens the directory read-only (it changes nothing), loads every partition, verifies
//! every blob value, prints one line per damaged range and a summary; exit status 0 when clean,
//! 3 when damage was found, 1 on an error. `check --repair` (or `repair`) then takes the
//! directory's exclusive lock (refused while a server or a reader has it open), writes a clean
//! copy of each damaged log (valid records only, the epoch index rebuilt from blob keys) and keeps
//! each original beside it as `<log>.damaged-<unix time>`.

use crate::output::plural;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sluice_store::{EmbeddedStore, StoreError};

/// `sluice store ...`
#[derive(Subcommand)]
pub enum StoreCommand {
    /// Report damage in a data directory (changes nothing). Exit status: 0 clean, 3 damage
    /// found, 1 error.
    Check(CheckArgs),
    /// Rewrite clean copies of the damaged logs, keeping the originals (`check --repair`).
    Repair(DataArgs),
}

/// Flags of `sluice store check`.
#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    data: DataArgs,
    /// After the check, rewrite clean copies of the damaged logs (valid records only), keeping
    /// the originals as `<log>.damaged-<unix time>`. Refused while a server holds the directory.
    #[arg(long)]
    repair: bool,
}

/// The data directory.
#[derive(Args)]
pub struct DataArgs {
    /// The data directory of an embedded store (as `sluice serve --data` writes it).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
}

/// Run `sluice store ...`.
pub fn run(cmd: StoreCommand) -> Result<()> {
    match cmd {
        StoreCommand::Check(a) => {
            let damaged = check(&a.data.data)?;
            if a.repair && damaged {
                return repair(&a.data.data);
            }
            if damaged {
                return Err(crate::PartialRead("damage found (see above)".into()).into());
            }
            Ok(())
        }
        StoreCommand::Repair(a) => {
            check(&a.data)?;
            repair(&a.data)
        }
    }
}

/// Prints the damage of `dir`; whether there is any.
fn check(dir: &std::path::Path) -> Result<bool> {
    let store = match EmbeddedStore::open_read_only(dir) {
        Ok(s) => s,
        Err(StoreError::Locked { .. }) => bail!(
            "{}: in use by a running server (stop it first: a check reads every file)",
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| dir.display().to_string()),
    };
    let report = store
        .check()
        .with_context(|| format!("checking {}", dir.display()))?;
    for d in &report.damage {
        println!("damaged: {d}");
    }
    let bytes: u64 = report.damage.iter().map(|d| d.len).sum();
    println!(
        "{}: {}, {} (epoch, dc) {}, {} ({} bytes) checked: {} damaged, {bytes} bytes",
        dir.display(),
        plural(report.partitions, "partition"),
        report.epochs,
        if report.epochs == 1 {
            "index"
        } else {
            "indexes"
        },
        plural(report.blobs, "blob"),
        report.blob_bytes,
        plural(report.damage.len() as u64, "range")
    );
    Ok(!report.damage.is_empty())
}

fn repair(dir: &std::path::Path) -> Result<()> {
    let report = match EmbeddedStore::repair(dir) {
        Ok(r) => r,
        Err(StoreError::Locked { .. }) => bail!(
            "{}: in use by another process (a server or a reader); stop it, then repair",
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("repairing {}", dir.display())),
    };
    for (log, aside) in &report.replaced {
        println!(
            "repaired: {} (damaged original kept as {})",
            log.display(),
            aside.display()
        );
    }
    println!(
        "{} rewritten of {} scanned: {} kept, {} with a bad value dropped, {} bytes \
         left out, {} index entries rebuilt from blob keys",
        plural(report.replaced.len() as u64, "log"),
        report.logs_checked,
        plural(report.blobs_kept, "blob"),
        report.bad_values_dropped,
        report.bytes_left_out,
        report.index_entries_rebuilt
    );
    Ok(())
}
