//! Running the substreams that apply to one blob: the one executor behind the runner (newly
//! stored blobs), backfill (older blobs, on request) and a reader's fallback (a missing result
//! computed on the client). Same code everywhere, so a result is the same wherever it was made.
//!
//! # Contract
//! - Declarative substreams share one pass over the blob ([`crate::declarative`]); Python
//!   substreams share one worker, which decodes the blob once ([`sluice_pyworkers::Pool::run`]).
//! - Each substream's outcome is its result blob ([`crate::declarative::encode_result`]) or a
//!   [`Miss`] with a stable reason: `wall_time`, `cpu_time`, `memory`, `result_size`,
//!   `exception`, `crashed`, `unavailable`, `bad_blob` (the pool's labels), `decode_error`
//!   (the blob could not be read for the declarative pass); the runner adds `queue_full`,
//!   `store_error` and `suspended`.
//! - A declarative pass cannot be interrupted: it is bounded by the decoder's [`Limits`] and
//!   the blob's size, and a pass over its wall budget is shed after the fact (its result not
//!   stored). A Python run is killed at its budget by the pool.
//! - The Python pool is started on first use (a server without Python substreams never starts
//!   one); if it cannot start, runs miss with `unavailable` and a new start is tried at most
//!   every [`POOL_RETRY`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sereal::{Decoder, Limits, Value};
use sluice_blob::EventKey;
use sluice_pyworkers::{BlobContext, Job, NoPython, Pool, PoolConfig, PoolError};
use sluice_reader::reduce::{Plan, ReduceError, ReduceSpec, Reducer};
use sluice_reader::ReduceDecoder;
use sluice_reader::{Selection, SelectionError};

use crate::declarative::{encode_result, result_builder, DeclarativeSet, EncodeError};
use crate::registry::{Definition, Transform};
use sluice_blob::BlobBuilder;

/// Least time between two attempts to start the Python pool.
pub const POOL_RETRY: Duration = Duration::from_secs(10);

/// A definition ready to run: its selection parsed, its Python source written to a file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The definition.
    pub def: Definition,
    /// Declarative: the parsed selection.
    pub selection: Option<Selection>,
    /// Python: the file holding the source (named by its content hash).
    pub code: Option<PathBuf>,
    /// Rollup: the reduce its kept events go through.
    pub rollup: Option<ReduceSpec>,
}

impl Compiled {
    /// Parses the selection and writes the source under `code_dir`.
    pub fn new(def: Definition, code_dir: &Path) -> Result<Compiled, CompileError> {
        let selection = def.selection()?;
        let code = match &def.transform {
            Transform::Python { source, .. } => {
                Some(crate::code_file(code_dir, &def.name, source).map_err(CompileError::Source)?)
            }
            Transform::Select { .. } | Transform::Rollup { .. } => None,
        };
        let rollup = def
            .rollup_spec()
            .transpose()
            .map_err(CompileError::Rollup)?;
        Ok(Compiled {
            def,
            selection,
            code,
            rollup,
        })
    }
}

