//! `epoch` as people write it, over HTTP on a real `sluice serve`: milliseconds, float seconds
//! and RFC 3339 strings are accepted and read back as whole seconds; anything else gets 400
//! with a hint naming the accepted forms.
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod process;

use std::time::{Duration, Instant};

use process::Server;
use serde_json::Value;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `date -u` of Unix second `e` in `format`.
fn date(e: i64, format: &str) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{e}"), format])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn every_form_reads_back_as_whole_seconds() {
    let dir = sluice_test_support::temp_dir("epoch-forms");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\nudp = \"off\"\ngrace_ms = 100\n"),
    )
    .unwrap();
    let server = Server::start(&config, &data);
    let e = now() - 5;
    let forms = [
        e.to_string(),
        (e * 1000 + 999).to_string(),
        format!("{e}.5"),
        format!("\"{}\"", date(e, "+%Y-%m-%dT%H:%M:%S.75Z")),
        format!("\"{}\"", date(e + 3600, "+%Y-%m-%dT%H:%M:%S+01:00")),
    ];
    let body: String = forms
        .iter()
        .enumerate()
        .map(|(n, f)| format!("{{\"type\":\"WEB\",\"epoch\":{f},\"n\":{n}}}\n"))
        .collect();
    let r = process::try_request(server.addr, "POST", "/v1/events", body.as_bytes()).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let answer: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(answer["accepted"], forms.len(), "{answer}");

    let deadline = Instant::now() + Duration::from_secs(20);
    let events = loop {
        let events = server.read(e, e + 1);
        if events.len() >= forms.len() || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut ns: Vec<i64> = events.iter().map(|v| v["n"].as_i64().unwrap()).collect();
    ns.sort_unstable();
    assert_eq!(ns, vec![0, 1, 2, 3, 4], "{events:?}");
    for v in &events {
        // The stored field holds the normalised second, an integer.
        assert!(v["epoch"].is_i64() && v["epoch"] == e, "{v}");
    }

    // A value that is none of these: 400, the hint naming the accepted forms.
    let r = process::try_request(
        server.addr,
        "POST",
        "/v1/events",
        br#"{"type":"WEB","epoch":"tomorrow"}"#,
    )
    .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    let answer: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(answer["dropped"][0]["reason"], "bad_epoch", "{answer}");
    let detail = answer["dropped"][0]["detail"].as_str().unwrap();
    for form in ["milliseconds", "float seconds", "RFC 3339"] {
        assert!(detail.contains(form), "{detail}");
    }
    server.stop();
}
