//! Following a server's live stream: `GET /v1/tail` (Server-Sent Events) that survives restarts.
//!
//! # Contract
//! - **Whole batches.** The server sends, per poll of its store, the poll's `event: event` and
//!   `event: warning` messages and then `event: cursor` (the position after them). The client
//!   keeps a batch until its cursor arrives and only then hands it out ([`TailItem::Batch`]),
//!   so [`TailClient::cursor`] is always exactly "after everything handed out".
//! - **Reconnects.** A refused or dropped connection, a read timeout
//!   ([`HttpOptions::read_timeout`]; use [`HttpOptions::tail`]), an error status of 5xx / 408 / 429, the end of the stream
//!   and the server's `event: shutdown` all lead to a reconnect from the last cursor (before the
//!   first cursor: from the start, resolved to an epoch once, so `now` does not move). A partial
//!   batch is dropped (the server sends it again after the cursor). So across any number of
//!   reconnects each event is handed out exactly once, within the server's tail guarantee
//!   (`sluice_reader::tail`). Before each reconnect the client returns
//!   [`TailItem::Reconnecting`] (say so to the user) and then sleeps the delay on the next call:
//!   [`Backoff`], 0.2 s doubling to 5 s, back to 0.2 s once a cursor arrives. It retries for
//!   ever; the caller stops it (a limit, a signal).
//! - **Refusals are final.** Any other status (400: a bad parameter or cursor) is an error.
//! - **Hints.** `event: hint` messages (advice: a type or field this tail never saw) are kept
//!   for [`TailClient::take_hints`], not part of any batch (at most 64 held).
//! - **Bounded memory.** A batch larger than [`TailClient::max_batch_bytes`] (default 256 MiB)
//!   is an error: the server's batches are bounded by its catch-up span, so one that large
//!   means a misbehaving peer.

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use sluice_reader::Selection;

use crate::{base_url, http_error, ClientError, HttpOptions, Result};

/// Largest batch (bytes of event and warning data) held while waiting for its cursor.
pub const MAX_BATCH_BYTES: usize = 256 << 20;

/// Where a tail starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailStart {
    /// At this epoch (Unix seconds).
    At(i64),
    /// After what an earlier tail handed out (its cursor token).
    Cursor(String),
}

/// The delay between reconnection attempts: `first`, doubling up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay (default 200 ms).
    pub first: Duration,
    /// The longest delay (default 5 s).
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(200),
            max: Duration::from_secs(5),
        }
    }
}

/// A complete batch: its events and warnings, and the cursor after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailBatch {
    /// The events, one JSON text each (or the object of selected paths).
    pub events: Vec<String>,
    /// The warnings (`{"key":…,"reason":…}` JSON texts) for chunks that could not be read.
    pub warnings: Vec<String>,
    /// The notices (same form): substream results the server computed from the full blob.
    pub notices: Vec<String>,
    /// The cursor token after this batch.
    pub cursor: String,
}

/// What [`TailClient::next_item`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailItem {
    /// A complete batch (possibly with no events: the cursor moved).
    Batch(TailBatch),
    /// The stream was (re)opened.
    Connected {
        /// Whether from a cursor received earlier (false: from the start).
        resumed: bool,
    },
    /// The connection failed or ended; the next call waits `after`, then reconnects.
    Reconnecting {
        /// Why.
        reason: String,
        /// How long the next call waits first.
        after: Duration,
    },
}

type Lines = std::io::Lines<BufReader<Box<dyn Read + Send + Sync>>>;

/// A tail of a server that reconnects from its cursor: see the [module docs](self).
pub struct TailClient {
    url: String,
    agent: ureq::Agent,
    selection: Vec<(&'static str, String)>,
    start: TailStart,
    cursor: Option<String>,
    stream: Option<Lines>,
    backoff: Backoff,
    delay: Duration,
    sleep_first: Option<Duration>,
    hints: Vec<String>,
    /// Largest batch held while waiting for its cursor (default [`MAX_BATCH_BYTES`]).
    pub max_batch_bytes: usize,
}

impl TailClient {
    /// A tail of `server` (`http://HOST:PORT`, `https://HOST:PORT` or `HOST:PORT`) for
    /// `selection`, from `start`, with the token and TLS trust of `http.client`. Nothing is
    /// connected until the first [`next_item`](TailClient::next_item).
    pub fn new(
        server: &str,
        selection: &Selection,
        start: TailStart,
        http: &HttpOptions,
        backoff: Backoff,
    ) -> Result<TailClient> {
        if backoff.first.is_zero() || backoff.max < backoff.first {
            return Err(ClientError::Config("backoff: need 0 < first <= max".into()));
        }
        Ok(TailClient {
            url: format!("{}/v1/tail", base_url(server)?),
            agent: http.agent()?,
            selection: selection.query_pairs(),
            start,
            cursor: None,
            stream: None,
            backoff,
            delay: backoff.first,
            sleep_first: None,
            hints: Vec::new(),
            max_batch_bytes: MAX_BATCH_BYTES,
        })
    }

