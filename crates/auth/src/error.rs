//! What can go wrong with tokens, as two kinds a caller answers differently: a spec that is
//! not valid ([`SpecError`], the client's mistake: HTTP 400) and the rest ([`AuthError`]: a name
//! in use, a token not found, a catalog that cannot be read or written — a store that is down
//! is a 503, not a 400).

/// A scope list, reach pattern or token name that is not valid; the message says what is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub(crate) String);

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The spec is not valid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A live token has that name.
    #[error("a token named {0:?} exists: revoke it first")]
    NameTaken(String),
    /// No live token has that name or id.
    #[error("no live token named or with the id {0:?}")]
    NotFound(String),
    /// The store's catalog could not be read or written (`what` says which operation).
    #[error("{what}: {source}")]
    Catalog {
        /// The operation, e.g. "reading the tokens".
        what: String,
        /// The store's error.
        source: sluice_store::StoreError,
    },
    /// The system's random source failed (no secret can be made).
    #[error("no randomness: {0}")]
    Random(getrandom::Error),
    /// A record could not be encoded.
    #[error("encoding a token record: {0}")]
    Encode(#[from] serde_json::Error),
}
