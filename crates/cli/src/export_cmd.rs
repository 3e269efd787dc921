//! `sluice export --format parquet`: a time range's events (with `--where` / `--select`) as a
//! stand-alone directory of Parquet files for an analyst, in the history tier's layout
//! (`OUT/dc=…/type=…/part-NNNNN.parquet`; DuckDB: `read_parquet('OUT/**/*.parquet',
//! hive_partitioning = true, union_by_name = true)`).
//!
//! Events are read as `sluice cat` reads them (a data directory, the server holding it,
//! `--store` or `--server`; columns where they cover), converted per (dc, type) by
//! `sluice_columns::export` and written a file per `--rows-per-file` events: memory stays
//! bounded for a week of events. A file appears whole or not at all (a temporary name, then a
//! rename).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sereal::Value;
use sluice_client::{ClientArgs, EventStream, HttpItem, HttpOptions, HttpReader, SelectionArgs};
use sluice_columns::export::{ArrowBatches, TypeBatch, DEFAULT_ROWS_PER_BATCH};
use sluice_columns::layout::encode;
use sluice_columns::parquet_file::{write_file, WriteOptions};
use sluice_reader::{
    parse_time_in, OutputFormat, RangeReader, ReadItem, ReadRequest, Selection, Zone,
};

/// The tag fields a server read keeps with each selected event (its key is not sent).
const TAGS: [&str; 4] = ["epoch", "dc", "type", "subtype"];

/// Output formats of `sluice export`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Apache Parquet (zstd, statistics, blooms: the history tier's writer).
    Parquet,
}

/// Flags of `sluice export`.
#[derive(Args)]
pub struct ExportArgs {
    /// Start of the range (the forms of `sluice cat --from`: `-1w`, RFC 3339, Unix seconds).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// The file format.
    #[arg(long, value_enum, default_value = "parquet")]
    format: ExportFormat,
    /// Events per file (and per row group), per (dc, type): what is held in memory at once.
    #[arg(long, default_value_t = DEFAULT_ROWS_PER_BATCH)]
    rows_per_file: usize,
    #[command(flatten)]
    filters: SelectionArgs,
    /// The data directory (read directly, or through the server running on it).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// Read a store directly instead: `embedded:DIR` or `cassandra://HOST:PORT[,…]/KEYSPACE`.
    #[arg(long, conflicts_with = "server")]
    store: Option<String>,
    /// Read from a running server instead.
    #[arg(long)]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Read blobs only, even where the column files cover the range.
    #[arg(long)]
    no_columns: bool,
    /// The output directory (created; must be empty if it exists).
    out: PathBuf,
}

/// What was written.
#[derive(Default)]
struct Written {
    files: u64,
    events: u64,
    bytes: u64,
    warnings: u64,
}

/// Run `sluice export`.
pub fn run(a: ExportArgs) -> Result<()> {
    let ExportFormat::Parquet = a.format;
    let now = sluice_reader::time::now_unix();
    let utc = Zone::utc();
    let from = parse_time_in(&a.from, now, &utc).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time_in(&a.to, now, &utc).with_context(|| format!("--to {:?}", a.to))?;
    crate::cat_cmd::check_range(from, to)?;
    let selection = a
        .filters
        .selection()
        .map_err(|e| anyhow::anyhow!("--{e}"))?;
    prepare_out(&a.out)?;
    let mut sink = Sink {
        out: a.out.clone(),
        batches: ArrowBatches::new(a.rows_per_file),
        parts: Default::default(),
        written: Written::default(),
        opts: WriteOptions {
            row_group_rows: a.rows_per_file.max(1),
            ..WriteOptions::default()
        },
        query: serde_json::json!({
            "from": from, "to": to,
            "where": selection.filter.as_ref().map(|f| f.text().to_owned()),
            "select": selection.select.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        })
        .to_string(),
    };
    let mut http = HttpOptions::default().with_client(a.client.options());
    http.no_columns = a.no_columns;
    let server = match &a.server {
        Some(s) => s.clone(),
        None => match crate::store_arg::open_for_read(&a.data, a.store.as_deref())? {
            crate::store_arg::ReadSource::Store(store) => {
                let mut opts = sluice_substreams::view::read_options(&*store, &selection)?;
                if !a.no_columns && a.store.is_none() {
                    opts.columns = sluice_columns::view::data_dir_view(&a.data);
                }
                let req = ReadRequest::selected(from, to, selection);
                for item in RangeReader::new(&*store, req, opts)? {
                    match item {
                        ReadItem::Event(e) => {
                            let k = &e.key;
                            let chunk = k.chunk().to_string();
                            sink.push(k.epoch(), k.dc(), k.type_(), k.subtype(), &chunk, e.value)?;
                        }
                        ReadItem::Warning(w) => {
                            eprintln!("sluice: warning: {w}");
                            sink.written.warnings += 1;
                        }
                        ReadItem::Notice(w) => crate::output::print_warning(&w, true),
                    }
                }
                return sink.finish();
            }
            crate::store_arg::ReadSource::Server(url) => {
                http.client = http.client.or_ca(sluice_client::self_signed_ca(&a.data));
                url
            }
        },
    };
    from_server(&server, &http, from, to, selection, &mut sink)?;
    sink.finish()
}

