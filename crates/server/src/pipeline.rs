//! The pipeline: N shard threads (`pipeline_threads`), each owning an [`Ingestor`] and an
//! [`Aggregator`] for the groups it owns. Handlers send payloads through [`PipelineTx`] (to the
//! least busy shard) and get an [`IngestSummary`] back; the shard that parses a payload logs it
//! and sends the events of other shards' groups to them; a ticker sends every shard a
//! [`Msg::Tick`] every 100 ms (flush due epochs; shard 0: disk state, hourly expiry);
//! [`Msg::Drain`] then [`Msg::Shutdown`] flush every open epoch and end the threads.
//!
//! The store API is synchronous, so the shards are plain threads (not tokio tasks): their
//! store writes never block the async workers.
//!
//! This file is the loop and the ingest path; beside it, `build` builds and starts the shards
//! ([`Pipeline::start`]), [`shards`] holds what the shards share
//! (group owners, the checkpoint over shards, flush turns, the handlers' dispatch),
//! [`exactly_once`] the bookkeeping after each flush (syncs, done notes, checkpoint, the
//! WAL-failing state) and [`drops`] the completeness counts of dropped events.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use sluice_collector::aggregate::{Aggregator, FlushReport};
use sluice_collector::exactly_once::ExactlyOnce;
use sluice_collector::failpoint;
use sluice_collector::wal::Wal;
use sluice_collector::{Drop, DropReason, EventBatch, Ingestor, ParsedEvent};
use sluice_store::Store;
use tokio::sync::{mpsc, oneshot};

use crate::error::IngestError;
use crate::metrics::{as_gauge, IngestCounters, SharedMetrics};

pub(crate) mod acks;
mod build;
pub(crate) mod drops;
pub(crate) mod exactly_once;
pub mod shards;

pub(crate) use acks::AckWaiter;
pub(crate) use build::Running;
pub use shards::PipelineTx;
use shards::{Routed, Shards};

pub use crate::metrics::MAX_TYPE_LABELS;

/// What one payload came to.
#[derive(Debug, Clone, Default)]
pub struct IngestSummary {
    /// Events accepted (handed to the aggregator; durable once `wal_seq` is, see
    /// [`Wal::wait_durable`]).
    pub accepted: u64,
    /// What was dropped, in payload order.
    pub dropped: Vec<Drop>,
    /// The whole payload was refused.
    pub rejected: bool,
    /// The WAL record of the payload (when it had accepted events): acknowledge only after
    /// `wal.wait_durable(seq)`.
    pub wal_seq: Option<u64>,
    /// The payload could not be logged (WAL error): nothing of it was accepted.
    pub error: Option<String>,
    /// The sender's token does not reach some of its events' dcs or types: nothing of it was
    /// accepted (HTTP 403, TCP `error forbidden`), nothing logged.
    pub forbidden: Option<String>,
}

impl IngestSummary {
    /// Nothing of the payload was accepted, for `why` (not to be acknowledged: resend).
    fn refused(why: String) -> IngestSummary {
        IngestSummary {
            accepted: 0,
            dropped: Vec::new(),
            rejected: true,
            wal_seq: None,
            error: Some(why),
            forbidden: None,
        }
    }
}

/// A message to the pipeline thread.
pub enum Msg {
    /// One payload from `transport` (`http`, …), answered with its summary.
    Ingest {
        /// Where it came from (`/metrics` label).
        transport: &'static str,
        /// The payload as received.
        payload: axum::body::Bytes,
        /// The sender's reach (its token's dc/type patterns); `None`: any.
        allowed: Option<Arc<sluice_auth::Allowed>>,
        /// When it was queued.
        queued: Instant,
        /// Where the summary goes.
        reply: oneshot::Sender<IngestSummary>,
    },
    /// Events parsed elsewhere (UDP: fire and forget, not logged in the WAL).
    Events {
        /// Parsed events.
        events: Vec<ParsedEvent>,
        /// Their arrival second.
        now: i64,
    },
    /// Drops reported by clients (`POST /v1/drops`): added to the pending drop counts and
    /// written at once (what the store refuses stays pending for the next tick); answered then.
    ClientDrops(drops::PendingDrops, oneshot::Sender<()>),
    /// Flush due epochs; expire partitions when due.
    Tick,
    /// Answered once every message sent before it is handled (its events routed): the first
    /// step of a shutdown, so that no shard stops while another still routes events to it.
    Drain(oneshot::Sender<()>),
    /// Flush everything and stop; answered once the store is flushed.
    Shutdown(oneshot::Sender<()>),
}

