//! The pipeline-threads server rows, through the real `sluice serve` (the release binary next to this
//! bench, `cargo build --release -p sluice`) loaded over HTTP by `wrk` (Debian package `wrk`;
//! `make bench-pipeline` installs it) with a Lua script that POSTs an NDJSON body of `sluice_gen`
//! events (their `epoch` removed, so the server stamps each with its arrival second and every
//! second is flushed as it would be live):
//!
//! - `shards`: acknowledged events/s with `--pipeline-threads 1` and `2` (1,000 events per POST,
//!   8 connections, a 2 GiB memory budget), and events per CPU-second of the server process;
//!   then the same payloads handed to the pipeline in-process (`Server::ingester`), with no
//!   HTTP and no wrk on the cores.
//! - `http`: p50 / p99 of `POST /v1/events` (100 events per POST) at 1, 4 and 16 connections on
//!   the default settings (pipeline threads = cores), beside the same with one pipeline thread
//!   (what the unsharded pipeline did: every flush held every acknowledgement).

use super::*;

/// Seconds of each wrk run (after a 2 s warm-up run that is not reported).
pub(crate) const RUN_SECS: u64 = 10;

/// The wrk script: POST the body named by `SLUICE_BODY`; print one parsable line at the end.
const LUA: &str = r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
local f = assert(io.open(os.getenv("SLUICE_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
function done(summary, latency, requests)
  io.write(string.format("RESULT p50_us=%d p99_us=%d max_us=%d requests=%d non2xx=%d errors=%d\n",
    latency:percentile(50), latency:percentile(99), latency.max, summary.requests,
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"#;

/// The memory budget of the pipeline-threads rows. Open seconds take ~350 bytes per event
/// (their encoders' tables): near 1 M events/s the default 512 MiB holds less than the open
/// second, the grace and one flush, and a fifth of the POSTs got 503. These rows measure
/// throughput, not the budget.
const BUDGET: u64 = 2 << 30;

/// What one wrk run measured.
struct WrkRun {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    requests: u64,
    failed: u64,
    secs: f64,
    /// CPU-seconds of the server process during the run.
    server_cpu: f64,
}

/// `sluice serve` on its own data directory, stopped (SIGTERM) and removed on drop.
pub(crate) struct Serve {
    child: Child,
    pub(crate) addr: SocketAddr,
    dir: PathBuf,
}

impl Serve {
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Result<Serve> {
        let exe = std::env::current_exe()?;
        let bin = exe
            .parent()
            .map(|d| d.join("sluice"))
            .filter(|b| b.exists())
            .ok_or_else(|| {
                anyhow!("no sluice binary next to the bench: run `cargo build --release -p sluice`")
            })?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let data = dir.join("data");
        let child = Command::new(bin)
            .arg("serve")
            .arg("--data")
            .arg(&data)
            .args(["--http", "127.0.0.1:0", "--tcp", "off", "--udp", "off"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("spawning sluice serve")?;
        let mut serve = Serve {
            child,
            addr: "127.0.0.1:0".parse()?,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(a) = std::fs::read_to_string(data.join("SERVER"))
                .ok()
                .and_then(|t| {
                    let t = t.trim();
                    let a = t
                        .strip_prefix("http://")
                        .or_else(|| t.strip_prefix("https://"))?;
                    a.parse().ok()
                })
            {
                serve.addr = a;
                return Ok(serve);
            }
            if Instant::now() > deadline {
                bail!("sluice serve did not start within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// CPU-seconds (user + system) the process used so far.
    pub(crate) fn cpu_secs(&self) -> f64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())) else {
            return 0.0;
        };
        // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(") ").map_or("", |r| r.1);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            f.get(i - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (ticks(14) + ticks(15)) / hz.max(1.0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether wrk is installed (else the rows print why not).
pub(crate) fn wrk_available() -> bool {
    Command::new("wrk")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// An NDJSON body of `count` generated events without their `epoch` (stamped by the server).
pub(crate) fn body(tmp: &Path, count: usize) -> Result<PathBuf> {
    let cfg = sluice_gen::GenConfig {
        count,
        ..sluice_gen::GenConfig::default()
    };
    let mut text = Vec::new();
    sluice_gen::write_json_lines(&cfg, &mut text)?;
    let mut out = String::new();
    for line in String::from_utf8(text)?.lines() {
        match line.strip_prefix("{\"epoch\":") {
            Some(rest) => {
                let comma = rest.find(',').ok_or_else(|| anyhow!("odd event {line}"))?;
                out.push('{');
                out.push_str(&rest[comma + 1..]);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    let path = tmp.join(format!("body-{count}.ndjson"));
    std::fs::write(&path, out)?;
    Ok(path)
}

/// One wrk run of `secs` against `serve` with `conns` connections.
fn wrk(serve: &Serve, tmp: &Path, body: &Path, conns: usize, secs: u64) -> Result<WrkRun> {
    // One script per server: two wrk runs at once must not read each other's half-written file.
    let script = tmp.join(format!("post-{}.lua", serve.addr.port()));
    std::fs::write(&script, LUA)?;
    let cpu0 = serve.cpu_secs();
    let t0 = Instant::now();
    let out = Command::new("wrk")
        .args(["-t", &conns.clamp(1, 2).to_string()])
        .args(["-c", &conns.to_string()])
        .args(["-d", &format!("{secs}s")])
        .args(["--timeout", "10s"])
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{}/v1/events", serve.addr))
        .env("SLUICE_BODY", body)
        .output()
        .context("running wrk")?;
    let secs = t0.elapsed().as_secs_f64();
    let server_cpu = serve.cpu_secs() - cpu0;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| anyhow!("wrk printed no result: {text}"))?;
    let field = |name: &str| -> f64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(WrkRun {
        p50_ms: field("p50_us") / 1000.0,
        p99_ms: field("p99_us") / 1000.0,
        max_ms: field("max_us") / 1000.0,
        requests: field("requests") as u64,
        failed: (field("non2xx") + field("errors")) as u64,
        secs,
        server_cpu,
    })
}

pub(crate) fn row_shards(args: &Args, tmp: &Path, out: &mut String) -> Result<()> {
    const PER_POST: usize = 1000;
    const CONNS: usize = 8;
    out.push_str(&format!(
        "\n## Pipeline threads: acknowledged HTTP ingest into `sluice serve`, {PER_POST} events per POST, {CONNS} connections, {RUN_SECS} s (wrk), `--max-pending-bytes` {} GiB\n\n",
        BUDGET >> 30
    ));
    if !wrk_available() {
        out.push_str("n/a: wrk is not installed (`make bench-pipeline` installs it)\n");
        return Ok(());
    }
    let body = body(tmp, PER_POST)?;
    out.push_str("| pipeline threads | events/s | × 1 thread | events per server CPU-s | server CPU (cores) | p99 ms | failed |\n|---|---|---|---|---|---|---|\n");
    let mut base = None;
    for threads in [1usize, 2] {
        let serve = Serve::start(
            &tmp.join(format!("shards-{threads}")),
            &[
                "--pipeline-threads",
                &threads.to_string(),
                "--max-pending-bytes",
                &BUDGET.to_string(),
            ],
        )?;
        wrk(&serve, tmp, &body, CONNS, 2)?;
        let r = wrk(&serve, tmp, &body, CONNS, RUN_SECS)?;
        // Only acknowledged payloads count (a 503 under backpressure is fast, not ingest).
        let acked = r.requests.saturating_sub(r.failed) * PER_POST as u64;
        let eps = acked as f64 / r.secs;
        let base_eps = *base.get_or_insert(eps);
        out.push_str(&format!(
            "| {threads} | {:.0} k | {:.2}× | {:.0} k | {:.2} | {:.1} | {} |\n",
            eps / 1e3,
            eps / base_eps,
            acked as f64 / r.server_cpu.max(1e-9) / 1e3,
            r.server_cpu / r.secs,
            r.p99_ms,
            r.failed
        ));
    }
    // The ceiling: two servers of one thread each, each loaded by its own wrk with half the
    // connections, at the same time — two pipelines that share nothing.
    let budget = BUDGET.to_string();
    let args_one = ["--pipeline-threads", "1", "--max-pending-bytes", &budget];
    let a = Serve::start(&tmp.join("shards-side-a"), &args_one)?;
    let b = Serve::start(&tmp.join("shards-side-b"), &args_one)?;
    let both = |secs: u64| -> Result<(WrkRun, WrkRun)> {
        std::thread::scope(|s| {
            let ha = s.spawn(|| wrk(&a, tmp, &body, CONNS / 2, secs));
            let hb = s.spawn(|| wrk(&b, tmp, &body, CONNS / 2, secs));
            let ra = ha.join().map_err(|_| anyhow!("wrk thread panicked"))??;
            let rb = hb.join().map_err(|_| anyhow!("wrk thread panicked"))??;
            Ok((ra, rb))
        })
    };
    both(2)?;
    let (ra, rb) = both(RUN_SECS)?;
    drop((a, b));
    let acked: u64 = [&ra, &rb]
        .iter()
        .map(|r| r.requests.saturating_sub(r.failed) * PER_POST as u64)
        .sum();
    let secs = ra.secs.max(rb.secs);
    let eps = acked as f64 / secs;
    let cpu = ra.server_cpu + rb.server_cpu;
    out.push_str(&format!(
        "| 2 servers × 1 thread side by side, a wrk each with {} connections (nothing shared: the ceiling) | {:.0} k | {:.2}× | {:.0} k | {:.2} | {:.1} | {} |\n",
        CONNS / 2,
        eps / 1e3,
        eps / base.unwrap_or(eps),
        acked as f64 / cpu.max(1e-9) / 1e3,
        cpu / secs,
        ra.p99_ms.max(rb.p99_ms),
        ra.failed + rb.failed
    ));
    out.push_str(&format!(
        "\nTarget: ≥ 1.7× at 2 threads; the anchor is the last row. This machine has {} cores, shared with wrk (and whatever else runs).\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    ));
    row_shards_in_process(args, tmp, &body, PER_POST, out)
}

/// The in-process setups, each run `reps` times (alternating, median reported): pipeline
/// threads per server, servers.
const IN_PROCESS: [(usize, usize); 3] = [(1, 1), (2, 1), (1, 2)];

/// Payloads in flight in the in-process rows (split evenly over the servers).
const IN_PROCESS_CONNS: usize = 16;

/// The same load without HTTP or a load generator on the cores: `Server::ingester` hands the
/// same payloads to the pipeline in this process (parsed, logged, fsynced, acknowledged,
/// aggregated, flushed, stored), [`IN_PROCESS_CONNS`] at a time. Beside one server with one and
/// with two pipeline threads, two servers of one thread each run side by side: two pipelines
/// that share nothing (their own WAL, store, shards), what perfect sharding could give on this
/// machine — the kernel's writeback, the feeding tasks and the shared caches take their part
/// of the cores either way.
fn row_shards_in_process(
    args: &Args,
    tmp: &Path,
    body: &Path,
    per_post: usize,
    out: &mut String,
) -> Result<()> {
    let conns = IN_PROCESS_CONNS;
    out.push_str(&format!(
        "\n### The pipeline alone: the same payloads handed in-process (`Server::ingester`, no HTTP, no wrk), {conns} at a time, {RUN_SECS} s, `max_pending_bytes` {} GiB, median of {} runs\n\n",
        BUDGET >> 30,
        args.reps
    ));
    out.push_str("| setup | events/s | × 1 thread | events per CPU-s | CPU (cores) |\n|---|---|---|---|---|\n");
    let payload = sluice_server::Bytes::from(std::fs::read(body)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Per setup: (events/s, events per CPU-s, cores) of each run; refused payloads in all.
    let mut runs: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); IN_PROCESS.len()];
    let mut refused_total = vec![0u64; IN_PROCESS.len()];
    for _ in 0..args.reps {
        for (at, &(threads, servers)) in IN_PROCESS.iter().enumerate() {
            let mut started = Vec::new();
            for n in 0..servers {
                let dir = tmp.join(format!("inproc-{threads}-{n}"));
                let _ = std::fs::remove_dir_all(&dir);
                let server = sluice_server::Server::start(sluice_server::ServerConfig {
                    data_dir: dir.clone(),
                    http: None,
                    tcp: None,
                    udp: None,
                    pipeline_threads: Some(threads),
                    max_pending_bytes: Some(BUDGET),
                    ..sluice_server::ServerConfig::default()
                })?;
                started.push((server, dir));
            }
            let ingesters: Vec<_> = started.iter().map(|(s, _)| s.ingester()).collect();
            // (acknowledged payloads, refused ones) over `secs` seconds.
            let run = |secs: u64| -> (u64, u64) {
                rt.block_on(async {
                    let end = Instant::now() + Duration::from_secs(secs);
                    let mut tasks = tokio::task::JoinSet::new();
                    for c in 0..conns {
                        let ingester = ingesters[c % ingesters.len()].clone();
                        let payload = payload.clone();
                        tasks.spawn(async move {
                            let (mut acked, mut refused) = (0u64, 0u64);
                            while Instant::now() < end {
                                match ingester.ingest(payload.clone()).await {
                                    Ok(_) => acked += 1,
                                    Err(_) => {
                                        // Backpressure: back off as a client would.
                                        refused += 1;
                                        tokio::time::sleep(Duration::from_millis(10)).await;
                                    }
                                }
                            }
                            (acked, refused)
                        });
                    }
                    let (mut acked, mut refused) = (0, 0);
                    while let Some(r) = tasks.join_next().await {
                        let (a, f) = r.unwrap_or((0, 0));
                        acked += a;
                        refused += f;
                    }
                    (acked, refused)
                })
            };
            run(2);
            let (cpu0, t0) = (cpu_seconds(), Instant::now());
            let (acked, refused) = run(RUN_SECS);
            let (cpu, secs) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
            for (server, dir) in started {
                server.shutdown()?;
                let _ = std::fs::remove_dir_all(&dir);
            }
            let events = (acked * per_post as u64) as f64;
            runs[at].0.push(events / secs);
            runs[at].1.push(events / cpu.max(1e-9));
            runs[at].2.push(cpu / secs);
            refused_total[at] += refused;
        }
    }
    let base = median(runs[0].0.clone());
    for (at, &(threads, servers)) in IN_PROCESS.iter().enumerate() {
        let (eps, per_cpu, cores) = &runs[at];
        let setup = match servers {
            1 => format!(
                "1 server, {threads} pipeline thread{}",
                if threads > 1 { "s" } else { "" }
            ),
            n => format!(
                "{n} servers × {threads} thread, side by side (nothing shared: the ceiling)"
            ),
        };
        let eps = median(eps.clone());
        out.push_str(&format!(
            "| {setup} | {:.0} k | {:.2}× | {:.0} k | {:.2} |{}\n",
            eps / 1e3,
            eps / base,
            median(per_cpu.clone()) / 1e3,
            median(cores.clone()),
            if refused_total[at] > 0 {
                format!(" ({} payloads refused: backpressure)", refused_total[at])
            } else {
                String::new()
            }
        ));
    }
    out.push_str("\nTarget: ≥ 1.7× at 2 threads. The anchor is the last row: two pipelines that share nothing, on the same two cores. The CPU column is this whole process: the pipelines, their WAL syncs, flushes and store writes, and the feeding tasks; the kernel's writeback of the WAL (~500 MB/s at 1 M events/s) runs outside it, on the same cores.\n");
    Ok(())
}

pub(crate) fn row_http(_args: &Args, tmp: &Path, out: &mut String) -> Result<()> {
    const PER_POST: usize = 100;
    out.push_str(&format!(
        "\n## POST /v1/events latency under load: {PER_POST} events per POST, wrk, {RUN_SECS} s per cell\n\n"
    ));
    if !wrk_available() {
        out.push_str("n/a: wrk is not installed (`make bench-pipeline` installs it)\n");
        return Ok(());
    }
    let body = body(tmp, PER_POST)?;
    out.push_str("| server | connections | requests/s | p50 ms | p99 ms | max ms | failed |\n|---|---|---|---|---|---|---|\n");
    for (label, extra) in [
        ("default (threads = cores)", &[][..]),
        ("--pipeline-threads 1", &["--pipeline-threads", "1"][..]),
    ] {
        let serve = Serve::start(&tmp.join("http"), extra)?;
        wrk(&serve, tmp, &body, 4, 2)?;
        for conns in [1usize, 4, 16] {
            let r = wrk(&serve, tmp, &body, conns, RUN_SECS)?;
            out.push_str(&format!(
                "| {label} | {conns} | {:.0} | {:.1} | {:.1} | {:.1} | {} |\n",
                r.requests as f64 / r.secs,
                r.p50_ms,
                r.p99_ms,
                r.max_ms,
                r.failed
            ));
        }
    }
    out.push_str("\nTarget: p99 < 50 ms at 16 connections on the default settings. Before (one pipeline thread, same machine): p99 122 ms at 1 connection, 334–488 ms at 4–16.\n");
    Ok(())
}
