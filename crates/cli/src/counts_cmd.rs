//! `sluice counts`: the completeness counts of a time range — per second, dc, type and subtype,
//! the events stored, stored late, dropped (by reason) and lost by the kernel — from a data
//! directory or a running server (`GET /v1/counts`). The rows are [`sluice_reader::counts`]'s.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sluice_client::{ClientArgs, DataDir, HttpOptions, HttpReader};
use sluice_reader::counts::{self, CountsRow};
use sluice_reader::parse_time;

/// Flags of `sluice counts`.
#[derive(Args)]
pub struct CountsArgs {
    /// Start of the range: Unix seconds, RFC 3339, or relative (`-5m`, `-2h`, `now`).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// Only this datacenter. Reading a data directory, its seconds without an epoch index (all
    /// their events dropped) are probed too, for ranges up to an hour.
    #[arg(long)]
    dc: Option<String>,
    /// One line per (dc, type, subtype) summed over the range (its `epoch` is the first second
    /// with counts), instead of one per second.
    #[arg(long)]
    total: bool,
    /// The data directory of an embedded store, read directly or through the server that holds
    /// it (its address is in DIR/SERVER).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// Read from a running server instead (e.g. http://127.0.0.1:8180, https://HOST:PORT or
    /// 127.0.0.1:8180).
    #[arg(long)]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

/// Run `sluice counts`: NDJSON, one line per row (the `/v1/counts` line).
pub fn run(a: CountsArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let from = parse_time(&a.from, now).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time(&a.to, now).with_context(|| format!("--to {:?}", a.to))?;
    anyhow::ensure!(from < to, "--from must be before --to (got {from} .. {to})");
    let mut http = HttpOptions::default().with_client(a.client.options());
    let server = match &a.server {
        Some(s) => s.clone(),
        None => match crate::store_arg::open_data_dir(&a.data)? {
            DataDir::Server(url) => {
                http.client = http.client.or_ca(sluice_client::self_signed_ca(&a.data));
                url
            }
            DataDir::Store(store) => {
                let rows =
                    counts::read_counts(&*store, from, to, a.dc.as_deref(), a.dc.as_deref())?;
                return print(&rows, a.total);
            }
        },
    };
    let body = HttpReader::new(&server, &http)?.counts(from, to, a.dc.as_deref())?;
    let mut rows = Vec::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).context("a /v1/counts line")?;
        rows.push(CountsRow::from_json(&v).with_context(|| format!("a /v1/counts line: {line}"))?);
    }
    print(&rows, a.total)
}

fn print(rows: &[CountsRow], total: bool) -> Result<()> {
    let summed;
    let rows = if total {
        summed = counts::totals(rows);
        &summed
    } else {
        rows
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for r in rows {
        writeln!(out, "{}", r.to_json())?;
    }
    out.flush()?;
    if rows.is_empty() {
        eprintln!("sluice: no counts in this range");
    }
    Ok(())
}
