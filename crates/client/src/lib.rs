//! Talking to a running `sluice serve`: the one client the CLI (and anything else in Rust) uses.
//!
//! - [`send`]: [`Sender`] — NDJSON events to a collector over UDP (fire-and-forget, packed
//!   datagrams), TCP (one acknowledged line per batch) or HTTP (`POST /v1/events` batches).
//! - [`read`]: [`HttpReader`] — `GET /v1/events` for a range and a [`Selection`]: NDJSON events
//!   one by one, the server's trailing `{"_sluice":{"warnings":[…]}}` line turned into
//!   [`ReadWarning`]s (or the raw Sereal stream).
//! - [`tail`]: [`TailClient`] — `GET /v1/tail` (Server-Sent Events) that reconnects from its last
//!   cursor with a bounded backoff after a dropped connection, a stopped server or its
//!   `event: shutdown`, and hands out events a whole batch at a time so the cursor always
//!   matches what was handed out (exactly once across reconnects).
//! - [`data_dir`]: [`resolve_data_dir`] — a data directory read directly, or through the server
//!   that holds its lock (its address is in `DIR/SERVER`).
//! - [`args`]: [`SelectionArgs`] — the command-line flags of a [`Selection`].
//!
//! Addresses: a server is `http://HOST:PORT` or just `HOST:PORT` ([`base_url`]); there is no TLS.
//! Every network call has a timeout ([`HttpOptions`], [`SendOptions::timeout`]).
//!
//! [`Selection`]: sluice_reader::Selection
//! [`ReadWarning`]: sluice_reader::ReadWarning

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod args;
pub mod data_dir;
pub mod read;
pub mod send;
pub mod substreams;
pub mod tail;

use std::fmt;
use std::time::Duration;

pub use args::SelectionArgs;
pub use data_dir::{resolve_data_dir, DataDir};
pub use read::{EventStream, HttpItem, HttpReader, NdjsonEvents};
pub use send::{SendOptions, Sender, Sent, Transport};
pub use substreams::SubstreamAdmin;
pub use tail::{Backoff, TailBatch, TailClient, TailItem, TailStart};

/// What went wrong talking to a server or opening a data directory.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// An argument is invalid (an address, an option out of range).
    Config(String),
    /// The server answered with an error status.
    Status {
        /// The request URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The body of the answer (the server's error message).
        body: String,
    },
    /// The request did not reach the server, or the answer broke off.
    Transport {
        /// The request URL or address.
        url: String,
        /// What happened.
        message: String,
    },
    /// Local I/O failed (a socket, a file).
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The peer answered something this client does not understand.
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Config(m) | ClientError::Protocol(m) => f.write_str(m),
            ClientError::Status { url, status, body } => {
                // The server answers errors as {"error":"…"}: show the message, not the JSON.
                let message = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| body.trim().to_owned());
                let url = url.split('?').next().unwrap_or(url);
                write!(
                    f,
                    "the server refused the request ({status}, {url}): {message}"
                )
            }
            ClientError::Transport { url, message } => write!(f, "{url}: {message}"),
            ClientError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ClientError {
    /// Whether trying again later may succeed (the server is down, restarting or busy), as
    /// opposed to a request it refuses (a 4xx: bad parameters, a bad cursor).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Status { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            ClientError::Transport { .. } | ClientError::Io { .. } => true,
            ClientError::Config(_) | ClientError::Protocol(_) => false,
        }
    }

    fn io(context: impl Into<String>, source: std::io::Error) -> ClientError {
        ClientError::Io {
            context: context.into(),
            source,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Timeouts of HTTP requests.
#[derive(Debug, Clone, Copy)]
pub struct HttpOptions {
    /// Connecting (default 10 s).
    pub connect_timeout: Duration,
    /// Waiting for any bytes of an answer (default 60 s; [`HttpOptions::tail`]: 150 s).
    pub read_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
        }
    }
}

impl HttpOptions {
    /// For a tail stream: a read timeout of 150 s. The server sends a cursor about every second
    /// once the tail's watermark moves, but nothing for up to its late window (60 s) at the start
    /// of an idle tail; silence longer than that means a dead connection (then: reconnect).
    pub fn tail() -> HttpOptions {
        HttpOptions {
            read_timeout: Duration::from_secs(150),
            ..HttpOptions::default()
        }
    }

    pub(crate) fn agent(&self) -> ureq::Agent {
        ureq::AgentBuilder::new()
            .timeout_connect(self.connect_timeout)
            .timeout_read(self.read_timeout)
            .build()
    }
}

/// The base URL of a server: `HOST:PORT` gets `http://`; a trailing `/` is dropped. Only
/// `http://` is supported (the client is built without TLS).
pub fn base_url(server: &str) -> Result<String> {
    let s = server.trim();
    let host = match s.split_once("://") {
        None => s,
        Some(("http", rest)) => rest,
        Some((scheme, _)) => {
            return Err(ClientError::Config(format!(
                "{server:?}: only http:// servers are supported (got {scheme}://)"
            )))
        }
    };
    let host = host.trim_end_matches('/');
    if host.is_empty() {
        return Err(ClientError::Config(format!("{server:?}: no host")));
    }
    Ok(format!("http://{host}"))
}

/// Turns a ureq error into a [`ClientError`] (reading the body of an error status).
pub(crate) fn http_error(url: &str, e: ureq::Error) -> ClientError {
    match e {
        ureq::Error::Status(status, resp) => {
            let body = resp.into_string().unwrap_or_default();
            ClientError::Status {
                url: url.to_owned(),
                status,
                body,
            }
        }
        // Its Display repeats the URL with the whole query (a long cursor): say the kind and why.
        ureq::Error::Transport(t) => {
            let message = match (t.message(), std::error::Error::source(&t)) {
                (Some(m), _) => format!("{}: {m}", t.kind()),
                (None, Some(src)) => format!("{}: {src}", t.kind()),
                (None, None) => t.kind().to_string(),
            };
            ClientError::Transport {
                url: url.to_owned(),
                message,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(base_url("127.0.0.1:8190").unwrap(), "http://127.0.0.1:8190");
        assert_eq!(
            base_url("http://127.0.0.1:8190/").unwrap(),
            "http://127.0.0.1:8190"
        );
        assert!(base_url("https://x:1").is_err());
        assert!(base_url("").is_err());
        assert!(base_url("http://").is_err());
    }
}
