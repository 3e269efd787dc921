//! `GET /v1/counts?from&to&dc`: the completeness counts, one JSON line per
//! (epoch, dc, type, subtype), in epoch order (see the crate README, "Completeness counts").
//!
//! The rows and their rules (epoch index, probing the asked or configured dc) are
//! [`sluice_reader::counts`]'s. Reads only; a store error is **500**.

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_store::Store;

use super::params::{self, parse_query, TimeRange};
use super::{error, AppState};
use crate::pipeline::now_unix;

pub use sluice_reader::counts::MAX_COUNTS_PROBE_SECS;

/// `GET /v1/counts`: validates the parameters, then reads on a blocking thread.
pub(crate) async fn read_counts(
    State(st): State<AppState>,
    axum::Extension(grant): axum::Extension<sluice_auth::Grant>,
    RawQuery(q): RawQuery,
) -> Response {
    let now = now_unix();
    let mut range = TimeRange::default();
    let mut dc = None;
    for (k, v) in parse_query(q.as_deref().unwrap_or("")) {
        match range.accept(&k, &v, now) {
            Ok(true) => {}
            Ok(false) if k == "dc" => dc = Some(v),
            Ok(false) => return error(StatusCode::BAD_REQUEST, params::unknown(&k)),
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        }
    }
    let (from, to) = match range.finish(now) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let store = st.store.clone();
    let probe_dc = dc.clone().unwrap_or_else(|| st.dc.clone());
    let res = tokio::task::spawn_blocking(move || {
        counts_lines(
            store.as_ref(),
            from,
            to,
            dc.as_deref(),
            &probe_dc,
            &grant.allowed,
        )
    })
    .await;
    match res {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The body of `/v1/counts`: one JSON line per row of [`sluice_reader::counts::read_counts`].
fn counts_lines(
    store: &dyn Store,
    from: i64,
    to: i64,
    dc: Option<&str>,
    probe_dc: &str,
    allowed: &sluice_auth::Allowed,
) -> sluice_store::Result<String> {
    let mut out = String::new();
    for row in sluice_reader::counts::read_counts(store, from, to, dc, Some(probe_dc))? {
        // A token limited to some types sees only their rows.
        if !allowed.is_all() && !allowed.allows(&row.dc, &row.type_) {
            continue;
        }
        out.push_str(&row.to_json().to_string());
        out.push('\n');
    }
    Ok(out)
}
