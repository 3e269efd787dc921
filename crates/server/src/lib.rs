//! The Sluice server: HTTP ingest, the collector pipeline (ingest → per-second aggregation →
//! blobs in the embedded store) and the read API, in one process.
//!
//! - [`ServerConfig`]: every setting with its default, loadable from TOML.
//! - [`Server::start`]: binds, opens the store, replays the WAL, then serves on a thread and
//!   runtime of its own; the [`Server`] tells the bound addresses, [`Server::shutdown`] stops it.
//! - [`run`]: the same on the caller's runtime, until a shutdown future completes (`sluice serve`).
//!
//! Inside: the pipeline shards ([`pipeline`], `pipeline_threads` of them) each own an
//! `Ingestor` and an `Aggregator` for the groups they own; handlers ([`http`]) hand payloads to
//! the least busy shard through bounded channels and wait for the summary; a ticker asks every
//! shard to flush due epochs every 100 ms; reads run on blocking threads and stream.
//! Accepted payloads are logged in a write-ahead log ([`sluice_collector::wal`]) and
//! acknowledged (HTTP, TCP) only once durable; the log is replayed at start. A TCP listener
//! ([`tcp`]) takes NDJSON lines and Sereal frames; a UDP listener ([`udp`]) takes one payload
//! per datagram, fire and forget. Connections are capped, timed out and closed on shutdown by
//! [`limits`] and [`http_server`]. The crate README lists the endpoints, the protocols and what
//! is missing.
//!
//! ```no_run
//! let cfg = sluice_server::ServerConfig { http: Some("127.0.0.1:0".parse().unwrap()), ..Default::default() };
//! let server = sluice_server::Server::start(cfg).unwrap();
//! println!("listening on {}", server.http_addr.unwrap());
//! server.shutdown().unwrap(); // flushes open epochs
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod disk;
mod error;
pub mod http;
pub mod http_server;
pub mod limits;
pub mod metrics;
pub mod pipeline;
pub mod tcp;
pub mod timing;
pub mod tls;
pub mod udp;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice_collector::aggregate::Aggregator;
use sluice_collector::Ingestor;
use sluice_store::{Retention, Store};
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_collector::exactly_once::{ExactlyOnce, ReplayReport};
use sluice_collector::wal::{Wal, WalConfig, WalError};
use tokio::sync::{mpsc, oneshot, watch};

pub use config::{
    ServerConfig, DEFAULT_GRACE_MS, DEFAULT_HTTP_PORT, DEFAULT_TCP_PORT, DEFAULT_UDP_PORT,
};
pub use error::{Error, Result};
use metrics::as_gauge;
pub use metrics::Metrics;
pub use pipeline::IngestSummary;

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
    url.open(sluice_store_cassandra::OpenMode::Serve, retention)
        .map_err(Error::Store)
}

/// The sockets a server serves, bound before it starts.
pub(crate) struct Sockets {
    http: Option<tokio::net::TcpListener>,
    tcp: Option<tokio::net::TcpListener>,
    udp: Option<UdpHandle>,
}

/// The sockets of `config`, bound (the one place that binds): plain listeners, so that they
/// can be bound on any thread and handed to the runtime that serves them ([`Bound::serve`]).
pub(crate) struct Bound {
    http: Option<std::net::TcpListener>,
    tcp: Option<std::net::TcpListener>,
    udp: Option<UdpHandle>,
}

