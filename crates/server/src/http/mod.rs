//! The HTTP API (axum): the router, the state the handlers share (`AppState`) and the JSON
//! error body (`error`). The crate README describes each endpoint's parameters and answers.
//!
//! | Endpoint | Module |
//! |---|---|
//! | `POST /v1/events` (ingest, answered once durable), `GET /v1/events` (range read, streamed) | [`events`] |
//! | `GET /v1/tail` (the live stream, Server-Sent Events) | [`tail`] |
//! | `GET /buckets/{ns}/keys/{key}`, `GET /buckets/substreams/{name}/keys/{key}` (raw blobs) | [`blobs`] |
//! | `GET /v1/counts` (completeness counts) | [`counts`] |
//! | `GET /v1/funnel` (sessions per step, conversions, times between steps) | [`funnel`] |
//! | `POST /v1/logs` (OTLP/HTTP logs, into the events ingest) | [`logs`] |
//! | `POST /v1/drops` (drops reported by emitters, into the counts) | [`drops`] |
//! | `GET /healthz`, `GET /metrics` | [`ops`] |
//! | `/v1/substreams` (list, add, show, enable / disable, remove, backfill) | [`substreams`] |
//! | `/v1/tokens` (list, create, revoke) | [`tokens`] |
//! | `/v1/alerts` (rules, states, silences, backtests) | [`alerts`] |
//!
//! Every matched route first passes [`authorize`] (`crate::auth`: the scope it needs, the
//! request's token, cross-site refusal); the handlers get the [`sluice_auth::Grant`] and apply
//! its reach (a token limited to some types sees and sends only those).
//!
//! The query parameters the read endpoints share (time range, format, unknown keys) are parsed
//! by [`params`]; the filters (`dc`, `type`, `subtype`, `select`, `where`) by
//! [`sluice_reader::Selection`].
//!
//! Contracts: every request is bounded by `request_timeout_secs` (then **408**); a body over
//! `max_body_bytes` gets **413**; every error is `{"error": "…"}` (`application/json`) with a
//! 4xx status for the client's mistakes and 5xx for the server's. The connection level (caps,
//! header and idle timeouts, shutdown) is [`crate::http_server`]'s.

pub mod alerts;
pub mod blobs;
pub mod counts;
pub mod drops;
pub mod events;
pub mod funnel;
pub mod logs;
pub mod ops;
pub mod params;
pub mod rollups;
pub mod substreams;
pub mod tail;
pub mod tokens;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use sluice_store::Store;

use crate::metrics::SharedMetrics;

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct AppState {
    pub tx: crate::pipeline::PipelineTx,
    pub store: Arc<dyn Store>,
    pub metrics: SharedMetrics,
    pub timeout: Duration,
    pub acks: Arc<crate::pipeline::AckWaiter>,
    /// The configured dc (`/v1/counts` probes it for epochs that have counts but no index).
    pub dc: String,
    /// Set when the server shuts down (tail streams end with a `shutdown` event).
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// The cap on concurrent `GET /v1/tail` streams.
    pub tail_streams: Arc<tail::TailStreams>,
    /// The substream runner (re-reads the registry after a change made here).
    pub substreams: Arc<sluice_substreams::Runner>,
    /// Who may use which route.
    pub auth: Arc<crate::auth::Auth>,
    /// Code substreams may be registered (`python_substreams`).
    pub python_substreams: bool,
    /// The alert engine (`GET /v1/alerts` shows its states; changes ask it to reload).
    pub alerts: Option<Arc<sluice_alerts::Engine>>,
    /// The column files reads use where they cover (`columns=off` on a read skips them).
    pub columns: Option<Arc<sluice_columns::view::ColumnsView>>,
    /// `POST /v1/logs`: the OTLP mapping and the limits it needs.
    pub otlp: Arc<logs::OtlpSettings>,
    /// The ingest window for reported drops' epochs: (seconds before now, seconds after now).
    pub epoch_window: (i64, i64),
    /// Acknowledged payloads for tails, from memory ([`crate::live`]).
    pub live: Arc<crate::live::LiveHub>,
}

