//! The history tier on a real S3 server (SeaweedFS, `scripts/seaweedfs.sh`, signed requests):
//! `sluice serve` on the embedded store with `--columns s3://…` (a fresh prefix per test).
//!
//! - Acknowledged events of several (dc, type, subtype) groups, in the previous hour and now,
//!   then late ones for seconds whose part or hour file is already written: `sluice columns
//!   status` (pointed at the URL) shows them covered (the previous hour's late chunks merged in),
//!   the objects have Hive-style keys, reads (`/v1/events` with and without `columns=off`,
//!   `sluice cat --server`, `--count-by`, `sluice cat --data` with the server stopped: blobs only)
//!   give every acknowledged id once, `sluice columns verify` and `rebuild` work on the bucket.
//! - SIGKILL while the parts are being put: no acknowledged id lost or doubled, no partial or
//!   damaged object, verify clean.
//! - Credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (URL without keys or region):
//!   served and written; wrong or missing keys: `sluice serve` exits at once with an error naming
//!   the location and the S3 error code (no hang, no panic, no secret shown).
//! - Cassandra as the blob store (`scripts/cassandra.sh`, `SLUICE_SKIP_CASSANDRA=1` skips it),
//!   the columns on S3 named with the collector id: the same reads, verify and rebuild.
//!
//! SeaweedFS is started by the first test that needs it and left running (`make test` stops it);
//! `SLUICE_SKIP_S3=1` skips these tests. Runs the `sluice` binary cargo builds for these tests.

mod cassandra_common;
mod common;
mod load;
mod process;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cassandra_common::Keyspace;
use common::now;
use load::{Clients, Load, Targets};
use process::{lines, sluice_bin, try_request, Server, XorShift};
use serde_json::{json, Value};
use sluice_columns::location::{open_location, Listed};
use sluice_store_cassandra::testing::cluster;
use sluice_test_support::s3::{encode, fresh_prefix, seaweedfs, S3Server};

const HOUR: i64 = 3600;

/// The (dc, type, subtype) groups of the events.
const GROUPS: [(&str, &str, &str); 5] = [
    ("ams1", "WEB", "www"),
    ("ams1", "WEB", "api"),
    ("ams1", "CRON", ""),
    ("fra1", "WEB", "www"),
    ("fra1", "LB", "x"),
];

fn hour_of(epoch: i64) -> i64 {
    epoch - epoch.rem_euclid(HOUR)
}

/// `date=YYYY-MM-DD/hour=HH` of `epoch` in UTC (computed here, not by the crate under test).
fn hive_hour(epoch: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = epoch.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "date={y:04}-{m:02}-{d:02}/hour={:02}",
        epoch.rem_euclid(86_400) / HOUR
    )
}

/// A config file for `sluice serve` with the columns at `columns`, a part every second.
fn write_config(dir: &Path, data: &Path, columns: &str, tcp: &str) -> PathBuf {
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {data:?}\ntcp = {tcp:?}\nudp = \"off\"\ncolumns = {columns:?}\ncolumns_every_secs = 1\n"
        ),
    )
    .expect("config");
    config
}

/// The events the tests send: `n` per group at `epoch`, ids from `first` on.
fn events(first: u64, n: u64, epoch: i64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut id = first;
    for (dc, type_, subtype) in GROUPS {
        for k in 0..n {
            out.push(json!({
                "epoch": epoch, "dc": dc, "type": type_, "subtype": subtype, "id": id,
                "status": 200 + (k % 3) * 100, "path": format!("/p/{}", k % 4),
                "timings": {"total_ms": k as f64 * 1.5},
            }));
            id += 1;
        }
    }
    out
}

/// POSTs `events` to `server`; panics unless every one is acknowledged.
fn post(addr: std::net::SocketAddr, events: &[Value]) {
    let body: String = events.iter().map(|e| e.to_string() + "\n").collect();
    let r = try_request(addr, "POST", "/v1/events", body.as_bytes()).expect("POST /v1/events");
    assert_eq!(r.status, 200, "{}", r.text());
    let answer: Value = serde_json::from_str(&r.text()).expect("POST answer");
    assert_eq!(
        answer["accepted"].as_u64(),
        Some(events.len() as u64),
        "{answer}"
    );
}

