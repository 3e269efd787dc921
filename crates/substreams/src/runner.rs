//! The runner: substreams on newly stored blobs, off the ingest path.
//!
//! ```text
//! pipeline thread: FlushReport::stored ──► Runner::offer (no I/O: try_send per chunk)
//!        │ queue full: shed, counted with reason `queue_full`
//!        ▼
//! bounded queue ──► runner thread(s): Executor::run (one pass / one worker per blob)
//!        ──► put_blob(substreams/<name>, same key) ──► add_to_namespace_index(substreams/<name>)
//!        ──► misses: counters (/metrics), status records (catalog), completeness counts
//! ```
//!
//! # Contract
//! - [`Runner::offer`] never blocks and never sends a store request: a chunk no enabled
//!   substream applies to is dropped at once; otherwise it is queued (its bytes moved, not
//!   copied) or, when the queue is full, shed for each substream that applies (`queue_full`).
//! - Data locality ([`RunnerConfig::local_node`], `sluice serve --local-node ADDR`): `offer`
//!   keeps only the chunks with a replica on that node ([`Runner::takes`], from the store's own
//!   view of placement — the Cassandra driver's token ring, no request), so the worker reads
//!   and writes blob bytes on its own node. The other chunks are *left to the workers beside
//!   their nodes* and counted in [`RunnerSnapshot::not_local`] (not misses: a reader's fallback
//!   computes any result not stored). A key with no worker on any of its replicas is never
//!   computed ahead; without `local_node` every chunk is taken, as on a single store.
//! - A result is stored before it is listed in the substream's index, so an index entry always
//!   names a stored result. A miss stores nothing; the reader's fallback computes it.
//! - Every miss is counted three ways: in memory per substream and reason ([`Runner::snapshot`],
//!   `/metrics`), in a status record of the catalog (kind [`STATUS_KIND`], name
//!   `<substream>/<writer>`, cumulative across restarts, written every [`STATUS_EVERY`]) for
//!   `sluice substream show`, and in the epoch's completeness counts: the blob's events under
//!   the dropped reason `substream:<name>:<reason>` (events of that second missing from that
//!   substream's stored results — not lost from the stream).
//! - A substream that overruns [`SUSPEND_AFTER`] blobs in a row (wall or CPU time, memory, a
//!   crashed worker: the costly failures) is suspended — shed with reason `suspended`, at no
//!   cost — for [`SUSPEND_FIRST`], doubling on each new suspension up to [`SUSPEND_MAX`]; the
//!   first blob after that runs it again, and a success clears the state. So a runaway
//!   substream costs a few budgets per suspension period, not one per blob. A registry change
//!   clears every suspension.
//! - The runner threads lower their own scheduling priority by [`RunnerConfig::nice`] (default
//!   10) before anything else; the Python pool they start inherits it (workers are forked from
//!   them), so on a busy machine substreams yield the CPU to ingest.
//! - The registry is re-read on [`Runner::reload`] (the server's API calls it after a change)
//!   and polled every [`RunnerConfig::poll`] for changes made by other processes. A change
//!   applies to blobs taken from the queue after it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_blob::EventKey;
use sluice_store::StoredBatch;
use sluice_store::{BlobKey, Counts, Namespace, Store};

use crate::exec::{Compiled, Executor, PythonPool, PythonSettings};
use crate::registry::{self, STATUS_KIND};

/// Costly failures in a row after which a substream is suspended.
pub const SUSPEND_AFTER: u32 = 3;
/// The first suspension.
pub const SUSPEND_FIRST: Duration = Duration::from_secs(10);
/// The longest suspension.
pub const SUSPEND_MAX: Duration = Duration::from_secs(300);

/// The failures that cost a budget (the others are cheap: no reason to suspend).
fn costly(reason: &str) -> bool {
    matches!(reason, "wall_time" | "cpu_time" | "memory" | "crashed")
}

/// The suspension state of one substream.
#[derive(Debug, Default)]
struct Health {
    failures_in_a_row: u32,
    suspensions: u32,
    suspended_until: Option<Instant>,
}

