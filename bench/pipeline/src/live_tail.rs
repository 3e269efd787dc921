//! Row `live-tail`: emit → tail latency with 10 SSE tails attached at 10k events/s, the live
//! hub (`GET /v1/tail`, default) beside the stored path (`live=0`) measured in the same run.
//!
//! The target, "p99 emit → tail ≤ 100 ms at 10 k events/s with 10 tails", is an absolute
//! wall-clock bound: it is printed as met / MISSED, labelled as the absolute target; the
//! row's verdict is "no anchor: information" (the stored path is shown beside it, with the
//! live/stored p99 ratio, as information).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};

use super::{cpu_seconds, http, thread_cpu_seconds, unix_now, Args};

/// Tail connections attached.
const TAILS: usize = 10;
/// Events per POST.
const PER_POST: usize = 100;
/// One POST every this many ms (100 × 100/s = 10,000 events/s).
const POST_EVERY_MS: u64 = 10;
/// Seconds of emission.
const EMIT_SECS: u64 = 10;
/// How long the tails may take, after the last POST, to see every event.
const DRAIN_SECS: u64 = 20;
/// The absolute target, ms.
const TARGET_P99_MS: f64 = 100.0;

/// Wall clock, µs since the Unix epoch.
fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// What one tail connection saw.
struct TailSeen {
    /// Distinct events (by `id`).
    unique: usize,
    /// Events seen again.
    duplicates: usize,
    /// `event: notice` frames (the live hub let go of the stream: it went on from the store).
    notices: usize,
    /// Latency of each first sighting, µs.
    lat_us: Vec<i64>,
    /// The thread's CPU, s.
    cpu: f64,
}

/// One mode's measurement.
struct ModeRun {
    sent: usize,
    emit_secs: f64,
    tails: Vec<TailSeen>,
    /// Process CPU over the window (emission start → last tail done), s.
    process_cpu: f64,
    /// The bench's own threads (emitter + tail readers) over the same window, s.
    client_cpu: f64,
    window_secs: f64,
}

/// A streaming de-chunker for `Transfer-Encoding: chunked`.
#[derive(Default)]
struct Dechunk {
    /// Bytes left in the current chunk.
    left: usize,
    /// The CRLF after a chunk's data is still due.
    crlf: bool,
    /// The last (zero) chunk came.
    ended: bool,
}

