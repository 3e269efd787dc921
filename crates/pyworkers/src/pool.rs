//! The pool: idle workers, the spawner thread that keeps their number up under a token bucket,
//! and the run loop that enforces the budgets of each job.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_blob::BlobRef;

use crate::proto::{self, FailCode, Frame};
use crate::worker::{describe_status, Read1, Worker};
use crate::{BlobContext, Failure, Job, PoolConfig, PoolError, PoolStats};

/// How often the parent samples a busy worker's CPU time and memory.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// A worker that dies with its address space at least this share of the limit died of memory.
const NEAR_LIMIT: f64 = 0.9;

#[derive(Default)]
struct Counters {
    spawned: AtomicU64,
    spawn_failed: AtomicU64,
    recycled: AtomicU64,
    killed_wall: AtomicU64,
    killed_cpu: AtomicU64,
    killed_memory: AtomicU64,
    killed_result_size: AtomicU64,
    crashed: AtomicU64,
    respawn_throttled: AtomicU64,
    jobs_ok: AtomicU64,
    jobs_failed: AtomicU64,
    unavailable: AtomicU64,
}

struct State {
    idle: Vec<Worker>,
    /// Workers alive or being spawned (idle + busy + starting).
    live: usize,
    stopping: bool,
    /// Respawn tokens (the initial workers cost none).
    tokens: f64,
    refilled: Instant,
    /// Whether the spawner is waiting for a token now (counted once per wait).
    throttled: bool,
    last_spawn_error: Option<String>,
    /// Spawn attempts finished since start (the first decides whether `start` succeeds).
    spawn_attempts: u64,
}

struct Shared {
    cfg: PoolConfig,
    state: Mutex<State>,
    /// Signalled when a worker becomes idle (or the pool stops, or a spawn fails).
    idle_cv: Condvar,
    /// Signalled when a worker leaves the pool (the spawner replaces it).
    spawn_cv: Condvar,
    counters: Counters,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state inconsistent in a way that
        // matters more than stopping would: keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A worker left the pool (killed, died, recycled): the spawner replaces it.
    fn retire(&self, mut worker: Worker) {
        worker.kill();
        drop(worker);
        let mut st = self.lock();
        st.live = st.live.saturating_sub(1);
        drop(st);
        self.spawn_cv.notify_all();
    }

    fn give_back(&self, worker: Worker) {
        let mut st = self.lock();
        if st.stopping {
            drop(st);
            drop(worker);
            return;
        }
        st.idle.push(worker);
        drop(st);
        self.idle_cv.notify_one();
    }
}

/// The pool's insides (see [`crate::Pool`]).
pub struct Inner {
    shared: Arc<Shared>,
    spawner: Option<JoinHandle<()>>,
}

fn validate(cfg: &PoolConfig) -> Result<(), PoolError> {
    let bad = |m: &str| Err(PoolError::Config(m.into()));
    if cfg.workers == 0 {
        return bad("workers must be at least 1");
    }
    if !cfg.mean_jobs_per_worker.is_finite() || cfg.mean_jobs_per_worker < 1.0 {
        return bad("mean_jobs_per_worker must be a finite number ≥ 1");
    }
    if !cfg.max_respawns_per_sec.is_finite() || cfg.max_respawns_per_sec <= 0.0 {
        return bad("max_respawns_per_sec must be a finite number > 0");
    }
    if cfg.respawn_burst == 0 {
        return bad("respawn_burst must be at least 1");
    }
    if cfg.memory_limit_bytes != 0 && cfg.memory_limit_bytes < 64 << 20 {
        return bad(
            "memory_limit_bytes must be 0 (no limit) or at least 64 MiB (Python needs it to start)",
        );
    }
    Ok(())
}

/// The chance that a worker with `rss` bytes resident is retired after one job.
pub fn recycle_probability(mean_jobs: f64, rss: u64, memory_limit: u64) -> f64 {
    let base = 1.0 / mean_jobs.max(1.0);
    if memory_limit == 0 {
        return base;
    }
    let pressure = rss as f64 / memory_limit as f64;
    let s = ((pressure - 0.5) / 0.5).clamp(0.0, 1.0);
    (base * (1.0 + s * s * (mean_jobs - 1.0))).min(1.0)
}

