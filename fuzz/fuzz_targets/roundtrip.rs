//! Whatever decodes must re-encode (every option set) to a document that decodes to the same
//! JSON rendering.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = sereal::Limits {
        max_decompressed_bytes: 16 << 20,
        ..Default::default()
    };
    let Ok(value) = sereal::Decoder::with_limits(limits).decode(data) else {
        return;
    };
    let json = sereal::json::to_json_value(&value);
    for opts in [
        sereal::EncoderOptions::default(),
        sereal::EncoderOptions::original_events(),
        sereal::EncoderOptions {
            canonical: true,
            dedupe_strings: true,
            compression: sereal::Compression::Zstd { level: 1 },
            compress_threshold: 0,
            ..Default::default()
        },
    ] {
        let doc = sereal::to_vec(&value, &opts).expect("encoding a decoded value cannot fail");
        let back = sereal::from_slice(&doc).expect("our own output decodes");
        assert_eq!(sereal::json::to_json_value(&back), json);
    }
});