impl Dechunk {
    /// Moves what `raw` holds of chunk data to `out`; keeps an incomplete size line in `raw`.
    fn feed(&mut self, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<()> {
        let mut pos = 0;
        while !self.ended {
            if self.left > 0 {
                let take = self.left.min(raw.len() - pos);
                out.extend_from_slice(&raw[pos..pos + take]);
                pos += take;
                self.left -= take;
                if self.left > 0 {
                    break;
                }
                self.crlf = true;
            }
            if self.crlf {
                if raw.len() - pos < 2 {
                    break;
                }
                pos += 2;
                self.crlf = false;
            }
            let Some(nl) = raw[pos..].windows(2).position(|w| w == b"\r\n") else {
                break;
            };
            let text = String::from_utf8_lossy(&raw[pos..pos + nl]);
            let size = usize::from_str_radix(text.split(';').next().unwrap_or("").trim(), 16)
                .with_context(|| format!("bad chunk size {text:?}"))?;
            pos += nl + 2;
            if size == 0 {
                self.ended = true;
            }
            self.left = size;
        }
        raw.drain(..pos);
        Ok(())
    }
}

/// The integer after `"key":` in `line`.
fn int_field(line: &[u8], key: &[u8]) -> Option<i64> {
    let at = line.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = &line[at..];
    let rest = &rest[rest.iter().take_while(|b| **b == b' ').count()..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Opens `GET target` as an SSE stream; returns the socket after the response head and any
/// body bytes read with it.
fn open_tail(addr: SocketAddr, target: &str) -> Result<(TcpStream, Vec<u8>)> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    c.set_nodelay(true)?;
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    c.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )?;
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if Instant::now() > deadline {
            bail!("GET {target}: no response head");
        }
        let mut chunk = [0u8; 4096];
        match c.read(&mut chunk) {
            Ok(0) => bail!("GET {target}: connection closed before the response head"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("reading the tail's response head"),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!("GET {target}: {}", head.lines().next().unwrap_or(""));
    }
    if !head.contains("transfer-encoding: chunked") {
        bail!("GET {target}: expected a chunked response");
    }
    let rest = buf[end + 4..].to_vec();
    Ok((c, rest))
}

/// Reads one tail until it has seen `expected` distinct events (set once the emitter is done),
/// or `stop`.
fn follow(
    mut c: TcpStream,
    mut raw: Vec<u8>,
    capacity: usize,
    expected: &AtomicU64,
    stop: &AtomicBool,
) -> Result<TailSeen> {
    let cpu0 = thread_cpu_seconds();
    let mut seen = vec![false; capacity];
    let mut out = TailSeen {
        unique: 0,
        duplicates: 0,
        notices: 0,
        lat_us: Vec::with_capacity(capacity),
        cpu: 0.0,
    };
    let mut de = Dechunk::default();
    let mut sse = Vec::new();
    let mut in_event = false;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut now = wall_us();
    loop {
        de.feed(&mut raw, &mut sse)?;
        let mut start = 0;
        while let Some(nl) = sse[start..].iter().position(|b| *b == b'\n') {
            let line = &sse[start..start + nl];
            start += nl + 1;
            if line.is_empty() {
                in_event = false;
            } else if let Some(name) = line.strip_prefix(b"event: ") {
                in_event = name == b"event";
                if name == b"notice" {
                    out.notices += 1;
                }
            } else if in_event && line.starts_with(b"data: ") {
                let (Some(id), Some(sent)) = (
                    int_field(line, b"\"id\":"),
                    int_field(line, b"\"sent_us\":"),
                ) else {
                    continue;
                };
                match seen.get_mut(id as usize) {
                    Some(s) if !*s => {
                        *s = true;
                        out.unique += 1;
                        out.lat_us.push((now - sent).max(0));
                    }
                    Some(_) => out.duplicates += 1,
                    None => bail!("event id {id} beyond {capacity}"),
                }
            }
        }
        sse.drain(..start);
        if out.unique as u64 >= expected.load(Ordering::Acquire)
            || stop.load(Ordering::Acquire)
            || de.ended
        {
            break;
        }
        match c.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                now = wall_us();
                raw.extend_from_slice(&chunk[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("reading a tail"),
        }
    }
    out.cpu = thread_cpu_seconds() - cpu0;
    Ok(out)
}

/// The value of the metric line `name value` in `/metrics`.
fn metric(addr: SocketAddr, name: &str) -> Result<f64> {
    let (st, body) = http(addr, "GET", "/metrics", b"")?;
    if st != 200 {
        bail!("GET /metrics: {st}");
    }
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse::<f64>().ok()).flatten()
        })
        .ok_or_else(|| anyhow!("/metrics has no {name}"))
}

/// POSTs `PER_POST` events every `POST_EVERY_MS` ms for `EMIT_SECS` s; returns (events sent,
/// emission seconds, thread CPU).
fn emit(addr: SocketAddr) -> Result<(usize, f64, f64)> {
    let cpu0 = thread_cpu_seconds();
    let t0 = Instant::now();
    let posts = EMIT_SECS * 1000 / POST_EVERY_MS;
    let mut id = 0usize;
    let mut body = String::with_capacity(PER_POST * 80);
    for k in 0..posts {
        let at = t0 + Duration::from_millis(k * POST_EVERY_MS);
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        body.clear();
        let epoch = unix_now();
        let sent = wall_us();
        for _ in 0..PER_POST {
            body.push_str(&format!(
                "{{\"type\":\"LIVEB\",\"epoch\":{epoch},\"id\":{id},\"sent_us\":{sent}}}\n"
            ));
            id += 1;
        }
        let (st, b) = http(addr, "POST", "/v1/events", body.as_bytes())?;
        if !(200..300).contains(&st) {
            bail!("POST /v1/events: {st} {}", String::from_utf8_lossy(&b));
        }
    }
    Ok((id, t0.elapsed().as_secs_f64(), thread_cpu_seconds() - cpu0))
}