/// Every event of `from..to` from `/v1/events`, with extra query parameters.
fn read(server: &Server, from: i64, to: i64, extra: &str) -> Vec<Value> {
    let r = server.get(&format!("/v1/events?from={from}&to={to}{extra}"));
    assert_eq!(r.status, 200, "{}", r.text());
    lines(&r.text())
}

/// Ids → how often they were read.
fn ids(events: &[Value]) -> BTreeMap<u64, u32> {
    let mut out = BTreeMap::new();
    for e in events {
        let id = e["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("an event without an id: {e}"));
        *out.entry(id).or_default() += 1;
    }
    out
}

/// Panics unless `read` holds each id of `sent` exactly once and nothing else.
fn assert_exactly(sent: &[Value], read: &[Value], what: &str) {
    let want: BTreeSet<u64> = sent.iter().map(|e| e["id"].as_u64().expect("id")).collect();
    let got = ids(read);
    let lost: Vec<_> = want.iter().filter(|id| !got.contains_key(id)).collect();
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    let unknown: Vec<_> = got.keys().filter(|id| !want.contains(id)).collect();
    assert!(
        lost.is_empty() && twice.is_empty() && unknown.is_empty(),
        "{what}: {} sent, {} read; lost {lost:?}, twice {twice:?}, never sent {unknown:?}",
        want.len(),
        read.len()
    );
}

/// `sluice ARGS` with `envs` set (and the AWS variables of the test's own environment removed).
fn sluice_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(args);
    for var in AWS_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(envs.iter().copied());
    cmd.output().expect("sluice")
}

/// The AWS variables a test sets or clears for the processes it starts.
const AWS_VARS: [&str; 5] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
];

/// `sluice columns CMD --data DATA --columns URL --from --to` (`--json` for status).
fn columns_cmd(
    cmd: &str,
    data: &Path,
    url: &str,
    from: i64,
    to: i64,
    envs: &[(&str, &str)],
) -> Output {
    let (from, to) = (from.to_string(), to.to_string());
    let mut args = vec!["columns", cmd];
    if cmd == "status" {
        args.push("--json");
    }
    args.extend([
        "--data",
        data.to_str().expect("path"),
        "--columns",
        url,
        "--from",
        &from,
        "--to",
        &to,
    ]);
    sluice_env(&args, envs)
}

