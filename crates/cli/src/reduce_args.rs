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
use sluice_reader::reduce::{Plan, PlanArgs, Sink, DEFAULT_MAX_GROUPS};
use sluice_reader::request::SparseShape;
use sluice_reader::Selection;
use sluice_reader::{EventWriter, OutputFormat, ReadItem};

/// The reduce flags of `sluice cat`.
#[derive(Args, Debug, Clone)]
pub struct ReduceArgs {
    /// Group events by these fields (paths: `status`, `a.b`, `xs[0]`; comma-separated or
    /// repeated) and print one row per group (and window) instead of the events.
    #[arg(long = "group-by", value_name = "PATHS")]
    group_by: Vec<String>,
    /// Aggregates per group: `count`, `sum:PATH`, `min:PATH`, `max:PATH`, `avg:PATH`,
    /// `pNN:PATH` (a quantile within 1 %: `p50`, `p95`, `p99.9`), `distinct:PATH` (distinct
    /// values, HyperLogLog: exact up to 160), `count_if:EXPR` and `ratio:EXPR` (events matching
    /// a --where expression, and their share of `count`: `ratio:status >= 500`)
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
    /// Count events by these fields, most frequent first: `--group-by PATHS --agg count`
    /// ranked by `count` (with --top N, the N most frequent).
    #[arg(long = "count-by", value_name = "PATHS")]
    count_by: Vec<String>,
    /// Keep the N largest: rows by --by (default the first aggregate) in each window, or
    /// without a group-by, the N events with the largest --by field (`--top 10 --by ms`).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// The column rows are ranked by (`count`, `max:ms`, a group-by field), or the event field
    /// --top ranks events by.
    #[arg(long, value_name = "COLUMN")]
    by: Option<String>,
}

impl ReduceArgs {
    /// The plan asked for, or `None` when no reduce or ranking flag is given (plain `cat`).
    /// The rules are `sluice_reader::reduce::PlanArgs::plan`'s.
    pub fn plan(&self, selection: &Selection) -> Result<Option<Plan>> {
        let args = PlanArgs {
            group_by: self.group_by.clone(),
            agg: self.agg.clone(),
            window: self.window.clone(),
            count_by: self.count_by.clone(),
            top: self.top,
            by: self.by.clone(),
            max_groups: Some(self.max_groups),
        };
        Ok(args.plan(!selection.select.is_empty())?)
    }
}

struct Printer<W: Write> {
    sink: Sink,
    out: EventWriter<W>,
    warnings: u64,
    no_epoch: u64,
}

impl<W: Write> Printer<W> {
    fn push(&mut self, epoch: i64, event: &sereal::Value) -> Result<()> {
        self.push_repeated(epoch, event, 1)
    }

    /// `n` equal events ([`sluice_reader::ReadEvent::repeat`]).
    fn push_repeated(&mut self, epoch: i64, event: &sereal::Value, n: u64) -> Result<()> {
        for row in self.sink.push_repeated(epoch, event, n)? {
            self.out.write(&row)?;
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let (rows, late) = self.sink.finish();
        let mut out = self.out;
        for row in rows {
            out.write(&row)?;
        }
        out.finish()?;
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

fn printer<W: Write>(plan: Plan, out: EventWriter<W>) -> Result<Printer<W>> {
    let sink = Sink::new(plan)?;
    Ok(Printer {
        sink,
        out: out.rows(),
        warnings: 0,
        no_epoch: 0,
    })
}

/// Reduces the events of a local read and prints the rows.
pub fn reduce_items<W: Write>(
    plan: Plan,
    items: impl IntoIterator<Item = ReadItem>,
    out: EventWriter<W>,
) -> Result<()> {
    let mut p = printer(plan, out)?;
    for item in items {
        match item {
            ReadItem::Event(e) => p.push_repeated(e.key.epoch(), &e.value, e.repeat)?,
            ReadItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                p.warnings += 1;
            }
            ReadItem::Notice(w) => crate::output::print_warning(&w, true),
        }
    }
    p.finish()
}

/// Reduces the events a server sends (`GET /v1/events`, NDJSON) and prints the rows. A reduce
/// asks only for the fields it reads (a `select` of its sparse shape's key paths and `epoch`:
/// the server reads them lazily and sends only those), and rebuilds each event's sparse form
/// here ([`SparseShape::build`], the blob reader's rule); a top-N (which prints whole events)
/// or a path that needs whole events reads them, and so does a `count_if` / `ratio`: a select
/// sends `null` for a missing path, and its expression may tell them apart (`exists p`).
pub fn reduce_server<W: Write>(
    plan: Plan,
    server: &str,
    http: &HttpOptions,
    from: i64,
    to: i64,
    selection: &Selection,
    out: EventWriter<W>,
) -> Result<()> {
    let conditional =
        matches!(&plan, Plan::Reduce(spec) if spec.aggs.iter().any(|a| a.condition.is_some()));
    let shape = if conditional {
        None
    } else {
        plan.paths().as_deref().and_then(SparseShape::of)
    };
    let mut selection = selection.clone();
    let epoch_path = sereal::Path::parse("epoch")?;
    // The output key of each prefix (the path's canonical text, as the server writes it).
    let mut prefix_keys = Vec::new();
    if let Some(shape) = &shape {
        selection.select = shape.paths().to_vec();
        if !selection.select.contains(&epoch_path) {
            selection.select.push(epoch_path);
        }
        prefix_keys = shape.paths().iter().map(|p| p.to_string()).collect();
    }
    let reader = HttpReader::new(server, http)?;
    let EventStream::Ndjson(events) = reader.events(from, to, &selection, OutputFormat::Json)?
    else {
        anyhow::bail!("the server answered Sereal to a request for NDJSON");
    };
    let mut p = printer(plan, out)?;
    for item in events {
        match item? {
            HttpItem::Event(line) => {
                let mut event = sereal::json::from_json_slice(line.as_bytes())
                    .with_context(|| "an event line from the server is not JSON")?;
                let epoch = event.get("epoch").and_then(sereal::Value::as_i64);
                if let Some(shape) = &shape {
                    // `{prefix text: value}` → the sparse event (a missing value comes as null,
                    // which every reduce reads as it reads a missing one).
                    event = shape.build(prefix_keys.iter().map(|k| event.get(k).cloned()));
                }
                match epoch {
                    Some(epoch) => p.push(epoch, &event)?,
                    // Ranking events needs no epoch (a `--select` line has none).
                    None if !p.sink.needs_epoch() => p.push(0, &event)?,
                    None => p.no_epoch += 1,
                }
            }
            HttpItem::Warning(w) => {
                eprintln!("sluice: warning: {w}");
                p.warnings += 1;
            }
            HttpItem::Notice(w) => crate::output::print_warning(&w, true),
            HttpItem::Hint(h) => eprintln!("sluice: hint: {h}"),
        }
    }
    p.finish()
}
