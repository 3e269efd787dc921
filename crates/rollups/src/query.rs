//! Querying a rollup: its stored partial states over a range, merged to a step.
//!
//! ```text
//! range read of substream NAME (state rows per stored blob; a blob without one is computed
//!   here, as any substream read does) → Reducer::push_state into windows of `step`
//!   → rows → RollupRow
//! ```
//!
//! - The step must be a multiple of the rollup's (a state covers one rollup step; merging it
//!   into a wider window is exact, splitting it is not possible).
//! - Quantiles and distinct counts are merged sketches, never averages of per-step values.
//! - `--where` at query time filters groups: it sees an event made of the group-by fields.
//! - A state that does not read (damage, another version) is skipped and reported in
//!   [`RollupAnswer::warnings`], as a damaged blob is by any read.

use sereal::{Key, Value};
use sluice_reader::filter::Filter;
use sluice_reader::reduce::{Reducer, OTHER_GROUP};
use sluice_reader::ReadItem;
use sluice_store::ReadStore;
use sluice_substreams::registry::{Definition, Transform};

use crate::row::RollupRow;

/// Most warnings kept in an answer (the rest are counted).
const MAX_WARNINGS: usize = 100;

/// Why a query cannot run.
#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    /// The definition is not a rollup, or the request does not fit it.
    #[error("{0}")]
    Invalid(String),
    /// The range could not be listed.
    #[error("reading the rollup's states: {0}")]
    Read(String),
}

/// What to read: a range, a step (a multiple of the rollup's; `None`: the rollup's), and a
/// filter over the group-by fields.
#[derive(Debug, Clone)]
pub struct RollupQuery {
    /// First second included.
    pub from: i64,
    /// First second not included.
    pub to: i64,
    /// Step of the answer, seconds.
    pub step: Option<u64>,
    /// Only the groups this keeps (it sees the group-by fields).
    pub filter: Option<Filter>,
}

/// The merged rows and what was left out.
#[derive(Debug, Clone, Default)]
pub struct RollupAnswer {
    /// One row per (step, group), steps in time order.
    pub rows: Vec<RollupRow>,
    /// Chunks or states skipped, with why (at most [`MAX_WARNINGS`]; `skipped` counts all).
    pub warnings: Vec<String>,
    /// Warnings in all.
    pub skipped: u64,
    /// Events counted in `_other` groups (the rollup's group cap).
    pub other_events: u64,
    /// Events merged.
    pub events: u64,
}

/// The rollup's step, seconds (an error for another kind of substream).
pub fn rollup_step(def: &Definition) -> Result<u64, RollupError> {
    match &def.transform {
        Transform::Rollup { step, .. } => Ok(*step),
        _ => Err(RollupError::Invalid(format!(
            "{:?} is a substream, not a rollup",
            def.name
        ))),
    }
}

