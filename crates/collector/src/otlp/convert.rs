//! OTLP log records → Sluice events (JSON objects), each record its own event, and the
//! records refused here with their reason. The tags come from attributes ([`OtlpConfig`]);
//! every tag is made to pass [`check_tag`] (see [`sanitise_tag`]) or falls back.

use base64::Engine as _;
use serde_json::{Map, Value as Json};
use sluice_blob::key::{check_tag, MAX_TAG_BYTES};

use super::proto::{AnyValue, ExportLogsServiceRequest, KeyValue, LogRecord, Value};
use super::OtlpConfig;

/// One record made into an event.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpEvent {
    /// The record's ordinal in the request (resource, then scope, then record order).
    pub record: usize,
    /// Its `dc` tag.
    pub dc: String,
    /// Its `type` tag.
    pub type_: String,
    /// The event's JSON text: an object with `epoch`, `dc`, `type`, `subtype` and the record's
    /// fields.
    pub json: Vec<u8>,
}

/// A record refused (its ordinal, a stable reason, the detail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The record's ordinal in the request.
    pub record: usize,
    /// Why, as a stable label: `too_many`, `too_deep` here; the ingest reasons
    /// ([`crate::DropReason::as_str`]) for what the ingest refused.
    pub reason: &'static str,
    /// The detail, in words.
    pub detail: String,
}

/// A request made into events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversion {
    /// Log records in the request.
    pub records: usize,
    /// The events, in record order.
    pub events: Vec<OtlpEvent>,
    /// The records refused here, in record order.
    pub rejected: Vec<Rejection>,
}

/// The events of `req`. `dc` is the server's dc (a record with none of the dc attributes gets
/// it); `now` the arrival second (the epoch of a record with neither time).
pub fn convert(req: &ExportLogsServiceRequest, cfg: &OtlpConfig, dc: &str, now: i64) -> Conversion {
    let mut out = Conversion::default();
    for rl in &req.resource_logs {
        let resource: &[KeyValue] = rl.resource.as_ref().map_or(&[], |r| &r.attributes);
        // The resource's map is the same in each of its events: written as JSON text once.
        let resource_text = kv_map(resource, cfg.max_attribute_depth)
            .ok()
            .map(|m| (!m.is_empty()).then(|| json_text(&Json::Object(m))));
        for sl in &rl.scope_logs {
            let scope_text = sl.scope.as_ref().and_then(|s| {
                let mut m = Map::new();
                if !s.name.is_empty() {
                    m.insert("name".into(), s.name.clone().into());
                }
                if !s.version.is_empty() {
                    m.insert("version".into(), s.version.clone().into());
                }
                (!m.is_empty()).then(|| json_text(&Json::Object(m)))
            });
            for rec in &sl.log_records {
                let index = out.records;
                out.records += 1;
                if index >= cfg.max_records {
                    out.rejected.push(Rejection {
                        record: index,
                        reason: "too_many",
                        detail: format!("over {} log records in one request", cfg.max_records),
                    });
                    continue;
                }
                let Some(resource_text) = &resource_text else {
                    out.rejected
                        .push(too_deep(index, "a resource attribute", cfg));
                    continue;
                };
                let shared = Shared {
                    resource: resource_text.as_deref(),
                    scope: scope_text.as_deref(),
                };
                match event(rec, resource, shared, cfg, dc, now) {
                    Ok(e) => out.events.push(OtlpEvent { record: index, ..e }),
                    Err(what) => out.rejected.push(too_deep(index, what, cfg)),
                }
            }
        }
    }
    out
}

fn too_deep(record: usize, what: &str, cfg: &OtlpConfig) -> Rejection {
    Rejection {
        record,
        reason: "too_deep",
        detail: format!(
            "{what} nests deeper than {} levels (otlp_max_attribute_depth)",
            cfg.max_attribute_depth
        ),
    }
}

/// JSON text of a value (a `Value` always serialises: its map keys are strings).
fn json_text(v: &Json) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// The JSON text of the fields every event of a resource / scope carries.
#[derive(Clone, Copy)]
struct Shared<'a> {
    /// `resource` (its attributes), when any.
    resource: Option<&'a [u8]>,
    /// `scope` (name, version), when any.
    scope: Option<&'a [u8]>,
}

