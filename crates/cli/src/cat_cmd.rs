//! `sluice cat`: every event of a time range from a data directory, as NDJSON (or Sereal).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_reader::{parse_time, range, Filter};

/// Flags of `sluice cat`.
#[derive(Args)]
pub struct CatArgs {
    /// Start of the range: Unix seconds, RFC 3339, or relative (`-5m`, `-2h`, `now`).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// Only this data centre.
    #[arg(long)]
    dc: Option<String>,
    /// Only this event type.
    #[arg(long = "type")]
    type_: Option<String>,
    /// Only this subtype (`--subtype ''` for the empty one).
    #[arg(long)]
    subtype: Option<String>,
    /// Print only these paths (comma-separated), read lazily.
    #[arg(long, value_delimiter = ',')]
    select: Vec<String>,
    /// Print only events for which this holds, e.g. `status >= 500`.
    #[arg(long = "where")]
    filter: Option<String>,
    /// Output format: `json` (NDJSON) or `sereal` (one document per event).
    #[arg(long, default_value = "json")]
    format: String,
    /// The data directory of an embedded store (as `sluice serve --data` writes it).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
}

/// Run `sluice cat`.
pub fn run(a: CatArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let from = parse_time(&a.from, now).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time(&a.to, now).with_context(|| format!("--to {:?}", a.to))?;
    let format: range::OutputFormat = a.format.parse().map_err(|e| anyhow::anyhow!("--format: {e}"))?;
    let select = a
        .select
        .iter()
        .map(|p| sereal::Path::parse(p))
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("--select")?;
    let filter = a.filter.as_deref().map(Filter::parse).transpose().context("--where")?;
    if !a.data.is_dir() {
        bail!("{}: no such data directory", a.data.display());
    }
    let store = sluice_store::EmbeddedStore::open(&a.data).with_context(|| a.data.display().to_string())?;
    let req = range::ReadRequest { from, to, dc: a.dc, type_: a.type_, subtype: a.subtype, select, filter };
    let reader = range::RangeReader::new(&store, req, range::ReadOptions::default())?;
    let stdout = std::io::stdout();
    let out = std::io::BufWriter::new(stdout.lock());
    let summary = range::write_items(reader, format, out, |w| eprintln!("sluice: warning: {w}"))?;
    if summary.warnings > 0 {
        bail!("{} chunk(s) could not be read (see the warnings above); {} events printed", summary.warnings, summary.events);
    }
    Ok(())
}
