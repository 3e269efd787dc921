//! The error of the store layer.

use std::io;
use std::path::Path;

/// An error returned by a [`Store`](crate::Store) operation.
///
/// Every backend maps its own failures onto these variants, so callers (the collector's spool,
/// the reader) can decide what to do without knowing the backend: retry later
/// ([`Io`](StoreError::Io), [`Unavailable`](StoreError::Unavailable),
/// [`Timeout`](StoreError::Timeout), [`UnknownOutcome`](StoreError::UnknownOutcome): see
/// [`is_transient`](StoreError::is_transient)), report and skip
/// ([`Corrupted`](StoreError::Corrupted)), or treat as a bug in the caller
/// ([`Exists`](StoreError::Exists), [`InvalidArgument`](StoreError::InvalidArgument)).
/// No variant assumes a filesystem: locations are strings (a path for the embedded store, a
/// host or table for a network backend).
///
/// A retry after `Timeout` or `UnknownOutcome` is safe because every write is idempotent: puts
/// are write-once ([`PutOutcome::AlreadyPresent`](crate::PutOutcome)), index adds are set unions,
/// and [`Store::add_counts_once`](crate::Store::add_counts_once) applies a (writer, batch) once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Stored bytes failed their checksum or could not be parsed. `key` names what was read
    /// (a blob key, or a file and offset for metadata records).
    #[error("corrupted data at {key}: {reason}")]
    Corrupted {
        /// The blob key or location that is corrupt.
        key: String,
        /// What check failed.
        reason: String,
    },
    /// An I/O error from the operating system or a transport, with where it happened.
    #[error("I/O error on {location}: {source}")]
    Io {
        /// What the operation was on: a file or directory (embedded store), a host (network).
        location: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A blob with this key already exists with *different* bytes. Chunks are never
    /// overwritten; a writer that gets this must choose another chunk key.
    #[error("blob {key} already exists with different contents")]
    Exists {
        /// The key that was written twice.
        key: String,
    },
    /// The requested item does not exist (used where an absent item is an error rather than
    /// `None`, e.g. a data directory that must exist).
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// An argument the store cannot accept: an empty or oversized key, a namespace name with a
    /// forbidden byte, a blob larger than the record limit.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// Why it was refused.
        reason: String,
    },
    /// The data directory is in use by another process (a running server): one process owns
    /// an embedded store at a time, enforced with a lock on `<dir>/LOCK`.
    #[error("{dir} is in use by another process (is a server running on it? read through it with --server)")]
    Locked {
        /// The data directory.
        dir: String,
    },
    /// The store (or a wrapper injecting faults) cannot serve the request now; retrying later
    /// may succeed. Network backends map timeouts and unavailable replicas here.
    #[error("store unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The operation did not complete within its deadline and was *not* applied (a backend
    /// that cannot tell whether it was applied returns [`UnknownOutcome`](StoreError::UnknownOutcome)).
    #[error("store operation {op} timed out")]
    Timeout {
        /// The operation, e.g. `put_blob 1700000000:ams:WEB::0`.
        op: String,
    },
    /// The operation may or may not have been applied (a network backend lost the reply, a
    /// write timed out after it was sent). Retrying the same call is the way to settle it:
    /// writes are idempotent (see the type docs).
    #[error("store operation {op} has an unknown outcome (it may have been applied)")]
    UnknownOutcome {
        /// The operation, e.g. `add_counts_once 1700000000-ams`.
        op: String,
    },
}

impl StoreError {
    /// An [`Io`](StoreError::Io) error on a file or directory.
    #[cold]
    pub(crate) fn io(path: impl AsRef<Path>, source: io::Error) -> Self {
        StoreError::Io {
            location: path.as_ref().display().to_string(),
            source,
        }
    }

    #[cold]
    pub(crate) fn corrupted(key: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Corrupted {
            key: key.into(),
            reason: reason.into(),
        }
    }

    #[cold]
    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        StoreError::InvalidArgument {
            reason: reason.into(),
        }
    }

    /// Whether retrying the same operation later may succeed: I/O, availability, timeout and
    /// unknown-outcome errors. (Retrying is also how an unknown outcome is settled.)
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Io { .. }
                | StoreError::Unavailable { .. }
                | StoreError::Timeout { .. }
                | StoreError::UnknownOutcome { .. }
        )
    }
}

/// The result type of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
