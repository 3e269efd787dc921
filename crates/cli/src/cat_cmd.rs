//! `sluice cat`: every event of a time range, from a data directory (or the server holding it)
//! or from `--server`, as NDJSON, Sereal or a human format (`sluice_reader::output`), with hints on
//! stderr when nothing matched or a field was never seen (`sluice_reader::hints`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_client::{ClientArgs, EventStream, HttpItem, HttpOptions, HttpReader, SelectionArgs};
use sluice_reader::{parse_time_in, EventWriter, RangeReader, ReadItem, ReadRequest, Selection};

use crate::output::{self, OutputArgs};

/// Flags of `sluice cat`.
#[derive(Args)]
pub struct CatArgs {
    /// Start of the range: Unix seconds or milliseconds, RFC 3339 (`2026-11-24T09:30:00Z`, or
    /// without an offset in --tz: `2026-11-24T09:30`), or relative (`-5m`, `-2h`, `-1w`, `now`).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End of the range (excluded); default `now`. Same forms as --from.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    #[command(flatten)]
    filters: SelectionArgs,
    #[command(flatten)]
    reduce: crate::reduce_args::ReduceArgs,
    #[command(flatten)]
    output: OutputArgs,
    /// Stop after this many events.
    #[arg(long)]
    limit: Option<u64>,
    /// The data directory of an embedded store (as `sluice serve --data` writes it), read
    /// directly or, while `sluice serve` runs on it, through that server (its address is in
    /// DIR/SERVER).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// Read a store directly instead: `embedded:DIR` or `cassandra://HOST:PORT[,…]/KEYSPACE?read_cl=one`.
    #[arg(long, conflicts_with = "server")]
    store: Option<String>,
    /// Read from a running server instead (e.g. http://127.0.0.1:8180, https://HOST:PORT or
    /// 127.0.0.1:8180).
    #[arg(long)]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Check every chunk's SHA-1 trailer too (by default a chunk the store has just checked
    /// against the CRC-32 written with it is not hashed again). Reads a store, not a server.
    #[arg(long, conflicts_with = "server")]
    verify_sha1: bool,
    /// Read blobs only, even where the column files (DATA/columns) cover the range.
    #[arg(long)]
    no_columns: bool,
}

/// Run `sluice cat`.
pub fn run(a: CatArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let zone = a.output.zone()?;
    let from =
        parse_time_in(&a.from, now, &zone).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time_in(&a.to, now, &zone).with_context(|| format!("--to {:?}", a.to))?;
    check_range(from, to)?;
    // The flag's name, as the user typed it: `--where: …`.
    let selection = a
        .filters
        .selection()
        .map_err(|e| anyhow::anyhow!("--{e}"))?;
    let stdout = std::io::stdout();
    let printer = a
        .output
        .printer(std::io::BufWriter::new(stdout.lock()), true)?;
    let limit = a.limit.unwrap_or(u64::MAX);
    let mut reduce = a.reduce.plan(&selection)?;
    // Rows of a window the range cuts are marked `partial`.
    if let Some(plan) = &mut reduce {
        plan.set_range(from, to);
    }
    if reduce.is_some() && a.limit.is_some() {
        bail!("--limit cuts the events printed; with --group-by/--count-by/--top use --top N");
    }
    let mut http = HttpOptions::default().with_client(a.client.options());
    http.no_columns = a.no_columns;
    let server = match &a.server {
        Some(server) => Some(server.clone()),
        None => match crate::store_arg::open_for_read(&a.data, a.store.as_deref())? {
            crate::store_arg::ReadSource::Store(store) => {
                let mut opts = sluice_substreams::view::read_options(&*store, &selection)?;
                opts.verify_sha1 = a.verify_sha1;
                if !a.no_columns && a.store.is_none() {
                    opts.columns = sluice_columns::view::data_dir_view(&a.data);
                }
                // A reduce reads only the fields it names (lazily, from blobs and columns).
                if let Some(plan) = &reduce {
                    plan.narrow_read(&mut opts);
                }
                let req = ReadRequest::selected(from, to, selection);
                let mut reader = RangeReader::new(&*store, req, opts)?;
                if let Some(plan) = reduce {
                    return crate::reduce_args::reduce_items(plan, reader, printer);
                }
                return print_store(&mut reader, printer, limit, now);
            }
            crate::store_arg::ReadSource::Server(url) => {
                // A server on the data directory with a self-signed certificate: trust it.
                http.client = http.client.or_ca(sluice_client::self_signed_ca(&a.data));
                Some(url)
            }
        },
    };
    let server = server.unwrap_or_default();
    if let Some(plan) = reduce {
        return crate::reduce_args::reduce_server(
            plan, &server, &http, from, to, &selection, printer,
        );
    }
    from_server(&server, &http, from, to, &selection, printer, limit)
}

