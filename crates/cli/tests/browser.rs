//! A real browser against a real `sluice serve`: a page on another origin, open in
//! headless Chromium on the server's machine, tries every admin route as a hostile page can —
//! simple `no-cors` POSTs, a `text/plain` form posted into an iframe, requests that need a CORS
//! preflight (JSON, an `Authorization` guess, PUT, DELETE) — and registers, changes and removes
//! nothing; each refusal is counted in `sluice_auth_refused_total`. Controls show the test can
//! fail: the page's own bodies, sent by the test with the local secret and no `Origin`, do
//! register (the form's body as Chromium encoded it, captured by the page's server).
//!
//! The page is on `127.0.0.1` too (another port, so another origin): the browser's own rules for
//! public pages reaching loopback (Local Network Access) do not apply, and the server's guard is
//! what is tested.
//!
//! Runs the `sluice` binary cargo builds for this package's tests; needs Debian's `chromium` and
//! `chromium-driver` (`scripts/chromium.sh` installs them), driven by
//! `sluice_test_support::browser`. Without them the test fails when `CI` is set and is skipped,
//! loudly, when it is not.

mod common;
mod process;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Html;
use axum::routing::{get, post};
use fantoccini::Locator;
use process::Server;
use serde_json::Value;
use sluice_test_support::browser::{self, Driver};

/// A substream spec the page posts (`NAME` replaced): declarative, so that the control can
/// register the very same body without a Python interpreter; refused or not, a code substream
/// takes the same path up to the registry.
const SPEC: &str = r#"{"name":"NAME","select":["id"]}"#;

/// The hostile page. `SLUICE` is the server's origin. Each attempt appends `<li data-k=KEY>`
/// with what the page could observe (a `no-cors` answer is opaque: status 0); `#done` last.
const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>another origin</title></head><body>
<ul id="log"></ul>
<iframe name="sink" id="sink"></iframe>
<!-- text/plain form: the body is NAME=VALUE, arranged to be JSON (the "pad" field is ignored) -->
<form id="form" method="POST" enctype="text/plain" target="sink" action="/echo">
<input type="hidden" name='{"name":"browser_form","select":["id"],"pad":"' value='"}'>
</form>
<script>
const S = "SLUICE";
const spec = (name) => 'SPEC'.replace('NAME', name);
const guess = 'Bearer sluice_00000000_' + 'A'.repeat(43);
function log(k, v) {
  const li = document.createElement('li');
  li.dataset.k = k;
  li.textContent = k + ' ' + v;
  document.getElementById('log').append(li);
}
window.onerror = (msg) => log('script_error', String(msg));
async function attempt(k, path, init) {
  try {
    const r = await fetch(S + path, init);
    log(k, 'answered ' + r.type + ' ' + r.status);
  } catch (e) {
    log(k, 'blocked ' + e.name + ': ' + e.message);
  }
}
// Submits the form to `action` into the iframe; resolves on the iframe's load (5 s at most).
function submit(action) {
  return new Promise((resolve) => {
    const sink = document.getElementById('sink');
    const t = setTimeout(() => resolve('timeout'), 5000);
    sink.onload = () => { clearTimeout(t); resolve('loaded'); };
    const form = document.getElementById('form');
    form.action = action;
    form.submit();
  });
}
const simple = (body) => ({method: 'POST', mode: 'no-cors',
                          headers: {'Content-Type': 'text/plain'}, body});
(async () => {
  try {
    // (a) a simple request: no preflight, the browser sends it and hides the answer
    await attempt('a_post_substream', '/v1/substreams', simple(spec('browser_a')));
    // (b) JSON and an Authorization guess: a preflight, which Sluice never grants
    await attempt('b_post_json_auth', '/v1/substreams', {method: 'POST',
      headers: {'Content-Type': 'application/json', 'Authorization': guess},
      body: spec('browser_b')});
    // (c) a classic form, first to the page's own server (which keeps the body it got), then
    // to Sluice
    log('c_form_echo', await submit('/echo'));
    log('c_form', await submit(S + '/v1/substreams'));
    // (d) PUT and DELETE: a preflight in cors mode, not sendable at all in no-cors mode
    await attempt('d_put', '/v1/substreams/keep', {method: 'PUT',
      headers: {'Content-Type': 'text/plain'}, body: spec('keep').replace('"id"', '"evil"')});
    await attempt('d_put_no_cors', '/v1/substreams/keep', {method: 'PUT', mode: 'no-cors',
      body: spec('keep')});
    await attempt('d_delete', '/v1/substreams/keep', {method: 'DELETE'});
    await attempt('d_delete_token', '/v1/tokens/keeper', {method: 'DELETE'});
    // (e) a token for the page
    await attempt('e_post_token', '/v1/tokens',
      simple('{"name":"browser_e","scopes":"admin,read,ingest"}'));
    // the other POST routes
    await attempt('f_disable', '/v1/substreams/keep/disable', simple(''));
    await attempt('f_enable', '/v1/substreams/keep/enable', simple(''));
    await attempt('f_backfill', '/v1/substreams/keep/backfill?from=0&to=1', simple(''));
  } catch (e) {
    log('script_error', String(e));
  }
  const done = document.createElement('p');
  done.id = 'done';
  document.body.append(done);
})();
</script></body></html>
"#;

