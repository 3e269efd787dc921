//! The live tail with real processes: `sluice tail --server` gets acknowledged events from
//! memory before their second is stored, and every acknowledged event exactly once across a
//! flush, a tail stopped and resumed from its printed cursor around a flush, and a SIGKILLed
//! server whose WAL replays events the tail already had live — several (type, subtype) groups,
//! two pipeline threads, late events.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;
use common::{
    free_port, ids_of, now, post_acked, serve_http_only_on, spawn_collected, text, wait_for, Lines,
    Proc,
};

fn serve(dir: &Path, port: u16, grace: &str) -> Proc {
    serve_http_only_on(dir, port, &["--grace", grace, "--pipeline-threads", "2"])
}

/// POSTs events `ids` of type LIVE over four subtypes, every fifth one two seconds late, and
/// checks that all were acknowledged.
fn post(port: u16, ids: std::ops::Range<i64>) {
    let t = now();
    let body: String = ids
        .clone()
        .map(|i| {
            let subtype = ["w", "x", "y", "z"][(i % 4) as usize];
            let epoch = if i % 5 == 0 { t - 2 } else { t };
            format!(
                "{{\"type\":\"LIVE\",\"subtype\":\"{subtype}\",\"epoch\":{epoch},\"id\":{i}}}\n"
            )
        })
        .collect();
    post_acked(port, &body, ids.count());
}

/// Waits until the server has `n` live subscribers (a tail subscribes once caught up).
fn wait_subscribed(port: u16, n: f64) {
    let base = format!("http://127.0.0.1:{port}");
    wait_for(Duration::from_secs(20), "a live subscriber", || {
        let text = sluice_test_support::metrics::fetch_url(&base);
        sluice_test_support::metrics::try_metric(&text, "sluice_tail_live_subscribers", &[])
            == Some(n)
    });
}

/// `sluice tail --server` of type LIVE from `start` (`--from T` or `--cursor C`).
fn tail(port: u16, start: (&str, &str)) -> (Proc, Lines, Lines) {
    spawn_collected(&[
        "tail",
        "--server",
        &format!("127.0.0.1:{port}"),
        start.0,
        start.1,
        "--type",
        "LIVE",
    ])
}

fn cursor_of(stderr: &str) -> String {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("sluice: cursor "))
        .next_back()
        .expect("cursor on stderr")
        .to_owned()
}

