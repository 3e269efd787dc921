//! A rollup's stored states one by one, and merging any set of them per group — for callers
//! that slide a window over steps (alert rules, their backtests) instead of asking for a
//! stepped answer ([`crate::query`]).
//!
//! ```text
//! read_states(store, def, from, to, |state| …)   each state in time order (its step: `w`)
//! StateMerger::new(def, by)                        the rollup's aggregates, groups projected to `by`
//!   .merge(states) → [GroupValues]                 one per group: events, each aggregate's value
//! ```
//!
//! Projecting to fewer group-by fields merges the states of the groups that then share a key:
//! counts add, quantile and distinct sketches merge — never an average of per-group values.

use std::collections::HashMap;
use std::sync::Arc;

use sereal::Value;
use sluice_reader::reduce::{ReduceSpec, Reducer};
use sluice_reader::{RangeReader, ReadItem, ReadOptions, ReadRequest, Selection};
use sluice_store::ReadStore;
use sluice_substreams::exec::PythonSettings;
use sluice_substreams::registry::Definition;
use sluice_substreams::SubstreamReader;

use crate::query::{group_text, rollup_step, RollupError};

/// One group's merged values.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupValues {
    /// The group: each kept group-by field and its value as text ([`group_text`]).
    pub group: Vec<(String, String)>,
    /// The group's values as they are in the events (same order as `group`).
    pub key: Vec<Value>,
    /// Events merged into it.
    pub events: u64,
    /// Each aggregate of the rollup as written, and its value (`None`: none, e.g. a `max`
    /// over no number).
    pub values: Vec<(String, Option<f64>)>,
}

impl GroupValues {
    /// The value of the aggregate written `agg` (`None`: no such aggregate, or no value).
    pub fn value(&self, agg: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(a, _)| a == agg)
            .and_then(|(_, v)| *v)
    }
}

/// A state's step start (`w`), if it has one.
pub fn state_step(state: &Value) -> Option<i64> {
    field(state, "w").and_then(Value::as_i64)
}

/// Calls `each` with every stored state of rollup `def` whose step starts in `[from, to)`, in
/// time order (a blob stored without its states is computed from the blob, as any read does).
/// Returns the warnings (chunks or states skipped, with why).
pub fn read_states<S: ReadStore + ?Sized>(
    store: &S,
    def: &Definition,
    from: i64,
    to: i64,
    mut each: impl FnMut(Value),
) -> Result<Vec<String>, RollupError> {
    rollup_step(def)?;
    let reader = state_reader(store, def, from, to)?;
    let mut warnings = Vec::new();
    for item in reader {
        match item {
            ReadItem::Event(e) => {
                if state_step(&e.value).is_some_and(|w| w >= from && w < to) {
                    each(e.value);
                }
            }
            ReadItem::Warning(w) => warnings.push(format!("{}: {}", w.key, w.reason)),
            ReadItem::Notice(_) => {}
        }
    }
    Ok(warnings)
}

/// A range reader of rollup `def`'s stored states over `[from, to)` (a blob without its states
/// has them computed from the blob: the readers' fallback).
pub(crate) fn state_reader<'a, S: ReadStore + ?Sized>(
    store: &'a S,
    def: &Definition,
    from: i64,
    to: i64,
) -> Result<RangeReader<&'a S>, RollupError> {
    let view = SubstreamReader::new(def.clone(), PythonSettings::default())
        .map_err(|e| RollupError::Invalid(e.to_string()))?;
    let opts = ReadOptions {
        substream: Some(Arc::new(view)),
        ..ReadOptions::default()
    };
    let selection = Selection {
        substream: Some(def.name.clone()),
        ..Selection::default()
    };
    let req = ReadRequest::selected(from, to, selection);
    RangeReader::new(store, req, opts).map_err(|e| RollupError::Read(e.to_string()))
}

/// Merges states of one rollup per group, the groups projected to some of its group-by
/// fields.
#[derive(Debug, Clone)]
pub struct StateMerger {
    spec: ReduceSpec,
    /// Positions of the kept group-by fields in the rollup's.
    keep: Vec<usize>,
    /// Positions of the kept aggregates in the rollup's (`None`: all).
    keep_aggs: Option<Vec<usize>>,
    labels: Vec<String>,
    aggs: Vec<String>,
}

