//! The columnar history tier in a real `sluice serve`, on the bad day: HTTP clients send
//! acknowledged batches of several (dc, type, subtype) groups with late events, a TCP and a UDP
//! client too, while the server — writing a Parquet part every second — is SIGKILLed every
//! 0.3–1.5 s, often inside a part's write. After a clean start, once the parts have caught up:
//! every acknowledged id is read back exactly once from the columns (the default read) and from
//! the blobs (`columns=off`), the two reads are the same events, no partial file is visible,
//! and `sluice columns verify` finds every covered chunk equal to its blob.
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod common;
mod load;
mod process;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::now;
use load::{Clients, Load, Targets};
use process::{lines, sluice_bin, Server, XorShift};
use serde_json::Value;

/// Every event of `from..to`, with extra query parameters.
fn read(server: &Server, from: i64, to: i64, extra: &str) -> Vec<Value> {
    let r = server.get(&format!("/v1/events?from={from}&to={to}{extra}"));
    assert_eq!(r.status, 200, "{}", r.text());
    lines(&r.text())
}

/// Ids → how often they were read.
fn ids(events: &[Value]) -> BTreeMap<u64, u32> {
    let mut out = BTreeMap::new();
    for e in events {
        *out.entry(e["id"].as_u64().expect("id")).or_default() += 1;
    }
    out
}

/// `sluice columns status --json` of the data directory (the server stopped or running).
fn status(data: &std::path::Path, from: i64, to: i64) -> Value {
    let out = Command::new(sluice_bin())
        .args(["columns", "status", "--json", "--data"])
        .arg(data)
        .args(["--from", &from.to_string(), "--to", &to.to_string()])
        .output()
        .expect("sluice columns status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

#[test]
fn sigkill_while_writing_columns_loses_and_doubles_nothing() {
    let seed = std::env::var("SLUICE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now() as u64);
    println!("seed {seed} (SLUICE_KILL_SEED to repeat)");
    let mut rng = XorShift::new(seed);
    let dir = sluice_test_support::temp_dir("columns-kill");
    let data = dir.join("data");
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {data:?}\ntcp = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\ncolumns_every_secs = 1\n"
        ),
    )
    .expect("config");
    let flags = ["--pipeline-threads", "2"];
    let start = now();
    let load = Load::start_mixed(Clients {
        http: 1,
        tcp: 1,
        udp: 1,
    });
    let log = dir.join("server.log");
    for k in 0..6 {
        let mut server = Server::start_with(&config, &data, &flags);
        load.target_all(Some(Targets::of(server.addr, &log)));
        let wait = Duration::from_millis(300 + rng.below(1201));
        std::thread::sleep(wait.saturating_sub(server.spawned.elapsed()));
        server.kill();
        println!("kill {k} after {wait:?}: {} acked so far", load.acked());
    }
    let sent = load.stop();
    assert!(
        sent.acked.len() > 20,
        "too few acknowledged batches: {}",
        sent.acked.len()
    );

    // A clean start; then wait until the parts have caught up with now.
    let server = Server::start_with(&config, &data, &flags);
    server.wait_idle(Duration::from_secs(60));
    let (from, to) = (start - 10, now() + 2);
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.metric("sluice_columns_lag_seconds") > 6.0 {
        assert!(Instant::now() < deadline, "the columns never caught up");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(server.metric("sluice_columns_files_written_total") > 0.0);
    // Chunks stored after their part was written (replayed after a kill, late events) are
    // read from their blobs: the two reads are the same events either way.
    let columns = read(&server, from, to, "");
    let blobs = read(&server, from, to, "&columns=off");
    let verdict = load::check(&sent, &columns);
    println!("{} acked batches: {}", sent.acked.len(), verdict.summary());
    verdict.assert_exactly_once();
    load::check(&sent, &blobs).assert_exactly_once();
    assert_eq!(
        ids(&columns),
        ids(&blobs),
        "columns and blobs hold the same ids"
    );
    let covered = status(&data, from, to)["rows"].as_u64().expect("rows");
    println!("{covered} of {} events in parts", blobs.len());
    assert!(covered > 0 && covered <= blobs.len() as u64);
    server.stop();

    // No partial file is visible.
    let leftovers: Vec<_> = walk(&data.join("columns"))
        .into_iter()
        .filter(|p| !p.ends_with(".parquet"))
        .collect();
    assert!(leftovers.is_empty(), "not a column file: {leftovers:?}");
    // A rebuild takes the late chunks in: then the files hold every event, each once.
    let rebuild = sluice(&data, &["columns", "rebuild"], from, to);
    assert!(
        rebuild.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuild.stderr)
    );
    let rows = status(&data, from, to)["rows"].as_u64().expect("rows");
    assert_eq!(rows, blobs.len() as u64, "rows after the rebuild");
    let verify = sluice(&data, &["columns", "verify"], from, to);
    let text = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(text.contains(" 0 problems"), "{text}");
}

/// `sluice ARGS --data DATA --from FROM --to TO`.
fn sluice(data: &std::path::Path, args: &[&str], from: i64, to: i64) -> std::process::Output {
    Command::new(sluice_bin())
        .args(args)
        .arg("--data")
        .arg(data)
        .args(["--from", &from.to_string(), "--to", &to.to_string()])
        .output()
        .expect("sluice")
}

/// Every file under `dir` (paths as strings), temporary ones included.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// An object store that is down when the server starts does not stop it: ingest and reads go
/// on (from the blobs), each failed attempt to open the columns is counted, and the writer
/// keeps trying.
#[test]
fn columns_on_an_object_store_that_is_down_do_not_stop_the_start() {
    let dir = sluice_test_support::temp_dir("columns-down");
    let data = dir.join("data");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let url = format!(
        "s3://bucket/p?endpoint=http://127.0.0.1:{closed}&allow_http=true&access_key_id=k&secret_access_key=s&timeout=2s"
    );
    let store = format!("embedded:{}", data.display());
    let (mut server, base) =
        common::serve_store_http_only_with(&store, &data, &["--columns", &url]);
    let epoch = now() - 30;
    let body: String = (0..50)
        .map(|i| format!("{{\"epoch\":{epoch},\"type\":\"WEB\",\"id\":{i}}}\n"))
        .collect();
    let addr = sluice_test_support::http::addr_of(&base);
    let r = sluice_test_support::http::request(addr, "POST", "/v1/events", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = sluice_test_support::http::request(
            addr,
            "GET",
            &format!("/v1/events?from={}&to={}", epoch, epoch + 1),
            b"",
        );
        let n = r
            .text()
            .lines()
            .filter(|l| l.starts_with("{\"epoch\"") || l.contains("\"id\""))
            .count();
        if r.status == 200 && n == 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "events not readable: {} {}",
            r.status,
            r.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while sluice_test_support::metrics::metric(
        &sluice_test_support::metrics::fetch_url(&base),
        "sluice_columns_errors_total",
        &[],
    ) < 2.0
    {
        assert!(Instant::now() < deadline, "the writer did not try again");
        std::thread::sleep(Duration::from_millis(300));
    }
    server.terminate(Duration::from_secs(30));
}
