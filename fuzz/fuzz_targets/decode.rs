//! Any bytes: decoding (and dumping) must return, never panic or overflow the stack.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = sereal::Limits {
        max_decompressed_bytes: 16 << 20,
        ..Default::default()
    };
    let mut decoder = sereal::Decoder::with_limits(limits.clone());
    let _ = decoder.decode_document(data);
    let _ = sereal::dump::dump(data, &limits);
});
