//! One receiver's worker thread and its bounded FIFO queue.
//!
//! ```text
//! send ──► queue (≤ queue_capacity; full: dropped queue_full) ──► worker: head batch → POST
//!            delivered / rejected → popped, done ◄──┘   retry → wait backoff (≤ head's max_age)
//!            head older than max_age → popped, done, counted max_age
//! ```
//!
//! A notification stays in the queue until it is done here, so the queue bounds what is in
//! flight too, and a receiver that is down gets each notification once, in order, when it is
//! back (a webhook: one POST each; Alertmanager: up to 64 in a POST, never two of one alert).
//! When every receiver is done with a notification, `on_delivered` is called, from the worker
//! that finished last, never under a queue's lock (it may call `send`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::alertmanager::{self, FiringSet};
use super::backoff::Backoff;
use super::config::Target;
use super::http::{Outcome, Poster};
use super::stats::Counters;
use super::{lock, now_ms, webhook, OnDelivered, ReceiverKind};
use crate::notification::Notification;

/// One notification in one receiver's queue.
pub(crate) struct Item {
    /// The notification (shared by every receiver's queue).
    pub n: Arc<Notification>,
    /// Shared by every receiver's copy: who is still to finish it.
    pub pending: Arc<Pending>,
    /// When `send` queued it (its `max_age` and latency count from here).
    pub queued_at: Instant,
}

/// How many receivers are still to finish one notification.
pub(crate) struct Pending {
    remaining: AtomicUsize,
    /// Every receiver queued it (none was full): only then is `on_delivered` called.
    taken_by_all: bool,
}

impl Pending {
    /// For `receivers` queues; `taken_by_all` when no receiver dropped it at `send`.
    pub fn new(receivers: usize, taken_by_all: bool) -> Pending {
        Pending {
            remaining: AtomicUsize::new(receivers),
            taken_by_all,
        }
    }

    /// One receiver is done with it; the last one calls `on_delivered`.
    fn done(&self, n: &Notification, on_delivered: &OnDelivered) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 && self.taken_by_all {
            // A panicking callback must not end the worker (its queue would grow forever).
            let call = std::panic::AssertUnwindSafe(|| on_delivered(n));
            if std::panic::catch_unwind(call).is_err() {
                eprintln!(
                    "sluice-alerts: on_delivered panicked for notification {}",
                    n.id
                );
            }
        }
    }
}

/// A queue and its stop flag, under one lock.
#[derive(Default)]
pub(crate) struct Queue {
    /// Waiting notifications, the ones being sent at the front.
    pub items: VecDeque<Item>,
    /// The worker is to stop.
    pub stop: bool,
    /// Alerts already firing, for Alertmanager's resend set (see `Notifier::keep_firing`).
    pub restore: Vec<Arc<Notification>>,
}

/// One receiver: where to, its queue, its counters.
pub(crate) struct Receiver {
    /// The checked URL and kind.
    pub target: Target,
    /// Its queue.
    pub queue: Mutex<Queue>,
    /// Signalled on every push, pop and stop.
    pub wake: Condvar,
    /// What it did.
    pub counters: Counters,
}

/// What every worker shares from the configuration.
pub(crate) struct Settings {
    pub timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub max_age: Duration,
    pub resend_firing: Duration,
    pub bearer_token: Option<String>,
    pub external_url: String,
}

enum Work {
    Stop,
    Restore(Vec<Arc<Notification>>),
    Resend,
    Batch(Vec<(Arc<Notification>, Instant)>),
}