/// A server read: the key of each event is not sent, so its tags come from its fields (with a
/// `--select`, the tags are selected too and stay in the rows).
fn from_server(
    server: &str,
    http: &HttpOptions,
    from: i64,
    to: i64,
    mut selection: Selection,
    sink: &mut Sink,
) -> Result<()> {
    if !selection.select.is_empty() {
        for tag in TAGS {
            let p = sereal::Path::parse(tag)?;
            if !selection.select.contains(&p) {
                selection.select.push(p);
            }
        }
    }
    let reader = HttpReader::new(server, http)?;
    let EventStream::Ndjson(events) = reader.events(from, to, &selection, OutputFormat::Json)?
    else {
        bail!("the server answered Sereal to a request for NDJSON");
    };
    for item in events {
        match item? {
            HttpItem::Event(line) => {
                let event = sereal::json::from_json_slice(line.as_bytes())
                    .with_context(|| "an event line from the server is not JSON")?;
                let tag = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_owned);
                let epoch = event.get("epoch").and_then(Value::as_i64).unwrap_or(0);
                let (dc, type_, subtype) = (tag("dc"), tag("type"), tag("subtype"));
                sink.push(
                    epoch,
                    dc.as_deref().unwrap_or("_unknown"),
                    type_.as_deref().unwrap_or("_unknown"),
                    subtype.as_deref().unwrap_or(""),
                    "",
                    event,
                )?;
            }
            HttpItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                sink.written.warnings += 1;
            }
            HttpItem::Notice(w) => crate::output::print_warning(&w, true),
            HttpItem::Hint(h) => eprintln!("sluice: hint: {h}"),
        }
    }
    Ok(())
}

/// The output directory: created, or refused when it holds anything.
fn prepare_out(out: &Path) -> Result<()> {
    if out.exists() {
        let mut entries = fs::read_dir(out).with_context(|| format!("{}", out.display()))?;
        if entries.next().is_some() {
            bail!(
                "{}: not empty (sluice export writes into a new or empty directory)",
                out.display()
            );
        }
    }
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))
}

/// Events in, files out.
struct Sink {
    out: PathBuf,
    batches: ArrowBatches,
    /// Files written so far per (dc, type) directory.
    parts: std::collections::BTreeMap<PathBuf, u64>,
    written: Written,
    opts: WriteOptions,
    /// The export's query, in each file's footer (`sluice.export`).
    query: String,
}

impl Sink {
    fn push(
        &mut self,
        epoch: i64,
        dc: &str,
        type_: &str,
        subtype: &str,
        chunk: &str,
        event: Value,
    ) -> Result<()> {
        self.written.events += 1;
        if let Some(full) = self.batches.push(epoch, dc, type_, subtype, chunk, event)? {
            self.write(full)?;
        }
        Ok(())
    }

    fn write(&mut self, b: TypeBatch) -> Result<()> {
        let dir = self
            .out
            .join(format!("dc={}", encode(&b.dc)))
            .join(format!("type={}", encode(&b.type_)));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let n = self.parts.entry(dir.clone()).or_default();
        let path = dir.join(format!("part-{:05}.parquet", *n));
        *n += 1;
        let meta = [("sluice.export".to_owned(), self.query.clone())];
        let bytes = write_file(&[b.batch], &meta, &self.opts)?;
        let tmp = path.with_extension("parquet.tmp");
        let mut f = fs::File::create(&tmp).with_context(|| format!("{}", tmp.display()))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))?;
        self.written.files += 1;
        self.written.bytes += bytes.len() as u64;
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        let rest = std::mem::replace(&mut self.batches, ArrowBatches::new(1)).finish()?;
        for b in rest {
            self.write(b)?;
        }
        let w = &self.written;
        eprintln!(
            "sluice export: {} in {} ({} bytes) under {}",
            crate::output::plural(w.events, "event"),
            crate::output::plural(w.files, "file"),
            w.bytes,
            self.out.display()
        );
        if w.warnings > 0 {
            return Err(crate::PartialRead(format!(
                "{}: part of the range could not be read (see above); {} exported",
                crate::output::plural(w.warnings, "warning"),
                crate::output::plural(w.events, "event")
            ))
            .into());
        }
        Ok(())
    }
}
