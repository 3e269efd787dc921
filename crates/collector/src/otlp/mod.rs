//! OTLP logs (`POST /v1/logs`, OTLP/HTTP): a request body → log records → events, with the
//! answer the OTLP/HTTP specification asks for. No I/O: the server's handler reads the body,
//! submits the [`convert::Payload`]s through the same ingest as `POST /v1/events` and encodes
//! the answer with [`response`] / [`status`].
//!
//! - [`proto`]: the messages (prost, derived by hand), [`json`]: their OTLP/JSON encoding.
//! - [`convert`]: records → events (tags from attributes, the fields of the record), limits.
//!
//! The events are handed to the ingest as JSON arrays, so the WAL logs plain events and its
//! replay needs nothing OTLP (docs/otlp.md).

pub mod convert;
mod json;
pub mod proto;

use std::fmt;
use std::io::Read;

use prost::Message;

pub use convert::{convert, payloads, Conversion, OtlpEvent, Payload, Rejection};
use proto::{ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse};

use crate::drops::Drop;

/// How log records map to events, and the limits of a request. `Default` gives the documented
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Attributes whose string value is the `type`, first found wins, looked up in the resource
    /// and then in the record (default `["service.name"]`).
    pub type_attributes: Vec<String>,
    /// Attributes whose value is the `dc` (default `["deployment.environment",
    /// "deployment.environment.name", "cloud.region"]`); none: the server's dc.
    pub dc_attributes: Vec<String>,
    /// Attributes whose value is the `subtype`, before the severity text (default none).
    pub subtype_attributes: Vec<String>,
    /// The `type` of records with none of `type_attributes` (default `otlp`).
    pub default_type: String,
    /// The `subtype` of records with no severity text (default `log`).
    pub default_subtype: String,
    /// Most log records taken from one request (default 50,000); the rest are rejected
    /// (`too_many`).
    pub max_records: usize,
    /// Deepest nesting of arrays / maps in one attribute value or body (default 8); a record
    /// with a deeper one is rejected (`too_deep`).
    pub max_attribute_depth: usize,
}

impl Default for OtlpConfig {
    fn default() -> OtlpConfig {
        OtlpConfig {
            type_attributes: vec!["service.name".into()],
            dc_attributes: vec![
                "deployment.environment".into(),
                "deployment.environment.name".into(),
                "cloud.region".into(),
            ],
            subtype_attributes: Vec::new(),
            default_type: "otlp".into(),
            default_subtype: "log".into(),
            max_records: 50_000,
            max_attribute_depth: 8,
        }
    }
}

impl OtlpConfig {
    /// Checks the fallbacks against the tag rule and the limits for zero.
    pub fn validate(&self) -> Result<(), String> {
        sluice_blob::key::check_tag("otlp_default_type", &self.default_type, false)
            .map_err(|e| e.to_string())?;
        sluice_blob::key::check_tag("otlp_default_subtype", &self.default_subtype, true)
            .map_err(|e| e.to_string())?;
        if self.max_records == 0 || self.max_attribute_depth == 0 {
            return Err("otlp_max_records and otlp_max_attribute_depth must be positive".into());
        }
        Ok(())
    }
}

/// The two OTLP/HTTP encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/x-protobuf` (binary protobuf).
    Protobuf,
    /// `application/json` (OTLP/JSON).
    Json,
}

impl Encoding {
    /// The encoding of a `Content-Type` (parameters such as `charset` ignored), `None` for
    /// anything else.
    pub fn from_content_type(ct: &str) -> Option<Encoding> {
        let mime = ct.split(';').next().unwrap_or("").trim();
        if mime.eq_ignore_ascii_case("application/x-protobuf")
            || mime.eq_ignore_ascii_case("application/protobuf")
        {
            Some(Encoding::Protobuf)
        } else if mime.eq_ignore_ascii_case("application/json") {
            Some(Encoding::Json)
        } else {
            None
        }
    }

    /// The `Content-Type` of answers in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Decompressed, it is larger than the limit (HTTP 413).
    TooLarge(usize),
    /// Not gzip, not protobuf, not OTLP/JSON (HTTP 400), with the reason.
    Unreadable(String),
}