/// How often the status records are written.
pub const STATUS_EVERY: Duration = Duration::from_secs(5);

/// Settings of a [`Runner`].
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Chunks waiting at most (default 1024); more are shed (`queue_full`).
    pub queue: usize,
    /// Runner threads (default 1).
    pub threads: usize,
    /// Where Python sources are written for the workers to import.
    pub code_dir: PathBuf,
    /// The Python pool.
    pub python: PythonSettings,
    /// How often the registry is polled for changes by other processes (default 2 s).
    pub poll: Duration,
    /// Who writes the status records (stable across restarts: e.g. the server's dc).
    pub writer: String,
    /// Added to the runner threads' nice value (0..=19; default 10): substreams, and the Python
    /// workers started from these threads, yield the CPU to ingest.
    pub nice: i32,
    /// Data locality (`--local-node ADDR`): take only the chunks with a replica on this store
    /// node ([`Store::keys_on_node`]), leaving the others to the workers beside their nodes.
    /// `None` (default): every chunk.
    pub local_node: Option<String>,
    /// Code (Python) substreams run (default true; `sluice serve --no-python-substreams`:
    /// their definitions are skipped, said once per reload).
    pub python_enabled: bool,
}

impl Default for RunnerConfig {
    fn default() -> RunnerConfig {
        RunnerConfig {
            queue: 1024,
            threads: 1,
            code_dir: std::env::temp_dir().join("sluice-substreams"),
            python: PythonSettings::default(),
            poll: Duration::from_secs(2),
            writer: "local".into(),
            nice: 10,
            local_node: None,
            python_enabled: true,
        }
    }
}

/// Counters of one substream (cumulative; a status record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubstreamStats {
    /// Results stored.
    pub stored: u64,
    /// Bytes of results stored.
    pub stored_bytes: u64,
    /// Runs without a result, by reason.
    pub misses: BTreeMap<String, u64>,
    /// The last miss: `key`, `reason`, `detail`, `at` (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_miss: Option<LastMiss>,
}

/// The last miss of a substream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastMiss {
    /// The blob key.
    pub key: String,
    /// The reason label.
    pub reason: String,
    /// For people.
    pub detail: String,
    /// When (Unix seconds).
    pub at: i64,
}

impl SubstreamStats {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &SubstreamStats) {
        self.stored += other.stored;
        self.stored_bytes += other.stored_bytes;
        for (r, n) in &other.misses {
            *self.misses.entry(r.clone()).or_default() += n;
        }
        if other
            .last_miss
            .as_ref()
            .is_some_and(|o| self.last_miss.as_ref().is_none_or(|s| o.at >= s.at))
        {
            self.last_miss.clone_from(&other.last_miss);
        }
    }
}

/// What `/metrics` shows of the runner.
#[derive(Debug, Clone, Default)]
pub struct RunnerSnapshot {
    /// Per substream (since this process started; status records hold the cumulative ones).
    pub substreams: BTreeMap<String, SubstreamStats>,
    /// Chunks waiting.
    pub queued: u64,
    /// Queue capacity.
    pub queue_capacity: u64,
    /// Chunks taken off the queue and run.
    pub blobs_run: u64,
    /// Seconds from a blob's offer to its results stored (sum and count, for a mean), and the
    /// largest seen.
    pub latency_sum_secs: f64,
    /// How many latencies were summed.
    pub latency_count: u64,
    /// Largest latency seen, seconds.
    pub latency_max_secs: f64,
    /// Registered substreams (enabled ones).
    pub registered: u64,
    /// Enabled ones.
    pub enabled: u64,
    /// The Python pool's counters, if it runs.
    pub pool: Option<sluice_pyworkers::PoolStats>,
    /// Chunks left to other workers: no replica on [`RunnerConfig::local_node`].
    pub not_local: u64,
}

struct Work {
    key: EventKey,
    entry: String,
    events: u64,
    data: Vec<u8>,
    offered: Instant,
}

/// The enabled, compiled definitions.
#[derive(Debug, Default)]
struct Active {
    /// Bumped on each change.
    version: u64,
    /// The catalog records as read (to notice changes).
    raw: BTreeMap<String, registry::Definition>,
    defs: Vec<Arc<Compiled>>,
}

