//! `GET /buckets/{namespace}/keys/{key}` and `GET /buckets/substreams/{name}/keys/{key}`: one
//! stored blob's raw bytes (Riak-style paths).
//!
//! Contracts: the namespace is `events` or `substreams/<name>` ([`Namespace::parse`]); the key
//! must start with `<epoch>:`. **404** when the blob is missing, **400** for a bad namespace
//! or key (also one the store refuses to look up), **500** for a store error. Reads only.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_store::{BlobKey, Namespace, StoreError};

use super::{error, AppState};

/// `GET /buckets/{ns}/keys/{key}`.
pub(crate) async fn get_blob(
    State(st): State<AppState>,
    Path((ns, key)): Path<(String, String)>,
) -> Response {
    blob_response(st, ns, key).await
}

/// `GET /buckets/substreams/{name}/keys/{key}`: the namespace `substreams/<name>`.
pub(crate) async fn get_substream_blob(
    State(st): State<AppState>,
    Path((name, key)): Path<(String, String)>,
) -> Response {
    blob_response(st, format!("substreams/{name}"), key).await
}

/// The blob `key` of namespace `ns`, read on a blocking thread.
async fn blob_response(st: AppState, ns: String, key: String) -> Response {
    let ns = match Namespace::parse(&ns) {
        Ok(ns) => ns,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let digits = key.bytes().take_while(u8::is_ascii_digit).count();
    let Some(epoch) = key[..digits]
        .parse::<i64>()
        .ok()
        .filter(|_| key[digits..].starts_with(':'))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("key {key:?} does not start with `<epoch>:`"),
        );
    };
    let store = st.store.clone();
    let res =
        tokio::task::spawn_blocking(move || store.get_blob(&ns, BlobKey::new(epoch, &key))).await;
    match res {
        Ok(Ok(Some(bytes))) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Ok(Ok(None)) => error(StatusCode::NOT_FOUND, "not found"),
        // A key the store refuses to look up (a NUL, too long, ...) is the client's error.
        Ok(Err(e @ StoreError::InvalidArgument { .. })) => {
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