fn spawner(shared: Arc<Shared>) {
    let cfg = &shared.cfg;
    let mut initial = cfg.workers;
    loop {
        let mut st = shared.lock();
        if st.stopping {
            return;
        }
        if st.live >= cfg.workers {
            st.throttled = false;
            let (g, _) = shared
                .spawn_cv
                .wait_timeout(st, Duration::from_secs(1))
                .unwrap_or_else(|p| p.into_inner());
            drop(g);
            continue;
        }
        if initial > 0 {
            initial -= 1;
        } else {
            let now = Instant::now();
            let elapsed = now.duration_since(st.refilled).as_secs_f64();
            st.refilled = now;
            st.tokens =
                (st.tokens + elapsed * cfg.max_respawns_per_sec).min(cfg.respawn_burst as f64);
            if st.tokens < 1.0 {
                if !st.throttled {
                    st.throttled = true;
                    shared.counters.respawn_throttled.fetch_add(1, Relaxed);
                }
                let wait = Duration::from_secs_f64(
                    ((1.0 - st.tokens) / cfg.max_respawns_per_sec).clamp(0.001, 1.0),
                );
                let (g, _) = shared
                    .spawn_cv
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|p| p.into_inner());
                drop(g);
                continue;
            }
            st.tokens -= 1.0;
            st.throttled = false;
        }
        st.live += 1;
        drop(st);
        let spawned = Worker::spawn(
            &cfg.python,
            cfg.memory_limit_bytes,
            cfg.inherit_stderr,
            cfg.spawn_timeout,
        );
        let mut st = shared.lock();
        st.spawn_attempts += 1;
        match spawned {
            Ok(worker) => {
                shared.counters.spawned.fetch_add(1, Relaxed);
                if st.stopping {
                    st.live -= 1;
                    drop(st);
                    drop(worker);
                    return;
                }
                st.idle.push(worker);
                drop(st);
                shared.idle_cv.notify_one();
            }
            Err(e) => {
                shared.counters.spawn_failed.fetch_add(1, Relaxed);
                st.live -= 1;
                st.last_spawn_error = Some(e);
                drop(st);
                shared.idle_cv.notify_all();
            }
        }
    }
}

/// What became of the worker a sub-run used.
enum Fate {
    /// It answered everything: give it back (or recycle it).
    Healthy(Worker),
    /// It was killed or died: jobs from `next` on run again in a fresh worker.
    Gone { next: usize },
}

