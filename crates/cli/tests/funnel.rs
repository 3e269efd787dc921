//! Funnels (`sluice funnel`, `GET /v1/funnel`) against a brute-force computation: a seeded
//! generator makes sessions in three dcs with steps out of order, repeated, in the same second,
//! past `--within`, sessions whose events carry two dcs, numeric and string session ids, other
//! types and events without a session. The events are posted to a real `sluice serve`, read
//! back in the reader's order (`GET /v1/events?columns=off`), and each funnel is computed from
//! its definition (docs/funnels.md) per session. The answers must match over the blobs
//! (HTTP, `--server`), over the column files after `sluice columns rebuild` (data directory and
//! HTTP, `from_columns` > 0) and with `--no-columns`. The session cap's overflow is reported.
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod common;
mod process;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::now;
use process::{lines, sluice_bin, try_request, Server, XorShift};
use serde_json::{json, Value};

const STEPS: [&str; 3] = ["/search", "/hotel", "/book"];

/// The generated events, in posting order.
fn generate(seed: u64, base: i64) -> Vec<Value> {
    let mut rng = XorShift::new(seed);
    let dcs = ["ams1", "lhr2", "fra3"];
    let paths = ["/search", "/hotel", "/book", "/home", "/search", "/hotel"];
    let mut out = Vec::new();
    for i in 0..400u64 {
        let sid = if i % 7 == 0 {
            json!(i) // a number: not the same session as the string "s<i>"
        } else {
            json!(format!("s{}", i % 350)) // a few string ids shared by two generated sessions
        };
        let dc = dcs[rng.below(3) as usize];
        let t0 = base + rng.below(900) as i64;
        let spread = if rng.below(3) == 0 { 1500 } else { 120 };
        for _ in 0..1 + rng.below(10) {
            let t = t0 + rng.below(spread) as i64;
            let path = paths[rng.below(paths.len() as u64) as usize];
            let type_ = if rng.below(10) == 0 { "LB" } else { "WEB" };
            // Now and then the same session in another dc: two sessions when grouped by dc.
            let dc = if rng.below(20) == 0 {
                dcs[rng.below(3) as usize]
            } else {
                dc
            };
            out.push(json!({"epoch": t, "dc": dc, "type": type_, "session_id": sid, "path": path}));
        }
    }
    for k in 0..50 {
        out.push(json!({"epoch": base + k * 7, "dc": "ams1", "type": "WEB", "path": "/search"}));
    }
    out
}

/// The epochs at which one session (its events in read order) reached each step, straight
/// from the definition.
fn reached(events: &[(i64, String)], within: Option<i64>) -> Vec<i64> {
    let Some(first) = events.iter().position(|e| e.1 == STEPS[0]) else {
        return Vec::new();
    };
    let mut times = vec![events[first].0];
    let mut at = first;
    for step in &STEPS[1..] {
        let next = events[at + 1..]
            .iter()
            .position(|e| &e.1 == step && within.is_none_or(|w| e.0 - times[0] <= w));
        match next {
            Some(j) => {
                at += 1 + j;
                times.push(events[at].0);
            }
            None => break,
        }
    }
    times
}

/// The nearest-rank quantile.
fn quantile(mut v: Vec<i64>, q: f64) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).max(1);
    json!(v[rank - 1])
}

/// The expected `groups` of the answer: WEB events only (`--type WEB`), grouped by dc or not.
fn brute_force(events: &[Value], within: Option<i64>, by_dc: bool) -> Value {
    let mut sessions: BTreeMap<(String, String), Vec<(i64, String)>> = BTreeMap::new();
    for e in events {
        if e["type"] != "WEB" || e.get("session_id").is_none() {
            continue;
        }
        let group = if by_dc {
            json!([e["dc"]]).to_string()
        } else {
            "[]".into()
        };
        sessions
            .entry((group, e["session_id"].to_string()))
            .or_default()
            .push((
                e["epoch"].as_i64().expect("epoch"),
                e["path"].as_str().expect("path").to_owned(),
            ));
    }
    let mut per_group: BTreeMap<String, Vec<Vec<i64>>> = BTreeMap::new();
    for ((g, _), evs) in &sessions {
        let times = reached(evs, within);
        if !times.is_empty() {
            per_group.entry(g.clone()).or_default().push(times);
        }
    }
    let groups: Vec<Value> = per_group
        .iter()
        .map(|(g, all)| {
            let count = |k: usize| all.iter().filter(|t| t.len() > k).count() as u64;
            let steps: Vec<Value> = (0..STEPS.len())
                .map(|k| {
                    let gaps: Vec<i64> = all
                        .iter()
                        .filter(|t| t.len() > k && k > 0)
                        .map(|t| t[k] - t[k - 1])
                        .collect();
                    let ratio = |a: u64, b: u64| {
                        if b == 0 {
                            Value::Null
                        } else {
                            json!(a as f64 / b as f64)
                        }
                    };
                    json!({
                        "step": k + 1,
                        "where": format!("path == {:?}", STEPS[k]),
                        "sessions": count(k),
                        "from_previous": if k == 0 { Value::Null } else { ratio(count(k), count(k - 1)) },
                        "from_first": ratio(count(k), count(0)),
                        "median_secs": quantile(gaps.clone(), 0.5),
                        "p90_secs": quantile(gaps, 0.9),
                    })
                })
                .collect();
            let group: Value = serde_json::from_str(g).expect("group");
            let group = if by_dc {
                json!({"dc": group[0]})
            } else {
                json!({})
            };
            json!({"group": group, "steps": steps})
        })
        .collect();
    Value::Array(groups)
}