impl Bound {
    /// Binds the HTTP, TCP and UDP addresses of `config` (those that are not off).
    fn bind(config: &ServerConfig) -> Result<Bound> {
        let bind = |addr: Option<SocketAddr>| -> Result<Option<std::net::TcpListener>> {
            let Some(addr) = addr else { return Ok(None) };
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| Error::Io(format!("binding {addr}: {e}")))?;
            l.set_nonblocking(true)
                .map_err(|e| Error::Io(format!("binding {addr}: {e}")))?;
            Ok(Some(l))
        };
        Ok(Bound {
            http: bind(config.http)?,
            tcp: bind(config.tcp)?,
            udp: bind_udp(config)?,
        })
    }

    /// The bound (HTTP, TCP, UDP) addresses.
    fn addrs(&self) -> Result<[Option<SocketAddr>; 3]> {
        let addr_of = |l: &Option<std::net::TcpListener>| -> Result<Option<SocketAddr>> {
            l.as_ref()
                .map(|l| l.local_addr().map_err(|e| Error::Io(e.to_string())))
                .transpose()
        };
        Ok([
            addr_of(&self.http)?,
            addr_of(&self.tcp)?,
            self.udp.as_ref().map(|u| u.addr),
        ])
    }

    /// The listeners, registered with the current tokio runtime.
    fn into_sockets(self) -> Result<Sockets> {
        let conv = |l: Option<std::net::TcpListener>| -> Result<Option<tokio::net::TcpListener>> {
            l.map(|l| tokio::net::TcpListener::from_std(l).map_err(|e| Error::Io(e.to_string())))
                .transpose()
        };
        Ok(Sockets {
            http: conv(self.http)?,
            tcp: conv(self.tcp)?,
            udp: self.udp,
        })
    }
}

/// The UDP thread, its socket bound, waiting for its context (the receiver is not `Send`, so
/// it is bound on the thread that uses it).
pub(crate) struct UdpHandle {
    addr: SocketAddr,
    ctx: std::sync::mpsc::Sender<udp::UdpContext>,
    thread: std::thread::JoinHandle<()>,
}

fn bind_udp(config: &ServerConfig) -> Result<Option<UdpHandle>> {
    let Some(addr) = config.udp else {
        return Ok(None);
    };
    let cfg = sluice_udp::UdpConfig {
        recv_buffer_bytes: config.udp_recv_buffer_bytes,
        ..sluice_udp::UdpConfig::default()
    };
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (ctx, ctx_rx) = std::sync::mpsc::channel::<udp::UdpContext>();
    let thread = std::thread::Builder::new()
        .name("sluice-udp".into())
        .spawn(move || {
            let receiver = match sluice_udp::UdpReceiver::bind(addr, cfg)
                .and_then(|r| r.local_addr().map(|a| (r, a)))
            {
                Ok((r, a)) => {
                    let _ = bound_tx.send(Ok(a));
                    r
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                    return;
                }
            };
            if let Ok(ctx) = ctx_rx.recv() {
                ctx.run(receiver);
            }
        })
        .map_err(|e| Error::Io(format!("starting the UDP thread: {e}")))?;
    match bound_rx.recv() {
        Ok(Ok(addr)) => Ok(Some(UdpHandle { addr, ctx, thread })),
        Ok(Err(e)) => Err(Error::Io(format!("binding UDP {addr}: {e}"))),
        Err(_) => Err(Error::Internal("the UDP thread died".into())),
    }
}

/// Runs the server until `shutdown` completes (e.g. `tokio::signal::ctrl_c()`), then stops
/// accepting, finishes in-flight requests, flushes every open epoch and syncs the store.
/// Binds `config.http`, `config.tcp` and `config.udp` itself.
pub async fn run(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let sockets = Bound::bind(&config)?.into_sockets()?;
    run_with(config, sockets, None, None, shutdown).await
}

