//! Rollups end to end on a real server: `sluice rollup add`, events sent over HTTP (two types,
//! late events for seconds already flushed), the states computed at write time by the runner,
//! then `sluice rollup query` (through the server, and offline on the data directory) gives the
//! rows `sluice cat --group-by … --agg … --window` gives over the same events — counts, sums,
//! maxima, conditional counts and distinct counts equal, quantiles equal (merged sketches) — at a
//! step that is a multiple of the rollup's; a step that is not is refused.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{assert_success, now, serve_store_http_only_with, sluice};
use serde_json::{json, Value};
use sluice_test_support::http::{addr_of, request};
use sluice_test_support::metrics::{fetch_url, try_metric};

const AGGS: &str = "count,sum:bytes,max:bytes,p95:ms,distinct:user,count_if:status >= 500";

fn events(first_epoch: i64, seconds: i64, seed: u64) -> String {
    let mut body = String::new();
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for s in 0..seconds {
        for k in 0..40 {
            let r = next();
            let type_ = if k % 5 == 0 { "LB" } else { "WEB" };
            let ev = json!({
                "epoch": first_epoch + s, "type": type_, "subtype": if k % 2 == 0 { "a" } else { "b" },
                "path": format!("/p{}", r % 4), "bytes": (r >> 8) % 5000,
                "ms": ((r >> 20) % 900) as f64 / 3.0, "user": format!("u{}", (r >> 30) % 70),
                "status": if (r >> 40) % 9 == 0 { 503 } else { 200 },
            });
            body.push_str(&ev.to_string());
            body.push('\n');
        }
    }
    body
}

