//! `sluice cat`: every event of a time range from a data directory, as NDJSON (or Sereal).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_reader::{parse_time, range};

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
    filters: crate::filters::Filters,
    /// Output format: `json` (NDJSON) or `sereal` (one document per event).
    #[arg(long, default_value = "json")]
    format: String,
    /// The data directory of an embedded store (as `sluice serve --data` writes it), read
    /// directly or, while `sluice serve` runs on it, through that server (its address is in
    /// DIR/SERVER).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// Read from a running server instead (e.g. http://127.0.0.1:8180).
    #[arg(long)]
    server: Option<String>,
}

/// Run `sluice cat`.
pub fn run(a: CatArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let from = parse_time(&a.from, now).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time(&a.to, now).with_context(|| format!("--to {:?}", a.to))?;
    let format: range::OutputFormat = a.format.parse().map_err(|e| anyhow::anyhow!("--format: {e}"))?;
    let select = a.filters.paths()?;
    let filter = a.filters.predicate()?;
    if let Some(server) = &a.server {
        return from_server(server, from, to, &a);
    }
    if !a.data.is_dir() {
        bail!("{}: no such data directory", a.data.display());
    }
    let store = match open_data_dir(&a.data)? {
        DataDir::Store(s) => s,
        DataDir::Server(url) => return from_server(&url, from, to, &a),
    };
    let f = a.filters.clone();
    let req = range::ReadRequest { from, to, dc: f.dc, type_: f.type_, subtype: f.subtype, select, filter };
    let reader = range::RangeReader::new(&store, req, range::ReadOptions::default())?;
    let stdout = std::io::stdout();
    let out = std::io::BufWriter::new(stdout.lock());
    let summary = range::write_items(reader, format, out, |w| eprintln!("sluice: warning: {w}"))?;
    if summary.warnings > 0 {
        return Err(crate::PartialRead(format!(
            "{} warning(s): part of the range could not be read (see above); {} events printed",
            summary.warnings, summary.events
        ))
        .into());
    }
    Ok(())
}

/// A data directory opened for reading: its store, or the running server that holds it.
pub(crate) enum DataDir {
    /// No server runs on it: read the files.
    Store(sluice_store::EmbeddedStore),
    /// A server holds its lock: read through that server's HTTP API (`http://ADDR`).
    Server(String),
}

/// Opens `dir`'s store read-only (a reader never changes the files: damage is skipped and
/// reported, a torn tail left to the writer); when a running `sluice serve` holds it, finds that
/// server's address in `<dir>/SERVER` and says so on stderr.
pub(crate) fn open_data_dir(dir: &std::path::Path) -> Result<DataDir> {
    match sluice_store::EmbeddedStore::open_read_only(dir) {
        Ok(s) => Ok(DataDir::Store(s)),
        Err(sluice_store::StoreError::Locked { .. }) => {
            let file = dir.join(sluice_server::SERVER_FILE);
            let url = std::fs::read_to_string(&file).ok().map(|t| t.trim().to_string());
            match url.filter(|u| u.starts_with("http://")) {
                Some(url) => {
                    eprintln!("sluice: {} is in use by a running server; reading through {url}", dir.display());
                    Ok(DataDir::Server(url))
                }
                None => bail!(
                    "{}: in use by another process (no HTTP address in {}); use --server URL",
                    dir.display(),
                    file.display()
                ),
            }
        }
        Err(e) => Err(e).with_context(|| dir.display().to_string()),
    }
}

/// `cat --server`: stream `GET /v1/events` to standard output; the server reports unreadable
/// chunks in a final `{"_sluice":{"warnings":[...]}}` line, which goes to stderr instead.
fn from_server(server: &str, from: i64, to: i64, a: &CatArgs) -> Result<()> {
    use std::io::{BufRead, Write};
    let url = format!("{}/v1/events", server.trim_end_matches('/'));
    let agent = ureq::AgentBuilder::new().timeout_connect(std::time::Duration::from_secs(10)).build();
    let req = agent.get(&url).query("from", &from.to_string()).query("to", &to.to_string()).query("format", &a.format);
    let req = a.filters.query(req);
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => bail!("{url}: {code}: {}", r.into_string().unwrap_or_default().trim()),
        Err(e) => bail!("{url}: {e}"),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if a.format != "json" {
        std::io::copy(&mut resp.into_reader(), &mut out)?;
        out.flush()?;
        return Ok(());
    }
    let mut warnings = 0usize;
    for line in std::io::BufReader::new(resp.into_reader()).lines() {
        let line = line.context("reading the response")?;
        if line.starts_with("{\"_sluice\"") {
            eprintln!("sluice: {line}");
            warnings += 1;
            continue;
        }
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if warnings > 0 {
        return Err(crate::PartialRead("the server could not read part of the range (see above)".into()).into());
    }
    Ok(())
}