impl Inner {
    pub fn start(cfg: PoolConfig) -> Result<Inner, PoolError> {
        validate(&cfg)?;
        let spawn_timeout = cfg.spawn_timeout;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                idle: Vec::new(),
                live: 0,
                stopping: false,
                tokens: cfg.respawn_burst as f64,
                refilled: Instant::now(),
                throttled: false,
                last_spawn_error: None,
                spawn_attempts: 0,
            }),
            cfg,
            idle_cv: Condvar::new(),
            spawn_cv: Condvar::new(),
            counters: Counters::default(),
        });
        let for_thread = Arc::clone(&shared);
        let spawner = std::thread::Builder::new()
            .name("pyworkers-spawner".into())
            .spawn(move || spawner(for_thread))
            .map_err(|e| PoolError::Spawn(format!("spawner thread: {e}")))?;
        let inner = Inner {
            shared,
            spawner: Some(spawner),
        };
        // Wait for the first spawn to finish: a Python that cannot start fails `start`.
        let deadline = Instant::now() + spawn_timeout + Duration::from_secs(2);
        let mut st = inner.shared.lock();
        while st.spawn_attempts == 0 {
            let now = Instant::now();
            if now >= deadline {
                return Err(PoolError::Spawn(
                    "timed out waiting for the first worker".into(),
                ));
            }
            st = inner
                .shared
                .idle_cv
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        if st.idle.is_empty() {
            let e = st.last_spawn_error.clone().unwrap_or_default();
            drop(st);
            return Err(PoolError::Spawn(e));
        }
        drop(st);
        Ok(inner)
    }

    pub fn stats(&self) -> PoolStats {
        let c = &self.shared.counters;
        let live = self.shared.lock().live as u64;
        PoolStats {
            spawned: c.spawned.load(Relaxed),
            spawn_failed: c.spawn_failed.load(Relaxed),
            recycled: c.recycled.load(Relaxed),
            killed_wall: c.killed_wall.load(Relaxed),
            killed_cpu: c.killed_cpu.load(Relaxed),
            killed_memory: c.killed_memory.load(Relaxed),
            killed_result_size: c.killed_result_size.load(Relaxed),
            crashed: c.crashed.load(Relaxed),
            respawn_throttled: c.respawn_throttled.load(Relaxed),
            jobs_ok: c.jobs_ok.load(Relaxed),
            jobs_failed: c.jobs_failed.load(Relaxed),
            unavailable: c.unavailable.load(Relaxed),
            live,
        }
    }

    /// An idle, living worker, waiting at most `acquire_timeout`.
    fn acquire(&self) -> Result<Worker, String> {
        let sh = &self.shared;
        let deadline = Instant::now() + sh.cfg.acquire_timeout;
        let mut st = sh.lock();
        loop {
            if st.stopping {
                return Err("the pool is stopping".into());
            }
            while let Some(mut w) = st.idle.pop() {
                if w.has_exited() {
                    // Died while idle (OOM killer, a signal): not any job's fault.
                    sh.counters.crashed.fetch_add(1, Relaxed);
                    st.live = st.live.saturating_sub(1);
                    sh.spawn_cv.notify_all();
                    continue;
                }
                return Ok(w);
            }
            let now = Instant::now();
            if now >= deadline {
                let mut why = format!(
                    "no free worker within {:?} ({} of {} alive",
                    sh.cfg.acquire_timeout, st.live, sh.cfg.workers
                );
                if st.throttled {
                    why.push_str("; respawns throttled");
                }
                if let Some(e) = &st.last_spawn_error {
                    why.push_str("; last spawn error: ");
                    why.push_str(e);
                }
                why.push(')');
                return Err(why);
            }
            st = sh
                .idle_cv
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    pub fn run(
        &self,
        blob: &[u8],
        ctx: &BlobContext,
        jobs: &[Job],
    ) -> Vec<Result<Vec<u8>, Failure>> {
        let mut results: Vec<Option<Result<Vec<u8>, Failure>>> = vec![None; jobs.len()];
        match BlobRef::parse(blob) {
            Err(e) => {
                let f = Failure::BadBlob(e.to_string());
                for r in results.iter_mut() {
                    *r = Some(Err(f.clone()));
                }
            }
            Ok(parsed) => self.run_doc(parsed.sereal_part(), ctx, jobs, &mut results),
        }
        let c = &self.shared.counters;
        results
            .into_iter()
            .map(|r| {
                let r = r.unwrap_or_else(|| Err(Failure::Crashed("no answer for the job".into())));
                match &r {
                    Ok(_) => c.jobs_ok.fetch_add(1, Relaxed),
                    Err(_) => c.jobs_failed.fetch_add(1, Relaxed),
                };
                r
            })
            .collect()
    }

    fn run_doc(
        &self,
        doc: &[u8],
        ctx: &BlobContext,
        jobs: &[Job],
        results: &mut [Option<Result<Vec<u8>, Failure>>],
    ) {
        let mut next = 0;
        // A worker found dead before it took the request is not a job's fault: try another, a
        // few times.
        let mut dead_on_arrival = 0;
        while next < jobs.len() {
            let worker = match self.acquire() {
                Ok(w) => w,
                Err(why) => {
                    self.shared.counters.unavailable.fetch_add(1, Relaxed);
                    for r in results[next..].iter_mut() {
                        *r = Some(Err(Failure::Unavailable(why.clone())));
                    }
                    return;
                }
            };
            match self.run_on(worker, doc, ctx, &jobs[next..], &mut results[next..]) {
                Ok(Fate::Healthy(worker)) => {
                    self.recycle_or_give_back(worker, jobs.len() - next);
                    return;
                }
                Ok(Fate::Gone { next: n }) => next += n,
                Err(()) => {
                    dead_on_arrival += 1;
                    if dead_on_arrival >= 3 {
                        for r in results[next..].iter_mut() {
                            *r = Some(Err(Failure::Unavailable(
                                "workers die before taking a request".into(),
                            )));
                        }
                        return;
                    }
                }
            }
        }
    }

    fn recycle_or_give_back(&self, worker: Worker, jobs_run: usize) {
        let cfg = &self.shared.cfg;
        let rss = crate::proc_stat::memory(worker.pid()).map_or(0, |(_, rss)| rss);
        let p = recycle_probability(cfg.mean_jobs_per_worker, rss, cfg.memory_limit_bytes);
        // One independent draw per job run: a worker's lifetime in jobs is geometric with
        // mean 1/p, whatever the number of jobs per blob.
        let retire = (0..jobs_run).any(|_| fastrand::f64() < p);
        if retire {
            self.shared.counters.recycled.fetch_add(1, Relaxed);
            self.shared.retire(worker);
        } else {
            self.shared.give_back(worker);
        }
    }

    /// Runs `jobs` on `worker`, filling `results` (same length) as answers come. `Err(())`: the
    /// worker was dead before it took the request (nothing filled).
    fn run_on(
        &self,
        mut worker: Worker,
        doc: &[u8],
        ctx: &BlobContext,
        jobs: &[Job],
        results: &mut [Option<Result<Vec<u8>, Failure>>],
    ) -> Result<Fate, ()> {
        let sh = &self.shared;
        let cfg = &sh.cfg;
        let c = &sh.counters;
        let request = proto::request(doc, ctx, jobs);
        let decode_deadline = Instant::now() + cfg.decode_timeout;
        if worker.write_all(&request, decode_deadline).is_err() {
            if worker.has_exited() {
                c.crashed.fetch_add(1, Relaxed);
                sh.retire(worker);
                return Err(());
            }
            // Alive but not reading its request in time: treat as a hung decode.
            c.killed_wall.fetch_add(1, Relaxed);
            fill(results, 0, Failure::WallTime);
            sh.retire(worker);
            return Ok(Fate::Gone { next: jobs.len() });
        }
        let max_result = jobs.iter().map(|j| j.max_result_bytes).max().unwrap_or(0);
        let max_frame = proto::MAX_CONTROL_FRAME.max(max_result.saturating_add(5));
        let mem_limit = cfg.memory_limit_bytes;
        let pid = worker.pid();

        // The job running now: (index, start, CPU time at start).
        let mut current: Option<(usize, Instant, Duration)> = None;
        let mut decoded = false;
        // When the worker last finished a step (decode or job): it owes the next frame soon.
        let mut step_done = Instant::now();
        // Largest address space seen while sampling: tells a death of memory from a crash.
        let mut vm_seen = 0u64;
        loop {
            let now = Instant::now();
            let budget_deadline = match current {
                Some((i, start, _)) => start + jobs[i].wall,
                None if !decoded => decode_deadline,
                // Between jobs: the worker owes the next `S` (or `F`) frame at once.
                None => step_done + cfg.decode_timeout,
            };
            let read = worker.read_frame((now + SAMPLE_EVERY).min(budget_deadline), max_frame);
            match read {
                Read1::Timeout => {
                    if let Some((vm, _)) = crate::proc_stat::memory(pid) {
                        vm_seen = vm_seen.max(vm);
                    }
                    if Instant::now() >= budget_deadline {
                        c.killed_wall.fetch_add(1, Relaxed);
                        let from = current.map_or(0, |(i, _, _)| i);
                        match current {
                            Some((i, _, _)) => results[i] = Some(Err(Failure::WallTime)),
                            None => fill(results, from, Failure::WallTime),
                        }
                        sh.retire(worker);
                        let next = if current.is_some() {
                            from + 1
                        } else {
                            jobs.len()
                        };
                        return Ok(Fate::Gone { next });
                    }
                    if let Some((i, _, cpu0)) = current {
                        if let Some(cpu) = crate::proc_stat::cpu_time(pid) {
                            if cpu.saturating_sub(cpu0) > jobs[i].cpu {
                                c.killed_cpu.fetch_add(1, Relaxed);
                                results[i] = Some(Err(Failure::CpuTime));
                                sh.retire(worker);
                                return Ok(Fate::Gone { next: i + 1 });
                            }
                        }
                    }
                }
                Read1::Frame(frame) => match proto::parse(frame) {
                    Ok(Frame::Decoded(_)) if !decoded && current.is_none() => {
                        decoded = true;
                        step_done = Instant::now();
                    }
                    Ok(Frame::BadBlob(m)) if !decoded => {
                        fill(results, 0, Failure::BadBlob(m));
                        // The worker goes on to `F`; it is healthy.
                        decoded = true;
                        step_done = Instant::now();
                    }
                    Ok(Frame::DecodeMemory(_)) if !decoded => {
                        c.killed_memory.fetch_add(1, Relaxed);
                        fill(results, 0, Failure::Memory);
                        sh.retire(worker);
                        return Ok(Fate::Gone { next: jobs.len() });
                    }
                    Ok(Frame::Started(i)) if decoded && current.is_none() => {
                        let i = i as usize;
                        if i >= jobs.len() || results[i].is_some() {
                            return Ok(self.protocol_error(
                                worker,
                                results,
                                None,
                                "bad job number",
                            ));
                        }
                        let cpu0 = crate::proc_stat::cpu_time(pid).unwrap_or_default();
                        current = Some((i, Instant::now(), cpu0));
                    }
                    Ok(Frame::Result(i, doc)) if current.map(|c| c.0) == Some(i as usize) => {
                        let i = i as usize;
                        current = None;
                        step_done = Instant::now();
                        worker.jobs_run += 1;
                        if doc.len() > jobs[i].max_result_bytes {
                            // The worker checks too; a frame over the budget is its fault.
                            results[i] = Some(Err(Failure::ResultTooLarge { bytes: doc.len() }));
                        } else {
                            results[i] = Some(Ok(doc));
                        }
                    }
                    Ok(Frame::Failed(i, code, msg)) if current.map(|c| c.0) == Some(i as usize) => {
                        let i = i as usize;
                        current = None;
                        step_done = Instant::now();
                        worker.jobs_run += 1;
                        match code {
                            FailCode::Exception => results[i] = Some(Err(Failure::Exception(msg))),
                            FailCode::ResultTooLarge => {
                                let bytes = msg.trim().parse().unwrap_or(0);
                                results[i] = Some(Err(Failure::ResultTooLarge { bytes }));
                            }
                            FailCode::Memory => {
                                // A MemoryError leaves the interpreter in doubt: replace it.
                                c.killed_memory.fetch_add(1, Relaxed);
                                results[i] = Some(Err(Failure::Memory));
                                sh.retire(worker);
                                return Ok(Fate::Gone { next: i + 1 });
                            }
                        }
                    }
                    Ok(Frame::Finished) if decoded && current.is_none() => {
                        if results.iter().any(|r| r.is_none()) {
                            return Ok(self.protocol_error(
                                worker,
                                results,
                                None,
                                "finished without answering every job",
                            ));
                        }
                        return Ok(Fate::Healthy(worker));
                    }
                    Ok(other) => {
                        let what = format!("unexpected frame {other:?}");
                        let what: String = what.chars().take(200).collect();
                        return Ok(self.protocol_error(
                            worker,
                            results,
                            current.map(|c| c.0),
                            &what,
                        ));
                    }
                    Err(e) => {
                        return Ok(self.protocol_error(
                            worker,
                            results,
                            current.map(|c| c.0),
                            &e.to_string(),
                        ))
                    }
                },
                Read1::TooLong(n) => {
                    if let Some((i, _, _)) = current {
                        if n.saturating_sub(5) > jobs[i].max_result_bytes {
                            c.killed_result_size.fetch_add(1, Relaxed);
                            results[i] = Some(Err(Failure::ResultTooLarge { bytes: n - 5 }));
                            sh.retire(worker);
                            return Ok(Fate::Gone { next: i + 1 });
                        }
                    }
                    let what = format!("frame of {n} bytes");
                    return Ok(self.protocol_error(worker, results, current.map(|c| c.0), &what));
                }
                Read1::Eof | Read1::Io(_) => {
                    let status = worker.reap(Duration::from_secs(2));
                    let died = describe_status(status);
                    let near_limit =
                        mem_limit > 0 && vm_seen as f64 >= NEAR_LIMIT * mem_limit as f64;
                    let failure = if near_limit {
                        c.killed_memory.fetch_add(1, Relaxed);
                        Failure::Memory
                    } else {
                        c.crashed.fetch_add(1, Relaxed);
                        match current {
                            Some(_) => Failure::Crashed(format!("worker {died} during the job")),
                            None if !decoded => {
                                Failure::Crashed(format!("worker {died} while decoding the blob"))
                            }
                            None => Failure::Crashed(format!("worker {died} between jobs")),
                        }
                    };
                    sh.retire(worker);
                    return Ok(match current {
                        Some((i, _, _)) => {
                            results[i] = Some(Err(failure));
                            Fate::Gone { next: i + 1 }
                        }
                        None if !decoded => {
                            fill(results, 0, failure);
                            Fate::Gone { next: jobs.len() }
                        }
                        None => {
                            // Between two jobs: nothing of anyone's is lost; go on elsewhere.
                            let next = results
                                .iter()
                                .position(|r| r.is_none())
                                .unwrap_or(jobs.len());
                            Fate::Gone { next }
                        }
                    });
                }
            }
        }
    }

    /// The worker broke the protocol: it is killed, the job running (or every unanswered one
    /// if none is running) is `Crashed`.
    fn protocol_error(
        &self,
        worker: Worker,
        results: &mut [Option<Result<Vec<u8>, Failure>>],
        current: Option<usize>,
        what: &str,
    ) -> Fate {
        self.shared.counters.crashed.fetch_add(1, Relaxed);
        self.shared.retire(worker);
        let f = Failure::Crashed(format!("protocol error: {what}"));
        match current {
            Some(i) => {
                results[i] = Some(Err(f));
                Fate::Gone { next: i + 1 }
            }
            None => {
                fill(results, 0, f);
                Fate::Gone {
                    next: results.len(),
                }
            }
        }
    }
}

/// Sets every unanswered result from `from` on to `f`.
fn fill(results: &mut [Option<Result<Vec<u8>, Failure>>], from: usize, f: Failure) {
    for r in results[from..].iter_mut().filter(|r| r.is_none()) {
        *r = Some(Err(f.clone()));
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let idle = {
            let mut st = self.shared.lock();
            st.stopping = true;
            std::mem::take(&mut st.idle)
        };
        self.shared.spawn_cv.notify_all();
        self.shared.idle_cv.notify_all();
        for mut w in idle {
            w.kill();
        }
        if let Some(h) = self.spawner.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycle_probability_rises_smoothly_with_memory() {
        let p = |rss| recycle_probability(100.0, rss, 1000);
        assert_eq!(p(0), 0.01);
        assert_eq!(p(500), 0.01);
        assert!(p(600) > 0.01 && p(600) < p(800) && p(800) < p(950));
        assert_eq!(p(1000), 1.0);
        assert_eq!(p(5000), 1.0);
        assert_eq!(recycle_probability(100.0, 5000, 0), 0.01);
        assert_eq!(recycle_probability(0.5, 0, 0), 1.0);
    }

    #[test]
    fn pool_is_shareable_across_substream_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<crate::Pool>();
    }

    #[test]
    fn config_is_validated() {
        let ok = PoolConfig::default();
        assert!(validate(&ok).is_ok());
        for bad in [
            PoolConfig {
                workers: 0,
                ..ok.clone()
            },
            PoolConfig {
                mean_jobs_per_worker: 0.5,
                ..ok.clone()
            },
            PoolConfig {
                mean_jobs_per_worker: f64::NAN,
                ..ok.clone()
            },
            PoolConfig {
                max_respawns_per_sec: 0.0,
                ..ok.clone()
            },
            PoolConfig {
                respawn_burst: 0,
                ..ok.clone()
            },
            PoolConfig {
                memory_limit_bytes: 1 << 20,
                ..ok.clone()
            },
        ] {
            assert!(validate(&bad).is_err(), "{bad:?}");
        }
    }
}
