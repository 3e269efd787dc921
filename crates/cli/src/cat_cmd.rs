//! `sluice cat`: every event of a time range from a data directory, as NDJSON (or Sereal).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sluice_client::{DataDir, EventStream, HttpItem, HttpOptions, HttpReader, SelectionArgs};
use sluice_reader::{parse_time, range, Selection};

/// Flags of `sluice cat`.
#[derive(Args)]
pub struct CatArgs {
    /// Start of the range: Unix seconds, RFC 3339, or relative (`-5m`, `-2h`, `now`).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    #[command(flatten)]
    filters: SelectionArgs,
    #[command(flatten)]
    reduce: crate::reduce_args::ReduceArgs,
    /// Output format: `json` (NDJSON) or `sereal` (one document per event).
    #[arg(long, default_value = "json")]
    format: String,
    /// The data directory of an embedded store (as `sluice serve --data` writes it), read
    /// directly or, while `sluice serve` runs on it, through that server (its address is in
    /// DIR/SERVER).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// Read from a running server instead (e.g. http://127.0.0.1:8180 or 127.0.0.1:8180).
    #[arg(long)]
    server: Option<String>,
}

/// Run `sluice cat`.
pub fn run(a: CatArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let from = parse_time(&a.from, now).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time(&a.to, now).with_context(|| format!("--to {:?}", a.to))?;
    let format: range::OutputFormat = a
        .format
        .parse()
        .map_err(|e| anyhow::anyhow!("--format: {e}"))?;
    let selection = a.filters.selection()?;
    let reduce = a.reduce.spec(&selection)?;
    if let Some(server) = &a.server {
        return from_server(server, from, to, &selection, format, reduce);
    }
    let store = match open_data_dir(&a.data)? {
        DataDir::Store(s) => s,
        DataDir::Server(url) => return from_server(&url, from, to, &selection, format, reduce),
    };
    let opts = sluice_substreams::view::read_options(&store, &selection)?;
    let req = range::ReadRequest::selected(from, to, selection);
    let reader = range::RangeReader::new(&store, req, opts)?;
    if let Some(spec) = reduce {
        return crate::reduce_args::reduce_items(spec, reader, format);
    }
    let stdout = std::io::stdout();
    let out = std::io::BufWriter::new(stdout.lock());
    let summary = range::write_items_noting(reader, format, out, print_warning)?;
    if summary.warnings > 0 {
        return Err(crate::PartialRead(format!(
            "{} warning(s): part of the range could not be read (see above); {} events printed",
            summary.warnings, summary.events
        ))
        .into());
    }
    Ok(())
}

/// Prints a read warning, or a notice (a substream result computed from the full blob), on
/// stderr.
pub(crate) fn print_warning(w: &sluice_reader::ReadWarning, notice: bool) {
    if notice {
        eprintln!("sluice: note: {w}");
    } else {
        eprintln!("sluice: warning: {w}");
    }
}

/// Opens `dir` for reading ([`sluice_client::resolve_data_dir`]), saying on stderr when a
/// running server holds it and the read goes through that server.
pub(crate) fn open_data_dir(dir: &std::path::Path) -> Result<DataDir> {
    let opened = sluice_client::resolve_data_dir(dir)?;
    if let DataDir::Server(url) = &opened {
        eprintln!(
            "sluice: {} is in use by a running server; reading through {url}",
            dir.display()
        );
    }
    Ok(opened)
}

/// `cat --server`: stream `GET /v1/events` to standard output; the chunks the server could not
/// read (its final warnings line) go to stderr, one warning each, and make the exit status 3.
fn from_server(
    server: &str,
    from: i64,
    to: i64,
    selection: &Selection,
    format: range::OutputFormat,
    reduce: Option<sluice_reader::reduce::ReduceSpec>,
) -> Result<()> {
    if let Some(spec) = reduce {
        return crate::reduce_args::reduce_server(spec, server, from, to, selection, format);
    }
    let reader = HttpReader::new(server, &HttpOptions::default())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let events = match reader.events(from, to, selection, format)? {
        EventStream::Sereal(mut body) => {
            std::io::copy(&mut body, &mut out).context("reading the response")?;
            out.flush()?;
            return Ok(());
        }
        EventStream::Ndjson(events) => events,
    };
    let mut warnings = 0usize;
    for item in events {
        match item? {
            HttpItem::Event(line) => {
                out.write_all(line.as_bytes())?;
                out.write_all(b"\n")?;
            }
            HttpItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                warnings += 1;
            }
            HttpItem::Notice(n) => print_warning(&n, true),
        }
    }
    out.flush()?;
    if warnings > 0 {
        return Err(crate::PartialRead(format!(
            "{warnings} warning(s): the server could not read part of the range (see above)"
        ))
        .into());
    }
    Ok(())
}
