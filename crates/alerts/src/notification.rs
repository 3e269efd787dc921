//! [`Notification`]: one alert transition (firing, or resolved) as it is sent — the one shape
//! both receivers (Alertmanager's API, Alertmanager-format webhooks) are made from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Firing or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The condition holds (past its `for`).
    Firing,
    /// It held, and no longer does (past its `keep_firing_for`).
    Resolved,
}

/// One alert of one rule and group at one transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// Firing or resolved.
    pub status: Status,
    /// `alertname` (the rule), the group's labels, the rule's own labels.
    pub labels: BTreeMap<String, String>,
    /// The rule's annotations and the evidence (`value`, `sample_events`, `events_count`,
    /// `sluice_cat`, `events_url`).
    pub annotations: BTreeMap<String, String>,
    /// When the alert started firing (Unix milliseconds).
    pub starts_at_ms: i64,
    /// When it resolved (Unix milliseconds); `None` while firing.
    pub ends_at_ms: Option<i64>,
    /// A link back to the rule (`GET /v1/alerts/NAME` on the server that evaluated it).
    pub generator_url: String,
    /// Identity of the alert (rule and group labels), stable across restarts: a hex hash.
    pub fingerprint: String,
    /// Identity of this transition (fingerprint, status, start): a receiver sees each once.
    pub id: String,
}
