//! Completeness counts (`GET /v1/counts`) and the `/metrics` histograms, end to end on real
//! sockets.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_server::{spawn, ServerConfig};

mod common;
use common::*;

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
    assert!(sum >= 0.0);
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
    let _ = std::fs::remove_dir_all(&dir);
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
    assert!(blobs >= 1, "{text}");
    // Each blob is a put, plus at least the index and counts writes and a flush.
    assert!(writes >= blobs + 2, "{text}");
    assert_eq!(blobs as f64, metric(addr, "sluice_blobs_written_total"));
    let (_, bytes_sum, _) = histogram(&text, "sluice_blob_bytes");
    assert_eq!(bytes_sum, metric(addr, "sluice_blob_bytes_written_total"));
    assert!(
        text.contains("# TYPE sluice_events_out_total counter"),
        "{text}"
    );
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
                name.strip_suffix(s)
                    .filter(|f| text.contains(&format!("# TYPE {f} histogram")))
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
    let _ = std::fs::remove_dir_all(&dir);
}
