//! Helpers shared by the blob crate's integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value as J;
use sereal::Value;

/// `n` generated WEB events (sluice-gen), as a vector.
pub fn web_events(seed: u64, n: usize) -> Vec<Value> {
    match sluice_gen::events_array(&sluice_gen::GenConfig::web(seed, n)) {
        Value::Array(v) => v,
        other => panic!("events_array gave {other:?}"),
    }
}

/// `n` generated events of the default mix (WEB, CRON, LB).
pub fn mixed_events(seed: u64, n: usize) -> Vec<Value> {
    sluice_gen::Generator::new(sluice_gen::GenConfig::mixed(seed, n)).collect()
}

/// The JSON mapping of an events array.
pub fn to_json(events: &[Value]) -> J {
    J::Array(events.iter().map(sereal::json::to_json_value).collect())
}

#[path = "../../../sereal/tests/common/json_diff.rs"]
mod json_diff;

/// Structural equality of two JSON values: objects compare as maps, numbers by value
/// (integers exactly, floats to 1e-12 relative). Returns the path of the first difference.
pub fn json_diff(a: &J, b: &J, path: &str) -> Option<String> {
    json_diff::json_diff_within(a, b, path, 1e-12)
}

/// The codec's Perl helpers (Render.pm: exact JSON rendering of decoded Perl data, and exact
/// JSON decoding for feeding the encoder).
pub fn perl_lib() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sereal/tests/reference")
}

/// Runs `perl -I<perl_lib> -e script args…`; panics with its stderr on failure; returns stdout.
pub fn run_perl(script: &str, args: &[&std::ffi::OsStr]) -> Vec<u8> {
    sluice_test_support::perl::run_perl(Some(&perl_lib()), script, args, b"")
}

/// Panics (with the first difference, not a dump) unless `got` and `want` are the same events in
/// the JSON mapping (ASCII strings come back as binary strings, which the mapping equates).
pub fn assert_same_events(got: &[Value], want: &[Value], ctx: &str) {
    if let Some(d) = json_diff(&to_json(got), &to_json(want), "$") {
        panic!("{ctx}: events differ: {d}");
    }
}
