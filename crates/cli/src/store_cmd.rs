//! `sluice store check|repair|init|copy`: find damage in a data directory, and rewrite clean
//! copies of the damaged logs; create a store's schema; copy a time range between stores.
//!
//! `init --store URL` creates the store (a Cassandra keyspace and its tables, or an embedded
//! data directory) and exits. `copy --from URL --to URL --from-time T --to-time T` copies every
//! listed (epoch, dc) of `[T, T')`: its blobs (each verified by its `=chk` SHA-1 before it is
//! written and compared after it is read back from the target), then its epoch index, then its
//! counts (applied once per (epoch, dc, type, subtype): a rerun adds nothing). A blob that fails
//! its checksum in the source is reported and not copied (exit status 3); a blob that exists in
//! the target with other bytes is an error. The substream registry (catalog kinds `substream`
//! and `substream-removed`) is copied first; then for each (epoch, dc) each registered
//! substream's results (`substreams/<name>`: blobs verified the same way, then that
//! namespace's index). Per-writer status records are not copied (they count a writer's work).
//!
//! `check` opens the directory read-only (it changes nothing), loads every partition, verifies
//! every blob value, prints one line per damaged range (`damaged: `; a blob whose header is
//! damaged but whose value its own SHA-1 proves is not lost: `salvaged: `) and a summary; exit
//! status 0 when clean, 3 when damage was found, 1 on an error. `check --repair` (or `repair`)
//! then takes the directory's exclusive lock (refused while a server or a reader has it open),
//! writes a clean copy of each damaged log (valid records only, salvaged blobs with a rewritten
//! header, the epoch index rebuilt from blob keys) and keeps each original beside it as
//! `<log>.damaged-<unix time>`.

use crate::output::plural;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sluice_store::copy::{copy_range, CopyPlan, SkippedBlob};
use sluice_store::{DamageKind, EmbeddedStore, StoreError};

/// `sluice store ...`
#[derive(Subcommand)]
pub enum StoreCommand {
    /// Report damage in a data directory (changes nothing). Exit status: 0 clean, 3 damage
    /// found, 1 error.
    Check(CheckArgs),
    /// Rewrite clean copies of the damaged logs, keeping the originals (`check --repair`).
    Repair(DataArgs),
    /// Create a store: a Cassandra keyspace with its tables, or an embedded data directory.
    Init(InitArgs),
    /// Copy a time range (blobs, epoch index, counts) from one store to another, verifying
    /// every blob by its checksum. Exit status: 0 all copied, 3 damaged blobs skipped, 1 error.
    Copy(CopyArgs),
}

/// Flags of `sluice store init`.
#[derive(Args)]
pub struct InitArgs {
    /// The store: `embedded:DIR` or `cassandra://HOST:PORT[,…]/KEYSPACE?rf=3`.
    #[arg(long)]
    store: String,
    /// Days of data kept (the tables' TTL), as `sluice serve --retention-days`.
    #[arg(long, default_value_t = 10)]
    retention_days: u32,
}

