//! Running sums of the count-like aggregates (`count`, `count_if`, `ratio`) per group over a
//! window of steps that slides: the window moves by adding the steps that enter it and
//! subtracting the steps that leave it, instead of merging every state of the window again.
//!
//! ```text
//! Counting::new(def, by, aggs)       None unless every aggregate is count-like
//!   .add(&mut StepCounts, state)     one step's states digested per group, first-seen order
//! SlidingWindow::slide(steps, from, to)   + steps entering, − steps leaving
//!   .rows(&Counting, steps)          the groups as StateMerger::merge gives them
//! ```
//!
//! Why: these aggregates' partial states are event counts (`n`, `m`), so a window's values are
//! the sums of its steps' — exactly, in any order (integers). The others are not subtractable
//! (min / max, sketches) or not exactly (a float sum rounds in the order it adds): the feed
//! merges those windows whole.
//!
//! Exactly what `StateMerger::merge` gives: groups in first-seen order (steps in time order,
//! states as pushed), each group's key as its first state has it. A state the merger would
//! skip or merge only in part (not well formed) makes its step irregular, and a window that
//! holds an irregular step is merged whole by the feed.

use std::collections::{HashMap, HashSet};

use sereal::Value;
use sluice_reader::reduce::{AggKind, DEFAULT_MAX_GROUPS};
use sluice_rollups::query::group_text;
use sluice_rollups::GroupValues;
use sluice_substreams::registry::Definition;

/// A count-like aggregate: what its value is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CountKind {
    /// The group's events.
    Count,
    /// The events that matched.
    CountIf,
    /// The events that matched over the group's events.
    Ratio,
}

/// How one (`by`, aggregates) reads a rollup's states: where the kept group-by fields and
/// aggregates are, as `StateMerger::new(def, Some(by)).only_aggregates(aggs)` keeps them.
#[derive(Debug)]
pub struct Counting {
    keep: Vec<usize>,
    keep_aggs: Vec<usize>,
    kinds: Vec<CountKind>,
    labels: Vec<String>,
    aggs: Vec<String>,
}

/// One group's counts in one step.
#[derive(Debug)]
struct StepGroup {
    /// The group's key as the merger compares keys (each value's JSON, then a 0).
    key_bytes: Vec<u8>,
    /// The key as the step's first state of the group has it.
    key: Vec<Value>,
    events: u64,
    matched: Vec<u64>,
}

/// One step's states digested for one [`Counting`]: counts per group, in first-seen order.
#[derive(Debug, Default)]
pub struct StepCounts {
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<StepGroup>,
    /// States that are not well formed (the window holding them is merged whole).
    irregular: u64,
}

/// What one state changed in its step's [`StepCounts`] (a window holding the step takes the
/// same change).
#[derive(Debug)]
pub enum Change {
    /// A state that is not well formed.
    Irregular,
    /// Counts added to a group; `new`: the group was not in the step before.
    Counts {
        /// The group's key bytes.
        key_bytes: Vec<u8>,
        /// Events added.
        events: u64,
        /// Matched events added, per aggregate.
        matched: Vec<u64>,
        /// Whether the group is new in the step.
        new: bool,
    },
}

/// One group's sums over a window.
#[derive(Debug)]
struct Sums {
    events: u64,
    matched: Vec<u64>,
    /// Steps of the window the group is in (0: it left the window).
    steps: u64,
}

/// A window's sums per group: the sum of the [`StepCounts`] of the steps in `[from, to)` that
/// the feed holds.
#[derive(Debug, Default)]
pub struct SlidingWindow {
    from: i64,
    to: i64,
    sums: HashMap<Vec<u8>, Sums>,
    /// Irregular states in the window.
    irregular: u64,
}

/// The value at `name` of a hash (the first, as the merger reads it).
fn hash_get<'v>(v: &'v Value, name: &str) -> Option<&'v Value> {
    match v.resolve() {
        Value::Hash(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .map(|(_, v)| v),
        _ => None,
    }
}

