//! `sluice rollup add|ls|rm|query|backfill`: rollups — aggregates computed once at write time per
//! step and group, as mergeable states — through a running server or in a data directory (the
//! same registry and targets as `sluice substream`: a rollup is a substream of kind `rollup`).

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use sluice_reader::filter::Filter;
use sluice_rollups::RollupQuery;
use sluice_substreams::{registry, Spec};

use crate::substream_cmd::{
    offline_store, open, print, BackfillArgs, NameArgs, Registry, Target, TargetArgs,
};

/// `sluice rollup …`
#[derive(Subcommand)]
pub enum RollupCommand {
    /// Register a rollup: it runs on every blob stored from now on (older: `backfill`).
    Add(AddArgs),
    /// List the rollups.
    #[command(alias = "list")]
    Ls(TargetArgs),
    /// Remove a rollup (its stored states stay until they expire).
    Rm(NameArgs),
    /// Merge a rollup's states over a time range, to a step (a multiple of the rollup's).
    Query(QueryArgs),
    /// Compute a rollup's states for blobs of a time range stored before it existed.
    Backfill(BackfillArgs),
}

/// Flags of `sluice rollup add`.
#[derive(Args)]
pub struct AddArgs {
    /// The name (letters, digits, `_`, `.`, `-`).
    name: String,
    /// Only events of this type.
    #[arg(long = "type")]
    type_: Option<String>,
    /// Only events of this subtype (`''` for the empty one).
    #[arg(long)]
    subtype: Option<String>,
    /// Only events of this data centre.
    #[arg(long)]
    dc: Option<String>,
    /// Only events for which this holds, as `sluice cat --where`.
    #[arg(long = "where")]
    filter: Option<String>,
    /// Group by these paths (comma-separated, repeatable).
    #[arg(long, value_delimiter = ',')]
    group_by: Vec<String>,
    /// Aggregates: count, sum:P, min:P, max:P, avg:P, pNN:P, distinct:P, count_if:EXPR,
    /// ratio:EXPR (comma-separated, repeatable).
    #[arg(long, required = true)]
    agg: Vec<String>,
    /// The step (default 10s).
    #[arg(long)]
    step: Option<String>,
    /// Groups per stored blob and step before the rest go to `_other` (default 10000).
    #[arg(long)]
    max_groups: Option<usize>,
    #[command(flatten)]
    target: Target,
}

/// Flags of `sluice rollup query`.
#[derive(Args)]
pub struct QueryArgs {
    /// The rollup.
    name: String,
    /// Start: Unix seconds, RFC 3339, or relative (`-6h`).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// The answer's step: a multiple of the rollup's (default: the rollup's).
    #[arg(long)]
    step: Option<String>,
    /// Only the groups for which this holds (over the group-by fields).
    #[arg(long = "where")]
    filter: Option<String>,
    /// `table` (default), `json` (one object per row) or `csv`.
    #[arg(long, default_value = "table")]
    format: String,
    #[command(flatten)]
    target: Target,
}

