//! The product end to end with real processes: `sluice serve`, fed by `sluice gen --http`,
//! read back with `sluice cat --server` while it runs and `sluice cat --data` after SIGTERM.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{
    assert_success, cat_data, free_port, now, sluice, spawn_serve, stdout_lines, wait_healthy,
};

fn canonical(line: &str) -> String {
    // Same JSON value, independent of key order and number spelling.
    let v: serde_json::Value = serde_json::from_str(line).expect("json line");
    let mut keys: Vec<(String, String)> = v
        .as_object()
        .expect("event")
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    keys.sort();
    format!("{keys:?}")
}

#[test]
fn serve_ingest_read_and_shutdown() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-data");
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let tcp_port = free_port();
    let udp_port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut server = spawn_serve(&[
        "--data",
        dir.to_str().expect("path"),
        "--http",
        &format!("127.0.0.1:{port}"),
        "--grace",
        "1",
        "--tcp",
        &format!("127.0.0.1:{tcp_port}"),
        "--udp",
        &format!("127.0.0.1:{udp_port}"),
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    wait_healthy(&ureq::agent(), &url, deadline, Duration::from_millis(100));

    let now = now();
    let epoch = (now - 3).to_string();
    let gen_args = [
        "gen", "--count", "3000", "--seed", "11", "--rate", "1000", "--epoch", &epoch,
    ];
    let sent = sluice(&[&gen_args[..], &["--http", &url]].concat());
    assert_success(&sent);
    let expected: Vec<String> = stdout_lines(&sluice(&gen_args))
        .iter()
        .map(|l| canonical(l))
        .collect();

    // Readable through the server once the seconds close (grace 1 s).
    let from = (now - 10).to_string();
    let to = (now + 10).to_string();
    let mut got = Vec::new();
    while got.len() < expected.len() {
        assert!(
            Instant::now() < deadline + Duration::from_secs(10),
            "only {} of {} events readable",
            got.len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(300));
        let out = sluice(&["cat", "--server", &url, "--from", &from, "--to", &to]);
        assert_success(&out);
        got = stdout_lines(&out);
    }
    let mut a: Vec<String> = got.iter().map(|l| canonical(l)).collect();
    let mut b = expected.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "every event exactly once, content identical");

    // A second server on the same directory fails before claiming to serve, and says why.
    let second = sluice(&[
        "serve",
        "--data",
        dir.to_str().expect("path"),
        "--http",
        "127.0.0.1:0",
        "--tcp",
        "off",
        "--udp",
        "off",
    ]);
    let second_err = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "a second server on a directory in use must fail"
    );
    assert!(!second_err.contains("serving from"), "{second_err}");
    assert!(
        second_err.contains("in use") || second_err.contains("lock"),
        "{second_err}"
    );

    // `cat --data` on the live directory reads through the server that holds it.
    let live = cat_data(&dir, &from, &to);
    assert_success(&live);
    assert!(String::from_utf8_lossy(&live.stderr).contains("in use by a running server"));
    let mut l: Vec<String> = stdout_lines(&live).iter().map(|l| canonical(l)).collect();
    l.sort();
    assert_eq!(l, b, "cat --data on a live directory");

    let filtered = sluice(&[
        "cat",
        "--server",
        &url,
        "--from",
        &from,
        "--to",
        &to,
        "--type",
        "WEB",
        "--where",
        "status >= 500",
        "--select",
        "status",
    ]);
    assert!(filtered.status.success());
    assert!(stdout_lines(&filtered)
        .iter()
        .all(|l| l.contains("\"status\":5")));

    // The live tail through the server (SSE) starts with the same history, then resumes from
    // its cursor with nothing new to print.
    let tail = sluice(&[
        "tail",
        "--server",
        &url,
        "--from",
        &from,
        "--limit",
        &expected.len().to_string(),
    ]);
    assert_success(&tail);
    let mut t: Vec<String> = stdout_lines(&tail).iter().map(|l| canonical(l)).collect();
    t.sort();
    assert_eq!(t, b, "tail --server delivers the history exactly once");
    let stderr = String::from_utf8_lossy(&tail.stderr);
    let cursor = stderr
        .lines()
        .find_map(|l| l.strip_prefix("sluice: cursor "))
        .expect("a cursor on stderr")
        .to_owned();
    let more = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["emit", "--tcp", &format!("127.0.0.1:{tcp_port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("emit");
    {
        use std::io::Write;
        let mut child = more;
        let line = format!("{{\"type\":\"TAILTEST\",\"epoch\":{},\"n\":1}}\n", now);
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(line.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("emit wait");
        assert_success(&out);
    }
    let resumed = sluice(&[
        "tail", "--server", &url, "--cursor", &cursor, "--limit", "1",
    ]);
    assert_success(&resumed);
    let new_lines = stdout_lines(&resumed);
    assert_eq!(new_lines.len(), 1, "only the new event: {new_lines:?}");
    assert!(new_lines[0].contains("TAILTEST"));

    // SIGTERM: a clean shutdown, and the data directory reads back the same.
    server.sigterm();
    let status = server.0.wait().expect("wait");
    assert!(status.success(), "serve exited with {status:?}");
    assert!(
        !dir.join("SERVER").exists(),
        "a clean shutdown removes the address file"
    );
    let offline = cat_data(&dir, &from, &to);
    assert_success(&offline);
    let mut c: Vec<String> = stdout_lines(&offline)
        .iter()
        .filter(|l| !l.contains("TAILTEST"))
        .map(|l| canonical(l))
        .collect();
    c.sort();
    assert_eq!(c, b);
    assert_eq!(
        stdout_lines(&offline)
            .iter()
            .filter(|l| l.contains("TAILTEST"))
            .count(),
        1
    );
}