/// Flags of `sluice store copy`.
#[derive(Args)]
pub struct CopyArgs {
    /// The source store (`embedded:DIR` or `cassandra://…`).
    #[arg(long)]
    from: String,
    /// The target store (created if needed).
    #[arg(long)]
    to: String,
    /// Start of the range: Unix seconds, RFC 3339, or relative (`-5m`).
    #[arg(long, allow_hyphen_values = true)]
    from_time: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to_time: String,
    /// Days of data kept in the target (the TTL of a Cassandra target).
    #[arg(long, default_value_t = 10)]
    retention_days: u32,
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
        StoreCommand::Init(a) => {
            let url = crate::store_arg::parse(&a.store)?;
            crate::store_arg::open_for_write(&url, retention(a.retention_days))?;
            println!("{url}: ready");
            Ok(())
        }
        StoreCommand::Copy(a) => copy(&a),
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
    let (salvaged, damaged): (Vec<_>, Vec<_>) = report
        .damage
        .iter()
        .partition(|d| d.kind == DamageKind::Salvaged);
    for d in &report.damage {
        let what = if d.kind == DamageKind::Salvaged {
            "salvaged"
        } else {
            "damaged"
        };
        println!("{what}: {d}");
    }
    let bytes: u64 = damaged.iter().map(|d| d.len).sum();
    let salvaged_note = if salvaged.is_empty() {
        String::new()
    } else {
        format!(
            "; {} salvaged (header damaged, value proven by its SHA-1; --repair rewrites it)",
            plural(salvaged.len() as u64, "blob")
        )
    };
    println!(
        "{}: {}, {} (epoch, dc) {}, {} ({} bytes) checked: {} damaged, {bytes} bytes{}",
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
        plural(damaged.len() as u64, "range"),
        salvaged_note
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
         left out, {} index entries rebuilt from blob keys, {} rewritten",
        plural(report.replaced.len() as u64, "log"),
        report.logs_checked,
        plural(report.blobs_kept, "blob"),
        report.bad_values_dropped,
        report.bytes_left_out,
        report.index_entries_rebuilt,
        plural(report.headers_rewritten, "salvaged header")
    );
    Ok(())
}

fn retention(days: u32) -> sluice_store::Retention {
    sluice_store::Retention::new(i64::from(days) * 86_400)
}

fn copy(a: &CopyArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let from = sluice_reader::parse_time(&a.from_time, now)
        .with_context(|| format!("--from-time {:?}", a.from_time))?;
    let to = sluice_reader::parse_time(&a.to_time, now)
        .with_context(|| format!("--to-time {:?}", a.to_time))?;
    let src_url = crate::store_arg::parse(&a.from)?;
    let dst_url = crate::store_arg::parse(&a.to)?;
    let src = src_url
        .open(
            sluice_store_cassandra::OpenMode::ReadOnly,
            sluice_store::Retention::default(),
        )
        .with_context(|| src_url.location())?;
    let dst = crate::store_arg::open_for_write(&dst_url, retention(a.retention_days))?;
    let verify = |bytes: &[u8]| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        sluice_blob::Blob::parse(bytes)
            .map(|_| ())
            .map_err(Into::into)
    };
    // The substream registry (definitions and removals; never expiring) first, so the target
    // knows the namespaces whose results follow; the alert rules, their states and their last
    // steps done (one record) with it.
    let plan = CopyPlan {
        from,
        to,
        catalog_kinds: &[
            sluice_substreams::registry::CATALOG_KIND,
            sluice_substreams::registry::REMOVED_KIND,
            sluice_alerts::catalog::RULE_KIND,
            sluice_alerts::catalog::STATE_KIND,
            sluice_alerts::catalog::PROGRESS_KIND,
        ],
        namespace_kind: Some(sluice_substreams::registry::CATALOG_KIND),
        verify: &verify,
    };
    let r = copy_range(&*src, &*dst, &plan, &mut |skipped| match skipped {
        SkippedBlob::Damaged { ns, key, reason } => {
            eprintln!("sluice: damaged blob {ns}/{key} not copied: {reason}")
        }
        SkippedBlob::Missing { ns, key } => {
            eprintln!("sluice: {ns}/{key} is listed but has no blob; not copied")
        }
        SkippedBlob::Unreadable { ns, key, error } => {
            eprintln!("sluice: reading {ns}/{key}: {error}; not copied")
        }
    })?;
    println!(
        "copied {} (epoch, dc) from {src_url} to {dst_url}: {} blobs written, {} already there, \
         {} bytes verified, {} counts rows, {} substream results, {} registry records; \
         {} damaged or unreadable skipped",
        r.epochs, r.blobs, r.already, r.bytes, r.counts, r.results, r.catalog, r.damaged
    );
    if r.damaged > 0 {
        return Err(
            crate::PartialRead(format!("{} blob(s) not copied (see above)", r.damaged)).into(),
        );
    }
    Ok(())
}
