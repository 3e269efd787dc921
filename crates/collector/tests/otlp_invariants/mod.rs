//! What must hold for any bytes given to `POST /v1/logs` as a body: decoding (protobuf, JSON,
//! gzip) returns a request or an error, never panics; a decoded request converts without
//! panicking, every record accounted for once (an event or a rejection); the events' payloads
//! are JSON arrays whose elements are objects with an integer `epoch` and `dc` / `type` /
//! `subtype` that pass the tag rule, one element per record they name. Shared by the stable
//! test (`tests/otlp_hostile.rs`) and the fuzz target (`fuzz/fuzz_targets/otlp.rs`).

#![allow(dead_code)]

use sluice_collector::otlp::{self, Encoding, OtlpConfig};

/// Checks `data` as a protobuf body, a JSON body and a gzip body; returns how many of those
/// decoded into a request (and were converted).
pub fn check(data: &[u8]) -> usize {
    let mut decoded = 0;
    let cfg = OtlpConfig {
        max_records: 64,
        max_attribute_depth: 4,
        ..OtlpConfig::default()
    };
    for enc in [Encoding::Protobuf, Encoding::Json] {
        if let Ok(req) = otlp::decode(data, enc) {
            converted(&req, &cfg);
            decoded += 1;
        }
    }
    match otlp::gunzip(data, 1 << 16) {
        Ok(inner) => {
            assert!(inner.len() <= 1 << 16);
            if let Ok(req) = otlp::decode(&inner, Encoding::Protobuf) {
                converted(&req, &cfg);
                decoded += 1;
            }
        }
        Err(otlp::BodyError::TooLarge(n)) => assert_eq!(n, 1 << 16),
        Err(otlp::BodyError::Unreadable(_)) => {}
    }
    decoded
}

fn converted(req: &otlp::proto::ExportLogsServiceRequest, cfg: &OtlpConfig) {
    let c = otlp::convert(req, cfg, "here", 1_700_000_000);
    assert_eq!(
        c.events.len() + c.rejected.len(),
        c.records,
        "every record once"
    );
    let mut seen: Vec<usize> = c
        .events
        .iter()
        .map(|e| e.record)
        .chain(c.rejected.iter().map(|r| r.record))
        .collect();
    seen.sort_unstable();
    assert!(
        seen.iter().enumerate().all(|(i, &r)| i == r),
        "ordinals 0..records"
    );
    let payloads = otlp::payloads(&c.events, 4096, 8);
    let mut total = 0;
    for p in &payloads {
        let events: Vec<serde_json::Value> =
            serde_json::from_slice(&p.bytes).expect("a payload is a JSON array");
        assert_eq!(events.len(), p.records.len());
        assert!(!events.is_empty() && events.len() <= 8);
        assert!(events.len() == 1 || p.bytes.len() <= 4096);
        for e in &events {
            assert!(e["epoch"].is_i64(), "{e}");
            for (tag, empty_ok) in [("dc", false), ("type", false), ("subtype", true)] {
                let v = e[tag].as_str().expect("a string tag");
                assert!(
                    sluice_blob::key::check_tag(tag, v, empty_ok).is_ok(),
                    "{tag} {v:?}"
                );
            }
        }
        total += events.len();
    }
    assert_eq!(total, c.events.len());
}