#[test]
fn a_live_tail_gets_events_long_before_their_second_is_stored() {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tail-live-early");
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    // A 30 s grace: nothing is stored for half a minute; only memory can serve the tail.
    let mut server = serve(&dir, port, "30");
    let from = (now() - 2).to_string();
    let (mut t, out, err) = tail(port, ("--from", &from));
    wait_subscribed(port, 1.0);
    let posted = Instant::now();
    post(port, 0..200);
    wait_for(Duration::from_secs(15), "every event, live", || {
        ids_of(&out).len() >= 200
    });
    assert!(
        posted.elapsed() < Duration::from_secs(25),
        "not from the store"
    );
    let base = format!("http://127.0.0.1:{port}");
    let metrics = sluice_test_support::metrics::fetch_url(&base);
    let records =
        sluice_test_support::metrics::metric(&metrics, "sluice_tail_live_records_total", &[]);
    assert!(records >= 1.0, "{records}");
    let stored =
        sluice_test_support::metrics::try_metric(&metrics, "sluice_blobs_written_total", &[]);
    assert!(
        stored.is_none_or(|n| n == 0.0),
        "stored already: {stored:?}"
    );
    let status = t.terminate(Duration::from_secs(5));
    assert!(status.success(), "{}", text(&err));
    let mut got = ids_of(&out);
    got.sort_unstable();
    assert_eq!(got, (0..200).collect::<Vec<i64>>());
    server.terminate(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_live_tail_gets_every_event_once_across_a_flush_a_resume_and_a_sigkill() {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tail-live-once");
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let mut server = serve(&dir, port, "1");
    let from = (now() - 5).to_string();
    let (mut t, out1, err1) = tail(port, ("--from", &from));
    wait_subscribed(port, 1.0);

    // Live, then flushed: the stored chunks must not repeat them.
    post(port, 0..400);
    wait_for(Duration::from_secs(30), "the first batch", || {
        ids_of(&out1).len() >= 400
    });
    std::thread::sleep(Duration::from_secs(3)); // flushed by now; a duplicate would show

    // Had live, then the tail stops before their second is stored: the resumed tail reads the
    // chunks with its cursor and must leave them out.
    post(port, 400..800);
    wait_for(Duration::from_secs(30), "the second batch", || {
        ids_of(&out1).len() >= 800
    });
    let status = t.terminate(Duration::from_secs(5));
    assert!(status.success(), "{}", text(&err1));
    let cursor = cursor_of(&text(&err1));
    assert!(
        cursor.starts_with("t2."),
        "a cursor with live spans: {cursor}"
    );
    // Meanwhile (no tail): stored only; the resumed tail reads them from the store.
    post(port, 800..1000);
    std::thread::sleep(Duration::from_secs(3));
    let (mut t, out2, err2) = tail(port, ("--cursor", &cursor));
    wait_subscribed(port, 1.0);

    // Had live, then the server dies before storing them: the replay stores them again (same
    // WAL records), the tail reconnects with its cursor and must leave them out.
    post(port, 1000..1400);
    wait_for(Duration::from_secs(30), "the third batch", || {
        ids_of(&out2).len() >= 600
    });
    server.0.kill().expect("SIGKILL");
    server.0.wait().expect("reap");
    let mut server = serve(&dir, port, "1");
    post(port, 1400..1600);
    wait_for(Duration::from_secs(60), "every event", || {
        ids_of(&out2).len() >= 800
    });
    std::thread::sleep(Duration::from_secs(3)); // room for a duplicate to show up
    let status = t.terminate(Duration::from_secs(5));
    assert!(status.success(), "{}", text(&err2));
    std::thread::sleep(Duration::from_millis(200));

    let mut got: Vec<i64> = ids_of(&out1).into_iter().chain(ids_of(&out2)).collect();
    got.sort_unstable();
    let dups: Vec<i64> = got
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(
        dups.is_empty(),
        "{} duplicates: {:?}",
        dups.len(),
        &dups[..dups.len().min(20)]
    );
    assert_eq!(
        got,
        (0..1600).collect::<Vec<i64>>(),
        "every acknowledged event once"
    );
    assert!(
        text(&err2).contains("reconnected to http://127.0.0.1:"),
        "{}",
        text(&err2)
    );
    server.terminate(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tail_too_slow_for_its_queue_is_dropped_with_a_reason_and_ingest_goes_on() {
    use std::io::{Read, Write};
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tail-live-slow");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("sluice.toml");
    std::fs::write(&config, "tail_live_queue_records = 2\n").expect("config");
    let port = free_port();
    let data = dir.join("data");
    let mut server = serve_http_only_on(
        &data,
        port,
        &["--config", config.to_str().expect("path"), "--grace", "1"],
    );
    // A client that asks for the stream and then reads nothing.
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        slow,
        "GET /v1/tail?type=SLOW HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .expect("request");
    wait_subscribed(port, 1.0);
    // Acknowledged while the tail does not read: ingest never waits for it.
    let pad = "p".repeat(200);
    for k in 0..300 {
        let body: String = (0..100)
            .map(|i| {
                format!(
                    "{{\"type\":\"SLOW\",\"id\":{},\"pad\":\"{pad}\"}}\n",
                    k * 100 + i
                )
            })
            .collect();
        post_acked(port, &body, 100);
    }
    let base = format!("http://127.0.0.1:{port}");
    wait_for(Duration::from_secs(30), "the slow tail dropped", || {
        let text = sluice_test_support::metrics::fetch_url(&base);
        sluice_test_support::metrics::try_metric(
            &text,
            "sluice_tail_live_dropped_total",
            &[("reason", "slow")],
        )
        .is_some_and(|n| n >= 1.0)
    });
    // Reading now, the stream says why, once, and goes on from the store.
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let notice = loop {
        assert!(
            Instant::now() < deadline,
            "no notice in {} bytes",
            seen.len()
        );
        let n = slow.read(&mut buf).expect("read");
        assert!(n > 0, "the stream ended without a notice");
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(at) = text
            .find("event: notice\r\ndata: ")
            .or_else(|| text.find("event: notice\ndata: "))
        {
            if let Some(end) = text[at..]
                .find("\n\n")
                .or_else(|| text[at..].find("\r\n\r\n"))
            {
                break text[at..at + end].to_owned();
            }
        }
    };
    assert!(notice.contains("\"key\":\"live\""), "{notice}");
    assert!(notice.contains("slow subscriber"), "{notice}");
    drop(slow);
    server.terminate(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}
