//! Helpers shared by the CLI tests: free loopback ports, the clock, running the built `sluice`
//! binary (to completion, or as a [`Proc`] killed on drop), `sluice serve` and its readiness,
//! output lines collected on a thread, and a data directory written through the collector's own
//! pipeline.
//!
//! Contract: every wait is bounded by the caller's limit; a child process never outlives the
//! test ([`Proc`] SIGKILLs and reaps it on drop).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_collector::aggregate::{Aggregator, AggregatorConfig};
use sluice_collector::ingest::{IngestConfig, Ingestor};
// Not every test binary that includes this module waits.
#[allow(unused_imports)]
pub use sluice_test_support::wait_for;

/// A loopback port free when asked (another process may take it before it is bound).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// Runs `sluice args` to completion.
pub fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

/// Asserts that `out` exited with success, showing its stderr otherwise.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines `out` printed on stdout.
pub fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `sluice cat --data dir --from from --to to`.
pub fn cat_data(dir: &Path, from: &str, to: &str) -> Output {
    cat_data_with(dir, from, to, &[])
}

/// `sluice cat --data dir --from from --to to extra…`.
pub fn cat_data_with(dir: &Path, from: &str, to: &str, extra: &[&str]) -> Output {
    let path = dir.to_str().expect("path");
    let mut args = vec!["cat", "--data", path, "--from", from, "--to", to];
    args.extend_from_slice(extra);
    sluice(&args)
}

/// A child killed (and reaped) if the test ends early.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success());
    }

    /// The exit status, waited for at most `within`; `None` while it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status, waited for at most `within` (a panic after that).
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        self.sigterm();
        let pid = self.0.id();
        self.wait_exit(within)
            .unwrap_or_else(|| panic!("process {pid} still running {within:?} after SIGTERM"))
    }
}

/// Output lines, appended by a collecting thread.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// `sluice args` with stdout and stderr piped, and a thread collecting the lines of each.
pub fn spawn_collected(args: &[&str]) -> (Proc, Lines, Lines) {
    let mut proc = Proc(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice"),
    );
    let out = collect(proc.0.stdout.take().expect("stdout"));
    let err = collect(proc.0.stderr.take().expect("stderr"));
    (proc, out, err)
}

/// `sluice serve args` (stdout and stderr discarded); not waited for.
pub fn spawn_serve(args: &[&str]) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("serve")
            // The sharded pipeline is what the tests test.
            .args(if args.contains(&"--pipeline-threads") {
                &[][..]
            } else {
                &["--pipeline-threads", "2"][..]
            })
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sluice serve"),
    )
}

/// `sluice serve --store STORE --data DATA` on a free loopback HTTP port (TCP and UDP off,
/// grace 1 s), waited for until healthy (30 s at most): the process and its base URL.
pub fn serve_store_http_only(store: &str, data: &Path) -> (Proc, String) {
    serve_store_http_only_with(store, data, &[])
}

/// [`serve_store_http_only`] with `extra` flags first (e.g. `--config FILE`).
pub fn serve_store_http_only_with(store: &str, data: &Path, extra: &[&str]) -> (Proc, String) {
    let port = free_port();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend_from_slice(&["--store", store, "--grace", "1"]);
    (
        serve_http_only_on(data, port, &args),
        format!("http://127.0.0.1:{port}"),
    )
}

/// `sluice serve --data DATA` on loopback HTTP `port` only (TCP and UDP off: tests running side
/// by side must not race for the default ports), `extra` flags first, waited for until healthy
/// (30 s at most). A fixed port: a restarted server is found where its clients left it.
pub fn serve_http_only_on(data: &Path, port: u16, extra: &[&str]) -> Proc {
    let http = format!("127.0.0.1:{port}");
    let mut args: Vec<&str> = extra.to_vec();
    args.extend_from_slice(&[
        "--data",
        data.to_str().expect("path"),
        "--http",
        &http,
        "--tcp",
        "off",
        "--udp",
        "off",
    ]);
    let proc = spawn_serve(&args);
    wait_healthy(
        &ureq::agent(),
        &format!("http://{http}"),
        Instant::now() + Duration::from_secs(30),
        Duration::from_millis(50),
    );
    proc
}

/// Polls `GET url/healthz` through `agent` every `poll` until it answers, failing at `deadline`.
pub fn wait_healthy(agent: &ureq::Agent, url: &str, deadline: Instant, poll: Duration) {
    while agent.get(&format!("{url}/healthz")).call().is_err() {
        assert!(Instant::now() < deadline, "server did not come up");
        std::thread::sleep(poll);
    }
}

/// Collects a child's output lines on a thread.
pub fn collect(stream: impl Read + Send + 'static) -> Lines {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            sink.lock().expect("lines").push(line);
        }
    });
    lines
}

/// The collected lines, joined.
pub fn text(lines: &Lines) -> String {
    lines.lock().expect("lines").join("\n")
}

/// The `id` of an NDJSON event line.
pub fn id_of(line: &str) -> i64 {
    serde_json::from_str::<serde_json::Value>(line).expect("json line")["id"]
        .as_i64()
        .expect("id")
}

/// The `id`s of collected NDJSON event lines, in order.
pub fn ids_of(lines: &Lines) -> Vec<i64> {
    lines
        .lock()
        .expect("lines")
        .iter()
        .map(|l| id_of(l))
        .collect()
}

/// POSTs an NDJSON `body` of `n` events to `/v1/events` on loopback `port` and checks that all
/// were acknowledged.
pub fn post_acked(port: u16, body: &str, n: usize) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let resp = agent
        .post(&format!("http://127.0.0.1:{port}/v1/events"))
        .send_string(body)
        .expect("post");
    let reply: serde_json::Value = serde_json::from_reader(resp.into_reader()).expect("json reply");
    assert_eq!(reply["accepted"].as_u64(), Some(n as u64), "{reply}");
}

/// Writes the events of `cfg` into an embedded store at `dir` through the collector's own
/// pipeline (ingested with `ingest` at `now`, all flushed); returns them as JSON values.
pub fn write_store(
    dir: &Path,
    cfg: &sluice_gen::GenConfig,
    ingest: IngestConfig,
    now: i64,
) -> Vec<serde_json::Value> {
    let mut lines = Vec::new();
    sluice_gen::write_json_lines(cfg, &mut lines).expect("gen");
    let mut ingestor = Ingestor::new(ingest).expect("ingestor");
    let outcome = ingestor.ingest(&lines, now);
    assert!(outcome.is_clean(), "{:?}", outcome.dropped.first());
    let store: Arc<dyn sluice_store::Store> =
        Arc::new(sluice_store::EmbeddedStore::open(dir).expect("store"));
    let mut agg = Aggregator::new(AggregatorConfig::default(), store).expect("aggregator");
    agg.add(outcome.events, now);
    let report = agg.flush_all(now);
    assert!(report.is_ok(), "{:?}", report.errors);
    String::from_utf8_lossy(&lines)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// The ingest settings of the written stores: dc `ams1`.
pub fn ams1() -> IngestConfig {
    IngestConfig {
        dc: "ams1".into(),
        ..IngestConfig::default()
    }
}
