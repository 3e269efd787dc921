//! Funnels: how many sessions reach each of a sequence of steps, and how fast
//! (`sluice funnel`, `GET /v1/funnel`, `sluice.Reader.funnel`). The user's guide, with the
//! semantics in full, is `docs/funnels.md`; this module is their one owner.
//!
//! A [`FunnelSpec`] names the session field (`by`), the steps (each a `--where` [`Filter`]), an
//! optional `within` and `group_by`. A [`Funnel`] takes the events of a range read in the
//! reader's order (epoch ascending, then as read inside a second) and keeps, per session, the
//! epoch at which it reached each step:
//!
//! - a session starts at its first event matching step 1 (that epoch is its *first step time*);
//! - it reaches step k (k ≥ 2) at its first event, after the one that reached step k−1, that
//!   matches step k and lies within `within` seconds of the first step time (`epoch − first ≤
//!   within`); an event advances a session by one step at most;
//! - a session counts once per step; steps repeated or out of order change nothing;
//! - the time between steps k−1 and k is the difference of the epochs of those qualifying events.
//!
//! Sessions are keyed by (group, session value): with `group_by`, a session whose events carry
//! two groups is two sessions. Events without a value at `by` are counted, not used.
//!
//! Memory is bounded by [`FunnelSpec::max_sessions`] (default [`DEFAULT_MAX_SESSIONS`]): only
//! sessions that reached step 1 are held; once the cap is reached, a step-1 event of a session
//! not held is refused and counted ([`FunnelReport::overflow`]), never silently.
//!
//! The read needs only the paths of `by`, `group_by` and the steps ([`FunnelSpec::needs`]):
//! blob chunks are read lazily and the column files give only those fields.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Deref;

use sereal::{Path, Value};
use sluice_store::ReadStore;

use crate::filter::Filter;
use crate::item::{ReadItem, ReadWarning};
use crate::range::RangeReader;
use crate::request::ReadOptions;

/// Sessions held at most by default (each holds its key and one epoch per step reached).
pub const DEFAULT_MAX_SESSIONS: usize = 1_000_000;
/// Most steps a funnel may have.
pub const MAX_STEPS: usize = 32;

/// A funnel that cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunnelError(pub String);

impl fmt::Display for FunnelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FunnelError {}

/// What a funnel counts: see the [module docs](self).
#[derive(Debug, Clone)]
pub struct FunnelSpec {
    /// The field whose value names a session (`--by session_id`).
    pub by: Path,
    /// The steps, in order (at least one: a one-step funnel counts sessions).
    pub steps: Vec<Filter>,
    /// Seconds after the first step time within which later steps count (`None`: any time).
    pub within: Option<u64>,
    /// Fields whose values split the funnel into groups (empty: one group).
    pub group_by: Vec<Path>,
    /// Most sessions held at once.
    pub max_sessions: usize,
}

