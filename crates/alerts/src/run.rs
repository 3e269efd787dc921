//! [`RuleRun`]: one rule evaluated over its rollup's states (a [`Feed`]) — the same code for
//! live evaluation (the feed filled each step as it is stored) and for a backtest (filled from
//! a stored range), so both give the same answer for the same data.
//!
//! ```text
//! evaluate(T, feed)  T a multiple of the rule's eval step: the window [T − window, T) merged per
//!                  group (StateMerger: counts add, sketches merge) → the expression's value
//!   threshold:     holds when the value meets the comparison and the window has ≥ min_count events
//!   anomaly:       one point per point step; the recent window's points against the baseline's
//!                  (the baseline window ends where the recent one starts)
//!   → Outcome per group → RuleState::apply → Transitions
//! ```
//!
//! Memory: the feed keeps the states of the longest window of its rules; an anomaly rule
//! keeps at most `baseline / point + window / point` points per group.

use std::collections::{BTreeMap, HashMap, VecDeque};

use sluice_rollups::GroupValues;
use sluice_substreams::registry::Definition;

use crate::expr::Expr;
use crate::feed::Feed;
use crate::rule::{AnomalyKind, Direction, Rule, RuleError};
use crate::state::{fingerprint, Outcome, RuleState, Transition};

/// One group's anomaly points: (point start, value, events), oldest first.
type Points = VecDeque<(i64, f64, u64)>;

/// A rule being evaluated.
#[derive(Debug)]
pub struct RuleRun {
    /// The rule.
    pub rule: Rule,
    expr: Expr,
    /// The aggregates the expression reads, sorted (what the feed merges for it).
    aggs: Vec<String>,
    /// The rule's evaluation step, seconds.
    pub eval_step: u64,
    /// Anomaly points per group fingerprint: labels and (point start, value, events).
    points: HashMap<String, (BTreeMap<String, String>, Points)>,
    /// The alerts' states.
    pub state: RuleState,
    /// States that did not read (skipped, counted).
    pub bad_states: u64,
}

impl RuleRun {
    /// A run of `rule` over the states of its rollup `def`, from `state`.
    pub fn new(rule: Rule, def: &Definition, state: RuleState) -> Result<RuleRun, RuleError> {
        let err = |message: String| RuleError {
            rule: rule.name.clone(),
            message,
        };
        let step = sluice_rollups::query::rollup_step(def).map_err(|e| err(e.to_string()))?;
        let merger = sluice_rollups::StateMerger::new(def, Some(&rule.by))
            .map_err(|e| err(e.to_string()))?;
        let expr = Expr::parse(&rule.expr, merger.aggs()).map_err(|e| err(format!("expr: {e}")))?;
        let mut aggs = expr.aggregates().to_vec();
        aggs.sort();
        Ok(RuleRun {
            eval_step: rule.eval_step(step),
            aggs,
            expr,
            points: HashMap::new(),
            state,
            bad_states: 0,
            rule,
        })
    }

    /// The parsed expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Evaluates at `t` (the end of the window): each group's outcome, and — when `apply` —
    /// the transitions of the alerts' states. Without `apply` (warming an anomaly baseline
    /// up) the states are left as they are.
    pub fn evaluate(
        &mut self,
        t: i64,
        apply: bool,
        feed: &mut Feed,
    ) -> (Vec<Outcome>, Vec<Transition>) {
        let outcomes = match self.rule.anomaly.clone() {
            None => self.threshold(t, feed),
            Some(a) => self.anomaly(t, &a, feed),
        };
        let transitions = if apply {
            self.state.apply(
                &self.rule.name,
                t,
                &outcomes,
                self.rule.for_secs,
                self.rule.keep_firing_for_secs,
            )
        } else {
            Vec::new()
        };
        (outcomes, transitions)
    }

    /// The window `[from, to)` of the feed, merged per group of the rule (none when the
    /// rollup no longer fits the rule: counted as bad).
    fn merged(&mut self, feed: &mut Feed, from: i64, to: i64) -> crate::feed::Merged {
        match feed.merged(&self.rule.by, &self.aggs, from, to) {
            Ok(m) => {
                self.bad_states += m.1;
                m
            }
            Err(_) => {
                self.bad_states += 1;
                std::sync::Arc::new((Vec::new(), 0))
            }
        }
    }

