//! The TCP ingest listener: NDJSON lines and length-prefixed Sereal frames on one connection,
//! each acknowledged by one reply line once durable, in order. The protocol is described in the
//! crate README ("TCP protocol").
//!
//! Limits (see [`crate::limits`]): at most `tcp_max_connections` connections; at the cap a new
//! one evicts the longest-idle connection (waiting for a message, no reply owed), else it gets
//! `error unavailable too many connections …` and is closed. A connection with no new message for `tcp_idle_timeout_secs`
//! is closed (`kind="idle"`), one whose started message does not arrive within
//! `request_timeout_secs` too (`kind="read"`). A frame announcing more than `max_body_bytes`
//! gets `error oversized …` and the connection is closed (its bytes are not read).
//!
//! TLS (`tls_cert` or `tls_self_signed`): the same protocol inside a TLS session, the
//! handshake first (within `request_timeout_secs`; client certificates required with
//! `tls_client_ca`); see [`crate::tls`].

use std::sync::Arc;
use std::time::Duration;

use crate::pipeline::AckWaiter;
use axum::body::Bytes;
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{timeout_at, Instant};

use crate::limits::{ConnState, Limiter, Slot};
use crate::metrics::SharedMetrics;
use crate::pipeline::IngestSummary;

/// First byte of a Sereal frame: `S`, then a `u32` big-endian length, then the document.
pub const FRAME_MARK: u8 = b'S';
/// Replies queued on one connection before its reader waits (pipelining depth).
const MAX_IN_FLIGHT: usize = 256;

/// Settings and handles of the TCP listener.
pub(crate) struct TcpServer {
    pub tx: crate::pipeline::PipelineTx,
    pub acks: Arc<AckWaiter>,
    pub metrics: SharedMetrics,
    pub max_message: usize,
    pub idle_timeout: Duration,
    pub read_timeout: Duration,
    /// The connection cap.
    pub limiter: Arc<Limiter>,
    /// How long a shutdown waits for busy connections (`shutdown_timeout_secs`).
    pub drain: Duration,
    /// Who may send (the `auth <token>` first line; required under `auth`).
    pub auth: Arc<crate::auth::Auth>,
    /// TLS only, when set: the handshake within `read_timeout` of the acceptance
    /// ([`crate::tls`]).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The answer to a plain-text client on a TLS port.
const PLAIN_ON_TLS: &[u8] =
    b"error tls this port expects TLS (a tls://HOST:PORT target); closing\n";

/// One message read from a connection.
enum Read {
    Payload(Bytes),
    /// A line over the size limit; skipped.
    Oversized,
    /// A frame announcing this many bytes, over the limit: refused, and the connection closed.
    OversizedFrame(u64),
    /// An empty (or whitespace-only) line: no reply.
    Blank,
    /// A line starting with the Sereal magic: refused, and the connection closed (the
    /// document may contain newlines, so the next line boundary is unknown).
    UnframedSereal,
    /// End of stream or I/O error: close.
    Close,
    /// The rest of a started message did not arrive within `read_timeout`: close.
    TimedOut,
}

/// What the writer answers, in order.
enum Ack {
    Pending(oneshot::Receiver<IngestSummary>),
    Line(String),
}

impl TcpServer {
    /// Accepts connections until `stop`, then waits (at most `drain`) for busy connections.
    pub(crate) async fn serve(self, listener: TcpListener, stop: watch::Receiver<bool>) {
        let me = Arc::new(self);
        let limiter = me.limiter.clone();
        let refusal = format!(
            "error unavailable too many connections ({} open, tcp_max_connections); retry later\n",
            limiter.cap
        );
        let drain = me.drain;
        let conn_stop = stop.clone();
        crate::limits::serve_listener(
            listener,
            limiter,
            refusal.into_bytes().into(),
            stop,
            drain,
            move |sock, slot| {
                let (me, stop) = (me.clone(), conn_stop.clone());
                async move {
                    me.metrics.tcp_connections.inc();
                    me.metrics.tcp_connections_open.inc();
                    let metrics = me.metrics.clone();
                    me.connection(sock, &slot, stop).await;
                    metrics.tcp_connections_open.dec();
                }
            },
        )
        .await;
    }

