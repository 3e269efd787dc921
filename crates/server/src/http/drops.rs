//! `POST /v1/drops`: what emitters dropped on their side, added to the completeness counts as
//! dropped reason `client:<reason>` for each (epoch, dc, type, subtype).
//!
//! Body: `{"drops":[{"epoch":…,"dc":"ams","type":"WEB","subtype":"request","reason":"retry_budget","count":3}]}`
//! (`dc` may be left out: the server's dc; `subtype` may be `""` or left out). Answers **200**
//! `{"accepted":N}` (N records), **400** naming the first bad field (nothing is counted then),
//! **403** when the token does not reach a record's dc/type, **503** when the pipeline stops.
//!
//! Contracts: at most [`MAX_DROP_RECORDS`] records per request, `count` in `0..=`[`MAX_DROP_COUNT`],
//! `reason` `[a-z0-9_]{1,32}`, tags by [`sluice_blob::key::check_tag`], `epoch` in any form
//! [`sluice_collector::epoch`] reads and within the ingest window (retention, future limit);
//! unknown fields are refused. Accepted records go to a pipeline shard's pending drop counts
//! (`pipeline::drops`, the path ingest drops take), which writes them to the store before the
//! answer, so `GET /v1/counts` shows them once the 200 is sent (a write the store refuses stays
//! pending and is retried each tick: still accepted, a resend would count it twice). They are
//! not logged in the WAL: a report is best-effort, as the emitters send it. `sluice_client_drops_total{reason}` counts them
//! (reasons beyond the standard five are labelled `other`).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use sluice_auth::Grant;
use sluice_blob::key::check_tag;

use super::{error, json, AppState};
use crate::pipeline::drops::PendingDrops;
use crate::pipeline::{now_unix, Msg};

/// Most drop records in one request.
pub const MAX_DROP_RECORDS: usize = 10_000;
/// Largest `count` of one record (2³²).
pub const MAX_DROP_COUNT: u64 = 1 << 32;
/// Longest `reason`, bytes.
pub const MAX_REASON_LEN: usize = 32;
/// The reasons the emitters of every language report (their own metric label; any other
/// valid reason is counted in the store under its name and labelled `other`).
pub const STANDARD_REASONS: [&str; 5] = [
    "retry_budget",
    "queue_full",
    "buffer_full",
    "too_large",
    "rejected",
];

/// One checked drop record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DropRecord {
    pub epoch: i64,
    pub dc: String,
    pub type_: String,
    pub subtype: String,
    pub reason: String,
    pub count: u64,
}

/// `POST /v1/drops`.
pub(crate) async fn post_drops(
    State(st): State<AppState>,
    Extension(grant): Extension<Grant>,
    body: Bytes,
) -> Response {
    let now = now_unix();
    let window = now.saturating_sub(st.epoch_window.0)..=now.saturating_add(st.epoch_window.1);
    let records = match parse(&body, &st.dc, &window) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let Some((i, r)) = records
        .iter()
        .enumerate()
        .find(|(_, r)| !grant.allowed.allows(&r.dc, &r.type_))
    {
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "drops[{i}]: the token does not reach dc {:?} type {:?}",
                r.dc, r.type_
            ),
        );
    }
    let n = records.len();
    let mut pending = PendingDrops::new();
    for r in records.iter().filter(|r| r.count > 0) {
        crate::pipeline::drops::add_named(
            &mut pending,
            (r.epoch, r.dc.clone(), r.type_.clone(), r.subtype.clone()),
            &format!("client:{}", r.reason),
            r.count,
        );
    }
    if !pending.is_empty() {
        let (done, written) = tokio::sync::oneshot::channel();
        if let Err(e) = st.tx.send(Msg::ClientDrops(pending, done)).await {
            return error(StatusCode::SERVICE_UNAVAILABLE, e);
        }
        // Once the shard has written them (or kept them pending after a store error: they are
        // accepted either way, a resend would count them twice).
        if written.await.is_err() {
            return error(StatusCode::SERVICE_UNAVAILABLE, "pipeline is shutting down");
        }
    }
    for r in &records {
        let label = if STANDARD_REASONS.contains(&r.reason.as_str()) {
            r.reason.as_str()
        } else {
            "other"
        };
        st.metrics
            .client_drops
            .with_label_values(&[label])
            .inc_by(r.count);
    }
    json(StatusCode::OK, serde_json::json!({ "accepted": n }))
}

