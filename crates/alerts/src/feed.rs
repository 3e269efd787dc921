//! [`Feed`]: one rollup's states by step, shared by every rule on the rollup, with the merges
//! of one evaluation time cached — so rules that read the same window grouped the same way
//! (any expression, any threshold) merge the states once.
//!
//! Why: a window of 600 one-second steps over 50 groups is 30,000 states to merge; 1,000 rules
//! merging it each would be 30 M merges a second, the cache makes it one merge per distinct
//! (`by`, aggregates, window) and step (bench/alerts).
//!
//! A window whose aggregates are all count-like (`count`, `count_if`, `ratio`) is not merged:
//! it slides ([`crate::sliding`]) — each step's states are digested once per (`by`,
//! aggregates), and a window moving one step adds the step entering it and subtracts the one
//! leaving it, giving exactly what the merge gives. Other windows are merged whole.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sereal::Value;
use sluice_rollups::states::state_step;
use sluice_rollups::{GroupValues, StateMerger};
use sluice_substreams::registry::Definition;

use crate::sliding::{Counting, SlidingWindow, StepCounts};

/// The groups of a window, merged, and the states that did not read.
pub type Merged = Arc<(Vec<GroupValues>, u64)>;

/// A window's `by` fields and aggregates.
type Reading = (Vec<String>, Vec<String>);

/// One step's states.
#[derive(Debug)]
struct Step {
    /// The step's start.
    w: i64,
    /// Its states, as pushed.
    states: Vec<Value>,
    /// Its states digested for each count-like reading (by index in `Feed::countings`).
    counts: Vec<StepCounts>,
}

/// One rollup's states by step start, oldest first.
#[derive(Debug)]
pub struct Feed {
    def: Definition,
    steps: VecDeque<Step>,
    /// Mergers by (`by` fields, aggregates).
    mergers: HashMap<Reading, StateMerger>,
    /// The count-like reading of each (`by`, aggregates) — an index in `countings` — or `None`
    /// (merged whole).
    counting_of: HashMap<Reading, Option<usize>>,
    countings: Vec<Counting>,
    /// Sliding windows by (index in `countings`, length).
    windows: HashMap<(usize, i64), SlidingWindow>,
    /// Merges of the current evaluation time, by (`by`, aggregates, from, to).
    cache: HashMap<(Vec<String>, Vec<String>, i64, i64), Merged>,
    /// States with no step (not rollup states): skipped, counted.
    pub bad_states: u64,
    /// Merges done (cache misses merged whole).
    pub merges: u64,
    /// Windows answered by sliding (cache misses not merged).
    pub slides: u64,
}

/// The counts of reading `c` of the steps from the first at or after `from`, in time order.
fn counts_from(
    steps: &VecDeque<Step>,
    c: usize,
    from: i64,
) -> impl Iterator<Item = (i64, &StepCounts)> + '_ {
    let at = steps.partition_point(|s| s.w < from);
    steps
        .range(at..)
        .filter_map(move |s| s.counts.get(c).map(|counts| (s.w, counts)))
}

impl Feed {
    /// An empty feed of rollup `def`.
    pub fn new(def: Definition) -> Feed {
        Feed {
            def,
            steps: VecDeque::new(),
            mergers: HashMap::new(),
            counting_of: HashMap::new(),
            countings: Vec::new(),
            windows: HashMap::new(),
            cache: HashMap::new(),
            bad_states: 0,
            merges: 0,
            slides: 0,
        }
    }

    /// The rollup.
    pub fn def(&self) -> &Definition {
        &self.def
    }

    /// Takes one state (any order; kept sorted by step).
    pub fn push(&mut self, state: Value) {
        let Some(w) = state_step(&state) else {
            self.bad_states += 1;
            return;
        };
        // A late state changes the merges of windows holding its step.
        self.cache
            .retain(|(_, _, from, to), _| w < *from || w >= *to);
        let at = self.steps.partition_point(|s| s.w < w);
        if self.steps.get(at).is_none_or(|s| s.w != w) {
            let counts = self
                .countings
                .iter()
                .map(|_| StepCounts::default())
                .collect();
            self.steps.insert(
                at,
                Step {
                    w,
                    states: Vec::new(),
                    counts,
                },
            );
        }
        let Some(step) = self.steps.get_mut(at) else {
            return; // inserted above: not reached
        };
        for (c, (counting, counts)) in self.countings.iter().zip(&mut step.counts).enumerate() {
            let change = counting.add(counts, &state);
            for ((of, _), window) in self.windows.iter_mut() {
                if *of == c && window.holds(w) {
                    window.apply_change(&change);
                }
            }
        }
        step.states.push(state);
    }

    /// Forgets the steps before `t`.
    pub fn trim(&mut self, t: i64) {
        while self.steps.front().is_some_and(|s| s.w < t) {
            let Some(step) = self.steps.pop_front() else {
                break;
            };
            // A window holding the step no longer does: its sums stay those of the feed's steps.
            for ((c, _), window) in self.windows.iter_mut() {
                if let (true, Some(counts)) = (window.holds(step.w), step.counts.get(*c)) {
                    window.apply(counts, false);
                }
            }
        }
    }

    /// Forgets the cached merges (a merge is reused by the rules of one tick).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
    }

    /// The count-like reading of (`by`, `aggs`), its steps digested (`None`: not count-like).
    fn counting(&mut self, which: &Reading) -> Option<usize> {
        if let Some(c) = self.counting_of.get(which) {
            return *c;
        }
        let c = Counting::new(&self.def, &which.0, &which.1).map(|counting| {
            for step in &mut self.steps {
                let mut counts = StepCounts::default();
                for s in &step.states {
                    counting.add(&mut counts, s);
                }
                step.counts.push(counts);
            }
            self.countings.push(counting);
            self.countings.len() - 1
        });
        self.counting_of.insert(which.clone(), c);
        c
    }

    /// The groups (projected to `by`) of the states whose step lies in `[from, to)`, merged —
    /// only the aggregates `aggs` (sorted: rules asking for the same ones share the merge).
    pub fn merged(
        &mut self,
        by: &[String],
        aggs: &[String],
        from: i64,
        to: i64,
    ) -> Result<Merged, String> {
        let key = (by.to_vec(), aggs.to_vec(), from, to);
        if let Some(m) = self.cache.get(&key) {
            return Ok(m.clone());
        }
        let which = (by.to_vec(), aggs.to_vec());
        if !self.mergers.contains_key(&which) {
            let m = StateMerger::new(&self.def, Some(by))
                .and_then(|m| m.only_aggregates(aggs))
                .map_err(|e| e.to_string())?;
            self.mergers.insert(which.clone(), m);
        }
        if let Some(c) = self.counting(&which) {
            let window = self.windows.entry((c, to - from)).or_default();
            let steps = &self.steps;
            window.slide(|a| counts_from(steps, c, a), from, to);
            if let (true, Some(counting)) = (window.regular(), self.countings.get(c)) {
                let in_window = counts_from(steps, c, from)
                    .take_while(|(w, _)| *w < to)
                    .map(|(_, counts)| counts);
                let merged: Merged = Arc::new((window.rows(counting, in_window), 0));
                self.slides += 1;
                self.cache.insert(key, merged.clone());
                return Ok(merged);
            }
        }
        let merger = &self.mergers[&which];
        let states = self
            .steps
            .iter()
            .filter(|s| s.w >= from && s.w < to)
            .flat_map(|s| s.states.iter());
        let merged: Merged = Arc::new(merger.merge(states));
        self.merges += 1;
        self.cache.insert(key, merged.clone());
        Ok(merged)
    }
}
