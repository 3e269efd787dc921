//! The live hub: acknowledged payloads handed to attached tails from memory, in WAL order,
//! before their second is flushed.
//!
//! Contracts:
//! - **Exact.** A [`LiveSubscription`] taken at `start` receives every payload record with a
//!   sequence number above `start`, in increasing order, each once it is durable (what an
//!   acknowledgement waits for), and none at or below `start`. A tail's cursor then says
//!   "records (start, last] were delivered live", and skips exactly those records' events in
//!   the stored chunks (their WAL origins say which records they hold).
//! - **In WAL order despite concurrent appends.** Shards append payloads concurrently, so
//!   records reach the hub out of order; a record is released only once no append under way can
//!   still produce a lower number ([`order`]), and once [`Wal::wait_durable`] covered it — on the
//!   hub's own thread, which also builds the documents and hands them out: the ingest thread
//!   only copies a payload's events, and only while some tail is attached.
//! - **Nothing without tails.** With no subscriber a payload costs the hub one uncontended
//!   lock (its reservation) and nothing is copied or built. A record appended while none was
//!   attached is below the `start` of any later subscription, so it is never owed to anyone.
//! - **Ingest never waits for a tail.** Each subscription has a bounded queue
//!   (`tail_live_queue_records`); a tail whose queue is full is dropped with a reason (it
//!   resumes from the store with its cursor). A WAL failure drops every tail (their records'
//!   durability is unknown); so does shutdown.
//! - **Only what the WAL logs.** Payloads logged through `Shards::append` (HTTP, TCP, OTLP logs,
//!   statsd over TCP, in-process) come here; UDP datagrams and statsd over UDP are not logged,
//!   never come here, and are delivered from the store (their chunks' origins are 0).
//! - **Off with the `original` profile**: its chunks carry no WAL origins, so a tail could not
//!   skip what it got live; a subscription then ends at once with that reason.
//!
//! Files: [`order`] (the release order), `doc` (a record's [`LiveDoc`]), `subscription` (a
//! tail's end).

mod doc;
pub(crate) mod order;
mod subscription;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use sluice_blob::Profile;
use sluice_collector::wal::Wal;
use sluice_collector::ParsedEvent;
use sluice_reader::LiveDoc;

pub use subscription::{LiveEnded, LiveSubscription};

use crate::metrics::{as_gauge, SharedMetrics};
use order::Order;
use subscription::EndReason;

/// Default bound of a subscription's queue, in records: at 10 k events/s in payloads of ~100
/// events (100 records/s) it holds 10 s of a tail that does not read, and the records are shared
/// between tails (one `Arc` each), so a stalled tail holds at most ~10 s of documents.
pub const DEFAULT_QUEUE_RECORDS: usize = 1024;

/// When WAL records are durable, as the hub waits for it (the WAL; a stand-in in tests).
pub(crate) trait Durability: Send + Sync {
    /// Returns once at least record `first` (and every one before it) is durable, with the
    /// highest record up to `upto` that is; `Err`: `first` may not be durable.
    fn wait_durable(&self, first: u64, upto: u64) -> Result<u64, String>;
}

impl Durability for Wal {
    /// The WAL makes `upto` durable itself (one group commit: `wait_durable` fsyncs what is
    /// not yet), so waiting for it costs no more than waiting for `first`.
    fn wait_durable(&self, _first: u64, upto: u64) -> Result<u64, String> {
        Wal::wait_durable(self, upto)
            .map(|()| upto)
            .map_err(|e| e.to_string())
    }
}

/// Settings of a [`LiveHub`].
#[derive(Debug, Clone)]
pub(crate) struct LiveSettings {
    /// Bound of each subscription's queue (`tail_live_queue_records`).
    pub queue_records: usize,
    /// The server's blob profile (`original`: the hub is off).
    pub profile: Profile,
    /// The server's collector id.
    pub collector: Option<String>,
}

/// Hands acknowledged payload records to attached tails (see the [module docs](self)). Shared
/// by the pipeline (which tells it of each record) and the HTTP handlers (`AppState::live`).
pub struct LiveHub {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveHub")
            .field("subscribers", &self.subscribers())
            .finish()
    }
}

/// What the hub's thread, the shards and the subscriptions share.
pub(crate) struct Inner {
    state: Mutex<State>,
    /// Wakes the hub's thread: a record held, a reservation ended, stop.
    wake: Condvar,
    /// Subscribers attached now: the ingest thread's lock-free check before copying events.
    attached: AtomicUsize,
    durability: Arc<dyn Durability>,
    metrics: SharedMetrics,
    queue_records: usize,
    collector: Option<String>,
    /// Records whose events were copied for tails (what "no subscriber, no cost" is tested by).
    captured: AtomicU64,
    /// The blob profile's chunks carry no origins (`original`): no tail can go live.
    off: bool,
}