/// One mode: a fresh in-process server, `TAILS` tails with `query`, the emission, the drain.
fn measure(dir: &Path, live: bool) -> Result<ModeRun> {
    let cfg = sluice_server::ServerConfig {
        data_dir: dir.to_path_buf(),
        http: Some(([127, 0, 0, 1], 0).into()),
        tcp: None,
        udp: None,
        ..sluice_server::ServerConfig::default()
    };
    let server =
        sluice_server::Server::start(cfg).map_err(|e| anyhow!("starting the server: {e}"))?;
    let result = measure_on(
        server
            .http_addr
            .ok_or_else(|| anyhow!("the server has no HTTP address"))?,
        live,
    );
    server
        .shutdown()
        .map_err(|e| anyhow!("server shutdown: {e}"))?;
    result
}

fn measure_on(addr: SocketAddr, live: bool) -> Result<ModeRun> {
    let target = if live {
        "/v1/tail?type=LIVEB"
    } else {
        "/v1/tail?type=LIVEB&live=0"
    };
    let capacity = (EMIT_SECS * 1000 / POST_EVERY_MS) as usize * PER_POST;
    let expected = Arc::new(AtomicU64::new(u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles: Vec<JoinHandle<Result<TailSeen>>> = Vec::new();
    for _ in 0..TAILS {
        let (c, raw) = open_tail(addr, target)?;
        let (expected, stop) = (expected.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            follow(c, raw, capacity, &expected, &stop)
        }));
    }
    // Every tail attached: subscribed to the live hub, or (live=0) streaming and past its first
    // store poll.
    let (name, want) = if live {
        ("sluice_tail_live_subscribers", TAILS as f64)
    } else {
        ("sluice_tail_streams", TAILS as f64)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = metric(addr, name)?;
        if v == want {
            break;
        }
        if Instant::now() > deadline {
            stop.store(true, Ordering::Release);
            bail!("{name} is {v}, not {want}, after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !live {
        std::thread::sleep(Duration::from_millis(300));
    }
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let emitted = std::thread::spawn(move || emit(addr))
        .join()
        .map_err(|_| anyhow!("the emitter panicked"));
    let (sent, emit_secs, emit_cpu) = match emitted.and_then(|r| r) {
        Ok(x) => x,
        Err(e) => {
            stop.store(true, Ordering::Release);
            return Err(e);
        }
    };
    expected.store(sent as u64, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(DRAIN_SECS);
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Release);
    let mut tails = Vec::new();
    for h in handles {
        tails.push(h.join().map_err(|_| anyhow!("a tail thread panicked"))??);
    }
    let window_secs = t0.elapsed().as_secs_f64();
    let process_cpu = cpu_seconds() - cpu0;
    let client_cpu = emit_cpu + tails.iter().map(|t| t.cpu).sum::<f64>();
    Ok(ModeRun {
        sent,
        emit_secs,
        tails,
        process_cpu,
        client_cpu,
        window_secs,
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

/// Nearest-rank percentile of sorted `xs`, ms.
fn pct_ms(xs: &[i64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let i = ((xs.len() as f64 * p).ceil() as usize)
        .saturating_sub(1)
        .min(xs.len() - 1);
    Some(xs[i] as f64 / 1000.0)
}

pub(crate) fn row_live_tail(_args: &Args, tmp: &Path, out: &mut String) -> Result<()> {
    let eps = PER_POST as u64 * 1000 / POST_EVERY_MS;
    out.push_str(&format!(
        "\n## Live tail: emit → tail latency, in-process server (default config, grace {} ms), {TAILS} SSE tails of `GET /v1/tail?type=LIVEB`, {eps} events/s for {EMIT_SECS} s\n\n",
        sluice_server::DEFAULT_GRACE_MS
    ));
    let load_before = loadavg();
    let mut runs = Vec::new();
    for (mode, live) in [
        ("live (default)", true),
        ("stored (`live=0`, anchor)", false),
    ] {
        eprintln!("live-tail: {mode}, {TAILS} tails, {eps} events/s for {EMIT_SECS} s ...");
        let dir = tmp.join(format!("live-tail-{live}"));
        let run = measure(&dir, live)?;
        let _ = std::fs::remove_dir_all(&dir);
        runs.push((mode, live, run));
    }
    let load_after = loadavg();
    out.push_str(
        "| tails | events/s | mode | events seen | p50 ms | p99 ms | max ms | target | verdict |\n\
         |---:|---:|---|---|---:|---:|---:|---|---|\n",
    );
    let mut p99s = Vec::new();
    for (mode, live, run) in &runs {
        let mut lat: Vec<i64> = run
            .tails
            .iter()
            .flat_map(|t| t.lat_us.iter().copied())
            .collect();
        lat.sort_unstable();
        let complete = run.tails.iter().filter(|t| t.unique == run.sent).count();
        let dups: usize = run.tails.iter().map(|t| t.duplicates).sum();
        let min_seen = run.tails.iter().map(|t| t.unique).min().unwrap_or(0);
        let seen = if complete == run.tails.len() {
            format!("all {} × {} tails", run.sent, run.tails.len())
        } else {
            format!(
                "{complete}/{} tails complete (fewest {min_seen} of {})",
                run.tails.len(),
                run.sent
            )
        };
        let seen = if dups > 0 {
            format!("{seen}, {dups} duplicates")
        } else {
            seen
        };
        let notices: usize = run.tails.iter().map(|t| t.notices).sum();
        let seen = if notices > 0 {
            format!("{seen}, {notices} notices (live dropped, went on from the store)")
        } else {
            seen
        };
        let p99 = pct_ms(&lat, 0.99);
        p99s.push(p99);
        let fmt = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{v:.1}"));
        let (target, verdict) = if *live {
            let absolute = match p99 {
                Some(p) if p <= TARGET_P99_MS => "met",
                _ => "MISSED",
            };
            (
                format!("p99 ≤ {TARGET_P99_MS:.0} ms (absolute, no anchor)"),
                format!("no anchor: information; issue's absolute target: {absolute}"),
            )
        } else {
            ("anchor".to_string(), "anchor".to_string())
        };
        let verdict = if complete == run.tails.len() && dups == 0 {
            verdict
        } else {
            format!("INCOMPLETE; {verdict}")
        };
        out.push_str(&format!(
            "| {} | {:.0} | {mode} | {seen} | {} | {} | {} | {target} | {verdict} |\n",
            run.tails.len(),
            run.sent as f64 / run.emit_secs,
            fmt(pct_ms(&lat, 0.5)),
            fmt(p99),
            fmt(lat.last().map(|x| *x as f64 / 1000.0)),
        ));
    }
    if let [Some(live), Some(stored)] = p99s[..] {
        out.push_str(&format!(
            "\nlive/stored p99: {:.3}× (information)\n",
            live / stored
        ));
    }
    out.push_str(
        "\n| mode | window s | process CPU s | bench threads CPU s | server CPU s | server CPU % of a core |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (mode, _, run) in &runs {
        let server = run.process_cpu - run.client_cpu;
        out.push_str(&format!(
            "| {mode} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} |\n",
            run.window_secs,
            run.process_cpu,
            run.client_cpu,
            server,
            100.0 * server / run.window_secs
        ));
    }
    out.push_str(&format!(
        "\nLatency = the tail's wall clock when the read that carried the event returned − the event's `sent_us` (wall clock taken \
         just before its POST, 100 events per POST every 10 ms, each POST answered once durable, `Connection: close`); all {TAILS} tails' \
         events pooled. The tails are raw TCP readers of the chunked SSE stream, one thread each, attached before the emission \
         (live: `sluice_tail_live_subscribers` = {TAILS}; stored: `sluice_tail_streams` = {TAILS}, then 0.3 s). Every tail must see \
         every event once, else INCOMPLETE; an `event: notice` (the hub let go of a tail, which went on from the store) is counted in `events seen`. Server CPU = process CPU − the bench's emitter and tail threads (thread CPU), over the \
         window from the first POST to the last tail done (the stored window also waits for the last second's flush). \
         Load average before / after: {load_before} / {load_after}. The issue's target is absolute (wall clock, no anchor): \
         information, labelled met / MISSED; the stored path is the anchor beside it.\n"
    ));
    Ok(())
}