/// Why a definition cannot be made ready to run.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Its `select` / `where` does not parse.
    #[error(transparent)]
    Selection(#[from] SelectionError),
    /// Its Python source could not be written to the code directory.
    #[error("writing the Python source: {0}")]
    Source(#[source] std::io::Error),
    /// Its rollup's group-by paths or aggregates do not parse.
    #[error("rollup: {0}")]
    Rollup(ReduceError),
}

/// Why the Python pool is not running; kept and answered again until the next start attempt
/// ([`POOL_RETRY`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolUnavailable {
    /// No interpreter was configured and none was found.
    #[error(transparent)]
    NoPython(#[from] NoPython),
    /// The pool did not start.
    #[error(transparent)]
    Start(#[from] PoolError),
}

/// Why a substream has no result for a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// Stable label (metrics, counts).
    pub reason: &'static str,
    /// For people.
    pub detail: String,
}

/// Settings of the Python pool an executor starts on demand.
#[derive(Debug, Clone)]
pub struct PythonSettings {
    /// The interpreter (`None`: [`sluice_pyworkers::find_python`]).
    pub python: Option<PathBuf>,
    /// Worker processes.
    pub workers: usize,
    /// Address-space limit of each worker (the memory budget of a Python run), bytes.
    pub memory_limit_bytes: u64,
    /// Mean jobs per worker before it recycles itself.
    pub mean_jobs_per_worker: f64,
}

impl Default for PythonSettings {
    fn default() -> PythonSettings {
        PythonSettings {
            python: None,
            workers: 2,
            memory_limit_bytes: 512 << 20,
            mean_jobs_per_worker: 500.0,
        }
    }
}

/// The Python pool, started on first use and shared by an executor's clones.
#[derive(Debug)]
pub struct PythonPool {
    settings: PythonSettings,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    pool: Option<Arc<Pool>>,
    last_error: Option<(Instant, PoolUnavailable)>,
}

impl PythonPool {
    /// A pool to start on first use.
    pub fn new(settings: PythonSettings) -> PythonPool {
        PythonPool {
            settings,
            state: Mutex::new(PoolState::default()),
        }
    }

    /// The running pool, starting it if needed.
    pub fn get(&self) -> Result<Arc<Pool>, PoolUnavailable> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &st.pool {
            return Ok(p.clone());
        }
        if let Some((at, e)) = &st.last_error {
            if at.elapsed() < POOL_RETRY {
                return Err(e.clone());
            }
        }
        let started = self
            .settings
            .python
            .clone()
            .map_or_else(
                || sluice_pyworkers::find_python().map_err(PoolUnavailable::from),
                Ok,
            )
            .and_then(|python| {
                Pool::start(PoolConfig {
                    python,
                    workers: self.settings.workers.max(1),
                    memory_limit_bytes: self.settings.memory_limit_bytes,
                    mean_jobs_per_worker: self.settings.mean_jobs_per_worker,
                    ..PoolConfig::default()
                })
                .map_err(PoolUnavailable::from)
            });
        match started {
            Ok(p) => {
                let p = Arc::new(p);
                st.pool = Some(p.clone());
                st.last_error = None;
                Ok(p)
            }
            Err(e) => {
                st.last_error = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// The pool's counters, if it runs.
    pub fn stats(&self) -> Option<sluice_pyworkers::PoolStats> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pool.as_ref().map(|p| p.stats())
    }
}

/// Runs substreams on blobs; see the [module docs](self).
#[derive(Debug)]
pub struct Executor {
    declarative: DeclarativeSet,
    /// Each rollup's lazy decoder (only the paths its reduce names), by name.
    rollups: std::collections::HashMap<String, ReduceDecoder>,
    limits: Limits,
    decoder: Decoder,
    builder: Option<BlobBuilder>,
    python: Arc<PythonPool>,
}

impl Executor {
    /// An executor sharing `python` (other executors may share it too).
    pub fn new(python: Arc<PythonPool>) -> Executor {
        Executor {
            declarative: DeclarativeSet::default(),
            rollups: std::collections::HashMap::new(),
            limits: Limits::default(),
            decoder: Decoder::new(),
            builder: None,
            python,
        }
    }

    /// Forgets state built for the previous registry.
    pub fn registry_changed(&mut self) {
        self.declarative.clear();
        self.rollups.clear();
    }

    /// One result blob of `events` (the builder kept across runs), unless over `max` bytes.
    fn encode(&mut self, events: &[Value], max: u64) -> Result<Vec<u8>, Miss> {
        if self.builder.is_none() {
            self.builder = Some(result_builder().map_err(|e| Miss {
                reason: "exception",
                detail: format!("result encoder: {e}"),
            })?);
        }
        let b = self.builder.as_mut().expect("just set");
        sized(encode_result(b, events), max)
    }

    /// A rollup's states of the blob `data` (second `epoch`), as a result blob.
    fn rollup(
        &mut self,
        c: &Compiled,
        spec: &ReduceSpec,
        epoch: i64,
        data: &[u8],
    ) -> Result<Vec<u8>, Miss> {
        let start = Instant::now();
        let limits = self.limits.clone();
        let decoder = self.rollups.entry(c.def.name.clone()).or_insert_with(|| {
            let filter = c.selection.as_ref().and_then(|s| s.filter.clone());
            ReduceDecoder::new(filter, Plan::Reduce(spec.clone()).paths(), limits)
        });
        let events = decoder.decode(data).map_err(|detail| Miss {
            reason: "decode_error",
            detail,
        })?;
        let states = rollup_states(spec, epoch, &events)?;
        let took = start.elapsed();
        if took > Duration::from_millis(c.def.budget.wall_ms) {
            return Err(Miss {
                reason: "wall_time",
                detail: format!(
                    "the rollup took {} ms (budget {} ms)",
                    took.as_millis(),
                    c.def.budget.wall_ms
                ),
            });
        }
        self.encode(&states, c.def.budget.max_result_bytes)
    }

    /// The outcome of each of `subs` on the event blob `data` stored under `key`, in order.
    pub fn run(
        &mut self,
        subs: &[Arc<Compiled>],
        key: &EventKey,
        data: &[u8],
    ) -> Vec<Result<Vec<u8>, Miss>> {
        let mut out: Vec<Option<Result<Vec<u8>, Miss>>> = vec![None; subs.len()];
        // Rollups read only the paths their reduce names, each lazily (`rollup`); the other
        // declarative substreams share one pass.
        for (i, c) in subs.iter().enumerate() {
            if let Some(spec) = &c.rollup {
                out[i] = Some(self.rollup(c, spec, key.epoch(), data));
            }
        }
        let decl: Vec<(usize, &str, &Selection)> = subs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.rollup.is_none())
            .filter_map(|(i, c)| c.selection.as_ref().map(|s| (i, c.def.name.as_str(), s)))
            .collect();
        if !decl.is_empty() {
            let named: Vec<(&str, &Selection)> = decl.iter().map(|(_, n, s)| (*n, *s)).collect();
            let start = Instant::now();
            let results = self.declarative.apply(&named, data, &self.limits);
            let took = start.elapsed();
            match results {
                Ok(values) => {
                    for ((i, _, _), events) in decl.iter().zip(values) {
                        let budget = &subs[*i].def.budget;
                        out[*i] = Some(if took > Duration::from_millis(budget.wall_ms) {
                            Err(Miss {
                                reason: "wall_time",
                                detail: format!(
                                    "the declarative pass took {} ms (budget {} ms)",
                                    took.as_millis(),
                                    budget.wall_ms
                                ),
                            })
                        } else {
                            self.encode(&events, budget.max_result_bytes)
                        });
                    }
                }
                Err(e) => {
                    for (i, _, _) in &decl {
                        out[*i] = Some(Err(Miss {
                            reason: "decode_error",
                            detail: e.to_string(),
                        }));
                    }
                }
            }
        }
        let code: Vec<usize> = (0..subs.len())
            .filter(|i| subs[*i].code.is_some())
            .collect();
        if !code.is_empty() {
            match self.python.get() {
                Err(e) => {
                    for i in &code {
                        out[*i] = Some(Err(Miss {
                            reason: "unavailable",
                            detail: format!("no Python worker pool: {e}"),
                        }));
                    }
                }
                Ok(pool) => {
                    let jobs: Vec<Job> = code
                        .iter()
                        .map(|&i| {
                            let c = &subs[i];
                            let func = match &c.def.transform {
                                Transform::Python { func, .. } => func.clone(),
                                Transform::Select { .. } | Transform::Rollup { .. } => {
                                    String::new()
                                }
                            };
                            Job {
                                name: c.def.name.clone(),
                                file: c.code.clone().unwrap_or_default(),
                                func,
                                wall: Duration::from_millis(c.def.budget.wall_ms),
                                cpu: Duration::from_millis(c.def.budget.cpu_ms),
                                max_result_bytes: usize::try_from(c.def.budget.max_result_bytes)
                                    .unwrap_or(usize::MAX),
                            }
                        })
                        .collect();
                    let ctx = BlobContext {
                        epoch: key.epoch(),
                        dc: key.dc().to_owned(),
                        type_: key.type_().to_owned(),
                        subtype: key.subtype().to_owned(),
                        chunk: key.chunk().n(),
                    };
                    let results = pool.run(data, &ctx, &jobs);
                    for (n, &i) in code.iter().enumerate() {
                        let budget = subs[i].def.budget.max_result_bytes;
                        out[i] = Some(match results.get(n) {
                            Some(Ok(doc)) => match self.decoder.decode(doc) {
                                Ok(Value::Array(events)) => self.encode(&events, budget),
                                Ok(_) => Err(Miss {
                                    reason: "exception",
                                    detail: "the worker's result is not an array".into(),
                                }),
                                Err(e) => Err(Miss {
                                    reason: "exception",
                                    detail: format!("the worker's result does not decode: {e}"),
                                }),
                            },
                            Some(Err(f)) => Err(Miss {
                                reason: f.reason(),
                                detail: f.to_string(),
                            }),
                            None => Err(Miss {
                                reason: "crashed",
                                detail: "the pool gave no result".into(),
                            }),
                        });
                    }
                }
            }
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or(Err(Miss {
                    reason: "crashed",
                    detail: "not run".into(),
                }))
            })
            .collect()
    }
}

/// A rollup's partial states of the kept `events` of one blob (all of second `epoch`).
fn rollup_states(spec: &ReduceSpec, epoch: i64, events: &[Value]) -> Result<Vec<Value>, Miss> {
    let mut reducer = Reducer::new(spec.clone());
    for e in events {
        // An overflowing rollup never refuses a group; nothing else fails.
        reducer.push(epoch, e).map_err(|e| Miss {
            reason: "exception",
            detail: format!("rollup: {e}"),
        })?;
    }
    Ok(reducer.finish_states())
}

/// `encoded` unless over `max` bytes (or not encodable).
fn sized(encoded: Result<Vec<u8>, EncodeError>, max: u64) -> Result<Vec<u8>, Miss> {
    match encoded {
        Ok(b) if b.len() as u64 > max => Err(Miss {
            reason: "result_size",
            detail: format!("result blob of {} bytes (budget {max})", b.len()),
        }),
        Ok(b) => Ok(b),
        Err(e) => Err(Miss {
            reason: "exception",
            detail: format!("result not storable: {e}"),
        }),
    }
}
