//! One attached tail's end of the live hub: a bounded queue of the records handed to it, and why
//! the hub let go of it.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sluice_reader::LiveDoc;

use super::Inner;

/// Why the hub stopped handing records to a subscription (the records queued before it are
/// still received first). The tail resumes from the store with its cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveEnded {
    /// Why, for the client: slow, the WAL failed, shutdown, or live tail off.
    pub reason: String,
}

impl std::fmt::Display for LiveEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for LiveEnded {}

/// Where the hub writes why it dropped a subscriber, read by its subscription once the queue
/// is drained.
pub(crate) type EndReason = Arc<Mutex<Option<String>>>;

/// A tail attached to the [`LiveHub`](super::LiveHub): every payload record with a sequence
/// number above [`start`](Self::start), in increasing order, each once it is durable. Dropping it
/// detaches it.
pub struct LiveSubscription {
    /// The hub's id of this subscriber (0: never attached).
    pub(crate) id: u64,
    pub(crate) start: u64,
    pub(crate) rx: Receiver<Arc<LiveDoc>>,
    pub(crate) ended: EndReason,
    pub(crate) collector: Option<String>,
    /// To detach on drop; weak, so that a subscription kept by a client does not keep a stopped
    /// hub alive.
    pub(crate) hub: Weak<Inner>,
}

impl std::fmt::Debug for LiveSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSubscription")
            .field("id", &self.id)
            .field("start", &self.start)
            .finish()
    }
}

impl LiveSubscription {
    /// The next record, waiting at most `timeout` (`Ok(None)`: none came). `Err` once the hub
    /// dropped this subscriber and every record queued before that was received.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Arc<LiveDoc>>, LiveEnded> {
        match self.rx.recv_timeout(timeout) {
            Ok(doc) => Ok(Some(doc)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(self.why_ended()),
        }
    }

    /// Every payload record above this sequence number comes to this subscription; none at or
    /// below it does (those are read from the store).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The server's collector id (chunk ids are `<collector>.<n>`, or plain `<n>` without one).
    pub fn collector(&self) -> Option<String> {
        self.collector.clone()
    }

    fn why_ended(&self) -> LiveEnded {
        let reason = self
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| "the live stream ended; reconnect with your cursor".into());
        LiveEnded { reason }
    }
}

impl Drop for LiveSubscription {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.detach(self.id);
        }
    }
}
