//! `sluice tail --server` across a server restart, with real processes: the tail starts before
//! the server (it waits and retries), follows it, survives SIGTERM and a restart of the server
//! on the same data directory and port (it gets `event: shutdown`, reconnects from its cursor),
//! and prints every acknowledged event exactly once. SIGTERM to the tail prints its cursor, and
//! a tail resumed from that cursor prints only what came after.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;
use common::{
    free_port, ids_of, now, post_acked, serve_http_only_on, spawn_collected, text, wait_for, Proc,
};

fn serve(dir: &Path, port: u16) -> Proc {
    serve_http_only_on(dir, port, &["--grace", "1"])
}

/// POSTs events `ids` (epoch now) and checks that all were acknowledged.
fn post(port: u16, ids: std::ops::Range<i64>) {
    let epoch = now();
    let body: String = ids
        .clone()
        .map(|i| format!("{{\"type\":\"RESTART\",\"epoch\":{epoch},\"id\":{i}}}\n"))
        .collect();
    post_acked(port, &body, ids.count());
}

#[test]
fn tail_server_gets_every_event_exactly_once_across_a_restart() {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tail-restart");
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let from = (now() - 2).to_string();

    // The tail starts first, against no server (no scheme in the address): it keeps retrying.
    let (mut tail, out, err) = spawn_collected(&[
        "tail",
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        &from,
        "--type",
        "RESTART",
    ]);
    wait_for(Duration::from_secs(10), "a reconnect message", || {
        text(&err).contains("reconnecting to")
    });
    assert!(
        tail.0.try_wait().expect("wait").is_none(),
        "the tail gave up on a stopped server: {}",
        text(&err)
    );

    let mut server = serve(&dir, port);
    post(port, 0..300);
    wait_for(Duration::from_secs(30), "the first batch", || {
        ids_of(&out).len() >= 300
    });

    // Acknowledged just before SIGTERM (still in the grace period): stored by the clean shutdown.
    post(port, 300..600);
    let status = server.terminate(Duration::from_secs(10));
    assert!(status.success(), "serve exited with {status:?}");
    wait_for(Duration::from_secs(10), "the shutdown notice", || {
        text(&err).contains("shutting down")
    });
    std::thread::sleep(Duration::from_millis(500)); // the tail now retries a closed port
    assert!(
        tail.0.try_wait().expect("wait").is_none(),
        "the tail exited on shutdown: {}",
        text(&err)
    );

    let server = serve(&dir, port);
    post(port, 600..900);
    wait_for(Duration::from_secs(40), "every event", || {
        ids_of(&out).len() >= 900
    });
    std::thread::sleep(Duration::from_millis(1500)); // room for a duplicate to show up
    let status = tail.terminate(Duration::from_secs(5));
    assert!(
        status.success(),
        "tail exited with {status:?}: {}",
        text(&err)
    );
    std::thread::sleep(Duration::from_millis(200)); // the collector threads drain the pipes

    let mut got = ids_of(&out);
    got.sort_unstable();
    assert_eq!(
        got,
        (0..900).collect::<Vec<i64>>(),
        "every acknowledged event exactly once"
    );
    let stderr = text(&err);
    assert!(
        stderr.contains("reconnected to http://127.0.0.1:"),
        "{stderr}"
    );
    let cursor = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("sluice: cursor "))
        .next_back()
        .expect("cursor on stderr");

    // The printed cursor resumes after everything printed.
    post(port, 900..901);
    let (mut resumed, out, err) = spawn_collected(&[
        "tail",
        "--server",
        &format!("http://127.0.0.1:{port}"),
        "--cursor",
        cursor,
        "--type",
        "RESTART",
        "--limit",
        "1",
    ]);
    let status = resumed
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the resumed tail did not stop: {}", text(&err)));
    std::thread::sleep(Duration::from_millis(200));
    assert!(status.success(), "{}", text(&err));
    assert_eq!(ids_of(&out), vec![900], "only what came after the cursor");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tail_against_a_stopped_server_retries_until_its_deadline() {
    let port = free_port();
    let started = Instant::now();
    let (mut tail, out, err) = spawn_collected(&[
        "tail",
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "-1m",
        "--until",
        "+2s",
    ]);
    let status = tail
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("the tail did not stop at --until: {}", text(&err)));
    std::thread::sleep(Duration::from_millis(200));
    assert!(status.success(), "{status:?}: {}", text(&err));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "it retried instead of exiting at once"
    );
    let stderr = text(&err);
    assert!(
        stderr.contains("reconnecting to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sluice: cursor t1."),
        "the start cursor is printed: {stderr}"
    );
    assert!(out.lock().expect("out").is_empty());
}

#[test]
fn tail_server_gets_every_event_exactly_once_across_a_sigkilled_server() {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tail-sigkill");
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let from = (now() - 2).to_string();
    let mut server = serve(&dir, port);
    let (mut tail, out, err) = spawn_collected(&[
        "tail",
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        &from,
        "--type",
        "RESTART",
    ]);
    post(port, 0..300);
    wait_for(Duration::from_secs(30), "the first batch", || {
        ids_of(&out).len() >= 300
    });
    // Acknowledged (durable in the WAL), then the server dies without a word: the tail's
    // stream breaks mid-chunk ("Error while decoding chunks" in ureq's terms).
    post(port, 300..600);
    server.0.kill().expect("SIGKILL");
    server.0.wait().expect("reap");
    wait_for(
        Duration::from_secs(10),
        "the broken-connection notice",
        || {
            text(&err).contains("the connection to the server broke (stopped or restarted?)")
                || text(&err).contains("the server ended the stream")
        },
    );
    std::thread::sleep(Duration::from_millis(700)); // it retries a closed port meanwhile
    assert!(
        tail.0.try_wait().expect("wait").is_none(),
        "the tail exited when the server was killed: {}",
        text(&err)
    );

    let server = serve(&dir, port); // replays the WAL: 300..600 become readable
    post(port, 600..900);
    wait_for(Duration::from_secs(60), "every event", || {
        ids_of(&out).len() >= 900
    });
    std::thread::sleep(Duration::from_millis(1500)); // room for a duplicate to show up
    let status = tail.terminate(Duration::from_secs(5));
    assert!(status.success(), "{status:?}: {}", text(&err));
    std::thread::sleep(Duration::from_millis(200));
    let mut got = ids_of(&out);
    got.sort_unstable();
    assert_eq!(
        got,
        (0..900).collect::<Vec<i64>>(),
        "every acknowledged event exactly once"
    );
    let stderr = text(&err);
    assert!(
        stderr.contains("reconnected to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(!stderr.contains("Error: "), "{stderr}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tail_gives_up_after_retry_for_and_prints_its_cursor() {
    let port = free_port();
    let (mut tail, out, err) = spawn_collected(&[
        "tail",
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        "-1m",
        "--retry-for",
        "1",
    ]);
    let status = tail
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the tail did not give up: {}", text(&err)));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(status.code(), Some(1), "{}", text(&err));
    let stderr = text(&err);
    assert!(
        stderr.contains("reconnecting to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.contains("gave up on http://127.0.0.1:"), "{stderr}");
    assert!(stderr.contains("sluice: cursor t1."), "{stderr}");
    assert!(out.lock().expect("out").is_empty());
}