fn post(base: &str, body: &str) {
    let r = request(addr_of(base), "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

/// NDJSON rows of a command's stdout, keyed by (window start, path).
fn rows(out: &std::process::Output, start_key: &str) -> BTreeMap<(i64, String), Value> {
    assert_success(out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("row JSON");
            let start = v[start_key].as_i64().expect("start");
            let path = v["path"].as_str().expect("path").to_owned();
            ((start, path), v)
        })
        .collect()
}

fn same(a: &Value, b: &Value, what: &str) {
    let (x, y) = (a.as_f64(), b.as_f64());
    match (x, y) {
        (Some(x), Some(y)) => assert!(
            (x - y).abs() <= 1e-9 * x.abs().max(1.0),
            "{what}: {a} vs {b}"
        ),
        _ => assert_eq!(a, b, "{what}"),
    }
}

#[test]
fn a_rollup_answers_as_the_events_do() {
    let dir = sluice_test_support::temp_dir("rollups-e2e");
    let data = dir.join("data");
    let store = format!("embedded:{}", data.display());
    let (mut server, base) = serve_store_http_only_with(&store, &data, &["--columns", "off"]);
    let add = sluice(&[
        "rollup",
        "add",
        "web",
        "--type",
        "WEB",
        "--group-by",
        "path",
        "--agg",
        AGGS,
        "--step",
        "10s",
        "--server",
        &base,
    ]);
    assert_success(&add);
    // 60 seconds of events, then late ones for the first 20 s (flushed by then).
    let t0 = now() - 120;
    let t0 = t0 - t0.rem_euclid(60);
    post(&base, &events(t0, 60, 7));
    let deadline = Instant::now() + Duration::from_secs(60);
    // Absent until the first result: the waits below fail if it never comes.
    let stored = || {
        try_metric(
            &fetch_url(&base),
            "sluice_substream_results_total",
            &[("substream", "web")],
        )
        .unwrap_or(0.0)
    };
    // One result per stored WEB blob: 60 seconds × 2 subtypes, then 20 × 2 late chunks.
    while stored() < 120.0 {
        assert!(
            Instant::now() < deadline,
            "the rollup never ran: {}",
            stored()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    post(&base, &events(t0, 20, 11));
    let deadline = Instant::now() + Duration::from_secs(60);
    while stored() < 160.0 {
        assert!(
            Instant::now() < deadline,
            "late chunks never rolled up: {}",
            stored()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let range = [
        "--from".to_string(),
        t0.to_string(),
        "--to".to_string(),
        (t0 + 60).to_string(),
    ];
    let q = |extra: &[&str]| {
        let mut args = vec!["rollup", "query", "web", "--format", "json"];
        args.extend(range.iter().map(String::as_str));
        args.extend_from_slice(extra);
        sluice(&args)
    };
    let rolled = rows(&q(&["--step", "30s", "--server", &base]), "start");
    let mut cat_args = vec![
        "cat",
        "--server",
        &base,
        "--type",
        "WEB",
        "--group-by",
        "path",
    ];
    cat_args.extend(["--agg", AGGS, "--window", "30s"]);
    cat_args.extend(range.iter().map(String::as_str));
    let direct = rows(&sluice(&cat_args), "window");
    assert_eq!(rolled.len(), 8, "two 30 s steps × four paths: {rolled:?}");
    assert_eq!(
        rolled.keys().collect::<Vec<_>>(),
        direct.keys().collect::<Vec<_>>()
    );
    let mut late_seen = false;
    for (k, d) in &direct {
        let r = &rolled[k];
        for agg in AGGS.split(',') {
            same(&r[agg], &d[agg], &format!("{k:?} {agg}"));
        }
        late_seen |= k.0 == t0 && r["count"].as_u64().unwrap_or(0) > 0;
    }
    assert!(late_seen);
    // A step that is not a multiple of the rollup's is refused.
    let bad = q(&["--step", "15s", "--server", &base]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("multiple"));
    // A query-time filter over the group fields.
    let one = rows(
        &q(&[
            "--step",
            "30s",
            "--where",
            "path == \"/p1\"",
            "--server",
            &base,
        ]),
        "start",
    );
    assert_eq!(one.len(), 2);
    assert!(one.keys().all(|(_, p)| p == "/p1"));
    server.terminate(Duration::from_secs(30));

    // Offline, on the data directory: the same rows.
    let offline = rows(
        &q(&["--step", "30s", "--data", data.to_str().expect("path")]),
        "start",
    );
    assert_eq!(offline, rolled);
    // Listed as a rollup.
    let ls = sluice(&["rollup", "ls", "--data", data.to_str().expect("path")]);
    assert_success(&ls);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("web\tWEB\trollup every 10s by [path]"));
}

/// `[[rollups]]` in the configuration: registered at start and run on the first blobs; a
/// restart with the same definition starts; with another, the start is refused, naming it.
#[test]
fn rollups_from_the_configuration() {
    let dir = sluice_test_support::temp_dir("rollups-config");
    let data = dir.join("data");
    let store = format!("embedded:{}", data.display());
    let config = dir.join("sluice.toml");
    let write_config = |agg: &str| {
        std::fs::write(
            &config,
            format!(
                "[[rollups]]\nname = \"byp\"\ntype = \"WEB\"\ngroup_by = [\"path\"]\nagg = [{agg}]\nstep = \"10s\"\n"
            ),
        )
        .expect("config");
    };
    write_config("\"count\", \"max:bytes\"");
    let cfg = config.to_str().expect("path").to_owned();
    let (mut server, base) = serve_store_http_only_with(&store, &data, &["--config", &cfg]);
    let t0 = now() - 100;
    let t0 = t0 - t0.rem_euclid(10);
    post(&base, &events(t0, 10, 3));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = try_metric(
            &fetch_url(&base),
            "sluice_substream_results_total",
            &[("substream", "byp")],
        );
        if got.unwrap_or(0.0) >= 20.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the configured rollup never ran: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = sluice(&[
        "rollup",
        "query",
        "byp",
        "--from",
        &t0.to_string(),
        "--to",
        &(t0 + 10).to_string(),
        "--format",
        "csv",
        "--server",
        &base,
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("start,path,count,max:bytes\n"), "{text}");
    // 10 s × 32 WEB events.
    let total: u64 = text
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .nth(2)
                .and_then(|c| c.parse::<u64>().ok())
                .expect("count")
        })
        .sum();
    assert_eq!(total, 320, "{text}");
    server.terminate(Duration::from_secs(30));

    // The same configuration again: starts.
    let (mut server, _) = serve_store_http_only_with(&store, &data, &["--config", &cfg]);
    server.terminate(Duration::from_secs(30));
    // Another definition under the same name: refused, with the way out.
    write_config("\"count\"");
    let out = sluice(&[
        "serve",
        "--config",
        &cfg,
        "--store",
        &store,
        "--data",
        data.to_str().expect("path"),
        "--http",
        "127.0.0.1:0",
        "--tcp",
        "off",
        "--udp",
        "off",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("differs from the one registered") && err.contains("sluice rollup rm byp"),
        "{err}"
    );
}

/// Export end to end: a server with `--export-remote-write` to a real VictoriaMetrics sends
/// each closed step of a rollup once its states are stored; VictoriaMetrics holds the values
/// `sluice rollup query` gives for those steps (at the step's end), `/metrics` counts the rows
/// sent, and `GET /v1/rollups/NAME/metrics` serves the text format for scrapers.
#[test]
fn rollups_reach_victoriametrics() {
    let Some(vm) =
        sluice_test_support::victoriametrics::victoriametrics("rollups_reach_victoriametrics")
    else {
        return;
    };
    let dir = sluice_test_support::temp_dir("rollups-export");
    let data = dir.join("data");
    let store = format!("embedded:{}", data.display());
    let rw = format!("{}/api/v1/write", vm.http);
    let (mut server, base) = serve_store_http_only_with(
        &store,
        &data,
        &["--columns", "off", "--export-remote-write", &rw],
    );
    // A name of its own per run: VictoriaMetrics keeps the series of earlier runs.
    let name = format!("exp{}", std::process::id());
    let add = sluice(&[
        "rollup",
        "add",
        &name,
        "--type",
        "WEB",
        "--group-by",
        "path",
        "--agg",
        "count,max:bytes",
        "--step",
        "5s",
        "--server",
        &base,
    ]);
    assert_success(&add);
    // Live events over 6 s: at least one whole 5 s step closes after the server started.
    let start = now();
    for s in 0..6 {
        post(&base, &events(now(), 1, 20 + s));
        std::thread::sleep(Duration::from_secs(1));
    }
    let selector = format!("{{__name__=\"sluice_{name}_count\"}}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let vm_counts = loop {
        let body = ureq::get(&format!("{}/api/v1/export", vm.http))
            .timeout(Duration::from_secs(10))
            .query("match[]", &selector)
            .call()
            .expect("VictoriaMetrics export")
            .into_string()
            .expect("body");
        // (step end ms, path) → count.
        let mut got: BTreeMap<(i64, String), f64> = BTreeMap::new();
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).expect("export JSON");
            let path = v["metric"]["path"].as_str().expect("path label").to_owned();
            assert_eq!(v["metric"]["rollup"].as_str(), Some(name.as_str()));
            let times = v["timestamps"].as_array().expect("timestamps");
            for (t, x) in times.iter().zip(v["values"].as_array().expect("values")) {
                got.insert(
                    (t.as_i64().expect("t"), path.clone()),
                    x.as_f64().expect("x"),
                );
            }
        }
        if got.len() >= 4 {
            break got;
        }
        assert!(Instant::now() < deadline, "VictoriaMetrics got {got:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    // Each exported sample equals the rollup's own answer for that step.
    let out = sluice(&[
        "rollup",
        "query",
        &name,
        "--from",
        &(start - 10).to_string(),
        "--to",
        &(now() + 1).to_string(),
        "--format",
        "json",
        "--server",
        &base,
    ]);
    let rows = rows(&out, "start");
    for ((t_ms, path), count) in &vm_counts {
        let step_start = t_ms / 1000 - 5;
        let row = rows
            .get(&(step_start, path.clone()))
            .unwrap_or_else(|| panic!("no rollup row for {step_start} {path}: {rows:?}"));
        assert_eq!(
            row["count"].as_f64(),
            Some(*count),
            "{path} at {step_start}"
        );
    }
    let m = fetch_url(&base);
    let sent = try_metric(
        &m,
        "sluice_export_sent_rows_total",
        &[("sink", &format!("remote_write {rw}"))],
    )
    .expect("the exporter's counter");
    assert!(sent >= 4.0, "{sent}");
    // The scrape endpoint: the latest closed step of each path, as gauges.
    let r = request(
        addr_of(&base),
        "GET",
        &format!("/v1/rollups/{name}/metrics"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains(&format!("# TYPE sluice_{name}_count gauge")),
        "{text}"
    );
    assert!(
        text.contains(&format!("sluice_{name}_max_bytes{{")),
        "{text}"
    );
    server.terminate(Duration::from_secs(30));
}

/// `--statsd`: every statsd metric lands in the rollup of its type, grouped by name and tags —
/// counters summed with their sample rates applied, timers with quantiles, sets with distinct
/// counts, gauges without their `+`/`-` changes — queryable like any rollup.
#[test]
fn statsd_metrics_become_rollups() {
    let dir = sluice_test_support::temp_dir("rollups-statsd");
    let data = dir.join("data");
    let store = format!("embedded:{}", data.display());
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        s.local_addr().expect("addr").port()
    };
    let statsd = format!("127.0.0.1:{port}");
    let (mut server, base) =
        serve_store_http_only_with(&store, &data, &["--columns", "off", "--statsd", &statsd]);
    let ls = sluice(&["rollup", "ls", "--server", &base]);
    assert_success(&ls);
    let listed = String::from_utf8_lossy(&ls.stdout).to_string();
    for kind in [
        "counter",
        "gauge",
        "timer",
        "histogram",
        "distribution",
        "set",
    ] {
        assert!(
            listed.contains(&format!("statsd_{kind}\tstatsd")),
            "{listed}"
        );
    }
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("sender");
    let start = now();
    let mut timings = Vec::new();
    for i in 0..200u32 {
        let ms = (i * 37) % 500;
        timings.push(f64::from(ms));
        let lines = format!(
            "api.hits:1|c|#env:prod\napi.hits:2|c|@0.5|#env:prod\napi.latency:{ms}|ms|#env:prod\nusers:u{}|s\ntemp:{}|g\ntemp:+1|g",
            i % 17,
            20 + i % 3
        );
        sock.send_to(lines.as_bytes(), &statsd).expect("send");
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let q = |name: &str| {
        let out = sluice(&[
            "rollup",
            "query",
            name,
            "--from",
            &(start - 1).to_string(),
            "--to",
            &(now() + 2).to_string(),
            "--step",
            "3600s",
            "--format",
            "json",
            "--server",
            &base,
        ]);
        assert_success(&out);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("row"))
            .collect::<Vec<_>>()
    };
    // Every line arrives (loopback), then rolls up; each rollup is polled until its count is
    // whole (the runner takes the blobs of each type in its own time).
    let until = |name: &str, column: &str, want: f64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let rows = q(name);
            let got: f64 = rows.iter().filter_map(|r| r[column].as_f64()).sum();
            if got >= want || Instant::now() > deadline {
                return rows;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    // 200 × (1 + 2/0.5) counted hits.
    let hits = until("statsd_counter", "sum:value", 1000.0);
    let total: f64 = hits.iter().filter_map(|r| r["sum:value"].as_f64()).sum();
    assert_eq!(total, 1000.0, "{hits:?}");
    assert!(
        hits.iter()
            .all(|r| r["name"] == "api.hits" && r["tags"] == "{\"env\":\"prod\"}"),
        "{hits:?}"
    );
    // Timers: p95 within 1 % of the exact value (one hour step: every sample in one row... or
    // two, when the hour turned meanwhile: then compare the counts only).
    let timer = until("statsd_timer", "count", 200.0);
    let count: f64 = timer.iter().filter_map(|r| r["count"].as_f64()).sum();
    assert_eq!(count, 200.0, "{timer:?}");
    if timer.len() == 1 {
        timings.sort_by(f64::total_cmp);
        let exact = timings[(0.95 * 199.0) as usize];
        let got = timer[0]["p95:value"].as_f64().expect("p95");
        assert!((got - exact).abs() <= 0.01 * exact, "p95 {got} vs {exact}");
        assert_eq!(timer[0]["max:value"].as_f64(), timings.last().copied());
    }
    // Sets: 17 distinct members (exact while small).
    let set = until("statsd_set", "count", 200.0);
    if set.len() == 1 {
        assert_eq!(set[0]["distinct:value"].as_f64(), Some(17.0), "{set:?}");
    }
    // Gauges: the values set (20..22), not the +1 changes.
    let gauge = until("statsd_gauge", "count", 200.0);
    let n: f64 = gauge.iter().filter_map(|r| r["count"].as_f64()).sum();
    assert_eq!(n, 200.0, "{gauge:?}");
    assert!(
        gauge.iter().all(|r| r["min:value"].as_f64() >= Some(20.0)),
        "{gauge:?}"
    );
    server.terminate(Duration::from_secs(30));
}