/// How `sluice substream ls` shows a rollup's transformation.
pub(crate) fn describe(t: &Value) -> String {
    let list = |k: &str| -> String {
        t[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let mut s = format!(
        "rollup every {}s by [{}] of {}",
        t["step"].as_u64().unwrap_or(0),
        list("group_by"),
        list("aggs")
    );
    if let Some(w) = t["where"].as_str() {
        s.push_str(&format!(" where {w}"));
    }
    s
}

/// Run `sluice rollup …`.
pub fn run(cmd: RollupCommand) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    match cmd {
        RollupCommand::Add(a) => {
            let spec = Spec {
                name: a.name.clone(),
                dc: a.dc,
                type_: a.type_,
                subtype: a.subtype,
                where_: a.filter,
                group_by: a.group_by,
                agg: a.agg,
                step: a.step,
                max_groups: a.max_groups,
                ..Spec::default()
            };
            registry::check_name(&spec.name)?;
            match open(&a.target)? {
                Registry::Server(api) => {
                    print(&api.call("POST", "/v1/rollups", Some(&serde_json::to_value(&spec)?))?)?
                }
                Registry::Local(store) => {
                    print(&registry::add(&store, &spec, now, None)?.to_json())?
                }
            }
            eprintln!(
                "sluice: rollup {:?} registered: it runs on blobs stored from now on (older data: sluice rollup backfill)",
                a.name
            );
        }
        RollupCommand::Ls(a) => {
            let defs: Vec<Value> = match open(&a.target)? {
                Registry::Server(api) => api.call("GET", "/v1/rollups", None)?["rollups"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                Registry::Local(store) => registry::load(&store)?
                    .0
                    .into_values()
                    .filter(|d| d.is_rollup())
                    .map(|d| d.to_json())
                    .collect(),
            };
            if defs.is_empty() {
                eprintln!("sluice: no rollups registered");
            }
            for d in defs {
                println!(
                    "{}\t{}\t{}",
                    d["name"].as_str().unwrap_or("?"),
                    d["type"].as_str().unwrap_or("*"),
                    describe(&d["transform"])
                );
            }
        }
        RollupCommand::Rm(a) => {
            match open(&a.target)? {
                Registry::Server(api) => {
                    api.remove(&a.name)?;
                }
                Registry::Local(store) => registry::remove(&store, &a.name, now)?,
            }
            eprintln!(
                "sluice: rollup {:?} removed (its stored states stay until they expire)",
                a.name
            );
        }
        RollupCommand::Backfill(a) => {
            let (from, to) = range(&a.from, &a.to, now)?;
            let report = match open(&a.target)? {
                Registry::Server(api) => api.backfill(&a.name, from, to)?,
                Registry::Local(store) => {
                    let r =
                        sluice_substreams::backfill(&store, &a.name, from, to, Default::default())?;
                    serde_json::json!({
                        "chunks": r.chunks, "present": r.present, "stored": r.stored, "misses": r.misses,
                    })
                }
            };
            print(&report)?;
        }
        RollupCommand::Query(a) => query(a, now)?,
    }
    Ok(())
}

fn range(from: &str, to: &str, now: i64) -> Result<(i64, i64)> {
    let f = sluice_reader::parse_time(from, now).with_context(|| format!("--from {from:?}"))?;
    let t = sluice_reader::parse_time(to, now).with_context(|| format!("--to {to:?}"))?;
    if t < f {
        bail!("--to is before --from");
    }
    Ok((f, t))
}

fn query(a: QueryArgs, now: i64) -> Result<()> {
    if !matches!(a.format.as_str(), "table" | "json" | "csv") {
        bail!("--format {:?}: table, json or csv", a.format);
    }
    let (from, to) = range(&a.from, &a.to, now)?;
    let step = a
        .step
        .as_deref()
        .map(sluice_reader::reduce::parse_window)
        .transpose()
        .map_err(|e| anyhow::anyhow!(e.to_string().replace("--window", "--step")))?;
    let filter = a
        .filter
        .as_deref()
        .map(Filter::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--where: {e}"))?;
    // A data directory no server holds is read as it is (read-only; missing states computed
    // here, not stored); otherwise the server answers.
    let local = offline_store(&a.target)?;
    let answer: Value = match local {
        Some(store) => {
            let def = registry::get(&*store, &a.name)?;
            let q = RollupQuery {
                from,
                to,
                step,
                filter,
            };
            let ans = sluice_rollups::query(&*store, &def, &q)?;
            serde_json::json!({
                "rows": ans.rows.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
                "other_events": ans.other_events,
                "skipped": ans.skipped,
                "warnings": ans.warnings,
            })
        }
        None => {
            let Registry::Server(api) = open(&a.target)? else {
                bail!("no server holds the data directory");
            };
            let mut path = format!(
                "/v1/rollups/{}?from={from}&to={to}",
                sluice_client::substreams::enc(&a.name)
            );
            if let Some(s) = step {
                path.push_str(&format!("&step={s}"));
            }
            if let Some(w) = &a.filter {
                path.push_str(&format!("&where={}", sluice_client::substreams::enc(w)));
            }
            api.call("GET", &path, None)?
        }
    };
    for w in answer["warnings"].as_array().into_iter().flatten() {
        eprintln!("sluice: warning: {}", w.as_str().unwrap_or(""));
    }
    let other = answer["other_events"].as_u64().unwrap_or(0);
    if other > 0 {
        eprintln!("sluice: {other} events over the rollup's group cap are in `_other` groups");
    }
    let rows: Vec<&serde_json::Map<String, Value>> = answer["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect();
    print_rows(&rows, &a.format)
}

/// A cell: strings as they are, numbers as JSON, `null` empty.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_rows(rows: &[&serde_json::Map<String, Value>], format: &str) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match write_rows(&mut out, rows, format).and_then(|()| out.flush()) {
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn write_rows(
    out: &mut impl Write,
    rows: &[&serde_json::Map<String, Value>],
    format: &str,
) -> std::io::Result<()> {
    if format == "json" {
        for r in rows {
            writeln!(out, "{}", Value::Object((*r).clone()))?;
        }
        return Ok(());
    }
    let Some(first) = rows.first() else {
        eprintln!("sluice: no rows in the range");
        return Ok(());
    };
    let header: Vec<&String> = first.keys().collect();
    let utc = sluice_reader::time::Zone::utc();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            header
                .iter()
                .map(|h| match (h.as_str(), r[h.as_str()].as_i64()) {
                    // A table is read by people: a step's start as a time (csv keeps seconds).
                    ("start", Some(t)) if format == "table" => {
                        sluice_reader::time::format_time(t as f64, &utc)
                    }
                    _ => cell(&r[h.as_str()]),
                })
                .collect()
        })
        .collect();
    if format == "csv" {
        let quote = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_owned()
            }
        };
        writeln!(
            out,
            "{}",
            header
                .iter()
                .map(|h| quote(h))
                .collect::<Vec<_>>()
                .join(",")
        )?;
        for row in &table {
            writeln!(
                out,
                "{}",
                row.iter().map(|c| quote(c)).collect::<Vec<_>>().join(",")
            )?;
        }
        return Ok(());
    }
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            table
                .iter()
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
                .max(h.len())
        })
        .collect();
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    writeln!(out, "{}", line(header.iter().map(|h| h.as_str()).collect()))?;
    for row in &table {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_shows_the_start_as_a_time_and_csv_json_keep_seconds() {
        let row = serde_json::json!({"start": 1_795_928_400, "path": "/a", "count": 3});
        let rows = [row.as_object().unwrap()];
        let render = |format: &str| {
            let mut out = Vec::new();
            write_rows(&mut out, &rows, format).unwrap();
            String::from_utf8(out).unwrap()
        };
        let table = render("table");
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("2026-11-29T05:00:00Z  /a"),
            "{table}"
        );
        assert_eq!(render("csv"), "start,path,count\n1795928400,/a,3\n");
        assert!(render("json").contains("\"start\":1795928400"));
    }
}
