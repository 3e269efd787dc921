//! The one owner of how a [`RollupRow`] is named outside Sluice: metric names, labels, Graphite
//! paths and sample timestamps (rules also in `docs/metrics-export.md`).
//!
//! - **Metric name**: `sluice_` + rollup + `_` + aggregate, each part [sanitized](sanitize)
//!   (`web`, `p95:duration_ms` → `sluice_web_p95_duration_ms`; `count` → `sluice_web_count`;
//!   `distinct:user.id` → `sluice_web_distinct_user_id`).
//! - **Conditional aggregates** (`count_if:EXPR`, `ratio:EXPR`): the name is the kind alone
//!   (`sluice_web_count_if`, `sluice_web_ratio`) and the expression, as written, is the value of
//!   the label `condition` (`condition="status >= 500"`): one readable metric, one series per
//!   condition. Graphite has no labels: its last node is `count_if_` + [`condition_hash`] (8 hex
//!   digits of FNV-1a 64 over the expression's bytes as written), e.g. `count_if_1f0c2a7e`.
//! - **Labels**: `rollup="NAME"` (the rollup's name as written), then one label per group-by path:
//!   its name [sanitized](label_name) (`timings.total_ms` → `timings_total_ms`), its value as the
//!   row gives it (`/book`, `200`, `null`, `_other`). A group label whose name would be `rollup`,
//!   `condition` or `__name__`, or repeat an earlier one, is prefixed `group_` (then suffixed
//!   `_2`, `_3`… while it still collides).
//! - **Timestamp**: the step's **end** (`start + step`), the instant the step's value is known, as
//!   Prometheus users expect; milliseconds for Prometheus, seconds for Graphite.
//! - **Graphite path**: `sluice.ROLLUP.V1.V2….AGG`: the rollup [sanitized](graphite_node), each
//!   group value in group-by order [escaped](graphite_node) (`/book` → `_book`, `GET` → `GET`,
//!   `200` → `200`), then the aggregate as in the metric name without `sluice_web_`
//!   (`p95_duration_ms`).

use sluice_rollups::RollupRow;

/// The label that names the rollup on every series.
pub const ROLLUP_LABEL: &str = "rollup";
/// The label that holds a conditional aggregate's expression.
pub const CONDITION_LABEL: &str = "condition";
/// Every metric name starts with this.
pub const PREFIX: &str = "sluice";

/// An aggregate label as written, split: the metric suffix and the condition, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateName {
    /// `p95_duration_ms`, `count`, `count_if`, `ratio`.
    pub suffix: String,
    /// The expression of `count_if:EXPR` / `ratio:EXPR`, as written.
    pub condition: Option<String>,
}

impl AggregateName {
    /// Splits `count`, `p95:duration_ms`, `count_if:status >= 500`….
    pub fn parse(aggregate: &str) -> AggregateName {
        match aggregate.split_once(':') {
            Some((kind, expr)) if kind == "count_if" || kind == "ratio" => AggregateName {
                suffix: kind.to_owned(),
                condition: Some(expr.to_owned()),
            },
            _ => AggregateName {
                suffix: sanitize(aggregate),
                condition: None,
            },
        }
    }

    /// The Graphite node: the suffix, with `_HASH` of the condition when there is one.
    pub fn graphite_node(&self) -> String {
        match &self.condition {
            Some(c) => format!("{}_{}", self.suffix, condition_hash(c)),
            None => self.suffix.clone(),
        }
    }
}

/// `[A-Za-z0-9_]` kept, every other character (`.`, `:`, `/`, spaces, non-ASCII) becomes `_`,
/// runs of `_` become one, and `_` at either end is dropped (`p95:timings.total_ms` →
/// `p95_timings_total_ms`). Empty → `_`.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// The metric name of a row's aggregate: `sluice_ROLLUP_AGG` ([`AggregateName`]'s suffix).
pub fn metric_name(rollup: &str, aggregate: &str) -> String {
    format!(
        "{PREFIX}_{}_{}",
        sanitize(rollup),
        AggregateName::parse(aggregate).suffix
    )
}

/// A group-by path as a label name: [`sanitize`]d, `_` before a leading digit
/// (`2xx` → `_2xx`).
pub fn label_name(path: &str) -> String {
    let s = sanitize(path);
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{s}")
    } else {
        s
    }
}

/// The group's labels, in group-by order, names made unique (see the module docs).
pub fn group_labels(group: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(group.len());
    for (path, value) in group {
        let mut name = label_name(path);
        let taken = |n: &str, out: &[(String, String)]| {
            n == ROLLUP_LABEL
                || n == CONDITION_LABEL
                || n == "__name__"
                || out.iter().any(|(o, _)| o == n)
        };
        if taken(&name, &out) {
            name = format!("group_{name}");
            let base = name.clone();
            let mut n = 2;
            while taken(&name, &out) {
                name = format!("{base}_{n}");
                n += 1;
            }
        }
        out.push((name, value.clone()));
    }
    out
}