pub(crate) fn now_unix() -> i64 {
    sluice_reader::time::now_unix()
}

/// The aggregator's clock: wall time set back by the grace period, in whole seconds. The
/// aggregator runs with a grace of 0 on this clock, so it stores epoch `e` once `e`'s second
/// ended `grace` ago — which allows a grace below one second (`grace_ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlushClock {
    /// The grace period, milliseconds.
    pub grace_ms: i64,
}

impl FlushClock {
    /// The clock now.
    pub fn now(&self) -> i64 {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        self.at_ms(ms)
    }

    /// The clock at Unix time `ms` (milliseconds).
    pub fn at_ms(&self, ms: i64) -> i64 {
        ms.saturating_sub(self.grace_ms).div_euclid(1000)
    }

    /// The clock at the end of arrival second `now` (for WAL replay, which knows only the
    /// second a payload arrived in).
    pub fn at_end_of(&self, now: i64) -> i64 {
        self.at_ms(now.saturating_mul(1000).saturating_add(999))
    }
}

/// The state one shard thread owns.
pub(crate) struct Pipeline {
    /// This shard's index.
    shard: usize,
    /// What the shards share.
    shards: Arc<Shards>,
    /// A flush is due but was not this shard's turn: retried after the next message.
    flush_wanted: bool,
    /// Since when this shard holds a flush turn (handlers send elsewhere meanwhile): it
    /// flushes once its queue is empty, or [`TURN_WAIT`] after taking the turn.
    turn_since: Option<Instant>,
    ingestor: Ingestor,
    aggregator: Aggregator,
    store: Arc<dyn Store>,
    metrics: SharedMetrics,
    expire_every: i64,
    /// An expiry pass is running (on its own thread).
    expiring: Arc<std::sync::atomic::AtomicBool>,
    wal: Arc<Wal>,
    /// The configured dc (drops whose tags are unknown are counted under it).
    dc: String,
    /// Ingest drops (HTTP, TCP) not yet added to the store's counts, per
    /// (epoch, dc, type, subtype) and reason; written once a second (on each tick).
    pending_drops: BTreeMap<(i64, String, String, String), BTreeMap<String, u64>>,
    /// The aggregator's clock (wall time set back by the grace period).
    clock: FlushClock,
    /// The exactly-once bookkeeping of this shard's aggregator over the shared WAL (see
    /// [`sluice_collector::exactly_once`]).
    exactly_once: ExactlyOnce,
    /// The memory budget for pending events (`max_pending_bytes`).
    max_pending_bytes: u64,
    /// Free space and WAL health: whether ingest is available (see [`crate::disk`]); shared by
    /// the shards (shard 0 measures).
    disk: Arc<Mutex<crate::disk::DiskGuard>>,
    /// The substream runner: each stored batch is offered to it (never blocks).
    substreams: Arc<sluice_substreams::Runner>,
    /// This thread's ingest counters, by transport.
    ingest_counters: BTreeMap<&'static str, IngestCounters>,
    /// Told of every payload logged here (attached tails get its events once durable).
    live: Arc<crate::live::LiveHub>,
}

/// With one shard, most time it keeps answering the payloads queued to it before it flushes
/// (with more, a shard holding a flush turn gets no new payloads: it empties its queue first).
const TURN_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// What a shard's loop takes next.
enum Next {
    Routed(Routed),
    Msg(Option<Msg>),
}

