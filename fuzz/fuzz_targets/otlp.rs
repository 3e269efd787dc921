//! Any bytes as a `POST /v1/logs` body (protobuf, OTLP/JSON, gzip): decoding returns or
//! errs, never panics; a decoded request converts with every record an event or a rejection
//! once, and its payloads are JSON arrays of tagged events. The same invariants over mutated
//! requests, on stable: `crates/collector/tests/otlp_hostile.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/collector/tests/otlp_invariants/mod.rs"]
mod otlp_invariants;

fuzz_target!(|data: &[u8]| {
    otlp_invariants::check(data);
});
