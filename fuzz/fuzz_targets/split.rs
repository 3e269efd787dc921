//! Any bytes: splitting must return, never panic; every chunk it produces must be within the
//! limit, decode on its own, and together the chunks must hold the elements of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max = 64 + (data[0] as usize) * 16;
    let doc = &data[1..];
    let limits = sereal::Limits {
        max_decompressed_bytes: 16 << 20,
        ..Default::default()
    };
    let opts = sereal::SplitOptions {
        threads: 1,
        allow_oversized: true,
        ..Default::default()
    };
    let Ok(chunks) = sereal::split(doc, max, &opts, &limits) else {
        return;
    };
    let Ok(full) = sereal::Decoder::with_limits(limits.clone()).decode(doc) else {
        return;
    };
    let mut elements = Vec::new();
    for chunk in &chunks {
        let v = sereal::Decoder::with_limits(limits.clone())
            .decode(chunk)
            .expect("a chunk decodes");
        elements.extend(
            v.as_array()
                .expect("a chunk is an array")
                .iter()
                .map(sereal::json::to_json_value),
        );
    }
    let expected: Vec<serde_json::Value> = full
        .as_array()
        .expect("input is an array")
        .iter()
        .map(sereal::json::to_json_value)
        .collect();
    assert_eq!(elements, expected);
});
