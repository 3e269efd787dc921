//! The exporter loop: closed rollup steps → a bounded queue of batches → a sink, with retries.
//!
//! ```text
//! poll thread:  every poll_interval, per rollup: steps [next, closed) → RowSource::rows
//!               → batches of ≤ batch_rows rows (whole steps) → queue (full: drop the oldest)
//! send thread:  front batch → Sink::send → acknowledged: pop, count rows
//!                                        → retryable: count, wait (capped exponential backoff), again
//!                                        → rejected (a 4xx): pop, count, never retried
//! ```
//!
//! - **Each closed step once**: a step is closed when its end is at least `delay` in the past;
//!   the exporter remembers, per rollup, the first step not yet queued (`next`), starting at
//!   `start` (aligned down to the step). Memory only: a restart begins again at `start`
//!   ([`Exporter::progress`] lets the server keep it).
//! - **At least once**: a batch leaves the queue only when the sink acknowledged it (or rejected
//!   it for good); a retried batch may arrive twice (same series, same timestamps: receivers
//!   keep one).
//! - **Bounded**: at most `queue_capacity` batches; a full queue drops the oldest batch that is
//!   not being sent, counted in `dropped_batches` / `dropped_rows`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_rollups::RollupRow;

use crate::graphite::GraphiteSink;
use crate::remote_write::RemoteWriteSink;
use crate::{Sink, SinkError};

/// Most steps of one rollup read in one call to [`RowSource::rows`] (catching up from an old
/// `start` takes several polls, back to back).
pub const MAX_STEPS_PER_READ: i64 = 360;

/// Where the exporter reads rollup rows (the server implements it over its store).
pub trait RowSource: Send + Sync {
    /// Every rollup there is, with its step in seconds.
    fn rollups(&self) -> Vec<(String, i64)>;
    /// The rows of `rollup` at its own step, for the steps whose start is in `[from, to)`
    /// (Unix seconds), in time order.
    fn rows(&self, rollup: &str, from: i64, to: i64) -> Result<Vec<RollupRow>, String>;
}

/// Where batches go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkConfig {
    /// Prometheus remote write: `http(s)://host:port/api/v1/write`, with extra headers (e.g.
    /// `Authorization`) on every request.
    RemoteWrite {
        /// The receiver's URL.
        url: String,
        /// Sent with every request.
        headers: Vec<(String, String)>,
    },
    /// Graphite plaintext: `host:port` of a carbon listener.
    Graphite {
        /// `host:port`.
        addr: String,
    },
}

/// A configuration that cannot work (said at start, not at every retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl SinkConfig {
    /// Checks the shape: a remote-write URL is `http(s)://HOST…`, a Graphite address
    /// `HOST:PORT` (names are resolved at each connection, so a receiver may move).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            SinkConfig::RemoteWrite { url, headers } => {
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"))
                    .ok_or_else(|| {
                        ConfigError(format!("remote write URL {url:?}: not http:// or https://"))
                    })?;
                if rest.is_empty() || rest.starts_with('/') {
                    return Err(ConfigError(format!("remote write URL {url:?}: no host")));
                }
                let bad = |k: &str, v: &str| {
                    k.is_empty() || k.contains([':', '\r', '\n']) || v.contains(['\r', '\n'])
                };
                if let Some((k, _)) = headers.iter().find(|(k, v)| bad(k, v)) {
                    return Err(ConfigError(format!(
                        "remote write header {k:?}: not a valid header"
                    )));
                }
                Ok(())
            }
            SinkConfig::Graphite { addr } => match addr.rsplit_once(':') {
                Some((host, port))
                    if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) =>
                {
                    Ok(())
                }
                _ => Err(ConfigError(format!(
                    "graphite address {addr:?}: not HOST:PORT"
                ))),
            },
        }
    }

    /// The sink, with these deadlines on every call.
    pub fn open(&self, connect: Duration, timeout: Duration) -> Box<dyn Sink> {
        match self {
            SinkConfig::RemoteWrite { url, headers } => {
                Box::new(RemoteWriteSink::new(url, connect, timeout, headers.clone()))
            }
            SinkConfig::Graphite { addr } => Box::new(GraphiteSink::new(addr, connect, timeout)),
        }
    }
}

