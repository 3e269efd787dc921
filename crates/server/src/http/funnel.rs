//! `GET /v1/funnel?from&to&by&step=…&step=…[&within][&group_by][&max_sessions][&dc][&type][&subtype][&where][&columns=off]`:
//! a funnel over a range (`sluice_reader::funnel`, the code of `sluice funnel`; docs/funnels.md),
//! answered as one JSON document ([`FunnelReport::to_json`](sluice_reader::funnel::FunnelReport::to_json)).
//!
//! Read scope; a token limited to some dcs or types counts only the events within its reach
//! (the reader's `visible`, as `GET /v1/events`). Reads the column files where they cover the
//! range unless `columns=off`. Bad parameters are **400**.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use sluice_auth::Grant;
use sluice_reader::funnel::{Funnel, FunnelSpec};
use sluice_reader::{RangeReader, ReadOptions, ReadRequest, Selection};

use super::params::{self, parse_query, TimeRange};
use super::{error, json, AppState};
use crate::pipeline::now_unix;

/// A parsed `GET /v1/funnel`.
struct FunnelQuery {
    req: ReadRequest,
    spec: FunnelSpec,
    columns: bool,
}

fn parse(query: &str, now: i64) -> Result<FunnelQuery, String> {
    let mut range = TimeRange::default();
    let mut selection = Selection::default();
    let (mut by, mut steps, mut within, mut group_by, mut max_sessions) =
        (None, Vec::new(), None, Vec::new(), None);
    let mut columns = true;
    for (k, v) in parse_query(query) {
        if range.accept(&k, &v, now).map_err(|e| e.to_string())? {
            continue;
        }
        match k.as_str() {
            "by" => by = Some(v),
            "step" => steps.push(v),
            "within" => within = Some(v),
            "group_by" => group_by.push(v),
            "max_sessions" => {
                max_sessions = Some(params::count(&k, &v).map_err(|e| e.to_string())?)
            }
            "columns" => columns = params::on_off(&k, &v).map_err(|e| e.to_string())?,
            "select" | "substream" | "no_fallback" => {
                return Err(format!("{k}: a funnel reads events, not a {k}"))
            }
            _ => {
                if !selection.accept(&k, &v).map_err(|e| e.to_string())? {
                    return Err(params::unknown(&k).to_string());
                }
            }
        }
    }
    let by = by.ok_or("by: required (the field naming a session, e.g. by=session_id)")?;
    let spec = FunnelSpec::parse(&by, &steps, within.as_deref(), &group_by, max_sessions)
        .map_err(|e| e.to_string())?;
    let (from, to) = range.finish(now).map_err(|e| e.to_string())?;
    Ok(FunnelQuery {
        req: ReadRequest::selected(from, to, selection),
        spec,
        columns,
    })
}

/// `GET /v1/funnel`.
pub(crate) async fn funnel(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    RawQuery(q): RawQuery,
) -> Response {
    let mut query = match parse(q.as_deref().unwrap_or(""), now_unix()) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    query.req.selection.visible = super::visible(&grant);
    let mut opts = ReadOptions::default();
    if query.columns {
        opts.columns = st.columns.clone();
    }
    query.spec.narrow_read(&mut opts);
    let store = st.store.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let mut reader = RangeReader::new(store, query.req, opts).map_err(|e| match e {
            sluice_reader::ReadError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            other => (StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
        })?;
        Ok::<_, (StatusCode, String)>(Funnel::new(query.spec).read(&mut reader))
    })
    .await;
    match answered {
        Ok(Ok(report)) => json(StatusCode::OK, report.to_json()),
        Ok(Err((status, m))) => error(status, m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