/// The query parameters of a funnel (HTTP).
fn query(from: i64, to: i64, within: Option<i64>, by_dc: bool) -> String {
    let mut q = format!("from={from}&to={to}&by=session_id&type=WEB");
    for s in STEPS {
        q.push_str(&format!(
            "&step=path%20%3D%3D%20%22{}%22",
            s.replace('/', "%2F")
        ));
    }
    if let Some(w) = within {
        q.push_str(&format!("&within={w}"));
    }
    if by_dc {
        q.push_str("&group_by=dc");
    }
    q
}

/// The flags of the same funnel (CLI).
fn flags(from: i64, to: i64, within: Option<i64>, by_dc: bool) -> Vec<String> {
    let mut f: Vec<String> = [
        "funnel",
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
        "--by",
        "session_id",
        "--type",
        "WEB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for s in STEPS {
        f.push("--step".into());
        f.push(format!("path == {s:?}"));
    }
    if let Some(w) = within {
        f.push("--within".into());
        f.push(format!("{w}s"));
    }
    if by_dc {
        f.push("--group-by".into());
        f.push("dc".into());
    }
    f
}

fn run(args: &[String]) -> std::process::Output {
    Command::new(sluice_bin())
        .args(args)
        .output()
        .expect("sluice")
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON answer")
}

