//! Structural comparison of JSON values for the codec's and the blob crate's tests (the blob
//! tests include this file with `#[path]`).

use serde_json::Value as J;

/// Structural equality of two JSON values: objects compare as maps, numbers by value (integers
/// exactly, an integer equals a float of the same value, floats to `rel_tol` relative).
/// Returns the path of the first difference.
pub fn json_diff_within(a: &J, b: &J, path: &str, rel_tol: f64) -> Option<String> {
    match (a, b) {
        (J::Number(x), J::Number(y)) => {
            let same = match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(p), Some(q), _, _) => p == q,
                (_, _, Some(p), Some(q)) => p == q,
                _ => {
                    let (p, q) = (
                        x.as_f64().unwrap_or(f64::NAN),
                        y.as_f64().unwrap_or(f64::NAN),
                    );
                    p == q || (p - q).abs() <= rel_tol * p.abs().max(q.abs())
                }
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
                        if let Some(d) = json_diff_within(v, w, &format!("{path}.{k}"), rel_tol) {
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
                .find_map(|(i, (v, w))| json_diff_within(v, w, &format!("{path}[{i}]"), rel_tol))
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
