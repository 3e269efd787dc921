//! The statsd listener (`statsd = "127.0.0.1:8125"`, `--statsd`; off by default): statsd /
//! DogStatsD lines on UDP **and** TCP on the same address, each valid line turned into one event
//! of type `statsd` ([`sluice_statsd`] parses and says what each metric type becomes; user guide
//! `docs/statsd.md`).
//!
//! - **UDP**: a thread of its own reading datagrams in batches ([`sluice_udp::UdpReceiver`], as
//!   the events UDP listener does), several lines per datagram. The events made from a batch are
//!   one NDJSON payload through an [`Ingestor`] and go to the pipeline as parsed events
//!   (`Msg::Events`): fire and forget, not logged in the WAL, shed under backpressure — as UDP
//!   events are. Once a second the kernel's drops are published
//!   (`sluice_statsd_kernel_drops_total`) and added to the store's counts of the current second
//!   under `(dc, "statsd", "")` (`kernel_dropped`; truncated datagrams as `oversized`).
//! - **TCP**: newline framing; each read's complete lines become one NDJSON payload submitted to
//!   the pipeline like a TCP events payload (logged in the WAL, so replayed after a crash), with
//!   no reply (statsd clients expect none). A line longer than the line limit is dropped
//!   (`too_long`) without being buffered. The connection cap is `tcp_max_connections` (as fitted for the TCP port; label
//!   `statsd` in the connection metrics); an idle connection is closed after
//!   `tcp_idle_timeout_secs`.
//! - **Sources**: statsd carries no credentials, so on both transports the source address is
//!   checked against `udp_allow` (loopback by default) before anything is read; others are
//!   counted in `sluice_statsd_refused_total{transport, reason="source"}`.
//!
//! Counters: `sluice_statsd_lines_total{transport}` (non-blank lines),
//! `sluice_statsd_events_total{transport}`, `sluice_statsd_dropped_total{reason}` (the
//! [`sluice_statsd::Reject`] labels, and `shed` for events refused under backpressure),
//! `sluice_statsd_datagrams_total`, `sluice_statsd_kernel_drops_total`,
//! `sluice_statsd_truncated_total`; the events themselves count in the ingest metrics under
//! `transport="statsd"`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_collector::{DropCounters, IngestConfig, Ingestor};
use sluice_statsd::{Converter, Counts, Limits, Reject};
use sluice_store::{Counts as StoreCounts, Store};
use sluice_udp::{UdpReceiver, UdpStats};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::limits::{Limiter, Slot};
use super::udp::AllowList;
use super::Services;
use crate::error::{Error, Result};
use crate::metrics::{IngestCounters, SharedMetrics};
use crate::pipeline::drops::{self, PendingDrops};
use crate::pipeline::{now_unix, Msg};

/// The event type statsd metrics are stored under.
pub const STATSD_TYPE: &str = "statsd";
/// NDJSON bytes gathered from a UDP batch before they are handed to ingest.
const FLUSH_BYTES: usize = 256 << 10;
/// Bytes read from a TCP connection at a time.
const READ_CHUNK: usize = 64 << 10;

/// The statsd sockets, bound: the UDP thread (waiting for its context) and the TCP listener on
/// the same address.
pub(crate) struct StatsdBound {
    pub(crate) addr: SocketAddr,
    tcp: std::net::TcpListener,
    ctx: std::sync::mpsc::Sender<UdpStatsd>,
    thread: std::thread::JoinHandle<()>,
}

/// The statsd listener once started.
pub(crate) struct StatsdRunning {
    /// The TCP listener's task.
    pub tcp_task: tokio::task::JoinHandle<()>,
    /// The UDP thread (it stops with the events UDP thread's flag).
    pub thread: std::thread::JoinHandle<()>,
}

