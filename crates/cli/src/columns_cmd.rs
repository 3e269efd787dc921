//! `sluice columns`: the columnar history tier's lifecycle — what the files cover (`status`),
//! whether they hold what their blobs hold (`verify`), and writing hours again from the blobs
//! (`rebuild`). The work is `sluice_columns`'; this file parses flags and prints.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sluice_columns::layout::{hour_of, FileKind, HOUR};
use sluice_columns::location::{open_location, LocalDir};
use sluice_columns::tier::{Tier, TierConfig};
use sluice_columns::view::ColumnsView;
use sluice_reader::{format_time, parse_time, Zone};
use sluice_store::ReadStore;

/// `sluice columns …`.
#[derive(Subcommand)]
pub enum ColumnsCommand {
    /// What the column files cover: per hour, files, rows, bytes and seconds; the lag behind now.
    Status(Where),
    /// Check every covered chunk against its blob: row counts, SHA-1, and the events themselves
    /// (exit 3 on any difference). Reads only.
    Verify(Where),
    /// Write the hour files of the range again from the blobs, replacing this collector's parts
    /// and hour files there (run with the server stopped, or on another collector's id).
    Rebuild {
        #[command(flatten)]
        at: Where,
        /// The collector whose files are written (default: `local`, the owner of plain chunks).
        #[arg(long)]
        collector_id: Option<String>,
    },
}

