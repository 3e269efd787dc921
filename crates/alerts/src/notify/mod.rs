//! Notifications out: each alert transition ([`Notification`]) to Alertmanager's API and to
//! webhooks in the Alertmanager webhook format, each receiver with its own worker thread,
//! bounded queue, retries and counters.
//!
//! - [`Notifier::send`] never blocks: the notification joins every receiver's queue, or is
//!   dropped (counted `queue_full`) by a receiver whose queue is full.
//! - A worker retries 429, 5xx, refused connections and timeouts with capped exponential
//!   backoff and jitter; another answer is a rejection (counted, never retried). A notification
//!   not delivered within `max_age` is dropped (counted `max_age`). Nothing is lost silently.
//! - `on_delivered` is called once every receiver is done with a notification (delivered,
//!   rejected, or dropped after `max_age`), so the caller can record it as sent. It is never
//!   called for one a full queue dropped at `send` (which returned false).
//! - Alertmanager gets firing alerts again every `resend_firing` (as Prometheus does);
//!   [`Notifier::keep_firing`] hands it the ones already firing when a server starts.
//!
//! Blocking code and `ureq`, as the rest of the workspace sends.

pub mod alertmanager;
mod backoff;
mod config;
mod http;
mod stats;
pub mod webhook;
mod worker;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use config::{ConfigError, NotifierConfig, ReceiverKind};
pub use stats::{Dropped, NotifierStats, ReceiverStats};

use crate::notification::Notification;
use stats::Counters;
use worker::{Item, Pending, Queue, Receiver, Settings};

/// Called once every receiver is done with a notification.
pub type OnDelivered = Arc<dyn Fn(&Notification) + Send + Sync>;

/// Running receivers: one worker thread each. Stopped by [`Notifier::shutdown`] or drop.
pub struct Notifier {
    receivers: Vec<Arc<Receiver>>,
    threads: Vec<JoinHandle<()>>,
    capacity: usize,
}

impl Notifier {
    /// Checks `cfg` and starts one worker per receiver.
    pub fn start(cfg: NotifierConfig, on_delivered: OnDelivered) -> Result<Notifier, ConfigError> {
        let targets = cfg.targets()?;
        let settings = Arc::new(Settings {
            timeout: cfg.timeout,
            backoff_min: cfg.backoff_min,
            backoff_max: cfg.backoff_max,
            max_age: cfg.max_age,
            resend_firing: cfg.resend_firing,
            bearer_token: cfg.bearer_token.clone(),
            external_url: cfg.external_url.clone(),
        });
        let mut notifier = Notifier {
            receivers: Vec::new(),
            threads: Vec::new(),
            capacity: cfg.queue_capacity,
        };
        for target in targets {
            let rx = Arc::new(Receiver {
                target,
                queue: Mutex::new(Queue::default()),
                wake: std::sync::Condvar::new(),
                counters: Counters::new(),
            });
            let thread = {
                let (rx, settings, on_delivered) =
                    (rx.clone(), settings.clone(), on_delivered.clone());
                std::thread::Builder::new()
                    .name(format!("sluice-notify-{}", rx.target.kind.as_str()))
                    .spawn(move || worker::run(&rx, &settings, &on_delivered))
                    .map_err(|e| ConfigError(format!("starting a notifier thread: {e}")))?
            };
            notifier.receivers.push(rx);
            notifier.threads.push(thread);
        }
        Ok(notifier)
    }

    /// Queues `n` for every receiver, without blocking; false when some receiver's queue was
    /// full (that receiver drops it, counted `queue_full`; the others still deliver it, and
    /// `on_delivered` is not called for it).
    pub fn send(&self, n: Notification) -> bool {
        let n = Arc::new(n);
        let queued_at = Instant::now();
        // Every queue locked (in one order) while it is decided who takes it, so that a worker
        // cannot finish it before `Pending` knows how many will.
        let mut queues: Vec<MutexGuard<'_, Queue>> =
            self.receivers.iter().map(|r| lock(&r.queue)).collect();
        let room: Vec<bool> = queues
            .iter()
            .map(|q| !q.stop && q.items.len() < self.capacity)
            .collect();
        let accepted = room.iter().filter(|r| **r).count();
        let all = accepted == self.receivers.len();
        let pending = Arc::new(Pending::new(accepted, all));
        for ((q, rx), room) in queues.iter_mut().zip(&self.receivers).zip(room) {
            let c = &rx.counters;
            if room {
                q.items.push_back(Item {
                    n: n.clone(),
                    pending: pending.clone(),
                    queued_at,
                });
                c.queued.store(q.items.len() as u64, Ordering::Relaxed);
            } else {
                Counters::add(&c.queue_full, 1);
                c.error(format!(
                    "{}: queue full ({} waiting): notification {} dropped",
                    rx.target.shown, self.capacity, n.id
                ));
            }
        }
        drop(queues);
        for rx in &self.receivers {
            rx.wake.notify_all();
        }
        all
    }

    /// Alerts that are firing and were already delivered (a server restarted while they fire):
    /// they join every Alertmanager's resend set and are posted at once, then every
    /// `resend_firing` until their resolution is sent, so Alertmanager does not time them out.
    /// Webhooks get nothing (they were told already); `on_delivered` is not called.
    pub fn keep_firing(&self, alerts: Vec<Notification>) {
        let alerts: Vec<Arc<Notification>> = alerts
            .into_iter()
            .filter(|n| n.status == crate::notification::Status::Firing)
            .map(Arc::new)
            .collect();
        if alerts.is_empty() {
            return;
        }
        for rx in &self.receivers {
            if rx.target.kind == ReceiverKind::Alertmanager {
                lock(&rx.queue).restore.extend(alerts.iter().cloned());
                rx.wake.notify_all();
            }
        }
    }

    /// Every receiver's counters now.
    pub fn stats(&self) -> NotifierStats {
        NotifierStats {
            receivers: self
                .receivers
                .iter()
                .map(|r| r.counters.snapshot(r.target.kind, &r.target.shown))
                .collect(),
        }
    }

    /// Waits until every queue is empty (each notification delivered, rejected or dropped), at
    /// most `timeout`; true when they are.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        for rx in &self.receivers {
            let mut q = lock(&rx.queue);
            while !q.items.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                q = rx
                    .wake
                    .wait_timeout(q, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        true
    }

    /// Gives the queues up to `wait` to empty, then stops the workers (a POST under way ends
    /// within the timeout); what is still queued is counted `shutdown`. Returns the final
    /// counters (to log what was not delivered).
    pub fn shutdown(mut self, wait: Duration) -> NotifierStats {
        self.flush(wait);
        self.stop_workers();
        self.stats()
    }

    fn stop_workers(&mut self) {
        for rx in &self.receivers {
            lock(&rx.queue).stop = true;
            rx.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

/// A lock, even if a thread panicked holding it (the queue is still consistent: every change
/// to it is one call).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Now, Unix milliseconds.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Unix milliseconds as RFC 3339 in UTC, fractional seconds only when there are some (as Go's
/// `time.Time` marshals); a time out of range is the Unix epoch.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_as_go_prints_it() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_500), "1970-01-01T00:00:01.5Z");
    }
}
