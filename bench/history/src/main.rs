//! `sluice-history-bench` (`make bench-history`): Sluice's history queries, bytes per event and
//! ingest CPU beside VictoriaLogs, measured in one run on this machine with one HTTP client.
//!
//! Why one program: the numbers of the issue were measured by hand, one server at a time; a
//! ratio is only worth something when both sides get the same events from the same client on
//! the same machine in the same minute. The servers run as child processes; their CPU is read
//! from /proc around the same work. Every answer is checked against what the events imply and
//! a wrong one is printed as MISMATCH. Nothing is asserted on time: a missed target is a number
//! in the table, not a failure. See bench/history/README.md.

mod cpu;
mod disk;
mod error;
mod events;
mod http;
mod queries;
mod report;
mod servers;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::cpu::Clock;
use crate::disk::Usage;
use crate::error::{BenchError, Result};
use crate::events::{Events, GenSpec};
use crate::http::Client;
use crate::queries::{parse_ndjson, Query};
use crate::report::Row;
use crate::servers::{free_port, Server};

/// The `sluice serve` flag setting how often the columns tier writes a part; the bench sets it
/// so that the columns are written before the queries. Renamed or gone: change this line.
const COLUMNS_EVERY_FLAG: &str = "--columns-every";
/// Its value: the server's default pace, passed explicitly. The events are in a closed hour, so
/// the writer converts them at once whatever the pace; `1s` would only cut them into one part per
/// second before the hour merge (slower to write, the same merged files).
const COLUMNS_EVERY_DEFAULT: &str = "1m";
/// The `sluice serve` flag choosing the columns location (`off` turns the tier off).
const COLUMNS_FLAG: &str = "--columns";
/// The `GET /v1/events` parameter that reads the blobs only, even where columns cover the range.
const BLOBS_ONLY: (&str, &str) = ("columns", "off");
/// The name of the columns writer's thread in `sluice serve` (its CPU is the writing cost).
const COLUMNS_THREAD: &str = "columns";
/// VictoriaLogs' ingest endpoint with the stream, time and message fields of Sluice's events.
const VL_INSERT: &str =
    "/insert/jsonline?_stream_fields=dc,type,subtype&_time_field=epoch&_msg_field=path";
/// How long the store may take to make every posted event readable.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the columns may take to cover every event (parts, then the merged hour).
const COLUMNS_TIMEOUT: Duration = Duration::from_secs(900);
/// How long VictoriaLogs' forced merge may take.
const MERGE_TIMEOUT: Duration = Duration::from_secs(300);
/// The version `scripts/victorialogs.sh` builds.
const VL_VERSION: &str = "v1.52.1";

const USAGE: &str = "\
sluice-history-bench: Sluice's history queries beside VictoriaLogs (make bench-history)

USAGE: cargo run --release -p sluice-history-bench -- [OPTIONS]

OPTIONS:
  --events N          events generated (default 400000; env SLUICE_BENCH_EVENTS)
  --rate N            events per second of event time (default 40000: the issue's 40 k-row second)
  --seed N            sluice gen --seed (default 7)
  --batch N           events per POST, both servers (default 10000)
  --runs N            runs per query, the median is reported (default 5)
  --columns-every D   sluice serve --columns-every while the columns are written (default 1m)
  --sluice PATH       the sluice binary (default: the one beside this program, else
                      target/release/sluice; env SLUICE_BIN)
  --results PATH      where the table is written (default bench/history/RESULTS.md)
  --keep-tmp          keep the temporary directory (data dirs and server logs)
  -h, --help          this text

The table goes to stdout and to bench/history/RESULTS.md. VictoriaLogs comes from
scripts/victorialogs.sh (built once into ${SLUICE_CACHE:-~/.cache/sluice}/bin).
Exit status: 0, or 1 when the run could not be made, or 3 when an answer was wrong (MISMATCH).
";

/// What the run is asked to do.
#[derive(Debug, Clone)]
struct Options {
    events: usize,
    rate: usize,
    seed: u64,
    batch: usize,
    runs: usize,
    columns_every: String,
    sluice: PathBuf,
    results: PathBuf,
    keep_tmp: bool,
}

fn repo_root() -> PathBuf {
    // bench/history → the workspace root.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// The `sluice` built beside this program (the same target directory and profile, wherever
/// CARGO_TARGET_DIR puts it), else `target/release/sluice` of the workspace.
fn default_sluice() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("sluice")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| repo_root().join("target/release/sluice"))
}

fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> Result<T> {
    let value = value.ok_or_else(|| BenchError::Usage(format!("{name} needs a value")))?;
    value
        .parse()
        .map_err(|_| BenchError::Usage(format!("{name}: not a number: {value:?}")))
}

