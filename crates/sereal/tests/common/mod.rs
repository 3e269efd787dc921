//! Helpers shared by the codec's integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value as J;

/// The Sereal documents made by other implementations (`testdata/sereal/vectors`, origin in
/// `testdata/README.md`).
pub fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sereal/vectors")
}

/// Structural equality of two JSON values as the codec's mapping defines it: objects compare as
/// maps, numbers by value (integers exactly, an integer equals a float of the same value).
/// Returns the path of the first difference.
pub fn json_diff(a: &J, b: &J, path: &str) -> Option<String> {
    match (a, b) {
        (J::Number(x), J::Number(y)) => {
            let same = match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(p), Some(q), _, _) => p == q,
                (_, _, Some(p), Some(q)) => p == q,
                _ => x.as_f64() == y.as_f64(),
            };
            (!same).then(|| format!("{path}: {x} != {y}"))
        }
        (J::Object(x), J::Object(y)) => {
            if x.len() != y.len() {
                let xs: Vec<_> = x.keys().collect();
                let ys: Vec<_> = y.keys().collect();
                return Some(format!("{path}: keys {xs:?} != {ys:?}"));
            }
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => {
                        if let Some(d) = json_diff(v, w, &format!("{path}.{k}")) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{path}: key {k:?} missing on the right")),
                }
            }
            None
        }
        (J::Array(x), J::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path}: array length {} != {}", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (v, w))| json_diff(v, w, &format!("{path}[{i}]")))
        }
        _ => (a != b).then(|| {
            let show = |v: &J| {
                let s = v.to_string();
                if s.len() > 120 {
                    format!(
                        "{}…",
                        &s[..s.char_indices().nth(120).map_or(s.len(), |(i, _)| i)]
                    )
                } else {
                    s
                }
            };
            format!("{path}: {} != {}", show(a), show(b))
        }),
    }
}

/// Our decoding of `doc`, in the JSON mapping.
pub fn decode_to_json(doc: &[u8]) -> Result<J, sereal::Error> {
    Ok(sereal::json::to_json_value(&sereal::from_slice(doc)?))
}

/// Is the Perl reference installed? The tests that need it fail loudly when it is not, since
/// `make test` installs it.
pub fn require_perl_sereal() {
    let ok = std::process::Command::new("perl")
        .args([
            "-MSereal::Encoder",
            "-MSereal::Decoder",
            "-MJSON::XS",
            "-e",
            "1",
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "the Perl Sereal reference is not installed: run `make deps` (apt-get install libsereal-encoder-perl libsereal-decoder-perl libjson-xs-perl)");
}