/// What the exporter does; [`ExporterConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ExporterConfig {
    /// Where batches go.
    pub sink: SinkConfig,
    /// Which rollups (`None`: all the source lists, including ones added later).
    pub rollups: Option<Vec<String>>,
    /// The first step exported (Unix seconds, aligned down to each rollup's step).
    pub start: i64,
    /// Most batches waiting (at least 2). Default 256.
    pub queue_capacity: usize,
    /// Most rows in a batch (whole steps; a larger step is split). Default 2000.
    pub batch_rows: usize,
    /// Connecting to the sink. Default 5 s.
    pub connect_timeout: Duration,
    /// One call to the sink, end to end. Default 30 s.
    pub timeout: Duration,
    /// How often closed steps are looked for. Default 1 s.
    pub poll_interval: Duration,
    /// How long after its end a step is exported (late events and the flush grace merge into
    /// it meanwhile). Default 5 s.
    pub delay: Duration,
    /// The first wait after a failed attempt, doubled after each. Default 500 ms.
    pub backoff_initial: Duration,
    /// The longest wait between attempts. Default 30 s.
    pub backoff_max: Duration,
}

impl ExporterConfig {
    /// The defaults, for `sink`, from `start`.
    pub fn new(sink: SinkConfig, start: i64) -> ExporterConfig {
        ExporterConfig {
            sink,
            rollups: None,
            start,
            queue_capacity: 256,
            batch_rows: 2000,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            delay: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// The exporter's counters (atomics; [`ExporterCounters::snapshot`] reads them all).
#[derive(Debug, Default)]
pub struct ExporterCounters {
    sent_rows: AtomicU64,
    sent_batches: AtomicU64,
    failed_attempts: AtomicU64,
    dropped_batches: AtomicU64,
    dropped_rows: AtomicU64,
    rejected_batches: AtomicU64,
    rejected_rows: AtomicU64,
    source_errors: AtomicU64,
    queue_len: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// The counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExporterStats {
    /// Rows the sink acknowledged (a batch sent twice counts twice).
    pub sent_rows: u64,
    /// Batches the sink acknowledged.
    pub sent_batches: u64,
    /// Sink calls that failed and will be retried.
    pub failed_attempts: u64,
    /// Batches dropped from a full queue.
    pub dropped_batches: u64,
    /// Their rows.
    pub dropped_rows: u64,
    /// Batches the sink refused for good (HTTP 4xx other than 429): dropped, not retried.
    pub rejected_batches: u64,
    /// Their rows.
    pub rejected_rows: u64,
    /// Failed reads of the row source (retried at the next poll).
    pub source_errors: u64,
    /// Batches waiting, the one being sent included.
    pub queue_len: u64,
    /// The last error, sink or source.
    pub last_error: Option<String>,
}

impl ExporterCounters {
    /// Every counter, read now.
    pub fn snapshot(&self) -> ExporterStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ExporterStats {
            sent_rows: get(&self.sent_rows),
            sent_batches: get(&self.sent_batches),
            failed_attempts: get(&self.failed_attempts),
            dropped_batches: get(&self.dropped_batches),
            dropped_rows: get(&self.dropped_rows),
            rejected_batches: get(&self.rejected_batches),
            rejected_rows: get(&self.rejected_rows),
            source_errors: get(&self.source_errors),
            queue_len: get(&self.queue_len),
            last_error: lock(&self.last_error).clone(),
        }
    }

    fn error(&self, msg: String) {
        *lock(&self.last_error) = Some(msg);
    }
}

struct Batch {
    id: u64,
    rows: Arc<Vec<RollupRow>>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Batch>,
    in_flight: Option<u64>,
    next_id: u64,
    stop: bool,
    progress: HashMap<String, i64>,
}

struct Shared {
    config: ExporterConfig,
    state: Mutex<State>,
    wake: Condvar,
    counters: Arc<ExporterCounters>,
}

/// A running exporter: a poll thread and a send thread. Stopped by [`Exporter::stop`] or drop.
pub struct Exporter {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Exporter {
    /// Starts exporting `source`'s rollups to `config.sink` (an error: the sink's address
    /// cannot work, see [`SinkConfig::validate`]).
    pub fn start(
        config: ExporterConfig,
        source: Arc<dyn RowSource>,
    ) -> Result<Exporter, ConfigError> {
        config.sink.validate()?;
        let sink = config.sink.open(config.connect_timeout, config.timeout);
        Ok(Exporter::with_sink(config, source, sink))
    }

    /// Starts exporting to a sink of the caller's (`config.sink` is then only a description).
    pub fn with_sink(
        mut config: ExporterConfig,
        source: Arc<dyn RowSource>,
        sink: Box<dyn Sink>,
    ) -> Exporter {
        config.queue_capacity = config.queue_capacity.max(2);
        config.batch_rows = config.batch_rows.max(1);
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            counters: Arc::new(ExporterCounters::default()),
        });
        let poll = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sluice-export-poll".into())
                .spawn(move || poll_loop(&shared, &*source))
                .expect("spawning the export poll thread")
        };
        let send = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sluice-export-send".into())
                .spawn(move || send_loop(&shared, sink))
                .expect("spawning the export send thread")
        };
        Exporter {
            shared,
            threads: vec![poll, send],
        }
    }

    /// The counters now.
    pub fn stats(&self) -> ExporterStats {
        self.shared.counters.snapshot()
    }

    /// The counters, to read after the exporter is gone or from another thread.
    pub fn counters(&self) -> Arc<ExporterCounters> {
        self.shared.counters.clone()
    }

    /// Per rollup, the first step not yet queued (Unix seconds).
    pub fn progress(&self) -> Vec<(String, i64)> {
        let mut p: Vec<(String, i64)> = lock(&self.shared.state)
            .progress
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        p.sort();
        p
    }

    /// Waits until the queue is empty (every queued batch acknowledged, rejected or dropped),
    /// at most `timeout`; true when it is.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.shared.state);
        loop {
            if st.queue.is_empty() && st.in_flight.is_none() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self
                .shared
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Stops both threads (a call to the sink under way finishes first, within its timeout);
    /// batches still queued are not sent.
    pub fn stop(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn poll_loop(shared: &Shared, source: &dyn RowSource) {
    loop {
        let behind = poll_once(shared, source);
        let mut st = lock(&shared.state);
        if st.stop {
            return;
        }
        if behind {
            continue;
        }
        let deadline = Instant::now() + shared.config.poll_interval;
        while !st.stop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = shared
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if st.stop {
            return;
        }
    }
}

/// One pass over the rollups; true when some rollup is still behind (read capped).
fn poll_once(shared: &Shared, source: &dyn RowSource) -> bool {
    let config = &shared.config;
    let delay = config.delay.as_secs() as i64 + i64::from(config.delay.subsec_nanos() > 0);
    let cutoff = now_secs() - delay;
    let mut behind = false;
    for (name, step) in source.rollups() {
        if step <= 0 {
            continue;
        }
        if let Some(only) = &config.rollups {
            if !only.contains(&name) {
                continue;
            }
        }
        let next = lock(&shared.state)
            .progress
            .get(&name)
            .copied()
            .unwrap_or_else(|| config.start.div_euclid(step) * step);
        // Steps starting before `closed` end at or before the cutoff.
        let closed = (cutoff - step).div_euclid(step) * step + step;
        let to = closed.min(next + MAX_STEPS_PER_READ * step);
        if to <= next {
            continue;
        }
        match source.rows(&name, next, to) {
            Ok(rows) => {
                for batch in batches(rows, config.batch_rows) {
                    enqueue(shared, batch);
                }
                lock(&shared.state).progress.insert(name, to);
                behind |= to < closed;
            }
            Err(e) => {
                shared
                    .counters
                    .source_errors
                    .fetch_add(1, Ordering::Relaxed);
                shared
                    .counters
                    .error(format!("reading rollup {name:?}: {e}"));
            }
        }
    }
    behind
}

/// Rows (in time order) cut into batches of whole steps, at most `max` rows each (a step with
/// more rows is split).
fn batches(rows: Vec<RollupRow>, max: usize) -> Vec<Vec<RollupRow>> {
    let mut out = Vec::new();
    let mut cur: Vec<RollupRow> = Vec::new();
    let mut rows = rows.into_iter().peekable();
    while let Some(first) = rows.next() {
        let mut step = vec![first];
        while let Some(r) = rows.next_if(|r| r.start == step[0].start) {
            step.push(r);
        }
        if !cur.is_empty() && cur.len() + step.len() > max {
            out.push(std::mem::take(&mut cur));
        }
        if step.len() > max {
            let mut step = step.into_iter().peekable();
            while step.peek().is_some() {
                out.push(step.by_ref().take(max).collect());
            }
        } else {
            cur.extend(step);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn enqueue(shared: &Shared, rows: Vec<RollupRow>) {
    let mut st = lock(&shared.state);
    while st.queue.len() >= shared.config.queue_capacity {
        let oldest = match (st.in_flight, st.queue.front()) {
            (Some(id), Some(front)) if front.id == id => 1,
            _ => 0,
        };
        let Some(dropped) = st.queue.remove(oldest) else {
            break;
        };
        let c = &shared.counters;
        c.dropped_batches.fetch_add(1, Ordering::Relaxed);
        c.dropped_rows
            .fetch_add(dropped.rows.len() as u64, Ordering::Relaxed);
    }
    let id = st.next_id;
    st.next_id += 1;
    st.queue.push_back(Batch {
        id,
        rows: Arc::new(rows),
    });
    shared
        .counters
        .queue_len
        .store(st.queue.len() as u64, Ordering::Relaxed);
    drop(st);
    shared.wake.notify_all();
}

fn send_loop(shared: &Shared, mut sink: Box<dyn Sink>) {
    let config = &shared.config;
    let mut backoff = config.backoff_initial;
    loop {
        let (id, rows) = {
            let mut st = lock(&shared.state);
            while !st.stop && st.queue.is_empty() {
                st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.stop {
                return;
            }
            let front = st.queue.front().expect("the queue is not empty");
            let (id, rows) = (front.id, front.rows.clone());
            st.in_flight = Some(id);
            (id, rows)
        };
        let result = sink.send(&rows);
        let c = &shared.counters;
        let mut st = lock(&shared.state);
        st.in_flight = None;
        let remove = |st: &mut State| {
            if let Some(i) = st.queue.iter().position(|b| b.id == id) {
                st.queue.remove(i);
            }
        };
        let mut wait = None;
        match result {
            Ok(()) => {
                remove(&mut st);
                c.sent_batches.fetch_add(1, Ordering::Relaxed);
                c.sent_rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
                backoff = config.backoff_initial;
            }
            Err(SinkError::Reject(msg)) => {
                remove(&mut st);
                c.rejected_batches.fetch_add(1, Ordering::Relaxed);
                c.rejected_rows
                    .fetch_add(rows.len() as u64, Ordering::Relaxed);
                c.error(format!("{}: rejected: {msg}", sink.describe()));
                backoff = config.backoff_initial;
            }
            Err(SinkError::Retry(msg)) => {
                c.failed_attempts.fetch_add(1, Ordering::Relaxed);
                c.error(format!("{}: {msg}", sink.describe()));
                wait = Some(backoff);
                backoff = (backoff * 2).min(config.backoff_max);
            }
        }
        c.queue_len.store(st.queue.len() as u64, Ordering::Relaxed);
        shared.wake.notify_all();
        if let Some(wait) = wait {
            let deadline = Instant::now() + wait;
            while !st.stop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = shared
                    .wake
                    .wait_timeout(st, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(start: i64, g: &str) -> RollupRow {
        RollupRow {
            rollup: "r".into(),
            start,
            step: 10,
            group: vec![("g".into(), g.into())],
            values: vec![("count".into(), Some(1.0))],
        }
    }

    #[test]
    fn sink_addresses_checked() {
        let rw = |url: &str| SinkConfig::RemoteWrite {
            url: url.into(),
            headers: vec![],
        };
        let gr = |addr: &str| SinkConfig::Graphite { addr: addr.into() };
        assert!(rw("http://127.0.0.1:8428/api/v1/write").validate().is_ok());
        assert!(rw("https://vm.example/api/v1/write").validate().is_ok());
        assert!(rw("127.0.0.1:8428/api/v1/write").validate().is_err());
        assert!(rw("http:///x").validate().is_err());
        let bad_header = SinkConfig::RemoteWrite {
            url: "http://h/".into(),
            headers: vec![("Authorization".into(), "a\nb".into())],
        };
        assert!(bad_header.validate().is_err());
        assert!(gr("carbon:2003").validate().is_ok());
        assert!(gr("[::1]:2003").validate().is_ok());
        assert!(gr("carbon").validate().is_err());
        assert!(gr(":2003").validate().is_err());
        assert!(gr("carbon:0").validate().is_err());
    }

    #[test]
    fn batches_keep_steps_whole() {
        let rows = vec![
            row(0, "a"),
            row(0, "b"),
            row(10, "a"),
            row(20, "a"),
            row(20, "b"),
            row(20, "c"),
            row(20, "d"),
            row(30, "a"),
        ];
        let shape = |b: &Vec<Vec<RollupRow>>| -> Vec<Vec<(i64, String)>> {
            b.iter()
                .map(|b| b.iter().map(|r| (r.start, r.group[0].1.clone())).collect())
                .collect()
        };
        let b = batches(rows.clone(), 3);
        assert_eq!(
            shape(&b),
            vec![
                vec![(0, "a".into()), (0, "b".into()), (10, "a".into())],
                vec![(20, "a".into()), (20, "b".into()), (20, "c".into())],
                vec![(20, "d".into())],
                vec![(30, "a".into())],
            ]
        );
        assert_eq!(batches(rows.clone(), 100).len(), 1);
        assert!(batches(vec![], 3).is_empty());
    }
}