impl Counting {
    /// The reading of `def`'s states grouped by `by` for the aggregates `aggs`; `None` when an
    /// aggregate is not count-like, a name is unknown, or a column name is read twice (the
    /// merger's rows then give the first column of that name: not followed here).
    pub fn new(def: &Definition, by: &[String], aggs: &[String]) -> Option<Counting> {
        let spec = def.rollup_spec()?.ok()?;
        let keep: Vec<usize> = by
            .iter()
            .map(|b| spec.group_by.iter().position(|(l, _)| l == b))
            .collect::<Option<_>>()?;
        let mut keep_aggs = Vec::new();
        for a in aggs {
            let i = spec.aggs.iter().position(|x| x.label == *a)?;
            if !keep_aggs.contains(&i) {
                keep_aggs.push(i);
            }
        }
        keep_aggs.sort_unstable();
        let kinds = keep_aggs
            .iter()
            .map(|&i| match spec.aggs[i].kind {
                AggKind::Count => Some(CountKind::Count),
                AggKind::CountIf => Some(CountKind::CountIf),
                AggKind::Ratio => Some(CountKind::Ratio),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let labels: Vec<String> = keep.iter().map(|&i| spec.group_by[i].0.clone()).collect();
        let agg_labels: Vec<String> = keep_aggs
            .iter()
            .map(|&i| spec.aggs[i].label.clone())
            .collect();
        let names: HashSet<&String> = labels.iter().chain(&agg_labels).collect();
        if names.len() != labels.len() + agg_labels.len() {
            return None;
        }
        Some(Counting {
            keep,
            keep_aggs,
            kinds,
            labels,
            aggs: agg_labels,
        })
    }

    /// A well-formed state's projected key, events and matched counts per aggregate; `None`
    /// when the merger could skip it or merge it in part (anything but one `w`, `k`, `n` and
    /// `a` each, the kept key and aggregate states present, counts not negative, no sketch).
    fn read(&self, state: &Value) -> Option<(Vec<Value>, u64, Vec<u64>)> {
        let Value::Hash(pairs) = state.resolve() else {
            return None;
        };
        let (mut w, mut k, mut n, mut a) = (0, None, None, None);
        for (name, v) in pairs {
            match name.as_bytes() {
                b"w" => w += 1,
                b"k" if k.is_none() => k = Some(v.resolve()),
                b"n" if n.is_none() => n = Some(v),
                b"a" if a.is_none() => a = Some(v.resolve()),
                b"k" | b"n" | b"a" => return None,
                _ => {}
            }
        }
        let (Some(Value::Array(key)), Some(n), Some(Value::Array(accs))) = (k, n, a) else {
            return None;
        };
        if w != 1 {
            return None;
        }
        let events = u64::try_from(n.as_i64()?).ok()?;
        let key = self
            .keep
            .iter()
            .map(|&i| key.get(i).map(|v| v.resolve().clone()))
            .collect::<Option<Vec<_>>>()?;
        let mut matched = Vec::with_capacity(self.keep_aggs.len());
        for &i in &self.keep_aggs {
            let s = accs.get(i)?;
            let is_binary = |name: &str| {
                matches!(
                    hash_get(s, name).map(Value::resolve),
                    Some(Value::Binary(_))
                )
            };
            if is_binary("q") || is_binary("d") {
                return None;
            }
            let m = match hash_get(s, "m") {
                Some(m) => u64::try_from(m.as_i64()?).ok()?,
                None => 0,
            };
            matched.push(m);
        }
        Some((key, events, matched))
    }

    /// Adds `state` (of `steps`'s step, pushed after the ones it holds) to `steps`.
    pub fn add(&self, steps: &mut StepCounts, state: &Value) -> Change {
        let Some((key, events, matched)) = self.read(state) else {
            steps.irregular += 1;
            return Change::Irregular;
        };
        let mut key_bytes = Vec::new();
        for v in &key {
            // Writing JSON to a Vec cannot fail.
            let _ = sereal::json::to_writer(&mut key_bytes, v);
            key_bytes.push(0);
        }
        let new = match steps.index.get(&key_bytes) {
            Some(&at) => {
                let g = &mut steps.groups[at];
                g.events = g.events.wrapping_add(events);
                for (have, m) in g.matched.iter_mut().zip(&matched) {
                    *have = have.wrapping_add(*m);
                }
                false
            }
            None => {
                steps.index.insert(key_bytes.clone(), steps.groups.len());
                steps.groups.push(StepGroup {
                    key_bytes: key_bytes.clone(),
                    key,
                    events,
                    matched: matched.clone(),
                });
                true
            }
        };
        Change::Counts {
            key_bytes,
            events,
            matched,
            new,
        }
    }

    /// One group's values as the merger gives them.
    fn values(&self, key: &[Value], sums: &Sums) -> GroupValues {
        let values = self
            .aggs
            .iter()
            .zip(&self.kinds)
            .zip(&sums.matched)
            .map(|((label, kind), &m)| {
                // As `Acc::result` makes them, then read as a number.
                let v = match kind {
                    CountKind::Count => Value::Int(sums.events as i64),
                    CountKind::CountIf => Value::Int(m as i64),
                    CountKind::Ratio => Value::Float(m as f64 / sums.events.max(1) as f64),
                };
                (label.clone(), v.as_f64())
            })
            .collect();
        GroupValues {
            group: self
                .labels
                .iter()
                .zip(key)
                .map(|(l, v)| (l.clone(), group_text(Some(v))))
                .collect(),
            key: key.to_vec(),
            events: sums.events,
            values,
        }
    }
}

impl SlidingWindow {
    /// An empty window.
    pub fn new() -> SlidingWindow {
        SlidingWindow::default()
    }

    /// Whether `w` is a step of the window.
    pub fn holds(&self, w: i64) -> bool {
        self.from <= w && w < self.to
    }

    /// Whether the sums give the merger's answer: no irregular state, and fewer groups than
    /// the merger's cap (past it, groups go to `_other`).
    pub fn regular(&self) -> bool {
        self.irregular == 0 && self.sums.len() < DEFAULT_MAX_GROUPS
    }

    /// Adds (`add`) or subtracts one step's counts.
    pub fn apply(&mut self, step: &StepCounts, add: bool) {
        self.irregular = if add {
            self.irregular.wrapping_add(step.irregular)
        } else {
            self.irregular.wrapping_sub(step.irregular)
        };
        for g in &step.groups {
            self.apply_group(&g.key_bytes, g.events, &g.matched, add, true);
        }
    }

    /// Takes the change one state made to a step of the window.
    pub fn apply_change(&mut self, change: &Change) {
        match change {
            Change::Irregular => self.irregular = self.irregular.wrapping_add(1),
            Change::Counts {
                key_bytes,
                events,
                matched,
                new,
            } => self.apply_group(key_bytes, *events, matched, true, *new),
        }
    }

    fn apply_group(
        &mut self,
        key_bytes: &[u8],
        events: u64,
        matched: &[u64],
        add: bool,
        step: bool,
    ) {
        let op = |a: u64, b: u64| {
            if add {
                a.wrapping_add(b)
            } else {
                a.wrapping_sub(b)
            }
        };
        if !self.sums.contains_key(key_bytes) {
            let sums = Sums {
                events: 0,
                matched: vec![0; matched.len()],
                steps: 0,
            };
            self.sums.insert(key_bytes.to_vec(), sums);
        }
        let Some(sums) = self.sums.get_mut(key_bytes) else {
            return; // inserted above: not reached
        };
        sums.events = op(sums.events, events);
        for (have, m) in sums.matched.iter_mut().zip(matched) {
            *have = op(*have, *m);
        }
        if step {
            sums.steps = op(sums.steps, 1);
        }
        if sums.steps == 0 {
            self.sums.remove(key_bytes);
        }
    }

    /// Moves the window to `[from, to)`: of `steps` (step start and counts, in time order),
    /// adds those entering it and subtracts those leaving it — or starts over when the two
    /// windows do not overlap.
    pub fn slide<'a, I>(&mut self, steps: impl Fn(i64) -> I, from: i64, to: i64)
    where
        I: Iterator<Item = (i64, &'a StepCounts)>,
    {
        let (old_from, old_to) = (self.from, self.to);
        let overlap = from < old_to && old_from < to;
        let edges = if overlap {
            [
                (old_from.min(from), old_from.max(from)),
                (old_to.min(to), old_to.max(to)),
            ]
        } else {
            self.sums.clear();
            self.irregular = 0;
            [(from, to), (to, to)]
        };
        for (a, b) in edges {
            if a >= b {
                continue;
            }
            for (w, counts) in steps(a).take_while(|(w, _)| *w < b) {
                let was = overlap && old_from <= w && w < old_to;
                let is = from <= w && w < to;
                if was != is {
                    self.apply(counts, is);
                }
            }
        }
        self.from = from;
        self.to = to;
    }

    /// The window's groups as `StateMerger::merge` gives them, from `steps` (the window's
    /// steps' counts, in time order: the first-seen order and each group's first key).
    pub fn rows<'a>(
        &self,
        counting: &Counting,
        steps: impl Iterator<Item = &'a StepCounts>,
    ) -> Vec<GroupValues> {
        let mut seen: HashSet<&[u8]> = HashSet::with_capacity(self.sums.len());
        let mut rows = Vec::with_capacity(self.sums.len());
        for step in steps {
            if seen.len() == self.sums.len() {
                break;
            }
            for g in &step.groups {
                if !seen.insert(g.key_bytes.as_slice()) {
                    continue;
                }
                if let Some(sums) = self.sums.get(&g.key_bytes) {
                    rows.push(counting.values(&g.key, sums));
                }
            }
        }
        rows
    }
}
