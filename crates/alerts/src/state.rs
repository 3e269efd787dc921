//! The states of a rule's alerts, one per group: inactive → pending → firing → resolved, with
//! `for` and `keep_firing_for` ([`RuleState::apply`]), and what is kept across a restart.
//!
//! | condition at T | was inactive | was pending | was firing |
//! |---|---|---|---|
//! | holds | pending since T (firing at once when `for` is 0) | firing once `T − since ≥ for` | stays firing |
//! | does not hold (or no data) | — | inactive | resolved once `T − last held ≥ keep_firing_for` |
//!
//! A transition to firing or resolved is a [`Transition`]; the engine turns each into a
//! notification and keeps it in the rule's `outbox` until every receiver took it, so a
//! restart re-sends what was not delivered and never what was.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::notification::{Notification, Status};

/// Pending or firing (an inactive group has no [`Instance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The condition holds, not yet for `for`.
    Pending,
    /// Firing.
    Firing,
}

/// One group's alert while it is pending or firing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// The group's labels (the rule's `by` fields and their values).
    pub labels: BTreeMap<String, String>,
    /// Pending or firing.
    pub phase: Phase,
    /// The first evaluation at which the condition held (Unix seconds).
    pub active_since: i64,
    /// When it started firing.
    #[serde(default)]
    pub firing_since: Option<i64>,
    /// The last evaluation at which the condition held.
    pub last_held: i64,
    /// The last value.
    pub value: Option<f64>,
}

/// A change that is notified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// The evaluation time (the end of the window, Unix seconds).
    pub t: i64,
    /// The group's labels.
    pub labels: BTreeMap<String, String>,
    /// Firing or resolved.
    pub status: Status,
    /// The value at `t` (for resolved, the last value seen).
    pub value: Option<f64>,
    /// When it started firing.
    pub firing_since: i64,
}

/// Everything about a rule's alerts that survives a restart (stored in the catalog).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleState {
    /// The last evaluation time done (the end of its window); 0: never.
    pub last_eval: i64,
    /// Pending and firing groups, by fingerprint.
    pub instances: BTreeMap<String, Instance>,
    /// Notifications not yet taken by every receiver.
    #[serde(default)]
    pub outbox: Vec<Notification>,
    /// Set when an alert became pending or inactive (the engine saves, then clears it).
    #[serde(skip)]
    pub changed: bool,
}

/// One group's result at an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The group's labels.
    pub labels: BTreeMap<String, String>,
    /// The value (`None`: no value).
    pub value: Option<f64>,
    /// Whether the condition holds (the floor met, the comparison or anomaly true).
    pub holds: bool,
    /// Events of the window.
    pub events: u64,
}

impl RuleState {
    /// Moves every group's state to evaluation time `t` given its outcomes; the firing and
    /// resolved transitions it made.
    pub fn apply(
        &mut self,
        rule: &str,
        t: i64,
        outcomes: &[Outcome],
        for_secs: u64,
        keep_firing_for_secs: u64,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        let mut held = std::collections::HashSet::new();
        for o in outcomes.iter().filter(|o| o.holds) {
            let fp = fingerprint(rule, &o.labels);
            held.insert(fp.clone());
            let changed = &mut self.changed;
            let inst = self.instances.entry(fp).or_insert_with(|| {
                *changed = true;
                Instance {
                    labels: o.labels.clone(),
                    phase: Phase::Pending,
                    active_since: t,
                    firing_since: None,
                    last_held: t,
                    value: o.value,
                }
            });
            inst.last_held = t;
            inst.value = o.value;
            if inst.phase == Phase::Pending && t - inst.active_since >= for_secs as i64 {
                inst.phase = Phase::Firing;
                inst.firing_since = Some(t);
                out.push(Transition {
                    t,
                    labels: inst.labels.clone(),
                    status: Status::Firing,
                    value: o.value,
                    firing_since: t,
                });
            }
        }
        // The last values of firing alerts whose condition stopped holding (computed only when
        // there are such alerts: a fingerprint is a hash, and most evaluations have none).
        let values: BTreeMap<String, Option<f64>> =
            if self.instances.keys().any(|fp| !held.contains(fp)) {
                outcomes
                    .iter()
                    .filter(|o| !o.holds)
                    .map(|o| (fingerprint(rule, &o.labels), o.value))
                    .collect()
            } else {
                BTreeMap::new()
            };
        self.instances.retain(|fp, inst| {
            if held.contains(fp) {
                return true;
            }
            match inst.phase {
                Phase::Pending => {
                    self.changed = true;
                    false
                }
                Phase::Firing => {
                    if let Some(v) = values.get(fp) {
                        inst.value = *v;
                    }
                    if t - inst.last_held >= keep_firing_for_secs as i64 {
                        out.push(Transition {
                            t,
                            labels: inst.labels.clone(),
                            status: Status::Resolved,
                            value: inst.value,
                            firing_since: inst.firing_since.unwrap_or(inst.active_since),
                        });
                        false
                    } else {
                        true
                    }
                }
            }
        });
        self.last_eval = t;
        out
    }

