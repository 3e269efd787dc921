//! `/v1/tokens`: tokens of this store (admin scope; see `crate::auth`).
//!
//! | Request | Answer |
//! |---|---|
//! | `GET /v1/tokens` | `{"tokens":[{id, name, scopes, dcs, types, created, expires, revoked}…]}` (never a secret) |
//! | `POST /v1/tokens` `{"name", "scopes": "ingest,read", "dcs": "ams*", "types": "WEB,LB", "expires": unix s}` | **201** `{"secret": "sluice_…", "token": {…}}`: the secret is shown this once |
//! | `DELETE /v1/tokens/{name or id}` | `{"revoked": {…}}`: refused from then on (this server at once, others sharing the store within 5 s) |
//!
//! A bad request is **400**; an unknown token **404**; a store error **503**.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use sluice_auth::{Allowed, AuthError, Scopes, TokenSpec};

use super::{error, json, AppState};
use crate::pipeline::now_unix;

/// The body of `POST /v1/tokens`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    scopes: String,
    #[serde(default)]
    dcs: String,
    #[serde(default)]
    types: String,
    #[serde(default)]
    expires: Option<i64>,
}

/// `GET /v1/tokens`.
pub(crate) async fn list(State(st): State<AppState>) -> Response {
    let _ = st.auth.tokens.refresh();
    let tokens: Vec<serde_json::Value> = st.auth.tokens.list().iter().map(|r| r.public()).collect();
    json(StatusCode::OK, serde_json::json!({ "tokens": tokens }))
}

/// `POST /v1/tokens`.
pub(crate) async fn create(State(st): State<AppState>, body: Bytes) -> Response {
    let b: CreateBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("token: body: {e}")),
    };
    let spec = match (Scopes::parse(&b.scopes), Allowed::parse(&b.dcs, &b.types)) {
        (Ok(scopes), Ok(allowed)) => TokenSpec {
            name: b.name,
            scopes,
            allowed,
            expires: b.expires,
        },
        (Err(e), _) | (_, Err(e)) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let now = now_unix();
    if spec.expires.is_some_and(|e| e <= now) {
        return error(StatusCode::BAD_REQUEST, "token: expires is in the past");
    }
    let auth = st.auth.clone();
    match tokio::task::spawn_blocking(move || auth.tokens.create(spec, now)).await {
        Ok(Ok((secret, record))) => json(
            StatusCode::CREATED,
            serde_json::json!({ "secret": secret.expose(), "token": record.public() }),
        ),
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `DELETE /v1/tokens/{which}`.
pub(crate) async fn revoke(State(st): State<AppState>, Path(which): Path<String>) -> Response {
    let auth = st.auth.clone();
    match tokio::task::spawn_blocking(move || auth.tokens.revoke(&which, now_unix())).await {
        Ok(Ok(record)) => json(
            StatusCode::OK,
            serde_json::json!({ "revoked": record.public() }),
        ),
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The status of a failed token operation: the client's mistake, a token not found, or a
/// catalog that cannot be reached now (retry later).
fn status_of(e: &AuthError) -> StatusCode {
    match e {
        AuthError::Spec(_) | AuthError::NameTaken(_) => StatusCode::BAD_REQUEST,
        AuthError::NotFound(_) => StatusCode::NOT_FOUND,
        AuthError::Catalog { .. } => StatusCode::SERVICE_UNAVAILABLE,
        AuthError::Random(_) | AuthError::Encode(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
