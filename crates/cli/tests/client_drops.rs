//! `POST /v1/drops` on a real `sluice serve --auth`: what emitters report dropped appears in
//! `GET /v1/counts` and `sluice counts` as `client:<reason>` for its (epoch, dc, type,
//! subtype), also after a restart; bad bodies are refused naming the field; a read-only token
//! is refused; `sluice_client_drops_total{reason}` counts the events.
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod process;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use process::{sluice_bin, Server};
use serde_json::{json, Value};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `method path` with `token` and `body` (JSON): (status, body).
fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> (u16, String) {
    let req = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
        .request(method, &format!("http://{}{path}", server.addr))
        .set("authorization", &format!("Bearer {token}"))
        .set("content-type", "application/json");
    let r = match body {
        Some(b) => req.send_string(b),
        None => req.call(),
    };
    match r {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

/// A token with `scopes`, made through the admin API with the local secret.
fn token(server: &Server, data: &Path, name: &str, scopes: &str) -> String {
    let secret = local_secret(data);
    let body = json!({"name": name, "scopes": scopes}).to_string();
    let (code, text) = call(server, "POST", "/v1/tokens", &secret, Some(&body));
    assert_eq!(code, 201, "{text}");
    serde_json::from_str::<Value>(&text).unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_string()
}

fn local_secret(data: &Path) -> String {
    std::fs::read_to_string(data.join("admin.secret"))
        .expect("the server writes its local secret")
        .trim()
        .to_string()
}

/// `sluice counts ARGS` with `SLUICE_TOKEN=token`: its JSON lines.
fn sluice_counts(args: &[&str], token: &str) -> Vec<Value> {
    let out = Command::new(sluice_bin())
        .arg("counts")
        .args(args)
        .env("SLUICE_TOKEN", token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    process::lines(&String::from_utf8_lossy(&out.stdout))
}

/// The `dropped` map of the row of (`epoch`, `dc`, `type`, `subtype`) among `rows`.
fn dropped<'a>(rows: &'a [Value], epoch: i64, dc: &str, t: &str, s: &str) -> Option<&'a Value> {
    rows.iter()
        .find(|r| r["epoch"] == epoch && r["dc"] == dc && r["type"] == t && r["subtype"] == s)
        .map(|r| &r["dropped"])
}

#[test]
fn reported_drops_reach_the_counts() {
    let dir = sluice_test_support::temp_dir("client-drops");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\nudp = \"off\"\ngrace_ms = 100\ndc = \"ams\"\n"),
    )
    .unwrap();
    let server = Server::start_with(&config, &data, &["--auth"]);
    let ingest = token(&server, &data, "emitter", "ingest");
    let read = token(&server, &data, "reader", "read");
    let e = now() - 5;
    let rfc3339 = {
        let out = Command::new("date")
            .args(["-u", "-d", &format!("@{e}"), "+%Y-%m-%dT%H:%M:%S.25Z"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let body = json!({"drops": [
        {"epoch": e, "dc": "ams", "type": "WEB", "subtype": "request", "reason": "retry_budget", "count": 3},
        // The server's dc when left out; merged with the record above.
        {"epoch": e * 1000 + 250, "type": "WEB", "subtype": "request", "reason": "retry_budget", "count": 2},
        {"epoch": rfc3339, "type": "WEB", "subtype": "", "reason": "queue_full", "count": 1},
        {"epoch": e, "dc": "ams", "type": "WEB", "subtype": "", "reason": "made_up", "count": 4},
    ]})
    .to_string();

    // A read-only token may not report; nothing is counted from refused requests.
    let (code, text) = call(&server, "POST", "/v1/drops", &read, Some(&body));
    assert_eq!(code, 403, "{text}");
    for (bad, field) in [
        (
            r#"{"drops":[{"epoch":1,"type":"WEB","reason":"retry_budget","count":1}]}"#,
            "drops[0].epoch",
        ),
        (
            r#"{"drops":[{"epoch":"soon","type":"WEB","reason":"x","count":1}]}"#,
            "RFC 3339",
        ),
        (
            r#"{"drops":[{"type":"WEB","reason":"x","count":1}]}"#,
            "drops[0].epoch: missing",
        ),
        (
            r#"{"drops":[{"epoch":0,"type":"WEB","reason":"Bad!","count":1}]}"#,
            "drops[0].epoch",
        ),
        (r#"{"events":[]}"#, "unknown field \"events\""),
    ] {
        let (code, text) = call(&server, "POST", "/v1/drops", &ingest, Some(bad));
        assert_eq!(code, 400, "{bad}: {text}");
        let msg = serde_json::from_str::<Value>(&text).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(msg.contains(field), "{bad}: {msg}");
    }
    let bad_reason = json!({"drops": [{"epoch": e, "type": "WEB", "reason": "Bad!", "count": 1}]});
    let (code, text) = call(
        &server,
        "POST",
        "/v1/drops",
        &ingest,
        Some(&bad_reason.to_string()),
    );
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("drops[0].reason"), "{text}");

    let (code, text) = call(&server, "POST", "/v1/drops", &ingest, Some(&body));
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"accepted": 4})
    );

    // Written before the answer: the counts show them at once.
    let path = format!("/v1/counts?from={e}&to={}", e + 1);
    let (code, text) = call(&server, "GET", &path, &read, None);
    assert_eq!(code, 200, "{text}");
    let rows = process::lines(&text);
    let want_request = json!({"client:retry_budget": 5});
    let want_bare = json!({"client:queue_full": 1, "client:made_up": 4});
    assert_eq!(
        dropped(&rows, e, "ams", "WEB", "request"),
        Some(&want_request),
        "{rows:?}"
    );
    assert_eq!(
        dropped(&rows, e, "ams", "WEB", ""),
        Some(&want_bare),
        "{rows:?}"
    );

    let url = format!("http://{}", server.addr);
    let (from, to) = (e.to_string(), (e + 1).to_string());
    let cli = sluice_counts(&["--server", &url, "--from", &from, "--to", &to], &read);
    assert_eq!(
        dropped(&cli, e, "ams", "WEB", "request"),
        Some(&want_request),
        "{cli:?}"
    );

    let secret = local_secret(&data);
    let (_, metrics) = call(&server, "GET", "/metrics", &secret, None);
    let series = |s: &str| sluice_test_support::metrics::series(&metrics, s);
    assert_eq!(
        series("sluice_client_drops_total{reason=\"retry_budget\"}"),
        5.0
    );
    assert_eq!(
        series("sluice_client_drops_total{reason=\"queue_full\"}"),
        1.0
    );
    assert_eq!(series("sluice_client_drops_total{reason=\"other\"}"), 4.0);

    // Kept in the store: read from the data directory once the server is gone.
    server.stop();
    let data_s = data.to_str().unwrap();
    let stored = sluice_counts(
        &[
            "--data", data_s, "--dc", "ams", "--from", &from, "--to", &to,
        ],
        "",
    );
    assert_eq!(
        dropped(&stored, e, "ams", "WEB", "request"),
        Some(&want_request),
        "{stored:?}"
    );
    assert_eq!(
        dropped(&stored, e, "ams", "WEB", ""),
        Some(&want_bare),
        "{stored:?}"
    );
}