    /// The state of one group's alert as text: `inactive`, `pending` or `firing`.
    pub fn phase_of(&self, fp: &str) -> &'static str {
        match self.instances.get(fp).map(|i| i.phase) {
            None => "inactive",
            Some(Phase::Pending) => "pending",
            Some(Phase::Firing) => "firing",
        }
    }

    /// The rule's overall state: firing if any group fires, else pending if any is, else
    /// inactive.
    pub fn overall(&self) -> &'static str {
        let phases = self.instances.values().map(|i| i.phase);
        if phases.clone().any(|p| p == Phase::Firing) {
            "firing"
        } else if self.instances.is_empty() {
            "inactive"
        } else {
            "pending"
        }
    }
}

/// The identity of a rule's alert for one group: a hex hash of the rule name and the labels,
/// stable across restarts and versions.
pub fn fingerprint(rule: &str, labels: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    h.update(rule.as_bytes());
    for (k, v) in labels {
        h.update([0]);
        h.update(k.as_bytes());
        h.update([0xff]);
        h.update(v.as_bytes());
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(path: &str, holds: bool) -> Outcome {
        Outcome {
            labels: [("path".to_string(), path.to_string())].into(),
            value: Some(if holds { 1.0 } else { 0.0 }),
            holds,
            events: 10,
        }
    }

    #[test]
    fn pending_then_firing_then_resolved() {
        let mut s = RuleState::default();
        assert!(s.apply("r", 100, &[o("/a", true)], 60, 0).is_empty());
        assert_eq!(s.overall(), "pending");
        assert!(s.apply("r", 159, &[o("/a", true)], 60, 0).is_empty());
        let t = s.apply("r", 160, &[o("/a", true)], 60, 0);
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].status, t[0].firing_since), (Status::Firing, 160));
        assert!(
            s.apply("r", 161, &[o("/a", true)], 60, 0).is_empty(),
            "fires once"
        );
        let t = s.apply("r", 162, &[o("/a", false)], 60, 0);
        assert_eq!(t[0].status, Status::Resolved);
        assert_eq!(s.overall(), "inactive");
    }

    #[test]
    fn pending_interrupted_starts_over_and_keep_firing_for_holds() {
        let mut s = RuleState::default();
        s.apply("r", 100, &[o("/a", true)], 10, 5);
        s.apply("r", 101, &[], 10, 5);
        assert_eq!(s.overall(), "inactive", "no data ends pending");
        s.apply("r", 102, &[o("/a", true)], 0, 5);
        assert_eq!(s.overall(), "firing", "for 0 fires at once");
        assert!(s.apply("r", 106, &[o("/a", false)], 0, 5).is_empty());
        let t = s.apply("r", 107, &[o("/a", false)], 0, 5);
        assert_eq!(t[0].status, Status::Resolved);
    }

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        let a: BTreeMap<_, _> = [("path".to_string(), "/a".to_string())].into();
        let b: BTreeMap<_, _> = [("path".to_string(), "/b".to_string())].into();
        assert_eq!(fingerprint("r", &a), fingerprint("r", &a));
        assert_ne!(fingerprint("r", &a), fingerprint("r", &b));
        assert_ne!(fingerprint("r", &a), fingerprint("s", &a));
        assert_eq!(fingerprint("r", &a).len(), 16);
    }
}
