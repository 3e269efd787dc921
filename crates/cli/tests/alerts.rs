//! Alerts end to end with real processes: `sluice serve` evaluating a rule over a rollup while
//! events arrive live over HTTP, notifying a real Alertmanager (built from the Go module proxy,
//! routing to a webhook receiver) and a webhook directly, with sample events; resolution; a
//! SIGKILL restart in the middle of pending and of firing; a receiver that is down and then up
//! (delivered once, across a restart too); and `sluice alert test` giving the transitions the
//! live engine notified.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_success, free_port, now, sluice, spawn_serve, wait_healthy, Proc};
use serde_json::{json, Value};
use sluice_test_support::alertmanager::alertmanager;
use sluice_test_support::http::{addr_of, request};
use sluice_test_support::webhook::{Mode, Received, WebhookReceiver};

const PATHS: [&str; 3] = ["/a", "/b", "/c"];

/// `sluice serve` on `port` over `data` (HTTP only, grace 1 s) with `extra` flags.
fn serve(data: &Path, port: u16, extra: &[&str]) -> (Proc, String) {
    let base = format!("http://127.0.0.1:{port}");
    let http = format!("127.0.0.1:{port}");
    let mut args = vec![
        "--data",
        data.to_str().expect("path"),
        "--http",
        &http,
        "--tcp",
        "off",
        "--udp",
        "off",
        "--grace",
        "1",
        "--columns",
        "off",
    ];
    args.extend_from_slice(extra);
    let proc = spawn_serve(&args);
    wait_healthy(
        &ureq::agent(),
        &base,
        Instant::now() + Duration::from_secs(30),
        Duration::from_millis(100),
    );
    (proc, base)
}

/// What the traffic generator sends: per path, whether its requests fail now.
struct Traffic {
    failing: std::sync::Mutex<BTreeSet<&'static str>>,
    stop: AtomicBool,
    seq: std::sync::atomic::AtomicU64,
}

impl Traffic {
    fn new() -> Arc<Traffic> {
        Arc::new(Traffic {
            failing: std::sync::Mutex::new(BTreeSet::new()),
            stop: AtomicBool::new(false),
            seq: Default::default(),
        })
    }

