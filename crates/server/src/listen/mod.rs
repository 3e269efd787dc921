//! The listeners and their limits: the sockets bound before a start ([`Bound`], [`Sockets`]),
//! the connection caps fitted to the descriptor limit ([`limits`]), TLS ([`tls`]), the HTTP
//! server under axum's router ([`http_server`]), TCP ingest ([`tcp`]) and UDP ingest ([`udp`]).
//!
//! Binding is apart from serving so that [`crate::Server::start`] can tell the bound addresses
//! (port 0 resolved) before the store is open: sockets are bound on the caller's thread and
//! handed to the runtime that serves them. [`Sockets::start`] starts TCP and UDP; HTTP is served
//! last, on the task that runs the server, until the stop flag is set ([`Listening::serve_http`]).

pub mod http_server;
pub mod limits;
pub mod statsd;
pub mod tcp;
pub mod tls;
pub mod udp;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use sluice_store::Store;
use tokio::sync::watch;

use crate::auth::Auth;
use crate::config::ServerConfig;
use crate::error::{Error, Result};
use crate::metrics::SharedMetrics;
use crate::pipeline::Running;
use limits::Caps;
use tls::Tls;

/// The sockets of `config`, bound (the one place that binds): plain listeners, so that they
/// can be bound on any thread and handed to the runtime that serves them ([`Bound::into_sockets`]).
pub(crate) struct Bound {
    http: Option<std::net::TcpListener>,
    tcp: Option<std::net::TcpListener>,
    udp: Option<UdpHandle>,
    statsd: Option<statsd::StatsdBound>,
}

/// The sockets a server serves, bound before it starts, registered with its runtime.
pub(crate) struct Sockets {
    http: Option<tokio::net::TcpListener>,
    tcp: Option<tokio::net::TcpListener>,
    udp: Option<UdpHandle>,
    statsd: Option<statsd::StatsdBound>,
}

/// The UDP thread, its socket bound, waiting for its context (the receiver is not `Send`, so
/// it is bound on the thread that uses it).
pub(crate) struct UdpHandle {
    addr: SocketAddr,
    ctx: std::sync::mpsc::Sender<udp::UdpContext>,
    thread: std::thread::JoinHandle<()>,
}

/// What the listeners serve with, borrowed from the start that built it.
pub(crate) struct Services<'a> {
    /// The settings.
    pub config: &'a ServerConfig,
    /// Where payloads go.
    pub pipeline: &'a Running,
    /// The store reads come from (timed).
    pub store: &'a Arc<dyn Store>,
    /// The server's metrics.
    pub metrics: &'a SharedMetrics,
    /// Who may use which route.
    pub auth: &'a Arc<Auth>,
    /// TLS, when on.
    pub tls: &'a Option<Arc<Tls>>,
    /// The connection caps in force.
    pub caps: Caps,
    /// Set when the server shuts down.
    pub stop: &'a watch::Receiver<bool>,
    /// The column files readers use, when the history tier is on.
    pub columns: Option<Arc<sluice_columns::view::ColumnsView>>,
    /// The alert engine.
    pub alerts: Option<Arc<sluice_alerts::Engine>>,
}

/// The listeners once started: HTTP still to serve, TCP and UDP running.
pub(crate) struct Listening {
    /// The HTTP listener, taken by [`Listening::serve_http`].
    http: Option<tokio::net::TcpListener>,
    /// The TCP listener's task (it ends once the stop flag is set and its connections drained).
    pub tcp_task: Option<tokio::task::JoinHandle<()>>,
    /// Tells the UDP thread to stop (it polls this flag).
    pub udp_stop: Arc<AtomicBool>,
    /// The UDP thread.
    pub udp_thread: Option<std::thread::JoinHandle<()>>,
    /// The statsd listener (its UDP thread stops with `udp_stop`).
    pub statsd: Option<statsd::StatsdRunning>,
    /// The bound statsd address (UDP and TCP).
    pub statsd_addr: Option<SocketAddr>,
    /// The bound (HTTP, TCP, UDP) addresses.
    addrs: [Option<SocketAddr>; 3],
}

impl Bound {
    /// Binds the HTTP, TCP and UDP addresses of `config` (those that are not off).
    pub(crate) fn bind(config: &ServerConfig) -> Result<Bound> {
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
            statsd: statsd::bind(config)?,
        })
    }

    /// The bound (HTTP, TCP, UDP) addresses.
    pub(crate) fn addrs(&self) -> Result<[Option<SocketAddr>; 3]> {
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
    pub(crate) fn into_sockets(self) -> Result<Sockets> {
        let conv = |l: Option<std::net::TcpListener>| -> Result<Option<tokio::net::TcpListener>> {
            l.map(|l| tokio::net::TcpListener::from_std(l).map_err(|e| Error::Io(e.to_string())))
                .transpose()
        };
        Ok(Sockets {
            http: conv(self.http)?,
            tcp: conv(self.tcp)?,
            udp: self.udp,
            statsd: self.statsd,
        })
    }
}

/// Binds the UDP address of `config` on a thread of its own, which then waits for its context.
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

impl Sockets {
    /// The bound (HTTP, TCP, UDP) addresses.
    pub(crate) fn addrs(&self) -> [Option<SocketAddr>; 3] {
        [
            self.http.as_ref().and_then(|l| l.local_addr().ok()),
            self.tcp.as_ref().and_then(|l| l.local_addr().ok()),
            self.udp.as_ref().map(|u| u.addr),
        ]
    }

    /// The bound IP addresses (named by a self-signed certificate).
    pub(crate) fn ips(&self) -> Vec<IpAddr> {
        self.addrs().iter().flatten().map(|a| a.ip()).collect()
    }