/// Prints a data directory's read (at most `limit` events), then the hints of an empty or
/// typo'd read.
fn print_store<W: Write>(
    reader: &mut RangeReader<&dyn sluice_store::Store>,
    printer: EventWriter<W>,
    limit: u64,
    now: i64,
) -> Result<()> {
    let (printed, warnings) = print_items(&mut *reader, printer, limit)?;
    if printed < limit {
        for h in reader.hints(now) {
            eprintln!("sluice: hint: {h}");
        }
    }
    partial(warnings, printed)
}

/// `--to` before `--from` is the user's slip: said here, in their terms, before any read.
pub(crate) fn check_range(from: i64, to: i64) -> Result<()> {
    if to < from {
        let utc = sluice_reader::Zone::utc();
        bail!(
            "--to ({}) is before --from ({}): swap them",
            sluice_reader::format_time(to as f64, &utc),
            sluice_reader::format_time(from as f64, &utc)
        );
    }
    Ok(())
}

/// Prints the events of `items` (at most `limit`), warnings on stderr; `(printed, warnings)`.
fn print_items<W: Write>(
    items: impl Iterator<Item = ReadItem>,
    mut printer: EventWriter<W>,
    limit: u64,
) -> Result<(u64, u64)> {
    let (mut printed, mut warnings) = (0u64, 0u64);
    for item in items {
        if printed >= limit {
            break;
        }
        match item {
            ReadItem::Event(e) => {
                printer.write(&e.value)?;
                printed += 1;
            }
            ReadItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                warnings += 1;
            }
            ReadItem::Notice(w) => output::print_warning(&w, true),
        }
    }
    printer.finish()?;
    Ok((printed, warnings))
}

fn partial(warnings: u64, printed: u64) -> Result<()> {
    if warnings > 0 {
        return Err(crate::PartialRead(format!(
            "{}: part of the range could not be read (see above); {} printed",
            output::plural(warnings, "warning"),
            output::plural(printed, "event")
        ))
        .into());
    }
    Ok(())
}

/// `cat --server`: stream `GET /v1/events` to standard output; the chunks the server could not
/// read (its final warnings line) go to stderr, one warning each, and make the exit status 3;
/// its hints go to stderr too.
fn from_server<W: Write>(
    server: &str,
    http: &HttpOptions,
    from: i64,
    to: i64,
    selection: &Selection,
    mut printer: EventWriter<W>,
    limit: u64,
) -> Result<()> {
    let reader = HttpReader::new(server, http)?;
    let events = match reader.events(from, to, selection, printer.format().wire())? {
        EventStream::Sereal(mut body) => {
            if limit != u64::MAX {
                bail!("--limit with --format sereal reads a data directory only (--data)");
            }
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            std::io::copy(&mut body, &mut out).context("reading the response")?;
            out.flush()?;
            return Ok(());
        }
        EventStream::Ndjson(events) => events,
    };
    let (mut printed, mut warnings) = (0u64, 0u64);
    for item in events {
        match item? {
            HttpItem::Event(_) if printed >= limit => break,
            HttpItem::Event(line) => {
                printer.json_line(line.as_bytes())?;
                printed += 1;
            }
            HttpItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                warnings += 1;
            }
            HttpItem::Hint(h) => eprintln!("sluice: hint: {h}"),
            HttpItem::Notice(n) => output::print_warning(&n, true),
        }
    }
    printer.finish()?;
    if warnings > 0 {
        return Err(crate::PartialRead(format!(
            "{}: the server could not read part of the range (see above)",
            output::plural(warnings, "warning")
        ))
        .into());
    }
    Ok(())
}
