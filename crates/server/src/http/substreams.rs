//! `/v1/substreams`: the substream registry (see `sluice_substreams::registry`).
//!
//! | Request | Answer |
//! |---|---|
//! | `GET /v1/substreams` | `{"substreams":[definition…]}` (Python sources left out: `source_bytes`) |
//! | `POST /v1/substreams` (JSON [`Spec`]), `PUT /v1/substreams/{name}` (name from the path) | **201** the definition |
//! | `GET /v1/substreams/{name}` | the definition with `"status"`: results stored, misses by reason, the last miss |
//! | `POST /v1/substreams/{name}/enable`, `…/disable` | the definition |
//! | `DELETE /v1/substreams/{name}` | `{"removed": name}` (its stored results stay until they expire) |
//! | `POST /v1/substreams/{name}/backfill?from=…&to=…` | what was computed (`chunks`, `present`, `stored`, `misses`) |
//!
//! Contracts: a bad definition is **400** and changes nothing; an unknown name **404**; a name
//! taken **409**. Registry work (store I/O, importing a Python file in a throwaway worker) runs
//! on a blocking thread. After a change the runner re-reads the registry at once: the change
//! applies to blobs stored from then on.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use sluice_substreams::registry::{self, Error, Spec};

use super::params::{parse_query, TimeRange};
use super::{error, json, AppState};
use crate::pipeline::now_unix;

fn failed(e: Error) -> Response {
    let status = match &e {
        Error::Invalid(_) => StatusCode::BAD_REQUEST,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Exists(_) => StatusCode::CONFLICT,
        Error::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

/// Runs registry work on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failed(e)),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// A definition as listed: the Python source replaced by its length.
fn listed(def: &registry::Definition) -> serde_json::Value {
    let mut v = def.to_json();
    if let Some(t) = v.get_mut("transform").and_then(|t| t.as_object_mut()) {
        if let Some(src) = t.remove("source") {
            t.insert(
                "source_bytes".into(),
                src.as_str().map_or(0, str::len).into(),
            );
        }
    }
    v
}

/// `GET /v1/substreams`.
pub(crate) async fn list(State(st): State<AppState>) -> Response {
    let store = st.store.clone();
    match blocking(move || Ok(registry::load(&*store)?.0)).await {
        Ok(defs) => json(
            StatusCode::OK,
            serde_json::json!({ "substreams": defs.values().map(listed).collect::<Vec<_>>() }),
        ),
        Err(r) => r,
    }
}

/// The spec of a request body (the name from the path, if given); `Err` is a 400's message.
fn parse_spec(body: &[u8], name: Option<String>) -> Result<Spec, String> {
    let mut spec: Spec =
        serde_json::from_slice(body).map_err(|e| format!("invalid substream: body: {e}"))?;
    if let Some(n) = name {
        if !spec.name.is_empty() && spec.name != n {
            return Err(format!(
                "invalid substream: the body names {:?}, the path {n:?}",
                spec.name
            ));
        }
        spec.name = n;
    }
    Ok(spec)
}

async fn add_spec(st: AppState, spec: Spec) -> Response {
    if !st.python_substreams && (spec.python_source.is_some() || spec.python_file.is_some()) {
        return error(
            StatusCode::FORBIDDEN,
            "Python substreams are switched off on this server (--no-python-substreams)",
        );
    }
    let store = st.store.clone();
    match blocking(move || registry::add(&*store, &spec, now_unix(), None)).await {
        Ok(def) => {
            st.substreams.reload();
            json(StatusCode::CREATED, def.to_json())
        }
        Err(r) => r,
    }
}

/// `POST /v1/substreams`.
pub(crate) async fn add(State(st): State<AppState>, body: Bytes) -> Response {
    match parse_spec(&body, None) {
        Ok(spec) => add_spec(st, spec).await,
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// `PUT /v1/substreams/{name}`.
pub(crate) async fn put(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    match parse_spec(&body, Some(name)) {
        Ok(spec) => add_spec(st, spec).await,
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// `GET /v1/substreams/{name}`.
pub(crate) async fn show(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    let store = st.store.clone();
    let runner = st.substreams.clone();
    let got = blocking(move || {
        let def = registry::get(&*store, &name)?;
        let status = runner.status(&name)?;
        Ok((def, status))
    })
    .await;
    match got {
        Ok((def, status)) => {
            let mut v = def.to_json();
            v["status"] = serde_json::to_value(status).unwrap_or_default();
            json(StatusCode::OK, v)
        }
        Err(r) => r,
    }
}

async fn set_enabled(st: AppState, name: String, enabled: bool) -> Response {
    let store = st.store.clone();
    match blocking(move || registry::set_enabled(&*store, &name, enabled, now_unix())).await {
        Ok(def) => {
            st.substreams.reload();
            json(StatusCode::OK, def.to_json())
        }
        Err(r) => r,
    }
}

/// `POST /v1/substreams/{name}/enable`.
pub(crate) async fn enable(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    set_enabled(st, name, true).await
}

/// `POST /v1/substreams/{name}/disable`.
pub(crate) async fn disable(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    set_enabled(st, name, false).await
}

/// `DELETE /v1/substreams/{name}`.
pub(crate) async fn remove(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    let store = st.store.clone();
    let n = name.clone();
    match blocking(move || registry::remove(&*store, &n, now_unix())).await {
        Ok(()) => {
            st.substreams.reload();
            json(StatusCode::OK, serde_json::json!({ "removed": name }))
        }
        Err(r) => r,
    }
}

/// `POST /v1/substreams/{name}/backfill?from=…&to=…`.
pub(crate) async fn backfill(
    State(st): State<AppState>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let now = now_unix();
    let mut range = TimeRange::default();
    for (k, v) in parse_query(q.as_deref().unwrap_or("")) {
        match range.accept(&k, &v, now) {
            Ok(true) => {}
            Ok(false) => return error(StatusCode::BAD_REQUEST, super::params::unknown(&k)),
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        }
    }
    let (from, to) = match range.finish(now) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let store = st.store.clone();
    let python = st.substreams.python_settings();
    let allow_python = st.python_substreams;
    match blocking(move || {
        if !allow_python && registry::get(&*store, &name)?.is_python() {
            return Err(Error::Invalid(
                "Python substreams are switched off on this server (--no-python-substreams)".into(),
            ));
        }
        sluice_substreams::backfill(&*store, &name, from, to, python)
    })
    .await
    {
        Ok(r) => json(
            StatusCode::OK,
            serde_json::json!({
                "chunks": r.chunks, "present": r.present, "stored": r.stored, "misses": r.misses,
            }),
        ),
        Err(r) => r,
    }
}