/// The options, or `None` for `--help`.
fn parse_args() -> Result<Option<Options>> {
    let mut opts = Options {
        events: match std::env::var("SLUICE_BENCH_EVENTS") {
            Ok(v) => number("SLUICE_BENCH_EVENTS", Some(v))?,
            Err(_) => 400_000,
        },
        rate: 40_000,
        seed: 7,
        batch: 10_000,
        runs: 5,
        columns_every: COLUMNS_EVERY_DEFAULT.to_owned(),
        sluice: std::env::var_os("SLUICE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(default_sluice),
        results: repo_root().join("bench/history/RESULTS.md"),
        keep_tmp: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--events" => opts.events = number(&arg, args.next())?,
            "--rate" => opts.rate = number(&arg, args.next())?,
            "--seed" => opts.seed = number(&arg, args.next())?,
            "--batch" => opts.batch = number(&arg, args.next())?,
            "--runs" => opts.runs = number(&arg, args.next())?,
            "--columns-every" => {
                opts.columns_every = args
                    .next()
                    .ok_or_else(|| BenchError::Usage(format!("{arg} needs a value")))?
            }
            "--sluice" => {
                opts.sluice = args
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| BenchError::Usage(format!("{arg} needs a value")))?
            }
            "--results" => {
                opts.results = args
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| BenchError::Usage(format!("{arg} needs a value")))?
            }
            "--keep-tmp" => opts.keep_tmp = true,
            "-h" | "--help" => return Ok(None),
            other => {
                return Err(BenchError::Usage(format!(
                    "unknown argument {other:?}\n\n{USAGE}"
                )))
            }
        }
    }
    if opts.events == 0 || opts.rate == 0 || opts.batch == 0 || opts.runs == 0 {
        return Err(BenchError::Usage(
            "--events, --rate, --batch and --runs must be positive".to_owned(),
        ));
    }
    Ok(Some(opts))
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench-history: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&opts) {
        Ok(Outcome::Right) => ExitCode::SUCCESS,
        Ok(Outcome::Mismatch) => {
            eprintln!("bench-history: MISMATCH: at least one answer was wrong (see the table)");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("bench-history: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether every answer was right.
enum Outcome {
    Right,
    Mismatch,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Where the events start: ten minutes into the previous (closed) hour, so that Sluice's
/// columns end as the merged hour files a day of history is made of; earlier when the events
/// span more than the rest of that hour. Both servers accept it (Sluice: up to 10 days back).
fn start_epoch(now: i64, events: usize, rate: usize) -> i64 {
    let span = (events.div_ceil(rate)) as i64;
    let previous_hour = now - now.rem_euclid(3600) - 3600;
    (previous_hour + 600).min(now - now.rem_euclid(3600) - span)
}

/// The VictoriaLogs binary: `scripts/victorialogs.sh path` (builds it once when missing).
fn victorialogs(root: &Path) -> Result<PathBuf> {
    let script = root.join("scripts/victorialogs.sh");
    let out = Command::new(&script)
        .arg("path")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError::Program {
            program: script.display().to_string(),
            detail: format!("could not start: {e}"),
        })?;
    if !out.status.success() {
        return Err(BenchError::Program {
            program: script.display().to_string(),
            detail: out.status.to_string(),
        });
    }
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !path.is_file() {
        return Err(BenchError::Program {
            program: script.display().to_string(),
            detail: format!("printed {}, which is not a file", path.display()),
        });
    }
    Ok(path)
}

/// `sluice serve --help`, to see which columns flags this build has.
fn serve_help(sluice: &Path) -> Result<String> {
    let out = Command::new(sluice)
        .args(["serve", "--help"])
        .output()
        .map_err(|e| BenchError::Program {
            program: format!("{} serve --help", sluice.display()),
            detail: format!("could not start: {e}"),
        })?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `help` lists `flag` as an option (followed by a space or `=`, not a longer flag).
fn lists_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        matches!(
            help[i + flag.len()..].chars().next(),
            Some(' ') | Some('=') | Some('\n')
        )
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A Prometheus text metric's value (the first unlabelled sample of `name`).
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// What ingesting into one server cost.
#[derive(Debug, Default)]
struct Ingest {
    /// Server CPU, ms.
    cpu_ms: f64,
    /// Wall time, ms.
    wall_ms: f64,
    /// What does not add up (events missing), empty when all is well.
    problems: Vec<String>,
}

/// Posts every batch to VictoriaLogs and flushes; CPU and wall until the flush answered. The
/// count of stored events is checked afterwards (outside the measurement).
fn ingest_vl(clock: &Clock, client: &Client, vl: &Server, ev: &Events) -> Result<Ingest> {
    let url = format!("{}{VL_INSERT}", vl.base);
    let c0 = clock.process_ms(vl.pid)?;
    let t0 = Instant::now();
    for batch in &ev.batches {
        client.post(&url, "application/stream+json", batch)?;
    }
    client.get(&format!("{}/internal/force_flush", vl.base), &[])?;
    let wall_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let cpu_ms = clock.process_ms(vl.pid)? - c0;
    let mut problems = Vec::new();
    let body = client.get(
        &format!("{}/select/logsql/query", vl.base),
        &[
            ("query", "* | stats count() as count"),
            ("start", &ev.first.to_string()),
            ("end", &ev.end.to_string()),
        ],
    )?;
    let answer = parse_ndjson("VictoriaLogs count", &body)?;
    let stored = answer
        .rows
        .first()
        .and_then(|r| r.get("count"))
        .map(|c| events::key_text(Some(c)))
        .unwrap_or_default();
    if stored != ev.count.to_string() {
        problems.push(format!(
            "MISMATCH: VictoriaLogs stored {stored:?} events of {}",
            ev.count
        ));
    }
    Ok(Ingest {
        cpu_ms,
        wall_ms,
        problems,
    })
}

/// Asks VictoriaLogs for a forced merge (it runs in the background) and waits for its log line
/// saying it finished; returns the merge's CPU ms (reported, not counted as ingest).
fn merge_vl(clock: &Clock, client: &Client, vl: &Server) -> Result<f64> {
    let c0 = clock.process_ms(vl.pid)?;
    client.get(&format!("{}/internal/force_merge", vl.base), &[])?;
    let deadline = Instant::now() + MERGE_TIMEOUT;
    while !vl
        .log_tail()
        .contains("forced merge for partition_prefix=\"\" has been successfully finished")
    {
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: "VictoriaLogs' forced merge".to_owned(),
                secs: MERGE_TIMEOUT.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(clock.process_ms(vl.pid)? - c0)
}

/// Posts every batch to `sluice serve` (`POST /v1/events`, NDJSON) and waits until the store
/// holds them all (`sluice_events_flushed_total`); CPU and wall until then.
fn ingest_sluice(clock: &Clock, client: &Client, sl: &Server, ev: &Events) -> Result<Ingest> {
    let url = format!("{}/v1/events", sl.base);
    let metrics_url = format!("{}/metrics", sl.base);
    let c0 = clock.process_ms(sl.pid)?;
    let t0 = Instant::now();
    let (mut accepted, mut dropped) = (0u64, 0u64);
    for batch in &ev.batches {
        let body = client.post(&url, "application/x-ndjson", batch)?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| BenchError::parse("POST /v1/events answer", e))?;
        accepted += answer.get("accepted").and_then(Value::as_u64).unwrap_or(0);
        dropped += answer
            .get("dropped_total")
            .and_then(Value::as_u64)
            .unwrap_or(0);
    }
    let deadline = Instant::now() + FLUSH_TIMEOUT;
    loop {
        let text = String::from_utf8_lossy(&client.get(&metrics_url, &[])?).into_owned();
        let flushed = metric(&text, "sluice_events_flushed_total")
            .ok_or_else(|| BenchError::parse("GET /metrics", "no sluice_events_flushed_total"))?;
        if flushed >= accepted as f64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: format!("sluice to store {accepted} events ({flushed} stored)"),
                secs: FLUSH_TIMEOUT.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let wall_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let cpu_ms = clock.process_ms(sl.pid)? - c0;
    let mut problems = Vec::new();
    if accepted != ev.count as u64 || dropped > 0 {
        problems.push(format!(
            "MISMATCH: sluice accepted {accepted} and dropped {dropped} of {} events",
            ev.count
        ));
    }
    Ok(Ingest {
        cpu_ms,
        wall_ms,
        problems,
    })
}

/// What writing the columns cost, once they cover every event.
#[derive(Debug)]
struct ColumnsWrite {
    /// CPU of the columns thread, ms, from its start until the columns were complete.
    cpu_ms: Option<f64>,
    /// Wall time from the server's start until then.
    wall_ms: f64,
    /// Rows written (`sluice_columns_rows_written_total`: parts and merged hours; a writer run
    /// that fails counts none of its rows).
    rows_written: Option<f64>,
    /// Failed writer runs (`sluice_columns_errors_total`; each is tried again).
    errors: Option<f64>,
    /// What the last `sluice columns status` said when they were not complete in time.
    incomplete: Option<String>,
}

/// `sluice columns status --json` over the events' range: (rows, parts), and the JSON.
fn columns_status(sluice: &Path, data: &Path, ev: &Events) -> Result<(u64, u64, String)> {
    let out = Command::new(sluice)
        .args(["columns", "status", "--json", "--data"])
        .arg(data)
        .args(["--from", &ev.first.to_string(), "--to", &ev.end.to_string()])
        .output()
        .map_err(|e| BenchError::Program {
            program: "sluice columns status".to_owned(),
            detail: format!("could not start: {e}"),
        })?;
    if !out.status.success() {
        return Err(BenchError::Program {
            program: "sluice columns status".to_owned(),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            ),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let v: Value =
        serde_json::from_str(&text).map_err(|e| BenchError::parse("sluice columns status", e))?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| BenchError::parse("sluice columns status", format!("no {k:?}")))
    };
    Ok((field("rows")?, field("parts")?, text))
}

/// Waits until the columns cover every event in merged hour files (no parts left).
fn wait_columns(
    clock: &Clock,
    client: &Client,
    sl: &Server,
    sluice: &Path,
    data: &Path,
    ev: &Events,
    started: Instant,
) -> Result<ColumnsWrite> {
    let deadline = Instant::now() + COLUMNS_TIMEOUT;
    let mut incomplete = None;
    loop {
        let (rows, parts, text) = columns_status(sluice, data, ev)?;
        // The status leaves out parts an hour file already covers; they are deleted just after
        // the merge, and the bytes are measured once they are gone.
        let on_disk = part_files(&data.join("columns"));
        if rows == ev.count as u64 && parts == 0 && on_disk == 0 {
            break;
        }
        if Instant::now() > deadline {
            incomplete = Some(format!(
                "after {} s: rows {rows} of {}, parts {parts}, part files on disk {on_disk}",
                COLUMNS_TIMEOUT.as_secs(),
                ev.count
            ));
            eprintln!("bench-history: the columns did not catch up: {text}");
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let cpu_ms = match cpu::thread_named(sl.pid, COLUMNS_THREAD) {
        Some(tid) => Some(clock.thread_ms(sl.pid, tid)?),
        None => None,
    };
    let text =
        String::from_utf8_lossy(&client.get(&format!("{}/metrics", sl.base), &[])?).into_owned();
    Ok(ColumnsWrite {
        cpu_ms,
        wall_ms,
        rows_written: metric(&text, "sluice_columns_rows_written_total"),
        errors: metric(&text, "sluice_columns_errors_total"),
        incomplete,
    })
}

/// Part files (`part-…`) under the columns directory, merged or not.
fn part_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                part_files(&path)
            } else {
                usize::from(e.file_name().to_string_lossy().starts_with("part-"))
            }
        })
        .sum()
}

/// One query's numbers on one side.
#[derive(Debug)]
struct Side {
    cpu_ms: f64,
    wall_ms: f64,
    rows: usize,
    /// `Ok(detail)` when the answer is right, `Err(what differs)`.
    check: std::result::Result<String, String>,
    /// Sluice's `_sluice` trailer (warnings), if any.
    trailer: Option<String>,
}

/// Runs `GET url?params` `runs` times; median server CPU and wall; the last answer checked.
#[allow(clippy::too_many_arguments)]
fn measure(
    clock: &Clock,
    client: &Client,
    server: &Server,
    path: &str,
    params: &[(String, String)],
    runs: usize,
    query: Query,
    ev: &Events,
) -> Result<Side> {
    let url = format!("{}{path}", server.base);
    let params: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (mut cpus, mut walls, mut body) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let c0 = clock.process_ms(server.pid)?;
        let t0 = Instant::now();
        body = client.get(&url, &params)?;
        walls.push(t0.elapsed().as_secs_f64() * 1000.0);
        cpus.push(clock.process_ms(server.pid)? - c0);
    }
    let answer = parse_ndjson(server.name, &body)?;
    Ok(Side {
        cpu_ms: median(cpus),
        wall_ms: median(walls),
        rows: answer.rows.len(),
        check: query.check(ev, &answer.rows),
        trailer: answer.trailer.map(|t| t.to_string()),
    })
}

/// One query on the three sides.
struct QueryResult {
    query: Query,
    vl: Side,
    blobs: Side,
    columns: Side,
}

impl QueryResult {
    fn notes(&self) -> String {
        let mut notes = format!(
            "rows {} / {} / {}",
            self.vl.rows, self.blobs.rows, self.columns.rows
        );
        for (who, side) in [
            ("VictoriaLogs", &self.vl),
            ("blobs", &self.blobs),
            ("columns", &self.columns),
        ] {
            if let Err(what) = &side.check {
                notes.push_str(&format!("; **MISMATCH {who}: {what}**"));
            }
            if let Some(t) = &side.trailer {
                notes.push_str(&format!("; {who} said {t}"));
            }
        }
        notes
    }

    fn right(&self) -> bool {
        self.vl.check.is_ok() && self.blobs.check.is_ok() && self.columns.check.is_ok()
    }
}

fn serve_args(data: &Path, port: u16, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "serve".to_owned(),
        "--data".to_owned(),
        data.display().to_string(),
        "--http".to_owned(),
        format!("127.0.0.1:{port}"),
        "--tcp".to_owned(),
        "off".to_owned(),
        "--udp".to_owned(),
        "off".to_owned(),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// A ratio of events per CPU-second, Sluice ÷ VictoriaLogs, in words: `3.4× cheaper`, or
/// `1.8× more CPU` below 1.
fn cheaper(ratio: f64) -> String {
    if ratio >= 1.0 {
        format!("{}× cheaper", report::times(ratio))
    } else {
        format!("{}× more CPU", report::times(1.0 / ratio))
    }
}

fn per_event(bytes: u64, n: usize) -> String {
    format!("{:.1}", bytes as f64 / n as f64)
}

/// Everything one run measured.
struct Measurements {
    ev: Events,
    /// The `sluice gen` command, for the report.
    gen_line: String,
    /// `--columns-every …` as given to the second `sluice serve`.
    columns_args: Vec<String>,
    /// What this build of `sluice serve` lacks.
    setup_notes: Vec<String>,
    vl_ingest: Ingest,
    vl_merge_ms: f64,
    vl_disk: Usage,
    sl_ingest: Ingest,
    columns_write: Option<ColumnsWrite>,
    columns_disk: Usage,
    wal: Usage,
    store_disk: Usage,
    results: Vec<QueryResult>,
}

impl Measurements {
    fn all_right(&self) -> bool {
        self.results.iter().all(QueryResult::right)
            && self.vl_ingest.problems.is_empty()
            && self.sl_ingest.problems.is_empty()
            && self
                .columns_write
                .as_ref()
                .is_none_or(|c| c.incomplete.is_none())
    }
}

fn run(opts: &Options) -> Result<Outcome> {
    let load_before = report::loadavg();
    let clock = Clock::system()?;
    if !opts.sluice.is_file() {
        return Err(BenchError::Usage(format!(
            "{} not found: cargo build --release -p sluice first (make bench-history does)",
            opts.sluice.display()
        )));
    }
    let vl_bin = victorialogs(&repo_root())?;
    let tmp = tempfile::Builder::new()
        .prefix("sluice-bench-history-")
        .tempdir()
        .map_err(|e| BenchError::io("creating", std::env::temp_dir(), e))?;
    let measured = measure_all(opts, &clock, &vl_bin, tmp.path());
    if opts.keep_tmp {
        let kept = tmp.keep();
        println!("bench-history: kept {}", kept.display());
    }
    let m = measured?;
    let load_after = report::loadavg();
    let text = render(opts, &m, clock.ms_per_tick, &load_before, &load_after);
    println!("\n{text}");
    std::fs::write(&opts.results, &text)
        .map_err(|e| BenchError::io("writing", &opts.results, e))?;
    println!("bench-history: written to {}", opts.results.display());
    Ok(if m.all_right() {
        Outcome::Right
    } else {
        Outcome::Mismatch
    })
}

/// Generates the events, runs both servers in `work` and measures every row.
fn measure_all(opts: &Options, clock: &Clock, vl_bin: &Path, work: &Path) -> Result<Measurements> {
    let help = serve_help(&opts.sluice)?;
    let has_columns = lists_flag(&help, COLUMNS_FLAG);
    let mut setup_notes = Vec::new();
    let columns_args: Vec<String> = if lists_flag(&help, COLUMNS_EVERY_FLAG) {
        vec![COLUMNS_EVERY_FLAG.to_owned(), opts.columns_every.clone()]
    } else {
        setup_notes.push(format!(
            "`sluice serve --help` lists no {COLUMNS_EVERY_FLAG}: columns written at its default pace"
        ));
        Vec::new()
    };
    if !has_columns {
        setup_notes.push(format!(
            "`sluice serve --help` lists no {COLUMNS_FLAG}: no columns tier in this build"
        ));
    }

    let epoch = start_epoch(unix_now(), opts.events, opts.rate);
    let spec = GenSpec {
        count: opts.events,
        seed: opts.seed,
        rate: opts.rate,
        epoch,
        batch: opts.batch,
    };
    let ev = events::generate(&opts.sluice, &spec)?;
    let gen_line = format!(
        "`sluice gen --count {} --seed {} --rate {} --epoch {epoch}` ({:.0} MB of NDJSON, {} .. {})",
        opts.events,
        opts.seed,
        opts.rate,
        ev.bytes as f64 / 1e6,
        queries::rfc3339(ev.first),
        queries::rfc3339(ev.end),
    );
    println!("bench-history: {} events: {gen_line}", ev.count);
    println!(
        "bench-history: expected: {} with status >= 500, {} statuses, request_id {} once, {} events in {}",
        ev.error_ids.len(),
        ev.by_status.len(),
        ev.needle,
        ev.second_rows,
        queries::rfc3339(ev.second)
    );
    let client = Client::new();

    // VictoriaLogs: ingest, flush, merge, bytes.
    let vl_dir = work.join("victorialogs");
    let vl_port = free_port()?;
    let vl_args = vec![
        format!("-storageDataPath={}", vl_dir.display()),
        format!("-httpListenAddr=127.0.0.1:{vl_port}"),
        "-retentionPeriod=100y".to_owned(),
    ];
    let vl = Server::start(
        "VictoriaLogs",
        vl_bin,
        &vl_args,
        format!("http://127.0.0.1:{vl_port}"),
        "/health",
        work.join("victorialogs.log"),
        &client,
    )?;
    println!("bench-history: ingesting into VictoriaLogs");
    let vl_ingest = ingest_vl(clock, &client, &vl, &ev)?;
    let vl_merge_ms = merge_vl(clock, &client, &vl)?;
    let vl_disk = disk::usage(&vl_dir);

    // Sluice, first without its columns: the ingest cost of the blobs alone.
    let data = work.join("sluice");
    let off = if has_columns {
        vec![COLUMNS_FLAG.to_owned(), "off".to_owned()]
    } else {
        Vec::new()
    };
    let port = free_port()?;
    let sl = Server::start(
        "sluice serve",
        &opts.sluice,
        &serve_args(&data, port, &off),
        format!("http://127.0.0.1:{port}"),
        "/healthz",
        work.join("sluice-ingest.log"),
        &client,
    )?;
    println!("bench-history: ingesting into sluice serve (columns off)");
    let sl_ingest = ingest_sluice(clock, &client, &sl, &ev)?;
    sl.stop();

    // Sluice again on the same data, with its columns: the writer converts what is stored.
    let port = free_port()?;
    let started = Instant::now();
    let sl = Server::start(
        "sluice serve",
        &opts.sluice,
        &serve_args(&data, port, &columns_args),
        format!("http://127.0.0.1:{port}"),
        "/healthz",
        work.join("sluice.log"),
        &client,
    )?;
    let columns_write = if has_columns {
        println!("bench-history: waiting for the columns to cover every event");
        Some(wait_columns(
            clock,
            &client,
            &sl,
            &opts.sluice,
            &data,
            &ev,
            started,
        )?)
    } else {
        None
    };
    let columns_disk = disk::usage(&data.join("columns"));
    let wal = disk::usage(&data.join("wal"));
    let store_disk = disk::usage(&data) - columns_disk - wal - disk::usage(&data.join("spool"));

    // The queries: the same client, the same runs, three sides.
    let mut results = Vec::new();
    for query in Query::ALL {
        println!("bench-history: {}", query.label());
        let vl_params = vec![
            ("query".to_owned(), query.logsql(&ev)),
            ("start".to_owned(), ev.first.to_string()),
            ("end".to_owned(), ev.end.to_string()),
        ];
        let sl_params = query.sluice_params(&ev);
        let mut blob_params = sl_params.clone();
        blob_params.push((BLOBS_ONLY.0.to_owned(), BLOBS_ONLY.1.to_owned()));
        let on = |server: &Server, path: &str, params: &[(String, String)]| {
            measure(clock, &client, server, path, params, opts.runs, query, &ev)
        };
        results.push(QueryResult {
            query,
            vl: on(&vl, "/select/logsql/query", &vl_params)?,
            blobs: on(&sl, "/v1/events", &blob_params)?,
            columns: on(&sl, "/v1/events", &sl_params)?,
        });
    }
    vl.stop();
    sl.stop();
    Ok(Measurements {
        ev,
        gen_line,
        columns_args,
        setup_notes,
        vl_ingest,
        vl_merge_ms,
        vl_disk,
        sl_ingest,
        columns_write,
        columns_disk,
        wal,
        store_disk,
        results,
    })
}

/// The ingest, columns-writing and disk rows.
fn write_rows(m: &Measurements) -> Vec<Row> {
    let n = m.ev.count;
    let per_cpu_sec = |cpu_ms: f64| n as f64 / (cpu_ms / 1000.0);
    let vl_rate = per_cpu_sec(m.vl_ingest.cpu_ms);
    let blobs_rate = per_cpu_sec(m.sl_ingest.cpu_ms);
    let columns_cpu = m.columns_write.as_ref().and_then(|c| c.cpu_ms);
    let with_columns_rate = columns_cpu.map(|c| per_cpu_sec(m.sl_ingest.cpu_ms + c));
    let mut rows = Vec::new();

    let mut notes = vec![format!(
        "blobs {} than VL; VL: CPU until `/internal/force_flush` answered (its forced merge after, {} ms CPU, not counted); Sluice: until every event was stored, columns off; columns = that + the columns thread",
        cheaper(blobs_rate / vl_rate),
        report::group(m.vl_merge_ms.round() as u64)
    )];
    notes.extend(m.vl_ingest.problems.iter().map(|p| format!("**{p}**")));
    notes.extend(m.sl_ingest.problems.iter().map(|p| format!("**{p}**")));
    rows.push(Row {
        work: "ingest, events per server CPU-second".into(),
        vl: report::rate(vl_rate),
        blobs: report::rate(blobs_rate),
        columns: with_columns_rate.map_or_else(|| "n/a".to_owned(), report::rate),
        ratio: with_columns_rate.map_or_else(|| "n/a".to_owned(), |r| cheaper(r / vl_rate)),
        target: "≥ 3× cheaper than VL".into(),
        notes: notes.join("; "),
    });

    if let Some(cw) = &m.columns_write {
        let written = cw.rows_written.map_or_else(
            || "rows written unknown".to_owned(),
            |r| {
                format!(
                    "{} rows written for {n} events (parts, then the hour)",
                    report::group(r as u64)
                )
            },
        );
        let mut notes = vec![format!(
            "the `{COLUMNS_THREAD}` thread's CPU from its start until every event was in merged hour files ({:.1} s wall); {written}; {}",
            cw.wall_ms / 1000.0,
            m.columns_args.join(" ")
        )];
        if let Some(errors) = cw.errors.filter(|e| *e > 0.0) {
            notes.push(format!(
                "**failed writer runs: {errors} (`sluice_columns_errors_total`, tried again; see the server log); their rows are not in the count**"
            ));
        }
        if let Some(why) = &cw.incomplete {
            notes.push(format!("**columns incomplete: {why}**"));
        }
        rows.push(Row {
            work: "writing columns, events per CPU-second".into(),
            vl: "—".into(),
            blobs: "—".into(),
            columns: columns_cpu.map_or_else(
                || format!("n/a (no `{COLUMNS_THREAD}` thread)"),
                |c| report::rate(per_cpu_sec(c)),
            ),
            ratio: "—".into(),
            // No anchor writes columns in this run: information, no verdict.
            target: "no anchor: information (design ≥ 300 k)".into(),
            notes: notes.join("; "),
        });
        rows.push(Row {
            work: "columns CPU added to ingest CPU".into(),
            vl: "—".into(),
            blobs: "—".into(),
            columns: columns_cpu.map_or_else(
                || "n/a".to_owned(),
                |c| format!("{:.0} %", 100.0 * c / m.sl_ingest.cpu_ms),
            ),
            ratio: "—".into(),
            target: "≤ 25 %".into(),
            notes: "columns thread CPU ÷ blobs ingest CPU".into(),
        });
    }

    let columns_written = m.columns_disk.files > 0;
    rows.push(Row {
        work: "disk, bytes per event".into(),
        vl: per_event(m.vl_disk.apparent, n),
        blobs: per_event(m.store_disk.apparent, n),
        columns: if columns_written {
            per_event(m.columns_disk.apparent, n)
        } else {
            "n/a (no columns written)".into()
        },
        ratio: if columns_written && m.vl_disk.apparent > 0 {
            format!(
                "{}×",
                report::times(m.columns_disk.apparent as f64 / m.vl_disk.apparent as f64)
            )
        } else {
            "n/a".into()
        },
        target: "columns ≤ 0.8× VL".into(),
        notes: format!(
            "file sizes after VL's forced merge and the columns' hour merge; Sluice blobs = the store (blobs + indexes), WAL excluded ({} B/event); blocks allocated: VL {}, blobs {}, columns {} B/event; {} columns files",
            per_event(m.wal.apparent, n),
            per_event(m.vl_disk.allocated, n),
            per_event(m.store_disk.allocated, n),
            per_event(m.columns_disk.allocated, n),
            m.columns_disk.files
        ),
    });
    rows
}

/// The query rows (and the blob path's own count-by-status row).
fn query_rows(m: &Measurements, tick: f64) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in &m.results {
        rows.push(Row {
            work: format!("{}, CPU ms", r.query.label()),
            vl: report::cpu_ms(r.vl.cpu_ms, tick),
            blobs: report::cpu_ms(r.blobs.cpu_ms, tick),
            columns: report::cpu_ms(r.columns.cpu_ms, tick),
            ratio: report::cpu_ratio(r.columns.cpu_ms, r.vl.cpu_ms, tick),
            target: "≤ 1× VL".into(),
            notes: r.notes(),
        });
        if r.query == Query::CountByStatus {
            rows.push(Row {
                work: "count by status, blob path, CPU ms".into(),
                vl: report::cpu_ms(r.vl.cpu_ms, tick),
                blobs: report::cpu_ms(r.blobs.cpu_ms, tick),
                columns: "—".into(),
                ratio: format!(
                    "blobs ÷ VL: {}",
                    report::cpu_ratio(r.blobs.cpu_ms, r.vl.cpu_ms, tick)
                ),
                target: "blobs ≤ 5× VL".into(),
                notes: "the blob path (`columns=off`) stays measured on its own".into(),
            });
        }
    }
    rows
}

/// Wall times beside the CPU table (what a user waits, on this shared machine).
fn wall_table(m: &Measurements) -> String {
    let mut wall = String::from(
        "| work, wall time | VictoriaLogs | Sluice blobs | Sluice columns |\n|---|---:|---:|---:|\n",
    );
    let columns = m.columns_write.as_ref().map_or_else(
        || "n/a".to_owned(),
        |c| format!("+ {:.1} (written after)", c.wall_ms / 1000.0),
    );
    wall.push_str(&format!(
        "| ingest, s | {:.1} | {:.1} | {columns} |\n",
        m.vl_ingest.wall_ms / 1000.0,
        m.sl_ingest.wall_ms / 1000.0,
    ));
    for r in &m.results {
        wall.push_str(&format!(
            "| {}, ms (median) | {:.0} | {:.0} | {:.0} |\n",
            r.query.label(),
            r.vl.wall_ms,
            r.blobs.wall_ms,
            r.columns.wall_ms
        ));
    }
    wall
}

/// The whole report: what was run, on what machine, the tables.
fn render(
    opts: &Options,
    m: &Measurements,
    tick: f64,
    load_before: &str,
    load_after: &str,
) -> String {
    let date = humantime::format_rfc3339_seconds(SystemTime::now());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut text =
        String::from("# bench-history: Sluice's history queries beside VictoriaLogs\n\n");
    if !m.all_right() {
        text.push_str("**MISMATCH: at least one answer was wrong; see the notes.**\n\n");
    }
    text.push_str(&format!(
        "Run {date} by `make bench-history` (crate `sluice-history-bench`, see bench/history/README.md) on {cpus} CPUs; \
         load average (1, 5, 15 min) {load_before} at the start, {load_after} at the end.\n\n\
         {} events from {}, posted in batches of {} by one Rust HTTP client to VictoriaLogs {VL_VERSION} and to \
         `sluice serve --data D --http 127.0.0.1:PORT --tcp off --udp off`, first with `{COLUMNS_FLAG} off` for the ingest, \
         then again on D with `{}` for the columns and the queries. \
         Server CPU is utime + stime of its process from /proc/PID/stat (one tick = {tick:.0} ms; below it a value shows as `≤ {tick:.0}`); \
         queries: median of {} runs, whole answers read; rows are VictoriaLogs / Sluice blobs / Sluice columns, each checked against the events.\n\n",
        m.ev.count,
        m.gen_line,
        opts.batch,
        m.columns_args.join(" "),
        opts.runs,
    ));
    for note in &m.setup_notes {
        text.push_str(&format!("Note: {note}.\n\n"));
    }
    let mut rows = write_rows(m);
    rows.extend(query_rows(m, tick));
    text.push_str(&report::table(&rows));
    text.push('\n');
    text.push_str(&wall_table(m));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_start_in_the_previous_hour_and_end_before_now() {
        let now = 1_764_356_400 + 125; // 2 min 5 s into an hour
        let start = start_epoch(now, 400_000, 40_000);
        assert_eq!(start, 1_764_356_400 - 3600 + 600);
        // A span longer than the rest of the previous hour starts earlier, still ending in it.
        let start = start_epoch(now, 4_000_000, 1000);
        assert_eq!(start + 4000, 1_764_356_400);
    }

    #[test]
    fn flags_are_found_only_as_whole_options() {
        let help = "  --columns <WHERE>\n  --columns-every <DURATION>\n  --retention <DAYS>\n";
        assert!(lists_flag(help, "--columns"));
        assert!(lists_flag(help, "--columns-every"));
        assert!(!lists_flag("  --columns-every <D>\n", "--columns"));
        assert!(!lists_flag(help, "--columns-retention"));
    }

    #[test]
    fn ingest_ratios_read_both_ways() {
        assert_eq!(cheaper(3.44), "3.4× cheaper");
        assert_eq!(cheaper(0.54), "1.9× more CPU");
    }

    #[test]
    fn part_files_are_counted_under_every_hour() {
        let dir = tempfile::tempdir().unwrap();
        let hour = dir.path().join("date=2026-11-28/hour=19/dc=ams1/type=WEB");
        std::fs::create_dir_all(&hour).unwrap();
        std::fs::write(hour.join("hour-local.parquet"), b"x").unwrap();
        assert_eq!(part_files(dir.path()), 0);
        std::fs::write(hour.join("part-1-2-local.parquet"), b"x").unwrap();
        std::fs::write(dir.path().join("part-3-4-local.parquet"), b"x").unwrap();
        assert_eq!(part_files(dir.path()), 2);
        assert_eq!(part_files(&dir.path().join("missing")), 0);
    }

    #[test]
    fn metrics_and_medians() {
        let text =
            "# HELP x\nsluice_events_flushed_total 400000\nsluice_events_flushed_total_x 1\n";
        assert_eq!(metric(text, "sluice_events_flushed_total"), Some(400_000.0));
        assert_eq!(metric(text, "sluice_missing"), None);
        assert_eq!(median(vec![30.0, 10.0, 20.0, 1000.0, 0.0]), 20.0);
        assert_eq!(median(vec![10.0, 20.0]), 15.0);
    }
}
