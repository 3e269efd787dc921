//! The crate's error type ([`Error`]) and result alias ([`Result`]), re-exported at the crate
//! root. A module of its own, below every other, so that any module can return it without
//! depending on the crate root that wires them together.

/// Why the server could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// A socket or file could not be used.
    #[error("{0}")]
    Io(String),
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(sluice_store::StoreError),
    /// The server's thread or pipeline died.
    #[error("internal: {0}")]
    Internal(String),
    /// A payload handed to the pipeline may not be acknowledged (see [`IngestError`]).
    #[error(transparent)]
    Ingest(#[from] IngestError),
}

/// Why a payload may not be acknowledged: the sender keeps it and retries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    /// Refused before it was logged: backpressure, a disk below its reserve, the WAL failing.
    #[error("{0}")]
    Refused(String),
    /// The pipeline is stopping (or stopped).
    #[error("pipeline is shutting down")]
    Stopping,
    /// Logged, but the WAL sync that covered it failed (or the waiter stopped first).
    #[error("{0}")]
    NotDurable(String),
}

/// The handlers answer with the sentence (HTTP bodies, TCP `error` lines).
impl From<IngestError> for String {
    fn from(e: IngestError) -> String {
        e.to_string()
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
