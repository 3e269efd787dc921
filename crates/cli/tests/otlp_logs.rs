//! `POST /v1/logs` (OTLP/HTTP logs) on a real `sluice serve`:
//! - the OpenTelemetry Python SDK (`opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-http`:
//!   `LoggerProvider`, the `logging` handler, `OTLPLogExporter`, protobuf bodies, plain and gzip)
//!   logs with a resource and inside a span; the events read back carry the mapped type, dc,
//!   subtype, body (a string and a structured one), severity, trace and span ids, attributes,
//!   resource and scope; the protobuf answers (partial success, `google.rpc.Status`) read back
//!   with the `opentelemetry-proto` package's generated classes;
//! - OTLP/JSON bodies, plain and gzip; a partial rejection (an attribute nested too deeply, a time
//!   outside the ingest window, records over `otlp_max_records`) answered with `partialSuccess`;
//!   unreadable bodies → 400, another content type → 415; the counters by reason;
//! - after a SIGKILL and a restart (WAL replay), every record is there once.
//! - under `auth`, the `ingest` scope and the token's type reach; bad `otlp_*` settings refuse
//!   the start; backpressure (`max_pending_bytes` full) answers 503 with `Retry-After`.
//!
//! Needs a Python with the two OpenTelemetry packages (`$SLUICE_PYTHON`, else `python/.venv`,
//! else `scripts/python-setup.sh`, which installs them). Missing, it fails.

mod process;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use process::Server;
use serde_json::{json, Value};

/// Request headers, as (name, value).
type Headers<'a> = &'a [(&'a str, &'a str)];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const IMPORTS: &str =
    "import opentelemetry.sdk._logs, opentelemetry.exporter.otlp.proto.http._log_exporter";

fn can_import(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", IMPORTS])
        .status()
        .is_ok_and(|s| s.success())
}

/// A Python with the OpenTelemetry SDK and its OTLP/HTTP exporter.
fn python() -> PathBuf {
    let py = match std::env::var_os("SLUICE_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = repo_root().join("python/.venv/bin/python");
            if venv.exists() && can_import(&venv) {
                venv
            } else {
                let out = Command::new(repo_root().join("scripts/python-setup.sh"))
                    .output()
                    .expect("scripts/python-setup.sh");
                assert!(
                    out.status.success(),
                    "scripts/python-setup.sh failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let text = String::from_utf8_lossy(&out.stdout);
                PathBuf::from(text.lines().last().unwrap_or("").trim())
            }
        }
    };
    assert!(
        can_import(&py),
        "{} cannot import the OpenTelemetry SDK and OTLP exporter: run scripts/python-setup.sh",
        py.display()
    );
    py
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `POST /v1/logs` with `headers` and `body`: (status, content type, body).
fn post_logs(server: &Server, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut req = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
        .post(&format!("http://{}/v1/logs", server.addr));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let resp = match req.send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST /v1/logs: {e}"),
    };
    let status = resp.status();
    let ctype = resp.content_type().to_owned();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut out).unwrap();
    (status, ctype, out)
}

fn post_json(server: &Server, body: &Value) -> (u16, Value) {
    let (status, ctype, out) = post_logs(
        server,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(ctype, "application/json");
    (status, serde_json::from_slice(&out).unwrap())
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// The events of the last few minutes, by type.
fn by_type(server: &Server) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in server.read(now() - 600, now() + 60) {
        out.entry(e["type"].as_str().unwrap_or("").to_owned())
            .or_default()
            .push(e);
    }
    out
}

/// Waits (60 s at most) until the store holds `want` events per type.
fn wait_for_types(server: &Server, want: &[(&str, usize)]) -> BTreeMap<String, Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = by_type(server);
        let counts: Vec<(&str, usize)> = want
            .iter()
            .map(|(t, _)| (*t, got.get(*t).map_or(0, Vec::len)))
            .collect();
        if counts == want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "wanted {want:?}, have {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs the SDK script: its JSON line (trace and span ids, the export results).
fn send_with_sdk(py: &Path, server: &Server, service: &str, env: &str, compression: &str) -> Value {
    let out = Command::new(py)
        .arg(repo_root().join("crates/cli/tests/otlp/send_logs.py"))
        .arg(format!("http://{}/v1/logs", server.addr))
        .args([service, env, compression])
        .output()
        .expect("run send_logs.py");
    assert!(
        out.status.success(),
        "send_logs.py failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("")).unwrap()
}

fn find<'a>(events: &'a [Value], subtype: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["subtype"] == subtype)
        .unwrap_or_else(|| panic!("no {subtype} event in {events:?}"))
}

