//! `GET /v1/tail`: the live stream as Server-Sent Events.
//!
//! Parameters: `from` (a time; default `now`) or `cursor` (a token from an earlier tail, to
//! resume with no gap and no duplicate), `live` (default on), and the filters of `GET /v1/events` (`dc`, `type`,
//! `subtype`, `select` (repeated), `where`). The stream carries four kinds of event:
//! - `event: event` — `data:` one event as JSON (or the object of selected paths);
//! - `event: warning` — `data:` `{"key":…,"reason":…}` for a chunk that could not be read;
//! - `event: notice` — `data:` `{"key":…,"reason":…}` with `substream=NAME`: a chunk whose
//!   substream result was computed here from the full blob (fallback; nothing lost);
//! - `event: cursor` — `data:` the cursor token after everything sent so far; a client that
//!   reconnects with `cursor=<token>` continues exactly after it;
//! - `event: hint` — only with `hints=1`: `data:` advice, once per stream, after the tail has
//!   caught up and seen data
//!   (`sluice_reader::hints::for_tail`: a type or a field it never saw, a number field compared
//!   with a string); not part of any batch, and ignored by clients that do not know it.
//!
//! Live: once caught up, the stream also takes every acknowledged payload from memory (the
//! live hub, `crate::live`), so an event goes out milliseconds after its acknowledgement, before
//! its second is stored; the cursor records those WAL records, and the chunks that later hold
//! them are read without them (`sluice_reader::Tail::go_live`). `live=0` (or `off`) follows the
//! store only; a substream tail always does. When the hub lets go of a stream (a client too slow
//! for its queue, a WAL error, an `original` blob profile), the stream says so once
//! (`event: notice`, key `live`) and goes on from the store, exactly, subscribing again 5 s later.
//!
//! The tail polls the store every 100 ms, so a stored event is sent at most ~0.1 s after its
//! second is stored (the collector stores a second its grace period after it ends).
//!
//! Limits: at most `http_max_tail_streams` streams at once (each holds a blocking thread);
//! more get **503** (`sluice_connections_refused_total{transport="http",reason="tail_cap"}`).
//! When the server shuts down, each stream ends with a last event, then the response ends:
//! - `event: shutdown` — `data:` `{"reason":"server shutting down"}`; the client may reconnect
//!   later with the last cursor it received.

use std::str::FromStr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::time::{Duration, Instant};

use sluice_reader::{Cursor, EventWriter, OutputFormat, ReadItem, Tail, TailOptions, TailRequest};
use sluice_store::Store;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::params::{self, parse_query};
use super::{error, AppState};
use crate::live::{LiveEnded, LiveHub, LiveSubscription};

/// The last event of a stream the server ends because it is shutting down.
pub const SHUTDOWN_EVENT: &str = "event: shutdown\ndata: {\"reason\":\"server shutting down\"}\n\n";

/// The cap on concurrent tail streams.
pub(crate) struct TailStreams {
    slots: Arc<Semaphore>,
    max: usize,
}

