//! Alertmanager's API as Prometheus speaks it: `POST {base}/api/v2/alerts` with a JSON array of
//! `{labels, annotations, startsAt, endsAt, generatorURL}` (RFC 3339 times), and the set of firing
//! alerts posted again every `resend_firing`.
//!
//! Alertmanager resolves an alert by itself once its `endsAt` passes, so a firing alert is sent
//! with `endsAt = now + 4 × resend_firing` (Prometheus: 4 × max(evaluation interval, resend
//! delay)) and re-posted before that; a resolved one is sent with `endsAt` = when it resolved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::rfc3339;
use crate::notification::{Notification, Status};

/// Most alerts in one POST.
pub const MAX_BATCH: usize = 64;

/// One alert as Alertmanager's API takes it (`postableAlert`), at `now_ms`.
pub fn postable_alert(n: &Notification, now_ms: i64, resend_firing: Duration) -> Value {
    let ends_at = match n.status {
        Status::Firing => now_ms.saturating_add(4 * resend_firing.as_millis() as i64),
        Status::Resolved => n.ends_at_ms.unwrap_or(now_ms),
    };
    json!({
        "labels": n.labels,
        "annotations": n.annotations,
        "startsAt": rfc3339(n.starts_at_ms),
        "endsAt": rfc3339(ends_at),
        "generatorURL": n.generator_url,
    })
}

/// The body of one `POST /api/v2/alerts`: the array of [`postable_alert`]s.
pub fn body<'a>(
    alerts: impl IntoIterator<Item = &'a Notification>,
    now_ms: i64,
    resend_firing: Duration,
) -> String {
    let array: Vec<Value> = alerts
        .into_iter()
        .map(|n| postable_alert(n, now_ms, resend_firing))
        .collect();
    Value::Array(array).to_string()
}

/// The firing alerts by fingerprint, and when they are due to be posted again.
#[derive(Debug)]
pub(crate) struct FiringSet {
    alerts: BTreeMap<String, Arc<Notification>>,
    every: Duration,
    next: Instant,
}

impl FiringSet {
    /// Empty; the first resend `every` from now.
    pub fn new(every: Duration) -> FiringSet {
        FiringSet {
            alerts: BTreeMap::new(),
            every,
            next: Instant::now() + every,
        }
    }

    /// A transition taken for sending: firing joins the set, resolved leaves it.
    pub fn record(&mut self, n: &Arc<Notification>) {
        match n.status {
            Status::Firing => {
                self.alerts.insert(n.fingerprint.clone(), n.clone());
            }
            Status::Resolved => {
                self.alerts.remove(&n.fingerprint);
            }
        }
    }

    /// A transition Alertmanager refused leaves the set (if it is still this one).
    pub fn forget(&mut self, n: &Notification) {
        if self
            .alerts
            .get(&n.fingerprint)
            .is_some_and(|a| a.id == n.id)
        {
            self.alerts.remove(&n.fingerprint);
        }
    }

    /// The next resend is due at once.
    pub fn due_now(&mut self) {
        self.next = Instant::now();
    }

    /// How long until the next resend (zero: due).
    pub fn due_in(&self, now: Instant) -> Duration {
        self.next.saturating_duration_since(now)
    }

    /// The alerts to post again now (none: nothing is firing); the next resend is scheduled.
    pub fn take_due(&mut self, now: Instant) -> Vec<Arc<Notification>> {
        self.next = now + self.every;
        self.alerts.values().cloned().collect()
    }

    /// How many alerts are firing.
    pub fn len(&self) -> usize {
        self.alerts.len()
    }
}

/// How many notifications at the queue's head go in one POST: at most [`MAX_BATCH`], and never
/// two of one alert (its firing and its resolution go in order, in separate POSTs).
pub(crate) fn batch_len<'a>(head: impl Iterator<Item = &'a Notification>) -> usize {
    let mut seen: Vec<&str> = Vec::new();
    for n in head.take(MAX_BATCH) {
        if seen.contains(&n.fingerprint.as_str()) {
            break;
        }
        seen.push(&n.fingerprint);
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(fp: &str, status: Status) -> Notification {
        Notification {
            status,
            labels: [("alertname".to_owned(), "HighErrors".to_owned())].into(),
            annotations: [("summary".to_owned(), "5xx".to_owned())].into(),
            starts_at_ms: 1_764_000_000_000,
            ends_at_ms: (status == Status::Resolved).then_some(1_764_000_090_500),
            generator_url: "http://127.0.0.1:8080/v1/alerts/HighErrors".into(),
            fingerprint: fp.into(),
            id: format!("{fp}-{status:?}"),
        }
    }

    #[test]
    fn postable_alert_times() {
        let now = 1_764_000_060_000;
        let firing = postable_alert(&n("a", Status::Firing), now, Duration::from_secs(60));
        assert_eq!(
            firing.to_string(),
            r#"{"labels":{"alertname":"HighErrors"},"annotations":{"summary":"5xx"},"startsAt":"2025-11-24T16:00:00Z","endsAt":"2025-11-24T16:05:00Z","generatorURL":"http://127.0.0.1:8080/v1/alerts/HighErrors"}"#
        );
        let resolved = postable_alert(&n("a", Status::Resolved), now, Duration::from_secs(60));
        assert_eq!(resolved["endsAt"], "2025-11-24T16:01:30.5Z");
    }

    #[test]
    fn batches_never_hold_one_alert_twice() {
        let q = [
            n("a", Status::Firing),
            n("b", Status::Firing),
            n("a", Status::Resolved),
        ];
        assert_eq!(batch_len(q.iter()), 2);
        assert_eq!(batch_len(q[2..].iter()), 1);
        assert_eq!(batch_len([].iter()), 0);
    }

    #[test]
    fn firing_set_follows_transitions() {
        let mut set = FiringSet::new(Duration::from_secs(60));
        set.record(&Arc::new(n("a", Status::Firing)));
        set.record(&Arc::new(n("b", Status::Firing)));
        set.record(&Arc::new(n("a", Status::Resolved)));
        let now = Instant::now();
        let due = set.take_due(now);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].fingerprint, "b");
        assert_eq!(set.due_in(now), Duration::from_secs(60));
    }
}