impl Pipeline {
    /// Runs until [`Msg::Shutdown`] or until every sender is gone (then flushes too). Events
    /// routed by other shards come first.
    pub fn run(mut self, mut rx: mpsc::Receiver<Msg>, mut routed: mpsc::UnboundedReceiver<Routed>) {
        let rt = match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("sluice-server: pipeline shard {}: {e}", self.shard);
                return;
            }
        };
        let mut next_expire = now_unix();
        loop {
            let next = rt.block_on(async {
                tokio::select! {
                    biased;
                    Some(r) = routed.recv() => Next::Routed(r),
                    m = rx.recv() => Next::Msg(m),
                }
            });
            match next {
                Next::Routed(r) => self.add_routed(r),
                Next::Msg(None) => break,
                Next::Msg(Some(msg)) => match msg {
                    Msg::Ingest {
                        transport,
                        payload,
                        allowed,
                        queued,
                        reply,
                    } => {
                        self.metrics
                            .ingest_queue_seconds
                            .observe(queued.elapsed().as_secs_f64());
                        let summary = self.ingest(transport, &payload, allowed.as_deref());
                        let _ = reply.send(summary);
                    }
                    Msg::Events { events, .. } => {
                        // UDP events were parsed by their receiver: admitted at no bytes of
                        // their own, refused once the budget is full like payloads.
                        let admitted = self.admit(0);
                        if admitted.is_err() || self.disk().why().is_some() {
                            self.shed(events);
                        } else {
                            let parts = split_by_owner(events, self.shards.len());
                            self.route(parts, None, 0);
                        }
                        self.publish_pending();
                        drop(admitted);
                    }
                    Msg::ClientDrops(drops, done) => {
                        self.add_client_drops(drops);
                        self.write_drop_counts();
                        let _ = done.send(());
                    }
                    Msg::Tick => {
                        self.flush_wanted = true;
                        self.write_drop_counts();
                        if self.shard == 0 {
                            self.refresh_disk();
                            let now = now_unix();
                            if now >= next_expire {
                                next_expire = now + self.expire_every;
                                self.expire(now);
                            }
                        }
                    }
                    Msg::Drain(done) => {
                        let _ = done.send(());
                    }
                    Msg::Shutdown(done) => {
                        while let Ok(r) = routed.try_recv() {
                            self.add_routed(r);
                        }
                        self.shutdown();
                        let _ = done.send(());
                        return;
                    }
                },
            }
            if self.flush_wanted && self.turn_since.is_none() && self.shards.try_flush(self.shard) {
                self.turn_since = Some(Instant::now());
            }
            if let Some(since) = self.turn_since {
                // Payloads already queued here are answered before the flush holds the thread.
                if rx.is_empty() || (self.shards.len() == 1 && since.elapsed() >= TURN_WAIT) {
                    self.flush_now();
                }
            }
        }
        while let Ok(r) = routed.try_recv() {
            self.add_routed(r);
        }
        self.shutdown();
    }

    /// The disk guard (shared by the shards).
    pub(super) fn disk(&self) -> MutexGuard<'_, crate::disk::DiskGuard> {
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Flushes due epochs (this shard holds a flush turn, see [`shards`]) and ends the turn.
    fn flush_now(&mut self) {
        self.flush_wanted = false;
        self.turn_since = None;
        let start = Instant::now();
        let report = if self.wal_writable() {
            self.aggregator.flush_due(self.clock.now())
        } else {
            FlushReport::default() // only the pending notes are retried
        };
        self.account(report, start);
        self.shards.flushed(self.shard);
    }

    /// Drops expired partitions and purges groups past their own retention (shard 0, hourly),
    /// on a thread of its own: a purge copies a partition's kept bytes, which must not hold up
    /// this shard's flushes. A pass still running when the next is due is not doubled.
    fn expire(&mut self, now: i64) {
        use std::sync::atomic::Ordering;
        if self.expiring.swap(true, Ordering::AcqRel) {
            return;
        }
        let (store, metrics) = (self.store.clone(), self.metrics.clone());
        let running = self.expiring.clone();
        let finished = self.expiring.clone();
        let spawned = std::thread::Builder::new()
            .name("sluice-expire".into())
            .spawn(move || {
                match store.expire(now) {
                    Ok(r) => {
                        metrics
                            .partitions_expired
                            .inc_by(r.partitions_dropped as u64);
                        metrics.partitions_purged.inc_by(r.partitions_purged as u64);
                    }
                    Err(e) => {
                        eprintln!("sluice-server: expiry failed: {e}");
                        metrics.store_errors.inc();
                    }
                }
                finished.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            eprintln!("sluice-server: expiry not started: {e}");
            running.store(false, Ordering::Release);
        }
    }

    /// Adds events another shard parsed (of groups this one owns); publishes before it
    /// releases them (see [`shards`]).
    fn add_routed(&mut self, r: Routed) {
        let count = r.events.len() as u64;
        self.aggregator
            .add_batch(&r.events, self.clock.now(), r.seq);
        self.publish_status();
        failpoint::hit("route.added");
        self.shards
            .routed_bytes
            .fetch_sub(r.bytes, Ordering::Relaxed);
        self.shards
            .routed_events
            .fetch_sub(count, Ordering::Relaxed);
        if let Some(seq) = r.seq {
            self.shards.release(seq);
        }
        self.publish_pending();
    }

    /// Files `events` (of one payload of `payload_len` bytes; of WAL record `seq` if logged,
    /// already registered in flight for every shard that gets some) with their owners: this
    /// shard's into its aggregator, the others' sent to them.
    fn route(&mut self, parts: Vec<Vec<ParsedEvent>>, seq: Option<u64>, payload_len: usize) {
        let total: usize = parts.iter().map(Vec::len).sum::<usize>().max(1);
        // Events in flight are counted at the encoded size of the events pending now (what the
        // owner will count once it added them), or at their share of the payload before any.
        let (held_bytes, held_events) = (
            self.shards.total(|s| &s.pending_bytes),
            self.shards.total(|s| &s.pending_events),
        );
        let per_event = held_bytes
            .checked_div(held_events)
            .unwrap_or(payload_len as u64 / total as u64);
        for (i, part) in parts.into_iter().enumerate() {
            if part.is_empty() {
                continue;
            }
            if i == self.shard {
                match seq {
                    Some(s) => {
                        self.aggregator.add_logged(part, self.clock.now(), s);
                        self.publish_status();
                        self.shards.release(s);
                    }
                    None => self.aggregator.add(part, self.clock.now()),
                }
                continue;
            }
            let bytes = per_event.saturating_mul(part.len() as u64);
            let count = part.len() as u64;
            self.shards.routed_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.shards
                .routed_events
                .fetch_add(count, Ordering::Relaxed);
            let sent = self.shards.routes[i].send(Routed {
                events: EventBatch::from_events(part),
                seq,
                bytes,
            });
            if sent.is_ok() {
                failpoint::hit("route.sent");
            } else {
                // Only while stopping: the record stays in flight (not checkpointed), so the
                // next start replays these events.
                self.shards.routed_bytes.fetch_sub(bytes, Ordering::Relaxed);
                self.shards
                    .routed_events
                    .fetch_sub(count, Ordering::Relaxed);
            }
        }
    }

    fn shutdown(&mut self) {
        let start = Instant::now();
        self.flush_wanted = false;
        if !self.wal_writable() {
            // Stored now, these events would have no done note: the next start replays them
            // from the WAL instead (exactly once).
            eprintln!(
                "sluice-server: shutdown with the WAL failing: {} events left to the WAL replay at the next start",
                self.aggregator.pending_events()
            );
            return;
        }
        let report = self.aggregator.flush_all(now_unix());
        self.account(report, start);
        self.write_drop_counts();
        if !self.pending_drops.is_empty() {
            eprintln!(
                "sluice-server: shutdown with ingest drop counts not recorded (store errors)"
            );
        }
        if self.aggregator.pending_events() > 0 || self.aggregator.pending_batches() > 0 {
            eprintln!(
                "sluice-server: shutdown with {} events not written (store errors)",
                self.aggregator.pending_events()
            );
        }
    }

    /// Under backpressure, UDP events are dropped: counted per reason `shed` in `/metrics` and
    /// in their second's completeness counts.
    fn shed(&mut self, events: Vec<sluice_collector::ParsedEvent>) {
        self.counters("udp")
            .add_drop(DropReason::Shed, events.len() as u64);
        for e in events {
            *self
                .pending_drops
                .entry((e.epoch, e.dc, e.type_, e.subtype))
                .or_default()
                .entry(DropReason::Shed.as_str().to_string())
                .or_default() += 1;
        }
    }

    fn ingest(
        &mut self,
        transport: &'static str,
        payload: &[u8],
        allowed: Option<&sluice_auth::Allowed>,
    ) -> IngestSummary {
        let now = now_unix();
        // Held until this payload's events are published as pending or in flight (below).
        let _admitted = match self.admit(payload.len() as u64) {
            Ok(a) => a,
            Err(why) => {
                // Refused before parsing: the sender gets an error (503 / TCP `error`) and keeps
                // the payload to retry; nothing of it is logged or counted as stored.
                self.metrics.payloads_shed.inc();
                self.metrics.backpressure.set(1);
                return IngestSummary::refused(why);
            }
        };
        let refused = self.disk().refuse();
        if let Some(why) = refused {
            // Refused before parsing, as under backpressure: nothing of it is logged or counted.
            self.metrics.payloads_refused_unavailable.inc();
            if self.metrics.disk_unavailable.get() == 0 {
                // `/healthz` says so from the first refusal, not from the next tick.
                self.metrics.set_unavailable(self.disk().why());
            }
            return IngestSummary::refused(format!("unavailable: {why}; retry later"));
        }
        let mut out = self.ingestor.ingest(payload, now);
        failpoint::hit("ingest.parsed");
        if let Some(a) = allowed {
            // Refused whole, before the WAL: a replay re-parses the payload without its token.
            if let Some(e) = out.events.iter().find(|e| !a.allows(&e.dc, &e.type_)) {
                self.metrics
                    .auth_refused
                    .with_label_values(&[transport, "types"])
                    .inc();
                return IngestSummary {
                    forbidden: Some(format!(
                        "this token does not reach dc {:?} type {:?}; nothing of the payload was accepted",
                        e.dc, e.type_
                    )),
                    ..IngestSummary::default()
                };
            }
        }
        // Log only payloads with accepted events (a wholly rejected one has none); replay
        // reproduces the same events from (payload, now).
        let mut wal_seq = None;
        let n = self.shards.len();
        let owner_of: Vec<usize> = if n > 1 {
            shards::owners(&out.events, n)
        } else {
            Vec::new()
        };
        if !out.events.is_empty() {
            let owners = if n > 1 {
                let mut seen = vec![false; n];
                owner_of.iter().for_each(|&i| seen[i] = true);
                seen.iter().filter(|s| **s).count()
            } else {
                1
            };
            // Taken before the append: the hub releases no record this append could precede.
            let live = self.live.reserve();
            match self.shards.append(&self.wal, payload, now, owners) {
                Ok(seq) => {
                    failpoint::hit("ingest.logged");
                    live.publish(seq, &out.events);
                    wal_seq = Some(seq);
                }
                Err(e) => {
                    drop(live);
                    // Logged by the disk guard (once, not per payload).
                    let mut disk = self.disk();
                    disk.failed(e.to_string());
                    self.metrics.set_unavailable(disk.why());
                    drop(disk);
                    self.metrics.wal_errors.inc();
                    return IngestSummary::refused(format!("unavailable: {e}; retry later"));
                }
            }
        }
        self.count_in(transport, &out);
        for d in &out.dropped {
            self.note_drop(d, now);
        }
        let summary = IngestSummary {
            accepted: out.events.len() as u64,
            rejected: out.payload_rejected().is_some(),
            dropped: out.dropped,
            wal_seq,
            error: None,
            forbidden: None,
        };
        if let Some(seq) = wal_seq {
            self.metrics.wal_appends.inc();
            let events = std::mem::take(&mut out.events);
            let parts = if n > 1 {
                let mut parts: Vec<Vec<ParsedEvent>> = (0..n).map(|_| Vec::new()).collect();
                for (e, &i) in events.into_iter().zip(&owner_of) {
                    parts[i].push(e);
                }
                parts
            } else {
                vec![events]
            };
            self.route(parts, Some(seq), payload.len());
        }
        self.publish_pending();
        summary
    }

    /// Counts one payload's outcome in `/metrics`: payloads, drops, events by type (runs of
    /// one type, the common case, cost one add).
    fn count_in(&mut self, transport: &'static str, out: &sluice_collector::IngestOutcome) {
        let mut d = sluice_collector::DropCounters::new();
        d.add(out);
        let counters = self.counters(transport);
        counters.add_drops(&d);
        let mut events = out.events.iter();
        let Some(first) = events.next() else { return };
        let (mut type_, mut run) = (first.type_.as_str(), 1);
        for e in events {
            if e.type_ == type_ {
                run += 1;
            } else {
                counters.add_events(type_, run);
                (type_, run) = (e.type_.as_str(), 1);
            }
        }
        counters.add_events(type_, run);
    }

    /// This thread's ingest counters of `transport`.
    fn counters(&mut self, transport: &'static str) -> &mut IngestCounters {
        self.ingest_counters
            .entry(transport)
            .or_insert_with(|| IngestCounters::new(transport, self.metrics.clone()))
    }

    /// Publishes what this shard's aggregator holds ([`publish_status`](Self::publish_status))
    /// and the totals over shards to `/metrics`.
    pub(crate) fn publish_pending(&self) {
        self.publish_status();
        let sh = &self.shards;
        let _latest = sh.publish.lock().unwrap_or_else(|e| e.into_inner());
        let events = sh.pending_events();
        self.metrics.pending_events.set(as_gauge(events));
        self.metrics.pending_bytes.set(as_gauge(sh.pending_bytes()));
        let waiting = events > 0 || sh.total(|s| &s.pending_batches) > 0;
        self.metrics.set_waiting(waiting, now_unix());
    }

    /// Publishes what this shard's aggregator holds, for the other shards (the oldest pending
    /// WAL record only ever lower: see [`shards`]) and for the totals.
    pub(crate) fn publish_status(&self) {
        let a = &self.aggregator;
        let st = &self.shards.status[self.shard];
        st.min_seq
            .fetch_min(a.min_pending_seq().unwrap_or(u64::MAX), Ordering::SeqCst);
        let set = |f: &std::sync::atomic::AtomicU64, v: u64| f.store(v, Ordering::Relaxed);
        set(&st.pending_events, a.pending_events());
        set(&st.pending_bytes, a.pending_bytes());
        set(&st.pending_batches, a.pending_batches() as u64);
        set(&st.spooled_batches, a.spooled_batches() as u64);
        set(&st.spooled_bytes, a.spooled_bytes());
        set(&st.spooled_events, a.spooled_events());
        set(&st.memory_batches, a.memory_batches() as u64);
        set(&st.spare_bytes, a.spare_bytes());
        st.backpressured
            .store(a.is_backpressured(), Ordering::Relaxed);
    }

    /// Admits input of `bytes` (backpressure refuses it: the reason): refused while a spool is
    /// full and the store fails, or while the pending events of all shards, those in flight
    /// between shards and the payloads being admitted reach the memory budget
    /// (`max_pending_bytes`, one for every shard: see [`Shards::admit`]).
    fn admit(&self, bytes: u64) -> Result<shards::Admission, String> {
        if self.shards.backpressured() {
            return Err(format!(
                "backpressure: the store is failing and the spool is full ({} bytes); retry later",
                self.shards.total(|s| &s.spooled_bytes)
            ));
        }
        self.shards.admit(bytes, self.max_pending_bytes).map_err(|held| {
            format!(
                "backpressure: {held} bytes of events pending in memory (max_pending_bytes {}); retry later",
                self.max_pending_bytes
            )
        })
    }
}