/// The attempts, and what the page must observe: `opaque`: sent, the answer hidden (a simple
/// request reaches the server: its refusal is counted); `blocked`: not sent (a failed
/// preflight, or a method `no-cors` cannot send).
const EXPECTED: &[(&str, &str)] = &[
    ("a_post_substream", "answered opaque 0"),
    ("b_post_json_auth", "blocked TypeError"),
    ("c_form_echo", "loaded"),
    ("c_form", "loaded"),
    ("d_put", "blocked TypeError"),
    ("d_put_no_cors", "blocked TypeError"),
    ("d_delete", "blocked TypeError"),
    ("d_delete_token", "blocked TypeError"),
    ("e_post_token", "answered opaque 0"),
    ("f_disable", "answered opaque 0"),
    ("f_enable", "answered opaque 0"),
    ("f_backfill", "answered opaque 0"),
];

/// Requests of the page that reach Sluice (a, the form, e, the three f): each a refusal.
const REACHING: f64 = 6.0;

#[test]
fn a_page_on_another_origin_cannot_use_the_admin_routes() {
    let Some(chromedriver) = browser_installed() else {
        return;
    };
    let dir = sluice_test_support::temp_dir("browser");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\ntcp = \"off\"\nudp = \"off\"\ngrace_ms = 100\n"),
    )
    .unwrap();
    let server = Server::start_with(&config, &data, &[]);
    let secret = std::fs::read_to_string(data.join("admin.secret"))
        .expect("the server writes its local secret")
        .trim()
        .to_string();
    let admin = Admin {
        addr: server.addr,
        secret,
    };

    // Something for the page to change or remove: a substream and a token.
    let (code, text) = admin.call(
        "POST",
        "/v1/substreams",
        Some(&SPEC.replace("NAME", "keep")),
    );
    assert_eq!(code, 201, "{text}");
    let (code, text) = admin.call(
        "POST",
        "/v1/tokens",
        Some(r#"{"name":"keeper","scopes":"read"}"#),
    );
    assert_eq!(code, 201, "{text}");
    let substreams = admin.json("/v1/substreams");
    let tokens = admin.json("/v1/tokens");
    let metrics = admin.metrics();
    // Absent until something is refused.
    let refused_before = refusals(&metrics).unwrap_or(0.0);
    let actions_before =
        sluice_test_support::metrics::try_series(&metrics, "sluice_admin_actions_total");

    // The page's server: another origin; it keeps what the form sent to its own /echo.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let echoed: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
    let page = PAGE
        .replace("SLUICE", &format!("http://{}", server.addr))
        .replace("SPEC", SPEC);
    let app = axum::Router::new()
        .route("/", get(move || std::future::ready(Html(page.clone()))))
        .route(
            "/echo",
            post(
                |State(e): State<Arc<Mutex<Option<Vec<u8>>>>>, body: Bytes| async move {
                    *e.lock().unwrap() = Some(body.to_vec());
                    Html("kept")
                },
            ),
        )
        .with_state(echoed.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let page_url = format!("http://{}/", listener.local_addr().unwrap());
    assert_ne!(listener.local_addr().unwrap(), server.addr);
    rt.spawn(async move { axum::serve(listener, app).await });

    let started = Instant::now();
    let driver = Driver::start(&chromedriver, &dir);
    let observed = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(120),
            run_page(&driver, &dir.join("chromium"), &page_url),
        )
        .await
        .unwrap_or_else(|_| Err("the browser did not finish within 120 s".into()))
    });
    drop(driver); // chromedriver and its browser gone before anything can fail below
    let observed = observed.unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "browser: {:.1} s; the page observed:\n  {}",
        started.elapsed().as_secs_f64(),
        observed.join("\n  ")
    );

    // What the page saw: the simple requests answered (opaquely), the rest never sent.
    assert!(
        !observed.iter().any(|l| l.starts_with("script_error")),
        "{observed:?}"
    );
    for (k, want) in EXPECTED {
        let line = observed
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("the page did not try {k}: {observed:?}"));
        assert!(line.starts_with(want), "{k}: {line} (wanted {want}…)");
    }

    // Nothing registered, changed or removed.
    assert_eq!(admin.json("/v1/substreams"), substreams);
    assert_eq!(admin.json("/v1/tokens"), tokens);
    let metrics = admin.metrics();
    assert_eq!(
        sluice_test_support::metrics::try_series(&metrics, "sluice_admin_actions_total"),
        actions_before,
        "an admin action was counted"
    );
    // Every request that reached the server was refused and counted.
    let refused =
        refusals(&metrics).expect("no sluice_auth_refused_total in /metrics") - refused_before;
    assert!(
        refused >= REACHING,
        "{refused} refusals counted, {REACHING} requests reached the server:\n{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("sluice_auth_refused_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Controls: the page's bodies, sent with the local secret and no Origin, do register.
    let form = echoed
        .lock()
        .unwrap()
        .take()
        .expect("the form reached the page's own server");
    let form = String::from_utf8(form).unwrap();
    for (path, body, name) in [
        (
            "/v1/substreams",
            SPEC.replace("NAME", "browser_a"),
            "browser_a",
        ),
        ("/v1/substreams", form.clone(), "browser_form"),
        (
            "/v1/tokens",
            r#"{"name":"browser_e","scopes":"admin,read,ingest"}"#.into(),
            "browser_e",
        ),
    ] {
        let (code, text) = admin.call("POST", path, Some(&body));
        assert_eq!(code, 201, "control {path} {body:?}: {text}");
        assert!(admin.json(path).to_string().contains(name));
    }
    let (code, text) = admin.call("DELETE", "/v1/substreams/keep", None);
    assert_eq!(code, 200, "control DELETE: {text}");

    rt.shutdown_timeout(Duration::from_secs(5));
    server.stop();
}

