//! `POST /v1/events` (ingest) and `GET /v1/events` (a time range, streamed).
//!
//! Contracts: a POST is answered only once its WAL record is durable
//! (`pipeline::durable`): **200** when something was accepted (or nothing dropped),
//! **400** when nothing was accepted and something was dropped, **503** (not acknowledged:
//! resend) when the pipeline is stopping, the WAL fails or the queue is full. At most
//! [`MAX_LISTED_DROPS`] drops are listed; `dropped_total` counts them all.
//!
//! A GET reads on a blocking thread and streams in chunks of about 64 KiB, in epoch order;
//! damage is skipped and reported, never cut silently: for NDJSON as one last line
//! `{"_sluice":{"warnings":[…]}}`, for Sereal on stderr. With `hints=1`, the same line carries
//! `"hints":["…"]` (`sluice_reader::hints`: a type or field never seen, an empty range, …) when
//! there are any; it is sent when there are warnings or hints. With `substream=NAME` it also
//! carries `"notices"` (substream results computed here from the full blob, unless
//! `no_fallback`). Bad parameters get **400** before anything is streamed; an unknown
//! substream **404**. With `group_by`/`agg`/`window`, `count_by`, `top`/`by` the answer is
//! rows, not events: `sluice_reader::reduce` (the code of `sluice cat
//! --group-by/--count-by/--top`) runs over the range on the server, reading only the fields it
//! names (`Plan::narrow_read`: blob chunks read lazily).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sluice_auth::Grant;
use sluice_reader::reduce::{Plan, PlanArgs, Sink};
use sluice_reader::{
    EventWriter, OutputFormat, RangeReader, ReadItem, ReadOptions, ReadRequest, Selection,
};
use sluice_store::Store;
use tokio::sync::{mpsc, oneshot};

use super::params::{self, parse_query, TimeRange};
use super::{error, json, AppState};
use crate::pipeline::{now_unix, IngestSummary};

/// Most drops listed one by one in an ingest response (`dropped_total` counts them all).
pub const MAX_LISTED_DROPS: usize = 1000;
/// Bytes of NDJSON / Sereal gathered before a streamed chunk is sent.
const STREAM_CHUNK: usize = 64 << 10;

