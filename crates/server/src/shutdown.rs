//! How the server stops: the signals that ask for it ([`signal`]), the stop flag every listener
//! watches ([`flag`]), and the sequence after it ([`finish`]).
//!
//! The order is what makes a stop lose nothing that was acknowledged:
//! 1. The listeners stop accepting and finish their busy connections (within
//!    `shutdown_timeout_secs`): no new payload enters.
//! 2. The acknowledgement thread stops: no listener is left to wait for the WAL (an
//!    [`crate::Ingester`] still held fails instead of hanging).
//! 3. The UDP thread stops (it sends to the shards, so before them), then the ticker.
//! 4. Every shard handles what it was sent (routing events to the others) — *drain* — and only
//!    then every shard flushes its open epochs and stops: no shard stops while another still
//!    routes events to it.
//! 5. The substream runner stops once the pipeline, which offers it work, is gone (work still
//!    queued is left to the readers' fallback).
//! 6. The `SERVER` file and the published local secrets are removed: nothing serves any more.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use crate::auth::Auth;
use crate::error::{Error, Result};
use crate::listen::Listening;
use crate::pipeline::{Msg, Running};

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM: the `shutdown` future for
/// [`crate::run`] in `sluice serve`.
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

/// The stop flag, set once `shutdown` completes: every listener and tail stream watches it.
pub(crate) fn flag(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    stop_rx
}

/// Stops what is left once HTTP has stopped serving, in the order of the module doc; the
/// pipeline's last flush is done when this returns.
pub(crate) async fn finish(
    listening: Listening,
    pipeline: Running,
    auth: &Auth,
    server_file: &Path,
) -> Result<()> {
    if let Some(t) = listening.tcp_task {
        let _ = t.await;
    }
    let statsd_thread = match listening.statsd {
        Some(s) => {
            let _ = s.tcp_task.await;
            Some(s.thread)
        }
        None => None,
    };
    let Running {
        tx,
        acks,
        substreams,
        live,
        threads,
        ticker,
    } = pipeline;
    // Attached tails end with `shutdown` and resume from the store after a restart.
    let _ = tokio::task::spawn_blocking(move || live.stop()).await;
    // No listener is left to wait for an acknowledgement (an `Ingester` still held fails).
    let _ = tokio::task::spawn_blocking(move || acks.stop()).await;
    listening.udp_stop.store(true, Ordering::Relaxed);
    if let Some(t) = listening.udp_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    if let Some(t) = statsd_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    ticker.abort();
    // First every shard handles what it was sent (routing events to the others), then every
    // shard flushes and stops: no shard stops while another still routes events to it.
    let mut drained = Vec::new();
    tx.broadcast(|| {
        let (done, rx) = oneshot::channel();
        drained.push(rx);
        Msg::Drain(done)
    })
    .await;
    for d in drained {
        let _ = d.await;
    }
    let mut stopped = Vec::new();
    tx.broadcast(|| {
        let (done, rx) = oneshot::channel();
        stopped.push(rx);
        Msg::Shutdown(done)
    })
    .await;
    drop(tx);
    for s in stopped {
        let _ = s.await;
    }
    for t in threads {
        tokio::task::spawn_blocking(move || t.join())
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(|_| Error::Internal("a pipeline thread panicked".into()))?;
    }
    // The pipeline is gone: nothing offers work any more. Stop the runner (its last counters
    // written); work still queued is left to the readers' fallback.
    if let Ok(runner) = Arc::try_unwrap(substreams) {
        let _ = tokio::task::spawn_blocking(move || runner.stop()).await;
    }
    let _ = std::fs::remove_file(server_file);
    auth.unpublish_runtime();
    Ok(())
}
