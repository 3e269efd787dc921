//! Row `security`: what token checking and TLS add to the server's CPU per event.
//!
//! The same paced load (batches of [`PER_POST`] `sluice_gen` events POSTed by `wrk` at
//! [`TARGET_EPS`] events/s over keep-alive connections) against three fresh `sluice serve`
//! processes (release build, `--pipeline-threads 2`, a temp data dir each):
//!
//! - (a) plain HTTP, no auth: the anchor;
//! - (b) plain HTTP with `--auth` and an `ingest` token (`sluice token create`), sent by the wrk
//!   script as `Authorization: Bearer …`;
//! - (c) HTTPS (`--tls-self-signed`; wrk does not verify certificates) with `--auth` and the token.
//!
//! Per run: the events acknowledged (2xx answers × [`PER_POST`]; the server's own
//! `sluice_events_in_total` beside it as a check), the server process's CPU-seconds
//! (`/proc/PID/stat` utime + stime around the measured wrk run), CPU µs per event and events/s.
//! The runs are interleaved a, b, c, a, b, c, … (`--reps`, default 3; median reported), and each
//! of (b), (c) is compared with the (a) of the same repetition. Target: (c)/(a) ≤ 1.10.

use super::*;
use crate::shards::{body, wrk_available, Serve, RUN_SECS};

/// Events per POST.
const PER_POST: usize = 100;

/// The event rate the issue names: events/s sent (paced by the wrk script).
const TARGET_EPS: u64 = 100_000;

/// wrk connections (kept alive) and threads. Pacing, not the connections, sets the rate: these
/// only need to keep a request ready for every slot (~2-3 are in flight at a time).
const CONNS: usize = 8;
const WRK_THREADS: usize = 2;

