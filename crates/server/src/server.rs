//! [`Server`], a server on a thread and runtime of its own (for tests, benches and programs
//! that embed one), and [`Ingester`], its in-process ingest handle.
//!
//! The sockets are bound on the caller's thread, so that a failure to bind is the caller's
//! error and the bound addresses (port 0 resolved) are known before the server runs; the rest
//! of the start ([`crate::run_with`]) runs on the server's thread, which says when it serves.

use std::net::SocketAddr;
use std::sync::Arc;

use sluice_store::Store;
use tokio::sync::oneshot;

use crate::error::{Error, IngestError, Result};
use crate::listen::Bound;
use crate::pipeline::{self, Running};
use crate::{metrics, Bytes, IngestSummary, ServerConfig};

/// A running server, started by [`Server::start`]. Dropping it shuts it down too (and waits).
#[derive(Debug)]
pub struct Server {
    /// The address the HTTP API is bound to (the real port when `http` asked for port 0).
    pub http_addr: Option<SocketAddr>,
    /// The TCP ingest address (the real port when `tcp` asked for port 0).
    pub tcp_addr: Option<SocketAddr>,
    /// The UDP ingest address (the real port when `udp` asked for port 0).
    pub udp_addr: Option<SocketAddr>,
    ingester: Ingester,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

/// Hands payloads to a running server's pipeline in the same process, as its HTTP and TCP
/// listeners do (parsed, logged, acknowledged once durable): for a program that embeds the
/// server, and for the bench that measures the pipeline without a load generator on its cores.
#[derive(Clone)]
pub struct Ingester {
    tx: pipeline::PipelineTx,
    acks: Arc<pipeline::AckWaiter>,
    metrics: metrics::SharedMetrics,
    live: Arc<crate::live::LiveHub>,
}

impl std::fmt::Debug for Ingester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ingester")
    }
}

impl Ingester {
    /// The handle on a started pipeline.
    pub(crate) fn of(pipeline: &Running, metrics: &metrics::SharedMetrics) -> Ingester {
        Ingester {
            tx: pipeline.tx.clone(),
            acks: pipeline.acks.clone(),
            metrics: metrics.clone(),
            live: pipeline.live.clone(),
        }
    }

    /// Ingests `payload` (any body `POST /v1/events` takes) and waits until its accepted events
    /// are durable: `Ok` is an acknowledgement (the summary says what was accepted and dropped),
    /// `Err` says why nothing may be acknowledged (backpressure, disk unavailable, stopping).
    /// Counted in `/metrics` under transport `inproc`; the limits are a POST body's
    /// (`max_body_bytes`, `max_event_bytes`, `max_events`, the memory budget).
    pub async fn ingest(&self, payload: Bytes) -> std::result::Result<IngestSummary, IngestError> {
        let rx = pipeline::submit(&self.tx, "inproc", payload, None).await?;
        pipeline::durable(rx, &self.acks, &self.metrics).await
    }
}

impl Ingester {
    /// The server's live hub: [`LiveHub::subscribe`](crate::LiveHub::subscribe) attaches a tail
    /// to the acknowledged payloads, from memory.
    pub fn live(&self) -> Arc<crate::live::LiveHub> {
        self.live.clone()
    }
}

impl Server {
    /// Validates `config`, binds its sockets, opens the embedded store in `data_dir`, replays
    /// the WAL, and returns once the server serves, on a thread of its own with a 2-worker
    /// tokio runtime. Any of these failing is the error returned here.
    pub fn start(config: ServerConfig) -> Result<Server> {
        Server::start_inner(config, None)
    }

    /// [`Server::start`] on a store of the caller's (instead of the embedded store in
    /// `data_dir`): another backend, or a wrapper such as `sluice_store::FaultyStore` for outage
    /// tests. The WAL and the spool still live under `data_dir` unless `wal_dir` / `spool_dir`
    /// say otherwise.
    pub fn start_with_store(config: ServerConfig, store: Arc<dyn Store>) -> Result<Server> {
        Server::start_inner(config, Some(store))
    }

    fn start_inner(config: ServerConfig, store: Option<Arc<dyn Store>>) -> Result<Server> {
        config.validate()?;
        let bound = Bound::bind(&config)?;
        let [http_addr, tcp_addr, udp_addr] = bound.addrs()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready, serving) = std::sync::mpsc::channel::<Ingester>();
        let thread = std::thread::Builder::new()
            .name("sluice-server".into())
            .spawn(move || -> Result<()> {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| Error::Io(format!("tokio runtime: {e}")))?;
                rt.block_on(async move {
                    let sockets = bound.into_sockets()?;
                    crate::run_with(config, sockets, store, Some(ready), async move {
                        let _ = stopped.await;
                    })
                    .await
                })
            })
            .map_err(|e| Error::Io(format!("starting the server thread: {e}")))?;
        let Ok(ingester) = serving.recv() else {
            // `ready` was dropped unsent: the start failed, and the thread says why.
            return match thread.join() {
                Ok(Err(e)) => Err(e),
                Ok(Ok(())) => Err(Error::Internal("the server stopped while starting".into())),
                Err(_) => Err(Error::Internal("the server thread panicked".into())),
            };
        };
        Ok(Server {
            ingester,
            http_addr,
            tcp_addr,
            udp_addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// A handle that ingests payloads in-process (see [`Ingester`]); valid until the server
    /// stops (then every call is an `Err`).
    pub fn ingester(&self) -> Ingester {
        self.ingester.clone()
    }

    /// Stops the server: flushes every open epoch, syncs the store, and waits for the end.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Error::Internal("the server thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}
