//! The alert engine's and the alert receivers' series (`sluice_alert_*`), rendered from their
//! own counters at scrape time.

/// The alert engine's counters and each alert receiver's (`sluice_alert_*`).
pub(crate) fn render_alerts(o: &mut String, m: &super::Metrics) {
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let Some((engine, notifier)) = m.alerts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    else {
        return;
    };
    let one = |o: &mut String, name: &str, help: &str, kind: &str, v: f64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    };
    let e = &engine;
    one(
        o,
        "sluice_alert_evaluations_total",
        "Alert rule evaluations (one rule at one step).",
        "counter",
        e.evaluations.load(Relaxed) as f64,
    );
    one(
        o,
        "sluice_alert_evaluation_seconds_total",
        "Time the alert engine spent evaluating (reads, merges, expressions, evidence).",
        "counter",
        e.eval_micros.load(Relaxed) as f64 / 1e6,
    );
    one(
        o,
        "sluice_alerts_firing",
        "Alerts firing now (one per rule and group).",
        "gauge",
        e.firing.load(Relaxed) as f64,
    );
    one(
        o,
        "sluice_alerts_pending",
        "Alerts pending now (the condition holds, not yet for its `for`).",
        "gauge",
        e.pending.load(Relaxed) as f64,
    );
    one(
        o,
        "sluice_alert_errors_total",
        "Alert engine errors (reads, catalog writes, rules that do not load), each logged.",
        "counter",
        e.errors.load(Relaxed) as f64,
    );
    let _ = writeln!(
        o,
        "# HELP sluice_alert_transitions_total Alerts that started firing or resolved.\n# TYPE sluice_alert_transitions_total counter"
    );
    let _ = writeln!(
        o,
        "sluice_alert_transitions_total{{status=\"firing\"}} {}",
        e.fired.load(Relaxed)
    );
    let _ = writeln!(
        o,
        "sluice_alert_transitions_total{{status=\"resolved\"}} {}",
        e.resolved.load(Relaxed)
    );
    let _ = writeln!(
        o,
        "# HELP sluice_alert_notifications_total Notifications made, by outcome at the engine.\n# TYPE sluice_alert_notifications_total counter"
    );
    for (outcome, v) in [
        ("queued", e.notifications.load(Relaxed)),
        ("sink_full", e.sink_refused.load(Relaxed)),
        ("silenced", e.silenced.load(Relaxed)),
        ("outbox_full", e.outbox_dropped.load(Relaxed)),
    ] {
        let _ = writeln!(
            o,
            "sluice_alert_notifications_total{{outcome=\"{outcome}\"}} {v}"
        );
    }
    let count = e.notify_delay_count.load(Relaxed);
    let _ = writeln!(
        o,
        "# HELP sluice_alert_notify_delay_seconds From the end of the evaluated window (its last event) to the notification being queued.\n# TYPE sluice_alert_notify_delay_seconds summary\nsluice_alert_notify_delay_seconds_sum {}\nsluice_alert_notify_delay_seconds_count {count}",
        e.notify_delay_ms_sum.load(Relaxed) as f64 / 1e3
    );
    one(
        o,
        "sluice_alert_notify_delay_seconds_max",
        "The largest such delay since start.",
        "gauge",
        e.notify_delay_ms_max.load(Relaxed) as f64 / 1e3,
    );
    let Some(notifier) = notifier else { return };
    let stats = notifier.stats();
    let label = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    type Field = fn(&sluice_alerts::notify::ReceiverStats) -> u64;
    let series: [(&str, &str, &str, Field); 4] = [
        (
            "sluice_alert_receiver_sent_total",
            "Notifications a receiver acknowledged.",
            "counter",
            |r| r.sent,
        ),
        (
            "sluice_alert_receiver_failed_attempts_total",
            "POSTs to a receiver that failed and are retried.",
            "counter",
            |r| r.failed_attempts,
        ),
        (
            "sluice_alert_receiver_queue",
            "Notifications waiting for a receiver.",
            "gauge",
            |r| r.queued,
        ),
        (
            "sluice_alert_receiver_firing",
            "Alerts an Alertmanager is sent again and again while they fire.",
            "gauge",
            |r| r.firing,
        ),
    ];
    for (name, help, kind, get) in series {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for r in &stats.receivers {
            let _ = writeln!(o, "{name}{{receiver=\"{}\"}} {}", label(&r.url), get(r));
        }
    }
    let _ = writeln!(
        o,
        "# HELP sluice_alert_receiver_dropped_total Notifications a receiver never got, by reason.\n# TYPE sluice_alert_receiver_dropped_total counter"
    );
    for r in &stats.receivers {
        let d = r.dropped;
        for (reason, v) in [
            ("queue_full", d.queue_full),
            ("max_age", d.max_age),
            ("rejected", d.rejected),
            ("shutdown", d.shutdown),
        ] {
            let _ = writeln!(
                o,
                "sluice_alert_receiver_dropped_total{{receiver=\"{}\",reason=\"{reason}\"}} {v}",
                label(&r.url)
            );
        }
    }
}
