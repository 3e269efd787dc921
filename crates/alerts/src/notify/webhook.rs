//! The Alertmanager webhook format, version 4 — what Alertmanager itself POSTs to a
//! `webhook_config` (`notify/webhook/webhook.go` `Message`, embedding `template/template.go`
//! `Data`; field names checked against Alertmanager v0.35.0). Sluice sends one message per
//! notification, a group of one alert (as `group_by: ['...']` would): the group labels are the
//! alert's labels, the group key `{}:{k="v", …}` as Alertmanager prints a label set.
//!
//! Alertmanager v0.35 also sends `notification_reason` and `routeLabels` (its routing tree's);
//! Sluice has no routing tree and leaves them out, as older Alertmanagers did.

use serde_json::{json, Value};

use super::rfc3339;
use crate::notification::{Notification, Status};

/// The `receiver` field: Sluice's name for the receiving end.
pub const RECEIVER: &str = "sluice";

/// `endsAt` of a firing alert: Go's zero time, as Alertmanager sends it.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The version 4 message of one notification.
pub fn message(n: &Notification, external_url: &str) -> Value {
    let status = match n.status {
        Status::Firing => "firing",
        Status::Resolved => "resolved",
    };
    let ends_at = match (n.status, n.ends_at_ms) {
        (Status::Resolved, Some(ms)) => rfc3339(ms),
        // A resolved alert without its time: Alertmanager never sends the zero time for one.
        (Status::Resolved, None) => rfc3339(super::now_ms()),
        (Status::Firing, _) => ZERO_TIME.to_owned(),
    };
    json!({
        "receiver": RECEIVER,
        "status": status,
        "alerts": [{
            "status": status,
            "labels": n.labels,
            "annotations": n.annotations,
            "startsAt": rfc3339(n.starts_at_ms),
            "endsAt": ends_at,
            "generatorURL": n.generator_url,
            "fingerprint": n.fingerprint,
        }],
        "groupLabels": n.labels,
        "commonLabels": n.labels,
        "commonAnnotations": n.annotations,
        "externalURL": external_url,
        "version": "4",
        "groupKey": group_key(n),
        "truncatedAlerts": 0,
    })
}

/// `{}:{a="1", b="2"}`: the root route's key and the group's labels, values quoted as Go's
/// `strconv.Quote` does for printable text.
pub fn group_key(n: &Notification) -> String {
    let labels: Vec<String> = n
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    format!("{{}}:{{{}}}", labels.join(", "))
}

fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_key_as_alertmanager_prints_it() {
        let n = Notification {
            status: Status::Firing,
            labels: [
                ("path".to_owned(), "/a \"b\"\\".to_owned()),
                ("alertname".to_owned(), "X".to_owned()),
            ]
            .into(),
            annotations: Default::default(),
            starts_at_ms: 0,
            ends_at_ms: None,
            generator_url: String::new(),
            fingerprint: "f".into(),
            id: "i".into(),
        };
        assert_eq!(group_key(&n), r#"{}:{alertname="X", path="/a \"b\"\\"}"#);
        assert_eq!(message(&n, "")["alerts"][0]["endsAt"], ZERO_TIME);
    }
}
