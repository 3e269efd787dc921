//! `sluice serve --retention TYPE[/SUBTYPE]=DAYS`: a real server given events two days old of
//! three groups keeps them while they are within their retention; restarted (expiry runs at
//! start), it purges the group whose day is over — its events are gone from reads, the others
//! are all there, each once — and counts it in `sluice_partitions_purged_total`. A bad rule is
//! refused with the rule named.

mod common;

use std::time::{Duration, Instant};

use common::{now, serve_store_http_only_with, sluice};
use serde_json::{json, Value};
use sluice_test_support::http::{addr_of, request};
use sluice_test_support::metrics::{fetch_url, metric};

/// (type, subtype, events sent).
const GROUPS: [(&str, &str, u64); 3] = [("DEBUG", "", 30), ("WEB", "ok", 40), ("WEB", "error", 20)];

fn flags() -> Vec<&'static str> {
    vec![
        "--retention",
        "10d",
        "--retention",
        "DEBUG=1d",
        "--retention",
        "WEB/error=20d",
        "--columns",
        "off",
    ]
}

/// Ids read back per group, from `/v1/events` over the range.
fn read_ids(base: &str, from: i64, to: i64) -> Vec<(String, String, u64)> {
    let r = request(
        addr_of(base),
        "GET",
        &format!("/v1/events?from={from}&to={to}"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut out: Vec<(String, String, u64)> = r
        .text()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("event JSON");
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (s("type"), s("subtype"), v["id"].as_u64().expect("id"))
        })
        .collect();
    out.sort();
    out
}

fn sent(groups: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    let mut id = 0;
    for (t, s, n) in GROUPS {
        for _ in 0..n {
            if groups.iter().any(|(gt, gs, _)| (*gt, *gs) == (t, s)) {
                out.push((t.to_owned(), s.to_owned(), id));
            }
            id += 1;
        }
    }
    out.sort();
    out
}

#[test]
fn a_group_past_its_own_retention_is_purged_and_the_others_stay() {
    let dir = sluice_test_support::temp_dir("retention-by-type");
    let data = dir.join("data");
    let store = format!("embedded:{}", data.display());
    let epoch = now() - 2 * 86_400;
    let (mut server, base) = serve_store_http_only_with(&store, &data, &flags());

    let mut body = String::new();
    let mut id = 0u64;
    for (t, s, n) in GROUPS {
        for k in 0..n {
            let ev = json!({"epoch": epoch + (k % 3) as i64, "type": t, "subtype": s, "id": id});
            body.push_str(&ev.to_string());
            body.push('\n');
            id += 1;
        }
    }
    let r = request(addr_of(&base), "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let (from, to) = (epoch - 5, epoch + 5);
    let deadline = Instant::now() + Duration::from_secs(60);
    let all = sent(&GROUPS);
    loop {
        let got = read_ids(&base, from, to);
        if got == all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never stored: {} of {}",
            got.len(),
            all.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.terminate(Duration::from_secs(30));

    // Restarted: expiry runs on the first tick and purges DEBUG (one day) from the partition.
    let (mut server, base) = serve_store_http_only_with(&store, &data, &flags());
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&fetch_url(&base), "sluice_partitions_purged_total", &[]) < 1.0 {
        assert!(Instant::now() < deadline, "no partition purged");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        read_ids(&base, from, to),
        sent(&[("WEB", "ok", 0), ("WEB", "error", 0)]),
        "DEBUG gone, every WEB event once"
    );
    assert_eq!(
        metric(&fetch_url(&base), "sluice_partitions_expired_total", &[]),
        0.0
    );
    server.terminate(Duration::from_secs(30));

    // Offline reads of the directory agree.
    let out = sluice(&[
        "cat",
        "--data",
        data.to_str().expect("path"),
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
        "--count-by",
        "type",
    ]);
    common::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("DEBUG"), "{text}");
    assert!(text.contains("WEB"), "{text}");
}

#[test]
fn a_bad_rule_is_refused_with_the_rule_named() {
    for (flag, want) in [
        ("WEB/=3d", "\"WEB/\""),
        ("WEB=0d", "at least one day"),
        ("WEB=3h", "whole days"),
    ] {
        let dir = sluice_test_support::temp_dir("retention-bad");
        let out = sluice(&[
            "serve",
            "--data",
            dir.to_str().expect("path"),
            "--http",
            "127.0.0.1:0",
            "--tcp",
            "off",
            "--udp",
            "off",
            "--retention",
            flag,
        ]);
        assert!(!out.status.success(), "{flag} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{flag}: {err}");
    }
}