/// Binds `config.statsd`: UDP first (a port 0 resolved there), then TCP on the same port.
pub(crate) fn bind(config: &crate::config::ServerConfig) -> Result<Option<StatsdBound>> {
    let Some(addr) = config.statsd else {
        return Ok(None);
    };
    let cfg = sluice_udp::UdpConfig {
        recv_buffer_bytes: config.udp_recv_buffer_bytes,
        ..sluice_udp::UdpConfig::default()
    };
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (ctx, ctx_rx) = std::sync::mpsc::channel::<UdpStatsd>();
    let thread = std::thread::Builder::new()
        .name("sluice-statsd".into())
        .spawn(move || {
            let receiver =
                match UdpReceiver::bind(addr, cfg).and_then(|r| r.local_addr().map(|a| (r, a))) {
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
        .map_err(|e| Error::Io(format!("starting the statsd thread: {e}")))?;
    let addr = match bound_rx.recv() {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(Error::Io(format!("binding statsd UDP {addr}: {e}"))),
        Err(_) => return Err(Error::Internal("the statsd thread died".into())),
    };
    let tcp = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Error::Io(format!("binding statsd TCP {addr}: {e}")))?;
    Ok(Some(StatsdBound {
        addr,
        tcp,
        ctx,
        thread,
    }))
}

impl StatsdBound {
    /// Starts the UDP thread (stopped by `stop`) and the TCP listener (stopped with the server).
    pub(crate) fn start(self, s: &Services<'_>, stop: Arc<AtomicBool>) -> Result<StatsdRunning> {
        let config = s.config;
        let allow = config.udp_allow_nets()?;
        let udp = UdpStatsd {
            tx: s.pipeline.tx.clone(),
            store: s.store.clone(),
            metrics: s.metrics.clone(),
            ingest: config.ingest_config(),
            dc: config.dc.clone(),
            stop,
            allow: AllowList::new(&allow),
        };
        let _ = self.ctx.send(udp);
        let listener = tokio::net::TcpListener::from_std(self.tcp)
            .map_err(|e| Error::Io(format!("statsd TCP: {e}")))?;
        // The TCP events port's cap (fitted to the descriptor limit), or its setting when off.
        let cap = if config.tcp.is_some() {
            s.caps.tcp
        } else {
            config.tcp_max_connections
        }
        .max(1);
        s.metrics
            .max_connections
            .with_label_values(&["statsd"])
            .set(cap as i64);
        let server = TcpStatsd {
            tx: s.pipeline.tx.clone(),
            metrics: s.metrics.clone(),
            allow: AllowList::new(&allow),
            idle_timeout: Duration::from_secs(config.tcp_idle_timeout_secs),
            limiter: Limiter::new("statsd", cap, s.metrics.clone()),
            drain: Duration::from_secs(config.shutdown_timeout_secs),
        };
        let tcp_task = tokio::spawn(server.serve(listener, s.stop.clone()));
        Ok(StatsdRunning {
            tcp_task,
            thread: self.thread,
        })
    }
}

/// Publishes what a converter counted since `prev` (lines and events under `transport`).
fn publish(metrics: &SharedMetrics, transport: &str, now: &Counts, prev: &mut Counts) {
    let lines = now.lines.saturating_sub(prev.lines);
    if lines == 0 {
        return;
    }
    metrics
        .statsd_lines
        .with_label_values(&[transport])
        .inc_by(lines);
    metrics
        .statsd_events
        .with_label_values(&[transport])
        .inc_by(now.events.saturating_sub(prev.events));
    for ((reason, n), (_, p)) in now.iter().zip(prev.iter()) {
        if n > p {
            metrics
                .statsd_dropped
                .with_label_values(&[reason.as_str()])
                .inc_by(n - p);
        }
    }
    *prev = now.clone();
}

/// What the statsd UDP thread needs.
struct UdpStatsd {
    tx: crate::pipeline::PipelineTx,
    store: Arc<dyn Store>,
    metrics: SharedMetrics,
    ingest: IngestConfig,
    dc: String,
    stop: Arc<AtomicBool>,
    allow: AllowList,
}

/// One UDP batch's work in progress.
struct Batch<'a> {
    ingestor: &'a mut Ingestor,
    ndjson: Vec<u8>,
    events: Vec<sluice_collector::ParsedEvent>,
    drops: DropCounters,
    pending_drops: &'a mut PendingDrops,
    dc: &'a str,
    now: i64,
}

impl Batch<'_> {
    fn ingest(&mut self) {
        if self.ndjson.is_empty() {
            return;
        }
        let out = self.ingestor.ingest(&self.ndjson, self.now);
        self.ndjson.clear();
        self.drops.add(&out);
        for d in &out.dropped {
            drops::note_drop(self.pending_drops, d, self.now, self.dc);
        }
        self.events.extend(out.events);
    }
}