/// All labels of one aggregate of one row, sorted by name (as remote write requires):
/// `__name__`, the group's, `rollup`, and `condition` for a conditional aggregate.
pub fn series_labels(row: &RollupRow, aggregate: &str) -> Vec<(String, String)> {
    let agg = AggregateName::parse(aggregate);
    let mut labels = group_labels(&row.group);
    labels.push((
        "__name__".to_owned(),
        format!("{PREFIX}_{}_{}", sanitize(&row.rollup), agg.suffix),
    ));
    labels.push((ROLLUP_LABEL.to_owned(), row.rollup.clone()));
    if let Some(c) = agg.condition {
        labels.push((CONDITION_LABEL.to_owned(), c));
    }
    labels.sort();
    labels
}

/// The sample's time: the step's end, Unix seconds.
pub fn timestamp_secs(row: &RollupRow) -> i64 {
    row.start + row.step
}

/// The sample's time: the step's end, Unix milliseconds.
pub fn timestamp_ms(row: &RollupRow) -> i64 {
    timestamp_secs(row) * 1000
}

/// One node of a Graphite path: `[A-Za-z0-9_-]` kept, every other character (`.`, `/`, spaces,
/// `;`, `=`, non-ASCII) becomes `_`; empty → `_`. No run collapsing: `/a/b` → `_a_b`.
pub fn graphite_node(text: &str) -> String {
    if text.is_empty() {
        return "_".to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `sluice.ROLLUP.V1.V2….AGG` for one aggregate of one row.
pub fn graphite_path(row: &RollupRow, aggregate: &str) -> String {
    let mut path = format!("{PREFIX}.{}", graphite_node(&row.rollup));
    for (_, value) in &row.group {
        path.push('.');
        path.push_str(&graphite_node(value));
    }
    path.push('.');
    path.push_str(&AggregateName::parse(aggregate).graphite_node());
    path
}

/// 8 hex digits: the top 32 bits of FNV-1a 64 over the expression's UTF-8 bytes, as written
/// (a fixed function, so a name never changes between versions).
pub fn condition_hash(expr: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in expr.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:08x}", h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(group: &[(&str, &str)]) -> RollupRow {
        RollupRow {
            rollup: "web".into(),
            start: 1_000,
            step: 10,
            group: group
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            values: vec![],
        }
    }

    #[test]
    fn metric_names() {
        assert_eq!(
            metric_name("web", "p95:duration_ms"),
            "sluice_web_p95_duration_ms"
        );
        assert_eq!(metric_name("web", "count"), "sluice_web_count");
        assert_eq!(
            metric_name("web", "distinct:user.id"),
            "sluice_web_distinct_user_id"
        );
        assert_eq!(
            metric_name("web-2", "sum:timings[*].ms"),
            "sluice_web_2_sum_timings_ms"
        );
        assert_eq!(
            metric_name("web", "count_if:status >= 500"),
            "sluice_web_count_if"
        );
        assert_eq!(metric_name("wéb", "ratio:x == 1"), "sluice_w_b_ratio");
        assert_eq!(sanitize("..."), "_");
    }

    #[test]
    fn labels_sorted_unique_with_condition() {
        let r = row(&[
            ("path", "/book"),
            ("timings.total_ms", "7"),
            ("rollup", "x"),
            ("2xx", "y"),
            ("timings_total_ms", "z"),
        ]);
        let labels = series_labels(&r, "count_if:status >= 500");
        let names: Vec<&str> = labels.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "_2xx",
                "__name__",
                "condition",
                "group_rollup",
                "group_timings_total_ms",
                "path",
                "rollup",
                "timings_total_ms"
            ]
        );
        assert!(labels.contains(&("condition".into(), "status >= 500".into())));
        assert!(labels.contains(&("__name__".into(), "sluice_web_count_if".into())));
        assert!(labels.contains(&("rollup".into(), "web".into())));
        assert!(labels.contains(&("group_rollup".into(), "x".into())));
        assert!(labels.contains(&("path".into(), "/book".into())));
    }

    #[test]
    fn graphite_paths_and_times() {
        let r = row(&[("path", "/book/x"), ("status", "200"), ("m", "")]);
        assert_eq!(
            graphite_path(&r, "p95:duration_ms"),
            "sluice.web._book_x.200._.p95_duration_ms"
        );
        let p = graphite_path(&r, "count_if:status >= 500");
        assert_eq!(
            p,
            format!(
                "sluice.web._book_x.200._.count_if_{}",
                condition_hash("status >= 500")
            )
        );
        assert_eq!(timestamp_secs(&r), 1_010);
        assert_eq!(timestamp_ms(&r), 1_010_000);
    }

    #[test]
    fn condition_hash_is_fixed() {
        // FNV-1a 64 of "" is the offset basis; of "a" the published 0xaf63dc4c8601ec8c.
        assert_eq!(condition_hash(""), "cbf29ce4");
        assert_eq!(condition_hash("a"), "af63dc4c");
        assert_ne!(
            condition_hash("status >= 500"),
            condition_hash("status>=500")
        );
    }
}
