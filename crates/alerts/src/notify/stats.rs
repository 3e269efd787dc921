//! What each receiver did: counters kept by its worker (atomics), read at once by
//! [`crate::notify::Notifier::stats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::{lock, ReceiverKind};

/// Notifications a receiver never delivered, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Its queue was full when [`crate::notify::Notifier::send`] was called.
    pub queue_full: u64,
    /// Not delivered within `max_age` of being sent.
    pub max_age: u64,
    /// Refused for good by the receiver (a 4xx other than 429, or another non-2xx answer).
    pub rejected: u64,
    /// Still queued when the notifier shut down.
    pub shutdown: u64,
}

/// One receiver's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverStats {
    /// What it speaks.
    pub kind: ReceiverKind,
    /// Its URL, without credentials.
    pub url: String,
    /// Notifications waiting, the ones being sent included.
    pub queued: u64,
    /// Notifications it acknowledged.
    pub sent: u64,
    /// POSTs that failed and were (or will be) retried: 429, 5xx, no answer. Resends included.
    pub failed_attempts: u64,
    /// Notifications dropped, by reason.
    pub dropped: Dropped,
    /// The last failure's text (the answer's status and the start of its body, or the transport
    /// error), with the receiver's URL.
    pub last_error: Option<String>,
    /// From `send` to the receiver's acknowledgement, for the last notification delivered.
    pub last_latency: Option<Duration>,
    /// Alertmanager only: alerts firing, posted again every `resend_firing`.
    pub firing: u64,
    /// Alertmanager only: resends of the firing alerts it acknowledged.
    pub resends: u64,
}

/// Every receiver's counters, in the configuration's order (Alertmanagers, then webhooks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifierStats {
    /// One entry per receiver.
    pub receivers: Vec<ReceiverStats>,
}

impl NotifierStats {
    /// The receiver with this URL (as shown: without credentials), if any.
    pub fn receiver(&self, url: &str) -> Option<&ReceiverStats> {
        self.receivers.iter().find(|r| r.url == url)
    }
}

/// A receiver's live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub queued: AtomicU64,
    pub sent: AtomicU64,
    pub failed_attempts: AtomicU64,
    pub queue_full: AtomicU64,
    pub max_age: AtomicU64,
    pub rejected: AtomicU64,
    pub shutdown: AtomicU64,
    pub firing: AtomicU64,
    pub resends: AtomicU64,
    /// Microseconds; `u64::MAX`: none yet.
    pub last_latency_us: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

impl Counters {
    /// Fresh counters (no latency yet).
    pub fn new() -> Counters {
        Counters {
            last_latency_us: AtomicU64::new(u64::MAX),
            ..Counters::default()
        }
    }

    /// Adds one to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Keeps `msg` as the last error.
    pub fn error(&self, msg: String) {
        *lock(&self.last_error) = Some(msg);
    }

    /// Keeps the last delivery's latency.
    pub fn latency(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1);
        self.last_latency_us.store(us, Ordering::Relaxed);
    }

    /// Every counter, read now.
    pub fn snapshot(&self, kind: ReceiverKind, url: &str) -> ReceiverStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let latency = get(&self.last_latency_us);
        ReceiverStats {
            kind,
            url: url.to_owned(),
            queued: get(&self.queued),
            sent: get(&self.sent),
            failed_attempts: get(&self.failed_attempts),
            dropped: Dropped {
                queue_full: get(&self.queue_full),
                max_age: get(&self.max_age),
                rejected: get(&self.rejected),
                shutdown: get(&self.shutdown),
            },
            last_error: lock(&self.last_error).clone(),
            last_latency: (latency != u64::MAX).then(|| Duration::from_micros(latency)),
            firing: get(&self.firing),
            resends: get(&self.resends),
        }
    }
}