/// Miss counts not yet written: (epoch, dc, type, subtype) → reason → events.
type PendingCounts = BTreeMap<(i64, String, String, String), BTreeMap<String, u64>>;

struct Shared {
    store: Arc<dyn Store>,
    cfg: RunnerConfig,
    active: RwLock<Arc<Active>>,
    stats: Mutex<BTreeMap<String, SubstreamStats>>,
    /// Stats not yet in the status records.
    unsaved: Mutex<BTreeMap<String, SubstreamStats>>,
    /// Completeness counts of misses not yet written: (epoch, dc, type, subtype) → reason → n.
    pending_counts: Mutex<PendingCounts>,
    /// Suspension state by substream (runner threads only).
    health: Mutex<BTreeMap<String, Health>>,
    queued: AtomicU64,
    not_local: AtomicU64,
    blobs_run: AtomicU64,
    latency: Mutex<(f64, u64, f64)>,
    stop: AtomicBool,
    python: Arc<PythonPool>,
}

/// The runner; see the [module docs](self). Dropping it stops its threads (what is queued is
/// not run: the fallback covers it).
pub struct Runner {
    shared: Arc<Shared>,
    tx: Option<SyncSender<Work>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("queued", &self.shared.queued.load(Ordering::Relaxed))
            .finish()
    }
}

impl Runner {
    /// Reads the registry and starts the threads.
    pub fn start(store: Arc<dyn Store>, cfg: RunnerConfig) -> Runner {
        let (tx, rx) = sync_channel::<Work>(cfg.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let shared = Arc::new(Shared {
            store,
            python: Arc::new(PythonPool::new(cfg.python.clone())),
            cfg,
            active: RwLock::new(Arc::new(Active::default())),
            stats: Mutex::new(BTreeMap::new()),
            unsaved: Mutex::new(BTreeMap::new()),
            pending_counts: Mutex::new(BTreeMap::new()),
            health: Mutex::new(BTreeMap::new()),
            queued: AtomicU64::new(0),
            not_local: AtomicU64::new(0),
            blobs_run: AtomicU64::new(0),
            latency: Mutex::new((0.0, 0, 0.0)),
            stop: AtomicBool::new(false),
        });
        shared.reload();
        let threads = (0..shared.cfg.threads.max(1))
            .filter_map(|i| {
                let shared = shared.clone();
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("sluice-substreams-{i}"))
                    .spawn(move || shared.run(rx, i == 0))
                    .ok()
            })
            .collect();
        Runner {
            shared,
            tx: Some(tx),
            threads,
        }
    }

    /// Re-reads the registry now (after a change made through this process).
    pub fn reload(&self) {
        self.shared.reload();
    }