impl TailStreams {
    /// Room for `max` concurrent streams.
    pub(crate) fn new(max: usize) -> TailStreams {
        TailStreams {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }
}

/// A stream's place under the cap, counted in `sluice_tail_streams` while it lives.
struct TailSlot {
    _permit: OwnedSemaphorePermit,
    metrics: crate::metrics::SharedMetrics,
}

impl Drop for TailSlot {
    fn drop(&mut self) {
        self.metrics.tail_streams.dec();
    }
}

/// Builds the tail request and starting cursor from the query string.
fn tail_request(query: &str, now: i64) -> Result<TailParams, params::ParamError> {
    let mut selection = TailRequest::default();
    let mut start = None;
    let mut hints = false;
    let mut live = true;
    for (k, v) in parse_query(query) {
        match k.as_str() {
            "hints" => hints = params::hints(&v)?,
            "live" => live = params::on_off("live", &v)?,
            "from" => start = Some(Cursor::at(params::time("from", &v, now)?)),
            "cursor" => start = Some(Cursor::from_str(&v)?),
            other => {
                if !selection.accept(other, &v)? {
                    return Err(params::unknown(other));
                }
            }
        }
    }
    Ok(TailParams {
        selection,
        start: start.unwrap_or_else(|| Cursor::at(now)),
        hints,
        live,
    })
}

/// What `GET /v1/tail`'s query asks for.
struct TailParams {
    selection: TailRequest,
    start: Cursor,
    hints: bool,
    /// Take acknowledged records from memory as well (`live=0`: only what is stored).
    live: bool,
}

/// `GET /v1/tail`: validates the parameters, takes a slot under the cap, then streams.
pub(crate) async fn tail(
    State(st): State<AppState>,
    axum::Extension(grant): axum::Extension<sluice_auth::Grant>,
    RawQuery(q): RawQuery,
) -> Response {
    let now = sluice_reader::time::now_unix();
    let TailParams {
        selection: mut req,
        start,
        hints,
        live,
    } = match tail_request(q.as_deref().unwrap_or(""), now) {
        Ok(r) => r,
        Err(e) => return error(axum::http::StatusCode::BAD_REQUEST, e),
    };
    req.visible = super::visible(&grant);
    let read =
        match super::events::substream_options(&st.store, &mut req, st.python_substreams).await {
            Ok(o) => o,
            Err(r) => return r,
        };
    let Ok(permit) = st.tail_streams.slots.clone().try_acquire_owned() else {
        st.metrics
            .connections_refused
            .with_label_values(&["http", "tail_cap"])
            .inc();
        let mut resp = error(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many tail streams ({} open, http_max_tail_streams); retry later",
                st.tail_streams.max
            ),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
        return resp;
    };
    st.metrics.tail_streams.inc();
    let slot = TailSlot {
        _permit: permit,
        metrics: st.metrics.clone(),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    // A substream's results are computed at write time: nothing of them is in memory.
    let live = (live && req.substream.is_none() && !st.live.is_off()).then(|| st.live.clone());
    let follower = Follower {
        store: st.store.clone(),
        live,
        want_hints: hints,
        tx,
        metrics: st.metrics.clone(),
    };
    tokio::task::spawn_blocking(move || follower.run(req, start, read));
    // Until shutdown: what the follower sends; then the shutdown event, and the end (dropping
    // the receiver stops the follower).
    let stream =
        futures_util::stream::unfold(Some((rx, st.stop.clone(), slot)), |state| async move {
            let (mut rx, mut stop, slot) = state?;
            let item = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => None,
                item = rx.recv() => Some(item),
            };
            match item {
                None => Some((Ok(Bytes::from_static(SHUTDOWN_EVENT.as_bytes())), None)),
                Some(item) => item.map(|b| (Ok::<_, std::io::Error>(b), Some((rx, stop, slot)))),
            }
        });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// How long a tail whose live subscription ended waits before it subscribes again (a slow
/// client would be dropped again at once; the store keeps it exact meanwhile).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(5);

/// Most live records turned into one SSE batch (and one cursor).
const LIVE_BATCH_RECORDS: usize = 256;

/// One tail stream's thread: store polls, live records, SSE frames.
struct Follower {
    store: Arc<dyn Store>,
    /// The live hub, unless `live=0` or a substream.
    live: Option<Arc<LiveHub>>,
    want_hints: bool,
    tx: mpsc::Sender<Bytes>,
    metrics: crate::metrics::SharedMetrics,
}

impl Follower {
    /// Runs on a blocking thread until the client goes away: polls the store every 100 ms and,
    /// once caught up, takes acknowledged records from the live hub as they come.
    fn run(self, req: TailRequest, start: Cursor, read: sluice_reader::ReadOptions) {
        // Poll as often as the pipeline flushes: a stored second goes out within ~0.1 s.
        let opts = TailOptions {
            poll_interval: Duration::from_millis(100),
            read,
            ..TailOptions::default()
        };
        let mut tail = Tail::new(self.store.clone(), req, start, opts);
        let interval = tail.options().poll_interval;
        let mut last_cursor = String::new();
        let mut hinted = !self.want_hints;
        let mut sub: Option<LiveSubscription> = None;
        // When to subscribe (again): once caught up, and not before this.
        let mut subscribe_at = Instant::now();
        let mut next_poll = Instant::now();
        loop {
            if self.tx.is_closed() {
                return;
            }
            let mut items = Vec::new();
            if let Some(s) = &sub {
                match take_live(s, &mut tail, next_poll, &mut items) {
                    Ok(()) => {}
                    Err(ended) => {
                        tail.end_live();
                        sub = None;
                        subscribe_at = Instant::now() + RESUBSCRIBE_AFTER;
                        let msg = serde_json::json!({ "key": "live", "reason": ended.reason });
                        if send(&self.tx, "notice", &msg.to_string()).is_err() {
                            return;
                        }
                    }
                }
            } else {
                std::thread::sleep(next_poll.saturating_duration_since(Instant::now()));
            }
            let now = sluice_reader::time::now_unix();
            if Instant::now() >= next_poll {
                next_poll = Instant::now() + interval;
                match tail.poll(now) {
                    Ok(polled) => items.extend(polled),
                    Err(e) => {
                        let msg = serde_json::json!({ "key": "tail", "reason": e.to_string() });
                        if send(&self.tx, "warning", &msg.to_string()).is_err() {
                            return;
                        }
                    }
                }
                if sub.is_none() && tail.caught_up() && Instant::now() >= subscribe_at {
                    if let Some(hub) = &self.live {
                        let s = hub.subscribe();
                        tail.go_live(s.collector().as_deref(), s.start());
                        sub = Some(s);
                    }
                }
            }
            let mut buf = self.frames(items);
            let token = tail.cursor().to_token();
            if token != last_cursor || !buf.is_empty() {
                buf.extend_from_slice(format!("event: cursor\ndata: {token}\n\n").as_bytes());
                last_cursor = token;
            }
            // Typo hints, once, after a whole batch (`sluice_reader::hints::for_tail`).
            if !hinted {
                if let Some(hints) = tail.hints(now) {
                    hinted = true;
                    for h in hints {
                        let text = h.replace('\n', " ");
                        buf.extend_from_slice(format!("event: hint\ndata: {text}\n\n").as_bytes());
                    }
                }
            }
            if !buf.is_empty() && self.tx.blocking_send(Bytes::from(buf)).is_err() {
                return;
            }
        }
    }

    /// The SSE frames of `items` (an event's `data:` is its NDJSON line, the one JSON writer of
    /// `sluice_reader::output`; the line's newline and one more end the message).
    fn frames(&self, items: Vec<ReadItem>) -> Vec<u8> {
        let mut events = EventWriter::new(Vec::new(), OutputFormat::Json);
        let mut served = 0u64;
        for item in items {
            match item {
                ReadItem::Event(e) => {
                    served += 1;
                    events.get_mut().extend_from_slice(b"event: event\ndata: ");
                    let _ = events.write(&e.value);
                    events.get_mut().push(b'\n');
                }
                ReadItem::Warning(w) => {
                    let msg = serde_json::json!({ "key": w.key, "reason": w.reason });
                    let buf = events.get_mut();
                    buf.extend_from_slice(format!("event: warning\ndata: {msg}\n\n").as_bytes());
                }
                ReadItem::Notice(w) => {
                    let msg = serde_json::json!({ "key": w.key, "reason": w.reason });
                    let buf = events.get_mut();
                    buf.extend_from_slice(format!("event: notice\ndata: {msg}\n\n").as_bytes());
                }
            }
        }
        if served > 0 {
            self.metrics
                .events_out
                .with_label_values(&["tail"])
                .inc_by(served);
        }
        events.into_inner()
    }
}

/// Waits for live records until `deadline` (the next store poll), then takes what else is
/// queued, up to [`LIVE_BATCH_RECORDS`]: their events join `items`.
fn take_live<S, T>(
    sub: &LiveSubscription,
    tail: &mut Tail<S>,
    deadline: Instant,
    items: &mut Vec<ReadItem>,
) -> Result<(), LiveEnded>
where
    S: std::ops::Deref<Target = T>,
    T: sluice_store::ReadStore + ?Sized,
{
    let wait = deadline.saturating_duration_since(Instant::now());
    let Some(doc) = sub.recv_timeout(wait)? else {
        return Ok(());
    };
    items.extend(tail.deliver_live(&doc));
    for _ in 1..LIVE_BATCH_RECORDS {
        match sub.recv_timeout(Duration::ZERO)? {
            Some(doc) => items.extend(tail.deliver_live(&doc)),
            None => break,
        }
    }
    Ok(())
}

fn send(tx: &mpsc::Sender<Bytes>, event: &str, data: &str) -> Result<(), ()> {
    tx.blocking_send(Bytes::from(format!("event: {event}\ndata: {data}\n\n")))
        .map_err(|_| ())
}
