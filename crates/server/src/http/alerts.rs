//! `/v1/alerts`: alert rules over rollups, their states, silences and backtests
//! (`sluice_alerts`; the user guide is docs/alerts.md).
//!
//! | Request | Answer |
//! |---|---|
//! | `GET /v1/alerts` | `{"rules":[{rule fields…, "kind", "state", "last_eval", "alerts":[{labels, state, active_since, value}]}]}` |
//! | `POST /v1/alerts[?replace=true]` (JSON: `name`, `rollup`, `expr`, `by`, `window`, `for`, `keep_firing_for`, `min_count`, `anomaly`, `baseline`, `threshold`, `direction`, `point`, `labels`, `annotations`, `samples`, `sample_fields`, `evidence_where`) | **201** the rule; **409** the name is taken |
//! | `GET /v1/alerts/{name}` | the rule as in the list |
//! | `DELETE /v1/alerts/{name}` | **200** `{"removed"}` |
//! | `POST /v1/alerts/{name}/silence?for=2h` (`for=0`: unsilence) | the rule |
//! | `GET /v1/alerts/{name}/test?from&to[&max_points]` | `{"evaluations", "points":[{t, labels, value, state}], "truncated", "transitions":[{t, labels, status, value, firing_since}], "warnings"}` |
//!
//! Changes need the `admin` scope (auth.rs), reads `read`; a token limited to some dcs or
//! types sees only the rules whose rollup is within its reach.

use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use sluice_alerts::catalog::{self, CatalogError};
use sluice_alerts::RuleSpec;
use sluice_auth::Grant;
use sluice_substreams::registry;

use super::params::{parse_query, TimeRange};
use super::rollups::within_reach;
use super::{error, json, AppState};
use crate::pipeline::now_unix;

/// Most points a backtest answers with by default (`max_points` changes it, up to 10×).
const DEFAULT_MAX_POINTS: usize = 100_000;

