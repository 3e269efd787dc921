//! `POST /v1/logs`: OTLP/HTTP logs (protobuf or JSON, gzip or not), made into events by
//! [`sluice_collector::otlp`] and handed to the same ingest as `POST /v1/events` (WAL, the
//! acknowledgement once durable, exactly once). See `docs/otlp.md`.
//!
//! Answers, as the OTLP/HTTP specification says, in the request's encoding: **200** with an
//! `ExportLogsServiceResponse` (empty, or `partialSuccess` with `rejectedLogRecords` and an
//! `errorMessage` for records refused: over a limit, or dropped by the ingest — not to be
//! retried); **400** with a `google.rpc.Status` for a body that cannot be read; **413** for a
//! body (or its decompressed form) over `max_body_bytes`; **415** for another content type or
//! encoding; **403** when the token does not reach a record's dc or type (nothing accepted);
//! **503** with `Retry-After` when nothing could be logged (backpressure, the disk, stopping).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sluice_auth::Grant;
use sluice_collector::otlp::{self, BodyError, Encoding, OtlpConfig, Rejection};

use super::AppState;
use crate::pipeline::now_unix;

/// What `POST /v1/logs` needs of the configuration.
#[derive(Debug, Clone)]
pub(crate) struct OtlpSettings {
    /// The mapping and the record limits (`otlp_*`).
    pub config: OtlpConfig,
    /// `max_body_bytes`: the decompressed body and each ingest payload at most this.
    pub max_body: usize,
    /// `max_events`: events per ingest payload.
    pub max_events: usize,
}

/// `google.rpc.Code` values of the error answers.
const INVALID_ARGUMENT: i32 = 3;
const PERMISSION_DENIED: i32 = 7;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNAVAILABLE: i32 = 14;

/// Handles one export request; see the module documentation for the answers.
pub(crate) async fn post_logs(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let m = st.metrics.clone();
    let refuse = |status: StatusCode, reason: &str, code: i32, msg: String, enc: Encoding| {
        m.otlp_refused.with_label_values(&[reason]).inc();
        status_answer(status, code, &msg, enc)
    };
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(enc) = Encoding::from_content_type(ctype) else {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            INVALID_ARGUMENT,
            format!("Content-Type {ctype:?}: use application/x-protobuf or application/json"),
            Encoding::Json,
        );
    };
    let gzip = match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("identity") => false,
        Some("gzip") => true,
        Some(other) => {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_encoding",
                INVALID_ARGUMENT,
                format!("Content-Encoding {other:?}: use gzip or none"),
                enc,
            )
        }
    };
    let settings = st.otlp.clone();
    let dc = st.dc.clone();
    let now = now_unix();
    // Decompressing, decoding and converting are CPU work: off the async threads.
    let work = tokio::task::spawn_blocking(move || {
        let raw;
        let bytes: &[u8] = if gzip {
            raw = otlp::gunzip(&body, settings.max_body)?;
            &raw
        } else {
            &body
        };
        let req = otlp::decode(bytes, enc)?;
        let conv = otlp::convert(&req, &settings.config, &dc, now);
        let payloads = otlp::payloads(&conv.events, settings.max_body, settings.max_events);
        Ok::<_, BodyError>((conv, payloads))
    })
    .await;
    let (conv, payloads) = match work {
        Ok(Ok(done)) => done,
        Ok(Err(e @ BodyError::TooLarge(_))) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                e.reason(),
                RESOURCE_EXHAUSTED,
                e.to_string(),
                enc,
            )
        }
        Ok(Err(e)) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                e.reason(),
                INVALID_ARGUMENT,
                e.to_string(),
                enc,
            )
        }
        Err(e) => {
            return status_answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                UNAVAILABLE,
                &e.to_string(),
                enc,
            )
        }
    };
    // The token's reach, checked for all records before anything is submitted, so a request
    // split into several payloads is refused whole (the pipeline checks each payload again).
    let allowed = (!grant.allowed.is_all()).then(|| Arc::new(grant.allowed));
    if let Some(a) = &allowed {
        if let Some(e) = conv.events.iter().find(|e| !a.allows(&e.dc, &e.type_)) {
            return refuse(
                StatusCode::FORBIDDEN,
                "forbidden",
                PERMISSION_DENIED,
                format!(
                    "this token does not reach dc {:?} type {:?}; nothing of the request was accepted",
                    e.dc, e.type_
                ),
                enc,
            );
        }
    }
    let mut waits = Vec::with_capacity(payloads.len());
    for p in &payloads {
        let bytes = Bytes::from(p.bytes.clone());
        match crate::pipeline::submit(&st.tx, "otlp", bytes, allowed.clone()).await {
            Ok(rx) => waits.push(rx),
            Err(e) => return unavailable(&refuse, e.to_string(), enc),
        }
    }
    let mut rejected: Vec<Rejection> = conv.rejected;
    for (p, rx) in payloads.iter().zip(waits) {
        match crate::pipeline::durable(rx, &st.acks, &st.metrics).await {
            Ok(summary) if summary.forbidden.is_some() => {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    PERMISSION_DENIED,
                    summary.forbidden.unwrap_or_default(),
                    enc,
                )
            }
            Ok(summary) => rejected.extend(otlp::ingest_rejections(p, &summary.dropped)),
            Err(e) => return unavailable(&refuse, e.to_string(), enc),
        }
    }
    rejected.sort_by_key(|r| r.record);
    for r in &rejected {
        st.metrics
            .otlp_rejected
            .with_label_values(&[r.reason])
            .inc();
    }
    let accepted = conv.records.saturating_sub(rejected.len());
    st.metrics
        .otlp_records
        .with_label_values(&["accepted"])
        .inc_by(accepted as u64);
    st.metrics
        .otlp_records
        .with_label_values(&["rejected"])
        .inc_by(rejected.len() as u64);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, enc.content_type())],
        otlp::response(&rejected, enc),
    )
        .into_response()
}

/// **503** with `Retry-After: 1`: nothing (or not all) of the request was made durable.
fn unavailable(
    refuse: &impl Fn(StatusCode, &str, i32, String, Encoding) -> Response,
    why: String,
    enc: Encoding,
) -> Response {
    let mut resp = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        UNAVAILABLE,
        why,
        enc,
    );
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    resp
}

/// An error answer: `status` with a `google.rpc.Status` body in `enc`.
fn status_answer(status: StatusCode, code: i32, msg: &str, enc: Encoding) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, enc.content_type())],
        otlp::status(code, msg, enc),
    )
        .into_response()
}
