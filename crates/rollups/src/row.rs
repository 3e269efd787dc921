//! [`RollupRow`]: one (step, group) of a rollup query's answer — what every output (table, JSON,
//! CSV, Prometheus remote-write and text format, Graphite) is made from.

use serde::Serialize;

/// One step of one group of a rollup, its aggregates evaluated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RollupRow {
    /// The rollup's name.
    pub rollup: String,
    /// The step's first second, Unix time.
    pub start: i64,
    /// The step's width, seconds.
    pub step: i64,
    /// The group: each `--group-by` path as written, and its value as text (a string as it is,
    /// anything else as JSON; `null` when the path was missing). `_other` values mark the
    /// overflow group of a rollup past its group cap.
    pub group: Vec<(String, String)>,
    /// Each aggregate as written (`count`, `sum:duration_ms`, `p95:duration_ms`,
    /// `distinct:user_id`, `count_if:status >= 500`, `ratio:…`) and its value (`None`: no value
    /// in this step, e.g. a `min` over no number).
    pub values: Vec<(String, Option<f64>)>,
}

impl RollupRow {
    /// The row as one flat JSON object: `start`, the group fields, the aggregates (in that
    /// order; `null` for no value) — what `GET /v1/rollups/NAME` and `--format json` give.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("start".into(), self.start.into());
        for (k, v) in &self.group {
            m.insert(k.clone(), v.clone().into());
        }
        for (k, v) in &self.values {
            let value = match v {
                // Whole numbers (counts) print as integers.
                Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => (*f as i64).into(),
                Some(f) => {
                    serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
                }
                None => serde_json::Value::Null,
            };
            m.insert(k.clone(), value);
        }
        serde_json::Value::Object(m)
    }
}