    /// The connection's stream: the socket, or (TLS on) the session after its handshake.
    async fn connection(
        self: Arc<Self>,
        sock: TcpStream,
        slot: &Slot,
        stop: watch::Receiver<bool>,
    ) {
        let _ = sock.set_nodelay(true);
        let Some(acceptor) = &self.tls else {
            let (rd, wr) = sock.into_split();
            return self.messages(rd, wr, slot, stop).await;
        };
        let handshake = crate::tls::Handshake {
            acceptor,
            transport: "tcp",
            deadline: Instant::now() + self.read_timeout,
            timeout_kind: "read",
            plain_refusal: PLAIN_ON_TLS,
            metrics: &self.metrics,
        };
        if let Some(tls) = handshake.accept(sock, |s| s, slot, &stop).await {
            let (rd, wr) = tokio::io::split(tls);
            self.clone().messages(rd, wr, slot, stop).await;
        }
    }

    /// Reads messages from `rd` and answers them on `wr`, in order, until the end.
    async fn messages<R, W>(self: Arc<Self>, rd: R, wr: W, slot: &Slot, stop: watch::Receiver<bool>)
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let state = slot.state.clone();
        let mut rd = BufReader::with_capacity(64 << 10, rd);
        let (atx, arx) = mpsc::channel::<Ack>(MAX_IN_FLIGHT);
        let writer = tokio::spawn(write_acks(
            wr,
            arx,
            (self.acks.clone(), self.metrics.clone()),
            self.read_timeout,
            state.clone(),
        ));
        // The sender's reach once its first message was let in (an `auth <token>` line, or a
        // payload in open mode); `None` before.
        let mut reach: Option<Option<Arc<sluice_auth::Allowed>>> = None;
        loop {
            // Wait for the start of the next message: idle timeout, eviction, or shutdown.
            let first = tokio::select! {
                r = tokio::time::timeout(self.idle_timeout, rd.fill_buf()) => match r {
                    Ok(Ok(b)) if !b.is_empty() => b[0],
                    Ok(_) => break,
                    Err(_) => {
                        slot.count_timeout("idle");
                        break;
                    }
                },
                _ = crate::limits::wait_stop(stop.clone()) => break,
                _ = state.evict.notified() => {
                    if state.accept_eviction() {
                        slot.count_evicted();
                        break;
                    }
                    continue;
                }
            };
            if !state.begin() {
                // Chosen for eviction just before this message: not read, not acknowledged.
                state.end();
                slot.count_evicted();
                break;
            }
            let deadline = Instant::now() + self.read_timeout;
            let read = if first == FRAME_MARK {
                self.read_frame(&mut rd, deadline).await
            } else {
                self.read_line(&mut rd, deadline).await
            };
            let ack = match read {
                Read::Payload(p) => {
                    if reach.is_none() {
                        // The first message: `auth <token>`, or (open mode only) a payload.
                        let line = p
                            .strip_prefix(b"auth ")
                            .and_then(|t| std::str::from_utf8(t).ok());
                        match self.auth.check_tcp(line) {
                            Err(d) => {
                                let reply = format!("error unauthorized {}; closing", d.message);
                                let _ = atx.send(Ack::Line(reply)).await;
                                break;
                            }
                            Ok(g) => {
                                let allowed = (!g.allowed.is_all()).then(|| Arc::new(g.allowed));
                                reach = Some(allowed);
                                if line.is_some() {
                                    let ok = Ack::Line(format!("ok auth {}", g.name));
                                    if atx.send(ok).await.is_err() {
                                        break;
                                    }
                                    continue;
                                }
                            }
                        }
                    }
                    self.metrics.tcp_messages.inc();
                    let allowed = reach.clone().flatten();
                    match crate::pipeline::submit(&self.tx, "tcp", p, allowed).await {
                        Ok(rx) => Ack::Pending(rx),
                        Err(e) => {
                            let _ = atx.send(Ack::Line(format!("error unavailable {e}"))).await;
                            break;
                        }
                    }
                }
                Read::Oversized => {
                    self.metrics.tcp_messages.inc();
                    Ack::Line(format!(
                        "error oversized message over {} bytes",
                        self.max_message
                    ))
                }
                Read::OversizedFrame(len) => {
                    self.metrics.tcp_messages.inc();
                    let _ = atx
                        .send(Ack::Line(format!(
                            "error oversized frame of {len} bytes over {} bytes; closing",
                            self.max_message
                        )))
                        .await;
                    break;
                }
                Read::Blank => {
                    state.end();
                    continue;
                }
                Read::UnframedSereal => {
                    let _ = atx
                        .send(Ack::Line(
                            "error sereal_unframed a Sereal document must be sent as a frame: S, u32 big-endian length, document; closing".into(),
                        ))
                        .await;
                    break;
                }
                Read::Close => {
                    state.end();
                    break;
                }
                Read::TimedOut => {
                    state.end();
                    slot.count_timeout("read");
                    break;
                }
            };
            if atx.send(ack).await.is_err() {
                break; // the writer failed: the client is gone
            }
        }
        drop(atx);
        let _ = writer.await;
    }

