//! Hostile bodies for `POST /v1/logs` on stable (the fuzz target `otlp` runs the same
//! invariants, `otlp_invariants`): mutations of a valid protobuf and a valid OTLP/JSON request
//! (bit flips, truncations, inserted bytes, spliced tails), nesting far past the decoders'
//! limits, gzip bombs and garbage.

mod otlp_invariants;

use prost::Message;
use sluice_collector::otlp::proto::*;
use sluice_collector::otlp::{self, Encoding};

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

fn seed_request() -> ExportLogsServiceRequest {
    let records = (0..5)
        .map(|i| LogRecord {
            time_unix_nano: 1_700_000_000_000_000_000 + i,
            severity_number: 9,
            severity_text: "Warn:ing|x".into(),
            body: s("hello"),
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            attributes: vec![
                kv("a", s("b")),
                kv(
                    "m",
                    Some(AnyValue {
                        value: Some(Value::Kvlist(KeyValueList {
                            values: vec![kv("x", s("y"))],
                        })),
                    }),
                ),
            ],
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("svc|1")), kv("cloud.region", s(""))],
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "n".into(),
                    version: "v".into(),
                }),
                log_records: records,
            }],
        }],
    }
}

const SEED_JSON: &str = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},"scopeLogs":[{"scope":{"name":"s"},"logRecords":[{"timeUnixNano":"1700000000000000000","severityNumber":13,"severityText":"WARN","traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","body":{"arrayValue":{"values":[{"doubleValue":1.5},{"bytesValue":"AAE="},{"boolValue":true}]}},"attributes":[{"key":"k","value":{"kvlistValue":{"values":[{"key":"n","value":{"intValue":"-7"}}]}}}]}]}]}]}"#;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(4) {
            0 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 => d.truncate(rng.below(d.len() + 1)),
            2 => {
                let i = rng.below(d.len() + 1);
                d.insert(i, rng.next() as u8);
            }
            _ if !d.is_empty() => {
                let i = rng.below(d.len());
                let j = rng.below(seed.len());
                d.truncate(i);
                d.extend_from_slice(&seed[j..]);
            }
            _ => {}
        }
    }
    d
}

#[test]
fn mutated_bodies_never_panic() {
    let proto = seed_request().encode_to_vec();
    assert_eq!(otlp_invariants::check(&proto), 1);
    assert_eq!(otlp_invariants::check(SEED_JSON.as_bytes()), 1);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut from_proto, mut from_json) = (0, 0);
    for _ in 0..20_000 {
        from_proto += otlp_invariants::check(&mutate(&mut rng, &proto));
        from_json += otlp_invariants::check(&mutate(&mut rng, SEED_JSON.as_bytes()));
    }
    // Enough mutants still decode for the conversion to be exercised on odd requests.
    assert!(
        from_proto > 500 && from_json > 500,
        "{from_proto} {from_json}"
    );
}

#[test]
fn nesting_past_the_decoders_limits_is_an_error() {
    // 1,000 levels of arrays: prost's recursion limit (100) refuses it, no stack overflow.
    let mut v = AnyValue {
        value: Some(Value::Int(1)),
    };
    for _ in 0..1_000 {
        v = AnyValue {
            value: Some(Value::Array(ArrayValue { values: vec![v] })),
        };
    }
    let mut req = seed_request();
    req.resource_logs[0].scope_logs[0].log_records[0].body = Some(v);
    // Encoding is not recursion-limited: the bytes are what a hostile client would send.
    let bytes = req.encode_to_vec();
    assert!(otlp::decode(&bytes, Encoding::Protobuf).is_err());
    // The same in JSON: serde_json's recursion limit (128).
    let deep = format!(
        r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{"body":{}1{}}}]}}]}}]}}"#,
        r#"{"arrayValue":{"values":["#.repeat(10_000),
        "]}}".repeat(10_000)
    );
    assert!(otlp::decode(deep.as_bytes(), Encoding::Json).is_err());
}

#[test]
fn gzip_bombs_stop_at_the_limit() {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&vec![0u8; 64 << 20]).unwrap();
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 128 << 10);
    assert_eq!(
        otlp::gunzip(&bomb, 8 << 20),
        Err(otlp::BodyError::TooLarge(8 << 20))
    );
    otlp_invariants::check(&bomb);
}
