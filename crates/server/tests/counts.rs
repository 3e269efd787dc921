//! Completeness counts (`GET /v1/counts`) and the `/metrics` histograms, end to end on real
//! sockets.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_server::{spawn, ServerConfig};

mod common;
use common::*;
use sluice_test_support::metrics::series;

fn wait_counts(addr: SocketAddr, query: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = request(addr, "GET", &format!("/v1/counts?{query}"), b"");
        assert_eq!(r.status, 200, "{}", r.text());
        let ls = lines(&r.text());
        if ok(&ls) {
            return ls;
        }
        assert!(Instant::now() < deadline, "counts never settled: {ls:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `(le, cumulative count)` buckets, `_sum` and `_count` of a histogram.
fn histogram(text: &str, name: &str) -> (Vec<(String, u64)>, f64, u64) {
    let mut buckets = Vec::new();
    let (mut sum, mut count) = (None, None);
    let bucket = format!("{name}_bucket{{le=\"");
    for l in text.lines() {
        if let Some(r) = l.strip_prefix(&bucket) {
            let (le, n) = r.split_once("\"} ").unwrap();
            buckets.push((le.to_string(), n.parse().unwrap()));
        } else if let Some(v) = l.strip_prefix(&format!("{name}_sum ")) {
            sum = Some(v.parse().unwrap());
        } else if let Some(v) = l.strip_prefix(&format!("{name}_count ")) {
            count = Some(v.parse().unwrap());
        }
    }
    assert!(text.contains(&format!("# TYPE {name} histogram")), "{text}");
    assert!(text.contains(&format!("# HELP {name} ")), "{text}");
    (buckets, sum.expect("no _sum"), count.expect("no _count"))
}

/// Checks a histogram of positive observations (durations, sizes): cumulative buckets ending in
/// `+Inf` = `_count`, and a `_sum` within what the buckets allow: each observation lies in
/// (previous bound, its bound], so the sum lies between the counts times the lower bounds and
/// the counts times the upper bounds (no upper limit if any fell in `+Inf`). Returns `_count`.
fn check_histogram(text: &str, name: &str) -> u64 {
    let (buckets, sum, count) = histogram(text, name);
    assert!(buckets.len() > 2, "{name}: {buckets:?}");
    assert_eq!(buckets.last().unwrap().0, "+Inf");
    assert_eq!(
        buckets.last().unwrap().1,
        count,
        "{name}: +Inf bucket != _count"
    );
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "{name} not cumulative: {buckets:?}"
    );
    let (mut low, mut high) = (0.0, 0.0);
    let (mut below, mut seen) = (0.0_f64, 0u64);
    for (le, cumulative) in &buckets {
        let bound: f64 = le
            .parse()
            .unwrap_or_else(|e| panic!("{name}: le {le:?}: {e}"));
        let n = cumulative - seen;
        if n > 0 {
            low += n as f64 * below;
            high += n as f64 * bound;
        }
        below = bound;
        seen = *cumulative;
    }
    assert!(
        sum >= low && sum <= high,
        "{name}: _sum {sum} outside [{low}, {high}] that the buckets allow: {buckets:?}"
    );
    assert_eq!(
        sum > 0.0,
        count > 0,
        "{name}: _sum {sum} of {count} positive observations"
    );
    count
}

#[test]
fn drops_are_counted_per_second_and_reason() {
    let dir = temp_dir("counts");
    let server = spawn(ServerConfig {
        max_event_bytes: 300,
        ..config(&dir, 0)
    })
    .unwrap();
    let addr = server.http_addr.unwrap();
    let e = now() - 3;
    let good = |i: u64| json!({"epoch": e, "dc": "dc1", "type": "click", "subtype": "a", "i": i});
    let payload = json!([
        good(0),
        {"epoch": e, "dc": "dc1", "type": "click", "subtype": "a", "pad": "x".repeat(1000)},
        good(1),
        42,
        {"epoch": e, "dc": "dc1", "no_type": true},
        good(2),
    ]);
    let r = request(addr, "POST", "/v1/events", payload.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["accepted"], 3);
    assert_eq!(r.json()["dropped_total"], 3);
    wait_flushed(addr, 3);

    // The oversized event's tags were readable: counted under its own second and type.
    let ls = wait_counts(addr, &format!("from={}&to={}", e - 1, now() + 2), |ls| {
        ls.iter()
            .any(|l| l["dc"] == "dc1" && l["stored"] == 3 && l["dropped"]["oversized"] == 1)
            && ls.iter().filter(|l| l["dc"] == "local").count() > 0
    });
    let click: Vec<&Value> = ls.iter().filter(|l| l["dc"] == "dc1").collect();
    assert_eq!(click.len(), 1, "{ls:?}");
    let c = click[0];
    assert_eq!(c["epoch"], e);
    assert_eq!(c["type"], "click");
    assert_eq!(c["subtype"], "a");
    assert_eq!(c["stored"], 3);
    // (epoch + grace has already passed on arrival: whether these count as late is the
    // aggregator's business; they are never more than the stored ones.)
    assert!(c["late"].as_u64().unwrap() <= 3, "{c}");
    assert_eq!(c["dropped"], json!({"oversized": 1}));
    assert_eq!(c["kernel_dropped"], 0);

    // Not a map / no type: the fallback (arrival second, configured dc, empty type/subtype).
    let mut fallback: std::collections::BTreeMap<String, u64> = Default::default();
    for l in ls.iter().filter(|l| l["dc"] == "local") {
        assert_eq!(l["type"], "");
        assert_eq!(l["subtype"], "");
        assert!(l["epoch"].as_i64().unwrap() >= e, "{l}");
        for (reason, n) in l["dropped"].as_object().unwrap() {
            *fallback.entry(reason.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    assert_eq!(fallback.get("not_a_map"), Some(&1), "{ls:?}");
    assert_eq!(fallback.get("missing_type"), Some(&1), "{ls:?}");

    // Epoch order, and the dc filter.
    let epochs: Vec<i64> = ls.iter().map(|l| l["epoch"].as_i64().unwrap()).collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "{epochs:?}");
    let only = request(
        addr,
        "GET",
        &format!("/v1/counts?from={}&to={}&dc=dc1", e - 1, now() + 2),
        b"",
    );
    let only = lines(&only.text());
    assert!(
        only.iter().all(|l| l["dc"] == "dc1") && only.len() == 1,
        "{only:?}"
    );

    // Bad requests.
    assert_eq!(request(addr, "GET", "/v1/counts", b"").status, 400);
    assert_eq!(
        request(addr, "GET", "/v1/counts?from=0&bogus=1", b"").status,
        400
    );

    server.shutdown().unwrap();
}

#[test]
fn metrics_show_store_latency_blob_sizes_and_events_out() {
    let dir = temp_dir("histograms");
    let server = spawn(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();
    let e = now() - 2;
    let body: String = (0..50)
        .map(|i| format!("{}\n", json!({"epoch": e, "type": "t", "i": i})))
        .collect();
    let r = request(addr, "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    wait_flushed(addr, 50);
    let r = request(
        addr,
        "GET",
        &format!("/v1/events?from={e}&to={}", e + 1),
        b"",
    );
    assert_eq!(lines(&r.text()).len(), 50);

    let text = request(addr, "GET", "/metrics", b"").text();
    let writes = check_histogram(&text, "sluice_store_write_seconds");
    let blobs = check_histogram(&text, "sluice_blob_bytes");
    // 50 small events of one (second, dc, type, subtype) in one payload: one blob of one chunk.
    assert_eq!(blobs, 1, "{text}");
    // Each blob is a put, plus at least the index and counts writes and a flush.
    assert!(writes >= blobs + 2, "{text}");
    assert_eq!(blobs as f64, metric(addr, "sluice_blobs_written_total"));
    // The blob's bytes are what the store holds: the second's listing names one chunk, whose
    // size is the histogram's sum and the bytes counter.
    let listing = request(addr, "GET", &format!("/buckets/epochs/keys/{e}-local"), b"");
    assert_eq!(listing.status, 200, "{}", listing.text());
    let entries: Vec<String> = listing
        .text()
        .trim()
        .split('|')
        .map(str::to_owned)
        .collect();
    assert_eq!(entries, ["t::0"], "{}", listing.text());
    let blob = request(
        addr,
        "GET",
        &format!("/buckets/events/keys/{e}:local:t::0"),
        b"",
    );
    assert_eq!(blob.status, 200, "{}", blob.text());
    let (_, bytes_sum, _) = histogram(&text, "sluice_blob_bytes");
    assert_eq!(bytes_sum, blob.body.len() as f64, "{text}");
    assert_eq!(bytes_sum, metric(addr, "sluice_blob_bytes_written_total"));
    assert!(
        text.contains("# TYPE sluice_events_out_total counter"),
        "{text}"
    );
    // Counted when the reading thread ends, which may be just after the client has the body.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while metric(addr, "sluice_events_out_total{endpoint=\"events\"}") < 50.0 {
        assert!(std::time::Instant::now() < deadline, "{}", metrics(addr));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let text = metrics(addr);
    assert!(
        text.contains("sluice_events_out_total{endpoint=\"events\"} 50\n"),
        "{text}"
    );
    assert!(
        text.contains("sluice_events_out_total{endpoint=\"tail\"} 0\n"),
        "{text}"
    );

    // Every sample line belongs to a family with HELP and TYPE.
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = l.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s).filter(|f| {
                    text.contains(&format!("# TYPE {f} histogram"))
                        || text.contains(&format!("# TYPE {f} summary"))
                })
            })
            .unwrap_or(name);
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {l}"
        );
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "no TYPE for {l}"
        );
    }
    server.shutdown().unwrap();
}

