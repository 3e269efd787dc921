//! Python substreams end to end with real processes: `sluice serve` running code substreams in
//! its worker pool while `sluice gen --http` ingests.
//!
//! Four substreams misbehave while a marker file exists — an infinite loop, an unbounded
//! allocation, an exception, a worker that SIGKILLs itself — and behave otherwise. The test
//! checks that:
//! - ingest is not stalled during the incident (events stored within a generous factor of the
//!   baseline's time: the precise ratio is the bench's);
//! - each is shed with its reason (`/metrics`, `sluice substream show`), then suspended after
//!   three costly overruns in a row (`raise` is cheap and never suspended);
//! - once the marker is gone, the fallback fills exactly the shed blobs (`--no-fallback` lists
//!   them as gaps; the fallback's notes name the same blobs) and the output equals the
//!   client-side application of the same transformation, through the server and from `--data`.
//!
//! Needs a Python that can `import sluice` (`sluice_pyworkers::find_python`: `$SLUICE_PYTHON`,
//! `python/.venv`, or `scripts/python-setup.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

mod common;
use common::{assert_success, free_port, now, sluice, stdout_lines, wait_healthy};
use sluice_test_support::metrics;

const MODES: [&str; 4] = ["loop", "alloc", "raise", "selfkill"];

fn source(mode: &str, marker: &Path) -> String {
    format!(
        r#"import os, signal

MARKER = {marker:?}

def transform(events, ctx):
    if os.path.exists(MARKER):
        mode = {mode:?}
        if mode == "loop":
            while True:
                pass
        if mode == "alloc":
            hog = []
            while True:
                hog.append(bytearray(16 << 20))
        if mode == "raise":
            raise RuntimeError("boom")
        if mode == "selfkill":
            os.kill(os.getpid(), signal.SIGKILL)
    for e in events:
        if e.get("status", 0) >= 500:
            yield {{"path": e.get("path"), "status": e.get("status")}}
"#,
        marker = marker.to_str().expect("path")
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// `sluice gen` of 2000 WEB events of one dc over two seconds from `epoch`, sent to `url`;
/// returns how long until all of them were readable.
fn ingest_and_time(url: &str, seed: &str, epoch: i64) -> Duration {
    let start = Instant::now();
    let out = sluice(&[
        "gen",
        "--count",
        "2000",
        "--seed",
        seed,
        "--rate",
        "1000",
        "--mix",
        "1,0,0",
        "--dcs",
        "ams1",
        "--size",
        "300",
        "--epoch",
        &epoch.to_string(),
        "--http",
        url,
    ]);
    assert_success(&out);
    let (from, to) = (epoch.to_string(), (epoch + 2).to_string());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = sluice(&["cat", "--server", url, "--from", &from, "--to", &to]);
        if stdout_lines(&out).len() >= 2000 {
            return start.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "ingest stalled: events not readable"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of the series `name` (labels included, as printed) in `GET /metrics`. Panics when
/// the series is missing: the runner's metrics are always there while it runs, so a missing one
/// is a failure, not a zero.
fn metric(url: &str, name: &str) -> f64 {
    metrics::series(&metrics::fetch_url(url), name)
}

/// Waits until the runner has finished every chunk offered (at least `n`): its queue empty and
/// every chunk taken off it run to the end.
fn wait_runner_idle(url: &str, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let run = metric(url, "sluice_substream_blobs_run_total");
        let done = metric(url, "sluice_substream_latency_seconds_count");
        let queued = metric(url, "sluice_substream_queue");
        if run >= n && done == run && queued == 0.0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the substream runner did not finish: {done} of {run} run, {queued} queued"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Keys of the chunks named in `lines` of stderr starting with `prefix`.
fn keys(err: &str, prefix: &str) -> BTreeSet<String> {
    err.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| l.split(": ").next().expect("key").to_owned())
        .collect()
}

#[test]
fn runaway_python_substreams_are_shed_while_ingest_goes_on_and_fallback_fills_the_gaps() {
    let python = sluice_pyworkers::find_python()
        .unwrap_or_else(|e| panic!("no Python for the substream tests: {e}"));
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("substreams-python");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let data = dir.join("data");
    let d = data.to_str().expect("path");
    let marker = dir.join("MISBEHAVE");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut server = common::Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "serve",
                "--data",
                d,
                "--http",
                &format!("127.0.0.1:{port}"),
                "--tcp",
                "off",
                "--udp",
                "off",
                "--grace",
                "0.3",
            ])
            .env("SLUICE_PYTHON", &python)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sluice serve"),
    );
    wait_healthy(
        &ureq::agent(),
        &url,
        Instant::now() + Duration::from_secs(20),
        Duration::from_millis(100),
    );
    for mode in MODES {
        let file = dir.join(format!("{mode}.py"));
        std::fs::write(&file, source(mode, &marker)).expect("write");
        let out = sluice(&[
            "substream",
            "add",
            mode,
            "--type",
            "WEB",
            "--python",
            file.to_str().expect("path"),
            "--budget-ms",
            "1000",
            "--server",
            &url,
        ]);
        assert_success(&out);
    }

    // Baseline: the substreams behave.
    let t0 = now();
    let baseline = ingest_and_time(&url, "41", t0 - 4);
    wait_runner_idle(&url, 2.0);
    // The incident: every run of every substream misbehaves.
    std::fs::write(&marker, b"on").expect("marker");
    let incident_epoch = now() - 2;
    let incident = ingest_and_time(&url, "42", incident_epoch);
    eprintln!("events readable after {baseline:?} (baseline), {incident:?} (incident)");
    assert!(
        incident <= baseline * 5 + Duration::from_secs(3),
        "ingest stalled during the incident: {incident:?} vs baseline {baseline:?}"
    );

    wait_runner_idle(&url, 4.0);
    std::fs::remove_file(&marker).expect("marker off");

    // Each is shed for its reason ("unavailable" when the pool was respawning after a kill).
    let expected_reasons: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("loop", &["wall_time", "cpu_time"][..]),
        // Filling 512 MiB on a loaded machine may take longer than the budget: shed either way.
        ("alloc", &["memory", "wall_time", "cpu_time"][..]),
        ("raise", &["exception"][..]),
        ("selfkill", &["crashed"][..]),
    ]);
    let from = (t0 - 4).to_string();
    let to = (incident_epoch + 2).to_string();
    let range = ["--from", from.as_str(), "--to", to.as_str()];
    let expected = {
        let out = sluice(
            &[
                &[
                    "cat",
                    "--server",
                    &url,
                    "--type",
                    "WEB",
                    "--select",
                    "path,status",
                ][..],
                &["--where", "status >= 500"],
                &range,
            ]
            .concat(),
        );
        assert_success(&out);
        sorted(stdout_lines(&out))
    };
    assert!(!expected.is_empty());
    let mut gaps_of = BTreeMap::new();
    for mode in MODES {
        let show = sluice(&["substream", "show", mode, "--server", &url]);
        assert_success(&show);
        let v: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
        let misses = v["status"]["misses"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let own: u64 = expected_reasons[mode]
            .iter()
            .filter_map(|r| misses.get(*r).and_then(|n| n.as_u64()))
            .sum();
        eprintln!("{mode}: misses {misses:?}");
        assert!(own >= 1, "{mode}: misses {misses:?}");
        for reason in misses.keys() {
            assert!(
                expected_reasons[mode].contains(&reason.as_str())
                    || reason == "unavailable"
                    || reason == "suspended",
                "{mode}: unexpected miss reason {reason}"
            );
        }
        assert!(
            v["status"]["stored"].as_u64().unwrap_or(0) >= 1,
            "{mode}: {v}"
        );

        // --no-fallback: the gaps are exactly the incident's chunks that were shed.
        let out = sluice(
            &[
                &[
                    "cat",
                    "--no-fallback",
                    "--server",
                    &url,
                    "--substream",
                    mode,
                ][..],
                &range,
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(3), "{mode}: {}", stderr(&out));
        let gaps = keys(&stderr(&out), "sluice: warning: ");
        let shed: u64 = misses.values().filter_map(|n| n.as_u64()).sum();
        assert_eq!(
            gaps.len() as u64,
            shed,
            "{mode}: gaps {gaps:?} vs misses {misses:?}"
        );
        for k in &gaps {
            let epoch: i64 = k.split(':').next().expect("epoch").parse().expect("epoch");
            assert!(
                epoch >= incident_epoch,
                "{mode}: a baseline chunk was shed: {k}"
            );
        }

        // With fallback (through the server): the same output as the client-side selection,
        // one note per shed chunk.
        let out = sluice(&[&["cat", "--server", &url, "--substream", mode][..], &range].concat());
        assert_success(&out);
        assert_eq!(keys(&stderr(&out), "sluice: note: "), gaps, "{mode}");
        assert_eq!(sorted(stdout_lines(&out)), expected, "{mode} over HTTP");
        gaps_of.insert(mode, gaps);
    }
    let m = ureq::get(&format!("{url}/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    assert!(
        m.contains("sluice_substream_misses_total{substream=\"raise\",reason=\"exception\"}"),
        "no miss counter in /metrics"
    );
    // The epoch's completeness counts carry the misses under `substream:<name>:<reason>`,
    // counted in events (written once a second).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = sluice(&[&["counts", "--server", &url, "--total"][..], &range].concat());
        assert_success(&out);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("substream:raise:exception") && text.contains("substream:selfkill:") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no substream misses in the counts: {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.terminate(Duration::from_secs(30));

    // From the data directory: the fallback runs the same source in a local worker.
    for mode in MODES {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([&["cat", "--data", d, "--substream", mode][..], &range].concat())
            .env("SLUICE_PYTHON", &python)
            .output()
            .expect("cat");
        assert_success(&out);
        assert_eq!(
            keys(&stderr(&out), "sluice: note: "),
            gaps_of[mode],
            "{mode}"
        );
        assert_eq!(sorted(stdout_lines(&out)), expected, "{mode} from --data");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