/// Under [`Inner::state`].
struct State {
    order: Order,
    subscribers: Vec<Subscriber>,
    next_id: u64,
    /// New subscriptions end at once with this reason (profile `original`, shutdown).
    closed: Option<String>,
    /// The hub's thread is to end.
    stop: bool,
}

/// The hub's end of one subscription.
struct Subscriber {
    id: u64,
    start: u64,
    tx: SyncSender<Arc<LiveDoc>>,
    ended: EndReason,
}

impl LiveHub {
    /// A hub after WAL record `last` (the log's last record at start: replayed records are
    /// read from the store), waiting for `durability`; starts its thread.
    pub(crate) fn start(
        settings: LiveSettings,
        durability: Arc<dyn Durability>,
        last: u64,
        metrics: SharedMetrics,
    ) -> std::io::Result<LiveHub> {
        let off = settings.profile == Profile::Original;
        let closed = off.then(|| {
            "live tail is off: the blob profile is `original`, whose chunks carry no WAL \
             origins, so a tail could not skip the events it got live; events come from the \
             store"
                .to_string()
        });
        // Every reason shows from the start (at 0), so a dashboard's rate has a series.
        for reason in ["slow", "wal", "shutdown"] {
            metrics.tail_live_dropped.with_label_values(&[reason]);
        }
        let mut docs = doc::DocBuilder::new(settings.profile)
            .map_err(|e| std::io::Error::other(format!("live hub: {e}")))?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                order: Order::after(last),
                subscribers: Vec::new(),
                next_id: 1,
                closed,
                stop: false,
            }),
            wake: Condvar::new(),
            attached: AtomicUsize::new(0),
            durability,
            metrics,
            queue_records: settings.queue_records.max(1),
            collector: settings.collector,
            captured: AtomicU64::new(0),
            off,
        });
        let thread = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("sluice-live".into())
                .spawn(move || inner.run(&mut docs))?
        };
        Ok(LiveHub {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Attaches a tail: every payload record above the returned subscription's `start` goes to
    /// it, in order; none at or below it. Ends at once (with the reason) when the hub is off or
    /// stopped.
    pub fn subscribe(&self) -> LiveSubscription {
        let inner = &self.inner;
        let mut st = inner.state();
        let start = st.order.last;
        let (tx, rx) = sync_channel(inner.queue_records);
        let ended: EndReason = Arc::new(Mutex::new(st.closed.clone()));
        let mut sub = LiveSubscription {
            id: 0,
            start,
            rx,
            ended: ended.clone(),
            collector: inner.collector.clone(),
            hub: Arc::downgrade(inner),
        };
        if st.closed.is_some() {
            return sub; // `tx` dropped: the subscription ends at once
        }
        sub.id = st.next_id;
        st.next_id += 1;
        st.subscribers.push(Subscriber {
            id: sub.id,
            start,
            tx,
            ended,
        });
        inner.attached.fetch_add(1, Ordering::SeqCst);
        inner.set_gauge(&st);
        sub
    }

    /// Whether live tails are off for good (the `original` blob profile: its chunks carry no
    /// WAL origins); tails then follow the store only.
    pub fn is_off(&self) -> bool {
        self.inner.off
    }

    /// Tails attached now.
    pub fn subscribers(&self) -> usize {
        self.inner.attached.load(Ordering::SeqCst)
    }

    /// Taken by a shard before it appends a payload to the WAL, then told the record's number
    /// (see [`order`]).
    pub(crate) fn reserve(&self) -> Reservation<'_> {
        let floor = self.inner.state().order.reserve();
        Reservation {
            inner: &self.inner,
            floor,
            done: false,
        }
    }

    /// Ends every subscription (reason: shutdown), refuses new ones, and stops the hub's thread.
    pub(crate) fn stop(&self) {
        {
            let mut st = self.inner.state();
            if !st.stop {
                st.stop = true;
                let why = "the server is shutting down; reconnect with your cursor".to_string();
                st.closed = Some(why.clone());
                self.inner.end_all(&mut st, "shutdown", &why);
            }
        }
        self.inner.wake.notify_all();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    /// Records whose events were copied for tails so far.
    #[cfg(test)]
    pub(crate) fn captured(&self) -> u64 {
        self.inner.captured.load(Ordering::SeqCst)
    }
}

impl Drop for LiveHub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A shard's append under way (see [`LiveHub::reserve`]); dropped without
/// [`publish`](Self::publish), the append failed.
pub(crate) struct Reservation<'a> {
    inner: &'a Inner,
    floor: u64,
    done: bool,
}