    fn set_failing(&self, paths: &[&'static str]) {
        *self.failing.lock().unwrap() = paths.iter().copied().collect();
    }

    /// Posts 20 events per path every 250 ms, dated now (a failing path: half of them 500),
    /// to whatever server answers on `base`; a refused post (the server down) is retried.
    fn run(self: &Arc<Self>, base: String) -> std::thread::JoinHandle<()> {
        let t = self.clone();
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(5))
                .build();
            while !t.stop.load(Ordering::Relaxed) {
                let failing = t.failing.lock().unwrap().clone();
                let epoch = now();
                let mut body = String::new();
                for path in PATHS {
                    for k in 0..20 {
                        let id = t.seq.fetch_add(1, Ordering::Relaxed);
                        let status = if failing.contains(path) && k % 2 == 0 {
                            500
                        } else {
                            200
                        };
                        body.push_str(
                            &json!({"epoch": epoch, "type": "WEB", "path": path,
                                     "status": status, "id": id, "ms": k})
                            .to_string(),
                        );
                        body.push('\n');
                    }
                }
                let _ = agent.post(&format!("{base}/v1/events")).send_string(&body);
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    }
}

fn add_rollup_and_rule(base: &str, for_: &str, extra: &[&str]) {
    assert_success(&sluice(&[
        "rollup",
        "add",
        "web",
        "--type",
        "WEB",
        "--group-by",
        "path",
        "--agg",
        "count,count_if:status >= 500,p95:ms",
        "--step",
        "1s",
        "--server",
        base,
    ]));
    let mut args = vec![
        "alert",
        "add",
        "web-5xx",
        "--rollup",
        "web",
        "--by",
        "path",
        "--window",
        "3s",
        "--for",
        for_,
        "--min-count",
        "30",
        "--expr",
        "sum(count where status >= 500) / sum(count) > 0.2",
        "--labels",
        "team=web",
        "--annotation",
        "summary=5xx above 20 %",
        "--samples",
        "3",
        "--sample-fields",
        "path,status,id",
        "--server",
        base,
    ];
    args.extend_from_slice(extra);
    assert_success(&sluice(&args));
}

/// The alerts of the webhook messages received (Alertmanager's and ours: the v4 format),
/// as (path, status, message alert JSON).
fn alerts_of(got: &[Received]) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for r in got {
        let m = r.json();
        assert_eq!(m["version"], "4", "{m}");
        for a in m["alerts"].as_array().expect("alerts") {
            out.push((
                a["labels"]["path"].as_str().unwrap_or("?").to_owned(),
                a["status"].as_str().unwrap_or("?").to_owned(),
                a.clone(),
            ));
        }
    }
    out
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn rule_view(base: &str) -> Value {
    let r = request(addr_of(base), "GET", "/v1/alerts/web-5xx", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn metric(base: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = sluice_test_support::metrics::fetch_url(base);
    sluice_test_support::metrics::try_metric(&text, name, labels)
        .unwrap_or_else(|| panic!("metric {name} {labels:?} missing from /metrics"))
}

#[test]
fn a_5xx_burst_fires_per_path_with_evidence_to_alertmanager_and_a_webhook_then_resolves() {
    let dir = sluice_test_support::temp_dir("alerts-burst");
    let data = dir.join("data");
    let via_am = WebhookReceiver::start();
    let direct = WebhookReceiver::start();
    let Some(am) = alertmanager("alerts burst", &via_am.url("/am")) else {
        return;
    };
    let (mut server, base) = serve(
        &data,
        free_port(),
        &[
            "--alertmanager",
            &am.url,
            "--alert-webhook",
            &direct.url("/hook"),
        ],
    );
    add_rollup_and_rule(&base, "2s", &[]);
    let traffic = Traffic::new();
    let sender = traffic.run(base.clone());
    let t0 = now();
    std::thread::sleep(Duration::from_secs(4));
    traffic.set_failing(&["/a", "/b"]);
    // Fires for /a and /b (not /c), each once, directly and through Alertmanager.
    let firing = direct.wait_accepted(2, Duration::from_secs(30));
    let fired = alerts_of(&firing);
    let paths: BTreeSet<&str> = fired.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(paths, BTreeSet::from(["/a", "/b"]), "{fired:?}");
    for (path, status, a) in &fired {
        assert_eq!(status, "firing");
        assert_eq!(a["labels"]["alertname"], "web-5xx");
        assert_eq!(a["labels"]["team"], "web");
        assert_eq!(a["labels"]["rollup"], "web");
        assert_eq!(a["annotations"]["summary"], "5xx above 20 %");
        let value: f64 = a["annotations"]["value"].as_str().unwrap().parse().unwrap();
        assert!(value > 0.2 && value <= 0.5, "value {value}");
        let samples: Value =
            serde_json::from_str(a["annotations"]["sample_events"].as_str().unwrap()).unwrap();
        let samples = samples.as_array().unwrap();
        assert!(!samples.is_empty() && samples.len() <= 3, "{samples:?}");
        for s in samples {
            assert_eq!(s["path"], path.as_str(), "a sample of another group: {s}");
            assert_eq!(s["status"], 500, "a sample that is not evidence: {s}");
            assert!(s.get("ms").is_none(), "sample fields not applied: {s}");
        }
        let count: u64 = a["annotations"]["events_count"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(count >= samples.len() as u64, "count {count}");
        let cat = a["annotations"]["sluice_cat"].as_str().unwrap();
        assert!(
            cat.starts_with("sluice cat --from") && cat.contains("status >= 500"),
            "{cat}"
        );
        assert!(a["annotations"]["events_url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{base}/v1/events?from=")));
        assert!(a["generatorURL"]
            .as_str()
            .unwrap()
            .ends_with("/v1/alerts/web-5xx"));
        // The events URL reads the events it counted.
        let url = a["annotations"]["events_url"].as_str().unwrap();
        let path_q = &url[url.find("/v1/").unwrap()..];
        let r = request(addr_of(&base), "GET", path_q, b"");
        assert_eq!(r.status, 200, "{url}: {}", r.text());
        let read = r.text().lines().filter(|l| !l.trim().is_empty()).count() as u64;
        assert!(read >= count, "{url}: {read} events, {count} counted");
    }
    let through_am = via_am.wait_accepted(1, Duration::from_secs(30));
    let am_paths = wait_for(
        "both alerts through Alertmanager",
        Duration::from_secs(30),
        || {
            let got = alerts_of(&via_am.accepted());
            let p: BTreeSet<String> = got
                .iter()
                .filter(|(_, s, _)| s == "firing")
                .map(|(p, _, _)| p.clone())
                .collect();
            (p.len() == 2).then_some(p)
        },
    );
    assert_eq!(am_paths, BTreeSet::from(["/a".to_owned(), "/b".to_owned()]));
    assert!(!through_am.is_empty());
    let view = rule_view(&base);
    assert_eq!(view["state"], "firing", "{view}");
    assert!(metric(&base, "sluice_alerts_firing", &[]) >= 2.0);
    // Back to normal: resolved, once each.
    traffic.set_failing(&[]);
    let all = direct.wait_accepted(4, Duration::from_secs(30));
    let resolved: Vec<_> = alerts_of(&all[2..]).into_iter().collect();
    assert!(
        resolved.iter().all(|(_, s, _)| s == "resolved"),
        "{resolved:?}"
    );
    assert!(resolved
        .iter()
        .all(|(_, _, a)| a["endsAt"] != "0001-01-01T00:00:00Z"));
    std::thread::sleep(Duration::from_secs(4));
    traffic.stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    let all = direct.accepted();
    assert_eq!(all.len(), 4, "each transition once: {:?}", alerts_of(&all));
    assert_eq!(rule_view(&base)["state"], "inactive");
    assert_eq!(
        metric(
            &base,
            "sluice_alert_transitions_total",
            &[("status", "firing")]
        ),
        2.0
    );
    assert!(metric(&base, "sluice_alert_evaluations_total", &[]) > 10.0);
    let delay_count = metric(&base, "sluice_alert_notify_delay_seconds_count", &[]);
    assert_eq!(delay_count, 4.0);

    // The backtest over the same stored data gives the transitions the live engine sent.
    let t1 = now();
    let test = sluice(&[
        "alert",
        "test",
        "web-5xx",
        "--from",
        &t0.to_string(),
        "--to",
        &t1.to_string(),
        "--format",
        "json",
        "--server",
        &base,
    ]);
    assert_success(&test);
    let answer: Value = serde_json::from_slice(&test.stdout).unwrap();
    let backtested: BTreeSet<(String, String, i64)> = answer["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["labels"]["path"].as_str().unwrap().to_owned(),
                t["status"].as_str().unwrap().to_owned(),
                t["t"].as_i64().unwrap(),
            )
        })
        .collect();
    let live: BTreeSet<(String, String, i64)> = alerts_of(&all)
        .into_iter()
        .map(|(path, status, a)| {
            let at = if status == "firing" {
                &a["startsAt"]
            } else {
                &a["endsAt"]
            };
            (path, status, rfc3339_secs(at.as_str().unwrap()))
        })
        .collect();
    assert_eq!(backtested, live, "backtest vs live");
    let table = sluice(&[
        "alert",
        "test",
        "web-5xx",
        "--from",
        &t0.to_string(),
        "--to",
        &t1.to_string(),
        "--server",
        &base,
    ]);
    assert_success(&table);
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains("firing")).count(),
        2,
        "{text}"
    );
    server.terminate(Duration::from_secs(20));
    // Offline, on the data directory, the same answer.
    let offline = sluice(&[
        "alert",
        "test",
        "web-5xx",
        "--from",
        &t0.to_string(),
        "--to",
        &t1.to_string(),
        "--format",
        "json",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_success(&offline);
    let offline: Value = serde_json::from_slice(&offline.stdout).unwrap();
    assert_eq!(offline["transitions"], answer["transitions"]);
}

/// Unix seconds of an RFC 3339 UTC time (`2026-11-29T05:00:00Z`, fractions ignored).
fn rfc3339_secs(s: &str) -> i64 {
    sluice_reader::time::parse_time(s, 0).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn restarts_in_pending_and_in_firing_neither_lose_nor_repeat_an_alert() {
    let dir = sluice_test_support::temp_dir("alerts-restart");
    let data = dir.join("data");
    let hook = WebhookReceiver::start();
    let port = free_port();
    let flags = ["--alert-webhook".to_owned(), hook.url("/hook")];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (mut server, base) = serve(&data, port, &flags);
    add_rollup_and_rule(&base, "8s", &[]);
    let traffic = Traffic::new();
    let sender = traffic.run(base.clone());
    std::thread::sleep(Duration::from_secs(3));
    traffic.set_failing(&["/a"]);
    wait_for("pending", Duration::from_secs(20), || {
        (rule_view(&base)["state"] == "pending").then_some(())
    });
    let since = rule_view(&base)["alerts"][0]["active_since"]
        .as_i64()
        .unwrap();
    // SIGKILL while pending, and back at once.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let (s2, _) = serve(&data, port, &flags);
    server = s2;
    let fired = hook.wait_accepted(1, Duration::from_secs(40));
    let a = &alerts_of(&fired)[0];
    assert_eq!((a.0.as_str(), a.1.as_str()), ("/a", "firing"));
    // Fired at since + for, as if there had been no restart.
    let starts = rfc3339_secs(a.2["startsAt"].as_str().unwrap());
    assert_eq!(starts, since + 8, "pending since {since}: {}", a.2);
    // SIGKILL while firing, once the server has recorded the delivery (a crash in the few
    // milliseconds between a receiver's answer and that record sends it again, same id):
    // not sent again after the restart.
    wait_for("the delivery recorded", Duration::from_secs(10), || {
        let v = rule_view(&base);
        (v["state"] == "firing" && v["undelivered"] == 0).then_some(())
    });
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let (s3, _) = serve(&data, port, &flags);
    server = s3;
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        hook.accepted().len(),
        1,
        "re-fired: {:?}",
        alerts_of(&hook.accepted())
    );
    assert_eq!(rule_view(&base)["state"], "firing");
    traffic.set_failing(&[]);
    let all = hook.wait_accepted(2, Duration::from_secs(30));
    assert_eq!(alerts_of(&all[1..])[0].1, "resolved");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(hook.accepted().len(), 2);
    traffic.stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    server.terminate(Duration::from_secs(20));
}

#[test]
fn a_receiver_down_then_up_gets_each_notification_once_across_a_restart() {
    let dir = sluice_test_support::temp_dir("alerts-down");
    let data = dir.join("data");
    let hook = WebhookReceiver::start();
    hook.set_mode(Mode::Down);
    let port = free_port();
    let flags = ["--alert-webhook".to_owned(), hook.url("/hook")];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (mut server, base) = serve(&data, port, &flags);
    add_rollup_and_rule(&base, "0s", &[]);
    let traffic = Traffic::new();
    let sender = traffic.run(base.clone());
    std::thread::sleep(Duration::from_secs(3));
    traffic.set_failing(&["/b"]);
    wait_for("firing", Duration::from_secs(20), || {
        (rule_view(&base)["state"] == "firing").then_some(())
    });
    // Not delivered (the receiver is down): retried, counted, kept in the outbox across a
    // SIGKILL restart.
    wait_for("a failed attempt", Duration::from_secs(20), || {
        let text = sluice_test_support::metrics::fetch_url(&base);
        sluice_test_support::metrics::try_metric(
            &text,
            "sluice_alert_receiver_failed_attempts_total",
            &[("receiver", &hook.url("/hook"))],
        )
        .filter(|v| *v >= 1.0)
    });
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let (s2, _) = serve(&data, port, &flags);
    server = s2;
    // The restarted server retries from its outbox: wait for a retry to meet the 503 (the
    // backoff after a restart decides when, not this test), then let it through.
    hook.set_mode(Mode::Status(503));
    wait_for("the 503 was tried", Duration::from_secs(60), || {
        hook.received()
            .iter()
            .any(|r| r.status == 503)
            .then_some(())
    });
    hook.set_mode(Mode::Up);
    let got = hook.wait_accepted(1, Duration::from_secs(60));
    let a = alerts_of(&got);
    assert_eq!((a[0].0.as_str(), a[0].1.as_str()), ("/b", "firing"));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        hook.accepted().len(),
        1,
        "delivered once: {:?}",
        alerts_of(&hook.accepted())
    );
    traffic.stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    server.terminate(Duration::from_secs(20));
}

