//! [`Rule`]: what an alert rule is (as stored in the catalog, posted to `/v1/alerts`, written
//! in TOML `[[alerts]]`), and [`RuleSpec`], the one place a rule as a user writes it (CLI
//! flags, JSON, TOML — durations as text) is checked against its rollup.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_reader::filter::Filter;
use sluice_reader::reduce::parse_window;
use sluice_substreams::registry::Definition;

use crate::expr::Expr;

/// Most sample events an alert may carry.
pub const MAX_SAMPLES: usize = 100;
/// Most points an anomaly rule keeps per group (its baseline at its point step).
pub const MAX_POINTS: u64 = 10_080;

/// Why a rule is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("alert rule {rule:?}: {message}")]
pub struct RuleError {
    /// The rule's name.
    pub rule: String,
    /// What is wrong, naming the field.
    pub message: String,
}

/// The kind of anomaly check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnomalyKind {
    /// `(mean(recent) − mean(baseline)) / stddev(baseline)` beyond the threshold.
    Zscore,
    /// `stddev(recent) / stddev(baseline)` beyond the threshold (or below its inverse).
    Stddev,
}

/// Which way a change must go to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Up only.
    Up,
    /// Down only.
    Down,
    /// Either way.
    #[default]
    Both,
}

/// An anomaly check: the rule's value per point, the recent window against the baseline
/// window just before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    /// zscore or stddev.
    pub kind: AnomalyKind,
    /// The baseline window, seconds (it ends where the recent window starts).
    pub baseline_secs: u64,
    /// The threshold (a z-score, or a ratio of standard deviations ≥ 1).
    pub threshold: f64,
    /// Which way counts.
    #[serde(default)]
    pub direction: Direction,
    /// One point per this many seconds (a multiple of the rollup's step).
    pub point_secs: u64,
}

/// A rule, checked: what is stored and evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Its name (the `alertname` label).
    pub name: String,
    /// The rollup it reads.
    pub rollup: String,
    /// The expression (a comparison for a threshold rule, a value for an anomaly rule).
    pub expr: String,
    /// Group-by fields of the rollup giving one alert each (empty: one alert for the rule).
    #[serde(default)]
    pub by: Vec<String>,
    /// The window the expression sees, seconds (a multiple of the rollup's step).
    pub window_secs: u64,
    /// How long the condition must hold before it fires, seconds.
    #[serde(default)]
    pub for_secs: u64,
    /// How long it keeps firing after the condition stops holding, seconds.
    #[serde(default)]
    pub keep_firing_for_secs: u64,
    /// The volume floor: fewer events than this in the window (per group) never fire.
    #[serde(default)]
    pub min_count: u64,
    /// An anomaly check instead of the expression's comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anomaly: Option<Anomaly>,
    /// Labels added to every alert.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations (summary, description, runbook_url, …).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Sample events carried by an alert (0: none).
    #[serde(default = "default_samples")]
    pub samples: usize,
    /// Fields of each sample (empty: the whole event).
    #[serde(default)]
    pub sample_fields: Vec<String>,
    /// Which events are evidence (default: the expression's first `count where` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_where: Option<String>,
    /// Silenced (no notification) until this Unix second.
    #[serde(default)]
    pub silenced_until: i64,
}

// The threshold is checked finite when the spec is, so equality is an equivalence.
impl Eq for RuleSpec {}

fn default_samples() -> usize {
    5
}

impl Rule {
    /// The step at which it is evaluated, seconds (the rollup's, or the anomaly point).
    pub fn eval_step(&self, rollup_step: u64) -> u64 {
        self.anomaly.as_ref().map_or(rollup_step, |a| a.point_secs)
    }

    /// How far back its first evaluation reads, seconds.
    pub fn lookback_secs(&self) -> u64 {
        self.window_secs + self.anomaly.as_ref().map_or(0, |a| a.baseline_secs)
    }

    /// The rule's kind as text: `threshold`, `zscore` or `stddev`.
    pub fn kind(&self) -> &'static str {
        match self.anomaly.as_ref().map(|a| a.kind) {
            None => "threshold",
            Some(AnomalyKind::Zscore) => "zscore",
            Some(AnomalyKind::Stddev) => "stddev",
        }
    }
}