/// The answer's groups equal the brute force's (ratios to 1e-12).
fn assert_same(answer: &Value, expected: &Value, what: &str) {
    let got = &answer["groups"];
    let (g, e) = (
        got.as_array().expect("groups"),
        expected.as_array().expect("groups"),
    );
    assert_eq!(g.len(), e.len(), "{what}: groups\n{got}\n{expected}");
    for (a, b) in g.iter().zip(e) {
        assert_eq!(a["group"], b["group"], "{what}");
        for (s, t) in a["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .zip(b["steps"].as_array().expect("steps"))
        {
            for k in ["step", "where", "sessions", "median_secs", "p90_secs"] {
                assert_eq!(
                    s[k], t[k],
                    "{what}: group {} step {}: {k}",
                    a["group"], s["step"]
                );
            }
            for k in ["from_previous", "from_first"] {
                match (s[k].as_f64(), t[k].as_f64()) {
                    (Some(x), Some(y)) => assert!((x - y).abs() < 1e-12, "{what}: {k} {x} {y}"),
                    _ => assert_eq!(s[k], t[k], "{what}: {k}"),
                }
            }
        }
    }
    assert_eq!(answer["overflow"], 0, "{what}");
    assert_eq!(answer["warnings"], json!([]), "{what}");
}

#[test]
fn funnels_match_brute_force_over_blobs_and_columns() {
    let dir = sluice_test_support::temp_dir("funnel");
    let data = dir.join("data");
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\ncolumns_every_secs = 1\n"),
    )
    .expect("config");
    let base = now() - 3 * 3600;
    let (from, to) = (base - 10, base + 2600);
    let events = generate(7, base);
    let server = Server::start(&config, &data);
    let mut body = String::new();
    for e in &events {
        body.push_str(&e.to_string());
        body.push('\n');
    }
    let r = try_request(server.addr, "POST", "/v1/events", body.as_bytes()).expect("post");
    assert_eq!(r.status, 200, "{}", r.text());
    server.wait_idle(Duration::from_secs(60));
    // The reader's order: what the definition is applied to.
    let r = server.get(&format!("/v1/events?from={from}&to={to}&columns=off"));
    assert_eq!(r.status, 200);
    let read = lines(&r.text());
    assert_eq!(read.len(), events.len(), "every event stored once");

    // The data has what the semantics decide on: sessions with two different steps in one
    // second (their read order counts), and steps read before the step they follow.
    let mut seen: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    for e in &read {
        if e["type"] == "WEB" && e.get("session_id").is_some() {
            seen.entry((
                e["session_id"].to_string(),
                e["epoch"].as_i64().expect("epoch"),
            ))
            .or_default()
            .push(e["path"].as_str().expect("path").to_owned());
        }
    }
    let ties = seen
        .values()
        .filter(|paths| {
            STEPS
                .iter()
                .filter(|s| paths.iter().any(|p| p == *s))
                .count()
                >= 2
        })
        .count();
    println!("{ties} (session, second) pairs hold two different steps");
    assert!(ties > 5, "too few same-second steps: {ties}");
    let variants = [
        (None, false),
        (Some(600), false),
        (Some(600), true),
        (Some(60), true),
    ];
    let mut expected = Vec::new();
    for (within, by_dc) in variants {
        let exp = brute_force(&read, within, by_dc);
        let steps = &exp[0]["steps"];
        println!(
            "within {within:?} by dc {by_dc}: {} groups, first {steps}",
            exp.as_array().map_or(0, |a| a.len())
        );
        expected.push(exp);
    }
    // The generator reaches every step, and --within cuts some sessions.
    let first = &expected[0][0]["steps"];
    assert!(first[2]["sessions"].as_u64() > Some(5), "{first}");
    assert!(expected[1][0]["steps"][2]["sessions"] != first[2]["sessions"]);

    let base_url = format!("http://{}", server.addr);
    for (i, (within, by_dc)) in variants.into_iter().enumerate() {
        // HTTP over blobs.
        let r = server.get(&format!(
            "/v1/funnel?{}&columns=off",
            query(from, to, within, by_dc)
        ));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_same(&r.json(), &expected[i], "HTTP, blobs");
        // The CLI through the server.
        let mut f = flags(from, to, within, by_dc);
        f.extend([
            "--server".into(),
            base_url.clone(),
            "--format".into(),
            "json".into(),
        ]);
        assert_same(&json_of(&run(&f)), &expected[i], "--server");
    }
    // --where selects the events first (as in `sluice cat`).
    let not_fra3: Vec<Value> = read.iter().filter(|e| e["dc"] != "fra3").cloned().collect();
    let r = server.get(&format!(
        "/v1/funnel?{}&columns=off&where=dc%20!%3D%20%22fra3%22",
        query(from, to, Some(600), true)
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_same(&r.json(), &brute_force(&not_fra3, Some(600), true), "where");
    // The table names each step and its sessions.
    let mut f = flags(from, to, Some(600), true);
    f.extend(["--server".into(), base_url.clone()]);
    let out = run(&f);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{table}");
    assert!(table.starts_with("DC "), "{table}");
    assert!(table.contains("path == \"/book\""), "{table}");
    assert_eq!(
        table.lines().count(),
        1 + 3 * expected[2].as_array().expect("groups").len()
    );
    // Bad parameters are 400, naming them.
    let r = server.get(&format!("/v1/funnel?from={from}&to={to}&by=session_id"));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("step"), "{}", r.text());
    let r = server.get(&format!(
        "/v1/funnel?from={from}&to={to}&step=a%20%3D%3D&by=s"
    ));
    assert_eq!(r.status, 400);
    assert!(r.text().contains("step 1"), "{}", r.text());
    let r = server.get(&format!(
        "/v1/funnel?{}&within=-5",
        query(from, to, None, false)
    ));
    assert_eq!(r.status, 400);
    server.stop();

    // The history tier: every second of the range into the column files.
    let rebuild = Command::new(sluice_bin())
        .args(["columns", "rebuild", "--data"])
        .arg(&data)
        .args(["--from", &from.to_string(), "--to", &to.to_string()])
        .output()
        .expect("rebuild");
    assert!(
        rebuild.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuild.stderr)
    );
    for (i, (within, by_dc)) in variants.into_iter().enumerate() {
        let mut f = flags(from, to, within, by_dc);
        f.extend([
            "--data".into(),
            data.display().to_string(),
            "--format".into(),
            "json".into(),
        ]);
        let answer = json_of(&run(&f));
        assert!(
            answer["from_columns"].as_u64() > Some(0),
            "read from the columns: {answer}"
        );
        assert_same(&answer, &expected[i], "data dir, columns");
        f.push("--no-columns".into());
        let answer = json_of(&run(&f));
        assert_eq!(answer["from_columns"], 0);
        assert_same(&answer, &expected[i], "data dir, blobs");
    }
    // The cap: refused sessions are counted and make the exit status 3.
    let mut f = flags(from, to, None, false);
    f.extend([
        "--data".into(),
        data.display().to_string(),
        "--format".into(),
        "json".into(),
        "--max-sessions".into(),
        "5".into(),
    ]);
    let out = run(&f);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["sessions"], 5);
    assert!(answer["overflow"].as_u64() > Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max-sessions"));

    // A server with the columns on answers from them too.
    let server = Server::start(&config, &data);
    for (i, (within, by_dc)) in variants.into_iter().enumerate() {
        let r = server.get(&format!("/v1/funnel?{}", query(from, to, within, by_dc)));
        assert_eq!(r.status, 200, "{}", r.text());
        let answer = r.json();
        assert!(answer["from_columns"].as_u64() > Some(0), "{answer}");
        assert_same(&answer, &expected[i], "HTTP, columns");
    }
    server.stop();
}