impl FunnelSpec {
    /// Parses the user's spelling (CLI flags, query parameters, Python arguments); each error
    /// names the parameter (`by`, `step 2`, `within`, `group_by`, `max_sessions`).
    pub fn parse(
        by: &str,
        steps: &[String],
        within: Option<&str>,
        group_by: &[String],
        max_sessions: Option<usize>,
    ) -> Result<FunnelSpec, FunnelError> {
        let by = Path::parse(by.trim()).map_err(|e| FunnelError(format!("by {by:?}: {e}")))?;
        if steps.is_empty() {
            return Err(FunnelError(
                "at least one step is needed (step 'path == \"/search\"', in order)".into(),
            ));
        }
        if steps.len() > MAX_STEPS {
            return Err(FunnelError(format!(
                "{} steps: at most {MAX_STEPS}",
                steps.len()
            )));
        }
        let steps = steps
            .iter()
            .enumerate()
            .map(|(i, s)| Filter::parse(s).map_err(|e| FunnelError(format!("step {}: {e}", i + 1))))
            .collect::<Result<Vec<_>, _>>()?;
        let within = within
            .map(|w| {
                crate::reduce::parse_window(w)
                    .map_err(|e| FunnelError(e.to_string().replace("--window", "within")))
            })
            .transpose()?;
        let group_by = group_by
            .iter()
            .flat_map(|g| g.split(','))
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(|g| Path::parse(g).map_err(|e| FunnelError(format!("group_by {g:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let max_sessions = max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS);
        if max_sessions == 0 {
            return Err(FunnelError("max_sessions must be at least 1".into()));
        }
        Ok(FunnelSpec {
            by,
            steps,
            within,
            group_by,
            max_sessions,
        })
    }

    /// The paths a funnel reads of each event: `by`, `group_by` and every step's.
    pub fn needs(&self) -> Vec<Path> {
        let mut out = vec![self.by.clone()];
        out.extend(self.group_by.iter().cloned());
        for s in &self.steps {
            out.extend(s.paths().iter().cloned());
        }
        out
    }

    /// Tells a read to hand over sparse events of [`FunnelSpec::needs`] only (lazy blob reads,
    /// only those fields of the column files).
    pub fn narrow_read(&self, opts: &mut ReadOptions) {
        opts.needs = Some(self.needs());
        // Every event counts on its own (its order matters): no folding of equal events.
        opts.repeats = false;
    }
}

/// One session's progress: the epoch at which it reached each step so far.
#[derive(Debug, Clone)]
struct Session {
    times: Vec<i64>,
}

/// Counts a funnel over events pushed in read order; see the [module docs](self).
#[derive(Debug)]
pub struct Funnel {
    spec: FunnelSpec,
    /// (group key, session key) → progress.
    sessions: HashMap<(String, String), Session>,
    /// Group key → the group's values (JSON), for the report.
    groups: BTreeMap<String, Vec<serde_json::Value>>,
    events: u64,
    without_session: u64,
    overflow: u64,
}

impl Funnel {
    /// An empty funnel.
    pub fn new(spec: FunnelSpec) -> Funnel {
        Funnel {
            spec,
            sessions: HashMap::new(),
            groups: BTreeMap::new(),
            events: 0,
            without_session: 0,
            overflow: 0,
        }
    }

    /// Takes one event of second `epoch`; events come in read order (epoch ascending). An
    /// event earlier than the session's last step is ignored for it.
    pub fn push(&mut self, epoch: i64, event: &Value) {
        self.events += 1;
        let Some(session) = self.spec.by.eval(event).first().copied() else {
            self.without_session += 1;
            return;
        };
        let session = sereal::json::to_string(session);
        let group: Vec<serde_json::Value> = self
            .spec
            .group_by
            .iter()
            .map(|p| {
                p.eval(event)
                    .first()
                    .map(|v| sereal::json::to_json_value(v))
                    .unwrap_or(serde_json::Value::Null)
            })
            .collect();
        let group_key = serde_json::Value::Array(group.clone()).to_string();
        let key = (group_key, session);
        if let Some(s) = self.sessions.get_mut(&key) {
            let k = s.times.len();
            let (Some(step), Some(&first), Some(&last)) =
                (self.spec.steps.get(k), s.times.first(), s.times.last())
            else {
                return; // every step reached
            };
            let in_time = self.spec.within.is_none_or(|w| epoch - first <= w as i64);
            if epoch >= last && in_time && step.matches(event) {
                s.times.push(epoch);
            }
            return;
        }
        if !self.spec.steps[0].matches(event) {
            return;
        }
        if self.sessions.len() >= self.spec.max_sessions {
            self.overflow += 1;
            return;
        }
        if !self.groups.contains_key(&key.0) {
            self.groups.insert(key.0.clone(), group);
        }
        self.sessions.insert(key, Session { times: vec![epoch] });
    }

    /// Reads every item of `reader` into the funnel; the read's warnings (chunks that could
    /// not be read) are returned with the report.
    pub fn read<S, T>(mut self, reader: &mut RangeReader<S>) -> FunnelReport
    where
        S: Deref<Target = T>,
        T: ReadStore + ?Sized,
    {
        let mut warnings = Vec::new();
        for item in &mut *reader {
            match item {
                ReadItem::Event(e) => {
                    for _ in 0..e.repeat.max(1) {
                        self.push(e.key.epoch(), &e.value);
                    }
                }
                ReadItem::Warning(w) => warnings.push(w),
                ReadItem::Notice(_) => {}
            }
        }
        let mut report = self.finish();
        report.warnings = warnings;
        report.from_columns = reader.stats().from_columns;
        report
    }

    /// The report: per group, per step.
    pub fn finish(self) -> FunnelReport {
        let n = self.spec.steps.len();
        // Group key → per step, the times between it and the step before (step 1: empty).
        let mut per_group: BTreeMap<&str, (Vec<u64>, Vec<Vec<i64>>)> = BTreeMap::new();
        for ((g, _), s) in &self.sessions {
            let (reached, gaps) = per_group
                .entry(g.as_str())
                .or_insert_with(|| (vec![0; n], vec![Vec::new(); n]));
            for (k, t) in s.times.iter().enumerate() {
                reached[k] += 1;
                if k > 0 {
                    gaps[k].push(t - s.times[k - 1]);
                }
            }
        }
        let groups = per_group
            .into_iter()
            .map(|(g, (reached, gaps))| {
                let steps = (0..n)
                    .map(|k| {
                        let mut d = gaps[k].clone();
                        d.sort_unstable();
                        StepRow {
                            step: k + 1,
                            where_: self.spec.steps[k].text().to_owned(),
                            sessions: reached[k],
                            from_previous: if k == 0 {
                                None
                            } else {
                                ratio(reached[k], reached[k - 1])
                            },
                            from_first: ratio(reached[k], reached[0]),
                            median_secs: nearest_rank(&d, 0.5),
                            p90_secs: nearest_rank(&d, 0.9),
                        }
                    })
                    .collect();
                GroupReport {
                    group: self.groups.get(g).cloned().unwrap_or_default(),
                    steps,
                }
            })
            .collect();
        FunnelReport {
            by: self.spec.by.to_string(),
            group_by: self.spec.group_by.iter().map(|p| p.to_string()).collect(),
            within: self.spec.within,
            steps: self
                .spec
                .steps
                .iter()
                .map(|s| s.text().to_owned())
                .collect(),
            groups,
            events: self.events,
            without_session: self.without_session,
            sessions: self.sessions.len() as u64,
            max_sessions: self.spec.max_sessions,
            overflow: self.overflow,
            warnings: Vec::new(),
            from_columns: 0,
        }
    }
}

/// `a / b`, `None` when `b` is 0.
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// The nearest-rank `q` quantile of `sorted` (the smallest value with at least `q` of them at
/// or below it): an actual gap, in whole seconds like the epochs. `None` when empty.
pub fn nearest_rank(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// One step of one group.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// 1-based.
    pub step: usize,
    /// The step's expression.
    pub where_: String,
    /// Sessions that reached it.
    pub sessions: u64,
    /// `sessions` / the previous step's (`None` for step 1 or when that is 0).
    pub from_previous: Option<f64>,
    /// `sessions` / step 1's (`None` when that is 0).
    pub from_first: Option<f64>,
    /// Median seconds from the previous step (nearest rank; `None` for step 1 or none reached).
    pub median_secs: Option<i64>,
    /// 90th percentile seconds from the previous step (nearest rank).
    pub p90_secs: Option<i64>,
}

/// One group's funnel.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupReport {
    /// The group's values, in `group_by` order (`null` where missing; empty without group_by).
    pub group: Vec<serde_json::Value>,
    /// Its steps.
    pub steps: Vec<StepRow>,
}

/// A funnel's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct FunnelReport {
    /// The session field.
    pub by: String,
    /// The group fields.
    pub group_by: Vec<String>,
    /// The `within`, seconds.
    pub within: Option<u64>,
    /// The steps' expressions.
    pub steps: Vec<String>,
    /// Per group (ordered by the group values' JSON), only groups with a session.
    pub groups: Vec<GroupReport>,
    /// Events read.
    pub events: u64,
    /// Events without a value at `by` (not used).
    pub without_session: u64,
    /// Sessions held (every one that reached step 1 and was admitted).
    pub sessions: u64,
    /// The cap on sessions held.
    pub max_sessions: usize,
    /// Step-1 events of sessions refused because the cap was reached: non-zero means the
    /// counts are low.
    pub overflow: u64,
    /// Chunks of the range that could not be read (skipped).
    pub warnings: Vec<ReadWarning>,
    /// Chunks read from the column files (the history tier).
    pub from_columns: u64,
}

impl FunnelReport {
    /// The JSON answer (`GET /v1/funnel`, `sluice funnel --format json`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let groups: Vec<serde_json::Value> = self
            .groups
            .iter()
            .map(|g| {
                let group: serde_json::Map<String, serde_json::Value> = self
                    .group_by
                    .iter()
                    .cloned()
                    .zip(g.group.iter().cloned())
                    .collect();
                json!({
                    "group": group,
                    "steps": g.steps.iter().map(|s| json!({
                        "step": s.step,
                        "where": s.where_,
                        "sessions": s.sessions,
                        "from_previous": s.from_previous,
                        "from_first": s.from_first,
                        "median_secs": s.median_secs,
                        "p90_secs": s.p90_secs,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "by": self.by,
            "group_by": self.group_by,
            "within": self.within,
            "steps": self.steps,
            "groups": groups,
            "events": self.events,
            "without_session": self.without_session,
            "sessions": self.sessions,
            "max_sessions": self.max_sessions,
            "overflow": self.overflow,
            "warnings": self.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            "from_columns": self.from_columns,
        })
    }
}

/// The funnel's answer (its JSON, as [`FunnelReport::to_json`] writes it and `GET /v1/funnel`
/// sends it) as a table: a header, then one line per group and step.
pub fn render_table(report: &serde_json::Value) -> String {
    use std::fmt::Write;
    let group_by: Vec<&str> = report["group_by"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<String> = group_by.iter().map(|g| g.to_uppercase()).collect();
    header.extend(
        [
            "STEP",
            "WHERE",
            "SESSIONS",
            "FROM_PREV",
            "FROM_FIRST",
            "MEDIAN",
            "P90",
        ]
        .map(String::from),
    );
    rows.push(header);
    let pct = |v: &serde_json::Value| {
        v.as_f64()
            .map(|f| format!("{:.1}%", f * 100.0))
            .unwrap_or_else(|| "-".into())
    };
    let secs = |v: &serde_json::Value| v.as_i64().map(human_secs).unwrap_or_else(|| "-".into());
    for g in report["groups"].as_array().into_iter().flatten() {
        for s in g["steps"].as_array().into_iter().flatten() {
            let mut row: Vec<String> = group_by
                .iter()
                .map(|name| match &g["group"][*name] {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            row.push(s["step"].to_string());
            row.push(s["where"].as_str().unwrap_or_default().to_owned());
            row.push(s["sessions"].to_string());
            row.push(pct(&s["from_previous"]));
            row.push(pct(&s["from_first"]));
            row.push(secs(&s["median_secs"]));
            row.push(secs(&s["p90_secs"]));
            rows.push(row);
        }
    }
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// Seconds as people read them: `42s`, `3m05s`, `2h00m`.
fn human_secs(s: i64) -> String {
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> Value {
        sereal::json::from_json_slice(json.as_bytes()).expect("json")
    }

    fn spec(within: Option<&str>, max: Option<usize>) -> FunnelSpec {
        FunnelSpec::parse(
            "sid",
            &["p == 1".into(), "p == 2".into(), "p == 3".into()],
            within,
            &[],
            max,
        )
        .expect("spec")
    }

    #[test]
    fn order_repeats_and_within() {
        let mut f = Funnel::new(spec(Some("10"), None));
        // a: 2 before 1 (ignored), then 1, 1 again, 2, 3 (all within 10 s).
        for (t, e) in [
            (0, r#"{"sid":"a","p":2}"#),
            (1, r#"{"sid":"a","p":1}"#),
            (2, r#"{"sid":"a","p":1}"#),
            (4, r#"{"sid":"a","p":2}"#),
            (11, r#"{"sid":"a","p":3}"#),
            // b: step 2 too late (12 s after its first step).
            (1, r#"{"sid":"b","p":1}"#),
            (13, r#"{"sid":"b","p":2}"#),
            // no session field
            (5, r#"{"p":1}"#),
        ] {
            f.push(t, &ev(e));
        }
        let r = f.finish();
        let s = &r.groups[0].steps;
        assert_eq!(
            s.iter().map(|s| s.sessions).collect::<Vec<_>>(),
            vec![2, 1, 1]
        );
        assert_eq!(s[1].median_secs, Some(3));
        assert_eq!(s[2].median_secs, Some(7));
        assert_eq!(s[1].from_previous, Some(0.5));
        assert_eq!(r.without_session, 1);
    }

    #[test]
    fn the_cap_counts_what_it_refuses() {
        let mut f = Funnel::new(spec(None, Some(1)));
        f.push(0, &ev(r#"{"sid":"a","p":1}"#));
        f.push(0, &ev(r#"{"sid":"b","p":1}"#));
        f.push(1, &ev(r#"{"sid":"b","p":2}"#));
        let r = f.finish();
        assert_eq!((r.sessions, r.overflow), (1, 1));
    }

    #[test]
    fn a_funnel_reads_only_the_paths_it_names() {
        let spec = FunnelSpec::parse(
            "user.sid",
            &[
                "path == \"/a\"".into(),
                "status >= 500 and exists ms".into(),
            ],
            Some("30m"),
            &["dc,region".into()],
            None,
        )
        .expect("spec");
        let needs: Vec<String> = spec.needs().iter().map(|p| p.to_string()).collect();
        assert_eq!(needs, ["user.sid", "dc", "region", "path", "status", "ms"]);
        assert_eq!(spec.within, Some(1800));
        let mut opts = ReadOptions::default();
        spec.narrow_read(&mut opts);
        assert_eq!(opts.needs.map(|n| n.len()), Some(6));
        let bad = FunnelSpec::parse("sid", &["a == 1".into(), "a ==".into()], None, &[], None);
        assert!(bad.expect_err("bad step").0.starts_with("step 2:"));
        assert!(FunnelSpec::parse("sid", &[], None, &[], None).is_err());
        assert!(FunnelSpec::parse("sid", &["a == 1".into()], Some("-1"), &[], None).is_err());
    }

    #[test]
    fn nearest_rank_quantiles() {
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 0.5), Some(2));
        assert_eq!(nearest_rank(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9), Some(9));
        assert_eq!(nearest_rank(&[7], 0.9), Some(7));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }
}