impl UdpStatsd {
    fn run(self, mut receiver: UdpReceiver) {
        let mut ingestor = match Ingestor::new(self.ingest.clone()) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("sluice-server: statsd ingest config: {e}");
                return;
            }
        };
        let mut converter = Converter::new(Limits::default());
        let mut published = Counts::default();
        let mut counters = IngestCounters::new(STATSD_TYPE, self.metrics.clone());
        let mut pending_drops = PendingDrops::new();
        let refused_source = self
            .metrics
            .statsd_refused
            .with_label_values(&["udp", "source"]);
        let mut prev = UdpStats::default();
        let mut last_report = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let mut refused = 0;
            // Dated when its first datagram is read, not when the wait for it began (the wait
            // may cross into the next second).
            let mut stamped = false;
            let mut batch = Batch {
                ingestor: &mut ingestor,
                ndjson: Vec::new(),
                events: Vec::new(),
                drops: DropCounters::new(),
                pending_drops: &mut pending_drops,
                dc: &self.dc,
                now: 0,
            };
            let res = receiver.recv_batch(|payload, from| {
                if !self.allow.allows(from.ip()) {
                    refused += 1;
                    return;
                }
                if !stamped {
                    batch.now = now_unix();
                    stamped = true;
                }
                converter.convert(payload, batch.now, &mut batch.ndjson);
                if batch.ndjson.len() >= FLUSH_BYTES {
                    batch.ingest();
                }
            });
            batch.ingest();
            let Batch {
                events, drops, now, ..
            } = batch;
            let now = if stamped { now } else { now_unix() };
            if refused > 0 {
                refused_source.inc_by(refused);
            }
            if let Err(e) = res {
                eprintln!("sluice-server: statsd UDP receive: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            publish(&self.metrics, "udp", &converter.counts, &mut published);
            if drops.payloads > 0 {
                counters.add_drops(&drops);
                counters.add_events(STATSD_TYPE, events.len() as u64);
            }
            if !events.is_empty() && self.tx.blocking_send(Msg::Events { events, now }).is_err() {
                break; // the pipeline is gone
            }
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                prev = self.report(&mut receiver, prev, &mut pending_drops, now);
            }
        }
        self.report(&mut receiver, prev, &mut pending_drops, now_unix());
    }

    /// Publishes the receiver's counters and adds the second's drops to the store's counts.
    fn report(
        &self,
        receiver: &mut UdpReceiver,
        prev: UdpStats,
        pending_drops: &mut PendingDrops,
        now: i64,
    ) -> UdpStats {
        let stats = receiver.stats();
        let m = &self.metrics;
        m.statsd_datagrams
            .inc_by(stats.datagrams.saturating_sub(prev.datagrams));
        let truncated = stats.truncated.saturating_sub(prev.truncated);
        m.statsd_truncated.inc_by(truncated);
        let kernel = stats.kernel_drops.saturating_sub(prev.kernel_drops);
        m.statsd_kernel_drops.inc_by(kernel);
        let mut dropped = BTreeMap::new();
        if truncated > 0 {
            dropped.insert("oversized".to_string(), truncated);
        }
        let counts = StoreCounts {
            kernel_dropped: kernel,
            dropped,
            ..StoreCounts::default()
        };
        drops::write_drop_counts(pending_drops, self.store.as_ref(), m, "statsd");
        if !counts.is_zero() {
            if let Err(e) = self
                .store
                .add_counts(now, &self.dc, STATSD_TYPE, "", &counts)
            {
                eprintln!("sluice-server: recording statsd drops: {e}");
                m.store_errors.inc();
            }
        }
        stats
    }
}

/// The statsd TCP listener.
struct TcpStatsd {
    tx: crate::pipeline::PipelineTx,
    metrics: SharedMetrics,
    allow: AllowList,
    idle_timeout: Duration,
    limiter: Arc<Limiter>,
    drain: Duration,
}

impl TcpStatsd {
    async fn serve(self, listener: TcpListener, stop: watch::Receiver<bool>) {
        let me = Arc::new(self);
        let (limiter, drain) = (me.limiter.clone(), me.drain);
        let conn_stop = stop.clone();
        super::limits::serve_listener(
            listener,
            limiter,
            Arc::from(&b""[..]),
            stop,
            drain,
            move |sock, slot| {
                let (me, stop) = (me.clone(), conn_stop.clone());
                async move { me.connection(sock, slot, stop).await }
            },
        )
        .await;
    }

