//! Helpers shared by the codec's integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value as J;

/// The Sereal documents made by other implementations (`testdata/sereal/vectors`, origin in
/// `testdata/README.md`).
pub fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sereal/vectors")
}

mod json_diff;

/// Structural equality of two JSON values as the codec's mapping defines it: objects compare as
/// maps, numbers by value (integers exactly, an integer equals a float of the same value).
/// Returns the path of the first difference.
pub fn json_diff(a: &J, b: &J, path: &str) -> Option<String> {
    json_diff::json_diff_within(a, b, path, 0.0)
}

/// Our decoding of `doc`, in the JSON mapping.
pub fn decode_to_json(doc: &[u8]) -> Result<J, sereal::Error> {
    Ok(sereal::json::to_json_value(&sereal::from_slice(doc)?))
}

/// The body of a document whose references expand exponentially: x0 = [1] tracked (offset 3);
/// x(n+1) = [REFP xn, REFP xn] tracked, `levels` levels (2^levels paths to x0), all in a
/// top-level ARRAY of `levels + 1` items.
pub fn reference_chain_body(levels: usize) -> Vec<u8> {
    let mut body = vec![0x2b, 0x3d, 0xc1, 0x01];
    let mut prev = 3usize;
    for _ in 0..levels {
        let here = body.len() + 1;
        body.push(0xc2);
        for _ in 0..2 {
            body.push(0x29);
            sereal::varint::write(&mut body, prev as u64);
        }
        prev = here;
    }
    body
}

/// The body of a document that copies one 64 KiB string 500k times (32 GB if materialised): a
/// top-level ARRAY of the string and 500 000 COPYs of it.
pub fn copy_amplification_body() -> Vec<u8> {
    let mut body = vec![0x2b];
    sereal::varint::write(&mut body, 500_001);
    let at = body.len() + 1;
    body.push(0x26);
    sereal::varint::write(&mut body, 65536);
    body.resize(body.len() + 65536, b'a');
    for _ in 0..500_000 {
        body.push(0x2f);
        sereal::varint::write(&mut body, at as u64);
    }
    body
}
