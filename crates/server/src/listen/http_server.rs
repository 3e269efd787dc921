//! Serving the HTTP API's connections (HTTP/1.1, hyper under axum's router), with the limits of
//! [`crate::limits`].
//!
//! Contracts:
//! - A fresh connection must send a complete request head within `http_header_timeout_secs`
//!   of being accepted; after a response, the next request's first byte must come within
//!   `http_idle_timeout_secs` and its head be complete within `http_header_timeout_secs` of
//!   that byte. Otherwise the connection is closed (counted in
//!   `sluice_connection_timeouts_total{transport="http",kind="header"|"idle"}`). A request in
//!   progress is bounded by `request_timeout_secs` (the router's middleware) instead; a
//!   streamed response (`/v1/events`, `/v1/tail`) keeps its connection busy until it ends.
//! - A connection is idle (evictable, closed at once on shutdown) while no request is in
//!   progress: from its acceptance or the end of its last response body until the head of the
//!   next request is complete.
//! - Closing an idle connection that has served a request lets hyper finish writing its last
//!   response first (bounded by [`CLOSE_GRACE`]); one that never had a request is dropped.
//! - A response the client does not read is cut once a write has waited `request_timeout_secs`
//!   (`kind="write"`): a stalled reader cannot hold a connection (and, for streamed reads and
//!   tails, a blocking thread) forever.
//! - On shutdown a busy connection finishes its request (hyper's graceful shutdown: the
//!   response says `connection: close`), bounded by the listener's drain.
//! - With TLS on ([`crate::tls`]), the handshake comes first, within the header timeout of a
//!   fresh connection (the request head after it shares that deadline); the timeouts above watch
//!   the socket's bytes under TLS.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::ServerConfig;
use crate::limits::{ConnState, Limiter, Slot};
use crate::metrics::SharedMetrics;
use crate::tls::MaybeTls;

