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
//! - [`args`]: [`SelectionArgs`] — the command-line flags of a [`Selection`]; [`ClientArgs`] —
//!   those of [`ClientOptions`] (`--token`, `--ca`, `--client-cert`, `--client-key`).
//! - [`options`]: [`ClientOptions`] — the token and TLS trust every client carries;
//!   [`local_admin_secret`], [`self_signed_ca`] — what a local server leaves in its data
//!   directory.
//!
//! Addresses: a server is `http://HOST:PORT`, `https://HOST:PORT` or just `HOST:PORT` (plain
//! HTTP; [`base_url`]); a TCP target is `HOST:PORT` or `tls://HOST:PORT`. Every network call has
//! a timeout ([`HttpOptions`], [`SendOptions::timeout`]).
//!
//! [`Selection`]: sluice_reader::Selection
//! [`ReadWarning`]: sluice_reader::ReadWarning

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod args;
pub mod data_dir;
pub mod options;
pub mod read;
pub mod send;
pub mod substreams;
pub mod tail;

use std::fmt;
use std::time::Duration;

pub use args::{ClientArgs, SelectionArgs, TlsArgs};
pub use data_dir::{resolve_data_dir, DataDir};
pub use options::{local_admin_secret, self_signed_ca, ClientOptions};
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

/// Timeouts of HTTP requests, and the token and TLS trust they carry.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Connecting (default 10 s).
    pub connect_timeout: Duration,
    /// Waiting for any bytes of an answer (default 60 s; [`HttpOptions::tail`]: 150 s).
    pub read_timeout: Duration,
    /// The token and TLS trust (default none: no `Authorization`, the built-in roots).
    pub client: ClientOptions,
    /// Range reads skip the server's history tier (`columns=off`: every chunk from its blob;
    /// `sluice cat --no-columns`). Default false.
    pub no_columns: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            client: ClientOptions::default(),
            no_columns: false,
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

    /// The same options with `client`.
    pub fn with_client(mut self, client: ClientOptions) -> HttpOptions {
        self.client = client;
        self
    }

    /// An HTTP agent with these timeouts whose every request carries the token (unless it sets
    /// `Authorization` itself) and trusts the CA of [`HttpOptions::client`]. Fails when a TLS
    /// file cannot be read.
    pub fn agent(&self) -> Result<ureq::Agent> {
        agent_builder(&self.client).map(|b| {
            b.timeout_connect(self.connect_timeout)
                .timeout_read(self.read_timeout)
                .build()
        })
    }
}

/// An agent builder carrying `client`'s token and TLS trust.
pub(crate) fn agent_builder(client: &ClientOptions) -> Result<ureq::AgentBuilder> {
    let mut b = ureq::AgentBuilder::new();
    if client.custom_tls() {
        b = b.tls_config(client.tls_config()?);
    }
    if let Some(bearer) = client.bearer() {
        // The error type is ureq's own (the middleware signature).
        #[allow(clippy::result_large_err)]
        let auth = move |req: ureq::Request, next: ureq::MiddlewareNext<'_>| {
            if req.header("authorization").is_some() {
                next.handle(req)
            } else {
                next.handle(req.set("Authorization", &bearer))
            }
        };
        b = b.middleware(auth);
    }
    Ok(b)
}

/// The base URL of a server: `HOST:PORT` gets `http://`; `http://` and `https://` are kept; a
/// trailing `/` is dropped.
pub fn base_url(server: &str) -> Result<String> {
    let s = server.trim();
    let (scheme, host) = match s.split_once("://") {
        None => ("http", s),
        Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
        Some((scheme, _)) => {
            return Err(ClientError::Config(format!(
                "{server:?}: a server is http://HOST:PORT or https://HOST:PORT (got {scheme}://)"
            )))
        }
    };
    let host = host.trim_end_matches('/');
    if host.is_empty() {
        return Err(ClientError::Config(format!("{server:?}: no host")));
    }
    Ok(format!("{scheme}://{host}"))
}

/// What to add to a TLS error: how to trust a server's certificate.
pub(crate) fn tls_hint(message: &str) -> &'static str {
    if message.contains("invalid peer certificate") || message.contains("UnknownIssuer") {
        " (a certificate of a private CA or a self-signed one: give its CA with --ca FILE or SLUICE_CA)"
    } else {
        ""
    }
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
        ureq::Error::Transport(t) => ClientError::Transport {
            url: url.to_owned(),
            message: transport_message(&t),
        },
    }
}

/// What went wrong, without the URL: the kind, ureq's message and its cause (a TLS error says
/// why the certificate was refused), and how to trust a private CA when that is the cause.
pub(crate) fn transport_message(t: &ureq::Transport) -> String {
    let mut message = t.kind().to_string();
    if let Some(m) = t.message() {
        message = format!("{message}: {m}");
    }
    if let Some(src) = std::error::Error::source(t) {
        message = format!("{message}: {src}");
    }
    let hint = tls_hint(&message);
    format!("{message}{hint}")
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
        assert_eq!(base_url("https://x:1/").unwrap(), "https://x:1");
        assert!(base_url("ftp://x:1").is_err());
        assert!(base_url("https://").is_err());
        assert!(base_url("").is_err());
        assert!(base_url("http://").is_err());
    }
}
