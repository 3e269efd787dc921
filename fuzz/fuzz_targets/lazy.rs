//! Any bytes: opening, iterating and selecting paths lazily must return, never panic; and on a
//! document that decodes, every selected value equals the same path evaluated on the full tree.
#![no_main]

use libfuzzer_sys::fuzz_target;

const PATHS: &[&str] = &["a", "a.b", "[0]", "[*]", "[*].a", "a[*].b", "[-1]", "x.y.z"];

fuzz_target!(|data: &[u8]| {
    let limits = sereal::Limits {
        max_decompressed_bytes: 16 << 20,
        ..Default::default()
    };
    let full = sereal::Decoder::with_limits(limits.clone())
        .decode(data)
        .ok();
    let mut scratch = Vec::new();
    let Ok(doc) = sereal::LazyDoc::open(data, &limits, &mut scratch) else {
        return;
    };
    let Ok(root) = doc.root() else { return };
    let paths: Vec<sereal::Path> = PATHS
        .iter()
        .map(|p| sereal::Path::parse(p).expect("valid path"))
        .collect();
    if let Ok(found) = root.select(&paths) {
        if let Some(full) = &full {
            for (path, values) in paths.iter().zip(&found) {
                let expected: Vec<serde_json::Value> = path
                    .eval(full)
                    .into_iter()
                    .map(sereal::json::to_json_value)
                    .collect();
                let got: Vec<serde_json::Value> =
                    values.iter().map(sereal::json::to_json_value).collect();
                assert_eq!(got, expected, "path {path}");
            }
        }
    }
    // The one-pass selection (general walk and key plan) must agree with next() + select_items.
    for ps in [&paths[..], &paths[..2], &paths[7..]] {
        let mut sel = sereal::lazy::Selector::new(ps.to_vec());
        let (Ok(mut fused), Ok(plain)) = (doc.items(), doc.items()) else {
            break;
        };
        let mut handles = Vec::new();
        for item in plain.take(64) {
            let Some(got) = sel.next_selected(&mut fused, &mut handles) else {
                panic!("fused pass ended early")
            };
            let (Ok(item), Ok(got)) = (item, got) else {
                break;
            };
            assert_eq!((got.start(), got.end()), (item.start(), item.end()));
            if let Ok(want) = item.select_items(ps) {
                let mut dec = doc.item_decoder();
                for (g, w) in handles.iter().zip(&want) {
                    assert_eq!(g.len(), w.len());
                    for (a, b) in g.iter().zip(w) {
                        assert_eq!((a.start(), a.end()), (b.start(), b.end()));
                        let _ = dec.decode(a);
                    }
                }
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