/// Serves `sockets` until `shutdown` completes; `ready` is told once the store is open, the WAL
/// replayed and the listeners about to accept (an error before that drops it unsent).
async fn run_with(
    config: ServerConfig,
    sockets: Sockets,
    store: Option<Arc<dyn Store>>,
    ready: Option<std::sync::mpsc::Sender<Ingester>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.validate()?;
    let bound = [
        sockets.http.as_ref().and_then(|l| l.local_addr().ok()),
        sockets.tcp.as_ref().and_then(|l| l.local_addr().ok()),
        sockets.udp.as_ref().map(|u| u.addr),
    ];
    let metrics = Arc::new(Metrics::new());
    // Fit the connection caps to the descriptor limit before anything is opened.
    let (caps, caps_line) = limits::fit_caps(&config, limits::nofile_limit())?;
    eprintln!("sluice-server: {caps_line}");
    if sockets.http.is_some() {
        metrics
            .max_connections
            .with_label_values(&["http"])
            .set(caps.http as i64);
    }
    if sockets.tcp.is_some() {
        metrics
            .max_connections
            .with_label_values(&["tcp"])
            .set(caps.tcp as i64);
    }
    let drain = Duration::from_secs(config.shutdown_timeout_secs);
    let ips: Vec<_> = bound.iter().flatten().map(|a| a.ip()).collect();
    let tls = tls::Tls::start(&config, &ips, metrics.clone())?;
    let inner = match store {
        Some(s) => s,
        None => open_store(&config)?,
    };
    // Every store write (the aggregator's, the pipeline's and the UDP thread's) is timed.
    let store: Arc<dyn Store> = Arc::new(timing::TimedStore {
        inner,
        metrics: metrics.clone(),
    });
    let clock = pipeline::FlushClock {
        grace_ms: i64::try_from(config.grace().as_millis()).unwrap_or(i64::MAX),
    };
    // One aggregator per pipeline thread, each with its own spool; more threads than asked
    // when an earlier run with more left spooled batches (they are replayed first).
    let spool_base = config.spool_path();
    let threads = config.pipeline_threads();
    let shard_count = threads.max(pipeline::shards::spooled_shards(&spool_base) + 1);
    if shard_count > threads {
        eprintln!(
            "sluice-server: {shard_count} pipeline threads (not {threads}): spools of an earlier run with more threads are replayed"
        );
    }
    let ingestor =
        Ingestor::new(config.ingest_config()).map_err(|e| Error::Config(e.to_string()))?;
    let mut aggregators = Vec::with_capacity(shard_count);
    for i in 0..shard_count {
        let mut agg_cfg = config.aggregator_config()?;
        if let Some(spool) = &mut agg_cfg.spool {
            spool.dir = pipeline::shards::spool_dir(&spool_base, i);
            spool.max_bytes = (spool.max_bytes / shard_count as u64).max(1);
        }
        // Kept encoders are memory beside the budget: half of it at most, over all shards.
        agg_cfg.max_spare_bytes = config.max_pending_bytes / 2 / shard_count as u64;
        aggregators.push(
            Aggregator::new(agg_cfg, store.clone()).map_err(|e| Error::Config(e.to_string()))?,
        );
    }

    // Open the WAL and replay it into the aggregators before serving anything (the spools, if
    // an earlier run left some, are replayed by the aggregators' first flush).
    let (ingestor, aggregators, wal, replayed) = {
        let (dir, wal_cfg, salvage) = (config.wal_path(), config.wal_config()?, config.salvage_wal);
        tokio::task::spawn_blocking(move || {
            replay_wal(&dir, wal_cfg, salvage, ingestor, aggregators, clock)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??
    };
    let sum = |f: &dyn Fn(&Aggregator) -> u64| aggregators.iter().map(f).sum::<u64>();
    {
        let m = &metrics;
        m.wal_replayed_records.set(as_gauge(replayed.records));
        m.wal_replay_skipped_events.set(as_gauge(replayed.skipped));
        m.spool_max_bytes.set(as_gauge(config.spool_max_bytes));
        m.spool_batches
            .set(as_gauge(sum(&|a| a.spooled_batches() as u64)));
        m.spool_bytes.set(as_gauge(sum(&|a| a.spooled_bytes())));
        m.spool_events.set(as_gauge(sum(&|a| a.spooled_events())));
        m.pending_events.set(as_gauge(sum(&|a| a.pending_events())));
        m.pending_bytes.set(as_gauge(sum(&|a| a.pending_bytes())));
        m.max_pending_bytes.set(as_gauge(config.max_pending_bytes));
        m.wal_checkpointed_seq.set(as_gauge(wal.checkpointed()));
    }
    let mut watched = vec![
        config.data_dir.clone(),
        config.wal_path(),
        config.spool_path(),
    ];
    watched.dedup();
    let mut disk = disk::DiskGuard::new(watched, config.min_free_bytes);
    eprintln!("sluice-server: {}", disk.reserve_line());
    disk.refresh(wal.failing());
    metrics.set_unavailable(disk.why());
    metrics.disk_free_bytes.set(as_gauge(disk.free));
    metrics.min_free_bytes.set(as_gauge(disk.reserve));

    // Who may use which route (docs/security.md); this start's local secret, for the CLI of
    // the server's user, in DATA/admin.secret.
    let auth = Arc::new(
        auth::Auth::start(store.clone(), &config.data_dir, &config, metrics.clone())
            .map_err(Error::Io)?,
    );
    {
        // Tokens made or revoked by another server sharing the store: read off the request path
        // (a store read may wait out a timeout).
        let auth = auth.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sluice_auth::REFRESH_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let a = auth.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(e) = a.tokens.refresh() {
                        eprintln!("sluice-server: {e} (the tokens known stay in force)");
                    }
                })
                .await;
            }
        });
    }
    if config.insecure_no_auth && config.public_listener().is_some() && !config.auth {
        eprintln!(
            "sluice-server: WARNING: --insecure-no-auth: serving beyond loopback without auth; anyone who reaches {} can read every event and send any",
            config.public_listener().map_or_else(String::new, |a| a.to_string())
        );
    }

    // Substreams run on their own threads, fed by the pipeline's flush reports.
    let substreams = Arc::new(sluice_substreams::Runner::start(
        store.clone(),
        config.substream_config(),
    ));

    // The shards: their queues (payloads, ticks) and the channels of routed events.
    let disk = Arc::new(std::sync::Mutex::new(disk));
    let (route_txs, route_rxs): (Vec<_>, Vec<_>) =
        (0..shard_count).map(|_| mpsc::unbounded_channel()).unzip();
    let shards = Arc::new(pipeline::shards::Shards::new(route_txs));
    let mut txs = Vec::with_capacity(shard_count);
    let mut pipe_threads = Vec::with_capacity(shard_count);
    let mut pipes = Vec::with_capacity(shard_count);
    let mut replay_ingestor = Some(ingestor);
    for (i, mut aggregator) in aggregators.into_iter().enumerate() {
        // Done notes of stored batches go to the WAL before their index entries.
        let exactly_once = ExactlyOnce::new(wal.clone());
        aggregator.set_note_log(pipeline::exactly_once::note_log(
            &exactly_once,
            metrics.clone(),
        ));
        let ingestor = match replay_ingestor.take() {
            Some(ingestor) => ingestor,
            None => {
                Ingestor::new(config.ingest_config()).map_err(|e| Error::Config(e.to_string()))?
            }
        };
        let pipe = pipeline::Pipeline {
            shard: i,
            shards: shards.clone(),
            flush_wanted: false,
            turn_since: None,
            ingestor,
            aggregator,
            store: store.clone(),
            metrics: metrics.clone(),
            expire_every: config.expire_interval_secs as i64,
            wal: wal.clone(),
            dc: config.dc.clone(),
            max_past_secs: config.ingest_config().max_past_secs,
            max_future_secs: config.ingest_config().max_future_secs,
            pending_drops: Default::default(),
            clock,
            exactly_once,
            max_pending_bytes: config.max_pending_bytes,
            ingest_counters: Default::default(),
            disk: disk.clone(),
            substreams: substreams.clone(),
        };
        // Published before any shard runs: no checkpoint passes a replayed record.
        pipe.publish_pending();
        pipes.push(pipe);
    }
    for (pipe, routed) in pipes.into_iter().zip(route_rxs) {
        let (tx, rx) = mpsc::channel(config.queue);
        txs.push(tx);
        let t = std::thread::Builder::new()
            .name(format!("sluice-pipeline-{}", pipe.shard))
            .spawn(move || pipe.run(rx, routed))
            .map_err(|e| Error::Io(format!("starting a pipeline thread: {e}")))?;
        pipe_threads.push(t);
    }
    let tx = pipeline::PipelineTx::new(txs, shards);
    // Acknowledgements wait for the WAL on a thread of their own.
    let acks = Arc::new(
        pipeline::AckWaiter::start(wal.clone())
            .map_err(|e| Error::Io(format!("starting the acks thread: {e}")))?,
    );

    let ticker = {
        let tx = tx.clone();
        tokio::spawn(async move {
            // A second is stored within a tenth of a second of its grace period ending (a tick
            // with nothing due costs a map lookup).
            let mut iv = tokio::time::interval(Duration::from_millis(100));
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                iv.tick().await;
                if !tx.broadcast(|| pipeline::Msg::Tick).await {
                    return;
                }
            }
        })
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });

    if let Some(tls) = &tls {
        tls.watch(stop_rx.clone());
    }
    let tcp_task = sockets.tcp.map(|listener| {
        let server = tcp::TcpServer {
            tx: tx.clone(),
            acks: acks.clone(),
            metrics: metrics.clone(),
            max_message: config.max_body_bytes,
            idle_timeout: Duration::from_secs(config.tcp_idle_timeout_secs),
            read_timeout: Duration::from_secs(config.request_timeout_secs),
            limiter: limits::Limiter::new("tcp", caps.tcp.max(1), metrics.clone()),
            drain,
            auth: auth.clone(),
            tls: tls.as_ref().map(|t| t.tcp.clone()),
        };
        tokio::spawn(server.serve(listener, stop_rx.clone()))
    });

    let udp_stop = Arc::new(AtomicBool::new(false));
    let udp_thread = match sockets.udp {
        Some(handle) => {
            let ctx = udp::UdpContext {
                tx: tx.clone(),
                store: store.clone(),
                metrics: metrics.clone(),
                ingest: config.ingest_config(),
                dc: config.dc.clone(),
                stop: udp_stop.clone(),
                allow: config.udp_allow_nets()?,
            };
            let _ = handle.ctx.send(ctx);
            Some(handle.thread)
        }
        None => None,
    };

    let server_file = config.data_dir.join(SERVER_FILE);
    if let Some(addr) = sockets.http.as_ref().and_then(|l| l.local_addr().ok()) {
        let scheme = if tls.is_some() { "https" } else { "http" };
        if let Err(e) = std::fs::write(&server_file, format!("{scheme}://{addr}\n")) {
            eprintln!("sluice-server: writing {}: {e}", server_file.display());
        }
        auth.publish_runtime(addr);
    }
    // Said only now: the store is open (its lock held) and the WAL replayed, so a server that
    // cannot start never claims to serve.
    let show = |a: Option<SocketAddr>| a.map_or("off".to_owned(), |a| a.to_string());
    eprintln!(
        "sluice-server: serving from {} (http {}, tcp {}, udp {})",
        config
            .store
            .clone()
            .unwrap_or_else(|| config.data_dir.display().to_string()),
        show(bound[0]),
        show(bound[1]),
        show(bound[2])
    );
    if let Some(ready) = ready {
        let _ = ready.send(Ingester {
            tx: tx.clone(),
            acks: acks.clone(),
            metrics: metrics.clone(),
        });
    }
    match sockets.http {
        Some(listener) => {
            let state = http::AppState {
                tx: tx.clone(),
                store,
                metrics: metrics.clone(),
                timeout: Duration::from_secs(config.request_timeout_secs),
                acks: acks.clone(),
                dc: config.dc.clone(),
                stop: stop_rx.clone(),
                tail_streams: Arc::new(http::tail::TailStreams::new(caps.tail.max(1))),
                substreams: substreams.clone(),
                auth: auth.clone(),
                python_substreams: config.python_substreams,
            };
            let router = http::router(state, config.max_body_bytes);
            http_server::serve(
                listener,
                router,
                &config,
                caps.http,
                metrics.clone(),
                stop_rx.clone(),
                drain,
                tls.as_ref().map(|t| t.http.clone()),
            )
            .await;
        }
        None => limits::wait_stop(stop_rx.clone()).await,
    }

    if let Some(t) = tcp_task {
        let _ = t.await;
    }
    // No listener is left to wait for an acknowledgement (an `Ingester` still held fails).
    {
        let acks = acks.clone();
        let _ = tokio::task::spawn_blocking(move || acks.stop()).await;
    }
    udp_stop.store(true, Ordering::Relaxed);
    if let Some(t) = udp_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    ticker.abort();
    // First every shard handles what it was sent (routing events to the others), then every
    // shard flushes and stops: no shard stops while another still routes events to it.
    let mut drained = Vec::new();
    tx.broadcast(|| {
        let (done, rx) = oneshot::channel();
        drained.push(rx);
        pipeline::Msg::Drain(done)
    })
    .await;
    for d in drained {
        let _ = d.await;
    }
    let mut stopped = Vec::new();
    tx.broadcast(|| {
        let (done, rx) = oneshot::channel();
        stopped.push(rx);
        pipeline::Msg::Shutdown(done)
    })
    .await;
    drop(tx);
    for s in stopped {
        let _ = s.await;
    }
    for t in pipe_threads {
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
    let _ = std::fs::remove_file(&server_file);
    auth.unpublish_runtime();
    Ok(())
}