#[test]
fn rules_are_checked_and_managed_from_the_cli() {
    let dir = sluice_test_support::temp_dir("alerts-cli");
    let data = dir.join("data");
    let (mut server, base) = serve(&data, free_port(), &[]);
    add_rollup_and_rule(&base, "1m", &[]);
    let bad = sluice(&[
        "alert",
        "add",
        "x",
        "--rollup",
        "web",
        "--expr",
        "sum(p99:ms) > 1",
        "--server",
        &base,
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("no aggregate \\\"p99:ms\\\"") || err.contains("no aggregate"),
        "{err}"
    );
    let bad = sluice(&[
        "alert",
        "add",
        "y",
        "--rollup",
        "web",
        "--expr",
        "sum(count)",
        "--server",
        &base,
    ]);
    assert!(
        !bad.status.success(),
        "a threshold rule without a comparison"
    );
    let bad = sluice(&[
        "alert",
        "add",
        "z",
        "--rollup",
        "web",
        "--by",
        "status",
        "--expr",
        "sum(count) > 1",
        "--server",
        &base,
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not grouped by"));
    let dup = sluice(&[
        "alert",
        "add",
        "web-5xx",
        "--rollup",
        "web",
        "--expr",
        "sum(count) > 1",
        "--server",
        &base,
    ]);
    assert!(String::from_utf8_lossy(&dup.stderr).contains("exists"));
    let anomaly = sluice(&[
        "alert",
        "add",
        "web-volume",
        "--rollup",
        "web",
        "--expr",
        "rate(count)",
        "--anomaly",
        "zscore",
        "--window",
        "1m",
        "--baseline",
        "1h",
        "--threshold",
        "4",
        "--server",
        &base,
    ]);
    assert_success(&anomaly);
    let ls = sluice(&["alert", "ls", "--server", &base]);
    assert_success(&ls);
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(text.contains("web-5xx\tinactive\tthreshold\tweb"), "{text}");
    assert!(text.contains("web-volume\tinactive\tzscore\tweb"), "{text}");
    assert_success(&sluice(&[
        "alert", "silence", "web-5xx", "--for", "2h", "--server", &base,
    ]));
    let until = rule_view(&base)["silenced_until"].as_i64().unwrap();
    assert!(until > now() + 7000, "{until}");
    assert_success(&sluice(&["alert", "rm", "web-volume", "--server", &base]));
    let r = request(addr_of(&base), "GET", "/v1/alerts/web-volume", b"");
    assert_eq!(r.status, 404);
    let body = r#"{"name":"q","rollup":"web","expr":"sum(count) > 1","bogus":1}"#;
    let r = request(addr_of(&base), "POST", "/v1/alerts", body.as_bytes());
    assert_eq!(r.status, 401, "a change needs an admin token: {}", r.text());
    let secret = std::fs::read_to_string(data.join("admin.secret")).expect("the local secret");
    let refused = ureq::post(&format!("{base}/v1/alerts"))
        .set("Authorization", &format!("Bearer {}", secret.trim()))
        .send_string(body);
    match refused {
        Err(ureq::Error::Status(400, r)) => {
            let text = r.into_string().unwrap_or_default();
            assert!(text.contains("bogus"), "{text}");
        }
        other => panic!("an unknown field accepted: {other:?}"),
    }
    let help = sluice(&["help", "alerts"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("The expression language"));
    server.terminate(Duration::from_secs(20));
    // The rules survive the restart, in the catalog, and move with `sluice store copy`.
    let ls = sluice(&["alert", "ls", "--data", data.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("web-5xx"));
    let copy = dir.join("copy");
    assert_success(&sluice(&[
        "store",
        "copy",
        "--from",
        &format!("embedded:{}", data.display()),
        "--to",
        &format!("embedded:{}", copy.display()),
        "--from-time",
        &(now() - 3600).to_string(),
        "--to-time",
        &now().to_string(),
    ]));
    let ls = sluice(&["alert", "ls", "--data", copy.to_str().unwrap()]);
    assert_success(&ls);
    assert!(
        String::from_utf8_lossy(&ls.stdout).contains("web-5xx\tinactive\tthreshold"),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
}

/// Events of `path` for each second of `[from, to)`, `per_second(s)` of them, posted.
fn post_history(base: &str, path: &str, from: i64, to: i64, per_second: impl Fn(i64) -> u64) {
    let mut body = String::new();
    let mut n = 0;
    for s in from..to {
        for k in 0..per_second(s) {
            body.push_str(
                &json!({"epoch": s, "type": "WEB", "path": path, "status": 200, "ms": k})
                    .to_string(),
            );
            body.push('\n');
            n += 1;
            if n % 5_000 == 0 {
                let r = request(addr_of(base), "POST", "/v1/events", body.as_bytes());
                assert_eq!(r.status, 200, "{}", r.text());
                body.clear();
            }
        }
    }
    if !body.is_empty() {
        let r = request(addr_of(base), "POST", "/v1/events", body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// Anomaly rules from the TOML configuration, backtested over stored history: a z-score rule
/// fires on a spike in the rate (and resolves after it), not on a change in spread at the same
/// mean; a stddev rule fires on that change in spread.
#[test]
fn anomaly_rules_from_toml_backtest_a_spike_and_a_change_in_spread() {
    let dir = sluice_test_support::temp_dir("alerts-anomaly");
    let data = dir.join("data");
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        r#"
[[rollups]]
name = "web"
type = "WEB"
group_by = ["path"]
agg = ["count"]
step = "1s"

[[alerts]]
name = "web-rate-spike"
rollup = "web"
by = ["path"]
expr = "rate(count)"
anomaly = "zscore"
window = "1m"
baseline = "20m"
point = "10s"
threshold = 4
direction = "up"

[[alerts]]
name = "web-rate-spread"
rollup = "web"
by = ["path"]
expr = "rate(count)"
anomaly = "stddev"
window = "2m"
baseline = "20m"
point = "10s"
threshold = 3
direction = "up"
"#,
    )
    .unwrap();
    let cfg = config.to_str().unwrap().to_owned();
    let (mut server, base) = serve(&data, free_port(), &["--config", &cfg]);
    // 40 minutes of history: ~20 events/s with a little noise; at minute 22 for 3 minutes the
    // same mean with a wide spread (5 or 35 per second, 10 s at a time); a spike to 60/s for 2
    // minutes at minute 32.
    let t0 = now() - 45 * 60;
    let t0 = t0 - t0.rem_euclid(60);
    let (spread, spread_end) = (t0 + 22 * 60, t0 + 25 * 60);
    let (spike, spike_end) = (t0 + 32 * 60, t0 + 34 * 60);
    let per_second = |s: i64| -> u64 {
        if (spike..spike_end).contains(&s) {
            60
        } else if (spread..spread_end).contains(&s) {
            if (s / 10) % 2 == 0 {
                5
            } else {
                35
            }
        } else {
            18 + (s.rem_euclid(7) as u64 % 5)
        }
    };
    post_history(&base, "/a", t0, t0 + 40 * 60, per_second);
    let total: u64 = (t0..t0 + 40 * 60).map(per_second).sum();
    // Every second stored (the rollup reads them all, its states or the blobs).
    wait_for("the history stored", Duration::from_secs(120), || {
        let out = sluice(&[
            "rollup",
            "query",
            "web",
            "--from",
            &t0.to_string(),
            "--to",
            &(t0 + 2400).to_string(),
            "--step",
            "2400",
            "--format",
            "json",
            "--server",
            &base,
        ]);
        let stored: u64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|row| row["count"].as_u64())
            .sum();
        (stored == total).then_some(())
    });
    let test = |rule: &str| -> Vec<(String, i64)> {
        let out = sluice(&[
            "alert",
            "test",
            rule,
            "--from",
            &(t0 + 21 * 60).to_string(),
            "--to",
            &(t0 + 40 * 60).to_string(),
            "--format",
            "json",
            "--server",
            &base,
        ]);
        assert_success(&out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                assert_eq!(t["labels"]["path"], "/a");
                (
                    t["status"].as_str().unwrap().to_owned(),
                    t["t"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let spikes = test("web-rate-spike");
    assert_eq!(
        spikes.len(),
        2,
        "fired once (the spike, not the spread at the same mean) and resolved: {spikes:?}"
    );
    assert_eq!(spikes[0].0, "firing");
    assert!(
        // Within the recent window (1 m) of the spike's start.
        spikes[0].1 > spike && spikes[0].1 <= spike + 60,
        "fired at {} for a spike at {spike}",
        spikes[0].1
    );
    assert_eq!(spikes[1].0, "resolved");
    // A z-score adapts: once the spike is part of the baseline it is no longer unusual.
    assert!(
        spikes[1].1 > spikes[0].1 && spikes[1].1 <= spike_end + 60,
        "resolved at {} (spike {spike}..{spike_end})",
        spikes[1].1
    );
    let spreads = test("web-rate-spread");
    let fired: Vec<i64> = spreads
        .iter()
        .filter(|(s, _)| s == "firing")
        .map(|(_, t)| *t)
        .collect();
    assert!(
        fired
            .first()
            .is_some_and(|t| (spread..spread_end).contains(t)),
        "the change in spread at {spread}..{spread_end} not seen first: {spreads:?}"
    );
    // The rules are listed as loaded from the configuration.
    let ls = sluice(&["alert", "ls", "--server", &base]);
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(
        text.contains("web-rate-spike\t") && text.contains("\tzscore\t"),
        "{text}"
    );
    assert!(
        text.contains("web-rate-spread\t") && text.contains("\tstddev\t"),
        "{text}"
    );
    server.terminate(Duration::from_secs(20));
}