impl StateMerger {
    /// A merger of `def`'s states, grouped by `by` (each one of the rollup's group-by fields as
    /// written; `None`: all of them, `Some(&[])`: one group).
    pub fn new(def: &Definition, by: Option<&[String]>) -> Result<Self, RollupError> {
        let mut spec = match def.rollup_spec() {
            Some(Ok(spec)) => spec,
            Some(Err(e)) => return Err(RollupError::Invalid(e.to_string())),
            None => {
                return Err(RollupError::Invalid(format!(
                    "{:?} is not a rollup",
                    def.name
                )))
            }
        };
        let all: Vec<String> = spec.group_by.iter().map(|(l, _)| l.clone()).collect();
        let keep: Vec<usize> = match by {
            None => (0..all.len()).collect(),
            Some(by) => by
                .iter()
                .map(|b| {
                    all.iter().position(|l| l == b).ok_or_else(|| {
                        RollupError::Invalid(format!(
                            "rollup {:?} is not grouped by {b:?} (its groups: {})",
                            def.name,
                            if all.is_empty() {
                                "none".into()
                            } else {
                                all.join(", ")
                            }
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        spec.group_by = keep.iter().map(|&i| spec.group_by[i].clone()).collect();
        spec.window = None;
        spec.rank = None;
        spec.max_groups = sluice_reader::reduce::DEFAULT_MAX_GROUPS;
        let labels = spec.group_by.iter().map(|(l, _)| l.clone()).collect();
        let aggs = spec.aggs.iter().map(|a| a.label.clone()).collect();
        Ok(StateMerger {
            spec,
            keep,
            keep_aggs: None,
            labels,
            aggs,
        })
    }

    /// Merges only the aggregates written `only` (each one of the rollup's): a quantile
    /// sketch nobody asks for is not merged. Unknown names are refused.
    pub fn only_aggregates(mut self, only: &[String]) -> Result<Self, RollupError> {
        let mut keep = Vec::new();
        for a in only {
            let i = self.aggs.iter().position(|x| x == a).ok_or_else(|| {
                RollupError::Invalid(format!("the rollup has no aggregate {a:?}"))
            })?;
            if !keep.contains(&i) {
                keep.push(i);
            }
        }
        keep.sort_unstable();
        self.spec.aggs = keep.iter().map(|&i| self.spec.aggs[i].clone()).collect();
        self.aggs = keep.iter().map(|&i| self.aggs[i].clone()).collect();
        self.keep_aggs = Some(keep);
        Ok(self)
    }

    /// The kept group-by fields, as written.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The rollup's aggregates, as written.
    pub fn aggs(&self) -> &[String] {
        &self.aggs
    }

    /// The states merged per (projected) group. A state that does not read is skipped and
    /// counted in the second value.
    pub fn merge<'a>(
        &self,
        states: impl IntoIterator<Item = &'a Value>,
    ) -> (Vec<GroupValues>, u64) {
        let mut reducer = Reducer::new(self.spec.clone());
        let mut events: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut bad = 0;
        for state in states {
            let Some(projected) = self.project(state) else {
                bad += 1;
                continue;
            };
            if reducer.push_state(&projected).is_err() {
                bad += 1;
                continue;
            }
            if let (Some(Value::Array(key)), Some(n)) = (
                field(&projected, "k").map(Value::resolve),
                field(&projected, "n").and_then(Value::as_i64),
            ) {
                *events.entry(key_bytes(key)).or_default() += n.max(0) as u64;
            }
        }
        let rows = reducer
            .finish()
            .into_iter()
            .map(|row| {
                let get = |l: &str| field(&row, l).cloned();
                let key: Vec<Value> = self
                    .labels
                    .iter()
                    .map(|l| get(l).unwrap_or(Value::Undef))
                    .collect();
                GroupValues {
                    group: self
                        .labels
                        .iter()
                        .zip(&key)
                        .map(|(l, v)| (l.clone(), group_text(Some(v))))
                        .collect(),
                    events: events.get(&key_bytes(&key)).copied().unwrap_or(0),
                    key,
                    values: self
                        .aggs
                        .iter()
                        .map(|a| (a.clone(), get(a).and_then(|v| v.as_f64())))
                        .collect(),
                }
            })
            .collect();
        (rows, bad)
    }

    /// The state with its group key cut to the kept fields and its aggregate states to the
    /// kept aggregates (`None`: not a state). Only what is kept is copied.
    fn project(&self, state: &Value) -> Option<Value> {
        let Value::Hash(pairs) = state.resolve() else {
            return None;
        };
        let mut out = Vec::with_capacity(pairs.len());
        for (name, v) in pairs {
            let v = match (name.as_bytes(), v.resolve()) {
                (b"k", Value::Array(key)) => {
                    let mut projected = Vec::with_capacity(self.keep.len());
                    for &i in &self.keep {
                        projected.push(key.get(i)?.resolve().clone());
                    }
                    Value::Array(projected)
                }
                (b"k", _) => return None,
                (b"a", Value::Array(accs)) => match &self.keep_aggs {
                    Some(keep) => {
                        let mut projected = Vec::with_capacity(keep.len());
                        for &i in keep {
                            projected.push(accs.get(i)?.clone());
                        }
                        Value::Array(projected)
                    }
                    None => v.clone(),
                },
                _ => v.clone(),
            };
            out.push((name.clone(), v));
        }
        Some(Value::Hash(out))
    }
}

/// A group key as bytes, as the reducer keys its groups.
fn key_bytes(key: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in key {
        let _ = sereal::json::to_writer(&mut out, v.resolve());
        out.push(0);
    }
    out
}

/// The value at `name` of a hash.
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v.resolve() {
        Value::Hash(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .map(|(_, v)| v.resolve()),
        _ => None,
    }
}