/// Merges the states of `def` over `q` (see the [module docs](self)).
pub fn query<S: ReadStore + ?Sized>(
    store: &S,
    def: &Definition,
    q: &RollupQuery,
) -> Result<RollupAnswer, RollupError> {
    let own_step = rollup_step(def)?;
    let step = q.step.unwrap_or(own_step);
    if step == 0 || !step.is_multiple_of(own_step) {
        return Err(RollupError::Invalid(format!(
            "step {step}s is not a multiple of the rollup's {own_step}s"
        )));
    }
    let mut spec = match def.rollup_spec() {
        Some(Ok(spec)) => spec,
        Some(Err(e)) => return Err(RollupError::Invalid(e.to_string())),
        None => return Err(RollupError::Invalid("not a rollup".into())),
    };
    spec.window = Some(step);
    // The rollup's cap bounds the groups of one stored blob and step; a query holds one window
    // at a time (states come in time order and complete windows are handed out as they close),
    // so its own cap is per window, and high: a step gathers the groups of many blobs.
    spec.max_groups = sluice_reader::reduce::DEFAULT_MAX_GROUPS;
    let labels: Vec<String> = spec.group_by.iter().map(|(t, _)| t.clone()).collect();
    let aggs: Vec<String> = spec.aggs.iter().map(|a| a.label.clone()).collect();
    let mut reducer = Reducer::new(spec);
    // Aligned to the step, so the first and last windows are whole.
    let from = q.from - q.from.rem_euclid(step as i64);
    let reader = crate::states::state_reader(store, def, from, q.to)?;
    let mut answer = RollupAnswer::default();
    let warn = |answer: &mut RollupAnswer, w: String| {
        answer.skipped += 1;
        if answer.warnings.len() < MAX_WARNINGS {
            answer.warnings.push(w);
        }
    };
    let mut done = Vec::new();
    for item in reader {
        match item {
            ReadItem::Event(e) => {
                if let Some(f) = &q.filter {
                    if !f.matches(&group_event(&labels, &e.value)) {
                        continue;
                    }
                }
                if let Err(err) = reducer.push_state(&e.value) {
                    warn(&mut answer, format!("{}: {err}", e.key));
                }
                done.extend(reducer.ready());
            }
            ReadItem::Warning(w) => warn(&mut answer, format!("{}: {}", w.key, w.reason)),
            ReadItem::Notice(_) => {}
        }
    }
    answer.events = reducer.events();
    if reducer.late() > 0 {
        warn(
            &mut answer,
            format!(
                "{} events in states that came after their step was merged: left out",
                reducer.late()
            ),
        );
    }
    // Events in `_other` groups: their `count` when the rollup has one (write-time and
    // query-time overflow alike), else the query's own overflow.
    let query_overflow = reducer.overflowed();
    let has_count = aggs.iter().any(|a| a == "count");
    let mut in_other = 0u64;
    done.extend(reducer.finish());
    for row in done {
        let r = to_row(&def.name, step as i64, &labels, &aggs, &row);
        if r.group.iter().any(|(_, v)| v == OTHER_GROUP) {
            in_other += r
                .values
                .iter()
                .find(|(l, _)| l == "count")
                .and_then(|(_, v)| *v)
                .unwrap_or(0.0) as u64;
        }
        if r.start + r.step > q.from && r.start < q.to {
            answer.rows.push(r);
        }
    }
    answer.other_events = if has_count { in_other } else { query_overflow };
    answer.rows.sort_by_key(|r| r.start);
    Ok(answer)
}

/// An event made of a state's group-by fields (`a.b` nested as `{a: {b: …}}`), for the
/// query-time filter.
fn group_event(labels: &[String], state: &Value) -> Value {
    let key = match state.resolve() {
        Value::Hash(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_bytes() == b"k")
            .map(|(_, v)| v.resolve()),
        _ => None,
    };
    let Some(Value::Array(values)) = key else {
        return Value::Hash(Vec::new());
    };
    let mut event = Value::Hash(Vec::new());
    for (label, v) in labels.iter().zip(values) {
        insert_path(&mut event, label, v.clone());
    }
    event
}

/// Puts `v` at the dotted `label` in the hash `into` (plain keys only; anything else is used
/// whole as one key).
fn insert_path(into: &mut Value, label: &str, v: Value) {
    let parts: Vec<&str> = if label
        .split('.')
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
    {
        label.split('.').collect()
    } else {
        vec![label]
    };
    let mut at = into;
    for (i, part) in parts.iter().enumerate() {
        let Value::Hash(pairs) = at else { return };
        let pos = match pairs
            .iter()
            .position(|(k, _)| k.as_bytes() == part.as_bytes())
        {
            Some(p) => p,
            None => {
                pairs.push((Key::from(*part), Value::Hash(Vec::new())));
                pairs.len() - 1
            }
        };
        if i + 1 == parts.len() {
            pairs[pos].1 = v;
            return;
        }
        at = &mut pairs[pos].1;
    }
}

/// A reducer row (`{window, group fields…, aggregates…}`) as a [`RollupRow`].
fn to_row(name: &str, step: i64, labels: &[String], aggs: &[String], row: &Value) -> RollupRow {
    let get = |label: &str| match row.resolve() {
        Value::Hash(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_bytes() == label.as_bytes())
            .map(|(_, v)| v.resolve().clone()),
        _ => None,
    };
    let start = get("window").and_then(|v| v.as_i64()).unwrap_or(0);
    let group = labels
        .iter()
        .map(|l| (l.clone(), group_text(get(l).as_ref())))
        .collect();
    let values = aggs
        .iter()
        .map(|a| (a.clone(), get(a).and_then(|v| v.as_f64())))
        .collect();
    RollupRow {
        rollup: name.to_owned(),
        start,
        step,
        group,
        values,
    }
}

/// A group value as text: a string as it is, `null` for none, anything else as JSON.
pub fn group_text(v: Option<&Value>) -> String {
    match v.map(Value::resolve) {
        None | Some(Value::Undef) => "null".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Binary(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(other) => sereal::json::to_json_value(other).to_string(),
    }
}