/// The sum of `sluice_auth_refused_total` for the reasons a browser's request may get without
/// credentials; `None` when neither is there.
fn refusals(metrics: &str) -> Option<f64> {
    ["cross_site", "missing"]
        .iter()
        .filter_map(|r| {
            sluice_test_support::metrics::try_series(
                metrics,
                &format!("sluice_auth_refused_total{{reason=\"{r}\"}}"),
            )
        })
        .reduce(|a, b| a + b)
}

/// The test's own admin client: the local secret, no `Origin`.
struct Admin {
    addr: SocketAddr,
    secret: String,
}

impl Admin {
    /// `method path` with the local secret: (status, body).
    fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let req = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build()
            .request(method, &format!("http://{}{path}", self.addr))
            .set("authorization", &format!("Bearer {}", self.secret));
        let r = match body {
            Some(b) => req.set("content-type", "application/json").send_string(b),
            None => req.call(),
        };
        match r {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }

    fn json(&self, path: &str) -> Value {
        let (code, text) = self.call("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    fn metrics(&self) -> String {
        let (code, text) = self.call("GET", "/metrics", None);
        assert_eq!(code, 200, "{text}");
        text
    }
}

/// Opens `url` in a fresh headless Chromium (profile under `profile`), waits (30 s at most)
/// for the page's `#done`, and returns its log lines.
async fn run_page(driver: &Driver, profile: &Path, url: &str) -> Result<Vec<String>, String> {
    let c = driver.session(profile, 1000, 700).await?;
    let result = async {
        c.goto(url).await.map_err(|e| format!("goto {url}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while c
            .find_all(Locator::Css("#done"))
            .await
            .map_err(|e| e.to_string())?
            .is_empty()
        {
            if Instant::now() > deadline {
                let source = c.source().await.unwrap_or_default();
                return Err(format!("the page was not done within 30 s:\n{source}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut lines = Vec::new();
        for li in c
            .find_all(Locator::Css("#log li"))
            .await
            .map_err(|e| e.to_string())?
        {
            lines.push(li.text().await.map_err(|e| e.to_string())?);
        }
        Ok(lines)
    }
    .await;
    let _ = c.close().await;
    result
}

/// chromedriver's path, or why the browser test can't run: a failure under `CI`, a loud skip
/// (`None`) otherwise.
fn browser_installed() -> Option<PathBuf> {
    let why = match browser::chromedriver() {
        Ok(path) => return Some(path),
        Err(why) => why,
    };
    let msg = format!("the browser test cannot run: {why}");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if ci {
        panic!("{msg}");
    }
    // Straight to stderr, past the test harness's capture: a skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED (CI is not set): {msg} ***\n"
    );
    None
}
