//! The pipeline sharded over N threads (`pipeline_threads`): what the shards share and how work
//! reaches them.
//!
//! Contracts:
//! - **Groups have one owner.** Every (dc, type, subtype) belongs to one shard ([`shard_of`]), so
//!   each second of a group is still one blob (chunk numbering, late chunks, done notes and the
//!   spool stay per aggregator as in `sluice_collector::aggregate`). Each shard has its own
//!   aggregator and spool directory ([`spool_dir`]).
//! - **Any shard takes a payload.** Handlers hand a payload to the least busy shard
//!   ([`PipelineTx`]: never one that is flushing, when another is free; then the one with the
//!   most free queue room). That shard parses it, logs it in the (shared) WAL, keeps the events
//!   of its own groups and sends the others to their owners ([`Routed`], an unbounded channel:
//!   two shards never wait for each other, and the events in flight count against
//!   `max_pending_bytes`), each owner's as one `EventBatch` (a few buffers: freeing five blocks
//!   per event on the other core cost more than copying them once).
//! - **One memory budget.** A payload is admitted against `max_pending_bytes` for all shards
//!   together ([`Shards::admit`]): what every aggregator holds, what is in flight between shards
//!   and what other shards are admitting now, so N shards admitting at once cannot each fill it.
//! - **Flushes take turns.** At most `max(1, N - 1)` shards flush at a time ([`Shards::try_flush`];
//!   a turn ending is kept for a shard that waited, so one with long flushes cannot starve the rest),
//!   so with N ≥ 2 a shard is always free to take payloads: an acknowledgement never waits for a
//!   flush (with one thread, a flush of one second of 230k events held the single pipeline thread
//!   245 ms, which was the whole p99 of `POST /v1/events`).
//! - **Checkpoint = min over shards.** A WAL record may be checkpointed once no shard holds its
//!   events. A record is *in flight* from its append until every shard it was routed to has
//!   added its events and published its oldest pending record ([`Shards::checkpoint_floor`]):
//!   the append and the registration happen under one lock, a shard publishes before it releases.
//!   A shard publishes a record as no longer pending only after the store sync that made its
//!   batch durable (`Pipeline::account`).
//! - **Replay at start** routes each replayed event to its group's shard (the same rule).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_collector::wal::Wal;
use sluice_collector::{EventBatch, ParsedEvent};
use tokio::sync::mpsc;

use super::Msg;
use crate::error::IngestError;

/// The shard owning group (`dc`, `type_`, `subtype`) among `n`: a fixed hash (the same in every
/// run, so a restart with the same `n` keeps the owners; a different `n` is fine too: chunk
/// numbers continue after the store's index).
pub fn shard_of(dc: &str, type_: &str, subtype: &str, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    // FxHash (no random seed, so stable across runs) rather than SipHash: this runs for each
    // run of one group's events in every payload (2.5 % of a two-shard server's CPU with SipHash).
    let mut h = rustc_hash::FxHasher::default();
    (dc, type_, subtype).hash(&mut h);
    // The high bits: FxHash's low bits spread less.
    ((u128::from(h.finish()) * n as u128) >> 64) as usize
}

/// The owner shard of each of `events` among `n` ([`shard_of`]), hashing once per run of events
/// of one group (payloads are mostly such runs).
pub fn owners(events: &[ParsedEvent], n: usize) -> Vec<usize> {
    let mut last: Option<(&ParsedEvent, usize)> = None;
    events
        .iter()
        .map(|e| match last {
            Some((p, i)) if p.dc == e.dc && p.type_ == e.type_ && p.subtype == e.subtype => i,
            _ => {
                let i = shard_of(&e.dc, &e.type_, &e.subtype, n);
                last = Some((e, i));
                i
            }
        })
        .collect()
}

/// The spool directory of shard `i`: the configured one for shard 0 (a spool left by an
/// unsharded run is replayed there), `shard-<i>` inside it for the others (the spool reads only
/// its own `spool-*.log` files).
pub fn spool_dir(base: &Path, i: usize) -> PathBuf {
    if i == 0 {
        base.to_path_buf()
    } else {
        base.join(format!("shard-{i}"))
    }
}