    /// The connection caps of `config` fitted to the descriptor limit (said on stderr and in
    /// `/metrics`): done before anything else is opened.
    pub(crate) fn fit_caps(&self, config: &ServerConfig, metrics: &SharedMetrics) -> Result<Caps> {
        let (caps, caps_line) = limits::fit_caps(config, limits::nofile_limit())?;
        eprintln!("sluice-server: {caps_line}");
        if self.http.is_some() {
            metrics
                .max_connections
                .with_label_values(&["http"])
                .set(caps.http as i64);
        }
        if self.tcp.is_some() {
            metrics
                .max_connections
                .with_label_values(&["tcp"])
                .set(caps.tcp as i64);
        }
        Ok(caps)
    }

    /// Starts the certificate reloads, the TCP listener and the UDP thread; HTTP is served by
    /// [`Listening::serve_http`].
    pub(crate) fn start(self, s: &Services<'_>) -> Result<Listening> {
        let addrs = self.addrs();
        let config = s.config;
        if let Some(tls) = s.tls {
            tls.watch(s.stop.clone());
        }
        let tcp_task = self.tcp.map(|listener| {
            let server = tcp::TcpServer {
                tx: s.pipeline.tx.clone(),
                acks: s.pipeline.acks.clone(),
                metrics: s.metrics.clone(),
                max_message: config.max_body_bytes,
                idle_timeout: Duration::from_secs(config.tcp_idle_timeout_secs),
                read_timeout: Duration::from_secs(config.request_timeout_secs),
                limiter: limits::Limiter::new("tcp", s.caps.tcp.max(1), s.metrics.clone()),
                drain: drain(config),
                auth: s.auth.clone(),
                tls: s.tls.as_ref().map(|t| t.tcp.clone()),
            };
            tokio::spawn(server.serve(listener, s.stop.clone()))
        });
        let udp_stop = Arc::new(AtomicBool::new(false));
        let udp_thread = match self.udp {
            Some(handle) => {
                let ctx = udp::UdpContext {
                    tx: s.pipeline.tx.clone(),
                    store: s.store.clone(),
                    metrics: s.metrics.clone(),
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
        let statsd_addr = self.statsd.as_ref().map(|b| b.addr);
        let statsd = match self.statsd {
            Some(b) => Some(b.start(s, udp_stop.clone())?),
            None => None,
        };
        Ok(Listening {
            http: self.http,
            tcp_task,
            udp_stop,
            udp_thread,
            statsd,
            statsd_addr,
            addrs,
        })
    }
}

impl Listening {
    /// Says where the server serves: the HTTP address in `DATA/SERVER` and the local secret
    /// where the CLI finds it by that address, then a line on stderr. Said only now: the store
    /// is open (its lock held) and the WAL replayed, so a server that cannot start never claims
    /// to serve. Returns the `SERVER` file, removed at shutdown.
    pub(crate) fn announce(&self, s: &Services<'_>) -> PathBuf {
        let config = s.config;
        let server_file = config.data_dir.join(crate::SERVER_FILE);
        if let Some(addr) = self.addrs[0] {
            let scheme = if s.tls.is_some() { "https" } else { "http" };
            if let Err(e) = std::fs::write(&server_file, format!("{scheme}://{addr}\n")) {
                eprintln!("sluice-server: writing {}: {e}", server_file.display());
            }
            s.auth.publish_runtime(addr);
        }
        let show = |a: Option<SocketAddr>| a.map_or("off".to_owned(), |a| a.to_string());
        eprintln!(
            "sluice-server: serving from {} (http {}, tcp {}, udp {})",
            config
                .store
                .clone()
                .unwrap_or_else(|| config.data_dir.display().to_string()),
            show(self.addrs[0]),
            show(self.addrs[1]),
            show(self.addrs[2])
        );
        if let Some(a) = self.statsd_addr {
            eprintln!("sluice-server: statsd on {a} (udp and tcp)");
        }
        server_file
    }

    /// Serves HTTP until the stop flag is set and its connections are drained (or only waits
    /// for the flag when HTTP is off).
    pub(crate) async fn serve_http(&mut self, s: &Services<'_>) {
        let config = s.config;
        let Some(listener) = self.http.take() else {
            limits::wait_stop(s.stop.clone()).await;
            return;
        };
        let state = crate::http::AppState {
            tx: s.pipeline.tx.clone(),
            store: s.store.clone(),
            metrics: s.metrics.clone(),
            timeout: Duration::from_secs(config.request_timeout_secs),
            acks: s.pipeline.acks.clone(),
            live: s.pipeline.live.clone(),
            dc: config.dc.clone(),
            stop: s.stop.clone(),
            tail_streams: Arc::new(crate::http::tail::TailStreams::new(s.caps.tail.max(1))),
            substreams: s.pipeline.substreams.clone(),
            auth: s.auth.clone(),
            python_substreams: config.python_substreams,
            columns: s.columns.clone(),
            alerts: s.alerts.clone(),
            otlp: Arc::new(crate::http::logs::OtlpSettings {
                config: config.otlp_config(),
                max_body: config.max_body_bytes,
                max_events: config.max_events,
            }),
            epoch_window: {
                let c = config.ingest_config();
                (c.max_past_secs, c.max_future_secs)
            },
        };
        let router = crate::http::router(state, config.max_body_bytes);
        http_server::serve(
            listener,
            router,
            config,
            s.caps.http,
            s.metrics.clone(),
            s.stop.clone(),
            drain(config),
            s.tls.as_ref().map(|t| t.http.clone()),
        )
        .await;
    }
}

/// How long a shutdown waits for busy connections (`shutdown_timeout_secs`).
fn drain(config: &ServerConfig) -> Duration {
    Duration::from_secs(config.shutdown_timeout_secs)
}