impl Reservation<'_> {
    /// The append became record `seq`, holding `events` (the payload's accepted events): copied
    /// for the tails attached now, if any.
    pub fn publish(mut self, seq: u64, events: &[ParsedEvent]) {
        self.done = true;
        let inner = self.inner;
        // Copied before the lock when tails are attached (the common case then), so the other
        // shards do not wait for the copy; the decision is taken under the lock.
        let early = (inner.attached.load(Ordering::SeqCst) > 0 && !events.is_empty())
            .then(|| events.to_vec());
        let mut st = inner.state();
        st.order.finish(self.floor, Some(seq));
        if !st.subscribers.is_empty() && !events.is_empty() {
            st.order.hold(seq, early.unwrap_or_else(|| events.to_vec()));
            inner.captured.fetch_add(1, Ordering::Relaxed);
        }
        drop(st);
        inner.wake.notify_one();
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.state().order.finish(self.floor, None);
            self.inner.wake.notify_one();
        }
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hub's thread: waits for a releasable record, for its durability, then builds the
    /// released records' documents (outside the lock) and hands them out in order.
    fn run(&self, docs: &mut doc::DocBuilder) {
        loop {
            let (first, last) = {
                let mut st = self.state();
                loop {
                    if st.stop {
                        return;
                    }
                    if let Some(range) = st.order.releasable() {
                        break range;
                    }
                    st = self.wake.wait(st).unwrap_or_else(|e| e.into_inner());
                }
            };
            // Every held record up to `last` stays releasable meanwhile: a new reservation's
            // floor is above every record already told.
            let durable = self.durability.wait_durable(first, last);
            let mut st = self.state();
            let upto = match durable {
                Ok(upto) => upto.clamp(first, last),
                Err(e) => {
                    st.order.clear();
                    let why = format!(
                        "the WAL failed ({e}): records may not be durable; reconnect with your cursor"
                    );
                    self.end_all(&mut st, "wal", &why);
                    continue;
                }
            };
            let mut records = st.order.take_upto(upto);
            // Only records some subscriber is owed are built (one attached after them starts
            // above them).
            let Some(lowest) = st.subscribers.iter().map(|s| s.start).min() else {
                continue;
            };
            records.retain(|(seq, _)| *seq > lowest);
            drop(st);
            // A tail attached meanwhile starts above these records (its start is the highest
            // told): fan_out skips it.
            let built: Vec<Arc<LiveDoc>> = records
                .iter()
                .map(|(seq, events)| Arc::new(docs.build(*seq, events)))
                .collect();
            let mut st = self.state();
            for doc in built {
                self.fan_out(&mut st, doc);
            }
        }
    }

    /// Hands `doc` to every subscriber it is owed to; a full queue drops that subscriber.
    fn fan_out(&self, st: &mut State, doc: Arc<LiveDoc>) {
        // Counted before a tail can see it (a test reads the count once it received the record).
        self.metrics.tail_live_records.inc();
        let mut gone: Vec<(usize, Option<String>)> = Vec::new();
        for (i, sub) in st.subscribers.iter().enumerate() {
            if doc.seq <= sub.start {
                continue;
            }
            match sub.tx.try_send(doc.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => gone.push((
                    i,
                    Some(format!(
                        "slow subscriber: {} records behind at record {} (tail_live_queue_records); reconnect with your cursor",
                        self.queue_records, doc.seq
                    )),
                )),
                // Its subscription was dropped and is detaching.
                Err(TrySendError::Disconnected(_)) => gone.push((i, None)),
            }
        }
        for (i, why) in gone.into_iter().rev() {
            let sub = st.subscribers.swap_remove(i);
            self.attached.fetch_sub(1, Ordering::SeqCst);
            if let Some(why) = why {
                *sub.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                self.metrics
                    .tail_live_dropped
                    .with_label_values(&["slow"])
                    .inc();
            }
        }
        self.set_gauge(st);
    }

    /// Drops every subscriber with `why` (counted under `label`).
    fn end_all(&self, st: &mut State, label: &str, why: &str) {
        for sub in st.subscribers.drain(..) {
            *sub.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
            self.attached.fetch_sub(1, Ordering::SeqCst);
            self.metrics
                .tail_live_dropped
                .with_label_values(&[label])
                .inc();
        }
        self.set_gauge(st);
    }

    /// A subscription was dropped.
    pub(crate) fn detach(&self, id: u64) {
        let mut st = self.state();
        if let Some(i) = st.subscribers.iter().position(|s| s.id == id) {
            st.subscribers.swap_remove(i);
            self.attached.fetch_sub(1, Ordering::SeqCst);
            self.set_gauge(&st);
        }
    }

    fn set_gauge(&self, st: &State) {
        self.metrics
            .tail_live_subscribers
            .set(as_gauge(st.subscribers.len() as u64));
    }
}