/// A rule as a user writes it: durations as text (`1m`, `90s`), defaults left out. The CLI,
/// `POST /v1/alerts`, TOML `[[alerts]]` and Python all make one of these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Its name.
    pub name: String,
    /// The rollup it reads.
    pub rollup: String,
    /// The expression.
    pub expr: String,
    /// Group-by fields (a subset of the rollup's).
    #[serde(default)]
    pub by: Vec<String>,
    /// The window (default: the rollup's step; for an anomaly rule, 5 m).
    #[serde(default)]
    pub window: Option<String>,
    /// `for` (default 0: fire at once).
    #[serde(default, rename = "for")]
    pub for_: Option<String>,
    /// `keep_firing_for` (default 0).
    #[serde(default)]
    pub keep_firing_for: Option<String>,
    /// The volume floor (events in the window).
    #[serde(default)]
    pub min_count: Option<u64>,
    /// `zscore` or `stddev`: an anomaly rule.
    #[serde(default)]
    pub anomaly: Option<String>,
    /// The anomaly baseline (`1h`, `1d`, `7d`; default 1h).
    #[serde(default)]
    pub baseline: Option<String>,
    /// The anomaly threshold (default 3).
    #[serde(default)]
    pub threshold: Option<f64>,
    /// `up`, `down` or `both` (default both).
    #[serde(default)]
    pub direction: Option<String>,
    /// The anomaly point step (default: the rollup's, raised so the baseline holds at most
    /// [`MAX_POINTS`] points).
    #[serde(default)]
    pub point: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Sample events per alert (default 5).
    #[serde(default)]
    pub samples: Option<usize>,
    /// Fields of each sample.
    #[serde(default)]
    pub sample_fields: Vec<String>,
    /// Which events are evidence.
    #[serde(default)]
    pub evidence_where: Option<String>,
}