    /// How far back from an evaluation time the rule reads its feed, seconds.
    pub fn reads_back(&self) -> i64 {
        match &self.rule.anomaly {
            Some(a) => a.point_secs as i64,
            None => self.rule.window_secs as i64,
        }
    }

    fn labels(&self, g: &GroupValues) -> BTreeMap<String, String> {
        g.group.iter().cloned().collect()
    }

    fn threshold(&mut self, t: i64, feed: &mut Feed) -> Vec<Outcome> {
        let window = self.rule.window_secs;
        let merged = self.merged(feed, t - window as i64, t);
        merged
            .0
            .iter()
            .map(|g| {
                let value = self.expr.value(g, window);
                Outcome {
                    labels: self.labels(g),
                    value,
                    holds: g.events >= self.rule.min_count && self.expr.holds(value),
                    events: g.events,
                }
            })
            .collect()
    }

    fn anomaly(&mut self, t: i64, a: &crate::rule::Anomaly, feed: &mut Feed) -> Vec<Outcome> {
        let point = a.point_secs as i64;
        let window = self.rule.window_secs as i64;
        let merged = self.merged(feed, t - point, t);
        for g in &merged.0 {
            let labels = self.labels(g);
            let fp = fingerprint(&self.rule.name, &labels);
            if let Some(v) = self.expr.value(g, a.point_secs) {
                self.points
                    .entry(fp)
                    .or_insert_with(|| (labels, VecDeque::new()))
                    .1
                    .push_back((t - point, v, g.events));
            }
        }
        let oldest = t - window - a.baseline_secs as i64;
        let mut out = Vec::new();
        self.points.retain(|_, (_, pts)| {
            while pts.front().is_some_and(|(s, _, _)| *s < oldest) {
                pts.pop_front();
            }
            !pts.is_empty()
        });
        let need_baseline = ((a.baseline_secs / a.point_secs) / 2).max(3) as usize;
        for (labels, pts) in self.points.values() {
            let (mut recent, mut base, mut events) = (Vec::new(), Vec::new(), 0u64);
            for (s, v, n) in pts {
                if *s >= t - window {
                    recent.push(*v);
                    events += n;
                } else {
                    base.push(*v);
                }
            }
            if recent.is_empty() {
                continue;
            }
            let score = if base.len() < need_baseline {
                None
            } else {
                let (bm, bs) = mean_std(&base);
                match a.kind {
                    AnomalyKind::Zscore => {
                        let (rm, _) = mean_std(&recent);
                        Some((rm - bm) / bs.max(f64::EPSILON * bm.abs().max(1.0)))
                    }
                    AnomalyKind::Stddev if recent.len() >= 3 => {
                        let (_, rs) = mean_std(&recent);
                        (bs > 0.0)
                            .then(|| rs / bs)
                            .or((rs > 0.0).then_some(f64::INFINITY))
                    }
                    AnomalyKind::Stddev => None,
                }
            };
            let beyond = score.is_some_and(|z| match (a.kind, a.direction) {
                (AnomalyKind::Zscore, Direction::Up) => z >= a.threshold,
                (AnomalyKind::Zscore, Direction::Down) => z <= -a.threshold,
                (AnomalyKind::Zscore, Direction::Both) => z.abs() >= a.threshold,
                (AnomalyKind::Stddev, Direction::Up) => z >= a.threshold,
                (AnomalyKind::Stddev, Direction::Down) => z <= 1.0 / a.threshold,
                (AnomalyKind::Stddev, Direction::Both) => {
                    z >= a.threshold || z <= 1.0 / a.threshold
                }
            });
            out.push(Outcome {
                labels: labels.clone(),
                value: score.filter(|z| z.is_finite()),
                holds: beyond && events >= self.rule.min_count,
                events,
            });
        }
        out.sort_by(|x, y| x.labels.cmp(&y.labels));
        out
    }
}

/// Mean and population standard deviation.
fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}