/// `GET /v1/funnel` on a server with `--auth`: no token 401; a read token limited to dc `ams1`
/// counts only ams1's events (as `GET /v1/events` shows them to it); an ingest-only token 403.
#[test]
fn a_token_counts_only_the_events_within_its_reach() {
    let dir = sluice_test_support::temp_dir("funnel-auth");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data");
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"127.0.0.1:0\"\nudp = \"off\"\ncolumns = \"off\"\n"),
    )
    .expect("config");
    let server = Server::start_with(&config, &data, &["--auth"]);
    let secret = std::fs::read_to_string(data.join("admin.secret")).expect("local secret");
    let secret = secret.trim();
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let url = |p: &str| format!("http://{}{p}", server.addr);
    let call = |method: &str, path: &str, token: Option<&str>, body: Option<&str>| {
        let mut req = agent.request(method, &url(path));
        if let Some(t) = token {
            req = req.set("authorization", &format!("Bearer {t}"));
        }
        let r = match body {
            Some(b) => req.set("content-type", "application/json").send_string(b),
            None => req.call(),
        };
        match r {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    };
    let token = |name: &str, scopes: &str, dcs: &str| {
        let body = json!({"name": name, "scopes": scopes, "dcs": dcs, "types": "*"});
        let (code, text) = call("POST", "/v1/tokens", Some(secret), Some(&body.to_string()));
        assert_eq!(code, 201, "{text}");
        serde_json::from_str::<Value>(&text).expect("json")["secret"]
            .as_str()
            .expect("secret")
            .to_owned()
    };
    let base = now() - 3 * 3600;
    let events = generate(3, base);
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    let ingest = token("in", "ingest", "*");
    let (code, text) = call("POST", "/v1/events", Some(&ingest), Some(&body));
    assert_eq!(code, 200, "{text}");
    // Every event stored (/metrics needs a token here: wait on the read itself).
    let (from, to) = (base - 10, base + 2600);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let read = loop {
        let (code, text) = call(
            "GET",
            &format!("/v1/events?from={from}&to={to}"),
            Some(secret),
            None,
        );
        assert_eq!(code, 200, "{text}");
        let read = lines(&text);
        if read.len() == events.len() {
            break read;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} stored",
            read.len(),
            events.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let ams1: Vec<Value> = read.iter().filter(|e| e["dc"] == "ams1").cloned().collect();
    let path = format!("/v1/funnel?{}", query(from, to, Some(600), true));
    assert_eq!(call("GET", &path, None, None).0, 401);
    assert_eq!(call("GET", &path, Some(&ingest), None).0, 403);
    let reader = token("ams1", "read", "ams1");
    let (code, text) = call("GET", &path, Some(&reader), None);
    assert_eq!(code, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_same(&answer, &brute_force(&ams1, Some(600), true), "ams1 token");
    assert_eq!(answer["groups"].as_array().map(|g| g.len()), Some(1));
    // The admin secret sees all three dcs.
    let (code, text) = call("GET", &path, Some(secret), None);
    assert_eq!(code, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_same(&answer, &brute_force(&read, Some(600), true), "all dcs");
    server.stop();
}
