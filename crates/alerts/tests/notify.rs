//! The notifier against real receivers on loopback: a real Alertmanager (scripts/alertmanager.sh)
//! routing to a real webhook receiver, the receiver directly, a receiver that is down then up,
//! full queues and old notifications, configurations that cannot work.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_alerts::notify::{NotifierConfig, ReceiverKind};
use sluice_alerts::{Notification, Notifier, OnDelivered, Status};
use sluice_test_support::alertmanager::alertmanager;
use sluice_test_support::wait_for;
use sluice_test_support::webhook::{Mode, WebhookReceiver};

/// Bound on waits for a delivery (a wait, not a timed assertion: the test fails only if it
/// never arrives).
const WAIT: Duration = Duration::from_secs(60);

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn firing(name: &str, path: &str, starts_at_ms: i64) -> Notification {
    Notification {
        status: Status::Firing,
        labels: map(&[("alertname", name), ("path", path), ("team", "web")]),
        annotations: map(&[
            ("summary", "5xx ratio above 5 %"),
            ("value", "0.12"),
            (
                "sluice_cat",
                "sluice cat --type web --where 'status >= 500'",
            ),
        ]),
        starts_at_ms,
        ends_at_ms: None,
        generator_url: format!("http://127.0.0.1:8080/v1/alerts/{name}"),
        fingerprint: format!("fp-{name}-{path}"),
        id: format!("fp-{name}-{path}/firing/{starts_at_ms}"),
    }
}

