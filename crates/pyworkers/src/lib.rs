//! A pool of pre-forked Python worker processes that run *code substreams*: a Python function
//! `transform(events, ctx) -> iterable of dicts` applied to the events of one blob.
//!
//! ```no_run
//! use sluice_pyworkers::{find_python, BlobContext, Job, Pool, PoolConfig};
//! use std::time::Duration;
//! let pool = Pool::start(PoolConfig { python: find_python().map_err(|e| e.to_string())?, ..PoolConfig::default() })
//!     .map_err(|e| e.to_string())?;
//! let job = Job::new("errors", "/etc/sluice/errors.py", "transform");
//! # let blob: Vec<u8> = Vec::new();
//! let ctx = BlobContext { epoch: 1_700_000_000, dc: "ams1".into(), type_: "WEB".into(), subtype: String::new(), chunk: 0 };
//! for result in pool.run(&blob, &ctx, &[job]) {
//!     match result {
//!         Ok(sereal_doc) => { /* a Sereal document: the array of the returned dicts */ }
//!         Err(failure) => eprintln!("shed ({}): {failure}", failure.reason()),
//!     }
//! }
//! # Ok::<(), String>(())
//! ```
//!
//! # Contract
//!
//! - [`Pool::run`] runs every job on one blob in **one** worker, which decodes the blob once
//!   (`sluice.sereal.loads`, the package's own decoder) and calls each job's function in order
//!   (modules are imported once per worker and cached). Results come back in job order.
//!   Each job's result is streamed back as soon as it completes, so a job that finished survives
//!   a later job's death; the jobs after a killed one run again in a fresh worker.
//! - Budgets per job, counted from the moment the worker starts that job (import of the file
//!   included, the shared decode excluded — it has its own bound, [`PoolConfig::decode_timeout`]):
//!   wall time (the parent kills the worker), CPU time (the parent samples the worker's
//!   `/proc/<pid>/stat` while it waits and kills it on overrun), memory (`RLIMIT_AS` set in the
//!   child before `exec`: a `MemoryError`, or a death while the address space was near the
//!   limit, is [`Failure::Memory`]), result size (checked by the worker before sending, and
//!   again by the parent on the frame it reads).
//! - Nothing here panics on what a worker sends or does; every wait has a timeout; dropping the
//!   [`Pool`] kills its workers (they also die with the thread that spawned them:
//!   `PR_SET_PDEATHSIG`).
//! - Recycling is probabilistic: after each job the worker is retired with probability
//!   `p = (1 + s²·(m − 1)) / m` (`m` = [`PoolConfig::mean_jobs_per_worker`], `s` = how far its RSS
//!   is between half of and the whole memory limit, clamped to 0..1), so a fleet of workers never
//!   turns over at one fixed count. Replacements are spawned by one background thread under a
//!   token bucket ([`PoolConfig::max_respawns_per_sec`], burst [`PoolConfig::respawn_burst`]);
//!   when no worker is free, `run` waits at most [`PoolConfig::acquire_timeout`] and then
//!   answers [`Failure::Unavailable`].
//!
//! Change to the API asked for in the brief: [`Failure::BadBlob`] (reason `"bad_blob"`): the
//! bytes given to `run` are not a stored blob (trailer or SHA-1 mismatch, or not Sereal): not
//! the transformation's fault, so it has its own label.
//!
//! Wire format between the parent and a worker: see `proto.rs` and `python/sluice/_worker.py`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod error;
mod pool;
mod proc_stat;
mod proto;
mod python;
mod worker;

pub use error::{CheckError, NoPython, ProtocolError};
pub use python::find_python;

/// How a [`Pool`] runs its workers.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The Python interpreter: one that can `import sluice` (see [`find_python`]).
    pub python: PathBuf,
    /// Worker processes kept running (at least 1).
    pub workers: usize,
    /// Mean number of jobs a worker runs before it is recycled (≥ 1).
    pub mean_jobs_per_worker: f64,
    /// Steady rate at which dead or recycled workers are replaced (> 0).
    pub max_respawns_per_sec: f64,
    /// Respawns allowed back to back before the rate applies (≥ 1).
    pub respawn_burst: u32,
    /// `RLIMIT_AS` of each worker, in bytes; 0 = no limit.
    pub memory_limit_bytes: u64,
    /// Longest wait in [`Pool::run`] for a free worker before [`Failure::Unavailable`].
    pub acquire_timeout: Duration,
    /// Longest a new worker may take to start (`import sluice`) before it is killed.
    pub spawn_timeout: Duration,
    /// Longest the worker may take to receive and decode one blob before the run is abandoned.
    pub decode_timeout: Duration,
    /// Pass the workers' stderr through (transforms' `print`s and tracebacks) instead of
    /// discarding it.
    pub inherit_stderr: bool,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            python: PathBuf::from("python3"),
            workers: 2,
            mean_jobs_per_worker: 500.0,
            max_respawns_per_sec: 2.0,
            respawn_burst: 4,
            memory_limit_bytes: 1 << 30,
            acquire_timeout: Duration::from_secs(5),
            spawn_timeout: Duration::from_secs(10),
            decode_timeout: Duration::from_secs(10),
            inherit_stderr: false,
        }
    }
}

/// One code substream to run on a blob.
#[derive(Debug, Clone)]
pub struct Job {
    /// The substream's name (given to the function as `ctx.name`).
    pub name: String,
    /// The Python file that defines the function.
    pub file: PathBuf,
    /// The function's name in that file.
    pub func: String,
    /// Wall-time budget, from the start of the job to its result.
    pub wall: Duration,
    /// CPU-time budget (user + system of the worker) for the job.
    pub cpu: Duration,
    /// Largest encoded result accepted, in bytes.
    pub max_result_bytes: usize,
}

