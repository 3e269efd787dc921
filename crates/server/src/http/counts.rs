//! `GET /v1/counts?from&to&dc`: the completeness counts, one JSON line per
//! (epoch, dc, type, subtype), in epoch order (see the crate README, "Completeness counts").
//!
//! Contracts: the epochs come from the store's epoch index; for ranges up to
//! [`MAX_COUNTS_PROBE_SECS`] every second of the asked (or configured) dc is also probed, so
//! seconds whose events were all dropped are listed too. Reads only; a store error is **500**.

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_store::Store;

use super::params::{self, parse_query, TimeRange};
use super::{error, AppState};
use crate::pipeline::now_unix;

/// Widest `to - from` for which `/v1/counts` probes every second of the configured (or asked)
/// dc for counts without an epoch index (seconds whose events were all dropped).
pub const MAX_COUNTS_PROBE_SECS: i64 = 3600;

/// `GET /v1/counts`: validates the parameters, then reads on a blocking thread.
pub(crate) async fn read_counts(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
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