fn status_of(e: &CatalogError) -> StatusCode {
    match e {
        CatalogError::Invalid(_) => StatusCode::BAD_REQUEST,
        CatalogError::NotFound(_) => StatusCode::NOT_FOUND,
        CatalogError::Exists(_) => StatusCode::CONFLICT,
        CatalogError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The rules (engine views when it runs, the catalog otherwise) the grant may see.
fn views(st: &AppState, grant: &Grant) -> Result<Vec<serde_json::Value>, (StatusCode, String)> {
    let defs = registry::load(&*st.store)
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?
        .0;
    let visible = |rollup: &str| {
        defs.get(rollup)
            .is_none_or(|d| within_reach(grant, d).is_ok())
    };
    // The catalog says which rules exist (a change is seen at once); the engine, how they are.
    let live: std::collections::BTreeMap<String, serde_json::Value> = st
        .alerts
        .as_ref()
        .map(|e| {
            e.views()
                .into_iter()
                .map(|v| {
                    (
                        v.rule.name.clone(),
                        serde_json::to_value(v).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let out = catalog::load_rules(&*st.store)
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?
        .0
        .into_values()
        .filter(|r| visible(&r.rollup))
        .map(|r| match live.get(&r.name) {
            Some(v) => {
                let mut v = v.clone();
                v["silenced_until"] = r.silenced_until.into();
                v
            }
            _ => {
                let state = catalog::load_state(&*st.store, &r.name).unwrap_or_default();
                let mut v = serde_json::to_value(&r).unwrap_or_default();
                v["kind"] = r.kind().into();
                v["state"] = state.overall().into();
                v["last_eval"] = state.last_eval.into();
                v["alerts"] = serde_json::to_value(state.instances.values().collect::<Vec<_>>())
                    .unwrap_or_default();
                v
            }
        })
        .collect();
    Ok(out)
}

/// `GET /v1/alerts`.
pub(crate) async fn list(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
) -> Response {
    let answered = tokio::task::spawn_blocking(move || views(&st, &grant)).await;
    match answered {
        Ok(Ok(rules)) => json(StatusCode::OK, serde_json::json!({ "rules": rules })),
        Ok(Err((s, m))) => error(s, m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /v1/alerts/{name}`.
pub(crate) async fn show(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(name): Path<String>,
) -> Response {
    let answered = tokio::task::spawn_blocking(move || views(&st, &grant)).await;
    match answered {
        Ok(Ok(rules)) => match rules.into_iter().find(|r| r["name"] == name.as_str()) {
            Some(r) => json(StatusCode::OK, r),
            None => error(
                StatusCode::NOT_FOUND,
                format!("no alert rule named {name:?}"),
            ),
        },
        Ok(Err((s, m))) => error(s, m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `POST /v1/alerts`.
pub(crate) async fn add(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    let mut replace = false;
    for (k, v) in parse_query(q.as_deref().unwrap_or("")) {
        match (k.as_str(), v.as_str()) {
            ("replace", "true" | "1") => replace = true,
            ("replace", "false" | "0") => replace = false,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    super::params::unknown(&k).to_string(),
                )
            }
        }
    }
    let spec: RuleSpec = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("alert rule: {e}")),
    };
    st.auth.audit(&grant, "POST /v1/alerts", &spec.name);
    let store = st.store.clone();
    let answered = tokio::task::spawn_blocking(move || catalog::add(&*store, &spec, replace)).await;
    match answered {
        Ok(Ok(rule)) => {
            if let Some(e) = &st.alerts {
                e.reload();
            }
            json(
                StatusCode::CREATED,
                serde_json::to_value(&rule).unwrap_or_default(),
            )
        }
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `DELETE /v1/alerts/{name}`.
pub(crate) async fn remove(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(name): Path<String>,
) -> Response {
    st.auth.audit(&grant, "DELETE /v1/alerts", &name);
    let store = st.store.clone();
    let n = name.clone();
    match tokio::task::spawn_blocking(move || catalog::remove(&*store, &n)).await {
        Ok(Ok(())) => {
            if let Some(e) = &st.alerts {
                e.reload();
            }
            json(StatusCode::OK, serde_json::json!({ "removed": name }))
        }
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `POST /v1/alerts/{name}/silence?for=2h`.
pub(crate) async fn silence(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let mut secs = None;
    for (k, v) in parse_query(q.as_deref().unwrap_or("")) {
        match k.as_str() {
            "for" if v.trim() == "0" => secs = Some(0),
            "for" => match sluice_reader::reduce::parse_window(&v) {
                Ok(s) => secs = Some(s as i64),
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        e.to_string().replace("--window", "for"),
                    )
                }
            },
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    super::params::unknown(&k).to_string(),
                )
            }
        }
    }
    let Some(secs) = secs else {
        return error(
            StatusCode::BAD_REQUEST,
            "silence needs for=DURATION (0: unsilence)",
        );
    };
    st.auth.audit(&grant, "POST /v1/alerts/silence", &name);
    let until = if secs == 0 { 0 } else { now_unix() + secs };
    let store = st.store.clone();
    match tokio::task::spawn_blocking(move || catalog::silence(&*store, &name, until)).await {
        Ok(Ok(rule)) => {
            if let Some(e) = &st.alerts {
                e.reload();
            }
            json(
                StatusCode::OK,
                serde_json::to_value(&rule).unwrap_or_default(),
            )
        }
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /v1/alerts/{name}/test?from&to`.
pub(crate) async fn test(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let now = now_unix();
    let mut range = TimeRange::default();
    let mut max_points = DEFAULT_MAX_POINTS;
    for (k, v) in parse_query(q.as_deref().unwrap_or("")) {
        match k.as_str() {
            "max_points" => match v.parse::<usize>() {
                Ok(n) if n <= 10 * DEFAULT_MAX_POINTS => max_points = n,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("max_points: a number up to {}", 10 * DEFAULT_MAX_POINTS),
                    )
                }
            },
            _ => match range.accept(&k, &v, now) {
                Ok(true) => {}
                Ok(false) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        super::params::unknown(&k).to_string(),
                    )
                }
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            },
        }
    }
    let (from, to) = match range.finish(now) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let store = st.store.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let rule = catalog::get_rule(&*store, &name).map_err(|e| (status_of(&e), e.to_string()))?;
        let def = registry::get(&*store, &rule.rollup)
            .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))?;
        within_reach(&grant, &def)?;
        sluice_alerts::backtest(&*store, &rule, &def, from, to, max_points)
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
    })
    .await;
    match answered {
        Ok(Ok(b)) => json(StatusCode::OK, serde_json::to_value(&b).unwrap_or_default()),
        Ok(Err((s, m))) => error(s, m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
