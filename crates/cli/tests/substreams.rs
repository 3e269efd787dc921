//! Substreams end to end with real processes: `sluice serve`, `sluice substream …`,
//! `sluice gen --http`, `sluice cat --substream` over HTTP and `--data`.
//!
//! - Declarative results equal the client-side application of the same selection over the same
//!   range, read through the server and from the data directory; the registry survives a
//!   restart and a restarted server keeps running it.
//! - Disable / enable / rm; fallback fills exactly the blobs stored while disabled (and
//!   `--no-fallback` reports exactly those as gaps).
//! - Bad registrations get a clear error and change nothing.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

mod common;
use common::{
    assert_success, free_port, now, sluice, spawn_serve, stdout_lines, wait_healthy, Proc,
};

fn data_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn serve(dir: &Path) -> (Proc, String) {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let server = spawn_serve(&[
        "--data",
        dir.to_str().expect("path"),
        "--http",
        &format!("127.0.0.1:{port}"),
        "--tcp",
        "off",
        "--udp",
        "off",
        "--grace",
        "0.3",
    ]);
    wait_healthy(
        &ureq::agent(),
        &url,
        Instant::now() + Duration::from_secs(20),
        Duration::from_millis(100),
    );
    (server, url)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `sluice gen` of `count` events at `epoch`, sent to `url`.
fn send(url: &str, count: &str, seed: &str, epoch: i64) {
    let out = sluice(&[
        "gen",
        "--count",
        count,
        "--seed",
        seed,
        "--rate",
        "1000",
        "--epoch",
        &epoch.to_string(),
        "--http",
        url,
    ]);
    assert_success(&out);
}

/// Waits until `cat args` with `--no-fallback` succeeds (every chunk has a stored result) and
/// returns its lines.
fn read_when_complete(args: &[&str], within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let out = sluice(&[&["cat", "--no-fallback"], args].concat());
        if out.status.success() {
            return stdout_lines(&out);
        }
        assert!(
            Instant::now() < deadline,
            "substream results incomplete after {within:?}: {}",
            stderr(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `n` events of `range` are readable through `url`.
fn wait_events(url: &str, range: &[&str], n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = sluice(&[&["cat", "--server", url][..], range].concat());
        let got = stdout_lines(&out).len();
        if got >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {got} of {n} events readable"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Asserts two sorted outputs are equal without printing thousands of lines.
fn assert_same(got: &[String], expected: &[String], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: line counts");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
        panic!("{what}: line {i}: {} != {}", got[i], expected[i]);
    }
}

const ERRORS_SELECT: &str = "status,path";
const ERRORS_WHERE: &str = "status >= 500";

#[test]
fn declarative_results_equal_client_side_over_http_and_data_and_survive_restart() {
    let dir = data_dir("substreams-declarative");
    let d = dir.to_str().expect("path");
    let (mut server, url) = serve(&dir);
    for args in [
        vec![
            "substream",
            "add",
            "errors",
            "--type",
            "WEB",
            "--select",
            ERRORS_SELECT,
            "--where",
            ERRORS_WHERE,
            "--server",
            &url,
        ],
        vec![
            "substream",
            "add",
            "lb",
            "--type",
            "LB",
            "--select",
            "backend,status",
            "--server",
            &url,
        ],
    ] {
        assert_success(&sluice(&args));
    }
    let t0 = now();
    send(&url, "4000", "21", t0 - 3);
    let (from, to) = ((t0 - 10).to_string(), (t0 + 10).to_string());
    let range = ["--from", from.as_str(), "--to", to.as_str()];
    wait_events(&url, &range, 4000);

    let expected_errors = {
        let out = sluice(
            &[
                &[
                    "cat",
                    "--server",
                    &url,
                    "--type",
                    "WEB",
                    "--select",
                    ERRORS_SELECT,
                ][..],
                &["--where", ERRORS_WHERE],
                &range,
            ]
            .concat(),
        );
        assert_success(&out);
        sorted(stdout_lines(&out))
    };
    let expected_lb = {
        let out = sluice(
            &[
                &[
                    "cat",
                    "--server",
                    &url,
                    "--type",
                    "LB",
                    "--select",
                    "backend,status",
                ][..],
                &range,
            ]
            .concat(),
        );
        assert_success(&out);
        sorted(stdout_lines(&out))
    };
    assert!(expected_errors.len() > 10 && expected_lb.len() > 100);

    // Over HTTP: the stored results, every chunk covered.
    let got = read_when_complete(
        &[
            &["--server", url.as_str(), "--substream", "errors"][..],
            &range,
        ]
        .concat(),
        Duration::from_secs(30),
    );
    assert_same(&sorted(got), &expected_errors, "errors over HTTP");
    let got = read_when_complete(
        &[&["--server", url.as_str(), "--substream", "lb"][..], &range].concat(),
        Duration::from_secs(30),
    );
    assert_same(&sorted(got), &expected_lb, "lb over HTTP");

    // The substream of 500s is much smaller than the stream it came from.
    let metrics = ureq::get(&format!("{url}/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    assert!(
        metrics.contains("sluice_substream_results_total{substream=\"errors\"}"),
        "{metrics}"
    );

    // Stopped: read from the data directory, then the registry is still there.
    server.terminate(Duration::from_secs(20));
    let out = sluice(
        &[
            &["cat", "--no-fallback", "--data", d, "--substream", "errors"][..],
            &range,
        ]
        .concat(),
    );
    assert_success(&out);
    assert_same(
        &sorted(stdout_lines(&out)),
        &expected_errors,
        "errors from --data",
    );
    let out = sluice(&["substream", "list", "--data", d]);
    assert_success(&out);
    let listed = stdout_lines(&out);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed[0].starts_with("errors\tenabled\ttype=WEB\tselect status,path where status >= 500")
    );

    // Restarted, the server runs the registry it finds: new data gets results too.
    let (mut server, url) = serve(&dir);
    // Seconds of their own (the first batch covered t0 - 3 ..= t0).
    let e2 = (now() - 2).max(t0 + 1);
    send(&url, "2000", "22", e2);
    let (from2, to2) = (e2.to_string(), (e2 + 2).to_string());
    let range2 = ["--from", from2.as_str(), "--to", to2.as_str()];
    wait_events(&url, &range2, 2000);
    let got = read_when_complete(
        &[
            &["--server", url.as_str(), "--substream", "lb"][..],
            &range2,
        ]
        .concat(),
        Duration::from_secs(30),
    );
    let out = sluice(
        &[
            &[
                "cat",
                "--server",
                &url,
                "--type",
                "LB",
                "--select",
                "backend,status",
            ][..],
            &range2,
        ]
        .concat(),
    );
    assert_same(
        &sorted(got),
        &sorted(stdout_lines(&out)),
        "lb after a restart",
    );
    server.terminate(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn disable_enable_rm_and_fallback_fills_exactly_the_gaps() {
    let dir = data_dir("substreams-admin");
    let (mut server, url) = serve(&dir);
    assert_success(&sluice(&[
        "substream",
        "add",
        "errors",
        "--type",
        "WEB",
        "--select",
        ERRORS_SELECT,
        "--where",
        ERRORS_WHERE,
        "--server",
        &url,
    ]));
    let t0 = now();
    send(&url, "2000", "31", t0 - 4);
    let (from, to) = ((t0 - 10).to_string(), (t0 + 10).to_string());
    let range = ["--from", from.as_str(), "--to", to.as_str()];
    wait_events(&url, &range, 2000);
    read_when_complete(
        &[
            &["--server", url.as_str(), "--substream", "errors"][..],
            &range,
        ]
        .concat(),
        Duration::from_secs(30),
    );

    // Disabled: blobs stored from now on get no result.
    assert_success(&sluice(&[
        "substream",
        "disable",
        "errors",
        "--server",
        &url,
    ]));
    let show = sluice(&["substream", "show", "errors", "--server", &url]);
    assert_success(&show);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
    assert_eq!(v["enabled"], false);
    assert!(v["changed"].as_i64() >= v["created"].as_i64());
    let stored_before = v["status"]["stored"].as_u64().expect("stored");
    assert!(stored_before > 0, "{v}");
    send(&url, "2000", "32", t0 - 2);
    // Wait until the new seconds are readable as events.
    let full = |range: &[&str]| {
        let out = sluice(
            &[
                &[
                    "cat",
                    "--server",
                    &url,
                    "--type",
                    "WEB",
                    "--select",
                    ERRORS_SELECT,
                ][..],
                &["--where", ERRORS_WHERE],
                range,
            ]
            .concat(),
        );
        assert_success(&out);
        sorted(stdout_lines(&out))
    };
    wait_events(&url, &range, 4000);
    let expected = full(&range);

    // --no-fallback: the chunks stored while disabled are gaps (exit status 3, one warning each);
    // with fallback: the same output as the client-side selection, with one note per chunk.
    let gaps = sluice(
        &[
            &[
                "cat",
                "--no-fallback",
                "--server",
                &url,
                "--substream",
                "errors",
            ][..],
            &range,
        ]
        .concat(),
    );
    assert_eq!(gaps.status.code(), Some(3), "{}", stderr(&gaps));
    let gap_keys: Vec<String> = stderr(&gaps)
        .lines()
        .filter(|l| l.contains("--no-fallback"))
        .map(|l| l.split(": ").nth(2).expect("key").to_owned())
        .collect();
    assert!(!gap_keys.is_empty());
    let filled = sluice(
        &[
            &["cat", "--server", &url, "--substream", "errors"][..],
            &range,
        ]
        .concat(),
    );
    assert_success(&filled);
    assert_same(
        &sorted(stdout_lines(&filled)),
        &expected,
        "filled by the fallback",
    );
    let note_keys: Vec<String> = stderr(&filled)
        .lines()
        .filter(|l| l.starts_with("sluice: note: "))
        .map(|l| l.split(": ").nth(2).expect("key").to_owned())
        .collect();
    assert_eq!(sorted(note_keys), sorted(gap_keys.clone()));
    let status = serde_json::from_slice::<serde_json::Value>(
        &sluice(&["substream", "show", "errors", "--server", &url]).stdout,
    )
    .expect("json");
    assert_eq!(status["status"]["stored"].as_u64(), Some(stored_before));

    // Enabled again: new blobs get results; a backfill fills the gaps, then reads need no fallback.
    assert_success(&sluice(&[
        "substream",
        "enable",
        "errors",
        "--server",
        &url,
    ]));
    let out = sluice(&[
        "substream",
        "backfill",
        "errors",
        "--from",
        &from,
        "--to",
        &to,
        "--server",
        &url,
    ]);
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        report["stored"].as_u64(),
        Some(gap_keys.len() as u64),
        "{report}"
    );
    let got = read_when_complete(
        &[
            &["--server", url.as_str(), "--substream", "errors"][..],
            &range,
        ]
        .concat(),
        Duration::from_secs(10),
    );
    assert_same(&sorted(got), &expected, "after the backfill");

    // Removed: gone from the registry and from reads.
    assert_success(&sluice(&["substream", "rm", "errors", "--server", &url]));
    let out = sluice(&["substream", "show", "errors", "--server", &url]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("404"), "{}", stderr(&out));
    let out = sluice(
        &[
            &["cat", "--server", &url, "--substream", "errors"][..],
            &range,
        ]
        .concat(),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no substream named"),
        "{}",
        stderr(&out)
    );
    server.terminate(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_registrations_are_refused_and_change_nothing() {
    let dir = data_dir("substreams-bad");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // An empty store first (a data directory sluice serve would create).
    drop(sluice_store::EmbeddedStore::open(&dir).expect("store"));
    let d = dir.to_str().expect("path");
    let py = dir.join("broken.py");
    std::fs::write(
        &py,
        "import no_such_module_anywhere\ndef transform(events, ctx):\n    return []\n",
    )
    .expect("write");
    let pyarg = py.to_str().expect("path");
    for (args, says) in [
        (
            vec!["substream", "add", "a/b", "--select", "status"],
            "contains `/`",
        ),
        (vec!["substream", "add", "x", "--select", "a..b"], "select"),
        (
            vec![
                "substream",
                "add",
                "x",
                "--select",
                "status",
                "--where",
                "status >",
            ],
            "where",
        ),
        (
            vec!["substream", "add", "x", "--python", pyarg],
            "broken.py",
        ),
        (vec!["substream", "add", "x"], "--select"),
        (
            vec![
                "substream",
                "add",
                "x",
                "--select",
                "status",
                "--type",
                "A:B",
            ],
            "type",
        ),
    ] {
        let out = sluice(&[&args[..], &["--data", d]].concat());
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        let list = sluice(&["substream", "list", "--data", d]);
        assert_success(&list);
        assert!(
            stdout_lines(&list).is_empty(),
            "{args:?} changed the registry"
        );
    }
    // The same refusals through the server.
    let (mut server, url) = serve(&dir);
    let out = sluice(&[
        "substream",
        "add",
        "x",
        "--select",
        "a..b",
        "--server",
        &url,
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("select"), "{}", stderr(&out));
    // Admin routes need the server's local secret (its user's, in the data directory).
    let secret = std::fs::read_to_string(dir.join("admin.secret")).expect("the local secret");
    let resp = ureq::put(&format!("{url}/v1/substreams/x%2Fy"))
        .set("authorization", &format!("Bearer {}", secret.trim()))
        .send_string(r#"{"select":["status"]}"#);
    match resp {
        Err(ureq::Error::Status(400, r)) => {
            assert!(r.into_string().expect("body").contains("contains `/`"))
        }
        other => panic!("expected 400, got {other:?}"),
    }
    let list = sluice(&["substream", "list", "--server", &url]);
    assert!(stdout_lines(&list).is_empty());
    server.terminate(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}