/// The worker's loop, until the queue's stop flag; what is still queued then is counted
/// `shutdown`.
pub(crate) fn run(rx: &Receiver, s: &Settings, on_delivered: &OnDelivered) {
    let poster = Poster::new(s.timeout, s.bearer_token.clone());
    let mut backoff = Backoff::new(s.backoff_min, s.backoff_max);
    let mut firing =
        (rx.target.kind == ReceiverKind::Alertmanager).then(|| FiringSet::new(s.resend_firing));
    let c = &rx.counters;
    // After Alertmanager refused a batch (it takes the valid alerts of a batch and answers 400
    // for the rest), this many are sent one a POST, so only the bad ones count as rejected.
    let mut solo = 0usize;
    loop {
        match next_work(rx, s, firing.as_ref(), solo > 0, on_delivered) {
            Work::Stop => break,
            Work::Restore(alerts) => {
                if let Some(set) = firing.as_mut() {
                    for n in &alerts {
                        set.record(n);
                    }
                    set.due_now();
                    c.firing.store(set.len() as u64, Ordering::Relaxed);
                }
            }
            Work::Resend => {
                let Some(set) = firing.as_mut() else { continue };
                let alerts = set.take_due(Instant::now());
                if alerts.is_empty() {
                    continue;
                }
                let body =
                    alertmanager::body(alerts.iter().map(|n| &**n), now_ms(), s.resend_firing);
                match poster.post_json(&rx.target.post_url, &body) {
                    Outcome::Delivered => Counters::add(&c.resends, 1),
                    Outcome::Retry(msg) | Outcome::Reject(msg) => {
                        // The next resend (or transition) carries them again.
                        Counters::add(&c.failed_attempts, 1);
                        c.error(format!(
                            "{}: resending firing alerts: {msg}",
                            rx.target.shown
                        ));
                    }
                }
            }
            Work::Batch(batch) => {
                let body = match &mut firing {
                    Some(set) => {
                        for (n, _) in &batch {
                            set.record(n);
                        }
                        c.firing.store(set.len() as u64, Ordering::Relaxed);
                        alertmanager::body(
                            batch.iter().map(|(n, _)| &**n),
                            now_ms(),
                            s.resend_firing,
                        )
                    }
                    None => webhook::message(&batch[0].0, &s.external_url).to_string(),
                };
                match poster.post_json(&rx.target.post_url, &body) {
                    Outcome::Delivered => {
                        backoff.reset();
                        solo = solo.saturating_sub(batch.len());
                        let latency = batch[batch.len() - 1].1.elapsed();
                        Counters::add(&c.sent, batch.len() as u64);
                        c.latency(latency);
                        finish_head(rx, batch.len(), on_delivered);
                    }
                    Outcome::Reject(_) if batch.len() > 1 => {
                        solo = batch.len();
                    }
                    Outcome::Reject(msg) => {
                        backoff.reset();
                        solo = solo.saturating_sub(batch.len());
                        if let Some(set) = &mut firing {
                            // Never resent: it would be refused every time.
                            set.forget(&batch[0].0);
                            c.firing.store(set.len() as u64, Ordering::Relaxed);
                        }
                        Counters::add(&c.rejected, batch.len() as u64);
                        c.error(format!("{}: rejected: {msg}", rx.target.shown));
                        finish_head(rx, batch.len(), on_delivered);
                    }
                    Outcome::Retry(msg) => {
                        Counters::add(&c.failed_attempts, 1);
                        c.error(format!("{}: {msg}", rx.target.shown));
                        // No longer than until the head is too old (then it is dropped).
                        let head_left =
                            (batch[0].1 + s.max_age).saturating_duration_since(Instant::now());
                        wait_unless_stopped(rx, backoff.next_wait().min(head_left));
                    }
                }
            }
        }
    }
    let mut q = lock(&rx.queue);
    Counters::add(&c.shutdown, q.items.len() as u64);
    q.items.clear();
    c.queued.store(0, Ordering::Relaxed);
    drop(q);
    rx.wake.notify_all();
}

/// Waits for something to do: the stop flag, a due resend, or notifications (the batch at the
/// head, cloned: they leave the queue only when done). Heads older than `max_age` are dropped
/// on the way.
fn next_work(
    rx: &Receiver,
    s: &Settings,
    firing: Option<&FiringSet>,
    one_at_a_time: bool,
    on_delivered: &OnDelivered,
) -> Work {
    let mut q = lock(&rx.queue);
    loop {
        if q.stop {
            return Work::Stop;
        }
        if !q.restore.is_empty() {
            return Work::Restore(std::mem::take(&mut q.restore));
        }
        let now = Instant::now();
        // The queue is in `send` order, so the too old are at the head.
        let expired = q
            .items
            .iter()
            .take_while(|i| now.duration_since(i.queued_at) >= s.max_age)
            .count();
        if expired > 0 {
            let c = &rx.counters;
            Counters::add(&c.max_age, expired as u64);
            c.error(format!(
                "{}: {expired} notification(s) not delivered within max_age ({:?}): dropped",
                rx.target.shown, s.max_age
            ));
            drop(q);
            finish_head(rx, expired, on_delivered);
            q = lock(&rx.queue);
            continue;
        }
        let resend_in = firing.map(|f| f.due_in(now));
        if resend_in.is_some_and(|d| d.is_zero()) {
            return Work::Resend;
        }
        if !q.items.is_empty() {
            let len = match rx.target.kind {
                ReceiverKind::Alertmanager if !one_at_a_time => {
                    alertmanager::batch_len(q.items.iter().map(|i| &*i.n))
                }
                ReceiverKind::Alertmanager | ReceiverKind::Webhook => 1,
            };
            let batch = q
                .items
                .iter()
                .take(len)
                .map(|i| (i.n.clone(), i.queued_at))
                .collect();
            return Work::Batch(batch);
        }
        q = match resend_in {
            Some(d) => {
                rx.wake
                    .wait_timeout(q, d)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => rx.wake.wait(q).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// The `n` notifications at the head are done here: their `on_delivered` (outside the lock)
/// when this receiver was the last, then they are popped.
///
/// The callbacks run before the pop, so that an empty queue ([`crate::notify::Notifier::flush`])
/// means they have run. Only this worker pops, so the head is still these `n` after the calls.
fn finish_head(rx: &Receiver, n: usize, on_delivered: &OnDelivered) {
    let done: Vec<(Arc<Notification>, Arc<Pending>)> = lock(&rx.queue)
        .items
        .iter()
        .take(n)
        .map(|i| (i.n.clone(), i.pending.clone()))
        .collect();
    for (n, pending) in &done {
        pending.done(n, on_delivered);
    }
    let mut q = lock(&rx.queue);
    let n = done.len().min(q.items.len());
    q.items.drain(..n);
    rx.counters
        .queued
        .store(q.items.len() as u64, Ordering::Relaxed);
    drop(q);
    rx.wake.notify_all();
}

/// Sleeps `d`, or less if the worker is told to stop.
fn wait_unless_stopped(rx: &Receiver, d: Duration) {
    let deadline = Instant::now() + d;
    let mut q = lock(&rx.queue);
    while !q.stop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        q = rx
            .wake
            .wait_timeout(q, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
