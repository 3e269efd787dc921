//! Connection limits shared by the HTTP and TCP listeners: a cap per listener, eviction of the
//! longest-idle connection, bounded refusal, each connection's activity (idle or busy), the
//! shutdown drain, and the fit of the caps to the process's descriptor limit.
//!
//! Contracts:
//! - At most `cap` connections of a listener are served at once ([`Limiter`]). A connection
//!   accepted at the cap evicts the connection that has been idle longest — idle means no request
//!   or message in progress and no reply owed ([`ConnState`]), for at least
//!   [`EVICTION_MIN_IDLE`] — and takes its slot. A busy connection is never evicted. When no
//!   slot comes free within [`EVICTION_WAIT`], the new connection gets the listener's refusal
//!   (HTTP 503, TCP
//!   `error unavailable too many connections …`) and is closed, counted in `sluice_connections_refused_total{reason="cap"}`.
//! - At most [`ADMISSION_BACKLOG`] accepted connections per listener wait for an eviction or
//!   receive a refusal; beyond that a new connection is closed at once, unanswered
//!   (`reason="backlog"`). A listener therefore holds at most `cap + ADMISSION_BACKLOG`
//!   descriptors, whatever the number of clients.
//! - [`fit_caps`] lowers the configured caps at start so that both listeners together stay below
//!   `RLIMIT_NOFILE − fd_reserve`: a socket flood cannot make a store, WAL or spool write fail
//!   with EMFILE. What it chose is logged on stderr and shown in `sluice_max_connections`.
//! - Shutdown ([`serve_listener`]): the listening socket is closed at once; each connection
//!   watches the stop flag and closes itself when idle; busy ones get `drain` to finish, then
//!   their tasks are aborted (their sockets closed).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::ServerConfig;
use crate::error::Error;
use crate::metrics::SharedMetrics;

/// Connections per listener that may wait for an eviction or receive a refusal at once.
pub const ADMISSION_BACKLOG: usize = 16;
/// How long a connection accepted at the cap waits for a slot (an evicted connection's, or one
/// that ends) before it is refused.
pub const EVICTION_WAIT: Duration = Duration::from_secs(2);
/// A connection is evicted only once idle this long: one just accepted (whose request may be
/// in flight) or just answered (a keep-alive client's next request) is left alone.
pub const EVICTION_MIN_IDLE: Duration = Duration::from_millis(250);
/// How long a refused connection is kept to deliver its refusal (read until the client closes,
/// so the close does not reset the connection and destroy the reply before it is read).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Descriptors kept for the store, WAL and spool when `fd_reserve` is not set: the larger of
/// this and a quarter of `RLIMIT_NOFILE`.
pub const MIN_FD_RESERVE: usize = 96;

/// What a connection is doing, for timeouts and eviction.
#[derive(Debug)]
struct Activity {
    /// Requests / messages in progress or replies owed.
    busy: usize,
    /// When the connection last became idle (accepted, or its last request ended).
    idle_since: Instant,
    /// When the first byte of the next request arrived while idle (HTTP).
    first_byte: Option<Instant>,
    /// A request was started at least once.
    served: bool,
    /// Chosen for eviction (its task is being told to close).
    evicted: bool,
    /// Since when a write has been waiting for the client to read (HTTP).
    write_stalled: Option<Instant>,
}

/// One connection's activity, shared by its reader, its writer and the [`Limiter`].
#[derive(Debug)]
pub(crate) struct ConnState {
    activity: Mutex<Activity>,
    /// Wakes the connection's task when its activity changed (its deadlines moved).
    pub changed: Notify,
    /// Wakes the connection's task to close it: it was chosen for eviction.
    pub evict: Notify,
}