    /// Hands the chunks of a stored batch to the runner; see the [module docs](self).
    pub fn offer(&self, batch: StoredBatch) {
        let active = self.shared.snapshot_active();
        let applying: Vec<&Arc<Compiled>> = active
            .defs
            .iter()
            .filter(|c| c.def.applies(&batch.dc, &batch.type_, &batch.subtype))
            .collect();
        if applying.is_empty() || batch.chunks.is_empty() {
            return;
        }
        let Some(tx) = &self.tx else { return };
        let keys: Vec<BlobKey<'_>> = batch
            .chunks
            .iter()
            .map(|c| BlobKey::new(batch.epoch, &c.key))
            .collect();
        let local = self.takes(&batch.namespace, &keys);
        drop(keys);
        let per_chunk = batch.events / batch.chunks.len() as u64;
        let n_chunks = batch.chunks.len() as u64;
        for (i, chunk) in batch.chunks.into_iter().enumerate() {
            if !local[i] {
                self.shared.not_local.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Ok(key) = EventKey::parse(&chunk.key) else {
                continue;
            };
            // The first chunk carries the remainder so the shares add up to the batch's events.
            let events = if i == 0 {
                batch.events - per_chunk * (n_chunks - 1)
            } else {
                per_chunk
            };
            let work = Work {
                key,
                entry: chunk.entry,
                events,
                data: chunk.data,
                offered: Instant::now(),
            };
            self.shared.queued.fetch_add(1, Ordering::Relaxed);
            match tx.try_send(work) {
                Ok(()) => {}
                Err(TrySendError::Full(w)) | Err(TrySendError::Disconnected(w)) => {
                    self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                    for c in &applying {
                        self.shared.miss(
                            &c.def.name,
                            &w.key,
                            w.events,
                            "queue_full",
                            format!(
                                "the substream queue is full ({} chunks)",
                                self.shared.cfg.queue
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Which of `keys` (stored blobs of `ns`) this runner takes: all of them, or with
    /// [`RunnerConfig::local_node`] those with a replica on that node ([`Store::keys_on_node`];
    /// when the store cannot tell, all of them: computing a chunk twice is harmless, never
    /// computing it is not).
    pub fn takes(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<bool> {
        let Some(node) = &self.shared.cfg.local_node else {
            return vec![true; keys.len()];
        };
        match self.shared.store.keys_on_node(node, ns, keys) {
            Ok(v) if v.len() == keys.len() => v,
            _ => vec![true; keys.len()],
        }
    }

    /// The cumulative counters of `name`: every writer's status record plus what this runner
    /// has not written yet.
    pub fn status(&self, name: &str) -> Result<SubstreamStats, sluice_store::StoreError> {
        let mut total = status(&*self.shared.store, name)?;
        if let Some(u) = self
            .shared
            .unsaved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            total.merge(u);
        }
        Ok(total)
    }

    /// The Python pool settings (for backfills run beside the runner).
    pub fn python_settings(&self) -> crate::exec::PythonSettings {
        self.shared.cfg.python.clone()
    }

    /// Counters for `/metrics`.
    pub fn snapshot(&self) -> RunnerSnapshot {
        let s = &self.shared;
        let active = s.snapshot_active();
        let (sum, count, max) = *s.latency.lock().unwrap_or_else(|e| e.into_inner());
        RunnerSnapshot {
            substreams: s.stats.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            queued: s.queued.load(Ordering::Relaxed),
            queue_capacity: s.cfg.queue as u64,
            blobs_run: s.blobs_run.load(Ordering::Relaxed),
            latency_sum_secs: sum,
            latency_count: count,
            latency_max_secs: max,
            registered: active.raw.len() as u64,
            enabled: active.defs.len() as u64,
            pool: s.python.stats(),
            not_local: s.not_local.load(Ordering::Relaxed),
        }
    }

    /// Stops the threads (the chunk being run is finished; the queue is dropped) and writes
    /// the last counters.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.save_status();
        self.shared.write_counts();
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop_inner();
        }
    }
}

impl Shared {
    fn snapshot_active(&self) -> Arc<Active> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the catalog; swaps in a new active set if it changed. True if it did.
    fn reload(&self) -> bool {
        let (defs, bad) = match registry::load(&*self.store) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("sluice-substreams: reading the registry: {e}");
                return false;
            }
        };
        let current = self.snapshot_active();
        if current.raw == defs && current.version > 0 {
            return false;
        }
        for (name, why) in bad {
            eprintln!("sluice-substreams: registry record {name:?} skipped: {why}");
        }
        let mut compiled = Vec::new();
        for d in defs.values().filter(|d| d.enabled) {
            if !self.cfg.python_enabled && d.is_python() {
                eprintln!(
                    "sluice-substreams: substream {:?} not run: Python substreams are switched off",
                    d.name
                );
                continue;
            }
            match Compiled::new(d.clone(), &self.cfg.code_dir) {
                Ok(c) => compiled.push(Arc::new(c)),
                Err(e) => eprintln!("sluice-substreams: substream {:?} not run: {e}", d.name),
            }
        }
        let next = Arc::new(Active {
            version: current.version + 1,
            raw: defs,
            defs: compiled,
        });
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = next;
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        true
    }

    fn run(&self, rx: Arc<Mutex<Receiver<Work>>>, housekeeper: bool) {
        // Linux: nice(2) applies to the calling thread; the workers forked from it inherit it.
        if self.cfg.nice > 0 {
            if let Err(e) = rustix::process::nice(self.cfg.nice.min(19)) {
                eprintln!("sluice-substreams: nice({}) failed: {e}", self.cfg.nice);
            }
        }
        let mut exec = Executor::new(self.python.clone());
        let mut version = 0;
        let mut last_poll = Instant::now();
        let mut last_status = Instant::now();
        let mut last_counts = Instant::now();
        loop {
            let got = {
                let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                rx.recv_timeout(Duration::from_millis(200))
            };
            match got {
                Ok(work) => {
                    self.queued.fetch_sub(1, Ordering::Relaxed);
                    let active = self.snapshot_active();
                    if active.version != version {
                        exec.registry_changed();
                        version = active.version;
                    }
                    self.process(&mut exec, &active, work);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if housekeeper {
                if last_poll.elapsed() >= self.cfg.poll {
                    last_poll = Instant::now();
                    self.reload();
                }
                if last_counts.elapsed() >= Duration::from_secs(1) {
                    last_counts = Instant::now();
                    self.write_counts();
                }
                if last_status.elapsed() >= STATUS_EVERY {
                    last_status = Instant::now();
                    self.save_status();
                }
            }
        }
    }

    fn process(&self, exec: &mut Executor, active: &Active, work: Work) {
        let subs: Vec<Arc<Compiled>> = active
            .defs
            .iter()
            .filter(|c| {
                c.def
                    .applies(work.key.dc(), work.key.type_(), work.key.subtype())
            })
            .cloned()
            .collect();
        if subs.is_empty() {
            return;
        }
        self.blobs_run.fetch_add(1, Ordering::Relaxed);
        // Suspended substreams are shed without running.
        let now = Instant::now();
        let (subs, suspended): (Vec<Arc<Compiled>>, Vec<Arc<Compiled>>) = {
            let health = self.health.lock().unwrap_or_else(|e| e.into_inner());
            subs.into_iter().partition(|c| {
                health
                    .get(&c.def.name)
                    .and_then(|h| h.suspended_until)
                    .is_none_or(|until| now >= until)
            })
        };
        for c in &suspended {
            self.miss(
                &c.def.name,
                &work.key,
                work.events,
                "suspended",
                format!("suspended after {SUSPEND_AFTER} overruns in a row"),
            );
        }
        let outcomes = if subs.is_empty() {
            Vec::new()
        } else {
            exec.run(&subs, &work.key, &work.data)
        };
        let key_text = work.key.to_string();
        for (c, outcome) in subs.iter().zip(outcomes) {
            let name = &c.def.name;
            self.record_health(name, outcome.as_ref().err().map(|m| m.reason));
            match outcome {
                Ok(bytes) => match self.store_result(name, &work, &key_text, &bytes) {
                    Ok(()) => {
                        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                        let s = st.entry(name.clone()).or_default();
                        s.stored += 1;
                        s.stored_bytes += bytes.len() as u64;
                        drop(st);
                        let mut un = self.unsaved.lock().unwrap_or_else(|e| e.into_inner());
                        let u = un.entry(name.clone()).or_default();
                        u.stored += 1;
                        u.stored_bytes += bytes.len() as u64;
                    }
                    Err(e) => self.miss(name, &work.key, work.events, "store_error", e.to_string()),
                },
                Err(m) => self.miss(name, &work.key, work.events, m.reason, m.detail),
            }
        }
        let secs = work.offered.elapsed().as_secs_f64();
        let mut l = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        l.0 += secs;
        l.1 += 1;
        l.2 = l.2.max(secs);
    }

    /// Updates `name`'s suspension state after a run (`failed`: its miss reason).
    fn record_health(&self, name: &str, failed: Option<&str>) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        match failed {
            None => {
                health.remove(name);
            }
            Some(reason) if costly(reason) => {
                let h = health.entry(name.to_owned()).or_default();
                h.failures_in_a_row += 1;
                if h.failures_in_a_row >= SUSPEND_AFTER {
                    let factor = 1u32 << h.suspensions.min(8);
                    let pause = (SUSPEND_FIRST * factor).min(SUSPEND_MAX);
                    h.suspensions += 1;
                    h.failures_in_a_row = SUSPEND_AFTER - 1; // one more overrun re-suspends
                    h.suspended_until = Some(Instant::now() + pause);
                    eprintln!(
                        "sluice-substreams: substream {name:?} suspended for {} s ({reason}, {SUSPEND_AFTER} overruns in a row)",
                        pause.as_secs()
                    );
                }
            }
            Some(_) => {}
        }
    }

    fn store_result(
        &self,
        name: &str,
        work: &Work,
        key: &str,
        bytes: &[u8],
    ) -> Result<(), sluice_store::StoreError> {
        let ns = Namespace::Substream(name.to_owned());
        let epoch = work.key.epoch();
        self.store.put_blob(&ns, BlobKey::new(epoch, key), bytes)?;
        self.store
            .add_to_namespace_index(&ns, epoch, work.key.dc(), &[work.entry.as_str()])
    }

    fn miss(&self, name: &str, key: &EventKey, events: u64, reason: &str, detail: String) {
        let last = LastMiss {
            key: key.to_string(),
            reason: reason.to_owned(),
            detail,
            at: sluice_reader::time::now_unix(),
        };
        for map in [&self.stats, &self.unsaved] {
            let mut st = map.lock().unwrap_or_else(|e| e.into_inner());
            let s = st.entry(name.to_owned()).or_default();
            *s.misses.entry(reason.to_owned()).or_default() += 1;
            s.last_miss = Some(last.clone());
        }
        let mut pc = self
            .pending_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *pc.entry((
            key.epoch(),
            key.dc().to_owned(),
            key.type_().to_owned(),
            key.subtype().to_owned(),
        ))
        .or_default()
        .entry(format!("substream:{name}:{reason}"))
        .or_default() += events;
    }

    /// Adds the misses' completeness counts to the store (kept for the next try on error).
    fn write_counts(&self) {
        let pending = std::mem::take(
            &mut *self
                .pending_counts
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for ((epoch, dc, t, s), dropped) in pending {
            let counts = Counts {
                dropped: dropped.clone(),
                ..Counts::default()
            };
            if let Err(e) = self.store.add_counts(epoch, &dc, &t, &s, &counts) {
                eprintln!("sluice-substreams: writing miss counts: {e}");
                let mut pc = self
                    .pending_counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let slot = pc.entry((epoch, dc, t, s)).or_default();
                for (r, n) in dropped {
                    *slot.entry(r).or_default() += n;
                }
            }
        }
    }

    /// Merges the unsaved counters into this writer's status records.
    fn save_status(&self) {
        let unsaved = std::mem::take(&mut *self.unsaved.lock().unwrap_or_else(|e| e.into_inner()));
        if unsaved.is_empty() {
            return;
        }
        let existing = self.store.get_catalog(STATUS_KIND).unwrap_or_default();
        for (name, add) in unsaved {
            let record = format!("{name}/{}", self.cfg.writer);
            let mut total: SubstreamStats = existing
                .get(&record)
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or_default();
            total.merge(&add);
            let Ok(bytes) = serde_json::to_vec(&total) else {
                continue;
            };
            if let Err(e) = self.store.put_catalog(STATUS_KIND, &record, Some(&bytes)) {
                eprintln!("sluice-substreams: writing status of {name:?}: {e}");
                self.unsaved
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(name)
                    .or_default()
                    .merge(&add);
            }
        }
    }
}

/// The cumulative counters of `name` over every writer's status record.
pub fn status<S: sluice_store::ReadStore + ?Sized>(
    store: &S,
    name: &str,
) -> Result<SubstreamStats, sluice_store::StoreError> {
    let mut total = SubstreamStats::default();
    let prefix = format!("{name}/");
    for (record, bytes) in store.get_catalog(STATUS_KIND)? {
        if record.starts_with(&prefix) {
            if let Ok(s) = serde_json::from_slice::<SubstreamStats>(&bytes) {
                total.merge(&s);
            }
        }
    }
    Ok(total)
}
