//! The HTTP API (axum). See the crate README for the endpoints and their formats.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sluice_reader::{OutputFormat, RangeReader, ReadItem, ReadOptions, ReadRequest, Selection};
use sluice_store::{BlobKey, Namespace, Store, StoreError};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::{LockMetrics, SharedMetrics};
use crate::pipeline::{now_unix, IngestSummary, Msg};

/// Most drops listed one by one in an ingest response (`dropped_total` counts them all).
pub const MAX_LISTED_DROPS: usize = 1000;
/// Bytes of NDJSON / Sereal gathered before a streamed chunk is sent.
const STREAM_CHUNK: usize = 64 << 10;

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct AppState {
    pub tx: mpsc::Sender<Msg>,
    pub store: Arc<dyn Store>,
    pub metrics: SharedMetrics,
    pub timeout: Duration,
    pub wal: Arc<sluice_collector::wal::Wal>,
    /// The configured dc (`/v1/counts` probes it for epochs that have counts but no index).
    pub dc: String,
    /// Set when the server shuts down (tail streams end with a `shutdown` event).
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// The cap on concurrent `GET /v1/tail` streams.
    pub tail_streams: Arc<crate::tail::TailStreams>,
}

pub(crate) fn router(state: AppState, max_body: usize) -> Router {
    let timeout = state.timeout;
    Router::new()
        .route("/v1/events", get(read_events).post(post_events))
        .route("/buckets/{ns}/keys/{key}", get(get_blob))
        .route(
            "/buckets/substreams/{name}/keys/{key}",
            get(get_substream_blob),
        )
        .route("/v1/tail", get(crate::tail::tail))
        .route("/v1/counts", get(read_counts))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                match tokio::time::timeout(timeout, next.run(req)).await {
                    Ok(resp) => resp,
                    Err(_) => error(StatusCode::REQUEST_TIMEOUT, "request timed out"),
                }
            },
        ))
        .with_state(state)
}

pub(crate) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": msg.into() });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn json(status: StatusCode, value: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// Answers once the payload's WAL record is durable (see [`crate::pipeline::durable`]).
async fn post_events(State(st): State<AppState>, body: Bytes) -> Response {
    let rx = match crate::pipeline::submit(&st.tx, "http", body).await {
        Ok(rx) => rx,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    match crate::pipeline::durable(rx, &st.wal).await {
        Ok(summary) => ingest_response(&summary),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

fn ingest_response(s: &IngestSummary) -> Response {
    let dropped: Vec<serde_json::Value> = s
        .dropped
        .iter()
        .take(MAX_LISTED_DROPS)
        .map(|d| {
            let mut v = serde_json::json!({ "index": d.index, "reason": d.reason.as_str(), "detail": d.detail });
            if d.count != 1 {
                v["count"] = d.count.into();
            }
            if d.whole_payload {
                v["whole_payload"] = true.into();
            }
            v
        })
        .collect();
    let total: u64 = s.dropped.iter().map(|d| d.count).sum();
    let status = if s.accepted == 0 && (s.rejected || total > 0) {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    json(
        status,
        serde_json::json!({ "accepted": s.accepted, "dropped_total": total, "dropped": dropped }),
    )
}

/// Splits a raw query string into decoded `(key, value)` pairs (`+` is a space).
pub(crate) use sluice_reader::selection::parse_query;

/// Builds the read request of `GET /v1/events`.
fn read_request(query: &str, now: i64) -> Result<(ReadRequest, OutputFormat), String> {
    let mut from = None;
    let mut to = None;
    let mut selection = Selection::default();
    let mut format = OutputFormat::Json;
    for (k, v) in parse_query(query) {
        match k.as_str() {
            "from" => {
                from = Some(sluice_reader::parse_time(&v, now).map_err(|e| format!("from: {e}"))?)
            }
            "to" => to = Some(sluice_reader::parse_time(&v, now).map_err(|e| format!("to: {e}"))?),
            "format" => format = v.parse().map_err(|e| format!("format: {e}"))?,
            other => {
                if !selection.accept(other, &v).map_err(|e| e.to_string())? {
                    return Err(format!("unknown parameter {other:?}"));
                }
            }
        }
    }
    let mut req = ReadRequest {
        selection,
        ..ReadRequest::default()
    };
    req.from =
        from.ok_or("`from` is required (Unix seconds, RFC 3339, `now` or relative like -5m)")?;
    req.to = to.unwrap_or(now + 1);
    Ok((req, format))
}

async fn read_events(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let (req, format) = match read_request(q.as_deref().unwrap_or(""), now_unix()) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (start_tx, start_rx) = oneshot::channel::<Result<(), (StatusCode, String)>>();
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    let store = st.store.clone();
    let metrics = st.metrics.clone();
    tokio::task::spawn_blocking(move || {
        let served = stream_range(store, req, format, start_tx, tx);
        if served > 0 {
            *metrics
                .locked()
                .events_out
                .entry("events".into())
                .or_default() += served;
        }
    });
    match start_rx.await {
        Ok(Ok(())) => {}
        Ok(Err((status, msg))) => return error(status, msg),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "reader failed"),
    }
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(Ok::<_, std::io::Error>))
    });
    let ctype = match format {
        OutputFormat::Json => "application/x-ndjson",
        OutputFormat::Sereal => "application/x-sereal",
    };
    ([(header::CONTENT_TYPE, ctype)], Body::from_stream(stream)).into_response()
}