/// The wrk script: POST the body named by `SLUICE_BODY` (with `Authorization: Bearer
/// $SLUICE_TOKEN` when set), one request every `SLUICE_INTERVAL_MS` per wrk thread on a fixed
/// schedule (`delay()` before each request, on the monotonic clock through LuaJIT's ffi; a thread
/// that falls behind does not burst to catch up); print one parsable line at the end.
const LUA: &str = r#"local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } sluice_timespec;
int clock_gettime(int clk, sluice_timespec *tp);
]]
local ts = ffi.new("sluice_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
local token = os.getenv("SLUICE_TOKEN")
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end
local f = assert(io.open(os.getenv("SLUICE_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
local interval = tonumber(os.getenv("SLUICE_INTERVAL_MS"))
local next_at = nil
function delay()
  local now = now_ms()
  local slot = next_at or now
  if slot < now then slot = now end
  next_at = slot + interval
  return math.floor(slot - now)
end
function done(summary, latency, requests)
  io.write(string.format("RESULT p50_us=%d p99_us=%d requests=%d non2xx=%d errors=%d\n",
    latency:percentile(50), latency:percentile(99), summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"#;

/// One of the three servers.
#[derive(Clone, Copy)]
struct Setup {
    label: &'static str,
    auth: bool,
    tls: bool,
}

const SETUPS: [Setup; 3] = [
    Setup {
        label: "(a) HTTP, no auth [anchor]",
        auth: false,
        tls: false,
    },
    Setup {
        label: "(b) HTTP + token (--auth)",
        auth: true,
        tls: false,
    },
    Setup {
        label: "(c) HTTPS + token (--auth --tls-self-signed), keep-alive",
        auth: true,
        tls: true,
    },
];

/// What one measured run gave.
#[derive(Clone, Copy)]
struct Run {
    /// Events acknowledged (2xx answers × PER_POST).
    events: f64,
    /// The server's `sluice_events_in_total` over the run (None: curl missing or failed).
    server_events: Option<f64>,
    secs: f64,
    /// CPU-seconds of the server process during the run.
    cpu: f64,
    p99_ms: f64,
    /// Non-2xx answers and socket errors.
    failed: u64,
}

impl Run {
    fn eps(&self) -> f64 {
        self.events / self.secs
    }
    fn us_per_event(&self) -> f64 {
        self.cpu * 1e6 / self.events.max(1.0)
    }
}

/// The `sluice` binary next to the bench (as `Serve::start` finds it).
fn sluice_bin() -> Result<PathBuf> {
    std::env::current_exe()?
        .parent()
        .map(|d| d.join("sluice"))
        .filter(|b| b.exists())
        .ok_or_else(|| {
            anyhow!("no sluice binary next to the bench: run `cargo build --release -p sluice`")
        })
}

/// `sluice token create --name bench --scope ingest --data DATA`: the secret (stdout's first line).
fn create_token(data: &Path) -> Result<String> {
    let out = Command::new(sluice_bin()?)
        .args([
            "token", "create", "--name", "bench", "--scope", "ingest", "--data",
        ])
        .arg(data)
        .output()
        .context("running sluice token create")?;
    if !out.status.success() {
        bail!(
            "sluice token create failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    if secret.is_empty() {
        bail!("sluice token create printed no secret");
    }
    Ok(secret)
}

/// The sum of the server's `sluice_events_in_total` series, by `GET /metrics` through curl
/// (HTTPS too; the self-signed certificate is not checked), with `bearer` when auth is on.
fn events_in(url: &str, bearer: Option<&str>) -> Option<f64> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-k", "--fail", "--max-time", "10"]);
    if let Some(b) = bearer {
        cmd.arg("-H").arg(format!("Authorization: Bearer {b}"));
    }
    let out = cmd.arg(format!("{url}/metrics")).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sum = 0.0;
    let mut seen = false;
    for line in text.lines() {
        if line.starts_with("sluice_events_in_total{") {
            sum += line.rsplit(' ').next()?.parse::<f64>().ok()?;
            seen = true;
        }
    }
    seen.then_some(sum)
}

/// One paced wrk run of `secs` against `url` (`…/v1/events`); (requests, non-2xx + errors, p99 ms).
fn wrk_paced(
    script: &Path,
    url: &str,
    body: &Path,
    token: Option<&str>,
    secs: u64,
) -> Result<(u64, u64, f64)> {
    let interval_ms = WRK_THREADS as f64 * 1000.0 * PER_POST as f64 / TARGET_EPS as f64;
    let out = Command::new("wrk")
        .args(["-t", &WRK_THREADS.to_string()])
        .args(["-c", &CONNS.to_string()])
        .args(["-d", &format!("{secs}s")])
        .args(["--timeout", "10s"])
        .arg("-s")
        .arg(script)
        .arg(url)
        .env("SLUICE_BODY", body)
        .env("SLUICE_TOKEN", token.unwrap_or(""))
        .env("SLUICE_INTERVAL_MS", format!("{interval_ms}"))
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| {
            anyhow!(
                "wrk printed no result: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let field = |name: &str| -> f64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    Ok((
        field("requests") as u64,
        (field("non2xx") + field("errors")) as u64,
        field("p99_us") / 1000.0,
    ))
}

/// One setup on a fresh server: start, token, 2 s warm-up, the measured run, stop.
fn measure(setup: Setup, tmp: &Path, body: &Path, n: usize) -> Result<Run> {
    let dir = tmp.join(format!("security-{n}"));
    let mut extra = vec!["--pipeline-threads", "2"];
    if setup.auth {
        extra.push("--auth");
    }
    if setup.tls {
        extra.push("--tls-self-signed");
    }
    let serve = Serve::start(&dir, &extra)?;
    let data = dir.join("data");
    let base = format!(
        "{}://{}",
        if setup.tls { "https" } else { "http" },
        serve.addr
    );
    let (token, admin) = if setup.auth {
        let secret = std::fs::read_to_string(data.join("admin.secret"))
            .context("reading the local secret admin.secret")?;
        (Some(create_token(&data)?), Some(secret.trim().to_string()))
    } else {
        (None, None)
    };
    let script = tmp.join(format!("security-{}.lua", serve.addr.port()));
    std::fs::write(&script, LUA)?;
    let url = format!("{base}/v1/events");
    let (_, warm_failed, _) = wrk_paced(&script, &url, body, token.as_deref(), 2)?;
    if warm_failed > 0 {
        bail!(
            "{}: {warm_failed} requests failed in the warm-up (a refused token?)",
            setup.label
        );
    }
    let in0 = events_in(&base, admin.as_deref());
    let cpu0 = serve.cpu_secs();
    let t0 = Instant::now();
    let (requests, failed, p99_ms) = wrk_paced(&script, &url, body, token.as_deref(), RUN_SECS)?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = serve.cpu_secs() - cpu0;
    let in1 = events_in(&base, admin.as_deref());
    drop(serve);
    let _ = std::fs::remove_file(&script);
    let acked = requests.saturating_sub(failed);
    if acked == 0 {
        bail!("{}: no request was acknowledged", setup.label);
    }
    Ok(Run {
        events: (acked * PER_POST as u64) as f64,
        server_events: in0.zip(in1).map(|(a, b)| b - a),
        secs,
        cpu,
        p99_ms,
        failed,
    })
}

pub(crate) fn row_security(args: &Args, tmp: &Path, out: &mut String) -> Result<()> {
    out.push_str(&format!(
        "\n## Token checking and TLS: server CPU per event at {} k events/s ({PER_POST} events per POST, wrk paced, {CONNS} keep-alive connections, {RUN_SECS} s), median of {} runs\n\n",
        TARGET_EPS / 1000,
        args.reps
    ));
    if !wrk_available() {
        out.push_str("n/a: wrk is not installed (`make bench-pipeline` installs it)\n");
        return Ok(());
    }
    let body = body(tmp, PER_POST)?;
    // runs[setup][rep]
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); SETUPS.len()];
    for rep in 0..args.reps {
        for (at, setup) in SETUPS.iter().enumerate() {
            eprintln!(
                "security: run {}/{}, {} ...",
                rep + 1,
                args.reps,
                setup.label
            );
            runs[at].push(measure(*setup, tmp, &body, at)?);
        }
    }
    out.push_str("| server | events/s | events acked (server counted) | server CPU s | CPU µs/event | (a) µs/event | × (a) | p99 ms | failed | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let med = |at: usize, f: &dyn Fn(&Run) -> f64| median(runs[at].iter().map(f).collect());
    let anchor_us = med(0, &|r| r.us_per_event());
    let mut short = Vec::new();
    for (at, setup) in SETUPS.iter().enumerate() {
        // Each run against the anchor of its own repetition; the median of those ratios.
        let ratios: Vec<f64> = runs[at]
            .iter()
            .zip(&runs[0])
            .map(|(r, a)| r.us_per_event() / a.us_per_event())
            .collect();
        let ratio = median(ratios.clone());
        let each = if at > 0 && ratios.len() > 1 {
            let list: Vec<String> = ratios.iter().map(|x| format!("{x:.2}")).collect();
            format!(" ({})", list.join(", "))
        } else {
            String::new()
        };
        let eps = med(at, &|r| r.eps());
        if eps < 0.95 * TARGET_EPS as f64 {
            short.push(setup.label);
        }
        let server = if runs[at].iter().all(|r| r.server_events.is_some()) {
            format!("{:.0}", med(at, &|r| r.server_events.unwrap_or(f64::NAN)))
        } else {
            "n/a".into()
        };
        let verdict = match at {
            0 => "anchor".to_string(),
            1 => "—".to_string(),
            _ if ratio <= 1.10 => "met".to_string(),
            _ => "MISSED".to_string(),
        };
        out.push_str(&format!(
            "| {} | {:.1} k | {:.0} ({server}) | {:.2} | {:.2} | {:.2} | {:.3}×{each} | {:.1} | {} | {verdict} |\n",
            setup.label,
            eps / 1e3,
            med(at, &|r| r.events),
            med(at, &|r| r.cpu),
            med(at, &|r| r.us_per_event()),
            anchor_us,
            ratio,
            med(at, &|r| r.p99_ms),
            runs[at].iter().map(|r| r.failed).sum::<u64>(),
        ));
    }
    out.push_str(&format!(
        "\nCPU = utime + stime of the `sluice serve` process (`/proc/PID/stat`) over the measured wrk run; µs/event = that / events acknowledged \
         (2xx answers × {PER_POST}; in brackets the server's `sluice_events_in_total` over the same run, read with the local secret). \
         Each server is fresh (`--pipeline-threads 2`, its own temp data dir, 2 s paced warm-up); runs interleaved a, b, c, …; \
         × (a) = median over repetitions of the run's µs/event over the (a) of its repetition (each repetition's in brackets). \
         Target: token checking and TLS add ≤ 10 % CPU per event at 100 k events/s over HTTPS with keep-alive: (c)/(a) ≤ 1.10. \
         This machine has {} cores, shared with wrk (whose own TLS work is not counted).\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    ));
    if !short.is_empty() {
        out.push_str(&format!(
            "\nBelow the target rate (< 95 % of {} k events/s): {}; the µs/event are at the rate shown.\n",
            TARGET_EPS / 1000,
            short.join(", ")
        ));
    }
    Ok(())
}
