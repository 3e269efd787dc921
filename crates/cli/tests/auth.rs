//! Tokens, scopes and safe defaults on a real `sluice serve`: every route with no
//! token, a malformed one, a wrong-scope one, an expired one, a revoked one and a right one; a
//! read token limited to one type sees nothing else through any read route; admin routes stay
//! closed without the local secret, cross-site requests are refused; TCP's `auth` line; the
//! `sluice token` command; a bind beyond loopback without auth refuses to start; Python
//! substreams switched off.
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod common;
mod load;
mod process;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::now;
use process::{sluice_bin, Server};
use serde_json::{json, Value};
use sluice_test_support::TempDir;

/// A server of its own: `--auth` or not, TCP on, the data directory's path.
struct Fixture {
    server: Server,
    /// Removed after the server is killed (fields drop in order).
    dir: TempDir,
    tcp: SocketAddr,
}

impl Fixture {
    fn start(name: &str, extra: &[&str]) -> Fixture {
        let dir = sluice_test_support::temp_dir(name);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let config = dir.join("sluice.toml");
        std::fs::write(
            &config,
            format!("data_dir = {data:?}\ntcp = \"127.0.0.1:0\"\nudp = \"off\"\ngrace_ms = 100\n"),
        )
        .unwrap();
        let server = Server::start_with(&config, &data, extra);
        let t = load::Targets::of(server.addr, &dir.join("server.log"));
        Fixture {
            tcp: t.tcp.expect("a TCP listener"),
            server,
            dir,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn local_secret(&self) -> String {
        std::fs::read_to_string(self.data().join("admin.secret"))
            .expect("the server writes its local secret")
            .trim()
            .to_string()
    }

    /// `method path` with `token` (if any), extra headers and `body`: (status, body).
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, String) {
        let url = format!("http://{}{path}", self.server.addr);
        let mut req = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build()
            .request(method, &url);
        if let Some(t) = token {
            req = req.set("authorization", &format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.set(k, v);
        }
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

    /// Makes a token through the admin API with the local secret; its secret.
    fn token(&self, name: &str, scopes: &str, types: &str, expires: Option<i64>) -> String {
        let body = json!({"name": name, "scopes": scopes, "types": types, "expires": expires});
        let (code, text) = self.call(
            "POST",
            "/v1/tokens",
            Some(&self.local_secret()),
            &[("content-type", "application/json")],
            Some(&body.to_string()),
        );
        assert_eq!(code, 201, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["secret"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn metric(&self, name: &str) -> f64 {
        let (code, text) = self.call("GET", "/metrics", Some(&self.local_secret()), &[], None);
        assert_eq!(code, 200, "{text}");
        sluice_test_support::metrics::series(&text, name)
    }
}

/// Sends `lines` over TCP (each a message), returns the reply lines (until the server closes
/// or every message was answered).
fn tcp(addr: SocketAddr, lines: &[String]) -> Vec<String> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    for l in lines {
        let _ = w.write_all(format!("{l}\n").as_bytes());
    }
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        match line {
            Ok(l) => out.push(l),
            Err(_) => break,
        }
        if out.len() == lines.len() {
            break;
        }
    }
    out
}

/// An event of `type_` dated `epoch`, id `id`.
fn event(type_: &str, epoch: i64, id: u64) -> String {
    json!({"type": type_, "epoch": epoch, "id": id}).to_string()
}

/// Every route, under `--auth`, against every kind of credential.
#[test]
fn every_route_needs_its_scope() {
    let f = Fixture::start("auth-routes", &["--auth"]);
    let ingest = f.token("ing", "ingest", "", None);
    let read = f.token("rd", "read", "", None);
    let admin = f.token("adm", "admin", "", None);
    let expired = f.token("old", "ingest,read,admin", "", Some(now() + 2));
    let revoked = f.token("gone", "ingest,read,admin", "", None);
    let (code, text) = f.call("DELETE", "/v1/tokens/gone", Some(&admin), &[], None);
    assert_eq!(code, 200, "{text}");
    std::thread::sleep(Duration::from_secs(3)); // `old` expires
    let malformed = "not-a-token";
    let unknown = "sluice_0123abcd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let e = now() - 5;
    let ev = event("WEB", e, 1);
    let json_ct = [("content-type", "application/json")];
    // (method, path, body, the scope it needs)
    let routes: Vec<(&str, String, Option<String>, &str)> = vec![
        ("POST", "/v1/events".into(), Some(ev.clone()), "ingest"),
        (
            "POST",
            "/v1/drops".into(),
            Some(r#"{"drops":[]}"#.into()),
            "ingest",
        ),
        (
            "GET",
            format!("/v1/events?from={e}&to={}", e + 1),
            None,
            "read",
        ),
        (
            "GET",
            format!("/v1/counts?from={e}&to={}", e + 1),
            None,
            "read",
        ),
        (
            "GET",
            format!("/buckets/epochs/keys/{e}-local"),
            None,
            "read",
        ),
        (
            "GET",
            format!("/buckets/events/keys/{e}:local:WEB::0"),
            None,
            "read",
        ),
        ("GET", "/metrics".into(), None, "read"),
        ("GET", "/v1/substreams".into(), None, "admin"),
        (
            "POST",
            "/v1/substreams".into(),
            Some(r#"{"name":"s1","select":["id"]}"#.into()),
            "admin",
        ),
        ("GET", "/v1/tokens".into(), None, "admin"),
    ];
    for (method, path, body, scope) in &routes {
        let body = body.as_deref();
        let right = match *scope {
            "ingest" => &ingest,
            "read" => &read,
            _ => &admin,
        };
        let wrong = if *scope == "read" { &ingest } else { &read };
        for (who, token, want) in [
            ("no token", None, 401),
            ("malformed", Some(malformed), 401),
            ("unknown", Some(unknown), 401),
            ("expired", Some(expired.as_str()), 401),
            ("revoked", Some(revoked.as_str()), 401),
            ("wrong scope", Some(wrong.as_str()), 403),
        ] {
            let (code, text) = f.call(method, path, token, &json_ct, body);
            assert_eq!(code, want, "{method} {path} with {who}: {text}");
        }
        let (code, text) = f.call(method, path, Some(right), &json_ct, body);
        assert!(
            code < 400 || (code == 404 && method == &"GET"),
            "{method} {path} with the right token: {code} {text}"
        );
        if *method == "POST" && path == "/v1/substreams" {
            assert_eq!(code, 201, "{text}");
        }
    }
    // /healthz stays open.
    assert_eq!(f.call("GET", "/healthz", None, &[], None).0, 200);
    // Refusals are counted by reason; the admin actions by token name.
    for reason in [
        "missing",
        "malformed",
        "unknown",
        "expired",
        "revoked",
        "scope",
    ] {
        let n = f.metric(&format!(
            "sluice_auth_refused_total{{transport=\"http\",reason=\"{reason}\"}}"
        ));
        assert!(n >= routes.len() as f64 - 1.0, "{reason}: {n}");
    }
    assert!(f.metric("sluice_admin_actions_total{token=\"adm\"}") >= 2.0);
    let log = std::fs::read_to_string(f.dir.join("server.log")).unwrap();
    assert!(log.contains("admin: POST /v1/substreams /v1/substreams by token \"adm\""));
    f.server.stop();
}

/// A read token of one type sees only that type through every read route; an ingest token of
/// one type cannot send another.
#[test]
fn a_token_limited_to_one_type_reaches_nothing_else() {
    let f = Fixture::start("auth-types", &["--auth"]);
    let all = f.token("all", "ingest,read", "", None);
    let web = f.token("web", "read,ingest", "WEB", None);
    let e = now() - 3;
    let body = [event("WEB", e, 1), event("LB", e, 2), event("LB", e, 3)].join("\n");
    assert_eq!(
        f.call("POST", "/v1/events", Some(&all), &[], Some(&body)).0,
        200
    );
    // An LB event with a WEB-only token: the whole payload is refused, nothing stored.
    let mixed = [event("WEB", e, 4), event("LB", e, 5)].join("\n");
    let (code, text) = f.call("POST", "/v1/events", Some(&web), &[], Some(&mixed));
    assert_eq!(code, 403, "{text}");
    assert_eq!(
        f.call(
            "POST",
            "/v1/events",
            Some(&web),
            &[],
            Some(&event("WEB", e, 6))
        )
        .0,
        200
    );
    std::thread::sleep(Duration::from_millis(1500));
    let range = format!("from={e}&to={}", e + 1);
    let ids = |text: &str| -> Vec<u64> {
        let mut v: Vec<u64> = process::lines(text)
            .iter()
            .filter_map(|l| l["id"].as_u64())
            .collect();
        v.sort();
        v
    };
    let (_, everything) = f.call("GET", &format!("/v1/events?{range}"), Some(&all), &[], None);
    assert_eq!(ids(&everything), vec![1, 2, 3, 6]);
    let (_, seen) = f.call("GET", &format!("/v1/events?{range}"), Some(&web), &[], None);
    assert_eq!(ids(&seen), vec![1, 6]);
    let (_, seen) = f.call(
        "GET",
        &format!("/v1/events?{range}&type=LB"),
        Some(&web),
        &[],
        None,
    );
    assert_eq!(ids(&seen), Vec::<u64>::new());
    // Counts: only WEB rows.
    let (_, counts) = f.call("GET", &format!("/v1/counts?{range}"), Some(&web), &[], None);
    let types: Vec<String> = process::lines(&counts)
        .iter()
        .filter_map(|l| l["type"].as_str().map(str::to_owned))
        .collect();
    assert!(
        !types.is_empty() && types.iter().all(|t| t == "WEB"),
        "{counts}"
    );
    // The epochs listing names only WEB; an LB blob is refused.
    let (code, listing) = f.call(
        "GET",
        &format!("/buckets/epochs/keys/{e}-local"),
        Some(&web),
        &[],
        None,
    );
    assert_eq!(code, 200, "{listing}");
    assert!(
        listing.contains("WEB") && !listing.contains("LB"),
        "{listing}"
    );
    let (_, full) = f.call(
        "GET",
        &format!("/buckets/epochs/keys/{e}-local"),
        Some(&all),
        &[],
        None,
    );
    assert!(full.contains("LB"), "{full}");
    let (code, _) = f.call(
        "GET",
        &format!("/buckets/events/keys/{e}:local:LB::0"),
        Some(&web),
        &[],
        None,
    );
    assert_eq!(code, 403);
    assert_eq!(
        f.call(
            "GET",
            &format!("/buckets/events/keys/{e}:local:WEB::0"),
            Some(&web),
            &[],
            None
        )
        .0,
        200
    );
    // The tail (history first, then live; read for 3 s): WEB only.
    let tail = tail_for(&f, &web, e, Duration::from_secs(3));
    assert!(
        tail.contains("\"WEB\"") && !tail.contains("\"LB\""),
        "{tail}"
    );
    let tail = tail_for(&f, &all, e, Duration::from_secs(3));
    assert!(tail.contains("\"LB\""), "{tail}");
    assert!(f.metric("sluice_auth_refused_total{reason=\"types\"}") >= 2.0);
    f.server.stop();
}

/// Without `--auth`: ingest and reads are open on loopback, admin is not; a cross-site POST
/// (as a browser sends it) registers nothing.
#[test]
fn admin_is_closed_without_auth_and_cross_site_requests_are_refused() {
    let f = Fixture::start("auth-open", &[]);
    let e = now();
    assert_eq!(
        f.call("POST", "/v1/events", None, &[], Some(&event("WEB", e, 1)))
            .0,
        200
    );
    let spec = r#"{"name":"evil","python_source":"def transform(e): return e"}"#;
    for (method, path, body) in [
        ("POST", "/v1/substreams", Some(spec)),
        ("PUT", "/v1/substreams/evil", Some(spec)),
        ("POST", "/v1/substreams/evil/enable", None),
        ("DELETE", "/v1/substreams/evil", None),
        (
            "POST",
            "/v1/tokens",
            Some(r#"{"name":"x","scopes":"admin"}"#),
        ),
    ] {
        let (code, text) = f.call(method, path, None, &[], body);
        assert_eq!(code, 401, "{method} {path}: {text}");
        // As a browser page on another origin sends it: a simple content type, an Origin.
        let browser = [
            ("content-type", "text/plain"),
            ("origin", "http://evil.example"),
        ];
        let (code, text) = f.call(method, path, None, &browser, body);
        assert_eq!(code, 403, "{method} {path} cross-site: {text}");
        // Even with the local secret a cross-site request is refused.
        let (code, _) = f.call(method, path, Some(&f.local_secret()), &browser, body);
        assert_eq!(code, 403, "{method} {path} cross-site with the secret");
    }
    // Nothing was registered.
    let (code, list) = f.call("GET", "/v1/substreams", Some(&f.local_secret()), &[], None);
    assert_eq!(code, 200);
    assert!(!list.contains("evil"), "{list}");
    // The server's own origin may change state.
    let own = format!("http://{}", f.server.addr);
    let (code, text) = f.call(
        "POST",
        "/v1/substreams",
        Some(&f.local_secret()),
        &[("origin", &own), ("content-type", "application/json")],
        Some(r#"{"name":"fine","select":["id"]}"#),
    );
    assert_eq!(code, 201, "{text}");
    // A presented token is still checked in open mode.
    let (code, _) = f.call(
        "GET",
        &format!("/v1/events?from={e}"),
        Some("sluice_0123abcd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        &[],
        None,
    );
    assert_eq!(code, 401);
    assert!(f.metric("sluice_auth_refused_total{reason=\"cross_site\"}") >= 10.0);
    f.server.stop();
}

/// TCP: `auth <token>` first; without it under `--auth` the connection is refused.
#[test]
fn tcp_takes_a_token_line_first() {
    let f = Fixture::start("auth-tcp", &["--auth"]);
    let ingest = f.token("ing", "ingest", "", None);
    let read = f.token("rd", "read", "", None);
    let e = now();
    let got = tcp(f.tcp, &[event("WEB", e, 1)]);
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with("error unauthorized"), "{got:?}");
    let got = tcp(f.tcp, &[format!("auth {read}"), event("WEB", e, 2)]);
    assert!(got[0].starts_with("error unauthorized"), "{got:?}");
    let got = tcp(f.tcp, &[format!("auth {ingest}"), event("WEB", e, 3)]);
    assert_eq!(got, vec!["ok auth ing".to_string(), "ok 1 0".to_string()]);
    assert!(f.metric("sluice_auth_refused_total{transport=\"tcp\",reason=\"missing\"}") >= 1.0);
    assert!(f.metric("sluice_auth_refused_total{transport=\"tcp\",reason=\"scope\"}") >= 1.0);
    f.server.stop();
}

/// What `GET /v1/tail?from=FROM` sends `token` within `wait`.
fn tail_for(f: &Fixture, token: &str, from: i64, wait: Duration) -> String {
    let url = format!("http://{}/v1/tail?from={from}", f.server.addr);
    let resp = ureq::AgentBuilder::new()
        .timeout_read(wait)
        .build()
        .get(&url)
        .set("authorization", &format!("Bearer {token}"))
        .call()
        .unwrap_or_else(|e| panic!("tail: {e}"));
    let mut text = String::new();
    let mut r = BufReader::new(resp.into_reader());
    let deadline = std::time::Instant::now() + wait;
    let mut line = String::new();
    while std::time::Instant::now() < deadline {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => text.push_str(&line),
        }
    }
    text
}

fn sluice(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(sluice_bin())
        .args(args)
        .env_remove("SLUICE_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `sluice token create | list | revoke` with the local secret; revocation at once.
#[test]
fn the_token_command_creates_lists_and_revokes() {
    let f = Fixture::start("auth-cli", &["--auth"]);
    let data = f.data();
    let data = data.to_str().unwrap();
    let (ok, out, err) = sluice(
        &[
            "token",
            "create",
            "--name",
            "ci",
            "--scope",
            "ingest,read",
            "--types",
            "WEB",
            "--expires",
            "90d",
            "--data",
            data,
        ],
        &[],
    );
    assert!(ok, "{err}");
    let secret = out.lines().next().unwrap().trim().to_string();
    assert!(secret.starts_with("sluice_"), "{out}");
    assert_eq!(
        f.call(
            "POST",
            "/v1/events",
            Some(&secret),
            &[],
            Some(&event("WEB", now(), 1))
        )
        .0,
        200
    );
    let (ok, out, err) = sluice(&["token", "list", "--data", data], &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("\"ci\"") && !out.contains(&secret[16..]),
        "{out}"
    );
    // Not the server's user: no local secret, no token: refused.
    let (ok, _, err) = sluice(&["token", "list", "--data", "/nonexistent"], &[]);
    assert!(!ok, "{err}");
    // A read-only token cannot make tokens.
    let (ok, _, err) = sluice(
        &["token", "list", "--data", data],
        &[("SLUICE_TOKEN", secret.as_str())],
    );
    assert!(!ok && err.contains("403"), "{err}");
    let (ok, _, err) = sluice(&["token", "revoke", "ci", "--data", data], &[]);
    assert!(ok, "{err}");
    let (code, text) = f.call(
        "POST",
        "/v1/events",
        Some(&secret),
        &[],
        Some(&event("WEB", now(), 2)),
    );
    assert_eq!(code, 401, "{text}");
    assert!(text.contains("revoked"), "{text}");
    // The catalog keeps a hash, never the secret.
    let dir = f.data();
    f.server.stop();
    let mut found = false;
    visit(&dir, &mut |bytes| {
        found |= contains(bytes, secret.as_bytes())
    });
    assert!(
        !found,
        "the secret is stored somewhere in the data directory"
    );
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn visit(dir: &Path, f: &mut dyn FnMut(&[u8])) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            visit(&p, f);
        } else if let Ok(bytes) = std::fs::read(&p) {
            f(&bytes);
        }
    }
}

/// Beyond loopback without auth the start is refused, naming the flags; `--insecure-no-auth`
/// starts with a warning.
#[test]
fn a_public_bind_without_auth_refuses_to_start() {
    let dir = sluice_test_support::temp_dir("auth-public");
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let (ok, _, err) = sluice(
        &[
            "serve",
            "--data",
            data,
            "--http",
            "0.0.0.0:0",
            "--tcp",
            "off",
            "--udp",
            "off",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("beyond loopback")
            && err.contains("--auth")
            && err.contains("--insecure-no-auth"),
        "{err}"
    );
    let log = dir.join("server.log");
    let mut child = Command::new(sluice_bin())
        .args([
            "serve",
            "--data",
            data,
            "--http",
            "0.0.0.0:0",
            "--tcp",
            "off",
            "--udp",
            "off",
        ])
        .arg("--insecure-no-auth")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Serving: its address in DATA/SERVER, and /healthz answers (the signal handler is up).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(std::time::Instant::now() < deadline, "no start");
        assert!(child.try_wait().unwrap().is_none(), "exited");
        let port = std::fs::read_to_string(Path::new(data).join("SERVER"))
            .ok()
            .and_then(|t| t.trim().rsplit(':').next()?.parse::<u16>().ok());
        if let Some(port) = port {
            if ureq::get(&format!("http://127.0.0.1:{port}/healthz"))
                .call()
                .is_ok()
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("WARNING: --insecure-no-auth"), "{log}");
}

/// `--no-python-substreams`: a code substream is refused; a declarative one is fine.
#[test]
fn python_substreams_can_be_switched_off() {
    let f = Fixture::start("auth-nopython", &["--no-python-substreams"]);
    let secret = f.local_secret();
    let ct = [("content-type", "application/json")];
    let (code, text) = f.call(
        "POST",
        "/v1/substreams",
        Some(&secret),
        &ct,
        Some(r#"{"name":"code","python_source":"def transform(e):\n    return e\n"}"#),
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("--no-python-substreams"), "{text}");
    let (code, text) = f.call(
        "POST",
        "/v1/substreams",
        Some(&secret),
        &ct,
        Some(r#"{"name":"decl","select":["id"]}"#),
    );
    assert_eq!(code, 201, "{text}");
    f.server.stop();
}
