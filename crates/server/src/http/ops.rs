//! `GET /healthz` and `GET /metrics`: for operators and probes.
//!
//! Contracts: `/healthz` answers `ok` (**200**) while the pipeline runs and ingest is available,
//! **503** `pipeline stopped` once it has stopped and **503** `not ready: …` while ingest is
//! unavailable (full disk, WAL failing: [`crate::disk`]). `/metrics` is the Prometheus text of
//! `metrics::render` plus the store's damage counters.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{error, AppState};

/// `GET /healthz`: ready to ingest or why not.
pub(crate) async fn healthz(State(st): State<AppState>) -> Response {
    if st.tx.is_closed() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "pipeline stopped");
    }
    let unavailable = st.metrics.unavailable();
    if let Some(why) = unavailable {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: ingest unavailable: {why}"),
        );
    }
    (StatusCode::OK, "ok\n").into_response()
}

/// `GET /metrics`: the Prometheus text.
pub(crate) async fn metrics(State(st): State<AppState>) -> Response {
    let mut body = crate::metrics::render(&st.metrics, &*st.store, sluice_reader::time::now_unix());
    crate::metrics::render_substreams(&mut body, &st.substreams.snapshot());
    crate::metrics::render_exports(&mut body, &st.metrics);
    crate::metrics::render_alerts(&mut body, &st.metrics);
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