/// Answers once the payload's WAL record is durable (see [`crate::pipeline::durable`]).
pub(crate) async fn post_events(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    body: Bytes,
) -> Response {
    let allowed = (!grant.allowed.is_all()).then(|| std::sync::Arc::new(grant.allowed));
    let rx = match crate::pipeline::submit(&st.tx, "http", body, allowed).await {
        Ok(rx) => rx,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    match crate::pipeline::durable(rx, &st.acks, &st.metrics).await {
        Ok(summary) if summary.forbidden.is_some() => {
            error(StatusCode::FORBIDDEN, summary.forbidden.unwrap_or_default())
        }
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

/// Builds the read request of `GET /v1/events` (and whether hints were asked for).
/// A parsed `GET /v1/events`.
struct EventsQuery {
    req: ReadRequest,
    format: OutputFormat,
    hints: bool,
    /// `group_by` / `agg` / `window` / `count_by` / `top` / `by`: rows instead of events.
    plan: Option<Plan>,
    /// `columns=off`: blobs only, even where column files cover the range.
    columns: bool,
}

fn read_request(query: &str, now: i64) -> Result<EventsQuery, params::ParamError> {
    let mut range = TimeRange::default();
    let mut selection = Selection::default();
    let mut format = OutputFormat::Json;
    let mut hints = false;
    let mut plan = PlanArgs::default();
    let mut columns = true;
    for (k, v) in parse_query(query) {
        if range.accept(&k, &v, now)? {
            continue;
        }
        match k.as_str() {
            "format" => format = params::format(&v)?,
            "hints" => hints = params::hints(&v)?,
            "group_by" => plan.group_by.push(v),
            "agg" => plan.agg.push(v),
            "count_by" => plan.count_by.push(v),
            "window" => plan.window = Some(v),
            "top" => plan.top = Some(params::count(&k, &v)?),
            "by" => plan.by = Some(v),
            "max_groups" => plan.max_groups = Some(params::count(&k, &v)?),
            "columns" => columns = params::on_off(&k, &v)?,
            _ => {
                if !selection.accept(&k, &v)? {
                    return Err(params::unknown(&k));
                }
            }
        }
    }
    let plan = plan
        .plan(!selection.select.is_empty())
        .map_err(|e| params::ParamError::Plan(e.to_string().replace("--", "")))?;
    let (from, to) = range.finish(now)?;
    // Rows of a window the range cuts are marked `partial`.
    let mut plan = plan;
    if let Some(p) = &mut plan {
        p.set_range(from, to);
    }
    Ok(EventsQuery {
        req: ReadRequest::selected(from, to, selection),
        format,
        hints,
        plan,
        columns,
    })
}

/// The read options of `selection`: with `substream=NAME`, the registered substream (an unknown
/// one is answered **404**, a store error **503**). With Python switched off (`python` false),
/// a code substream's stored results are read and a missing one is a gap (`no_fallback` is
/// set): its fallback would run the code here.
pub(crate) async fn substream_options(
    store: &Arc<dyn Store>,
    selection: &mut Selection,
    python: bool,
) -> Result<ReadOptions, Response> {
    let Some(name) = selection.substream.clone() else {
        return Ok(ReadOptions::default());
    };
    let store = store.clone();
    let mut sel = selection.clone();
    match tokio::task::spawn_blocking(move || {
        if !python && sluice_substreams::registry::get(&*store, &name)?.is_python() {
            sel.no_fallback = true;
        }
        sluice_substreams::view::read_options(&*store, &sel).map(|o| (o, sel.no_fallback))
    })
    .await
    {
        Ok(Ok((o, no_fallback))) => {
            selection.no_fallback = no_fallback;
            Ok(o)
        }
        Ok(Err(e @ sluice_substreams::Error::NotFound(_))) => {
            Err(error(StatusCode::NOT_FOUND, e.to_string()))
        }
        Ok(Err(e)) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// `GET /v1/events`: validates the parameters, then streams the range read on a blocking thread.
pub(crate) async fn read_events(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    RawQuery(q): RawQuery,
) -> Response {
    let mut query = match read_request(q.as_deref().unwrap_or(""), now_unix()) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    query.req.selection.visible = super::visible(&grant);
    let format = query.format;
    let mut opts =
        match substream_options(&st.store, &mut query.req.selection, st.python_substreams).await {
            Ok(o) => o,
            Err(r) => return r,
        };
    if query.columns {
        opts.columns = st.columns.clone();
    }
    // A reduce reads only the fields it names (lazily, from blobs and columns).
    if let Some(plan) = &query.plan {
        plan.narrow_read(&mut opts);
    }
    let (start_tx, start_rx) = oneshot::channel::<Result<(), (StatusCode, String)>>();
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    let store = st.store.clone();
    let metrics = st.metrics.clone();
    tokio::task::spawn_blocking(move || {
        let served = stream_range(store, query, opts, start_tx, tx);
        if served > 0 {
            metrics
                .events_out
                .with_label_values(&["events"])
                .inc_by(served);
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
    // `params::format` takes only the wire formats: Sereal, or NDJSON.
    let ctype = match format {
        OutputFormat::Sereal => "application/x-sereal",
        _ => "application/x-ndjson",
    };
    ([(header::CONTENT_TYPE, ctype)], Body::from_stream(stream)).into_response()
}

/// Runs on a blocking thread: reads the range and sends the output in chunks. Warnings are
/// collected and, for NDJSON, sent as one last line `{"_sluice":{"warnings":[...],"hints":[...]}}`.
/// Returns how many events were written out.
fn stream_range(
    store: Arc<dyn Store>,
    query: EventsQuery,
    opts: ReadOptions,
    start: oneshot::Sender<Result<(), (StatusCode, String)>>,
    tx: mpsc::Sender<Bytes>,
) -> u64 {
    let EventsQuery {
        req,
        format,
        hints: want_hints,
        plan,
        ..
    } = query;
    // Rows instead of events: each event goes to the sink, rows out as they complete.
    let mut sink = match plan.map(Sink::new).transpose() {
        Ok(s) => s,
        Err(e) => {
            let _ = start.send(Err((StatusCode::BAD_REQUEST, e.to_string())));
            return 0;
        }
    };
    let mut served = 0u64;
    let mut reader = match RangeReader::new(store, req, opts) {
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
    let mut w = EventWriter::new(Vec::with_capacity(STREAM_CHUNK * 2), format);
    let mut warnings = Vec::new();
    let mut notices = Vec::new();
    for item in &mut reader {
        match item {
            ReadItem::Event(e) if sink.is_some() => {
                served += e.repeat;
                let rows = sink.as_mut().map(|s| s.push_read(&e));
                match rows {
                    Some(Ok(rows)) => {
                        for row in rows {
                            if let Err(err) = w.write(&row) {
                                warnings.push(serde_json::json!({ "key": "reduce", "reason": err.to_string() }));
                            }
                        }
                    }
                    Some(Err(err)) => {
                        // Too many groups: the rows so far are out; say why the rest is not.
                        warnings.push(
                            serde_json::json!({ "key": "reduce", "reason": err.to_string() }),
                        );
                        break;
                    }
                    None => {}
                }
            }
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
            ReadItem::Notice(n) => {
                notices.push(serde_json::json!({ "key": n.key, "reason": n.reason }));
            }
        }
        if w.get_mut().len() >= STREAM_CHUNK {
            let buf = std::mem::replace(w.get_mut(), Vec::with_capacity(STREAM_CHUNK * 2));
            if tx.blocking_send(Bytes::from(buf)).is_err() {
                return served; // client gone
            }
        }
    }
    if let Some(sink) = sink {
        let (rows, late) = sink.finish();
        for row in rows {
            if let Err(err) = w.write(&row) {
                warnings.push(serde_json::json!({ "key": "reduce", "reason": err.to_string() }));
            }
        }
        if late > 0 {
            warnings.push(serde_json::json!({ "key": "reduce", "reason": format!("{late} event(s) came after their window was sent and were left out") }));
        }
    }
    let mut buf = w.into_inner();
    let hints = if want_hints {
        reader.hints(now_unix())
    } else {
        Vec::new()
    };
    if (!warnings.is_empty() || !hints.is_empty() || !notices.is_empty())
        && format == OutputFormat::Json
    {
        let mut trailer = serde_json::json!({ "_sluice": { "warnings": warnings } });
        if !hints.is_empty() {
            trailer["_sluice"]["hints"] = hints.into();
        }
        if !notices.is_empty() {
            trailer["_sluice"]["notices"] = notices.into();
        }
        buf.extend_from_slice(trailer.to_string().as_bytes());
        buf.push(b'\n');
    } else if !notices.is_empty() {
        eprintln!(
            "sluice-server: {} substream result(s) computed from the full blob (fallback)",
            notices.len()
        );
    }
    if !buf.is_empty() {
        let _ = tx.blocking_send(Bytes::from(buf));
    }
    served
}