/// `events` split by owning shard (index = shard), in their order.
fn split_by_owner(events: Vec<ParsedEvent>, n: usize) -> Vec<Vec<ParsedEvent>> {
    if n <= 1 {
        return vec![events];
    }
    let owners = shards::owners(&events, n);
    let mut parts: Vec<Vec<ParsedEvent>> = (0..n).map(|_| Vec::new()).collect();
    for (e, i) in events.into_iter().zip(owners) {
        parts[i].push(e);
    }
    parts
}

/// Hands `payload` to the pipeline; the receiver gets its summary (not yet durable).
pub(crate) async fn submit(
    tx: &PipelineTx,
    transport: &'static str,
    payload: axum::body::Bytes,
    allowed: Option<Arc<sluice_auth::Allowed>>,
) -> Result<oneshot::Receiver<IngestSummary>, IngestError> {
    let (reply, rx) = oneshot::channel();
    tx.send(Msg::Ingest {
        transport,
        payload,
        allowed,
        queued: Instant::now(),
        reply,
    })
    .await?;
    Ok(rx)
}

/// Waits for the summary of a [`submit`]ted payload, then for its WAL record to be durable:
/// once this returns `Ok` the payload may be acknowledged. `Err`: nothing may be acknowledged
/// (pipeline stopping, WAL error).
pub(crate) async fn durable(
    rx: oneshot::Receiver<IngestSummary>,
    acks: &AckWaiter,
    metrics: &SharedMetrics,
) -> Result<IngestSummary, IngestError> {
    let summary = rx.await.map_err(|_| IngestError::Stopping)?;
    if let Some(e) = &summary.error {
        return Err(IngestError::Refused(e.clone()));
    }
    if let Some(seq) = summary.wal_seq {
        let start = Instant::now();
        acks.wait(seq).await?;
        failpoint::hit("ack.durable");
        metrics
            .ingest_durable_seconds
            .observe(start.elapsed().as_secs_f64());
    }
    Ok(summary)
}
