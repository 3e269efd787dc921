//! Any bytes: opening, iterating and selecting paths lazily must return, never panic; and on a
//! document that decodes, every selected value equals the same path evaluated on the full tree.
#![no_main]

use libfuzzer_sys::fuzz_target;

const PATHS: &[&str] = &["a", "a.b", "[0]", "[*]", "[*].a", "a[*].b", "[-1]", "x.y.z"];

fuzz_target!(|data: &[u8]| {
    let limits = sereal::Limits { max_decompressed_bytes: 16 << 20, ..Default::default() };
    let full = sereal::Decoder::with_limits(limits.clone()).decode(data).ok();
    let mut scratch = Vec::new();
    let Ok(doc) = sereal::LazyDoc::open(data, &limits, &mut scratch) else { return };
    let Ok(root) = doc.root() else { return };
    let paths: Vec<sereal::Path> = PATHS.iter().map(|p| sereal::Path::parse(p).expect("valid path")).collect();
    if let Ok(found) = root.select(&paths) {
        if let Some(full) = &full {
            for (path, values) in paths.iter().zip(&found) {
                let expected: Vec<serde_json::Value> = path.eval(full).into_iter().map(sereal::json::to_json_value).collect();
                let got: Vec<serde_json::Value> = values.iter().map(sereal::json::to_json_value).collect();
                assert_eq!(got, expected, "path {path}");
            }
        }
    }
    if let Ok(Some(items)) = root.elements() {
        for item in items.take(64) {
            let Ok(item) = item else { break };
            let _ = item.decode();
            let _ = item.get(&paths[1]);
        }
    }
});