/// Every endpoint, each request bounded by `state.timeout`, bodies by `max_body`.
pub(crate) fn router(state: AppState, max_body: usize) -> Router {
    let timeout = state.timeout;
    Router::new()
        .route(
            "/v1/events",
            get(events::read_events).post(events::post_events),
        )
        .route("/buckets/{ns}/keys/{key}", get(blobs::get_blob))
        .route(
            "/buckets/substreams/{name}/keys/{key}",
            get(blobs::get_substream_blob),
        )
        .route("/v1/tail", get(tail::tail))
        .route("/v1/counts", get(counts::read_counts))
        .route("/v1/funnel", get(funnel::funnel))
        .route("/v1/logs", post(logs::post_logs))
        .route("/v1/drops", post(drops::post_drops))
        .route(
            "/v1/substreams",
            get(substreams::list).post(substreams::add),
        )
        .route(
            "/v1/substreams/{name}",
            get(substreams::show)
                .put(substreams::put)
                .delete(substreams::remove),
        )
        .route("/v1/substreams/{name}/enable", post(substreams::enable))
        .route("/v1/substreams/{name}/disable", post(substreams::disable))
        .route("/v1/substreams/{name}/backfill", post(substreams::backfill))
        .route("/v1/rollups", get(rollups::list).post(substreams::add))
        .route(
            "/v1/rollups/{name}",
            get(rollups::query).delete(substreams::remove),
        )
        .route("/v1/rollups/{name}/backfill", post(substreams::backfill))
        .route("/v1/rollups/{name}/metrics", get(rollups::metrics))
        .route("/v1/alerts", get(alerts::list).post(alerts::add))
        .route(
            "/v1/alerts/{name}",
            get(alerts::show).delete(alerts::remove),
        )
        .route("/v1/alerts/{name}/silence", post(alerts::silence))
        .route("/v1/alerts/{name}/test", get(alerts::test))
        .route("/v1/tokens", get(tokens::list).post(tokens::create))
        .route("/v1/tokens/{which}", axum::routing::delete(tokens::revoke))
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .merge(crate::console::routes()) // static assets, no data: open like /healthz (console/mod.rs)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                match tokio::time::timeout(timeout, next.run(req)).await {
                    Ok(resp) => resp,
                    Err(_) => error(StatusCode::REQUEST_TIMEOUT, "request timed out"),
                }
            },
        ))
        .layer(middleware::from_fn_with_state(
            state.metrics.clone(),
            count_response,
        ))
        .with_state(state)
}

/// Lets a request through with its grant (a request extension), or answers 401 / 403; audits
/// the admin requests that change something (see [`crate::auth`]).
async fn authorize(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(String::new, |p| p.as_str().to_owned());
    let method = req.method().clone();
    let need = st.auth.need(&method, &route);
    let grant = match st.auth.check_http("http", &method, req.headers(), need) {
        Ok(g) => g,
        Err(d) => {
            let mut resp = error(d.status, d.message);
            if d.status == StatusCode::UNAUTHORIZED {
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer realm=\"sluice\""),
                );
            }
            return resp;
        }
    };
    // Admin changes are audited: their grant and path are kept (nothing else copies them).
    let audited = (need == Some(sluice_auth::Scope::Admin) && method != axum::http::Method::GET)
        .then(|| (grant.clone(), req.uri().path().to_owned()));
    req.extensions_mut().insert(grant);
    let resp = next.run(req).await;
    if let Some((grant, path)) = audited {
        if resp.status().is_success() {
            st.auth.audit(&grant, &format!("{method} {route}"), &path);
        }
    }
    resp
}

/// The reader's view of `grant`: its reach as a [`sluice_reader::Visible`] (`None`: all).
pub(crate) fn visible(grant: &sluice_auth::Grant) -> Option<sluice_reader::selection::Visible> {
    if grant.allowed.is_all() {
        return None;
    }
    let allowed = grant.allowed.clone();
    Some(sluice_reader::selection::Visible::new(move |dc, t| {
        allowed.allows(dc, t)
    }))
}

/// Counts each response by route and status, and how long it took to its head
/// (`sluice_http_responses_total`, `sluice_http_request_duration_seconds`).
async fn count_response(State(m): State<SharedMetrics>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let start = std::time::Instant::now();
    let resp = next.run(req).await;
    m.http_request_seconds
        .with_label_values(&[&route])
        .observe(start.elapsed().as_secs_f64());
    m.http_responses
        .with_label_values(&[&route, resp.status().as_str()])
        .inc();
    resp
}

/// An error answer: `status` with the body `{"error": msg}`.
pub(crate) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": msg.into() });
    json(status, body)
}

/// A JSON answer.
fn json(status: StatusCode, value: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}
