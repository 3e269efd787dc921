//! The Sluice server: HTTP ingest, the collector pipeline (ingest → per-second aggregation →
//! blobs in the embedded store) and the read API, in one process.
//!
//! - [`ServerConfig`]: every setting with its default, loadable from TOML.
//! - [`run`]: runs until a shutdown future completes, then flushes every open epoch.
//! - [`spawn`]: runs on its own thread and runtime; [`RunningServer`] tells the bound address
//!   and shuts down.
//!
//! Inside: the pipeline thread ([`pipeline`]) owns the `Ingestor` and the `Aggregator`;
//! handlers ([`http`]) hand it payloads through a bounded channel and wait for the summary; a
//! ticker asks it to flush due epochs every second; reads run on blocking threads and stream.
//! The crate README lists the endpoints, the formats and what is missing (notably: an ingest
//! acknowledgement is not yet durable).
//!
//! ```no_run
//! let cfg = sluice_server::ServerConfig { http: Some("127.0.0.1:0".parse().unwrap()), ..Default::default() };
//! let server = sluice_server::spawn(cfg).unwrap();
//! println!("listening on {}", server.http_addr.unwrap());
//! server.shutdown().unwrap(); // flushes open epochs
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod http;
pub mod pipeline;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_collector::aggregate::Aggregator;
use sluice_collector::Ingestor;
use sluice_store::{EmbeddedOptions, EmbeddedStore, Retention, Store};
use tokio::sync::{mpsc, oneshot};

pub use config::{ServerConfig, DEFAULT_HTTP_PORT, DEFAULT_TCP_PORT, DEFAULT_UDP_PORT};
pub use pipeline::{IngestSummary, Metrics};

/// Why the server could not start or stopped badly.
#[derive(Debug)]
pub enum Error {
    /// A setting is invalid.
    Config(String),
    /// A socket or file could not be used.
    Io(String),
    /// The store could not be opened.
    Store(sluice_store::StoreError),
    /// The server's thread or pipeline died.
    Internal(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "configuration: {m}"),
            Error::Io(m) => write!(f, "{m}"),
            Error::Store(e) => write!(f, "store: {e}"),
            Error::Internal(m) => write!(f, "internal: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens the embedded store of `config`.
pub fn open_store(config: &ServerConfig) -> Result<Arc<dyn Store>> {
    let opts = EmbeddedOptions {
        retention: Retention::new(config.retention_secs()),
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open_with(&config.data_dir, opts).map_err(Error::Store)?;
    Ok(Arc::new(store))
}

/// Runs the server until `shutdown` completes (e.g. `tokio::signal::ctrl_c()`), then stops
/// accepting, finishes in-flight requests, flushes every open epoch and syncs the store.
/// Binds `config.http` itself.
pub async fn run(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = match config.http {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| Error::Io(format!("binding {addr}: {e}")))?;
            Some(l)
        }
        None => None,
    };
    run_with(config, listener, shutdown).await
}

async fn run_with(
    config: ServerConfig,
    listener: Option<tokio::net::TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let store = open_store(&config)?;
    let ingestor =
        Ingestor::new(config.ingest_config()).map_err(|e| Error::Config(e.to_string()))?;
    let aggregator = Aggregator::new(config.aggregator_config()?, store.clone())
        .map_err(|e| Error::Config(e.to_string()))?;
    let metrics = Arc::new(Mutex::new(Metrics::default()));
    let (tx, rx) = mpsc::channel(config.queue);
    let pipe = pipeline::Pipeline {
        ingestor,
        aggregator,
        store: store.clone(),
        metrics: metrics.clone(),
        expire_every: config.expire_interval_secs as i64,
    };
    let pipe_thread = std::thread::Builder::new()
        .name("sluice-pipeline".into())
        .spawn(move || pipe.run(rx))
        .map_err(|e| Error::Io(format!("starting the pipeline thread: {e}")))?;

    let ticker = {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_secs(1));
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                iv.tick().await;
                if tx.send(pipeline::Msg::Tick).await.is_err() {
                    return;
                }
            }
        })
    };

    let result = match listener {
        Some(listener) => {
            let state = http::AppState {
                tx: tx.clone(),
                store,
                metrics,
                timeout: Duration::from_secs(config.request_timeout_secs),
            };
            let app = http::router(state, config.max_body_bytes);
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(|e| Error::Io(format!("HTTP server: {e}")))
        }
        None => {
            shutdown.await;
            Ok(())
        }
    };

    ticker.abort();
    let (done_tx, done_rx) = oneshot::channel();
    let sent = tx.send(pipeline::Msg::Shutdown(done_tx)).await.is_ok();
    drop(tx);
    if sent {
        let _ = done_rx.await;
    }
    tokio::task::spawn_blocking(move || pipe_thread.join())
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|_| Error::Internal("the pipeline thread panicked".into()))?;
    result
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM: the `shutdown` future for [`run`] in
/// `sluice serve`.
pub async fn shutdown_signal() {
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

/// A server started by [`spawn`]. Dropping it shuts it down too (and waits).
#[derive(Debug)]
pub struct RunningServer {
    /// The address the HTTP API is bound to (the real port when `http` asked for port 0).
    pub http_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl RunningServer {
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

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Starts the server on a thread of its own with a 2-worker tokio runtime, returns once the
/// HTTP socket is bound (so [`RunningServer::http_addr`] is usable at once). Store or config
/// errors found after binding are returned by [`RunningServer::shutdown`]; the config is
/// validated here first.
pub fn spawn(config: ServerConfig) -> Result<RunningServer> {
    config.validate()?;
    let listener = match config.http {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| Error::Io(format!("binding {addr}: {e}")))?;
            l.set_nonblocking(true)
                .map_err(|e| Error::Io(e.to_string()))?;
            Some(l)
        }
        None => None,
    };
    let http_addr = match &listener {
        Some(l) => Some(l.local_addr().map_err(|e| Error::Io(e.to_string()))?),
        None => None,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("sluice-server".into())
        .spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| Error::Io(format!("tokio runtime: {e}")))?;
            rt.block_on(async move {
                let listener = match listener {
                    Some(l) => Some(
                        tokio::net::TcpListener::from_std(l)
                            .map_err(|e| Error::Io(e.to_string()))?,
                    ),
                    None => None,
                };
                run_with(config, listener, async move {
                    let _ = stopped.await;
                })
                .await
            })
        })
        .map_err(|e| Error::Io(format!("starting the server thread: {e}")))?;
    Ok(RunningServer {
        http_addr,
        stop: Some(stop),
        thread: Some(thread),
    })
}
