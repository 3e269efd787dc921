//! The Sluice server: HTTP ingest, the collector pipeline (ingest → per-second aggregation →
//! blobs in the store) and the read API, in one process.
//!
//! - [`ServerConfig`]: every setting with its default, loadable from TOML.
//! - [`Server::start`]: binds, opens the store, replays the WAL, then serves on a thread and
//!   runtime of its own; the [`Server`] tells the bound addresses, [`Server::shutdown`] stops it.
//! - [`run`]: the same on the caller's runtime, until a shutdown future completes (`sluice serve`).
//!
//! The modules, in the order a start uses them:
//! - `listen`: the sockets bound before anything else, the connection caps ([`limits`]), TLS
//!   ([`tls`]), and the listeners: HTTP ([`http_server`], routes in [`http`]), TCP ingest
//!   ([`tcp`]: NDJSON lines and Sereal frames), UDP ingest ([`udp`]: a payload per datagram,
//!   fire and forget).
//! - [`pipeline`]: `pipeline_threads` shards, each owning an `Ingestor` and an `Aggregator` for
//!   the groups it owns; handlers hand payloads to the least busy shard through bounded
//!   channels and wait for the summary; a ticker asks every shard to flush due epochs every
//!   100 ms. Accepted payloads are logged in a write-ahead log ([`sluice_collector::wal`]) and
//!   acknowledged (HTTP, TCP) only once durable; the log is replayed at start.
//! - [`auth`]: who may use which route; [`disk`]: the free-space reserve; [`metrics`]: `/metrics`;
//!   [`timing`]: store writes timed.
//! - [`shutdown`]: the stop sequence (listeners drained, then the shards flushed).
//!
//! The crate README lists the endpoints, the protocols and what is missing.
//!
//! ```no_run
//! let cfg = sluice_server::ServerConfig { http: Some("127.0.0.1:0".parse().unwrap()), ..Default::default() };
//! let server = sluice_server::Server::start(cfg).unwrap();
//! println!("listening on {}", server.http_addr.unwrap());
//! server.shutdown().unwrap(); // flushes open epochs
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod alerts;
pub mod auth;
pub mod columns;
pub mod config;
mod console;
pub mod disk;
mod error;
pub mod exports;
pub mod http;
mod listen;
pub mod live;
pub mod metrics;
pub mod pipeline;
pub mod rollups;
mod server;
pub mod shutdown;
pub mod timing;

use std::future::Future;
use std::sync::Arc;

use sluice_store::{Retention, Store};

pub use config::{
    ServerConfig, DEFAULT_GRACE_MS, DEFAULT_HTTP_PORT, DEFAULT_TCP_PORT, DEFAULT_UDP_PORT,
};
pub use error::{Error, IngestError, Result};
pub use listen::{http_server, limits, tcp, tls, udp};
pub use live::{LiveEnded, LiveHub, LiveSubscription};
pub use metrics::Metrics;
pub use pipeline::IngestSummary;
pub use server::{Ingester, Server};
pub use shutdown::signal as shutdown_signal;

/// The payload type [`Ingester::ingest`] takes (cheap to clone: shared bytes).
pub use axum::body::Bytes;

/// The file in the data directory naming the running server's HTTP address (owned by the store
/// crate, which owns the data directory's layout).
pub use sluice_store::SERVER_FILE;

/// Opens the store of `config` ([`ServerConfig::store`]): the embedded store, or a Cassandra
/// keyspace (connected lazily: a cluster that is down at start makes writes spool, not the
/// start fail).
pub fn open_store(config: &ServerConfig) -> Result<Arc<dyn Store>> {
    let retention = Retention::new(config.retention_secs());
    let url = config.store_url()?;
    if let sluice_store_cassandra::StoreUrl::Cassandra(_) = url {
        // The WAL, the spool and the SERVER file still live in the data directory.
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| Error::Io(format!("creating {}: {e}", config.data_dir.display())))?;
    }
    let types = config.blob_retention()?;
    url.open_with_types(sluice_store_cassandra::OpenMode::Serve, retention, types)
        .map_err(Error::Store)
}

/// Runs the server until `shutdown` completes (e.g. `tokio::signal::ctrl_c()`), then stops
/// accepting, finishes in-flight requests, flushes every open epoch and syncs the store.
/// Binds `config.http`, `config.tcp` and `config.udp` itself.
pub async fn run(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let sockets = listen::Bound::bind(&config)?.into_sockets()?;
    run_with(config, sockets, None, None, shutdown).await
}

/// Serves `sockets` until `shutdown` completes; `ready` is told once the store is open, the WAL
/// replayed and the listeners about to accept (an error before that drops it unsent).
async fn run_with(
    config: ServerConfig,
    sockets: listen::Sockets,
    store: Option<Arc<dyn Store>>,
    ready: Option<std::sync::mpsc::Sender<Ingester>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let metrics = Arc::new(Metrics::new());
    // The caps are fitted to the descriptor limit before anything is opened.
    let caps = sockets.fit_caps(&config, &metrics)?;
    let tls = tls::Tls::start(&config, &sockets.ips(), metrics.clone())?;
    let store = match store {
        Some(s) => s,
        None => open_store(&config)?,
    };
    // Every store write (the aggregators', the shards' and the UDP thread's) is timed.
    let store = timing::TimedStore::wrap(store, metrics.clone());
    let auth = auth::Auth::start_refreshing(store.clone(), &config, metrics.clone())?;
    let pipeline = pipeline::Pipeline::start(&config, store.clone(), metrics.clone()).await?;
    let columns = columns::Columns::start(&config, store.clone(), metrics.clone())?;
    let exports = exports::Exports::start(&config.exports_all()?, store.clone(), &metrics)?;
    let http_url = sockets.addrs()[0].map(|a| {
        let scheme = if tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{a}")
    });
    let alerts = {
        let (config, store) = (config.clone(), store.clone());
        tokio::task::spawn_blocking(move || alerts::Alerts::start(&config, store, http_url))
            .await
            .map_err(|e| Error::Internal(e.to_string()))??
    };
    *metrics.alerts.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((alerts.engine.stats.clone(), alerts.notifier.clone()));
    let stop = shutdown::flag(shutdown);
    let services = listen::Services {
        config: &config,
        pipeline: &pipeline,
        store: &store,
        metrics: &metrics,
        auth: &auth,
        tls: &tls,
        caps,
        stop: &stop,
        columns: columns.as_ref().map(|c| c.view.clone()),
        alerts: Some(alerts.engine.clone()),
    };
    let mut listening = sockets.start(&services)?;
    let server_file = listening.announce(&services);
    if let Some(ready) = ready {
        let _ = ready.send(Ingester::of(&pipeline, &metrics));
    }
    listening.serve_http(&services).await;
    if let Some(c) = columns {
        tokio::task::spawn_blocking(move || c.stop()).await.ok();
    }
    tokio::task::spawn_blocking(move || exports.stop())
        .await
        .ok();
    metrics
        .alerts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    tokio::task::spawn_blocking(move || alerts.stop())
        .await
        .ok();
    drop(store);
    shutdown::finish(listening, pipeline, &auth, &server_file).await
}

/// The older name of [`Server`].
pub type RunningServer = Server;

/// The older name of [`Server::start`].
pub fn spawn(config: ServerConfig) -> Result<Server> {
    Server::start(config)
}

/// The older name of [`Server::start_with_store`].
pub fn spawn_with_store(config: ServerConfig, store: Arc<dyn Store>) -> Result<Server> {
    Server::start_with_store(config, store)
}