    async fn connection(&self, mut sock: TcpStream, slot: Slot, stop: watch::Receiver<bool>) {
        let from = match sock.peer_addr() {
            Ok(a) => a,
            Err(_) => return,
        };
        if !self.allow.allows(from.ip()) {
            self.metrics
                .statsd_refused
                .with_label_values(&["tcp", "source"])
                .inc();
            return;
        }
        let mut conn = TcpLines::new(Limits::default());
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let read = tokio::select! {
                r = tokio::time::timeout(self.idle_timeout, sock.read(&mut buf)) => r,
                _ = slot.state.evict.notified() => {
                    slot.count_evicted();
                    break;
                }
                _ = super::limits::wait_stop(stop.clone()) => break,
            };
            let n = match read {
                Err(_) => {
                    slot.count_timeout("idle");
                    break;
                }
                Ok(Err(_)) | Ok(Ok(0)) => break,
                Ok(Ok(n)) => n,
            };
            if !slot.state.begin() {
                slot.state.end();
                break;
            }
            let payload = conn.feed(&buf[..n], now_unix());
            self.submit(payload, &mut conn).await;
            slot.state.end();
        }
        let payload = conn.finish(now_unix());
        self.submit(payload, &mut conn).await;
    }

    /// Hands one NDJSON payload to the pipeline (logged in the WAL) and publishes the counts.
    async fn submit(&self, payload: Vec<u8>, conn: &mut TcpLines) {
        publish(
            &self.metrics,
            "tcp",
            &conn.converter.counts,
            &mut conn.published,
        );
        if payload.is_empty() {
            return;
        }
        let events = payload.iter().filter(|b| **b == b'\n').count() as u64;
        let shed = match crate::pipeline::submit(&self.tx, STATSD_TYPE, payload.into(), None).await
        {
            Ok(rx) => match rx.await {
                Ok(summary) => summary.error.is_some() || summary.forbidden.is_some(),
                Err(_) => true,
            },
            Err(_) => true,
        };
        if shed {
            self.metrics
                .statsd_dropped
                .with_label_values(&["shed"])
                .inc_by(events);
        }
    }
}

/// Newline framing on a byte stream: complete lines converted, a partial line kept (at most the
/// line limit; a longer one is skipped to its end and counted `too_long`).
struct TcpLines {
    converter: Converter,
    published: Counts,
    partial: Vec<u8>,
    /// Inside a line already over the limit: skipping to its `\n`.
    skipping: bool,
}

impl TcpLines {
    fn new(limits: Limits) -> TcpLines {
        TcpLines {
            converter: Converter::new(limits),
            published: Counts::default(),
            partial: Vec::new(),
            skipping: false,
        }
    }

    fn too_long(&mut self) {
        self.converter.counts.lines += 1;
        self.converter.counts.rejected[slot(Reject::TooLong)] += 1;
    }

    /// Takes `bytes`; returns the NDJSON events of the lines they complete.
    fn feed(&mut self, mut bytes: &[u8], now: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let max = self.converter.limits.max_line_bytes + 1; // a `\r` may follow
        while let Some(nl) = bytes.iter().position(|b| *b == b'\n') {
            let (head, rest) = (&bytes[..nl], &bytes[nl + 1..]);
            if self.skipping {
                self.skipping = false;
            } else if self.partial.len() + head.len() > max {
                self.partial.clear();
                self.too_long();
            } else if self.partial.is_empty() {
                self.converter.convert(head, now, &mut out);
            } else {
                self.partial.extend_from_slice(head);
                let line = std::mem::take(&mut self.partial);
                self.converter.convert(&line, now, &mut out);
            }
            bytes = rest;
        }
        if !self.skipping {
            if self.partial.len() + bytes.len() > max {
                self.partial.clear();
                self.skipping = true;
                self.too_long();
            } else {
                self.partial.extend_from_slice(bytes);
            }
        }
        out
    }

    /// The connection ended: its last line, if it had no `\n`.
    fn finish(&mut self, now: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let line = std::mem::take(&mut self.partial);
        if !self.skipping {
            self.converter.convert(&line, now, &mut out);
        }
        out
    }
}

fn slot(r: Reject) -> usize {
    Reject::ALL.iter().position(|x| *x == r).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(out: &[u8]) -> Vec<serde_json::Value> {
        out.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn tcp_framing_across_reads_and_long_lines() {
        let mut t = TcpLines::new(Limits {
            max_line_bytes: 20,
            ..Limits::default()
        });
        let mut out = t.feed(b"a:1|c\nb:", 5);
        out.extend(t.feed(b"2|g\r\n", 5));
        out.extend(t.feed(&[b'x'; 15], 5));
        out.extend(t.feed(&[b'x'; 15], 5)); // over the limit before its end
        out.extend(t.feed(b"yyy\nc:3|ms\n", 5));
        out.extend(t.feed(b"d:4|h", 5));
        out.extend(t.finish(5));
        let v = lines_of(&out);
        let names: Vec<&str> = v.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(t.converter.counts.lines, 5);
        assert_eq!(t.converter.counts.rejected(Reject::TooLong), 1);
        // A complete line just over the limit in one read.
        let mut t = TcpLines::new(Limits {
            max_line_bytes: 8,
            ..Limits::default()
        });
        let out = t.feed(b"abcdefg:1|c\nx:1|c\n", 5);
        assert_eq!(lines_of(&out).len(), 1);
        assert_eq!(t.converter.counts.rejected(Reject::TooLong), 1);
    }
}