impl Job {
    /// A job with the default budgets: 1 s wall, 1 s CPU, 16 MiB of result.
    pub fn new(name: impl Into<String>, file: impl Into<PathBuf>, func: impl Into<String>) -> Job {
        Job {
            name: name.into(),
            file: file.into(),
            func: func.into(),
            wall: Duration::from_secs(1),
            cpu: Duration::from_secs(1),
            max_result_bytes: 16 << 20,
        }
    }
}

/// Where the blob's events come from (given to the function as `ctx`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlobContext {
    /// The blob's second.
    pub epoch: i64,
    /// Its datacenter.
    pub dc: String,
    /// Its event type.
    pub type_: String,
    /// Its subtype (may be empty).
    pub subtype: String,
    /// Its chunk number.
    pub chunk: u32,
}

/// Why a job gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Over its wall-time budget: the worker was killed.
    WallTime,
    /// Over its CPU-time budget: the worker was killed.
    CpuTime,
    /// Out of memory (`MemoryError` under the worker's `RLIMIT_AS`, or killed near the limit).
    Memory,
    /// The encoded result was larger than the job's `max_result_bytes`.
    ResultTooLarge {
        /// Its size (or, when the parent cut the frame, the size announced).
        bytes: usize,
    },
    /// The function raised (or could not be loaded, or returned something other than dicts):
    /// `Type: first line of the message (file:line)`.
    Exception(String),
    /// The worker died during the job (killed itself, a signal, a protocol violation).
    Crashed(String),
    /// No worker to run the job (respawns throttled, Python cannot start, pool stopping).
    Unavailable(String),
    /// The bytes given to [`Pool::run`] are not a valid stored blob.
    BadBlob(String),
}

impl Failure {
    /// A stable label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::WallTime => "wall_time",
            Failure::CpuTime => "cpu_time",
            Failure::Memory => "memory",
            Failure::ResultTooLarge { .. } => "result_size",
            Failure::Exception(_) => "exception",
            Failure::Crashed(_) => "crashed",
            Failure::Unavailable(_) => "unavailable",
            Failure::BadBlob(_) => "bad_blob",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::WallTime => write!(f, "over its wall-time budget (worker killed)"),
            Failure::CpuTime => write!(f, "over its CPU-time budget (worker killed)"),
            Failure::Memory => write!(f, "out of memory (worker memory limit)"),
            Failure::ResultTooLarge { bytes } => {
                write!(f, "result of {bytes} bytes is over the result-size budget")
            }
            Failure::Exception(m) => write!(f, "raised {m}"),
            Failure::Crashed(m) => write!(f, "worker crashed: {m}"),
            Failure::Unavailable(m) => write!(f, "no worker available: {m}"),
            Failure::BadBlob(m) => write!(f, "not a valid blob: {m}"),
        }
    }
}

impl std::error::Error for Failure {}

/// Why [`Pool::start`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// A setting is out of range.
    #[error("python worker pool: bad setting: {0}")]
    Config(String),
    /// The first worker did not start (Python missing, `sluice` not importable, timeout).
    #[error("python worker pool: cannot start a worker: {0}")]
    Spawn(String),
}

/// Counters of a pool since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers started (the initial ones included).
    pub spawned: u64,
    /// Workers that failed to start.
    pub spawn_failed: u64,
    /// Workers retired by the probabilistic recycling.
    pub recycled: u64,
    /// Workers killed over a wall-time budget (the decode's included).
    pub killed_wall: u64,
    /// Workers killed over a CPU-time budget.
    pub killed_cpu: u64,
    /// Workers retired after running out of memory.
    pub killed_memory: u64,
    /// Workers killed because a result frame was over the budget.
    pub killed_result_size: u64,
    /// Workers that died on their own (or broke the protocol).
    pub crashed: u64,
    /// Times a replacement was due but the respawn budget was spent.
    pub respawn_throttled: u64,
    /// Jobs that returned a result.
    pub jobs_ok: u64,
    /// Jobs that failed, any reason.
    pub jobs_failed: u64,
    /// `run` calls that found no worker in time (their jobs are `Unavailable`).
    pub unavailable: u64,
    /// Workers alive now (idle or busy).
    pub live: u64,
}

/// The pool. Cheap to share by reference across substream threads (`run` takes `&self`).
pub struct Pool {
    inner: pool::Inner,
}

impl Pool {
    /// Starts the pool: spawns [`PoolConfig::workers`] workers and waits (at most
    /// [`PoolConfig::spawn_timeout`]) for the first to be ready.
    pub fn start(cfg: PoolConfig) -> Result<Pool, PoolError> {
        Ok(Pool {
            inner: pool::Inner::start(cfg)?,
        })
    }

    /// Runs every job on one blob (stored bytes: Sereal part + `=chk` trailer) in one worker,
    /// which decodes the blob once; blocks the caller (call it from a substream thread, never the
    /// ingest path). One result per job, in job order: `Ok` is a Sereal document holding the
    /// array of the dicts the function returned (encoded by `sluice.sereal.dumps`).
    pub fn run(
        &self,
        blob: &[u8],
        ctx: &BlobContext,
        jobs: &[Job],
    ) -> Vec<Result<Vec<u8>, Failure>> {
        self.inner.run(blob, ctx, jobs)
    }

    /// Imports `file` in a throwaway worker process and checks that `func` is a callable in it:
    /// `Err` holds a message fit for the person who registered the substream.
    pub fn check(python: &Path, file: &Path, func: &str) -> Result<(), CheckError> {
        python::check(python, file, func)
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.inner.stats()
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("stats", &self.stats())
            .finish()
    }
}
