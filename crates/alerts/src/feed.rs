//! [`Feed`]: one rollup's states by step, shared by every rule on the rollup, with the merges
//! of one evaluation time cached — so rules that read the same window grouped the same way
//! (any expression, any threshold) merge the states once.
//!
//! Why: a window of 60 one-second steps over 50 groups is 3,000 states to merge; 1,000 rules
//! merging it each would be 3 M merges a second, the cache makes it one merge per distinct
//! (`by`, window) and step (bench/alerts).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sereal::Value;
use sluice_rollups::states::state_step;
use sluice_rollups::{GroupValues, StateMerger};
use sluice_substreams::registry::Definition;

/// The groups of a window, merged, and the states that did not read.
pub type Merged = Arc<(Vec<GroupValues>, u64)>;

/// One rollup's states by step start, oldest first.
#[derive(Debug)]
pub struct Feed {
    def: Definition,
    steps: VecDeque<(i64, Vec<Value>)>,
    /// Mergers by (`by` fields, aggregates).
    mergers: HashMap<(Vec<String>, Vec<String>), StateMerger>,
    /// Merges of the current evaluation time, by (`by`, aggregates, from, to).
    cache: HashMap<(Vec<String>, Vec<String>, i64, i64), Merged>,
    /// States with no step (not rollup states): skipped, counted.
    pub bad_states: u64,
    /// Merges done (cache misses).
    pub merges: u64,
}

impl Feed {
    /// An empty feed of rollup `def`.
    pub fn new(def: Definition) -> Feed {
        Feed {
            def,
            steps: VecDeque::new(),
            mergers: HashMap::new(),
            cache: HashMap::new(),
            bad_states: 0,
            merges: 0,
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
        let at = self.steps.partition_point(|(s, _)| *s < w);
        match self.steps.get_mut(at) {
            Some((s, states)) if *s == w => states.push(state),
            _ => self.steps.insert(at, (w, vec![state])),
        }
    }

    /// Forgets the steps before `t`.
    pub fn trim(&mut self, t: i64) {
        while self.steps.front().is_some_and(|(s, _)| *s < t) {
            self.steps.pop_front();
        }
    }

    /// Forgets the cached merges (a merge is reused by the rules of one tick).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
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
        let merger = &self.mergers[&which];
        let states = self
            .steps
            .iter()
            .filter(|(s, _)| *s >= from && *s < to)
            .flat_map(|(_, v)| v.iter());
        let merged: Merged = Arc::new(merger.merge(states));
        self.merges += 1;
        self.cache.insert(key, merged.clone());
        Ok(merged)
    }
}
