//! The crate's error type ([`Error`]) and result alias ([`Result`]), re-exported at the crate
//! root. A module of its own, below every other, so that any module can return it without
//! depending on the crate root that wires them together.

use std::fmt;

/// Why the server could not start or stopped badly.
#[derive(Debug)]
pub enum Error {
    /// A setting is invalid.
    Config(String),
    /// A socket or file could not be used.
    Io(String),
    /// The store could not be opened.
    Store(sluice_store::StoreError),
    /// The server's thread or pipeline died.
    Internal(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "configuration: {m}"),
            Error::Io(m) => write!(f, "{m}"),
            Error::Store(e) => write!(f, "store: {e}"),
            Error::Internal(m) => write!(f, "internal: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