/// What a Prometheus user reaches for: no lag alarm while idle, flush durations as a histogram,
/// freshness, responses by route and status, drops by transport, build and process figures.
#[test]
fn metrics_stay_quiet_while_idle_and_cover_the_process() {
    let dir = temp_dir("idle-metrics");
    let server = spawn(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();
    let e = now();
    let body = format!(
        "{}\n{}\n",
        json!({"epoch": e, "type": "t"}),
        json!({"epoch": e, "ms": 1})
    );
    let r = request(addr, "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(request(addr, "GET", "/nope", b"").status, 404);
    wait_flushed(addr, 1);
    // Idle for longer than a tick and a second: nothing waits, so no lag.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let text = metrics(addr);
    assert_eq!(series(&text, "sluice_flush_lag_seconds"), 0.0, "{text}");
    assert!(text.contains("# TYPE sluice_flush_duration_seconds histogram"));
    assert!(series(&text, "sluice_flush_duration_seconds_count") >= 1.0);
    assert!(series(&text, "sluice_freshness_seconds_count") >= 1.0);
    assert_eq!(
        series(
            &text,
            "sluice_http_responses_total{route=\"/v1/events\",status=\"200\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "sluice_http_responses_total{route=\"unmatched\",status=\"404\"}"
        ),
        1.0
    );
    assert!(series(&text, "sluice_http_request_duration_seconds_count") >= 2.0);
    assert_eq!(
        series(
            &text,
            "sluice_events_dropped_total{transport=\"http\",reason=\"missing_type\"}"
        ),
        1.0
    );
    assert_eq!(
        series(&text, "sluice_events_dropped_total{transport=\"udp\"}"),
        0.0
    );
    assert_eq!(
        series(&text, "sluice_build_info{version=\"0.1.0\"}"),
        1.0,
        "{text}"
    );
    assert!(series(&text, "process_resident_memory_bytes") > 1e6);
    assert!(series(&text, "process_open_fds") >= 3.0);
    assert!(series(&text, "process_start_time_seconds") > 1.7e9);
    assert!(!text.contains("sluice_udp_payloads_total"), "a duplicate");
    assert!(series(&text, "sluice_store_bytes") > 0.0, "{text}");
    assert!(series(&text, "sluice_store_partitions") >= 1.0);
    let oldest = series(&text, "sluice_store_oldest_partition_timestamp_seconds");
    assert!(oldest > 1.7e9 && oldest <= e as f64, "{oldest}");
    server.shutdown().unwrap();
}