/// Runs on a blocking thread: reads the range and sends the output in chunks. Warnings are
/// collected and, for NDJSON, sent as one last line `{"_sluice":{"warnings":[...]}}`.
/// Returns how many events were written out.
fn stream_range(
    store: Arc<dyn Store>,
    req: ReadRequest,
    format: OutputFormat,
    start: oneshot::Sender<Result<(), (StatusCode, String)>>,
    tx: mpsc::Sender<Bytes>,
) -> u64 {
    let mut served = 0u64;
    let reader = match RangeReader::new(store, req, ReadOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            let status = match e {
                sluice_reader::ReadError::BadRequest(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let _ = start.send(Err((status, e.to_string())));
            return 0;
        }
    };
    if start.send(Ok(())).is_err() {
        return 0;
    }
    let mut w = sluice_reader::EventWriter::new(Vec::with_capacity(STREAM_CHUNK * 2), format);
    let mut warnings = Vec::new();
    for item in reader {
        match item {
            ReadItem::Event(e) => match w.write(&e.value) {
                Ok(_) => served += 1,
                Err(err) => warnings.push(
                    serde_json::json!({ "key": e.key.to_string(), "reason": err.to_string() }),
                ),
            },
            ReadItem::Warning(wa) => {
                eprintln!("sluice-server: read warning: {wa}");
                warnings.push(serde_json::json!({ "key": wa.key, "reason": wa.reason }));
            }
        }
        let buf = w.into_inner();
        if buf.len() >= STREAM_CHUNK {
            if tx.blocking_send(Bytes::from(buf)).is_err() {
                return served; // client gone
            }
            w = sluice_reader::EventWriter::new(Vec::with_capacity(STREAM_CHUNK * 2), format);
        } else {
            w = sluice_reader::EventWriter::new(buf, format);
        }
    }
    let mut buf = w.into_inner();
    if !warnings.is_empty() && format == OutputFormat::Json {
        buf.extend_from_slice(
            serde_json::json!({ "_sluice": { "warnings": warnings } })
                .to_string()
                .as_bytes(),
        );
        buf.push(b'\n');
    }
    if !buf.is_empty() {
        let _ = tx.blocking_send(Bytes::from(buf));
    }
    served
}

/// Widest `to - from` for which `/v1/counts` probes every second of the configured (or asked)
/// dc for counts without an epoch index (seconds whose events were all dropped).
pub const MAX_COUNTS_PROBE_SECS: i64 = 3600;

/// `GET /v1/counts?from&to&dc`: the completeness counts, one JSON line per
/// (epoch, dc, type, subtype), in epoch order. See the crate README.
async fn read_counts(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let now = now_unix();
    let (mut from, mut to, mut dc) = (None, None, None);
    for (k, v) in parse_query(q.as_deref().unwrap_or("")) {
        match k.as_str() {
            "from" => match sluice_reader::parse_time(&v, now) {
                Ok(t) => from = Some(t),
                Err(e) => return error(StatusCode::BAD_REQUEST, format!("from: {e}")),
            },
            "to" => match sluice_reader::parse_time(&v, now) {
                Ok(t) => to = Some(t),
                Err(e) => return error(StatusCode::BAD_REQUEST, format!("to: {e}")),
            },
            "dc" => dc = Some(v),
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter {other:?}"),
                )
            }
        }
    }
    let Some(from) = from else {
        return error(
            StatusCode::BAD_REQUEST,
            "`from` is required (Unix seconds, RFC 3339, `now` or relative like -5m)",
        );
    };
    let to = to.unwrap_or(now + 1);
    let store = st.store.clone();
    let probe_dc = dc.clone().unwrap_or_else(|| st.dc.clone());
    let res = tokio::task::spawn_blocking(move || {
        counts_lines(store.as_ref(), from, to, dc.as_deref(), &probe_dc)
    })
    .await;
    match res {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The body of `/v1/counts`: the `(epoch, dc)` pairs listed by the epoch index, plus (for
/// ranges up to [`MAX_COUNTS_PROBE_SECS`]) every second of `probe_dc` that has counts.
fn counts_lines(
    store: &dyn Store,
    from: i64,
    to: i64,
    dc: Option<&str>,
    probe_dc: &str,
) -> sluice_store::Result<String> {
    let mut pairs: std::collections::BTreeSet<(i64, String)> =
        store.list_epochs(dc, from, to)?.into_iter().collect();
    let mut fetched = std::collections::BTreeMap::new();
    if to > from && to - from <= MAX_COUNTS_PROBE_SECS {
        for epoch in from..to {
            if pairs.contains(&(epoch, probe_dc.to_string())) {
                continue;
            }
            let c = store.get_counts(epoch, probe_dc)?;
            if !c.is_empty() {
                pairs.insert((epoch, probe_dc.to_string()));
                fetched.insert((epoch, probe_dc.to_string()), c);
            }
        }
    }
    let mut out = String::new();
    for (epoch, d) in pairs {
        let counts = match fetched.remove(&(epoch, d.clone())) {
            Some(c) => c,
            None => store.get_counts(epoch, &d)?,
        };
        for ((type_, subtype), c) in counts {
            let line = serde_json::json!({
                "epoch": epoch,
                "dc": d,
                "type": type_,
                "subtype": subtype,
                "stored": c.stored,
                "late": c.late,
                "dropped": c.dropped,
                "kernel_dropped": c.kernel_dropped,
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    Ok(out)
}

async fn get_blob(State(st): State<AppState>, Path((ns, key)): Path<(String, String)>) -> Response {
    blob_response(st, ns, key).await
}

async fn get_substream_blob(
    State(st): State<AppState>,
    Path((name, key)): Path<(String, String)>,
) -> Response {
    blob_response(st, format!("substreams/{name}"), key).await
}

async fn blob_response(st: AppState, ns: String, key: String) -> Response {
    let ns = match Namespace::parse(&ns) {
        Ok(ns) => ns,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let digits = key.bytes().take_while(u8::is_ascii_digit).count();
    let Some(epoch) = key[..digits]
        .parse::<i64>()
        .ok()
        .filter(|_| key[digits..].starts_with(':'))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("key {key:?} does not start with `<epoch>:`"),
        );
    };
    let store = st.store.clone();
    let res =
        tokio::task::spawn_blocking(move || store.get_blob(&ns, BlobKey::new(epoch, &key))).await;
    match res {
        Ok(Ok(Some(bytes))) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, "not found"),
        // A key the store refuses to look up (a NUL, too long, ...) is the client's error.
        Ok(Err(e @ StoreError::InvalidArgument { .. })) => {
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn healthz(State(st): State<AppState>) -> Response {
    if st.tx.is_closed() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "pipeline stopped");
    }
    let unavailable = st.metrics.locked().disk_unavailable.clone();
    if let Some(why) = unavailable {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: ingest unavailable: {why}"),
        );
    }
    (StatusCode::OK, "ok\n").into_response()
}

async fn metrics(State(st): State<AppState>) -> Response {
    let m = st.metrics.locked().clone();
    let mut body = crate::metrics::render(&m);
    crate::metrics::render_store_damage(&mut body, &st.store.damage_stats());
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
