//! The crate's one error type.

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, BlobError>;

/// Everything that can go wrong building or reading a blob, or parsing a key.
///
/// Input (bytes, key text) never makes anything in this crate panic: it gets one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// Shorter than the 24-byte trailer (`=chk` + SHA-1), so there is no trailer to check.
    #[error("blob truncated: {len} bytes, shorter than the 24-byte `=chk` + SHA-1 trailer")]
    Truncated {
        /// Length of the input.
        len: usize,
    },
    /// The 24 last bytes do not start with `=chk`: not a blob, or cut short.
    #[error("blob has no `=chk` trailer (the 24 last bytes of {len} do not start with `=chk`)")]
    MissingTrailer {
        /// Length of the input.
        len: usize,
    },
    /// The trailer is there but the content does not match it (checksum mismatch), or the
    /// Sereal part holds something no blob writer produces.
    #[error("blob corrupted: {reason}")]
    Corrupted {
        /// What did not match.
        reason: String,
    },
    /// The Sereal codec refused the document (invalid, over a limit, or not encodable).
    #[error("sereal: {0}")]
    Codec(#[from] sereal::Error),
    /// The blob's body is valid Sereal but not an array of events.
    #[error("blob body is not an array of events (found {found})")]
    NotAnArray {
        /// What the body is instead.
        found: &'static str,
    },
    /// An event given to the builder is not a map (the data model's top level must be a map).
    #[error("event {index} is not a map (found {found})")]
    NotAnEvent {
        /// Index of the event in the slice given to the builder.
        index: usize,
        /// What it is instead.
        found: &'static str,
    },
    /// A line given to [`BlobBuilder::build_from_json_lines`](crate::BlobBuilder::build_from_json_lines)
    /// is not JSON.
    #[error("JSON line {line}: {reason}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The JSON parser's message.
        reason: String,
    },
    /// A key or key component is malformed.
    #[error("bad key {key:?}: {reason}")]
    BadKey {
        /// The offending text (cut to 120 characters).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `epochs` value (the pipe-separated list) is malformed.
    #[error("bad epoch index, entry {entry}: {reason}")]
    BadIndex {
        /// 0-based position of the offending entry in the list.
        entry: usize,
        /// What is wrong with it (names the entry).
        reason: String,
    },
    /// A builder option is out of range.
    #[error("bad blob option: {reason}")]
    BadOption {
        /// Which option and why.
        reason: String,
    },
}

impl BlobError {
    pub(crate) fn bad_key(key: &str, reason: impl Into<String>) -> BlobError {
        BlobError::BadKey {
            key: shorten(key),
            reason: reason.into(),
        }
    }
}

/// `s` cut to 120 characters (with an ellipsis), so an error never echoes a megabyte of input.
pub(crate) fn shorten(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// A word for the kind of a value, for error messages.
pub(crate) fn kind_of(v: &sereal::Value) -> &'static str {
    use sereal::Value::*;
    match v.resolve() {
        Undef => "undef",
        Bool(_) => "a boolean",
        Int(_) | UInt(_) => "an integer",
        Float(_) => "a float",
        Binary(_) | String(_) => "a string",
        Array(_) => "an array",
        Hash(_) => "a map",
        Ref(_) => "a reference",
        Object(_) => "an object",
        Regexp(_) => "a regexp",
        Shared(_) => "a shared value",
    }
}