impl BodyError {
    /// A stable label for counters: `too_large`, `bad_body`.
    pub fn reason(&self) -> &'static str {
        match self {
            BodyError::TooLarge(_) => "too_large",
            BodyError::Unreadable(_) => "bad_body",
        }
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge(n) => write!(f, "decompressed body over {n} bytes"),
            BodyError::Unreadable(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for BodyError {}

/// A `Content-Encoding: gzip` body decompressed, at most `limit` bytes of it.
pub fn gunzip(body: &[u8], limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let mut dec = flate2::read::GzDecoder::new(body).take(limit as u64 + 1);
    dec.read_to_end(&mut out)
        .map_err(|e| BodyError::Unreadable(format!("bad gzip body: {e}")))?;
    if out.len() > limit {
        return Err(BodyError::TooLarge(limit));
    }
    Ok(out)
}

/// The request in `body` (already decompressed).
pub fn decode(body: &[u8], enc: Encoding) -> Result<ExportLogsServiceRequest, BodyError> {
    match enc {
        Encoding::Protobuf => ExportLogsServiceRequest::decode(body)
            .map_err(|e| BodyError::Unreadable(format!("bad protobuf body: {e}"))),
        Encoding::Json => serde_json::from_slice(body)
            .map_err(|e| BodyError::Unreadable(format!("bad OTLP/JSON body: {e}"))),
    }
}

/// The records of `payload` that the ingest dropped (`drops` of its summary), by record
/// ordinal: a whole-payload drop rejects all of them, a `too_many` its `count` from `index`.
pub fn ingest_rejections(payload: &Payload, drops: &[Drop]) -> Vec<Rejection> {
    let mut out = Vec::new();
    for d in drops {
        let range = if d.whole_payload {
            0..payload.records.len()
        } else {
            let end = d.index.saturating_add(d.count.max(1) as usize);
            d.index.min(payload.records.len())..end.min(payload.records.len())
        };
        out.extend(payload.records[range].iter().map(|&record| Rejection {
            record,
            reason: d.reason.as_str(),
            detail: d.detail.clone(),
        }));
    }
    out
}

/// The 200 answer: empty when nothing was rejected, else `partialSuccess` with the count and a
/// message naming the reasons (the first few details).
pub fn response(rejected: &[Rejection], enc: Encoding) -> Vec<u8> {
    let partial = (!rejected.is_empty()).then(|| ExportLogsPartialSuccess {
        rejected_log_records: rejected.len() as i64,
        error_message: summary(rejected),
    });
    match enc {
        Encoding::Protobuf => ExportLogsServiceResponse {
            partial_success: partial,
        }
        .encode_to_vec(),
        Encoding::Json => {
            let v = match partial {
                None => serde_json::json!({}),
                Some(p) => serde_json::json!({ "partialSuccess": {
                    // int64 is a string in the JSON mapping.
                    "rejectedLogRecords": p.rejected_log_records.to_string(),
                    "errorMessage": p.error_message,
                }}),
            };
            v.to_string().into_bytes()
        }
    }
}

/// A 4xx / 5xx body: a `google.rpc.Status` with `code` and `message`.
pub fn status(code: i32, message: &str, enc: Encoding) -> Vec<u8> {
    match enc {
        Encoding::Protobuf => proto::Status {
            code,
            message: message.to_owned(),
        }
        .encode_to_vec(),
        Encoding::Json => serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes(),
    }
}

/// `"3 log record(s) rejected: too_deep 1 (…), bad_epoch 2 (…)"`: each reason once, with
/// its count and first detail.
fn summary(rejected: &[Rejection]) -> String {
    let mut reasons: Vec<(&str, usize, &str)> = Vec::new();
    for r in rejected {
        match reasons.iter_mut().find(|(why, _, _)| *why == r.reason) {
            Some(e) => e.1 += 1,
            None => reasons.push((r.reason, 1, &r.detail)),
        }
    }
    let parts: Vec<String> = reasons
        .iter()
        .map(|(why, n, detail)| format!("{why} {n} ({detail})"))
        .collect();
    format!(
        "{} log record(s) rejected: {}",
        rejected.len(),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drops::DropReason;

    #[test]
    fn content_types() {
        assert_eq!(
            Encoding::from_content_type("application/x-protobuf"),
            Some(Encoding::Protobuf)
        );
        assert_eq!(
            Encoding::from_content_type("Application/JSON; charset=utf-8"),
            Some(Encoding::Json)
        );
        assert_eq!(Encoding::from_content_type("text/plain"), None);
    }

    #[test]
    fn gzip_is_bounded() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&[b'x'; 10_000]).unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(gunzip(&gz, 10_000).unwrap().len(), 10_000);
        assert_eq!(gunzip(&gz, 9_999), Err(BodyError::TooLarge(9_999)));
        assert!(matches!(
            gunzip(b"not gzip", 100),
            Err(BodyError::Unreadable(_))
        ));
    }

    #[test]
    fn drops_map_to_records() {
        let p = Payload {
            bytes: Vec::new(),
            records: vec![3, 4, 6, 7],
        };
        let drop = |index, reason, count, whole| Drop {
            index,
            offset: 0,
            reason,
            detail: "d".into(),
            count,
            whole_payload: whole,
            tags: None,
        };
        let r = ingest_rejections(
            &p,
            &[
                drop(1, DropReason::BadEpoch, 1, false),
                drop(3, DropReason::TooMany, 5, false),
            ],
        );
        assert_eq!(
            r.iter().map(|r| (r.record, r.reason)).collect::<Vec<_>>(),
            vec![(4, "bad_epoch"), (7, "too_many")]
        );
        let all = ingest_rejections(&p, &[drop(0, DropReason::Oversized, 1, true)]);
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn answers() {
        assert!(response(&[], Encoding::Protobuf).is_empty());
        assert_eq!(response(&[], Encoding::Json), b"{}");
        let rej = vec![
            Rejection {
                record: 0,
                reason: "too_deep",
                detail: "x".into(),
            },
            Rejection {
                record: 2,
                reason: "too_deep",
                detail: "y".into(),
            },
        ];
        let back =
            ExportLogsServiceResponse::decode(&response(&rej, Encoding::Protobuf)[..]).unwrap();
        let p = back.partial_success.unwrap();
        assert_eq!(p.rejected_log_records, 2);
        assert_eq!(p.error_message, "2 log record(s) rejected: too_deep 2 (x)");
        let j: serde_json::Value = serde_json::from_slice(&response(&rej, Encoding::Json)).unwrap();
        assert_eq!(j["partialSuccess"]["rejectedLogRecords"], "2");
    }
}