fn resolved(n: &Notification, ends_at_ms: i64) -> Notification {
    Notification {
        status: Status::Resolved,
        ends_at_ms: Some(ends_at_ms),
        id: format!("{}/resolved/{ends_at_ms}", n.fingerprint),
        ..n.clone()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `on_delivered` that records ids, and what it recorded.
fn recorder() -> (OnDelivered, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let cb: OnDelivered = Arc::new(move |n: &Notification| s.lock().unwrap().push(n.id.clone()));
    (cb, seen)
}

fn fast(cfg: NotifierConfig) -> NotifierConfig {
    NotifierConfig {
        timeout: Duration::from_secs(2),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_millis(400),
        ..cfg
    }
}

#[test]
fn alertmanager_routes_firing_then_resolved_to_its_webhook() {
    let receiver = WebhookReceiver::start();
    let Some(am) = alertmanager(
        "alertmanager_routes_firing_then_resolved_to_its_webhook",
        &receiver.url("/am"),
    ) else {
        return;
    };
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            alertmanagers: vec![am.url.clone()],
            resend_firing: Duration::from_secs(1),
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    let start = now_ms() - 60_000;
    let n = firing("HighErrors", "/checkout", start);
    assert!(notifier.send(n.clone()));

    // Alertmanager routes it to the receiver, labels and annotations intact.
    let got = receiver.wait_accepted(1, WAIT);
    let msg = got[0].json();
    assert_eq!(got[0].path, "/am");
    assert_eq!(msg["version"], "4");
    assert_eq!(msg["status"], "firing", "{msg}");
    let alert = &msg["alerts"][0];
    assert_eq!(alert["status"], "firing");
    assert_eq!(alert["labels"], json!(n.labels));
    assert_eq!(alert["annotations"], json!(n.annotations));
    assert_eq!(alert["generatorURL"], n.generator_url);
    assert_eq!(alert["startsAt"], rfc3339(start));
    assert_eq!(*delivered.lock().unwrap(), vec![n.id.clone()]);

    // Resent while firing: Alertmanager keeps it, its endsAt pushed forward each time.
    let ends_at = |am_alerts: &Value| am_alerts[0]["endsAt"].as_str().unwrap_or("").to_owned();
    let first_ends_at = ends_at(&am.alerts());
    wait_for(WAIT, "two resends acknowledged", || {
        notifier.stats().receivers[0].resends >= 2
    });
    let held = am.alerts();
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["status"]["state"], "active");
    assert!(ends_at(&held) > first_ends_at, "{held}");

    // Resolved: routed as resolved, with the resolve time.
    let end = now_ms() - 1_000;
    let r = resolved(&n, end);
    assert!(notifier.send(r.clone()));
    let got = receiver.wait_accepted(2, WAIT);
    let msg = got[1].json();
    assert_eq!(msg["status"], "resolved", "{msg}");
    assert_eq!(msg["alerts"][0]["status"], "resolved");
    assert_eq!(msg["alerts"][0]["labels"], json!(n.labels));
    assert_eq!(msg["alerts"][0]["endsAt"], rfc3339(end));
    wait_for(WAIT, "on_delivered for the resolution", || {
        delivered.lock().unwrap().len() == 2
    });
    assert_eq!(*delivered.lock().unwrap(), vec![n.id.clone(), r.id.clone()]);
    let stats = notifier.stats();
    let s = &stats.receivers[0];
    assert_eq!(s.kind, ReceiverKind::Alertmanager);
    assert_eq!((s.sent, s.firing, s.queued), (2, 0, 0));
    assert!(s.last_latency.is_some());
    notifier.shutdown(Duration::from_secs(5));
    // Nothing else arrived: one firing, one resolved (repeat_interval is long).
    assert_eq!(receiver.accepted().len(), 2, "{}", am.log());
}

fn rfc3339(ms: i64) -> String {
    jiff_like(ms)
}

/// RFC 3339 as Go prints it, written out here so the test does not share the code it checks.
fn jiff_like(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let frac = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if frac != 0 {
        s.push_str(format!(".{frac:03}").trim_end_matches('0'));
    }
    s.push('Z');
    s
}

#[test]
fn webhook_gets_the_version_4_format() {
    let receiver = WebhookReceiver::start();
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            webhooks: vec![receiver.url("/hook?src=sluice")],
            bearer_token: Some("s3cret-token".into()),
            external_url: "http://127.0.0.1:8080".into(),
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    let n = firing("HighErrors", "/a \"quoted\" path", 1_764_000_000_250);
    let r = resolved(&n, 1_764_000_090_000);
    assert!(notifier.send(n.clone()));
    assert!(notifier.send(r.clone()));
    let got = receiver.wait_accepted(2, WAIT);
    assert_eq!(got.len(), 2);
    for g in &got {
        assert_eq!(g.path, "/hook?src=sluice");
        assert_eq!(g.header("authorization"), Some("Bearer s3cret-token"));
        assert_eq!(g.header("content-type"), Some("application/json"));
    }
    let group_key = r#"{}:{alertname="HighErrors", path="/a \"quoted\" path", team="web"}"#;
    let expected = |status: &str, ends_at: &str| {
        json!({
            "receiver": "sluice",
            "status": status,
            "alerts": [{
                "status": status,
                "labels": {"alertname": "HighErrors", "path": "/a \"quoted\" path", "team": "web"},
                "annotations": {
                    "sluice_cat": "sluice cat --type web --where 'status >= 500'",
                    "summary": "5xx ratio above 5 %",
                    "value": "0.12",
                },
                "startsAt": "2025-11-24T16:00:00.25Z",
                "endsAt": ends_at,
                "generatorURL": "http://127.0.0.1:8080/v1/alerts/HighErrors",
                "fingerprint": n.fingerprint,
            }],
            "groupLabels": {"alertname": "HighErrors", "path": "/a \"quoted\" path", "team": "web"},
            "commonLabels": {"alertname": "HighErrors", "path": "/a \"quoted\" path", "team": "web"},
            "commonAnnotations": {
                "sluice_cat": "sluice cat --type web --where 'status >= 500'",
                "summary": "5xx ratio above 5 %",
                "value": "0.12",
            },
            "externalURL": "http://127.0.0.1:8080",
            "version": "4",
            "groupKey": group_key,
            "truncatedAlerts": 0,
        })
    };
    // Every field, nothing else (serde_json's Value compares maps by content).
    assert_eq!(got[0].json(), expected("firing", "0001-01-01T00:00:00Z"));
    assert_eq!(got[1].json(), expected("resolved", "2025-11-24T16:01:30Z"));
    wait_for(WAIT, "on_delivered twice", || {
        delivered.lock().unwrap().len() == 2
    });
    assert_eq!(*delivered.lock().unwrap(), vec![n.id, r.id]);
    let s = &notifier.stats().receivers[0];
    assert_eq!(s.kind, ReceiverKind::Webhook);
    assert_eq!(s.url, receiver.url("/hook?src=sluice"));
    assert_eq!((s.sent, s.failed_attempts, s.queued), (2, 0, 0));
}

#[test]
fn receiver_down_then_up_gets_each_once_in_order() {
    let receiver = WebhookReceiver::start();
    receiver.set_mode(Mode::Down);
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            webhooks: vec![receiver.url("/hook")],
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    let start = now_ms();
    let sent: Vec<Notification> = (0..3)
        .map(|i| firing("Down", &format!("/p{i}"), start + i))
        .collect();
    for n in &sent {
        assert!(notifier.send(n.clone()));
    }
    // Port closed: connections refused, retried.
    wait_for(WAIT, "3 refused attempts", || {
        notifier.stats().receivers[0].failed_attempts >= 3
    });
    assert!(delivered.lock().unwrap().is_empty());
    let refused = notifier.stats().receivers[0].clone();
    assert_eq!(refused.queued, 3);
    assert!(refused.last_error.is_some());
    // Up, but answering 503: still retried, and the answer is the last error.
    receiver.set_mode(Mode::Status(503));
    wait_for(WAIT, "two 503 answers", || receiver.received().len() >= 2);
    wait_for(WAIT, "a 503 as the last error", || {
        let s = notifier.stats().receivers[0].clone();
        s.last_error.is_some_and(|e| e.contains("HTTP 503"))
    });
    assert!(delivered.lock().unwrap().is_empty());
    receiver.set_mode(Mode::Up);
    let got = receiver.wait_accepted(3, WAIT);
    wait_for(WAIT, "on_delivered for all three", || {
        delivered.lock().unwrap().len() == 3
    });
    assert!(notifier.flush(WAIT));
    // Exactly once each, in order; every failed attempt was for the first (head of line).
    let paths: Vec<Value> = receiver
        .accepted()
        .iter()
        .map(|g| g.json()["alerts"][0]["labels"]["path"].clone())
        .collect();
    assert_eq!(paths, [json!("/p0"), json!("/p1"), json!("/p2")]);
    assert_eq!(got.len(), 3);
    let ids: Vec<String> = sent.iter().map(|n| n.id.clone()).collect();
    assert_eq!(*delivered.lock().unwrap(), ids);
    let rejected_503 = receiver
        .received()
        .iter()
        .filter(|r| r.status == 503)
        .count() as u64;
    let s = &notifier.stats().receivers[0];
    assert_eq!((s.sent, s.queued), (3, 0));
    assert!(s.failed_attempts >= refused.failed_attempts + rejected_503);
    assert_eq!(s.dropped, Default::default());
    notifier.shutdown(Duration::from_secs(5));
}

#[test]
fn full_queue_and_old_notifications_are_dropped_and_counted() {
    let receiver = WebhookReceiver::start();
    receiver.set_mode(Mode::Down);
    let up = WebhookReceiver::start();
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            webhooks: vec![receiver.url("/down"), up.url("/up")],
            queue_capacity: 2,
            max_age: Duration::from_secs(2),
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    let start = now_ms();
    let n: Vec<Notification> = (0..3)
        .map(|i| firing("Full", &format!("/p{i}"), start + i))
        .collect();
    assert!(notifier.send(n[0].clone()));
    assert!(notifier.send(n[1].clone()));
    wait_for(WAIT, "the up receiver's queue to empty", || {
        let s = notifier.stats();
        let up = s.receiver(&up.url("/up")).unwrap();
        up.sent == 2 && up.queued == 0
    });
    // The down receiver holds two: the third is refused there (never blocking), taken by the
    // other receiver.
    assert!(!notifier.send(n[2].clone()));
    let stats = notifier.stats();
    let down = stats.receiver(&receiver.url("/down")).unwrap();
    assert_eq!(down.dropped.queue_full, 1);
    assert!(down
        .last_error
        .as_deref()
        .unwrap_or("")
        .contains("queue full"));
    assert_eq!(up.wait_accepted(3, WAIT).len(), 3);
    // max_age: the two the down receiver holds are dropped after 2 s, counted, and count as
    // done there: on_delivered for those two, never for the third (a queue dropped it).
    wait_for(WAIT, "two max_age drops", || {
        let s = notifier.stats();
        s.receiver(&receiver.url("/down")).unwrap().dropped.max_age == 2
    });
    wait_for(WAIT, "on_delivered for the two", || {
        delivered.lock().unwrap().len() == 2
    });
    assert_eq!(
        *delivered.lock().unwrap(),
        vec![n[0].id.clone(), n[1].id.clone()]
    );
    let stats = notifier.stats();
    let down = stats.receiver(&receiver.url("/down")).unwrap();
    assert_eq!((down.sent, down.queued), (0, 0));
    assert!(down.last_error.as_deref().unwrap_or("").contains("max_age"));
    assert!(down.failed_attempts >= 1);
    let up_stats = stats.receiver(&up.url("/up")).unwrap();
    assert_eq!((up_stats.sent, up_stats.dropped), (3, Default::default()));
    notifier.shutdown(Duration::from_secs(1));
    assert!(receiver.received().is_empty());
}

#[test]
fn rejected_answer_is_not_retried() {
    let receiver = WebhookReceiver::start();
    receiver.set_mode(Mode::Status(400));
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            webhooks: vec![receiver.url("/hook")],
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    let n = firing("Bad", "/x", now_ms());
    assert!(notifier.send(n.clone()));
    assert!(notifier.flush(WAIT));
    let s = &notifier.stats().receivers[0];
    assert_eq!((s.sent, s.failed_attempts, s.dropped.rejected), (0, 0, 1));
    assert!(
        s.last_error
            .as_deref()
            .unwrap_or("")
            .contains("HTTP 400: not now (test)"),
        "{:?}",
        s.last_error
    );
    assert_eq!(receiver.received().len(), 1);
    // Done for that receiver: recorded as sent, never retried.
    assert_eq!(*delivered.lock().unwrap(), vec![n.id]);
}

#[test]
fn alertmanager_refusing_one_alert_of_a_batch_takes_the_others() {
    let receiver = WebhookReceiver::start();
    let Some(am) = alertmanager(
        "alertmanager_refusing_one_alert_of_a_batch_takes_the_others",
        &receiver.url("/am"),
    ) else {
        return;
    };
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            alertmanagers: vec![am.url.clone()],
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    let start = now_ms() - 10_000;
    let good1 = firing("Batch", "/a", start);
    // An empty label name: Alertmanager answers 400 for it (and takes the rest of its POST).
    let mut bad = firing("Batch", "/bad", start);
    bad.labels.insert(String::new(), "x".into());
    let good2 = firing("Batch", "/b", start);
    // Sent back to back: the second and third wait while the first is posted, then go in one
    // POST, which Alertmanager refuses; they are then sent one at a time.
    for n in [&good1, &bad, &good2] {
        assert!(notifier.send(n.clone()));
    }
    assert!(notifier.flush(WAIT));
    let s = notifier.stats().receivers[0].clone();
    assert_eq!((s.sent, s.dropped.rejected, s.firing), (2, 1, 2), "{s:?}");
    assert!(
        s.last_error.as_deref().unwrap_or("").contains("HTTP 400"),
        "{s:?}"
    );
    // Done everywhere: recorded as sent, the refused one too (retrying it cannot help).
    assert_eq!(delivered.lock().unwrap().len(), 3);
    let got = receiver.wait_accepted(2, WAIT);
    let mut paths: Vec<String> = got
        .iter()
        .map(|g| {
            g.json()["alerts"][0]["labels"]["path"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    paths.sort();
    assert_eq!(paths, ["/a", "/b"]);
}

#[test]
fn alerts_firing_before_a_restart_are_kept_alive_at_alertmanager() {
    let via_am = WebhookReceiver::start();
    let Some(am) = alertmanager(
        "alerts_firing_before_a_restart_are_kept_alive_at_alertmanager",
        &via_am.url("/am"),
    ) else {
        return;
    };
    let direct = WebhookReceiver::start();
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            alertmanagers: vec![am.url.clone()],
            webhooks: vec![direct.url("/direct")],
            resend_firing: Duration::from_secs(1),
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    // As a restarted server would: the alerts its catalog says are firing (a resolved one
    // among them is ignored).
    let n = firing("Restored", "/r", now_ms() - 3_600_000);
    let other = firing("Restored", "/gone", now_ms() - 3_600_000);
    notifier.keep_firing(vec![n.clone(), resolved(&other, now_ms())]);
    wait_for(WAIT, "the restored alert at Alertmanager", || {
        am.alerts().as_array().is_some_and(|a| !a.is_empty())
    });
    let held = am.alerts();
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["labels"], json!(n.labels));
    wait_for(WAIT, "two resends", || {
        notifier.stats().receivers[0].resends >= 2
    });
    assert_eq!(notifier.stats().receivers[0].firing, 1);
    // Its resolution: sent everywhere, and it leaves the resend set.
    let r = resolved(&n, now_ms());
    assert!(notifier.send(r.clone()));
    assert!(notifier.flush(WAIT));
    let stats = notifier.stats();
    assert_eq!((stats.receivers[0].firing, stats.receivers[0].sent), (0, 1));
    let got = direct.wait_accepted(1, WAIT);
    assert_eq!(got.len(), 1, "the webhook was not told of the firing again");
    assert_eq!(got[0].json()["status"], "resolved");
    assert_eq!(*delivered.lock().unwrap(), vec![r.id]);
    wait_for(WAIT, "the resolution routed by Alertmanager", || {
        via_am
            .accepted()
            .iter()
            .any(|g| g.json()["status"] == "resolved")
    });
}

#[test]
fn basic_auth_from_the_url_and_undelivered_counted_at_shutdown() {
    let up = WebhookReceiver::start();
    let down = WebhookReceiver::start();
    down.set_mode(Mode::Down);
    let with_user = up.url("/h").replace("http://", "http://sluice:hunter2@");
    let (cb, delivered) = recorder();
    let notifier = Notifier::start(
        fast(NotifierConfig {
            webhooks: vec![with_user, down.url("/down")],
            ..NotifierConfig::default()
        }),
        cb,
    )
    .unwrap();
    // Shown without the password.
    let shown: Vec<String> = notifier
        .stats()
        .receivers
        .iter()
        .map(|r| r.url.clone())
        .collect();
    assert_eq!(shown, [up.url("/h"), down.url("/down")]);
    let n = firing("Auth", "/x", now_ms());
    assert!(notifier.send(n.clone()));
    assert!(notifier.send(firing("Auth", "/y", now_ms())));
    let got = up.wait_accepted(2, WAIT);
    assert_eq!(
        got[0].header("authorization"),
        Some("Basic c2x1aWNlOmh1bnRlcjI=")
    );
    // The other receiver never came up: both are counted at shutdown, never `on_delivered`.
    let stats = notifier.shutdown(Duration::from_millis(200));
    let d = stats.receiver(&down.url("/down")).unwrap();
    assert_eq!((d.sent, d.queued, d.dropped.shutdown), (0, 0, 2), "{d:?}");
    assert!(d.failed_attempts >= 1);
    assert_eq!(stats.receiver(&up.url("/h")).unwrap().sent, 2);
    assert!(delivered.lock().unwrap().is_empty());
}

#[test]
fn bad_configuration_is_refused_clearly() {
    let (cb, _) = recorder();
    let refuse = |cfg: NotifierConfig, says: &str| {
        let err = match Notifier::start(cfg, cb.clone()) {
            Ok(_) => panic!("accepted; expected an error saying {says:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{err:?} does not say {says:?}");
    };
    let hook = |url: &str| NotifierConfig {
        webhooks: vec![url.into()],
        ..NotifierConfig::default()
    };
    refuse(NotifierConfig::default(), "no receivers");
    refuse(hook("ftp://127.0.0.1/x"), "not http:// or https://");
    refuse(hook("127.0.0.1:9093"), "webhook URL");
    refuse(hook("http://127.0.0.1:9/h#token=abc"), "bearer_token");
    refuse(
        NotifierConfig {
            bearer_token: Some("t".into()),
            ..hook("https://u:p@hooks.example/h")
        },
        "one Authorization",
    );
    refuse(
        NotifierConfig {
            bearer_token: Some("t".into()),
            ..hook("http://hooks.example/h")
        },
        "use https://",
    );
    refuse(
        NotifierConfig {
            bearer_token: Some("two words".into()),
            ..hook("https://hooks.example/h")
        },
        "bearer_token",
    );
    refuse(
        NotifierConfig {
            alertmanagers: vec!["http://127.0.0.1:9093?x=1".into()],
            ..NotifierConfig::default()
        },
        "no ?query",
    );
    refuse(
        NotifierConfig {
            webhooks: vec!["http://127.0.0.1:9/h".into(), "http://127.0.0.1:9/h".into()],
            ..NotifierConfig::default()
        },
        "given twice",
    );
    let ok = hook("http://127.0.0.1:9/h");
    refuse(
        NotifierConfig {
            timeout: Duration::ZERO,
            ..ok.clone()
        },
        "timeout is 0",
    );
    refuse(
        NotifierConfig {
            queue_capacity: 0,
            ..ok.clone()
        },
        "queue_capacity is 0",
    );
    refuse(
        NotifierConfig {
            backoff_max: Duration::from_millis(10),
            ..ok.clone()
        },
        "backoff_max",
    );
    refuse(
        NotifierConfig {
            max_age: Duration::ZERO,
            ..ok.clone()
        },
        "max_age is 0",
    );
    // A password is never repeated in an error.
    let err = NotifierConfig {
        bearer_token: Some("t".into()),
        ..hook("https://user:hunter2@hooks.example/h")
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(!err.contains("hunter2"), "{err}");
    // Credentials over http on loopback, https anywhere: fine.
    assert!(NotifierConfig {
        bearer_token: Some("t".into()),
        alertmanagers: vec!["http://127.0.0.1:9093".into()],
        webhooks: vec!["https://u:p@hooks.example/h".into()],
        ..NotifierConfig::default()
    }
    .validate()
    .is_err()); // user:pass with a bearer token: refused
    assert!(NotifierConfig {
        bearer_token: Some("t".into()),
        alertmanagers: vec!["http://127.0.0.1:9093".into()],
        webhooks: vec!["https://hooks.example/h".into()],
        ..NotifierConfig::default()
    }
    .validate()
    .is_ok());
}