/// `sluice columns status --json` of the columns at `url` (fails on damaged files).
fn status(data: &Path, url: &str, from: i64, to: i64, envs: &[(&str, &str)]) -> Value {
    let out = columns_cmd("status", data, url, from, to, envs);
    assert!(
        out.status.success(),
        "sluice columns status: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// The rows and parts `status` shows for the hour starting at `hour` (0, 0 when it lists none).
fn hour_rows(status: &Value, hour: i64) -> (u64, u64, u64) {
    let name = sluice_reader::format_time(hour as f64, &sluice_reader::Zone::utc());
    status["hours"]
        .as_array()
        .expect("hours")
        .iter()
        .find(|h| h["hour"].as_str() == Some(name.as_str()))
        .map_or((0, 0, 0), |h| {
            (
                h["rows"].as_u64().expect("rows"),
                h["files"].as_u64().expect("files"),
                h["parts"].as_u64().expect("parts"),
            )
        })
}

/// How many of `events` are dated in the hour starting at `hour`.
fn in_hour(events: &[Value], hour: i64) -> u64 {
    events
        .iter()
        .filter(|e| hour_of(e["epoch"].as_i64().expect("epoch")) == hour)
        .count() as u64
}

/// Polls `status` until `done` holds, for at most `limit`; the last status.
fn wait_status(
    what: &str,
    limit: Duration,
    mut get: impl FnMut() -> Value,
    mut done: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = get();
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out ({limit:?}) waiting for {what}; last status:\n{s:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every object under the URL's prefix.
fn objects(url: &str) -> Vec<Listed> {
    open_location(url)
        .expect("open the S3 location")
        .list("")
        .expect("list the S3 location")
}

/// Checks that every object is a column file with a Hive-style key,
/// `date=YYYY-MM-DD/hour=HH/dc=DC/type=TYPE/(part-FROM-TO-OWNER|hour-OWNER).parquet`, and not
/// empty; returns `(date=…/hour=…, dc, type, file name)` of each.
fn hive_keys(objects: &[Listed]) -> Vec<(String, String, String, String)> {
    objects
        .iter()
        .map(|o| {
            let parts: Vec<&str> = o.path.split('/').collect();
            let ok = parts.len() == 5
                && parts[0].len() == "date=2026-11-28".len()
                && parts[0].starts_with("date=")
                && parts[1].len() == "hour=18".len()
                && parts[1].starts_with("hour=")
                && parts[2].starts_with("dc=")
                && parts[3].starts_with("type=")
                && parts[4].ends_with(".parquet")
                && (parts[4].starts_with("part-") || parts[4].starts_with("hour-"));
            assert!(ok, "not a Hive-style column file key: {}", o.path);
            assert!(o.size > 0, "an empty object: {}", o.path);
            (
                format!("{}/{}", parts[0], parts[1]),
                parts[2]["dc=".len()..].to_owned(),
                parts[3]["type=".len()..].to_owned(),
                parts[4].to_owned(),
            )
        })
        .collect()
}

/// `sluice cat ARGS --from --to` → its events (exit status checked).
fn cat(args: &[&str], from: i64, to: i64) -> Vec<Value> {
    let (from, to) = (from.to_string(), to.to_string());
    let mut all = vec!["cat"];
    all.extend_from_slice(args);
    all.extend(["--from", &from, "--to", &to]);
    let out = sluice_env(&all, &[]);
    assert!(
        out.status.success(),
        "sluice {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&String::from_utf8_lossy(&out.stdout))
}

/// The count of each `type` in `events`.
fn by_type(events: &[Value]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in events {
        *out.entry(e["type"].as_str().expect("type").to_owned())
            .or_default() += 1;
    }
    out
}

/// The `--count-by type` rows (`{"type": …, "count": n}`) as a map.
fn count_rows(rows: &[Value]) -> BTreeMap<String, u64> {
    rows.iter()
        .map(|r| {
            (
                r["type"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a count row without a type: {r}"))
                    .to_owned(),
                r["count"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("a count row without a count: {r}")),
            )
        })
        .collect()
}

#[test]
fn acked_events_go_to_s3_and_read_back_once() {
    let Some(s3) = seaweedfs("acked_events_go_to_s3_and_read_back_once") else {
        return;
    };
    let url = s3.url(&fresh_prefix("cli-columns"), "");
    let dir = sluice_test_support::temp_dir("columns-s3");
    let data = dir.join("data");
    let config = write_config(&dir, &data, &url, "off");
    let server = Server::start(&config, &data);

    // The previous hour first (the tier starts at the oldest second stored), then now.
    let t0 = now();
    let old = hour_of(t0) - HOUR / 2;
    let mut sent = Vec::new();
    let mut wave = |first: u64, epochs: &[i64]| {
        let mut batch = Vec::new();
        for (k, &epoch) in epochs.iter().enumerate() {
            batch.extend(events(first + k as u64 * 100, 3, epoch));
        }
        post(server.addr, &batch);
        sent.extend(batch.iter().cloned());
        batch
    };
    let old_1 = wave(0, &[old, old + 1]);
    server.wait_idle(Duration::from_secs(30));
    // Seconds the tier has not passed yet (it writes a second a few seconds after it ends).
    let t1 = now();
    let current_1 = wave(1000, &[t1, t1 + 1]);
    let (from, to) = (hour_of(old), t1 + 3600);
    let status_now = || status(&data, &url, from, to, &[]);

    // The previous hour merged into hour files; the current seconds in parts.
    let first = wait_status(
        "the first events in the columns",
        Duration::from_secs(90),
        status_now,
        |s| {
            let (old_rows, _, old_parts) = hour_rows(s, hour_of(old));
            old_rows == in_hour(&old_1, hour_of(old))
                && old_parts == 0
                && s["rows"].as_u64() == Some((old_1.len() + current_1.len()) as u64)
                && s["covered_until"].as_i64().is_some_and(|c| c > t1 + 1)
        },
    );
    println!("first events covered: {first}");
    assert_eq!(
        hour_rows(&first, hour_of(old)).1,
        4,
        "one hour file per (dc, type)"
    );

    // Late: the same seconds again, after their part and their hour file were written.
    let old_2 = wave(2000, &[old, old + 1]);
    let current_2 = wave(3000, &[t1, t1 + 1]);
    server.wait_idle(Duration::from_secs(30));
    // The closed hour is merged again with its late chunks (checked every minute).
    let merged = wait_status(
        "the late chunks of the closed hour in its hour files",
        Duration::from_secs(150),
        status_now,
        |s| hour_rows(s, hour_of(old)).0 == in_hour(&sent, hour_of(old)),
    );
    let covered = merged["rows"].as_u64().expect("rows");
    println!("{covered} of {} events covered by column files", sent.len());
    assert!(covered >= (old_1.len() + old_2.len() + current_1.len()) as u64);
    if hour_of(now()) == hour_of(t1) {
        // The open hour's late chunks stay on the blob path until its merge.
        assert_eq!(covered, (sent.len() - current_2.len()) as u64, "{merged}");
    }
    assert!(covered <= sent.len() as u64);

    // The objects: Hive-style keys, one directory per (hour, dc, type) sent.
    let keys = hive_keys(&objects(&url));
    let dirs: BTreeSet<(String, String, String)> = keys
        .iter()
        .map(|(h, dc, t, _)| (h.clone(), dc.clone(), t.clone()))
        .collect();
    let mut expected = BTreeSet::new();
    for e in old_1.iter().chain(&current_1) {
        expected.insert((
            hive_hour(e["epoch"].as_i64().expect("epoch")),
            e["dc"].as_str().expect("dc").to_owned(),
            e["type"].as_str().expect("type").to_owned(),
        ));
    }
    assert!(
        expected.is_subset(&dirs),
        "missing directories: {:?} (have {dirs:?})",
        expected.difference(&dirs).collect::<Vec<_>>()
    );
    assert!(
        keys.iter()
            .filter(|(h, _, _, _)| *h == hive_hour(old))
            .all(|(_, _, _, f)| f == "hour-local.parquet"),
        "the closed hour holds hour files only: {keys:?}"
    );

    // Reads: columns where they cover, blobs elsewhere; blobs only; the CLI through the server.
    let (from, to) = (hour_of(old), now() + 2);
    let columns = read(&server, from, to, "");
    let blobs = read(&server, from, to, "&columns=off");
    assert_exactly(&sent, &columns, "read (columns and blobs)");
    assert_exactly(&sent, &blobs, "read with columns=off");
    let base = format!("http://{}", server.addr);
    assert_exactly(&sent, &cat(&["--server", &base], from, to), "sluice cat");
    let want = by_type(&sent);
    assert_eq!(
        count_rows(&cat(&["--server", &base, "--count-by", "type"], from, to)),
        want,
        "sluice cat --count-by type"
    );
    assert_eq!(
        count_rows(&read(&server, from, to, "&count_by=type")),
        want,
        "count_by=type"
    );
    assert_eq!(
        count_rows(&read(&server, from, to, "&count_by=type&columns=off")),
        want,
        "count_by=type&columns=off"
    );
    server.stop();

    // The server stopped: `cat --data` reads the store itself (no DATA/columns: blobs only).
    let data_arg = data.to_str().expect("path");
    assert_exactly(
        &sent,
        &cat(&["--data", data_arg], from, to),
        "cat --data (blobs)",
    );
    let verify = columns_cmd("verify", &data, &url, from, to, &[]);
    let text = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(text.contains(" 0 problems"), "{text}");
    assert!(!text.contains("checked 0 files"), "{text}");

    // A rebuild puts the late chunks of the open hour in too: every event in the columns, once.
    let rebuild = columns_cmd("rebuild", &data, &url, from, to, &[]);
    assert!(
        rebuild.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuild.stderr)
    );
    let rebuilt = status(&data, &url, from, to, &[]);
    assert_eq!(
        rebuilt["rows"].as_u64(),
        Some(sent.len() as u64),
        "{rebuilt}"
    );
    assert_eq!(rebuilt["parts"].as_u64(), Some(0), "{rebuilt}");
    let verify = columns_cmd("verify", &data, &url, from, to, &[]);
    assert!(
        verify.status.success() && String::from_utf8_lossy(&verify.stdout).contains(" 0 problems"),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    // Served again, every chunk comes from the hour files: the same answer.
    let server = Server::start(&config, &data);
    assert_exactly(
        &sent,
        &read(&server, from, to, ""),
        "read after the rebuild",
    );
    server.stop();
}

#[test]
fn sigkill_while_putting_parts_loses_and_doubles_nothing() {
    let Some(s3) = seaweedfs("sigkill_while_putting_parts_loses_and_doubles_nothing") else {
        return;
    };
    let seed = std::env::var("SLUICE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now() as u64);
    println!("seed {seed} (SLUICE_KILL_SEED to repeat)");
    let mut rng = XorShift::new(seed);
    let url = s3.url(&fresh_prefix("cli-columns-kill"), "");
    let dir = sluice_test_support::temp_dir("columns-s3-kill");
    let data = dir.join("data");
    let config = write_config(&dir, &data, &url, "127.0.0.1:0");
    let start = now();
    let load = Load::start_mixed(Clients {
        http: 1,
        tcp: 1,
        udp: 0,
    });
    let log = dir.join("server.log");
    for k in 0..6 {
        let mut server = Server::start(&config, &data);
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
    let server = Server::start(&config, &data);
    server.wait_idle(Duration::from_secs(60));
    let (from, to) = (start - 10, now() + 2);
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.metric("sluice_columns_lag_seconds") > 6.0 {
        assert!(Instant::now() < deadline, "the columns never caught up");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(server.metric("sluice_columns_files_written_total") > 0.0);
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
    // `status` fails on a damaged (partial) file.
    let covered = status(&data, &url, from, to, &[])["rows"]
        .as_u64()
        .expect("rows");
    println!("{covered} of {} events in parts on S3", blobs.len());
    assert!(covered > 0 && covered <= blobs.len() as u64);
    server.stop();

    // Every object is a whole column file (a put is visible whole or not at all).
    let keys = hive_keys(&objects(&url));
    assert!(!keys.is_empty());
    let rebuild = columns_cmd("rebuild", &data, &url, from, to, &[]);
    assert!(
        rebuild.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuild.stderr)
    );
    let rows = status(&data, &url, from, to, &[])["rows"]
        .as_u64()
        .expect("rows");
    assert_eq!(rows, blobs.len() as u64, "rows after the rebuild");
    let verify = columns_cmd("verify", &data, &url, from, to, &[]);
    let text = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(text.contains(" 0 problems"), "{text}");
}

/// `s3://BUCKET/PREFIX?endpoint=…&allow_http=true`: no keys, no region.
fn bare_url(s3: &S3Server, prefix: &str) -> String {
    format!(
        "s3://{}/{prefix}?endpoint={}&allow_http=true",
        s3.bucket,
        encode(&s3.endpoint)
    )
}

/// `sluice serve --config CONFIG` with `envs` (the test's own AWS variables removed), stderr to
/// `DATA/../server.log`; `None` when it exits before serving (within 60 s), else the server.
fn serve_env(config: &Path, data: &Path, envs: &[(&str, &str)]) -> Result<Server, String> {
    let server_file = data.join("SERVER");
    let log_path = data.parent().expect("parent").join("server.log");
    let _ = std::fs::remove_file(&log_path);
    let log = std::fs::File::create(&log_path).expect("server log");
    let mut cmd = Command::new(sluice_bin());
    cmd.arg("serve")
        .arg("--config")
        .arg(config)
        .args(["--http", "127.0.0.1:0", "--pipeline-threads", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    for var in AWS_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(envs.iter().copied());
    let spawned = Instant::now();
    let mut child = cmd.spawn().expect("spawn sluice serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(addr) = std::fs::read_to_string(&server_file)
            .ok()
            .and_then(|t| t.trim().strip_prefix("http://")?.parse().ok())
        {
            return Ok(Server {
                child,
                addr,
                spawned,
            });
        }
        if let Some(status) = child.try_wait().expect("wait") {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!("exit status {status}\n{log}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sluice serve neither served nor exited within 60 s:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn credentials_from_the_environment() {
    let Some(s3) = seaweedfs("credentials_from_the_environment") else {
        return;
    };
    let dir = sluice_test_support::temp_dir("columns-s3-env");
    let data = dir.join("data");
    let prefix = fresh_prefix("cli-columns-env");
    let url = bare_url(s3, &prefix);
    let config = write_config(&dir, &data, &url, "off");
    let good = [
        ("AWS_ACCESS_KEY_ID", s3.access_key_id.as_str()),
        ("AWS_SECRET_ACCESS_KEY", s3.secret_access_key.as_str()),
        ("AWS_REGION", s3.region.as_str()),
        ("AWS_DEFAULT_REGION", s3.region.as_str()),
    ];

    // The right keys in the environment: served, written, read back.
    let server = serve_env(&config, &data, &good).unwrap_or_else(|e| panic!("{e}"));
    let t0 = now();
    let sent = events(0, 4, t0);
    post(server.addr, &sent);
    let (from, to) = (t0 - 5, t0 + 3600);
    wait_status(
        "the events in the columns",
        Duration::from_secs(60),
        || status(&data, &url, from, to, &good),
        |s| s["rows"].as_u64() == Some(sent.len() as u64),
    );
    assert!(server.metric("sluice_columns_files_written_total") > 0.0);
    assert_eq!(server.metric("sluice_columns_errors_total"), 0.0);
    assert_exactly(&sent, &read(&server, from, now() + 2, ""), "read");
    // The objects are there, under the prefix, for another client with the keys in its URL.
    assert_eq!(
        hive_keys(&objects(&s3.url(&prefix, ""))).len(),
        4,
        "a part per (dc, type)"
    );
    server.stop();

    // A reader without keys: a clear error, exit status 1.
    let out = columns_cmd("status", &data, &url, from, to, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no credentials"), "{err}");

    // Wrong keys, unknown keys, no keys: `sluice serve` does not start; it says why at once,
    // naming the location without secrets; no hang, no panic.
    let wrong_secret = "WRONG-secret-0123456789";
    let wrong_in_url = format!(
        "{url}&access_key_id={}&secret_access_key={wrong_secret}",
        encode(&s3.access_key_id)
    );
    type Env<'a> = Vec<(&'a str, &'a str)>;
    let cases: [(&str, &str, Env, &str); 4] = [
        (
            "a wrong secret",
            &url,
            vec![
                ("AWS_ACCESS_KEY_ID", s3.access_key_id.as_str()),
                ("AWS_SECRET_ACCESS_KEY", wrong_secret),
            ],
            "SignatureDoesNotMatch",
        ),
        (
            "an unknown key id",
            &url,
            vec![
                ("AWS_ACCESS_KEY_ID", "nobody"),
                ("AWS_SECRET_ACCESS_KEY", wrong_secret),
            ],
            "InvalidAccessKeyId",
        ),
        ("no keys", &url, vec![], "no credentials"),
        (
            "a wrong secret in the URL",
            &wrong_in_url,
            good.to_vec(),
            "SignatureDoesNotMatch",
        ),
    ];
    for (what, columns, envs, expected) in cases {
        let config = write_config(&dir, &data, columns, "off");
        let log = match serve_env(&config, &data, &envs) {
            Ok(server) => panic!("{what}: sluice serve started on {}", server.addr),
            Err(log) => log,
        };
        println!("{what}: {log}");
        assert!(log.contains("exit status: 1"), "{what}: {log}");
        assert!(log.contains(expected), "{what}: {log}");
        assert!(log.contains("columns"), "{what}: {log}");
        assert!(
            log.contains(&format!("s3://{}/{prefix}", s3.bucket)),
            "{what}: {log}"
        );
        assert!(!log.contains("panicked"), "{what}: {log}");
        assert!(
            !log.contains(wrong_secret),
            "{what}: the secret is shown: {log}"
        );
    }
}

#[test]
fn cassandra_blobs_with_columns_on_s3() {
    // DESIGN: with Cassandra as the blob store, the columns go to the object store.
    let Some(s3) = seaweedfs("cassandra_blobs_with_columns_on_s3") else {
        return;
    };
    let Some(cluster) = cluster(1, "cassandra_blobs_with_columns_on_s3") else {
        return;
    };
    let ks = Keyspace::new(&cluster.hosts, "colss3");
    let store = ks.url("rf=1");
    let prefix = fresh_prefix("cli-columns-cassandra");
    let url = s3.url(&prefix, "");
    let dir = sluice_test_support::temp_dir("columns-s3-cassandra");
    let data = dir.join("data");
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {data:?}\nstore = {store:?}\ncollector_id = \"c1\"\ntcp = \"off\"\nudp = \"off\"\n\
             columns = {url:?}\ncolumns_every_secs = 1\n"
        ),
    )
    .expect("config");
    let server = serve_env(&config, &data, &[]).unwrap_or_else(|e| panic!("{e}"));

    let t1 = now();
    let mut sent = events(0, 4, t1);
    post(server.addr, &sent);
    let (from, to) = (t1 - 5, t1 + 3600);
    let store_status = || {
        let out = sluice_env(
            &[
                "columns",
                "status",
                "--json",
                "--store",
                &store,
                "--columns",
                &url,
                "--from",
                &from.to_string(),
                "--to",
                &to.to_string(),
            ],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("status JSON")
    };
    let n = sent.len() as u64;
    wait_status(
        "the events in the columns",
        Duration::from_secs(90),
        store_status,
        |s| s["rows"].as_u64() == Some(n),
    );
    // Late: the same second again, after its part was written (on the blob path until merged).
    let late = events(1000, 2, t1);
    post(server.addr, &late);
    sent.extend(late);
    server.wait_idle(Duration::from_secs(30));

    let to = now() + 2;
    assert_exactly(
        &sent,
        &read(&server, from, to, ""),
        "read (columns and blobs)",
    );
    assert_exactly(
        &sent,
        &read(&server, from, to, "&columns=off"),
        "read with columns=off",
    );
    // `cat --store` reads the blobs only.
    assert_exactly(&sent, &cat(&["--store", &store], from, to), "cat --store");
    let keys = hive_keys(&objects(&url));
    assert!(
        keys.iter().all(|(_, _, _, f)| f.ends_with("-c1.parquet")),
        "files named with the collector id: {keys:?}"
    );
    assert_eq!(
        keys.iter()
            .map(|(_, dc, t, _)| (dc.clone(), t.clone()))
            .collect::<BTreeSet<_>>()
            .len(),
        4,
        "{keys:?}"
    );
    server.stop();

    let range = [
        "--from".to_owned(),
        from.to_string(),
        "--to".to_owned(),
        to.to_string(),
    ];
    let run = |cmd: &[&str]| {
        let mut args = vec!["columns"];
        args.extend_from_slice(cmd);
        args.extend(["--store", &store, "--columns", &url]);
        args.extend(range.iter().map(String::as_str));
        let out = sluice_env(&args, &[]);
        assert!(
            out.status.success(),
            "sluice {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run(&["verify"]).contains(" 0 problems"));
    run(&["rebuild", "--collector-id", "c1"]);
    let rebuilt: Value = serde_json::from_str(&run(&["status", "--json"])).expect("status JSON");
    assert_eq!(
        rebuilt["rows"].as_u64(),
        Some(sent.len() as u64),
        "{rebuilt}"
    );
    assert!(run(&["verify"]).contains(" 0 problems"));
}