/// An OTLP/JSON request of one resource (`service`) with `records`.
fn json_request(service: &str, records: Vec<Value>) -> Value {
    json!({ "resourceLogs": [{
        "resource": { "attributes": [
            { "key": "service.name", "value": { "stringValue": service } },
            { "key": "cloud.region", "value": { "stringValue": "eu-west-1" } }
        ]},
        "scopeLogs": [{ "scope": { "name": "curl", "version": "1" }, "logRecords": records }]
    }]})
}

fn nano(secs: i64) -> String {
    (secs as u128 * 1_000_000_000 + 250_000_000).to_string()
}

#[test]
fn otlp_logs_from_the_python_sdk_and_json() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {data:?}\ntcp = \"off\"\nudp = \"off\"\ngrace_ms = 100\ndc = \"here\"\n\
             otlp_max_records = 4\notlp_max_attribute_depth = 2\nmax_body_bytes = 8192\n"
        ),
    )
    .unwrap();
    let mut server = Server::start(&config, &data);

    // The SDK over protobuf, plain and gzip.
    let sent = send_with_sdk(&py, &server, "shop-api", "prod", "none");
    assert_eq!(sent["results"], json!(["SUCCESS", "SUCCESS", "SUCCESS"]));
    // Protobuf answers, read with opentelemetry-proto's own generated classes: a partial
    // success (the record nested three maps deep is over otlp_max_attribute_depth 2) and a
    // google.rpc.Status for a bad body.
    let raw = &sent["raw"];
    assert_eq!(raw["status"], 200, "{raw}");
    assert_eq!(raw["content_type"], "application/x-protobuf");
    assert_eq!(raw["rejected"], 1, "{raw}");
    assert!(
        raw["message"].as_str().unwrap().contains("too_deep 1"),
        "{raw}"
    );
    assert_eq!(
        (&raw["bad_status"], &raw["bad_code"]),
        (&json!(400), &json!(3))
    );
    assert!(
        raw["bad_message"].as_str().unwrap().contains("protobuf"),
        "{raw}"
    );
    let gz = send_with_sdk(&py, &server, "billing:v2", "staging", "gzip");
    assert_eq!(gz["results"], json!(["SUCCESS", "SUCCESS", "SUCCESS"]));

    // OTLP/JSON: int64 as strings, hex ids, a structured body; one record nests too deeply, one
    // is 30 days old (outside the ingest window), one is beyond otlp_max_records.
    let t = now();
    let deep = json!({ "arrayValue": { "values": [ { "arrayValue": { "values": [
        { "arrayValue": { "values": [ { "intValue": "1" } ] } } ] } } ] } });
    let records = vec![
        json!({ "timeUnixNano": nano(t), "severityNumber": 9, "severityText": "Info",
                "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
                "body": { "kvlistValue": { "values": [ { "key": "n", "value": { "intValue": "42" } } ] } },
                "attributes": [ { "key": "http.status", "value": { "intValue": "503" } } ] }),
        json!({ "timeUnixNano": nano(t), "body": { "stringValue": "deep" },
                "attributes": [ { "key": "x", "value": deep } ] }),
        json!({ "timeUnixNano": nano(t - 30 * 86_400), "body": { "stringValue": "old" } }),
        json!({ "observedTimeUnixNano": nano(t), "body": { "stringValue": "no severity" } }),
        json!({ "timeUnixNano": nano(t), "body": { "stringValue": "one too many" } }),
    ];
    let (status, answer) = post_json(&server, &json_request("curl-json", records));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["partialSuccess"]["rejectedLogRecords"], "3",
        "{answer}"
    );
    let msg = answer["partialSuccess"]["errorMessage"].as_str().unwrap();
    for reason in ["too_deep 1", "bad_epoch 1", "too_many 1"] {
        assert!(msg.contains(reason), "{msg}");
    }

    // Events larger than the request (the resource's ~3 KiB of attributes copied into each):
    // 4 events of ~3.3 KiB are over max_body_bytes (8 KiB), so they go as two ingest payloads.
    let mut big = json_request(
        "curl-split",
        (0..4)
            .map(|i| json!({ "timeUnixNano": nano(t), "body": { "stringValue": format!("part {i}") } }))
            .collect(),
    );
    let attrs = big["resourceLogs"][0]["resource"]["attributes"]
        .as_array_mut()
        .unwrap();
    for i in 0..12 {
        attrs.push(json!({ "key": format!("k{i}"), "value": { "stringValue": "v".repeat(250) } }));
    }
    assert!(big.to_string().len() < 8192);
    let (status, answer) = post_json(&server, &big);
    assert_eq!((status, answer), (200, json!({})));

    // Gzip JSON, all accepted: an empty response.
    let body = json_request(
        "curl-gzip",
        vec![
            json!({ "timeUnixNano": t.to_string() + "000000000", "severityText": "DEBUG",
                     "body": { "stringValue": "zipped" } }),
        ],
    );
    let (status, ctype, out) = post_logs(
        &server,
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        &gzip(body.to_string().as_bytes()),
    );
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), json!({}));

    // Unreadable bodies.
    let bad: [(Headers, &[u8], u16); 5] = [
        (
            &[("content-type", "application/x-protobuf")],
            b"\xff\xff\xff\xff",
            400,
        ),
        (
            &[("content-type", "application/json")],
            b"{\"resourceLogs\": [",
            400,
        ),
        (
            &[("content-type", "application/json")],
            b"{\"resourceLogs\":[{\"scopeLogs\":[{\"logRecords\":[{\"traceId\":\"zz\"}]}]}]}",
            400,
        ),
        (
            &[
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            b"not gzip",
            400,
        ),
        (&[("content-type", "text/plain")], b"hello", 415),
    ];
    for (headers, body, want) in bad {
        let (status, _, out) = post_logs(&server, headers, body);
        assert_eq!(status, want, "{}", String::from_utf8_lossy(&out));
    }
    // Over max_body_bytes as received: the server's 413.
    let (status, _, _) = post_logs(
        &server,
        &[("content-type", "application/json")],
        &[b' '; 9000],
    );
    assert_eq!(status, 413);
    // Over max_body_bytes once decompressed: 413 (2 MiB of spaces gzip to ~2 KiB).
    let (status, _, out) = post_logs(
        &server,
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        &gzip(&vec![b' '; 2 << 20]),
    );
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&out));
    // A JSON 400 carries a google.rpc.Status.
    let (status, answer) = post_json(&server, &json!({ "resourceLogs": {} }));
    assert_eq!(status, 400);
    assert_eq!(answer["code"], 3, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("OTLP/JSON"));

    let want = [
        ("billing_v2", 3),
        ("curl-gzip", 1),
        ("curl-json", 2),
        ("curl-split", 4),
        ("raw-proto", 1),
        ("shop-api", 3),
    ];
    let got = wait_for_types(&server, &want);

    // The SDK's records.
    let shop = &got["shop-api"];
    let warn = find(shop, "warn");
    assert_eq!(warn["dc"], "prod");
    assert_eq!(warn["body"], "payment slow for order-7");
    assert_eq!(warn["severity_text"], "WARN");
    assert_eq!(warn["severity_number"], 13);
    assert_eq!(warn["trace_id"], sent["trace_id"]);
    assert_eq!(warn["span_id"], sent["span_id"]);
    assert_eq!(warn["attributes"]["order_id"], 7);
    assert_eq!(warn["attributes"]["amount"], 12.5);
    assert_eq!(warn["attributes"]["tags"], json!(["a", "b"]));
    assert_eq!(warn["resource"]["service.name"], "shop-api");
    assert_eq!(warn["resource"]["host.name"], "box1");
    assert_eq!(warn["scope"]["name"], "shop.checkout");
    let nanos = warn["time_unix_nano"].as_u64().unwrap();
    assert_eq!(warn["epoch"].as_u64().unwrap(), nanos / 1_000_000_000);
    let err = find(shop, "error");
    assert_eq!(
        err["body"],
        json!({ "event": "refund", "items": [1, 2], "ok": false })
    );
    assert_eq!(err["severity_number"], 17);
    assert_eq!(err["trace_id"], sent["trace_id"]);
    let info = find(shop, "info");
    assert_eq!(info["body"], "no span here");
    assert!(info.get("trace_id").is_none(), "{info}");
    // gzip from the SDK; `:` in service.name made `_` by the tag rule.
    let billing = &got["billing_v2"];
    assert!(billing.iter().all(|e| e["dc"] == "staging"));
    assert_eq!(find(billing, "warn")["trace_id"], gz["trace_id"]);

    // OTLP/JSON records.
    let json_events = &got["curl-json"];
    let info = find(json_events, "info");
    assert_eq!(info["dc"], "eu-west-1");
    assert_eq!(info["body"], json!({ "n": 42 }));
    assert_eq!(info["trace_id"], "5b8efff798038103d269b633813fc60c");
    assert_eq!(info["span_id"], "eee19b7ec3c1b174");
    assert_eq!(info["attributes"]["http.status"], 503);
    assert_eq!(info["severity_number"], 9);
    assert_eq!(info["scope"], json!({ "name": "curl", "version": "1" }));
    let plain = find(json_events, "log");
    assert_eq!(plain["body"], "no severity");
    assert_eq!(plain["epoch"], t);
    assert_eq!(find(&got["curl-gzip"], "debug")["body"], "zipped");

    // The fields are queryable as any event's: `--where` on an attribute, a dotted resource key
    // (quoted), the trace id.
    let matching = |filter: &str| {
        let q: String = filter
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let path = format!(
            "/v1/events?from={}&to={}&where={q}",
            now() - 600,
            now() + 60
        );
        let r = server.get(&path);
        assert_eq!(r.status, 200, "{filter}: {}", r.text());
        process::lines(&r.text()).len()
    };
    assert_eq!(matching("attributes.order_id == 7"), 2); // both SDK runs
    assert_eq!(matching(r#"resource."service.name" == "shop-api""#), 3);
    let trace = sent["trace_id"].as_str().unwrap();
    assert_eq!(matching(&format!(r#"trace_id == "{trace}""#)), 2);

    // The counters.
    let metric = |name: &str| server.metric(name);
    assert_eq!(
        metric("sluice_otlp_log_records_total{outcome=\"accepted\"}"),
        14.0
    );
    // Ingest payloads: one per SDK request (6), the raw protobuf one, the partial JSON one, two
    // for the split one, the gzip one.
    assert_eq!(metric("sluice_payloads_total{transport=\"otlp\"}"), 11.0);
    assert_eq!(
        metric("sluice_events_in_total{transport=\"otlp\",type=\"curl-split\"}"),
        4.0
    );
    assert_eq!(
        metric("sluice_otlp_log_records_total{outcome=\"rejected\"}"),
        4.0
    );
    assert_eq!(
        metric("sluice_otlp_rejected_total{reason=\"too_deep\"}"),
        2.0
    );
    for reason in ["too_many", "bad_epoch"] {
        assert_eq!(
            metric(&format!(
                "sluice_otlp_rejected_total{{reason=\"{reason}\"}}"
            )),
            1.0,
            "{reason}"
        );
    }
    assert_eq!(
        metric("sluice_otlp_refused_total{reason=\"bad_body\"}"),
        6.0
    );
    assert_eq!(
        metric("sluice_otlp_refused_total{reason=\"unsupported_media_type\"}"),
        1.0
    );
    assert_eq!(
        metric("sluice_otlp_refused_total{reason=\"too_large\"}"),
        1.0
    );

    // The WAL holds plain events: after a SIGKILL and a restart, every record is there once.
    server.kill();
    let server = Server::start(&config, &data);
    server.wait_idle(Duration::from_secs(60));
    let again = by_type(&server);
    for (t, n) in want {
        assert_eq!(again.get(t).map_or(0, Vec::len), n, "{t} after a restart");
    }
    server.stop();
}

/// `POST path` with a bearer token: the status.
fn post_with_token(server: &Server, path: &str, token: &str, body: &str) -> (u16, String) {
    let r = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
        .post(&format!("http://{}{path}", server.addr))
        .set("authorization", &format!("Bearer {token}"))
        .set("content-type", "application/json")
        .send_string(body);
    match r {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("POST {path}: {e}"),
    }
}

#[test]
fn otlp_logs_need_the_ingest_scope() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"off\"\nudp = \"off\"\ngrace_ms = 100\nauth = true\n"),
    )
    .unwrap();
    let server = Server::start(&config, &data);
    let secret = std::fs::read_to_string(data.join("admin.secret"))
        .expect("the server writes its local secret")
        .trim()
        .to_string();
    let token = |name: &str, scopes: &str| {
        let body = json!({ "name": name, "scopes": scopes }).to_string();
        let (code, text) = post_with_token(&server, "/v1/tokens", &secret, &body);
        assert_eq!(code, 201, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["secret"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let reader = token("reader", "read");
    let ingester = token("ingester", "ingest");
    let body = json_request(
        "authed",
        vec![json!({ "timeUnixNano": nano(now()), "body": { "stringValue": "hi" } })],
    )
    .to_string();
    let (code, _, _) = post_logs(
        &server,
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(code, 401, "no token");
    let (code, text) = post_with_token(&server, "/v1/logs", &reader, &body);
    assert_eq!(code, 403, "a read token: {text}");
    let (code, text) = post_with_token(&server, "/v1/logs", &ingester, &body);
    assert_eq!((code, text.as_str()), (200, "{}"));

    // A token that reaches only type `authed`: a request with a record of another type is
    // refused whole (403, nothing stored), even when it also holds records it reaches.
    let limited = {
        let body = json!({ "name": "limited", "scopes": "ingest", "types": "authed" }).to_string();
        let (code, text) = post_with_token(&server, "/v1/tokens", &secret, &body);
        assert_eq!(code, 201, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["secret"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut mixed = json_request(
        "authed",
        vec![json!({ "timeUnixNano": nano(now()), "body": { "stringValue": "mine" } })],
    );
    let other = json_request(
        "other",
        vec![json!({ "timeUnixNano": nano(now()), "body": { "stringValue": "not mine" } })],
    );
    mixed["resourceLogs"]
        .as_array_mut()
        .unwrap()
        .push(other["resourceLogs"][0].clone());
    let (code, text) = post_with_token(&server, "/v1/logs", &limited, &mixed.to_string());
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("other"), "{text}");
    let only_mine = json_request(
        "authed",
        vec![json!({ "timeUnixNano": nano(now()), "body": { "stringValue": "mine" } })],
    );
    let (code, text) = post_with_token(&server, "/v1/logs", &limited, &only_mine.to_string());
    assert_eq!((code, text.as_str()), (200, "{}"));
    let stored = || {
        let r = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build()
            .get(&format!(
                "http://{}/v1/events?from={}&to={}",
                server.addr,
                now() - 600,
                now() + 60
            ))
            .set("authorization", &format!("Bearer {secret}"))
            .call()
            .expect("read");
        process::lines(&r.into_string().unwrap())
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = loop {
        let events = stored();
        if events.len() >= 2 {
            break events;
        }
        assert!(Instant::now() < deadline, "{events:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let bodies: Vec<&str> = events.iter().filter_map(|e| e["body"].as_str()).collect();
    assert_eq!(bodies, vec!["hi", "mine"], "{events:?}");
    server.stop();
}

#[test]
fn bad_otlp_settings_refuse_the_start() {
    let dir = tempfile::tempdir().unwrap();
    for (setting, says) in [
        ("otlp_default_type = \"a|b\"", "otlp_default_type"),
        ("otlp_max_records = 0", "otlp_max_records"),
        (
            "otlp_type_attributes = \"service.name\"",
            "otlp_type_attributes",
        ),
    ] {
        let config = dir.path().join("bad.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\nhttp = \"127.0.0.1:0\"\ntcp = \"off\"\nudp = \"off\"\n{setting}\n",
                dir.path().join("data")
            ),
        )
        .unwrap();
        let mut child = Command::new(process::sluice_bin())
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A start that is not refused would serve forever: bounded wait, then kill.
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{setting}: the server started");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{setting}: started");
        assert!(err.contains(says), "{setting}: {err}");
    }
}

#[test]
fn backpressure_is_a_503_to_resend() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.path().join("sluice.toml");
    // A memory budget of one byte: a future-dated event keeps it full until its second.
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"off\"\nudp = \"off\"\nmax_pending_bytes = 1\n"),
    )
    .unwrap();
    let server = Server::start(&config, &data);
    let future = json!({ "type": "later", "epoch": now() + 200 }).to_string();
    let r = process::try_request(server.addr, "POST", "/v1/events", future.as_bytes()).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let body = json_request(
        "busy",
        vec![json!({ "timeUnixNano": nano(now()), "body": { "stringValue": "x" } })],
    );
    let mut req = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
        .post(&format!("http://{}/v1/logs", server.addr));
    req = req.set("content-type", "application/json");
    let resp = match req.send_string(&body.to_string()) {
        Err(ureq::Error::Status(503, r)) => r,
        other => panic!("wanted 503, got {other:?}"),
    };
    assert_eq!(resp.header("retry-after"), Some("1"));
    let status: Value = serde_json::from_str(&resp.into_string().unwrap()).unwrap();
    assert_eq!(status["code"], 14, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("max_pending_bytes"),
        "{status}"
    );
    assert_eq!(
        server.metric("sluice_otlp_refused_total{reason=\"unavailable\"}"),
        1.0
    );
    server.stop();
}