/// How long an idle connection that served requests may take to finish writing before it is
/// dropped when closed (timeout, eviction, shutdown).
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What every HTTP connection needs.
pub(crate) struct HttpServer {
    pub router: Router,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// Longest wait of one write for the client to read (`request_timeout_secs`).
    pub write_timeout: Duration,
    pub metrics: SharedMetrics,
    pub stop: watch::Receiver<bool>,
    /// TLS only, when set.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The answer to plain HTTP on a TLS port.
const PLAIN_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 55\r\n\r\n{\"error\":\"this port serves HTTPS: use an https:// URL\"}";

/// Counts the connection in `sluice_http_connections` while it lives.
struct OpenGauge(SharedMetrics);

impl OpenGauge {
    fn new(metrics: SharedMetrics) -> OpenGauge {
        metrics.http_connections_open.inc();
        OpenGauge(metrics)
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.http_connections_open.dec();
    }
}

impl HttpServer {
    /// Serves one connection until the client closes it, a timeout, eviction or shutdown.
    pub(crate) async fn connection(self: Arc<Self>, sock: TcpStream, slot: Slot) {
        let _open = OpenGauge::new(self.metrics.clone());
        let _ = sock.set_nodelay(true);
        let state = slot.state.clone();
        let watched = |inner: TcpStream| WatchedIo {
            inner,
            state: state.clone(),
        };
        let io = match &self.tls {
            None => MaybeTls::Plain(watched(sock)),
            Some(acceptor) => {
                let handshake = crate::tls::Handshake {
                    acceptor,
                    transport: "http",
                    deadline: Instant::now() + self.header_timeout,
                    timeout_kind: "header",
                    plain_refusal: PLAIN_ON_TLS,
                    metrics: &self.metrics,
                };
                match handshake.accept(sock, watched, &slot, &self.stop).await {
                    Some(tls) => MaybeTls::Tls(Box::new(tls)),
                    None => return,
                }
            }
        };
        let io = TokioIo::new(io);
        let router = TowerToHyperService::new(self.router.clone());
        let busy_state = state.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            busy_state.begin();
            let busy = Busy(busy_state.clone());
            let response = router.call(req);
            async move {
                let response = response.await?;
                Ok::<_, std::convert::Infallible>(
                    response.map(|inner| BusyBody { inner, _busy: busy }),
                )
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(None) // ours: see the module doc
            .serve_connection(io, service);
        tokio::pin!(conn);
        let mut stop = self.stop.clone();
        let mut stopping = false;
        let mut close_by: Option<Instant> = None;
        loop {
            let deadline = state.http_deadline(self.header_timeout, self.idle_timeout);
            let stalled = state.write_deadline(self.write_timeout);
            let wake = match (deadline, close_by) {
                (_, Some(c)) => Some(c),
                (Some((d, _)), None) => Some(d),
                (None, None) => None,
            };
            let wake = match (wake, stalled) {
                (Some(w), Some(s)) => Some(w.min(s)),
                (w, s) => w.or(s),
            };
            let close = tokio::select! {
                r = conn.as_mut() => {
                    // Client errors (bad requests, resets) end the connection; nothing to report.
                    let _ = r;
                    return;
                }
                _ = state.changed.notified() => false,
                _ = sleep_until(wake) => {
                    if close_by.is_some_and(|c| c <= Instant::now()) {
                        return; // the last response could not be finished in time
                    }
                    if state.write_deadline(self.write_timeout).is_some_and(|d| d <= Instant::now()) {
                        slot.count_timeout("write");
                        return; // the client stopped reading: nothing more can be sent
                    }
                    match state.http_deadline(self.header_timeout, self.idle_timeout) {
                        Some((d, kind)) if d <= Instant::now() => {
                            slot.count_timeout(kind);
                            true
                        }
                        _ => false,
                    }
                }
                _ = state.evict.notified() => {
                    let evict = state.accept_eviction();
                    if evict {
                        slot.count_evicted();
                    }
                    evict
                }
                r = stop.wait_for(|s| *s), if !stopping => {
                    stopping = true;
                    if r.is_err() || state.is_idle() {
                        true
                    } else {
                        // Busy: the request finishes, then hyper closes (bounded by the drain).
                        conn.as_mut().graceful_shutdown();
                        false
                    }
                }
            };
            if close && close_by.is_none() {
                if !state.served() {
                    return; // nothing was ever written: just drop it
                }
                conn.as_mut().graceful_shutdown();
                close_by = Some(Instant::now() + CLOSE_GRACE);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Marks the connection busy from the request's dispatch until its response body is done.
struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A response body that keeps its connection busy until it is finished or dropped.
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, telling the connection's state when bytes arrive (the start of the next
/// request's header timeout).
struct WatchedIo {
    inner: TcpStream,
    state: Arc<ConnState>,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.saw_bytes();
        }
        r
    }
}

impl WatchedIo {
    fn note_write(&self, pending: bool) {
        if pending {
            self.state.write_blocked();
        } else {
            self.state.write_progressed();
        }
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(r.is_pending());
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(r.is_pending());
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Serves `router` on `listener` until `stop` is set: at most `cap` connections (at least one;
/// past it the oldest idle one is evicted, else a 503 and close: [`crate::limits`]), the header,
/// idle and write timeouts of `config`, busy connections given `drain` to finish at shutdown;
/// TLS only with `tls`.
#[allow(clippy::too_many_arguments)] // the listener's settings, each once
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    config: &ServerConfig,
    cap: usize,
    metrics: SharedMetrics,
    stop: watch::Receiver<bool>,
    drain: Duration,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let server = Arc::new(HttpServer {
        router,
        header_timeout: Duration::from_secs(config.http_header_timeout_secs),
        idle_timeout: Duration::from_secs(config.http_idle_timeout_secs),
        write_timeout: Duration::from_secs(config.request_timeout_secs),
        metrics: metrics.clone(),
        stop: stop.clone(),
        tls,
    });
    let limiter = Limiter::new("http", cap.max(1), metrics);
    let body = format!(
        "{{\"error\":\"too many connections ({} open, http_max_connections); retry later\"}}",
        limiter.cap
    );
    let refusal = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    crate::limits::serve_listener(
        listener,
        limiter,
        refusal.into_bytes().into(),
        stop,
        drain,
        move |sock, slot| server.clone().connection(sock, slot),
    )
    .await;
}
