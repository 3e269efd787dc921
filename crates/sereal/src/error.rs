//! One error type for the whole codec: a boxed code plus the byte offset where it happened.

use std::fmt;

/// Result alias used throughout the codec.
pub type Result<T> = std::result::Result<T, Error>;

/// A codec error. Small (one pointer) so that `Result<Value>` stays cheap on the hot path.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    code: ErrorCode,
    offset: usize,
}

/// Broad classes of error, for callers that react differently to each (see [`Error::classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Category {
    /// The input ended before the document did: more bytes might complete it.
    Eof,
    /// The input is not a valid Sereal document (or not valid for this operation).
    Invalid,
    /// The input is valid but exceeds a configured limit (depth, size, count).
    Limit,
    /// The encoder was given something it cannot represent, or a compressor failed.
    Encode,
}

/// What went wrong. Private detail behind [`Error`]; exposed through `Display` and `classify`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) enum ErrorCode {
    Eof,
    BadMagic,
    BadVersion(u8),
    BadEncodingType(u8),
    VarintOverflow,
    BadTag(u8),
    BadKeyTag(u8),
    BadClassName(u8),
    BadOffset(u64),
    CopyOfCopy,
    Decompress(String),
    LengthMismatch {
        declared: u64,
        actual: u64,
    },
    TrailingBytes,
    UnsupportedTag(&'static str),
    NotAnArray,
    BadPath(String),
    Compress(String),
    DepthLimit(usize),
    DecompressedSizeLimit(usize),
    StringLengthLimit(usize),
    ElementCountLimit(usize),
    TotalValuesLimit(usize),
    TotalStringBytesLimit(usize),
    ChunkTooSmall {
        element: usize,
        needed: usize,
        limit: usize,
    },
}

impl Error {
    #[cold]
    pub(crate) fn new(code: ErrorCode, offset: usize) -> Error {
        Error {
            inner: Box::new(Inner { code, offset }),
        }
    }

    #[cold]
    pub(crate) fn eof(offset: usize) -> Error {
        Error::new(ErrorCode::Eof, offset)
    }

    /// Byte offset in the document (from its first header byte; for compressed documents, in the
    /// decompressed body counted after the header) where the problem was found.
    pub fn offset(&self) -> usize {
        self.inner.offset
    }

    /// The broad class of this error.
    pub fn classify(&self) -> Category {
        use ErrorCode::*;
        match self.inner.code {
            Eof => Category::Eof,
            DepthLimit(_)
            | DecompressedSizeLimit(_)
            | StringLengthLimit(_)
            | ElementCountLimit(_)
            | TotalValuesLimit(_)
            | TotalStringBytesLimit(_)
            | ChunkTooSmall { .. } => Category::Limit,
            Compress(_) => Category::Encode,
            _ => Category::Invalid,
        }
    }

    /// True when the input ended early (a truncated document).
    pub fn is_eof(&self) -> bool {
        self.classify() == Category::Eof
    }

    /// True when a configured limit stopped decoding.
    pub fn is_limit(&self) -> bool {
        self.classify() == Category::Limit
    }

    #[cfg(test)]
    pub(crate) fn code(&self) -> &ErrorCode {
        &self.inner.code
    }

    /// Shift the offset, used when a body-relative error is reported to a caller that thinks in
    /// document offsets.
    pub(crate) fn with_base(mut self, base: usize) -> Error {
        self.inner.offset += base;
        self
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorCode::*;
        match self {
            Eof => write!(f, "unexpected end of input"),
            BadMagic => write!(f, "not a Sereal document (bad magic)"),
            BadVersion(v) => write!(f, "unsupported protocol version {v}"),
            BadEncodingType(t) => write!(f, "unknown document encoding type {t}"),
            VarintOverflow => write!(f, "varint longer than 64 bits"),
            BadTag(t) => write!(f, "invalid tag 0x{t:02x}"),
            BadKeyTag(t) => write!(
                f,
                "hash key must be a string or COPY of one, got tag 0x{t:02x}"
            ),
            BadClassName(t) => write!(f, "class name must be a string, got tag 0x{t:02x}"),
            BadOffset(o) => write!(f, "offset {o} does not point back to an earlier item"),
            CopyOfCopy => write!(f, "COPY refers to an item that itself contains a COPY"),
            Decompress(e) => write!(f, "decompression failed: {e}"),
            LengthMismatch { declared, actual } => {
                write!(f, "declared length {declared} but found {actual}")
            }
            TrailingBytes => write!(f, "trailing bytes after the document body"),
            UnsupportedTag(what) => write!(f, "unsupported: {what}"),
            NotAnArray => write!(f, "document body is not an array"),
            BadPath(p) => write!(f, "bad path expression: {p}"),
            Compress(e) => write!(f, "compression failed: {e}"),
            DepthLimit(n) => write!(f, "nesting deeper than the limit of {n}"),
            DecompressedSizeLimit(n) => {
                write!(f, "decompressed body larger than the limit of {n} bytes")
            }
            StringLengthLimit(n) => write!(f, "string longer than the limit of {n} bytes"),
            ElementCountLimit(n) => {
                write!(f, "array or hash with more than the limit of {n} elements")
            }
            TotalValuesLimit(n) => write!(f, "document has more than the limit of {n} values"),
            TotalStringBytesLimit(n) => write!(
                f,
                "document has more than the limit of {n} bytes of strings"
            ),
            ChunkTooSmall {
                element,
                needed,
                limit,
            } => write!(
                f,
                "element {element} alone needs {needed} bytes, more than the chunk limit of {limit}"
            ),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at offset {}", self.inner.code, self.inner.offset)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Error({:?} at offset {})",
            self.inner.code, self.inner.offset
        )
    }
}

impl std::error::Error for Error {}
