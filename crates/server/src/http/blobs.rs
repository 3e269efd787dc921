//! `GET /buckets/{namespace}/keys/{key}` and `GET /buckets/substreams/{name}/keys/{key}`: one
//! stored blob's raw bytes (Riak-style paths).
//!
//! Contracts: the namespace is `events` or `substreams/<name>` ([`Namespace::parse`]); the key
//! must start with `<epoch>:`. **404** when the blob is missing, **400** for a bad namespace
//! or key (also one the store refuses to look up), **500** for a store error. Reads only.
//!
//! `GET /buckets/epochs/keys/<epoch>-<dc>` is the original's listing of a second: the epoch
//! index as `type:subtype:chunk|…` (`text/plain`, the original's order: by type, subtype, then
//! chunk), **404** when the second has no entry. With the events route this is the whole read
//! API of the original article: fetch the listing, split on `|`, prepend `<epoch>:<dc>:`, fetch
//! each blob, check its `=chk` SHA-1 trailer, decode it with any Sereal decoder. Same for every
//! store backend.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_store::{BlobKey, Namespace, StoreError};

use super::{error, AppState};

/// `GET /buckets/{ns}/keys/{key}`.
pub(crate) async fn get_blob(
    State(st): State<AppState>,
    axum::Extension(grant): axum::Extension<sluice_auth::Grant>,
    Path((ns, key)): Path<(String, String)>,
) -> Response {
    if ns == "epochs" {
        return listing_response(st, key, &grant.allowed).await;
    }
    blob_response(st, ns, key, &grant.allowed).await
}

/// Whether `allowed` reaches the event key `key` (`<epoch>:<dc>:<type>:…`); a restricted token
/// reaches no key it cannot read.
fn reaches_key(allowed: &sluice_auth::Allowed, key: &str) -> bool {
    allowed.is_all()
        || sluice_blob::EventKey::parse(key).is_ok_and(|k| allowed.allows(k.dc(), k.type_()))
}

/// `GET /buckets/epochs/keys/<epoch>-<dc>`: the pipe-separated listing of that second.
async fn listing_response(st: AppState, key: String, allowed: &sluice_auth::Allowed) -> Response {
    let ek = match sluice_blob::EpochKey::parse(&key) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let store = st.store.clone();
    let (epoch, dc) = (ek.epoch(), ek.dc().to_owned());
    let listed_dc = dc.clone();
    let res = tokio::task::spawn_blocking(move || store.get_epoch_index(epoch, &dc)).await;
    let mut entries = match res {
        Ok(Ok(e)) => e,
        Ok(Err(e @ StoreError::InvalidArgument { .. })) => {
            return error(StatusCode::BAD_REQUEST, e.to_string())
        }
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    if !allowed.is_all() {
        // A restricted token lists only the types it reaches (an entry that does not parse
        // names no type it may see).
        entries.retain(|e| {
            sluice_blob::IndexEntry::parse(e).is_ok_and(|x| allowed.allows(&listed_dc, x.type_()))
        });
    }
    if entries.is_empty() {
        return error(StatusCode::NOT_FOUND, "not found");
    }
    // The original's order when every entry is well-formed; else the store's (sorted) order,
    // never dropping an entry.
    let mut index = sluice_blob::EpochIndex::new();
    let mut all_parsed = true;
    for e in &entries {
        match sluice_blob::IndexEntry::parse(e) {
            Ok(entry) => {
                index.insert(entry);
            }
            Err(_) => all_parsed = false,
        }
    }
    let body = if all_parsed {
        index.to_string()
    } else {
        entries.into_iter().collect::<Vec<_>>().join("|")
    };
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// `GET /buckets/substreams/{name}/keys/{key}`: the namespace `substreams/<name>`.
pub(crate) async fn get_substream_blob(
    State(st): State<AppState>,
    axum::Extension(grant): axum::Extension<sluice_auth::Grant>,
    Path((name, key)): Path<(String, String)>,
) -> Response {
    blob_response(st, format!("substreams/{name}"), key, &grant.allowed).await
}

/// The blob `key` of namespace `ns`, read on a blocking thread.
async fn blob_response(
    st: AppState,
    ns: String,
    key: String,
    allowed: &sluice_auth::Allowed,
) -> Response {
    if !reaches_key(allowed, &key) {
        st.auth.count_refusal("http", "types");
        return error(
            StatusCode::FORBIDDEN,
            "this token does not reach this blob's dc or type",
        );
    }
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
