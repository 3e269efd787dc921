//! [`RuleRun`]: one rule evaluated over a stream of its rollup's states — the same code for
//! live evaluation (fed each step as it is stored) and for a backtest (fed a stored range), so
//! both give the same answer for the same data.
//!
//! ```text
//! push(state)      the rollup's states in time order (their step start `w`)
//! evaluate(T)      T a multiple of the rule's eval step: the window [T − window, T) merged per
//!                  group (StateMerger: counts add, sketches merge) → the expression's value
//!   threshold:     holds when the value meets the comparison and the window has ≥ min_count events
//!   anomaly:       one point per point step; the recent window's points against the baseline's
//!                  (the baseline window ends where the recent one starts)
//!   → Outcome per group → RuleState::apply → Transitions
//! ```
//!
//! Memory: the states of one window (threshold) or one point step (anomaly), plus at most
//! `baseline / point + window / point` points per group.

use std::collections::{BTreeMap, HashMap, VecDeque};

use sereal::Value;
use sluice_rollups::states::state_step;
use sluice_rollups::{GroupValues, StateMerger};
use sluice_substreams::registry::Definition;

use crate::expr::Expr;
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
    merger: StateMerger,
    /// The rule's evaluation step, seconds.
    pub eval_step: u64,
    /// States by step start, oldest first.
    steps: VecDeque<(i64, Vec<Value>)>,
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
        let merger = StateMerger::new(def, Some(&rule.by)).map_err(|e| err(e.to_string()))?;
        let expr = Expr::parse(&rule.expr, merger.aggs()).map_err(|e| err(format!("expr: {e}")))?;
        Ok(RuleRun {
            eval_step: rule.eval_step(step),
            expr,
            merger,
            steps: VecDeque::new(),
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

    /// Takes one state of the rollup (any order; kept sorted by step).
    pub fn push(&mut self, state: Value) {
        let Some(w) = state_step(&state) else {
            self.bad_states += 1;
            return;
        };
        let at = self.steps.partition_point(|(s, _)| *s < w);
        match self.steps.get_mut(at) {
            Some((s, states)) if *s == w => states.push(state),
            _ => self.steps.insert(at, (w, vec![state])),
        }
    }

    /// Evaluates at `t` (the end of the window): each group's outcome, and — when `apply` —
    /// the transitions of the alerts' states. Without `apply` (warming an anomaly baseline
    /// up) the states are left as they are.
    pub fn evaluate(&mut self, t: i64, apply: bool) -> (Vec<Outcome>, Vec<Transition>) {
        let outcomes = match self.rule.anomaly.clone() {
            None => self.threshold(t),
            Some(a) => self.anomaly(t, &a),
        };
        let keep_from = t - self.rule.window_secs as i64 - self.eval_step as i64;
        while self.steps.front().is_some_and(|(s, _)| *s < keep_from) {
            self.steps.pop_front();
        }
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

    /// The groups of the states whose step lies in `[from, to)`, merged.
    fn merged(&mut self, from: i64, to: i64) -> Vec<GroupValues> {
        let states = self
            .steps
            .iter()
            .filter(|(s, _)| *s >= from && *s < to)
            .flat_map(|(_, v)| v.iter());
        let (groups, bad) = self.merger.merge(states);
        self.bad_states += bad;
        groups
    }

    fn labels(&self, g: &GroupValues) -> BTreeMap<String, String> {
        g.group.iter().cloned().collect()
    }

    fn threshold(&mut self, t: i64) -> Vec<Outcome> {
        let window = self.rule.window_secs;
        let groups = self.merged(t - window as i64, t);
        groups
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

    fn anomaly(&mut self, t: i64, a: &crate::rule::Anomaly) -> Vec<Outcome> {
        let point = a.point_secs as i64;
        let window = self.rule.window_secs as i64;
        let groups = self.merged(t - point, t);
        for g in &groups {
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
