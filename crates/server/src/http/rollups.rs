//! `/v1/rollups`: rollups (substreams of kind `rollup`, in the same registry) and their queries.
//!
//! | Request | Answer |
//! |---|---|
//! | `GET /v1/rollups` | `{"rollups":[definition…]}` |
//! | `POST /v1/rollups` (JSON spec: `name`, `type`, `group_by`, `agg`, `step`, `where`, …) | **201** the definition (as `POST /v1/substreams`) |
//! | `DELETE /v1/rollups/{name}`, `POST /v1/rollups/{name}/backfill?from&to` | as the substream routes |
//! | `GET /v1/rollups/{name}?from&to&step&where` | `{"rollup", "step", "rows":[{start, group fields…, aggregates…}], "other_events", "warnings"}` |
//! | `GET /v1/rollups/{name}/metrics` | the Prometheus text format: each series' latest closed step, with its timestamp (`sluice-exports` names) |
//!
//! A query merges the stored partial states (`sluice_rollups::query`); a token restricted to
//! some dcs or types may query a rollup only when the rollup's own dc and type are within reach.

use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sluice_auth::Grant;
use sluice_reader::filter::Filter;
use sluice_rollups::{RollupError, RollupQuery};
use sluice_substreams::registry::{self, Error};

use super::params::{parse_query, TimeRange};
use super::{error, json, AppState};
use crate::pipeline::now_unix;

/// `GET /v1/rollups`.
pub(crate) async fn list(State(st): State<AppState>) -> Response {
    let store = st.store.clone();
    match tokio::task::spawn_blocking(move || registry::load(&*store)).await {
        Ok(Ok((defs, _))) => json(
            StatusCode::OK,
            serde_json::json!({ "rollups": defs.values().filter(|d| d.is_rollup()).map(|d| d.to_json()).collect::<Vec<_>>() }),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The parameters of a query.
fn parse(q: Option<&str>) -> Result<RollupQuery, String> {
    let now = now_unix();
    let mut range = TimeRange::default();
    let (mut step, mut filter) = (None, None);
    for (k, v) in parse_query(q.unwrap_or("")) {
        match k.as_str() {
            "step" => {
                step = Some(
                    sluice_reader::reduce::parse_window(&v)
                        .map_err(|e| e.to_string().replace("--window", "step"))?,
                )
            }
            "where" => filter = Some(Filter::parse(&v).map_err(|e| format!("where: {e}"))?),
            _ => match range.accept(&k, &v, now) {
                Ok(true) => {}
                Ok(false) => return Err(super::params::unknown(&k).to_string()),
                Err(e) => return Err(e.to_string()),
            },
        }
    }
    let (from, to) = range.finish(now).map_err(|e| e.to_string())?;
    Ok(RollupQuery {
        from,
        to,
        step,
        filter,
    })
}

/// Steps looked back for `/metrics` (a series absent that long is not shown).
const METRICS_STEPS: i64 = 5;

/// `GET /v1/rollups/{name}/metrics`: the latest closed step of each series, for scrapers.
pub(crate) async fn metrics(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(name): Path<String>,
) -> Response {
    let store = st.store.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let def = registry::get(&*store, &name).map_err(|e| match e {
            Error::NotFound(_) => (StatusCode::NOT_FOUND, format!("no rollup named {name:?}")),
            other => (StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
        })?;
        within_reach(&grant, &def)?;
        let step = sluice_rollups::query::rollup_step(&def)
            .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))? as i64;
        // Closed steps only: a step still filling would be scraped low.
        let to = now_unix() - now_unix().rem_euclid(step);
        let q = RollupQuery {
            from: to - METRICS_STEPS * step,
            to,
            step: None,
            filter: None,
        };
        sluice_rollups::query(&*store, &def, &q)
            .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
    })
    .await;
    match answered {
        Ok(Ok(a)) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                sluice_exports::prometheus::CONTENT_TYPE,
            )],
            sluice_exports::prometheus_text(&a.rows),
        )
            .into_response(),
        Ok(Err((status, m))) => error(status, m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A token limited to some dcs or types reads a rollup only when the rollup's own dc and type
/// are within its reach.
pub(crate) fn within_reach(
    grant: &Grant,
    def: &registry::Definition,
) -> Result<(), (StatusCode, String)> {
    if grant.allowed.is_all() {
        return Ok(());
    }
    let within = match (&def.dc, &def.type_) {
        (Some(dc), Some(t)) => grant.allowed.allows(dc, t),
        _ => false,
    };
    if within {
        Ok(())
    } else {
        Err((
            StatusCode::FORBIDDEN,
            format!(
                "rollup {:?} reads events beyond this token's reach",
                def.name
            ),
        ))
    }
}

/// `GET /v1/rollups/{name}`.
pub(crate) async fn query(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let q = match parse(q.as_deref()) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let store = st.store.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let def = registry::get(&*store, &name).map_err(|e| match e {
            Error::NotFound(_) => (StatusCode::NOT_FOUND, format!("no rollup named {name:?}")),
            other => (StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
        })?;
        within_reach(&grant, &def)?;
        let step = sluice_rollups::query::rollup_step(&def)
            .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))?;
        sluice_rollups::query(&*store, &def, &q)
            .map(|a| (a, q.step.unwrap_or(step)))
            .map_err(|e| match e {
                RollupError::Invalid(m) => (StatusCode::BAD_REQUEST, m),
                RollupError::Read(m) => (StatusCode::SERVICE_UNAVAILABLE, m),
            })
    })
    .await;
    match answered {
        Ok(Ok((a, step))) => json(
            StatusCode::OK,
            serde_json::json!({
                "step": step,
                "rows": a.rows.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
                "events": a.events,
                "other_events": a.other_events,
                "skipped": a.skipped,
                "warnings": a.warnings,
            }),
        ),
        Ok(Err((status, m))) => error(status, m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