impl RuleSpec {
    /// The rule, checked against its rollup `def` (`rollup_step` and aggregates from it).
    pub fn check(&self, def: &Definition) -> Result<(Rule, Expr), RuleError> {
        let err = |message: String| RuleError {
            rule: self.name.clone(),
            message,
        };
        check_name(&self.name).map_err(err)?;
        for (k, _) in self.labels.iter().chain(&self.annotations) {
            check_label_name(k).map_err(err)?;
        }
        let (group_by, aggs, step) = match &def.transform {
            sluice_substreams::registry::Transform::Rollup {
                group_by,
                aggs,
                step,
                ..
            } => (group_by, aggs, *step),
            _ => return Err(err(format!("{:?} is not a rollup", def.name))),
        };
        for b in &self.by {
            if !group_by.contains(b) {
                return Err(err(format!(
                    "by: rollup {:?} is not grouped by {b:?} (its groups: {})",
                    def.name,
                    if group_by.is_empty() {
                        "none".to_owned()
                    } else {
                        group_by.join(", ")
                    }
                )));
            }
        }
        let dur = |field: &str, v: &Option<String>, default: u64| -> Result<u64, RuleError> {
            match v.as_deref().map(str::trim) {
                None => Ok(default),
                Some("0" | "0s") => Ok(0),
                Some(t) => parse_window(t).map_err(|e| err(format!("{field}: {e}"))),
            }
        };
        let multiple = |field: &str, secs: u64| -> Result<u64, RuleError> {
            if secs == 0 || !secs.is_multiple_of(step) {
                Err(err(format!(
                    "{field}: {secs}s is not a multiple of the rollup's step ({step}s)"
                )))
            } else {
                Ok(secs)
            }
        };
        let expr = Expr::parse(&self.expr, aggs).map_err(|e| err(format!("expr: {e}")))?;
        let anomaly = match self.anomaly.as_deref() {
            None => {
                if expr.comparison().is_none() {
                    return Err(err(
                        "expr: a threshold rule compares its value (`… > 0.05`); for an anomaly rule give --anomaly zscore|stddev".into(),
                    ));
                }
                for (field, set) in [
                    ("baseline", self.baseline.is_some()),
                    ("threshold", self.threshold.is_some()),
                    ("direction", self.direction.is_some()),
                    ("point", self.point.is_some()),
                ] {
                    if set {
                        return Err(err(format!("{field}: only for an anomaly rule")));
                    }
                }
                None
            }
            Some(kind) => {
                let kind = match kind {
                    "zscore" => AnomalyKind::Zscore,
                    "stddev" => AnomalyKind::Stddev,
                    other => {
                        return Err(err(format!("anomaly: {other:?} is not zscore or stddev")))
                    }
                };
                if expr.comparison().is_some() {
                    return Err(err(
                        "expr: an anomaly rule takes a value (`sum(count)`), not a comparison"
                            .into(),
                    ));
                }
                let baseline = dur("baseline", &self.baseline, 3600)?;
                let threshold = self.threshold.unwrap_or(3.0);
                if !(threshold.is_finite() && threshold > 0.0) {
                    return Err(err("threshold: must be a positive number".into()));
                }
                if kind == AnomalyKind::Stddev && threshold < 1.0 {
                    return Err(err(
                        "threshold: a ratio of standard deviations, at least 1".into()
                    ));
                }
                let direction = match self.direction.as_deref() {
                    None | Some("both") => Direction::Both,
                    Some("up") => Direction::Up,
                    Some("down") => Direction::Down,
                    Some(other) => {
                        return Err(err(format!("direction: {other:?} is not up, down or both")))
                    }
                };
                let point = match &self.point {
                    Some(_) => multiple("point", dur("point", &self.point, step)?)?,
                    None => {
                        let at_least = baseline.div_ceil(MAX_POINTS).max(1);
                        at_least.div_ceil(step) * step
                    }
                };
                let baseline = multiple("baseline", baseline)?;
                if !baseline.is_multiple_of(point) || baseline / point > MAX_POINTS {
                    return Err(err(format!(
                        "baseline: {baseline}s must be a multiple of the point step ({point}s) and hold at most {MAX_POINTS} points"
                    )));
                }
                if baseline / point < 3 {
                    return Err(err(format!(
                        "baseline: {baseline}s holds fewer than 3 points of {point}s"
                    )));
                }
                Some(Anomaly {
                    kind,
                    baseline_secs: baseline,
                    threshold,
                    direction,
                    point_secs: point,
                })
            }
        };
        let default_window = if anomaly.is_some() { 300 } else { step };
        let window = multiple("window", dur("window", &self.window, default_window)?)?;
        if let Some(a) = &anomaly {
            if !window.is_multiple_of(a.point_secs) {
                return Err(err(format!(
                    "window: {window}s is not a multiple of the point step ({}s)",
                    a.point_secs
                )));
            }
            if a.kind == AnomalyKind::Stddev && window / a.point_secs < 3 {
                return Err(err(format!(
                    "window: {window}s holds fewer than 3 points of {}s (a standard deviation needs them)",
                    a.point_secs
                )));
            }
        }
        let for_secs = dur("for", &self.for_, 0)?;
        let keep = dur("keep_firing_for", &self.keep_firing_for, 0)?;
        for (field, v) in [("for", for_secs), ("keep_firing_for", keep)] {
            if v > 30 * 86_400 {
                return Err(err(format!("{field}: at most 30 days")));
            }
        }
        if self.min_count.is_some() && !aggs.iter().any(|a| a == "count") {
            return Err(err(format!(
                "min_count: the rollup {:?} has no `count` aggregate to compare",
                def.name
            )));
        }
        let samples = self.samples.unwrap_or(default_samples());
        if samples > MAX_SAMPLES {
            return Err(err(format!("samples: at most {MAX_SAMPLES}")));
        }
        if let Some(w) = &self.evidence_where {
            Filter::parse(w).map_err(|e| err(format!("evidence_where: {e}")))?;
        }
        let rule = Rule {
            name: self.name.clone(),
            rollup: self.rollup.clone(),
            expr: self.expr.trim().to_owned(),
            by: self.by.clone(),
            window_secs: window,
            for_secs,
            keep_firing_for_secs: keep,
            min_count: self.min_count.unwrap_or(0),
            anomaly,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            samples,
            sample_fields: self.sample_fields.clone(),
            evidence_where: self.evidence_where.clone(),
            silenced_until: 0,
        };
        Ok((rule, expr))
    }
}

/// A rule name: 1 to 64 of `[A-Za-z0-9_.-]`, starting with a letter.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name {name:?}: 1 to 64 letters, digits, `_`, `.` or `-`, starting with a letter"
        ))
    }
}

/// A label or annotation name, as Prometheus allows: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn check_label_name(name: &str) -> Result<(), String> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 128;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "label {name:?}: letters, digits and `_`, not starting with a digit"
        ))
    }
}
