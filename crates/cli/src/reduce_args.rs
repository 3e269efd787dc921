//! `sluice cat --group-by … --agg … --window …`: the reader-side reduce
//! ([`sluice_reader::reduce`]) on the events a `cat` reads, printed as rows in cat's formats.
//!
//! Rows of a window are printed as soon as the read passes it (reads come in epoch order). The
//! epoch of an event is its chunk's (a data directory) or its `epoch` tag (a server's NDJSON,
//! where every event carries it). An event whose window was already printed (only possible if
//! the input were out of order), or that has no epoch, is left out and counted: a warning and
//! exit status 3, as for chunks that cannot be read.

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;
use sluice_client::{EventStream, HttpItem, HttpOptions, HttpReader};
use sluice_reader::range::{EventWriter, OutputFormat, ReadItem};
use sluice_reader::reduce::{ReduceSpec, Reducer, DEFAULT_MAX_GROUPS};
use sluice_reader::Selection;

/// The reduce flags of `sluice cat`.
#[derive(Args, Debug, Clone)]
pub struct ReduceArgs {
    /// Group events by these fields (paths: `status`, `a.b`, `xs[0]`; comma-separated or
    /// repeated) and print one row per group (and window) instead of the events.
    #[arg(long = "group-by", value_name = "PATHS")]
    group_by: Vec<String>,
    /// Aggregates per group: `count`, `sum:PATH`, `min:PATH`, `max:PATH`, `avg:PATH`
    /// (comma-separated or repeated; default `count`).
    #[arg(long = "agg", value_name = "AGGS")]
    agg: Vec<String>,
    /// Window length (`10s`, `5m`, `1h`, `1d`, or seconds): rows per window, each with its
    /// start as `window`.
    #[arg(long, value_name = "LENGTH")]
    window: Option<String>,
    /// Most groups held in memory at once (the read fails beyond it).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_GROUPS)]
    max_groups: usize,
}

impl ReduceArgs {
    /// The reduce asked for, or `None` when no reduce flag is given (plain `cat`).
    pub fn spec(&self, selection: &Selection) -> Result<Option<ReduceSpec>> {
        if self.group_by.is_empty() && self.agg.is_empty() && self.window.is_none() {
            return Ok(None);
        }
        if !selection.select.is_empty() {
            anyhow::bail!(
                "--select cannot be combined with --group-by/--agg/--window (a reduce reads whole events; name the fields in --group-by and --agg)"
            );
        }
        let mut spec = ReduceSpec::parse(&self.group_by, &self.agg, self.window.as_deref())?;
        spec.max_groups = self.max_groups.max(1);
        Ok(Some(spec))
    }
}

struct Printer<W: Write> {
    reducer: Reducer,
    out: EventWriter<W>,
    warnings: u64,
    no_epoch: u64,
}

impl<W: Write> Printer<W> {
    fn push(&mut self, epoch: i64, event: &sereal::Value) -> Result<()> {
        self.reducer.push(epoch, event)?;
        for row in self.reducer.ready() {
            self.out.write(&row)?;
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let late = self.reducer.late();
        let mut out = self.out;
        for row in self.reducer.finish() {
            out.write(&row)?;
        }
        out.flush()?;
        let mut problems = Vec::new();
        if self.warnings > 0 {
            problems.push(format!(
                "{} warning(s): part of the range could not be read (see above)",
                self.warnings
            ));
        }
        if late > 0 {
            problems.push(format!(
                "{late} event(s) arrived after their window was printed and were left out"
            ));
        }
        if self.no_epoch > 0 {
            problems.push(format!(
                "{} event(s) had no `epoch` and were left out",
                self.no_epoch
            ));
        }
        if !problems.is_empty() {
            return Err(crate::PartialRead(problems.join("; ")).into());
        }
        Ok(())
    }
}

fn printer<W: Write>(spec: ReduceSpec, out: W, format: OutputFormat) -> Printer<W> {
    Printer {
        reducer: Reducer::new(spec),
        out: EventWriter::new(out, format),
        warnings: 0,
        no_epoch: 0,
    }
}

/// Reduces the events of a local read and prints the rows.
pub fn reduce_items(
    spec: ReduceSpec,
    items: impl IntoIterator<Item = ReadItem>,
    format: OutputFormat,
) -> Result<()> {
    let stdout = std::io::stdout();
    let mut p = printer(spec, std::io::BufWriter::new(stdout.lock()), format);
    for item in items {
        match item {
            ReadItem::Event(e) => p.push(e.key.epoch(), &e.value)?,
            ReadItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                p.warnings += 1;
            }
            ReadItem::Notice(w) => crate::cat_cmd::print_warning(&w, true),
        }
    }
    p.finish()
}

/// Reduces the events a server sends (`GET /v1/events`, NDJSON) and prints the rows.
pub fn reduce_server(
    spec: ReduceSpec,
    server: &str,
    from: i64,
    to: i64,
    selection: &Selection,
    format: OutputFormat,
) -> Result<()> {
    let reader = HttpReader::new(server, &HttpOptions::default())?;
    let EventStream::Ndjson(events) = reader.events(from, to, selection, OutputFormat::Json)?
    else {
        anyhow::bail!("the server answered Sereal to a request for NDJSON");
    };
    let stdout = std::io::stdout();
    let mut p = printer(spec, std::io::BufWriter::new(stdout.lock()), format);
    for item in events {
        match item? {
            HttpItem::Event(line) => {
                let event = sereal::json::from_json_slice(line.as_bytes())
                    .with_context(|| "an event line from the server is not JSON")?;
                match event.get("epoch").and_then(sereal::Value::as_i64) {
                    Some(epoch) => p.push(epoch, &event)?,
                    None => p.no_epoch += 1,
                }
            }
            HttpItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                p.warnings += 1;
            }
            HttpItem::Notice(w) => crate::cat_cmd::print_warning(&w, true),
        }
    }
    p.finish()
}