/// The records of a body, or the first bad field as `drops[i].field: why`.
pub(crate) fn parse(
    body: &[u8],
    server_dc: &str,
    window: &std::ops::RangeInclusive<i64>,
) -> Result<Vec<DropRecord>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("body must be a JSON object {\"drops\":[…]}")?;
    if let Some(k) = obj.keys().find(|k| *k != "drops") {
        return Err(format!("unknown field {k:?} (expected only \"drops\")"));
    }
    let items = obj
        .get("drops")
        .ok_or("drops: missing")?
        .as_array()
        .ok_or("drops: must be an array")?;
    if items.len() > MAX_DROP_RECORDS {
        return Err(format!(
            "drops: {} records, over the limit of {MAX_DROP_RECORDS} per request",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| record(item, server_dc, window).map_err(|e| format!("drops[{i}].{e}")))
        .collect()
}

/// One record, or `field: why`.
fn record(
    item: &serde_json::Value,
    server_dc: &str,
    window: &std::ops::RangeInclusive<i64>,
) -> Result<DropRecord, String> {
    const FIELDS: [&str; 6] = ["epoch", "dc", "type", "subtype", "reason", "count"];
    let obj = item
        .as_object()
        .ok_or_else(|| "record: must be an object".to_string())?;
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "{k}: unknown field (expected {})",
            FIELDS.join(", ")
        ));
    }
    let text = |k: &str, required: bool| -> Result<Option<String>, String> {
        match obj.get(k) {
            None | Some(serde_json::Value::Null) if !required => Ok(None),
            None | Some(serde_json::Value::Null) => Err(format!("{k}: missing")),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{k}: must be a string")),
        }
    };
    let epoch = sluice_collector::epoch::from_json(obj.get("epoch").ok_or("epoch: missing")?)
        .map_err(|e| format!("epoch: {e}"))?;
    if !window.contains(&epoch) {
        return Err(format!(
            "epoch: {epoch} outside the accepted window {}..={}",
            window.start(),
            window.end()
        ));
    }
    let dc = text("dc", false)?.unwrap_or_else(|| server_dc.to_owned());
    check_tag("dc", &dc, false).map_err(|e| format!("dc: {e}"))?;
    let type_ = text("type", true)?.unwrap_or_default();
    check_tag("type", &type_, false).map_err(|e| format!("type: {e}"))?;
    let subtype = text("subtype", false)?.unwrap_or_default();
    check_tag("subtype", &subtype, true).map_err(|e| format!("subtype: {e}"))?;
    let reason = text("reason", true)?.unwrap_or_default();
    let reason_ok = (1..=MAX_REASON_LEN).contains(&reason.len())
        && reason
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !reason_ok {
        let shown: String = reason.chars().take(40).collect();
        return Err(format!(
            "reason: {shown:?} must match [a-z0-9_]{{1,{MAX_REASON_LEN}}}"
        ));
    }
    let count = obj
        .get("count")
        .ok_or("count: missing")?
        .as_u64()
        .filter(|c| *c <= MAX_DROP_COUNT)
        .ok_or_else(|| format!("count: must be an integer from 0 to {MAX_DROP_COUNT}"))?;
    Ok(DropRecord {
        epoch,
        dc,
        type_,
        subtype,
        reason,
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_928_400;

    fn parse_at(body: &str) -> Result<Vec<DropRecord>, String> {
        parse(body.as_bytes(), "local", &(NOW - 86_400..=NOW + 300))
    }

    #[test]
    fn records_are_read_with_their_defaults() {
        let got = parse_at(&format!(
            r#"{{"drops":[{{"epoch":{NOW},"dc":"ams","type":"WEB","subtype":"request","reason":"retry_budget","count":3}},
                {{"epoch":"2026-11-29T05:00:00Z","type":"WEB","reason":"queue_full","count":1}}]}}"#
        ))
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].dc, "ams");
        assert_eq!(got[0].count, 3);
        assert_eq!(
            (got[1].epoch, got[1].dc.as_str(), got[1].subtype.as_str()),
            (NOW, "local", "")
        );
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let rec = |over: &str| {
            format!(
                r#"{{"drops":[{{"epoch":{NOW},"type":"WEB","reason":"retry_budget","count":1}},{{"epoch":{NOW},"type":"WEB","reason":"retry_budget","count":1,{over}}}]}}"#
            )
        };
        for (body, field) in [
            ("[]".to_string(), "body must be"),
            ("nope".to_string(), "not JSON"),
            (r#"{"drop":[]}"#.to_string(), "unknown field \"drop\""),
            (r#"{"drops":{}}"#.to_string(), "drops: must be an array"),
            (rec(r#""reason":"Retry""#), "drops[1].reason"),
            (rec(r#""count":-1"#), "drops[1].count"),
            (rec(r#""count":4294967297"#), "drops[1].count"),
            (rec(r#""count":1.5"#), "drops[1].count"),
            (rec(r#""epoch":"yesterday""#), "drops[1].epoch"),
            (rec(r#""epoch":1000"#), "drops[1].epoch: 1000 outside"),
            (rec(r#""dc":"a:b""#), "drops[1].dc"),
            (rec(r#""type":"""#), "drops[1].type"),
            (rec(r#""subtype":7"#), "drops[1].subtype: must be a string"),
            (rec(r#""extra":1"#), "drops[1].extra: unknown field"),
        ] {
            // A repeated key in `rec` is read as its last value by serde_json.
            let e = parse_at(&body).expect_err(&body);
            assert!(e.contains(field), "{body}: {e}");
        }
        let many = format!(
            r#"{{"drops":[{}]}}"#,
            vec!["{}"; MAX_DROP_RECORDS + 1].join(",")
        );
        assert!(parse_at(&many).unwrap_err().contains("over the limit"));
        assert!(parse_at(&format!(
            r#"{{"drops":[{{"epoch":{NOW},"type":"W","reason":"x","count":4294967296}}]}}"#
        ))
        .is_ok());
    }
}
