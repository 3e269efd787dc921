//! The Prometheus text exposition format (version 0.0.4) of rollup rows, for scraping.
//!
//! - One family per metric name ([`crate::naming`]), `# HELP` and `# TYPE … gauge` first; families
//!   in the order of their first row, series in label order.
//! - Per series, only the **latest step** among the given rows, with its timestamp (the step's
//!   end, milliseconds): what a scraper expects, one current sample per series; older steps would
//!   be out of order for it. The caller passes closed steps only (an open step's value is still
//!   growing).
//! - An aggregate without a value (`None`) gives no sample.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sluice_rollups::RollupRow;

use crate::naming::{series_labels, timestamp_ms, AggregateName};

/// The `Content-Type` of [`prometheus_text`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The text format of `rows`: the latest step of each series, with its timestamp.
pub fn prometheus_text(rows: &[RollupRow]) -> String {
    // family name → (help, series labels → (timestamp ms, value)).
    type Series = BTreeMap<Vec<(String, String)>, (i64, f64)>;
    let mut families: Vec<(String, String, Series)> = Vec::new();
    for row in rows {
        for (aggregate, value) in &row.values {
            let Some(value) = *value else { continue };
            let labels = series_labels(row, aggregate);
            let name = labels
                .iter()
                .find(|(n, _)| n == "__name__")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let i = match families.iter().position(|(n, _, _)| *n == name) {
                Some(i) => i,
                None => {
                    families.push((name, help(row, aggregate), BTreeMap::new()));
                    families.len() - 1
                }
            };
            let labels: Vec<(String, String)> = labels
                .into_iter()
                .filter(|(n, _)| n != "__name__")
                .collect();
            let ts = timestamp_ms(row);
            let slot = families[i].2.entry(labels).or_insert((ts, value));
            if ts >= slot.0 {
                *slot = (ts, value);
            }
        }
    }
    let mut out = String::new();
    for (name, help, series) in &families {
        let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, (ts, value)) in series {
            out.push_str(name);
            out.push('{');
            for (i, (n, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{n}=\"{}\"", escape_label_value(v));
            }
            let _ = writeln!(out, "}} {} {ts}", format_value(*value));
        }
    }
    out
}

fn help(row: &RollupRow, aggregate: &str) -> String {
    let agg = AggregateName::parse(aggregate);
    match agg.condition {
        Some(_) => format!(
            "Sluice rollup {}: {} per {} s step (one series per condition label), sampled at the step's end",
            row.rollup, agg.suffix, row.step
        ),
        None => format!(
            "Sluice rollup {}: {aggregate} per {} s step, sampled at the step's end",
            row.rollup, row.step
        ),
    }
}

/// A sample value as the text format writes it (`NaN`, `+Inf`, `-Inf`, else the shortest decimal
/// that reads back to the same `f64`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

/// `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(start: i64, path: &str, values: &[(&str, Option<f64>)]) -> RollupRow {
        RollupRow {
            rollup: "web".into(),
            start,
            step: 10,
            group: vec![("path".into(), path.into())],
            values: values.iter().map(|(a, v)| (a.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn latest_step_per_series_with_help_and_type() {
        let rows = vec![
            row(100, "/a", &[("count", Some(1.0)), ("p95:ms", Some(2.5))]),
            row(100, "/b\"", &[("count", Some(7.0)), ("p95:ms", None)]),
            row(110, "/a", &[("count", Some(3.0)), ("p95:ms", None)]),
            row(
                110,
                "/a",
                &[
                    ("count_if:status >= 500", Some(1.0)),
                    ("ratio:x", Some(0.5)),
                ],
            ),
        ];
        let text = prometheus_text(&rows);
        assert_eq!(
            text,
            "# HELP sluice_web_count Sluice rollup web: count per 10 s step, sampled at the step's end\n\
             # TYPE sluice_web_count gauge\n\
             sluice_web_count{path=\"/a\",rollup=\"web\"} 3 120000\n\
             sluice_web_count{path=\"/b\\\"\",rollup=\"web\"} 7 110000\n\
             # HELP sluice_web_p95_ms Sluice rollup web: p95:ms per 10 s step, sampled at the step's end\n\
             # TYPE sluice_web_p95_ms gauge\n\
             sluice_web_p95_ms{path=\"/a\",rollup=\"web\"} 2.5 110000\n\
             # HELP sluice_web_count_if Sluice rollup web: count_if per 10 s step (one series per condition label), sampled at the step's end\n\
             # TYPE sluice_web_count_if gauge\n\
             sluice_web_count_if{condition=\"status >= 500\",path=\"/a\",rollup=\"web\"} 1 120000\n\
             # HELP sluice_web_ratio Sluice rollup web: ratio per 10 s step (one series per condition label), sampled at the step's end\n\
             # TYPE sluice_web_ratio gauge\n\
             sluice_web_ratio{condition=\"x\",path=\"/a\",rollup=\"web\"} 0.5 120000\n"
        );
        assert_eq!(prometheus_text(&[]), "");
    }

    #[test]
    fn values() {
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_value(1e21), "1000000000000000000000");
        assert_eq!(escape_label_value("a\\b\nc"), "a\\\\b\\nc");
    }
}