/// The event of one record, or what nests too deeply.
fn event(
    rec: &LogRecord,
    resource: &[KeyValue],
    shared: Shared<'_>,
    cfg: &OtlpConfig,
    server_dc: &str,
    now: i64,
) -> Result<OtlpEvent, &'static str> {
    let depth = cfg.max_attribute_depth;
    let attributes = kv_map(&rec.attributes, depth).map_err(|()| "a log record attribute")?;
    let body = rec
        .body
        .as_ref()
        .map(|b| any_value(b, 0, depth))
        .transpose()
        .map_err(|()| "the body")?;
    let lookup = |keys: &[String]| {
        keys.iter().find_map(|k| {
            string_attr(resource, k)
                .or_else(|| string_attr(&rec.attributes, k))
                .and_then(sanitise_tag)
        })
    };
    let type_ = lookup(&cfg.type_attributes).unwrap_or_else(|| cfg.default_type.clone());
    let dc = lookup(&cfg.dc_attributes).unwrap_or_else(|| server_dc.to_owned());
    let subtype = lookup(&cfg.subtype_attributes)
        .or_else(|| sanitise_tag(&rec.severity_text.to_lowercase()))
        .unwrap_or_else(|| cfg.default_subtype.clone());
    let nanos = if rec.time_unix_nano != 0 {
        rec.time_unix_nano
    } else {
        rec.observed_time_unix_nano
    };
    let epoch = if nanos != 0 {
        (nanos / 1_000_000_000) as i64
    } else {
        now
    };
    let mut e = Map::new();
    e.insert("epoch".into(), epoch.into());
    e.insert("dc".into(), dc.clone().into());
    e.insert("type".into(), type_.clone().into());
    e.insert("subtype".into(), subtype.into());
    if rec.time_unix_nano != 0 {
        e.insert("time_unix_nano".into(), rec.time_unix_nano.into());
    }
    if rec.observed_time_unix_nano != 0 {
        e.insert(
            "observed_time_unix_nano".into(),
            rec.observed_time_unix_nano.into(),
        );
    }
    if rec.severity_number != 0 {
        e.insert("severity_number".into(), rec.severity_number.into());
    }
    if !rec.severity_text.is_empty() {
        e.insert("severity_text".into(), rec.severity_text.clone().into());
    }
    if let Some(body) = body {
        e.insert("body".into(), body);
    }
    if !rec.trace_id.is_empty() {
        e.insert("trace_id".into(), hex::encode(&rec.trace_id).into());
    }
    if !rec.span_id.is_empty() {
        e.insert("span_id".into(), hex::encode(&rec.span_id).into());
    }
    if rec.flags != 0 {
        e.insert("flags".into(), rec.flags.into());
    }
    if !rec.event_name.is_empty() {
        e.insert("event_name".into(), rec.event_name.clone().into());
    }
    if !attributes.is_empty() {
        e.insert("attributes".into(), Json::Object(attributes));
    }
    // `{…}` (never empty: it has the tags), then the shared fields spliced in before its `}`.
    let mut json = json_text(&Json::Object(e));
    json.pop();
    for (key, text) in [("resource", shared.resource), ("scope", shared.scope)] {
        if let Some(text) = text {
            json.extend_from_slice(b",\"");
            json.extend_from_slice(key.as_bytes());
            json.extend_from_slice(b"\":");
            json.extend_from_slice(text);
        }
    }
    json.push(b'}');
    Ok(OtlpEvent {
        record: 0,
        dc,
        type_,
        json,
    })
}

/// The string value of attribute `key`, if it has one.
fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    // The last occurrence wins, as in the event's map.
    attrs.iter().rev().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        }
    })
}