/// Where the columns and the blobs are, and the range.
#[derive(Args)]
pub struct Where {
    /// Start of the range: Unix seconds, RFC 3339, or relative (`-1d`, `-2h`).
    #[arg(long, allow_hyphen_values = true, default_value = "-1d")]
    from: String,
    /// End of the range (excluded).
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// The data directory (its store, and its columns in DATA/columns).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// The store, when not the data directory's (`cassandra://…`).
    #[arg(long)]
    store: Option<String>,
    /// The columns location: a directory or `s3://bucket/prefix?endpoint=…` (default DATA/columns).
    #[arg(long)]
    columns: Option<String>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Where {
    fn range(&self) -> Result<(i64, i64)> {
        let now = sluice_reader::time::now_unix();
        let from =
            parse_time(&self.from, now).with_context(|| format!("--from {:?}", self.from))?;
        let to = parse_time(&self.to, now).with_context(|| format!("--to {:?}", self.to))?;
        anyhow::ensure!(from < to, "--from must be before --to");
        Ok((from, to))
    }

    /// The columns location; `write` only for `rebuild`. Readers never modify it: opening a
    /// directory for writing removes the temporary files of a crash, which beside a running
    /// server are the files it is writing.
    fn view(&self, write: bool) -> Result<Arc<ColumnsView>> {
        let spec = self
            .columns
            .clone()
            .unwrap_or_else(|| self.data.join("columns").display().to_string());
        let location: Arc<dyn sluice_columns::location::Location> =
            if write || spec.starts_with("s3://") {
                // The error names the location itself (an S3 URL without its keys).
                Arc::from(open_location(&spec).context("opening the columns location")?)
            } else {
                Arc::new(
                    LocalDir::open_read_only(std::path::Path::new(&spec))
                        .with_context(|| format!("columns at {spec}"))?,
                )
            };
        Ok(Arc::new(ColumnsView::new(location)))
    }

    fn store(&self) -> Result<Arc<dyn ReadStore>> {
        match crate::store_arg::open_for_read(&self.data, self.store.as_deref())? {
            crate::store_arg::ReadSource::Store(s) => {
                let s: Arc<dyn ReadStore> = Arc::new(s);
                Ok(s)
            }
            crate::store_arg::ReadSource::Server(url) => bail!(
                "{} is held by the server at {url}: stop it first (the store is read directly)",
                self.data.display()
            ),
        }
    }
}

/// Runs `sluice columns …`.
pub fn run(cmd: ColumnsCommand) -> Result<()> {
    match cmd {
        ColumnsCommand::Status(at) => status(&at),
        ColumnsCommand::Verify(at) => verify(&at),
        ColumnsCommand::Rebuild { at, collector_id } => rebuild(&at, collector_id),
    }
}

fn status(at: &Where) -> Result<()> {
    let (from, to) = at.range()?;
    let view = at.view(false)?;
    let utc = Zone::utc();
    let (mut files, mut parts, mut rows, mut bytes, mut seconds) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut newest: Option<i64> = None;
    let mut damaged = Vec::new();
    let mut hours = Vec::new();
    let mut hour = hour_of(from);
    while hour < to {
        let h = view.hour(hour)?;
        if !h.files.is_empty() || !h.damaged.is_empty() {
            let (r, b) = h.totals();
            let secs: std::collections::BTreeSet<i64> = h.epochs().map(|(e, _)| e).collect();
            let n_parts = h
                .files
                .iter()
                .filter(|f| matches!(f.name.kind, FileKind::Part { .. }))
                .count() as u64;
            for f in &h.files {
                newest = Some(newest.map_or(f.name.span().1, |n| n.max(f.name.span().1)));
            }
            files += h.files.len() as u64;
            parts += n_parts;
            rows += r;
            bytes += b;
            seconds += secs.len() as u64;
            damaged.extend(h.damaged.iter().cloned());
            hours.push(serde_json::json!({
                "hour": format_time(hour as f64, &utc),
                "files": h.files.len(),
                "parts": n_parts,
                "rows": r,
                "bytes": b,
                "seconds": secs.len(),
            }));
        }
        hour += HOUR;
    }
    let now = sluice_reader::time::now_unix();
    let lag = newest.map(|n| (now - n).max(0));
    if at.json {
        println!(
            "{}",
            serde_json::json!({
                "location": view.location().describe(),
                "files": files, "parts": parts, "rows": rows, "bytes": bytes,
                "seconds_with_rows": seconds,
                "covered_until": newest, "lag_seconds": lag,
                "bytes_per_row": if rows > 0 { bytes as f64 / rows as f64 } else { 0.0 },
                "damaged": damaged.iter().map(|(p, w)| serde_json::json!({"file": p, "why": w})).collect::<Vec<_>>(),
                "hours": hours,
            })
        );
    } else {
        println!("columns at {}", view.location().describe());
        for h in &hours {
            println!(
                "  {}  {:>4} files ({} parts)  {:>10} rows  {:>12} bytes  {:>5} seconds",
                h["hour"].as_str().unwrap_or_default(),
                h["files"],
                h["parts"],
                h["rows"],
                h["bytes"],
                h["seconds"]
            );
        }
        let per_row = if rows > 0 {
            bytes as f64 / rows as f64
        } else {
            0.0
        };
        println!(
            "total: {files} files ({parts} parts), {rows} rows, {bytes} bytes ({per_row:.1} B/row), {seconds} seconds with rows"
        );
        match (newest, lag) {
            (Some(n), Some(lag)) => println!(
                "covered until {} (lag {lag} s)",
                format_time(n as f64, &utc)
            ),
            _ => println!("no column files in the range"),
        }
        for (p, w) in &damaged {
            eprintln!("sluice: damaged column file {p}: {w}");
        }
    }
    if !damaged.is_empty() {
        return Err(crate::PartialRead(format!("{} damaged column files", damaged.len())).into());
    }
    Ok(())
}

fn verify(at: &Where) -> Result<()> {
    let (from, to) = at.range()?;
    let view = at.view(false)?;
    let store = at.store()?;
    let report = sluice_columns::verify::verify(&view, &*store, from, to)?;
    if at.json {
        println!(
            "{}",
            serde_json::json!({
                "files": report.files, "chunks": report.chunks, "rows": report.rows,
                "blobs_gone": report.blobs_gone,
                "problems": report.problems.iter().map(|(f, w)| serde_json::json!({"file": f, "problem": w})).collect::<Vec<_>>(),
            })
        );
    } else {
        println!(
            "checked {} files, {} chunks, {} rows; {} chunks only in the columns (blobs past retention); {} problems",
            report.files,
            report.chunks,
            report.rows,
            report.blobs_gone,
            report.problems.len()
        );
        for (f, w) in &report.problems {
            eprintln!("sluice: {f}: {w}");
        }
    }
    if !report.problems.is_empty() {
        return Err(crate::PartialRead(format!("{} problems", report.problems.len())).into());
    }
    Ok(())
}

fn rebuild(at: &Where, collector_id: Option<String>) -> Result<()> {
    let (from, to) = at.range()?;
    let view = at.view(true)?;
    let store = at.store()?;
    let config = TierConfig {
        owns_plain: collector_id.is_none(),
        owner: collector_id.unwrap_or_else(|| "local".into()),
        ..TierConfig::default()
    };
    let now = sluice_reader::time::now_unix();
    let tier = Tier::open(view, store, config, now)?;
    let report = tier.rebuild(from, to)?;
    println!(
        "wrote {} hour files ({} rows, {} bytes); deleted {} parts",
        report.files, report.rows, report.bytes, report.deleted
    );
    for (k, w) in &report.skipped {
        eprintln!("sluice: {k}: {w}");
    }
    if !report.skipped.is_empty() {
        return Err(crate::PartialRead(format!("{} skipped", report.skipped.len())).into());
    }
    Ok(())
}