/// Opens the WAL in `dir` and replays it into `ingestor` and `aggregator` (blocking), saying on
/// stderr what it skipped or could not prove. A damaged record stops the start unless `salvage`.
fn replay_wal(
    dir: &Path,
    wal_cfg: WalConfig,
    salvage: bool,
    mut ingestor: Ingestor,
    mut aggregators: Vec<Aggregator>,
    clock: pipeline::FlushClock,
) -> Result<(Ingestor, Vec<Aggregator>, Arc<Wal>, ReplayReport)> {
    // The records are read again segment by segment as they are replayed: a long log
    // (a future-dated payload holds the checkpoint back) never sits in memory whole.
    let (wal, records, opened) = Wal::open_replay(dir, wal_cfg, salvage).map_err(|e| match e {
        WalError::Corrupted { .. } => Error::Io(format!(
            "{e}\nThe server does not start past damaged WAL records. To start anyway, run with \
             --salvage-wal (TOML: salvage_wal = true): each damaged WAL file is first copied to \
             {}/damaged/, then the records after the damage in it are skipped (logged).",
            dir.display()
        )),
        e => Error::Io(e.to_string()),
    })?;
    for w in &opened.warnings {
        eprintln!("sluice-server: WAL open: {w}");
    }
    let n = aggregators.len();
    let report = sluice_collector::exactly_once::replay_log_routed(
        &records,
        &mut ingestor,
        &mut aggregators,
        |e| pipeline::shards::shard_of(&e.dc, &e.type_, &e.subtype, n),
        |now| clock.at_end_of(now),
    )
    .map_err(|e| Error::Io(format!("WAL replay: {e}")))?;
    for bad in &report.bad_notes {
        eprintln!("sluice-server: WAL replay: {bad} (its events are replayed: at least once)");
    }
    for e in &report.counts_errors {
        eprintln!(
            "sluice-server: WAL replay: {e} (that batch's completeness counts may be missing)"
        );
    }
    sluice_collector::failpoint::hit("replay.done");
    if report.unproven > 0 {
        eprintln!(
            "sluice-server: WAL replay: {} done notes without their index entries (a crash before indexing): their events are replayed",
            report.unproven
        );
    }
    Ok((ingestor, aggregators, Arc::new(wal), report))
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
}

impl std::fmt::Debug for Ingester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ingester")
    }
}

impl Ingester {
    /// Ingests `payload` (any body `POST /v1/events` takes) and waits until its accepted events
    /// are durable: `Ok` is an acknowledgement (the summary says what was accepted and dropped),
    /// `Err` says why nothing may be acknowledged (backpressure, disk unavailable, stopping).
    /// Counted in `/metrics` under transport `inproc`; the limits are a POST body's
    /// (`max_body_bytes`, `max_event_bytes`, `max_events`, the memory budget).
    pub async fn ingest(&self, payload: Bytes) -> std::result::Result<IngestSummary, String> {
        let rx = pipeline::submit(&self.tx, "inproc", payload, None).await?;
        pipeline::durable(rx, &self.acks, &self.metrics).await
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
                    run_with(config, sockets, store, Some(ready), async move {
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
