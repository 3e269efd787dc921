//! `sluice counts`: the completeness counts of a range from a running server and from the data
//! directory afterwards (the same rows), per second or summed with `--total`.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn rows(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert_success(out);
    stdout_lines(out)
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn counts_from_a_server_and_from_the_data_dir_agree() {
    let dir = std::env::temp_dir().join(format!("sluice-counts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (http, tcp, udp) = (free_port(), free_port(), free_port());
    let url = format!("http://127.0.0.1:{http}");
    let data = dir.join("data");
    let data = data.to_str().expect("utf-8 path");
    let mut server = spawn_serve(&[
        "--data",
        data,
        "--http",
        &format!("127.0.0.1:{http}"),
        "--tcp",
        &format!("127.0.0.1:{tcp}"),
        "--udp",
        &format!("127.0.0.1:{udp}"),
        "--grace",
        "0",
    ]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    wait_healthy(
        &agent,
        &url,
        Instant::now() + Duration::from_secs(20),
        Duration::from_millis(50),
    );
    let e = now() - 5;
    let body = format!(
        "{{\"epoch\":{e},\"type\":\"WEB\"}}\n{{\"epoch\":{e},\"type\":\"WEB\"}}\n{{\"epoch\":{},\"type\":\"WEB\"}}\n{{\"epoch\":{e},\"type\":\"WEB\",\"dc\":\"a:b\"}}\n",
        e + 1
    );
    let _ = agent.post(&format!("{url}/v1/events")).send_string(&body);
    let (from, to) = ((e - 1).to_string(), (now() + 2).to_string());
    let mut per_second = Vec::new();
    wait_for(Duration::from_secs(20), "the counts", || {
        per_second = rows(&sluice(&[
            "counts", "--server", &url, "--from", &from, "--to", &to,
        ]));
        // Drops are written with the next tick, the stored counts with the flush.
        let sum = |f: &dyn Fn(&serde_json::Value) -> Option<u64>| {
            per_second.iter().filter_map(f).sum::<u64>()
        };
        sum(&|r| r["stored"].as_u64()) == 3 && sum(&|r| r["dropped"]["bad_tag"].as_u64()) == 1
    });
    let stored: Vec<(i64, u64)> = per_second
        .iter()
        .filter(|r| r["type"] == "WEB")
        .map(|r| (r["epoch"].as_i64().unwrap(), r["stored"].as_u64().unwrap()))
        .collect();
    assert_eq!(stored, vec![(e, 2), (e + 1, 1)], "{per_second:?}");

    let total = rows(&sluice(&[
        "counts", "--server", &url, "--from", &from, "--to", &to, "--total",
    ]));
    let web: Vec<&serde_json::Value> = total.iter().filter(|r| r["type"] == "WEB").collect();
    assert_eq!(web.len(), 1, "{total:?}");
    assert_eq!(
        (web[0]["stored"].as_u64(), web[0]["epoch"].as_i64()),
        (Some(3), Some(e))
    );

    // The same rows read from the directory once the server has stopped.
    assert!(server.terminate(Duration::from_secs(30)).success());
    let from_dir = rows(&sluice(&[
        "counts", "--data", data, "--from", &from, "--to", &to,
    ]));
    assert_eq!(from_dir, per_second);

    // Bad ranges are refused with a clear error.
    let out = sluice(&["counts", "--data", data, "--from", &to, "--to", &from]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from must be before --to"));
    let _ = std::fs::remove_dir_all(&dir);
}
