//! Why a bench run stopped. The bench reports what it measured as a table and reports wrong
//! answers as MISMATCH in it; these errors are for what makes a measurement impossible (a
//! server that does not start, a request that fails, a file that cannot be read).

use std::path::PathBuf;

/// What stopped the run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or directory could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A program could not be started, or it failed.
    #[error("{program}: {detail}")]
    Program {
        /// The program.
        program: String,
        /// What went wrong (its exit status and the end of its stderr, or the spawn error).
        detail: String,
    },
    /// An HTTP request failed (transport error, timeout or an error status).
    #[error("{method} {url}: {detail}")]
    Http {
        /// GET or POST.
        method: &'static str,
        /// The URL without its query.
        url: String,
        /// The status and body, or the transport error.
        detail: String,
    },
    /// Something did not happen in time (a server start, the store flush, the columns).
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        secs: u64,
    },
    /// An answer could not be understood (not JSON, a field missing).
    #[error("{what}: {detail}")]
    Parse {
        /// What was parsed.
        what: String,
        /// Why it did not parse.
        detail: String,
    },
    /// A command-line argument or environment setting is wrong.
    #[error("{0}")]
    Usage(String),
}

impl BenchError {
    /// An I/O error on `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    /// A parse error.
    pub fn parse(what: impl Into<String>, detail: impl ToString) -> BenchError {
        BenchError::Parse {
            what: what.into(),
            detail: detail.to_string(),
        }
    }
}

/// The bench's result type.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
