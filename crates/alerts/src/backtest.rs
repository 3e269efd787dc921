//! Backtests: a rule evaluated over stored rollup states as live evaluation would have done
//! it, step by step ([`RuleRun`], the same code), from a fresh state — when it would have
//! fired and resolved, with the values.

use std::collections::BTreeMap;

use serde::Serialize;
use sluice_store::ReadStore;
use sluice_substreams::registry::Definition;

use crate::feed::Feed;
use crate::rule::{Rule, RuleError};
use crate::run::RuleRun;
use crate::state::{fingerprint, RuleState, Transition};

/// One group's value at one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// The evaluation time (end of the window, Unix seconds).
    pub t: i64,
    /// The group's labels.
    pub labels: BTreeMap<String, String>,
    /// The value (`null`: none).
    pub value: Option<f64>,
    /// `inactive`, `pending` or `firing` after this evaluation.
    pub state: &'static str,
}

/// What a backtest found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Backtest {
    /// Evaluations done.
    pub evaluations: u64,
    /// Values and states, at most the `max_points` asked for (`truncated` says so).
    pub points: Vec<Point>,
    /// Whether points were left out.
    pub truncated: bool,
    /// Firing and resolved transitions, in time order.
    pub transitions: Vec<Transition>,
    /// Chunks or states skipped, with why.
    pub warnings: Vec<String>,
}

/// Evaluates `rule` (over its rollup `def`) at each of its steps ending in `(from, to]`.
pub fn backtest<S: ReadStore + ?Sized>(
    store: &S,
    rule: &Rule,
    def: &Definition,
    from: i64,
    to: i64,
    max_points: usize,
) -> Result<Backtest, RuleError> {
    let mut run = RuleRun::new(rule.clone(), def, RuleState::default())?;
    let step = run.eval_step as i64;
    let first = (from.div_euclid(step) + 1) * step;
    let warm_from = first - rule.lookback_secs() as i64;
    let mut out = Backtest::default();
    let mut next = if rule.anomaly.is_some() {
        warm_from + step
    } else {
        first
    };
    let mut states = Vec::new();
    let read_from = warm_from - step;
    out.warnings = sluice_rollups::read_states(store, def, read_from, to, |s| states.push(s))
        .map_err(|e| RuleError {
            rule: rule.name.clone(),
            message: e.to_string(),
        })?;
    let mut feed = Feed::new(def.clone());
    let eval = |run: &mut RuleRun, feed: &mut Feed, t: i64, out: &mut Backtest| {
        let apply = t >= first;
        feed.clear_cache();
        let (outcomes, transitions) = run.evaluate(t, apply, feed);
        feed.trim(t + step - run.reads_back());
        if !apply {
            return;
        }
        out.evaluations += 1;
        out.transitions.extend(transitions);
        for o in outcomes {
            if out.points.len() >= max_points {
                out.truncated = true;
                break;
            }
            let state = run.state.phase_of(&fingerprint(&rule.name, &o.labels));
            out.points.push(Point {
                t,
                labels: o.labels,
                value: o.value,
                state,
            });
        }
    };
    for s in states {
        let w = sluice_rollups::states::state_step(&s).unwrap_or(i64::MIN);
        while next <= to && next <= w {
            eval(&mut run, &mut feed, next, &mut out);
            next += step;
        }
        feed.push(s);
    }
    while next <= to {
        eval(&mut run, &mut feed, next, &mut out);
        next += step;
    }
    Ok(out)
}