/// The highest shard whose spool directory under `base` still holds segments (left by a run
/// with more shards): a start runs at least that many shards + 1, so nothing spooled is left
/// behind.
pub fn spooled_shards(base: &Path) -> usize {
    let Ok(dir) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut highest = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(i) = name
            .to_str()
            .and_then(|n| n.strip_prefix("shard-"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let holds = std::fs::read_dir(e.path()).is_ok_and(|d| {
            d.flatten()
                .any(|f| f.file_name().to_string_lossy().starts_with("spool-"))
        });
        if holds {
            highest = highest.max(i);
        }
    }
    highest
}

/// Events sent by the shard that parsed them to the shard that owns their groups.
pub(crate) struct Routed {
    /// The events (all of groups the receiver owns), in one batch: the receiver frees a few
    /// buffers, not five blocks per event allocated on the sender's thread.
    pub events: EventBatch,
    /// Their WAL record (`None`: UDP, not logged).
    pub seq: Option<u64>,
    /// Their share of the payload's bytes (counted in flight against `max_pending_bytes`).
    pub bytes: u64,
}

/// What one shard publishes for the others and for `/metrics`.
#[derive(Default)]
pub(crate) struct ShardStatus {
    /// The oldest WAL record this shard holds events of that are not durably stored or spooled
    /// (`u64::MAX`: none).
    pub min_seq: AtomicU64,
    pub pending_events: AtomicU64,
    pub pending_bytes: AtomicU64,
    pub pending_batches: AtomicU64,
    pub spooled_batches: AtomicU64,
    pub spooled_bytes: AtomicU64,
    pub spooled_events: AtomicU64,
    pub memory_batches: AtomicU64,
    pub spare_bytes: AtomicU64,
    pub backpressured: AtomicBool,
    /// Flushing now (handlers send payloads elsewhere).
    pub flushing: AtomicBool,
}

/// WAL records in flight between shards, and appends under way (see [`Shards::append`]).
#[derive(Default)]
struct InFlight {
    /// Record seq → shards still to add its events.
    records: BTreeMap<u64, usize>,
    /// Appends under way: a number at or below their record's → how many.
    reserved: BTreeMap<u64, usize>,
    /// The highest record registered.
    last: u64,
}

/// State shared by the shards.
pub(crate) struct Shards {
    pub status: Vec<ShardStatus>,
    /// Each shard's channel for [`Routed`] events.
    pub routes: Vec<mpsc::UnboundedSender<Routed>>,
    /// WAL records whose events are not yet in (and published by) every shard they go to,
    /// and appends under way.
    in_flight: Mutex<InFlight>,
    /// Bytes and events of [`Routed`] events sent and not yet added.
    pub routed_bytes: AtomicU64,
    pub routed_events: AtomicU64,
    /// Bytes of payloads admitted and still being parsed and routed ([`Shards::admit`]).
    admitting: AtomicU64,
    /// Held while the totals are summed and set in `/metrics`: the last shard to publish sets
    /// the latest totals (no stale sum overwrites a fresh one).
    pub publish: Mutex<()>,
    /// Shards flushing now, and how many may.
    flushers: AtomicUsize,
    max_flushers: usize,
    /// Shards that asked for a flush turn and did not get one.
    waiting: Vec<AtomicBool>,
    /// The shard the last free turn is kept for (`usize::MAX`: none): handed on by
    /// [`Shards::flushed`] to a waiting shard, so a shard whose flushes are long (a store timing
    /// out) cannot take every turn again at once and starve the others.
    next_turn: AtomicUsize,
}

impl Shards {
    /// The shared state of `routes.len()` shards.
    pub fn new(routes: Vec<mpsc::UnboundedSender<Routed>>) -> Shards {
        let n = routes.len();
        Shards {
            status: (0..n)
                .map(|_| ShardStatus {
                    min_seq: AtomicU64::new(u64::MAX),
                    ..ShardStatus::default()
                })
                .collect(),
            routes,
            in_flight: Mutex::new(InFlight::default()),
            routed_bytes: AtomicU64::new(0),
            routed_events: AtomicU64::new(0),
            admitting: AtomicU64::new(0),
            publish: Mutex::new(()),
            flushers: AtomicUsize::new(0),
            max_flushers: n.saturating_sub(1).max(1),
            waiting: (0..n).map(|_| AtomicBool::new(false)).collect(),
            next_turn: AtomicUsize::new(usize::MAX),
        }
    }

    /// How many shards.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    fn in_flight(&self) -> MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `payload` to `wal` and registers the record as in flight to `shards` shards. No
    /// checkpoint sees the record appended but not registered: before the append a reservation
    /// holds the floor at a number the record's cannot be below (one past the last registered:
    /// the log numbers records in order). The lock is not held during the append itself — a
    /// payload's write took it for as long as the copy into the page cache, and the other
    /// shards' releases waited behind it.
    pub fn append(
        &self,
        wal: &Wal,
        payload: &[u8],
        now: i64,
        shards: usize,
    ) -> sluice_collector::wal::Result<u64> {
        let reserved = {
            let mut t = self.in_flight();
            let at = t.last + 1;
            *t.reserved.entry(at).or_insert(0) += 1;
            at
        };
        let appended = wal.append(payload, now);
        let mut t = self.in_flight();
        if let Some(n) = t.reserved.get_mut(&reserved) {
            *n -= 1;
            if *n == 0 {
                t.reserved.remove(&reserved);
            }
        }
        let seq = appended?;
        t.records.insert(seq, shards);
        t.last = t.last.max(seq);
        Ok(seq)
    }

    /// One shard added (and published) its events of record `seq`.
    pub fn release(&self, seq: u64) {
        let mut t = self.in_flight();
        if let Some(left) = t.records.get_mut(&seq) {
            *left -= 1;
            if *left == 0 {
                t.records.remove(&seq);
            }
        }
    }

    /// The oldest WAL record some shard may still need (every record below it may be
    /// checkpointed): the oldest in flight (or the next one to be appended), then the oldest
    /// each shard published — read in that order, since a shard publishes before it releases.
    pub fn checkpoint_floor(&self, wal: &Wal) -> u64 {
        let floor = {
            let t = self.in_flight();
            let first = |m: &BTreeMap<u64, usize>| m.keys().next().copied();
            match (first(&t.records), first(&t.reserved)) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                // Nothing under way: every record appended so far (done notes too) may go.
                (None, None) => wal.last_seq() + 1,
            }
        };
        self.status
            .iter()
            .map(|s| s.min_seq.load(Ordering::SeqCst))
            .fold(floor, u64::min)
    }

    /// Takes a flush turn for shard `i` (false: too many shards flush now, or the last free
    /// turn is kept for a shard that waited; try again later).
    pub fn try_flush(&self, i: usize) -> bool {
        let kept_for = self.next_turn.load(Ordering::SeqCst);
        let mut cur = self.flushers.load(Ordering::SeqCst);
        loop {
            let kept = kept_for != usize::MAX && kept_for != i && cur + 1 >= self.max_flushers;
            if cur >= self.max_flushers || kept {
                self.waiting[i].store(true, Ordering::SeqCst);
                return false;
            }
            match self
                .flushers
                .compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        self.waiting[i].store(false, Ordering::SeqCst);
        let _ = self
            .next_turn
            .compare_exchange(i, usize::MAX, Ordering::SeqCst, Ordering::SeqCst);
        self.status[i].flushing.store(true, Ordering::SeqCst);
        true
    }

    /// Ends shard `i`'s flush turn; the next free turn is kept for the first shard after `i`
    /// that waited for one.
    pub fn flushed(&self, i: usize) {
        let n = self.len();
        if let Some(j) = (1..n)
            .map(|k| (i + k) % n)
            .find(|&j| self.waiting[j].load(Ordering::SeqCst))
        {
            self.next_turn.store(j, Ordering::SeqCst);
        }
        self.status[i].flushing.store(false, Ordering::SeqCst);
        self.flushers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sum of one status field over the shards.
    pub fn total(&self, f: impl Fn(&ShardStatus) -> &AtomicU64) -> u64 {
        self.status
            .iter()
            .map(|s| f(s).load(Ordering::Relaxed))
            .sum()
    }

    /// Events pending in memory over all shards, with those in flight between shards.
    pub fn pending_events(&self) -> u64 {
        self.total(|s| &s.pending_events) + self.routed_events.load(Ordering::Relaxed)
    }

    /// Bytes of events pending in memory over all shards, with those in flight between shards.
    pub fn pending_bytes(&self) -> u64 {
        self.total(|s| &s.pending_bytes) + self.routed_bytes.load(Ordering::Relaxed)
    }

    /// Admits a payload of `bytes` against the one memory budget `max_pending_bytes` shared by
    /// every shard: the events the aggregators hold, those in flight between shards, and the
    /// payloads other shards admitted and are still parsing. The reservation is taken before the
    /// check (so two shards admitting at once see each other) and held until the guard drops,
    /// after the payload's events are published as pending or in flight. `Err`: the bytes
    /// counted, over the budget.
    pub fn admit(self: &Arc<Self>, bytes: u64, max_pending_bytes: u64) -> Result<Admission, u64> {
        let others = self.admitting.fetch_add(bytes, Ordering::SeqCst);
        let admission = Admission {
            shards: self.clone(),
            bytes,
        };
        let held = self.pending_bytes() + others;
        if held >= max_pending_bytes {
            return Err(held);
        }
        Ok(admission)
    }

    /// Whether some shard's spool is full while its store fails.
    pub fn backpressured(&self) -> bool {
        self.status
            .iter()
            .any(|s| s.backpressured.load(Ordering::Relaxed))
    }
}

/// The handlers' side of the pipeline: one bounded queue per shard; a payload goes to the least
/// busy shard (see the [module docs](self)).
#[derive(Clone)]
pub struct PipelineTx {
    txs: Arc<Vec<mpsc::Sender<Msg>>>,
    shards: Arc<Shards>,
    next: Arc<AtomicUsize>,
}

impl PipelineTx {
    pub(crate) fn new(txs: Vec<mpsc::Sender<Msg>>, shards: Arc<Shards>) -> PipelineTx {
        PipelineTx {
            txs: Arc::new(txs),
            shards,
            next: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The shard for the next payload: not flushing if any is free, then the most queue room,
    /// round robin among equals.
    fn pick(&self) -> &mpsc::Sender<Msg> {
        let n = self.txs.len();
        if n == 1 {
            return &self.txs[0];
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<(bool, usize, usize)> = None;
        for k in 0..n {
            let i = (start + k) % n;
            let free = !self.shards.status[i].flushing.load(Ordering::Relaxed);
            let room = self.txs[i].capacity();
            if best.is_none_or(|(bf, br, _)| (free, room) > (bf, br)) {
                best = Some((free, room, i));
            }
        }
        &self.txs[best.map_or(0, |b| b.2)]
    }

    /// Sends `msg` (a payload or UDP events) to a shard; `Err` once the pipeline stopped.
    pub(crate) async fn send(&self, msg: Msg) -> Result<(), IngestError> {
        self.pick()
            .send(msg)
            .await
            .map_err(|_| IngestError::Stopping)
    }

    /// [`send`](Self::send) from a plain thread (UDP).
    pub(crate) fn blocking_send(&self, msg: Msg) -> Result<(), IngestError> {
        self.pick()
            .blocking_send(msg)
            .map_err(|_| IngestError::Stopping)
    }

    /// Whether the pipeline stopped.
    pub fn is_closed(&self) -> bool {
        self.txs.iter().any(|t| t.is_closed())
    }

    /// Sends `make()` to every shard (ticks, shutdown), in shard order.
    pub(crate) async fn broadcast(&self, mut make: impl FnMut() -> Msg) -> bool {
        let mut all = true;
        for tx in self.txs.iter() {
            all &= tx.send(make()).await.is_ok();
        }
        all
    }
}

/// A payload admitted by [`Shards::admit`]: its bytes count against the budget until dropped.
pub(crate) struct Admission {
    shards: Arc<Shards>,
    bytes: u64,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.shards
            .admitting
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_stable_and_spread() {
        assert_eq!(shard_of("a", "WEB", "www", 1), 0);
        let mut seen = [0usize; 2];
        for dc in ["ams1", "ams4", "lhr2", "fra3"] {
            for (t, s) in [
                ("WEB", "www"),
                ("WEB", "api"),
                ("WEB", "mobile"),
                ("CRON", ""),
                ("LB", "haproxy"),
            ] {
                let i = shard_of(dc, t, s, 2);
                assert_eq!(i, shard_of(dc, t, s, 2));
                seen[i] += 1;
            }
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    }

    #[test]
    fn owners_of_runs_are_each_events_owner() {
        let event = |dc: &str, t: &str, s: &str| ParsedEvent {
            epoch: 1,
            dc: dc.into(),
            type_: t.into(),
            subtype: s.into(),
            event: sluice_collector::EventBody::Value(sereal::Value::Undef),
        };
        let mut events = Vec::new();
        for (k, dc) in ["ams1", "ams4", "lhr2", "fra3"].iter().enumerate() {
            for t in ["WEB", "CRON", "LB"] {
                // Runs of one group, then groups interleaved, then one differing only in subtype.
                for _ in 0..k + 1 {
                    events.push(event(dc, t, "www"));
                }
                events.push(event(dc, t, "api"));
                events.push(event("ams1", t, "www"));
            }
        }
        for n in [1, 2, 3, 5] {
            let expected: Vec<usize> = events
                .iter()
                .map(|e| shard_of(&e.dc, &e.type_, &e.subtype, n))
                .collect();
            assert_eq!(owners(&events, n), expected, "{n} shards");
        }
    }

    #[test]
    fn flush_turns_pass_to_the_shard_that_waited() {
        let routes = (0..2).map(|_| mpsc::unbounded_channel().0).collect();
        let shards = Shards::new(routes);
        assert!(shards.try_flush(0));
        assert!(!shards.try_flush(1), "one turn at a time with 2 shards");
        shards.flushed(0);
        // Shard 0 asks again at once: the turn is kept for shard 1, which waited.
        assert!(!shards.try_flush(0));
        assert!(shards.try_flush(1));
        shards.flushed(1);
        // Shard 0 waited meanwhile: its turn now, not shard 1's.
        assert!(!shards.try_flush(1));
        assert!(shards.try_flush(0));
        shards.flushed(0);
        // Shard 1 waited; then nobody waits: whoever asks first.
        assert!(shards.try_flush(1));
        shards.flushed(1);
        assert!(shards.try_flush(1));
        shards.flushed(1);

        // With 3 shards (2 turns), the last free turn is kept, the other one is not.
        let routes = (0..3).map(|_| mpsc::unbounded_channel().0).collect();
        let shards = Shards::new(routes);
        assert!(shards.try_flush(0));
        assert!(shards.try_flush(1));
        assert!(!shards.try_flush(2));
        shards.flushed(0);
        assert!(!shards.try_flush(0), "the free turn is kept for shard 2");
        assert!(shards.try_flush(2));
    }

    #[test]
    fn checkpoint_floor_holds_in_flight_records() {
        let dir = std::env::temp_dir().join(format!("sluice-shards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (wal, _) = Wal::open(&dir, Default::default()).unwrap();
        let (a, _ra) = mpsc::unbounded_channel();
        let (b, _rb) = mpsc::unbounded_channel();
        let shards = Shards::new(vec![a, b]);
        assert_eq!(shards.checkpoint_floor(&wal), 1);
        let s1 = shards.append(&wal, b"{}", 1, 2).unwrap();
        let s2 = shards.append(&wal, b"{}", 1, 1).unwrap();
        assert_eq!(shards.checkpoint_floor(&wal), s1);
        shards.release(s1);
        assert_eq!(shards.checkpoint_floor(&wal), s1);
        shards.status[1].min_seq.store(s1, Ordering::SeqCst);
        shards.release(s1);
        shards.release(s2);
        assert_eq!(shards.checkpoint_floor(&wal), s1);
        shards.status[1].min_seq.store(u64::MAX, Ordering::SeqCst);
        assert_eq!(shards.checkpoint_floor(&wal), s2 + 1);
        assert!(shards.try_flush(0));
        assert!(!shards.try_flush(1));
        shards.flushed(0);
        assert!(shards.try_flush(1));
        drop(wal);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Appends run without the lock: while one is under way, no checkpoint floor may pass its
    /// record (floors only grow past a record once it is released).
    #[test]
    fn no_floor_passes_a_record_being_appended() {
        use std::sync::atomic::AtomicBool;
        let dir = std::env::temp_dir().join(format!("sluice-shards-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (wal, _) = Wal::open(&dir, Default::default()).unwrap();
        let wal = Arc::new(wal);
        let (a, _ra) = mpsc::unbounded_channel();
        let (b, _rb) = mpsc::unbounded_channel();
        let shards = Arc::new(Shards::new(vec![a, b]));
        let highest_floor = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let checker = {
            let (shards, wal, highest, stop) = (
                shards.clone(),
                wal.clone(),
                highest_floor.clone(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    highest.fetch_max(shards.checkpoint_floor(&wal), Ordering::SeqCst);
                }
            })
        };
        let appenders: Vec<_> = (0..2)
            .map(|_| {
                let (shards, wal, highest) = (shards.clone(), wal.clone(), highest_floor.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let seq = shards.append(&wal, b"{\"type\":\"T\"}", 1, 1).unwrap();
                        // Every floor computed so far (before this record was released).
                        let floor = highest.load(Ordering::SeqCst);
                        assert!(floor <= seq, "floor {floor} passed record {seq} in flight");
                        shards.release(seq);
                    }
                })
            })
            .collect();
        for t in appenders {
            t.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        checker.join().unwrap();
        assert_eq!(shards.checkpoint_floor(&wal), wal.last_seq() + 1);
        drop(wal);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