    /// Reads one `\n`-terminated line (a final unterminated line counts too).
    async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
        &self,
        rd: &mut R,
        deadline: Instant,
    ) -> Read {
        let mut acc: Vec<u8> = Vec::new();
        let mut oversized = false;
        loop {
            let buf = match timeout_at(deadline, rd.fill_buf()).await {
                Ok(Ok(b)) => b,
                Ok(Err(_)) => return Read::Close,
                Err(_) => return Read::TimedOut,
            };
            if buf.is_empty() {
                if oversized {
                    return Read::Oversized;
                }
                if acc.is_empty() {
                    return Read::Close;
                }
                break;
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if !oversized {
                if acc.len() + take > self.max_message {
                    oversized = true;
                    acc = Vec::new();
                } else {
                    acc.extend_from_slice(&buf[..take]);
                }
            }
            rd.consume(take + usize::from(done));
            if done {
                break;
            }
        }
        if oversized {
            return Read::Oversized;
        }
        if acc.last() == Some(&b'\r') {
            acc.pop();
        }
        if acc.iter().all(u8::is_ascii_whitespace) {
            return Read::Blank;
        }
        if acc.starts_with(b"=srl") || acc.starts_with(b"=\xF3rl") {
            return Read::UnframedSereal;
        }
        Read::Payload(Bytes::from(acc))
    }

    /// Reads one frame: `S`, `u32` big-endian length, that many bytes.
    async fn read_frame<R: tokio::io::AsyncBufRead + Unpin>(
        &self,
        rd: &mut R,
        deadline: Instant,
    ) -> Read {
        let mut head = [0u8; 5];
        match timeout_at(deadline, rd.read_exact(&mut head)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Read::Close,
            Err(_) => return Read::TimedOut,
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        // Refused before reading it: skipping up to 4 GiB would hold the connection for nothing.
        let Ok(len) = usize::try_from(len) else {
            return Read::OversizedFrame(u64::from(len));
        };
        if len > self.max_message {
            return Read::OversizedFrame(len as u64);
        }
        let mut doc = vec![0u8; len];
        match timeout_at(deadline, rd.read_exact(&mut doc)).await {
            Ok(Ok(_)) => Read::Payload(Bytes::from(doc)),
            Ok(Err(_)) => Read::Close,
            Err(_) => Read::TimedOut,
        }
    }
}

/// The reply line of a durable payload.
pub(crate) fn ack_line(s: &IngestSummary) -> String {
    let dropped: u64 = s.dropped.iter().map(|d| d.count).sum();
    if s.accepted == 0 && (s.rejected || dropped > 0) {
        let (reason, detail) = s
            .dropped
            .first()
            .map_or(("rejected", ""), |d| (d.reason.as_str(), d.detail.as_str()));
        let detail: String = detail
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        format!("error {reason} {detail}").trim_end().to_string()
    } else {
        format!("ok {} {}", s.accepted, dropped)
    }
}

/// Writes the replies in order; each written reply ends its message's busy time.
async fn write_acks<W: AsyncWrite + Unpin>(
    wr: W,
    mut arx: mpsc::Receiver<Ack>,
    (acks, metrics): (Arc<AckWaiter>, crate::metrics::SharedMetrics),
    write_timeout: Duration,
    state: Arc<ConnState>,
) {
    let mut wr = BufWriter::new(wr);
    while let Some(ack) = arx.recv().await {
        let mut line = match ack {
            Ack::Line(l) => l,
            Ack::Pending(rx) => match crate::pipeline::durable(rx, &acks, &metrics).await {
                Ok(s) if s.forbidden.is_some() => {
                    format!("error forbidden {}", s.forbidden.unwrap_or_default())
                }
                Ok(s) => ack_line(&s),
                Err(e) => format!("error unavailable {}", e.to_string().replace('\n', " ")),
            },
        };
        line.push('\n');
        let write = async {
            wr.write_all(line.as_bytes()).await?;
            if arx.is_empty() {
                wr.flush().await?;
            }
            std::io::Result::Ok(())
        };
        match tokio::time::timeout(write_timeout, write).await {
            Ok(Ok(())) => state.end(),
            _ => return,
        }
    }
    let _ = wr.flush().await;
    let _ = wr.into_inner().shutdown().await;
}