    /// The hints the server sent so far (`event: hint`: a type or field this tail never saw,
    /// …), taken once each.
    pub fn take_hints(&mut self) -> Vec<String> {
        std::mem::take(&mut self.hints)
    }

    /// The cursor after the last batch handed out (`None` before the first).
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// The next batch or connection change; blocks (reading, or sleeping before a reconnect).
    /// Errors only for what a retry cannot fix (a 4xx answer, an oversized batch).
    pub fn next_item(&mut self) -> Result<TailItem> {
        if let Some(d) = self.sleep_first.take() {
            std::thread::sleep(d);
        }
        let Some(lines) = self.stream.as_mut() else {
            return self.connect();
        };
        let (mut event, mut data) = (String::new(), String::new());
        let mut events = Vec::new();
        let mut warnings = Vec::new();
        let mut notices = Vec::new();
        let mut held = 0usize;
        loop {
            let line = match lines.next() {
                Some(Ok(line)) => line,
                // ureq says "Error while decoding chunks" when the server dies mid-stream.
                Some(Err(e)) => {
                    return Ok(self.reconnect(format!(
                        "the connection to the server broke (stopped or restarted?): {e}"
                    )))
                }
                None => return Ok(self.reconnect("the server ended the stream".into())),
            };
            if !line.is_empty() {
                // Fields of one message (`event:`, `data:` possibly repeated; `:` comments).
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.strip_prefix(' ').unwrap_or(v).to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
                if data.len() > self.max_batch_bytes {
                    return Err(self.oversized());
                }
                continue;
            }
            let (name, text) = (std::mem::take(&mut event), std::mem::take(&mut data));
            match name.as_str() {
                "event" | "warning" | "notice" => {
                    held += text.len();
                    if held > self.max_batch_bytes {
                        return Err(self.oversized());
                    }
                    match name.as_str() {
                        "event" => events.push(text),
                        "notice" => notices.push(text),
                        _ => warnings.push(text),
                    }
                }
                "cursor" => {
                    self.cursor = Some(text.clone());
                    self.delay = self.backoff.first;
                    return Ok(TailItem::Batch(TailBatch {
                        events,
                        warnings,
                        notices,
                        cursor: text,
                    }));
                }
                "hint" if self.hints.len() < 64 => self.hints.push(text),
                "shutdown" => {
                    return Ok(self.reconnect(format!("the server is shutting down ({text})")))
                }
                _ => {} // unknown events are ignored, as SSE clients do
            }
        }
    }

    fn oversized(&mut self) -> ClientError {
        self.stream = None;
        ClientError::Protocol(format!(
            "{}: a batch larger than {} bytes without a cursor",
            self.url, self.max_batch_bytes
        ))
    }

    fn connect(&mut self) -> Result<TailItem> {
        let mut req = self.agent.get(&self.url);
        let resumed = self.cursor.is_some();
        req = match (&self.cursor, &self.start) {
            (Some(c), _) | (None, TailStart::Cursor(c)) => req.query("cursor", c),
            (None, TailStart::At(epoch)) => req.query("from", &epoch.to_string()),
        };
        for (k, v) in &self.selection {
            req = req.query(k, v);
        }
        req = req.query("hints", "1");
        match req.call() {
            Ok(resp) => {
                self.stream = Some(BufReader::new(resp.into_reader()).lines());
                Ok(TailItem::Connected { resumed })
            }
            Err(e) => {
                let e = http_error(&self.url, e);
                if e.is_retryable() {
                    Ok(self.reconnect(e.to_string()))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Drops the stream (and any partial batch) and schedules the next attempt.
    fn reconnect(&mut self, reason: String) -> TailItem {
        self.stream = None;
        let after = self.delay;
        self.delay = (self.delay * 2).min(self.backoff.max);
        self.sleep_first = Some(after);
        TailItem::Reconnecting { reason, after }
    }
}
