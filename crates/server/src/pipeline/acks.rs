//! Waiting for the WAL before an acknowledgement, on one thread per server.
//!
//! A payload may be acknowledged once its WAL record is durable ([`Wal::wait_durable`]). That
//! call blocks, and it used to run on a `spawn_blocking` thread per payload: under load a dozen
//! blocking threads woke for every fsync, each only to find the fsync done, and they took the
//! cores from the pipeline threads (an off-CPU profile of two shards counted ~3,300 switches
//! per second per pipeline thread, most of them preemptions by those waiters).
//!
//! Here a task says which record it needs ([`AckWaiter::wait`]): the highest wanted sequence
//! number goes to one `sluice-acks` thread, which calls `wait_durable` for it (one group commit
//! for everything wanted so far) and publishes the result on a `tokio::sync::watch` that
//! every waiting task reads. The semantics of `wait_durable` are kept: `Ok` once the record is
//! fsynced (shared with the WAL's own flusher and the shards' syncs), `Err` if the fsync that
//! covered it failed and could not be redone on a fresh segment. A failure is not sticky: the
//! next request tries again.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use sluice_collector::wal::Wal;
use tokio::sync::watch;

use crate::error::IngestError;

/// What the sync thread has established, read by every waiting task.
#[derive(Debug, Clone, Default)]
struct Synced {
    /// Every record up to this one is durable.
    durable: u64,
    /// How many syncs failed so far.
    failures: u64,
    /// The last failed sync covered every record up to this one.
    failed_upto: u64,
    /// Why it failed.
    error: String,
    /// The thread has stopped: nothing more becomes durable through it.
    stopped: bool,
}

/// What the tasks ask of the sync thread.
#[derive(Debug, Default)]
struct Wanted {
    /// The highest sequence number asked for.
    upto: u64,
    /// Requests so far (a request after a failed sync must try again, even for a record
    /// below `upto`).
    requests: u64,
    stop: bool,
}

struct Inner {
    wal: Arc<Wal>,
    wanted: Mutex<Wanted>,
    cv: Condvar,
    synced: watch::Sender<Synced>,
}

impl Inner {
    fn wanted(&self) -> MutexGuard<'_, Wanted> {
        self.wanted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Tells tasks when their WAL records are durable (see the [module docs](self)).
pub struct AckWaiter {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AckWaiter {
    /// Starts the `sluice-acks` thread for `wal`.
    pub fn start(wal: Arc<Wal>) -> std::io::Result<AckWaiter> {
        let (synced, _) = watch::channel(Synced::default());
        let inner = Arc::new(Inner {
            wal,
            wanted: Mutex::new(Wanted::default()),
            cv: Condvar::new(),
            synced,
        });
        let thread = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("sluice-acks".into())
                .spawn(move || sync_loop(&inner))?
        };
        Ok(AckWaiter {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Returns once record `seq` is durable; `Err` if the sync that covered it failed, or the
    /// waiter stopped first.
    pub async fn wait(&self, seq: u64) -> Result<(), IngestError> {
        let inner = &*self.inner;
        if inner.wal.durable_seq() >= seq {
            return Ok(());
        }
        // Subscribed before asking: no published result can be missed.
        let mut rx = inner.synced.subscribe();
        let failures_before = rx.borrow().failures;
        {
            let mut w = inner.wanted();
            w.upto = w.upto.max(seq);
            w.requests += 1;
        }
        inner.cv.notify_one();
        loop {
            {
                let s = rx.borrow_and_update();
                if s.durable >= seq {
                    return Ok(());
                }
                if s.failures > failures_before && s.failed_upto >= seq {
                    return Err(IngestError::NotDurable(s.error.clone()));
                }
                if s.stopped {
                    return Err(IngestError::NotDurable(
                        "the server is shutting down".into(),
                    ));
                }
            }
            if rx.changed().await.is_err() {
                return Err(IngestError::NotDurable(
                    "the server is shutting down".into(),
                ));
            }
        }
    }

    /// Syncs what was asked for so far, then stops the thread (later waits fail). Idempotent.
    pub fn stop(&self) {
        self.inner.wanted().stop = true;
        self.inner.cv.notify_one();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for AckWaiter {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for AckWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckWaiter")
            .field("synced", &*self.inner.synced.borrow())
            .finish()
    }
}

/// The `sluice-acks` thread: one `wait_durable` per round of requests, for the highest record
/// asked for; on a stop, one last round, then `stopped`.
fn sync_loop(inner: &Inner) {
    let mut served = 0u64;
    loop {
        let (target, stop) = {
            let mut w = inner.wanted();
            while w.requests == served && !w.stop {
                w = inner.cv.wait(w).unwrap_or_else(|e| e.into_inner());
            }
            served = w.requests;
            (w.upto, w.stop)
        };
        if target > 0 {
            match inner.wal.wait_durable(target) {
                Ok(()) => {
                    let durable = inner.wal.durable_seq().max(target);
                    inner
                        .synced
                        .send_modify(|s| s.durable = s.durable.max(durable));
                }
                Err(e) => inner.synced.send_modify(|s| {
                    s.failures += 1;
                    s.failed_upto = target;
                    s.error = e.to_string();
                }),
            }
        }
        if stop {
            inner.synced.send_modify(|s| s.stopped = true);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_collector::wal::{FsyncPolicy, WalConfig};
    use std::time::Duration;

    fn wal(name: &str) -> (Arc<Wal>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("sluice-acks-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = WalConfig {
            // The background fsync never comes first: only the acks thread makes records durable.
            fsync: FsyncPolicy::Batch {
                max_delay: Duration::from_secs(3600),
            },
            ..WalConfig::default()
        };
        let (wal, _) = Wal::open(&dir, cfg).unwrap();
        (Arc::new(wal), dir)
    }

    #[test]
    fn every_waiter_returns_once_its_record_is_durable() {
        let (wal, dir) = wal("durable");
        let acks = Arc::new(AckWaiter::start(wal.clone()).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let (wal, acks) = (wal.clone(), acks.clone());
                tasks.spawn(async move {
                    for _ in 0..50 {
                        let seq = wal.append(b"{}", 1).unwrap();
                        acks.wait(seq).await.unwrap();
                        assert!(wal.durable_seq() >= seq, "acknowledged before durable");
                    }
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.unwrap();
            }
        });
        // Group commit: fewer fsyncs than records.
        assert!(
            wal.fsyncs() < 800,
            "{} fsyncs for 800 records",
            wal.fsyncs()
        );

        // Stopped: what was asked is synced, later waits fail.
        let seq = wal.append(b"{}", 1).unwrap();
        acks.stop();
        let after = rt.block_on(acks.wait(seq));
        assert!(after.is_err(), "{after:?}");
        assert!(wal.durable_seq() < seq);
        drop((acks, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stop_syncs_what_was_asked_before_it() {
        let (wal, dir) = wal("stop");
        let acks = Arc::new(AckWaiter::start(wal.clone()).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seq = wal.append(b"{}", 1).unwrap();
        let waiting = {
            let acks = acks.clone();
            rt.spawn(async move { acks.wait(seq).await })
        };
        // The waiter has asked once it is polled; then the stop.
        rt.block_on(tokio::task::yield_now());
        acks.stop();
        let r = rt.block_on(waiting).unwrap();
        assert!(r.is_ok(), "{r:?}");
        assert!(wal.durable_seq() >= seq);
        drop((acks, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