/// `s` made into a tag that passes [`check_tag`]: `:`, `|` and control characters become `_`,
/// surrounding whitespace goes, then it is cut to [`MAX_TAG_BYTES`] at a character boundary.
/// `None` when nothing is left.
pub fn sanitise_tag(s: &str) -> Option<String> {
    let mut t: String = s
        .trim()
        .chars()
        .map(|c| {
            if c == ':' || c == '|' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if t.len() > MAX_TAG_BYTES {
        let mut cut = MAX_TAG_BYTES;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t.truncate(cut);
    }
    check_tag("tag", &t, false).ok().map(|()| t)
}

/// Attributes as a JSON map (the last of repeated keys wins), or `Err` when a value nests
/// deeper than `max_depth`.
fn kv_map(attrs: &[KeyValue], max_depth: usize) -> Result<Map<String, Json>, ()> {
    let mut m = Map::new();
    for kv in attrs {
        let v = match &kv.value {
            Some(v) => any_value(v, 0, max_depth)?,
            None => Json::Null,
        };
        m.insert(kv.key.clone(), v);
    }
    Ok(m)
}

/// An `AnyValue` as JSON: strings, bools, integers as they are; doubles as numbers (NaN and the
/// infinities, which JSON has not, as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`); bytes
/// in base64; arrays and key-value lists as arrays and maps; empty as `null`. `depth`: the
/// containers around it; more than `max_depth` is `Err`.
fn any_value(v: &AnyValue, depth: usize, max_depth: usize) -> Result<Json, ()> {
    let Some(v) = &v.value else {
        return Ok(Json::Null);
    };
    Ok(match v {
        Value::String(s) => Json::String(s.clone()),
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Double(f) => serde_json::Number::from_f64(*f).map_or_else(
            || {
                Json::String(
                    if f.is_nan() {
                        "NaN"
                    } else if *f > 0.0 {
                        "Infinity"
                    } else {
                        "-Infinity"
                    }
                    .into(),
                )
            },
            Json::Number,
        ),
        Value::Bytes(b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::Array(a) => {
            if depth >= max_depth {
                return Err(());
            }
            Json::Array(
                a.values
                    .iter()
                    .map(|v| any_value(v, depth + 1, max_depth))
                    .collect::<Result<_, _>>()?,
            )
        }
        Value::Kvlist(kv) => {
            if depth >= max_depth {
                return Err(());
            }
            let mut m = Map::new();
            for e in &kv.values {
                let v = match &e.value {
                    Some(v) => any_value(v, depth + 1, max_depth)?,
                    None => Json::Null,
                };
                m.insert(e.key.clone(), v);
            }
            Json::Object(m)
        }
    })
}

/// One ingest payload (a JSON array of events) and the record of each of its elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The JSON array.
    pub bytes: Vec<u8>,
    /// `records[i]`: the record ordinal of element `i`.
    pub records: Vec<usize>,
}

/// The events packed into JSON-array payloads of at most `max_bytes` bytes and `max_events`
/// events each (an event alone over `max_bytes` gets a payload of its own, which the ingest
/// refuses as `oversized`).
pub fn payloads(events: &[OtlpEvent], max_bytes: usize, max_events: usize) -> Vec<Payload> {
    let mut out = Vec::new();
    let mut cur = Payload {
        bytes: vec![b'['],
        records: Vec::new(),
    };
    for e in events {
        let text = &e.json;
        let full = !cur.records.is_empty()
            && (cur.bytes.len() + 1 + text.len() + 1 > max_bytes
                || cur.records.len() >= max_events);
        if full {
            cur.bytes.push(b']');
            out.push(std::mem::replace(
                &mut cur,
                Payload {
                    bytes: vec![b'['],
                    records: Vec::new(),
                },
            ));
        }
        if !cur.records.is_empty() {
            cur.bytes.push(b',');
        }
        cur.bytes.extend_from_slice(text);
        cur.records.push(e.record);
    }
    if !cur.records.is_empty() {
        cur.bytes.push(b']');
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::proto::{
        ArrayValue, InstrumentationScope, KeyValueList, Resource, ResourceLogs, ScopeLogs,
    };

    /// The events of `c`, parsed.
    fn parsed(c: &Conversion) -> Vec<Json> {
        c.events
            .iter()
            .map(|e| serde_json::from_slice(&e.json).unwrap())
            .collect()
    }

    fn s(v: &str) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(Value::String(v.into())),
        })
    }

    fn kv(k: &str, v: Option<AnyValue>) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: v,
        }
    }

    fn nested(levels: usize) -> AnyValue {
        let mut v = AnyValue {
            value: Some(Value::Int(1)),
        };
        for _ in 0..levels {
            v = AnyValue {
                value: Some(Value::Array(ArrayValue { values: vec![v] })),
            };
        }
        v
    }

    fn request(resource: Vec<KeyValue>, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: resource,
                }),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "app.db".into(),
                        version: "1.2".into(),
                    }),
                    log_records: records,
                }],
            }],
        }
    }

    #[test]
    fn a_record_becomes_an_event() {
        let rec = LogRecord {
            time_unix_nano: 1_700_000_001_500_000_000,
            severity_number: 13,
            severity_text: "WARNING".into(),
            body: s("disk low"),
            trace_id: vec![0xab; 16],
            span_id: vec![1, 2, 3, 4, 5, 6, 7, 8],
            attributes: vec![
                kv("user", s("u1")),
                kv(
                    "m",
                    Some(AnyValue {
                        value: Some(Value::Kvlist(KeyValueList {
                            values: vec![kv(
                                "d",
                                Some(AnyValue {
                                    value: Some(Value::Double(f64::INFINITY)),
                                }),
                            )],
                        })),
                    }),
                ),
            ],
            ..Default::default()
        };
        let req = request(
            vec![
                kv("service.name", s("check:out")),
                kv("deployment.environment", s("prod")),
            ],
            vec![rec],
        );
        let c = convert(&req, &OtlpConfig::default(), "local", 5);
        assert_eq!(c.records, 1);
        assert!(c.rejected.is_empty());
        let e = &parsed(&c)[0];
        assert_eq!(e["epoch"], 1_700_000_001);
        assert_eq!(e["type"], "check_out");
        assert_eq!(e["dc"], "prod");
        assert_eq!(e["subtype"], "warning");
        assert_eq!(e["time_unix_nano"], 1_700_000_001_500_000_000u64);
        assert_eq!(e["body"], "disk low");
        assert_eq!(e["severity_number"], 13);
        assert_eq!(e["trace_id"], "ab".repeat(16));
        assert_eq!(e["span_id"], "0102030405060708");
        assert_eq!(e["attributes"]["user"], "u1");
        assert_eq!(e["attributes"]["m"]["d"], "Infinity");
        assert_eq!(e["resource"]["service.name"], "check:out");
        assert_eq!(e["scope"]["name"], "app.db");
    }

    #[test]
    fn fallbacks() {
        let req = request(
            vec![kv("cloud.region", s("eu-west-1"))],
            vec![LogRecord {
                observed_time_unix_nano: 42_000_000_000,
                ..Default::default()
            }],
        );
        let c = convert(&req, &OtlpConfig::default(), "ams1", 5);
        let e = &parsed(&c)[0];
        assert_eq!(e["type"], "otlp");
        assert_eq!(e["dc"], "eu-west-1");
        assert_eq!(e["subtype"], "log");
        assert_eq!(e["epoch"], 42);
        let c = convert(
            &request(vec![], vec![LogRecord::default()]),
            &OtlpConfig::default(),
            "ams1",
            5,
        );
        assert_eq!(parsed(&c)[0]["dc"], "ams1");
        assert_eq!(parsed(&c)[0]["epoch"], 5);
        assert!(parsed(&c)[0].get("resource").is_none());
    }

    #[test]
    fn limits_reject_records() {
        let cfg = OtlpConfig {
            max_records: 3,
            max_attribute_depth: 2,
            ..OtlpConfig::default()
        };
        let deep = LogRecord {
            attributes: vec![kv("x", Some(nested(3)))],
            ..Default::default()
        };
        let ok = LogRecord {
            attributes: vec![kv("x", Some(nested(2)))],
            ..Default::default()
        };
        let req = request(vec![], vec![ok.clone(), deep, ok.clone(), ok.clone(), ok]);
        let c = convert(&req, &cfg, "local", 5);
        assert_eq!(c.records, 5);
        assert_eq!(
            c.events.iter().map(|e| e.record).collect::<Vec<_>>(),
            vec![0, 2]
        );
        let why: Vec<_> = c.rejected.iter().map(|r| (r.record, r.reason)).collect();
        assert_eq!(why, vec![(1, "too_deep"), (3, "too_many"), (4, "too_many")]);
    }

    #[test]
    fn tags_are_sanitised() {
        assert_eq!(sanitise_tag(" a|b:c\n"), Some("a_b_c".into()));
        assert_eq!(sanitise_tag("   "), None);
        let long = "é".repeat(40);
        let t = sanitise_tag(&long).unwrap();
        assert!(t.len() <= MAX_TAG_BYTES && long.starts_with(&t));
    }

    #[test]
    fn payloads_are_packed() {
        let events: Vec<OtlpEvent> = (0..5)
            .map(|i| OtlpEvent {
                record: i * 2,
                dc: "d".into(),
                type_: "t".into(),
                json: serde_json::json!({ "type": "t", "i": i })
                    .to_string()
                    .into_bytes(),
            })
            .collect();
        let one = payloads(&events, 1 << 20, 100);
        assert_eq!(one.len(), 1);
        let all: Vec<Json> = serde_json::from_slice(&one[0].bytes).unwrap();
        assert_eq!(all.len(), 5);
        let small = payloads(&events, 40, 100);
        assert!(small.len() > 1);
        let by_count = payloads(&events, 1 << 20, 2);
        assert_eq!(by_count.len(), 3);
        assert_eq!(by_count[2].records, vec![8]);
        for p in small.iter().chain(&by_count) {
            let v: Vec<Json> = serde_json::from_slice(&p.bytes).unwrap();
            assert_eq!(v.len(), p.records.len());
        }
    }
}