impl ConnState {
    fn new() -> ConnState {
        ConnState {
            activity: Mutex::new(Activity {
                busy: 0,
                idle_since: Instant::now(),
                first_byte: None,
                served: false,
                evicted: false,
                write_stalled: None,
            }),
            changed: Notify::new(),
            evict: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Activity> {
        self.activity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request or message starts (it counts as busy until [`ConnState::end`]). False when the
    /// connection had just been chosen for eviction while idle: a caller that can still refuse
    /// the message (TCP) calls `end` and closes instead.
    pub fn begin(&self) -> bool {
        let mut a = self.lock();
        let was_evicted = a.evicted && a.busy == 0;
        a.busy += 1;
        a.served = true;
        a.first_byte = None;
        drop(a);
        self.changed.notify_one();
        !was_evicted
    }

    /// A request or message (begun with [`ConnState::begin`]) is finished.
    pub fn end(&self) {
        let mut a = self.lock();
        a.busy = a.busy.saturating_sub(1);
        if a.busy == 0 {
            a.idle_since = Instant::now();
            a.first_byte = None;
        }
        drop(a);
        self.changed.notify_one();
    }

    /// Bytes arrived: while idle they start the next request's header timeout.
    pub fn saw_bytes(&self) {
        let mut a = self.lock();
        if a.busy == 0 && a.first_byte.is_none() {
            a.first_byte = Some(Instant::now());
            drop(a);
            self.changed.notify_one();
        }
    }

    /// A write could not proceed (the client is not reading): starts the write timeout.
    pub fn write_blocked(&self) {
        let mut a = self.lock();
        if a.write_stalled.is_none() {
            a.write_stalled = Some(Instant::now());
            drop(a);
            self.changed.notify_one();
        }
    }

    /// A write proceeded: ends the write timeout.
    pub fn write_progressed(&self) {
        self.lock().write_stalled = None;
    }

    /// When a stalled write times out (`None` while writes proceed).
    pub fn write_deadline(&self, limit: Duration) -> Option<Instant> {
        self.lock().write_stalled.map(|since| since + limit)
    }

    /// No request in progress and no reply owed.
    pub fn is_idle(&self) -> bool {
        self.lock().busy == 0
    }

    /// Whether any request was ever started on this connection.
    pub fn served(&self) -> bool {
        self.lock().served
    }

    /// Called when [`ConnState::evict`] fires: true if the connection is (still) idle and must
    /// close; false if it became busy meanwhile (it stays, and is no longer marked).
    pub fn accept_eviction(&self) -> bool {
        let mut a = self.lock();
        if a.busy == 0 {
            true
        } else {
            a.evicted = false;
            false
        }
    }

    /// When an idle HTTP connection times out, and why: a fresh connection must send a complete
    /// head within `header` of being accepted; after a request, the next one's head must be
    /// complete within `header` of its first byte, and that byte must come within `idle`.
    /// `None` while a request is in progress.
    pub fn http_deadline(
        &self,
        header: Duration,
        idle: Duration,
    ) -> Option<(Instant, &'static str)> {
        let a = self.lock();
        if a.busy > 0 {
            None
        } else if !a.served {
            Some((a.idle_since + header, "header"))
        } else if let Some(first) = a.first_byte {
            Some((first + header, "header"))
        } else {
            Some((a.idle_since + idle, "idle"))
        }
    }
}

/// The cap of one listener, and the registry of its connections for eviction.
pub(crate) struct Limiter {
    /// `http` or `tcp` (the metrics label).
    pub transport: &'static str,
    /// The cap in force.
    pub cap: usize,
    slots: Arc<Semaphore>,
    backlog: Arc<Semaphore>,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    metrics: SharedMetrics,
}

/// A served connection's place under the cap; dropping it frees the place.
pub(crate) struct Slot {
    /// The connection's activity.
    pub state: Arc<ConnState>,
    id: u64,
    limiter: Arc<Limiter>,
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    /// Counts this connection as closed by eviction.
    pub fn count_evicted(&self) {
        self.limiter
            .metrics
            .connections_evicted
            .with_label_values(&[self.limiter.transport])
            .inc();
    }

    /// Counts this connection as closed by a timeout of `kind`.
    pub fn count_timeout(&self, kind: &'static str) {
        self.limiter
            .metrics
            .connection_timeouts
            .with_label_values(&[self.limiter.transport, kind])
            .inc();
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limiter
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Limiter {
    /// A limiter of `cap` connections.
    pub fn new(transport: &'static str, cap: usize, metrics: SharedMetrics) -> Arc<Limiter> {
        Arc::new(Limiter {
            transport,
            cap,
            slots: Arc::new(Semaphore::new(cap)),
            backlog: Arc::new(Semaphore::new(ADMISSION_BACKLOG)),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            metrics,
        })
    }

    fn register(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new());
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, state.clone());
        Slot {
            state,
            id,
            limiter: self.clone(),
            _permit: permit,
        }
    }

    /// A slot if one is free now.
    pub fn try_admit(self: &Arc<Self>) -> Option<Slot> {
        let permit = self.slots.clone().try_acquire_owned().ok()?;
        Some(self.register(permit))
    }

    /// At the cap: tells the longest-idle connection to close and waits for its slot, or for
    /// any slot to come free; `None` after [`EVICTION_WAIT`] without one.
    pub async fn admit_by_eviction(self: &Arc<Self>) -> Option<Slot> {
        let deadline = Instant::now() + EVICTION_WAIT;
        let mut victim: Option<Arc<ConnState>> = None;
        while Instant::now() < deadline {
            // Each round: evict one (unless our last victim is still closing) if one is idle
            // long enough, then wait a little for a slot (connections become idle, or old
            // enough, meanwhile).
            let closing = victim
                .as_ref()
                .is_some_and(|v| Arc::strong_count(v) > 1 && v.lock().evicted);
            if !closing {
                victim = self.pick_idle();
                if let Some(v) = &victim {
                    v.evict.notify_one();
                }
            }
            let round = deadline.min(Instant::now() + Duration::from_millis(50));
            if let Ok(Ok(permit)) =
                tokio::time::timeout_at(round, self.slots.clone().acquire_owned()).await
            {
                return Some(self.register(permit));
            }
        }
        None
    }

    /// Marks and returns the connection idle the longest (not already marked), if it has been
    /// idle for [`EVICTION_MIN_IDLE`].
    fn pick_idle(&self) -> Option<Arc<ConnState>> {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let oldest_allowed = Instant::now().checked_sub(EVICTION_MIN_IDLE)?;
        let mut best: Option<(Instant, &Arc<ConnState>)> = None;
        for state in conns.values() {
            let a = state.lock();
            if a.busy == 0
                && !a.evicted
                && a.idle_since <= oldest_allowed
                && best.is_none_or(|(since, _)| a.idle_since < since)
            {
                best = Some((a.idle_since, state));
            }
        }
        let (_, state) = best?;
        state.lock().evicted = true;
        Some(state.clone())
    }

    fn count_refused(&self, reason: &'static str) {
        self.metrics
            .connections_refused
            .with_label_values(&[self.transport, reason])
            .inc();
    }
}

/// Accepts connections on `listener` until `stop`, admitting each under `limiter` (at the cap:
/// eviction, else `refusal` is written and the connection closed) and running `serve` on its
/// own task; then closes the listener and waits at most `drain` for the connections to end
/// before aborting the rest. `serve` must close an idle connection promptly once `stop` is set.
pub(crate) async fn serve_listener<F, Fut>(
    listener: TcpListener,
    limiter: Arc<Limiter>,
    refusal: Arc<[u8]>,
    stop: watch::Receiver<bool>,
    drain: Duration,
    serve: F,
) where
    F: Fn(TcpStream, Slot) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => {
                let sock = match r {
                    Ok((sock, _)) => sock,
                    Err(e) => {
                        // EMFILE / ENFILE / ECONNABORTED: nothing to answer; retry shortly.
                        eprintln!("sluice-server: {} accept: {e}", limiter.transport);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if let Some(slot) = limiter.try_admit() {
                    tasks.spawn(serve(sock, slot));
                } else if let Ok(waiting) = limiter.backlog.clone().try_acquire_owned() {
                    let (limiter, serve, refusal) = (limiter.clone(), serve.clone(), refusal.clone());
                    let stop = stop.clone();
                    tasks.spawn(async move {
                        // Waiting for room or refusing: nothing to finish when shutdown begins.
                        let admitted = tokio::select! {
                            slot = limiter.admit_by_eviction() => slot,
                            _ = wait_stop(stop.clone()) => return,
                        };
                        match admitted {
                            Some(slot) => {
                                drop(waiting);
                                serve(sock, slot).await;
                            }
                            None => {
                                limiter.count_refused("cap");
                                tokio::select! {
                                    _ = refuse(sock, &refusal) => {}
                                    _ = wait_stop(stop) => {}
                                }
                            }
                        }
                    });
                } else {
                    limiter.count_refused("backlog");
                    drop(sock);
                }
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = wait_stop(stop.clone()) => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(drain, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_ok();
    if !drained {
        eprintln!(
            "sluice-server: {} {} connection(s) still busy {drain:?} after shutdown began: closed",
            tasks.len(),
            limiter.transport
        );
    }
    tasks.shutdown().await;
}

/// Writes the refusal, then keeps the connection (at most [`REFUSAL_LINGER`]) until the client
/// closes it.
async fn refuse(mut sock: TcpStream, reply: &[u8]) {
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        if sock.write_all(reply).await.is_err() {
            return;
        }
        let _ = sock.shutdown().await;
        let mut buf = [0u8; 4096];
        while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The connection caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// HTTP connections (0 when HTTP is off).
    pub http: usize,
    /// TCP connections (0 when TCP is off).
    pub tcp: usize,
    /// Concurrent `GET /v1/tail` streams (below `http`).
    pub tail: usize,
}

/// The process's soft `RLIMIT_NOFILE`, `None` when unlimited or unknown.
pub fn nofile_limit() -> Option<u64> {
    let (soft, _hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft)
}

/// The caps of `config` lowered (if needed) so that both listeners, with their admission
/// backlogs, leave `fd_reserve` of `nofile` descriptors free; split in proportion to the
/// configured caps. The line to log is returned with them.
pub fn fit_caps(config: &ServerConfig, nofile: Option<u64>) -> Result<(Caps, String), Error> {
    let want_http = if config.http.is_some() {
        config.http_max_connections
    } else {
        0
    };
    let want_tcp = if config.tcp.is_some() {
        config.tcp_max_connections
    } else {
        0
    };
    let listeners = usize::from(want_http > 0) + usize::from(want_tcp > 0);
    let tail = |http: usize| config.http_max_tail_streams.min(http.saturating_sub(1));
    let Some(nofile) = nofile else {
        let caps = Caps {
            http: want_http,
            tcp: want_tcp,
            tail: tail(want_http),
        };
        let line = format!(
            "RLIMIT_NOFILE unlimited or unknown: http_max_connections {}, tcp_max_connections {}, tail streams {}",
            caps.http, caps.tcp, caps.tail
        );
        return Ok((caps, line));
    };
    let nofile = usize::try_from(nofile).unwrap_or(usize::MAX);
    let reserve = config
        .fd_reserve
        .unwrap_or_else(|| MIN_FD_RESERVE.max(nofile / 4));
    let budget = nofile
        .saturating_sub(reserve)
        .saturating_sub(listeners * ADMISSION_BACKLOG);
    let (http, tcp) = if want_http + want_tcp <= budget {
        (want_http, want_tcp)
    } else {
        // HTTP needs 2 (one tail stream and one other client); TCP needs 1.
        let needed = if want_http > 0 { 2 } else { 0 } + usize::from(want_tcp > 0);
        if budget < needed {
            return Err(Error::Config(format!(
                "RLIMIT_NOFILE is {nofile}: after fd_reserve {reserve} and {ADMISSION_BACKLOG} per listener for refusals, \
                 {budget} descriptors are left for connections; raise `ulimit -n` or lower fd_reserve"
            )));
        }
        let share = (budget as u128 * want_http as u128 / (want_http + want_tcp) as u128) as usize;
        let http = if want_http > 0 {
            share.clamp(2, budget - usize::from(want_tcp > 0))
        } else {
            0
        };
        (http, (budget - http).min(want_tcp))
    };
    let caps = Caps {
        http,
        tcp,
        tail: tail(http),
    };
    let line = format!(
        "RLIMIT_NOFILE {nofile}, {reserve} kept for the store/WAL (fd_reserve): http_max_connections {} (configured {}), \
         tcp_max_connections {} (configured {}), tail streams {} (configured {})",
        caps.http,
        config.http_max_connections,
        caps.tcp,
        config.tcp_max_connections,
        caps.tail,
        config.http_max_tail_streams
    );
    Ok((caps, line))
}

/// Completes once the shutdown flag is set (or its sender is gone).
pub(crate) async fn wait_stop(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_deadlines_follow_the_connection_phase() {
        let (header, idle) = (Duration::from_secs(10), Duration::from_secs(60));
        let c = ConnState::new();
        let (at, kind) = c.http_deadline(header, idle).unwrap();
        assert_eq!(kind, "header", "a fresh connection must send its head");
        assert!(at <= Instant::now() + header);
        assert!(c.begin());
        assert_eq!(c.http_deadline(header, idle), None, "busy: no timeout");
        c.end();
        assert_eq!(c.http_deadline(header, idle).unwrap().1, "idle");
        c.saw_bytes();
        assert_eq!(c.http_deadline(header, idle).unwrap().1, "header");
        assert_eq!(c.write_deadline(header), None);
        c.write_blocked();
        assert!(c.write_deadline(header).is_some());
        c.write_progressed();
        assert_eq!(c.write_deadline(header), None);
    }

    #[test]
    fn eviction_takes_the_longest_idle_never_a_busy_or_young_one() {
        let limiter = Limiter::new("test", 3, SharedMetrics::default());
        let busy = limiter.try_admit().unwrap();
        let older = limiter.try_admit().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let newer = limiter.try_admit().unwrap();
        assert!(limiter.try_admit().is_none(), "at the cap");
        assert!(busy.state.begin());
        assert!(
            limiter.pick_idle().is_none(),
            "idle for less than EVICTION_MIN_IDLE"
        );
        std::thread::sleep(EVICTION_MIN_IDLE + Duration::from_millis(50));
        let victim = limiter.pick_idle().unwrap();
        assert!(Arc::ptr_eq(&victim, &older.state));
        // A victim that became busy meanwhile stays, and is no longer marked.
        assert!(!older.state.begin(), "begin reports the eviction");
        assert!(!older.state.accept_eviction());
        let next = limiter.pick_idle().unwrap();
        assert!(Arc::ptr_eq(&next, &newer.state));
        assert!(newer.state.accept_eviction());
        assert!(
            limiter.pick_idle().is_none(),
            "the rest are busy or already chosen"
        );
        drop(newer);
        assert!(
            limiter.try_admit().is_some(),
            "a dropped slot frees its place"
        );
    }

    #[test]
    fn caps_fit_the_descriptor_limit() {
        let config = ServerConfig::default();
        let (caps, _) = fit_caps(&config, None).unwrap();
        assert_eq!((caps.http, caps.tcp, caps.tail), (1024, 1024, 64));
        let (caps, line) = fit_caps(&config, Some(1024)).unwrap();
        // 1024 - 256 reserved - 2 * 16 backlog = 736, split evenly.
        assert_eq!((caps.http, caps.tcp, caps.tail), (368, 368, 64), "{line}");
        let (caps, _) = fit_caps(&config, Some(256)).unwrap();
        assert_eq!(caps.http + caps.tcp, 256 - 96 - 32);
        let (caps, _) = fit_caps(&config, Some(100_000)).unwrap();
        assert_eq!((caps.http, caps.tcp), (1024, 1024));
        let tcp_off = ServerConfig {
            tcp: None,
            ..ServerConfig::default()
        };
        let (caps, _) = fit_caps(&tcp_off, Some(1024)).unwrap();
        assert_eq!((caps.http, caps.tcp), (1024 - 256 - 16, 0));
        let tiny = ServerConfig {
            fd_reserve: Some(60),
            ..ServerConfig::default()
        };
        assert!(fit_caps(&tiny, Some(64)).is_err());
        let small = ServerConfig {
            fd_reserve: Some(10),
            ..ServerConfig::default()
        };
        let (caps, _) = fit_caps(&small, Some(45)).unwrap();
        assert_eq!((caps.http, caps.tcp, caps.tail), (2, 1, 1));
    }
}
