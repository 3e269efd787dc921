//! Blobs stay readable across profile changes: a `default` blob written before the bytes-per-event
//! measurements (docs/decisions.md, "Bytes per event"), and blobs written with every setting those
//! measurements compared (zstd levels, string de-duplication off, canonical key order). The
//! reader decodes any valid Sereal, so a later change of the profile must not need a new reader.

mod common;

use sereal::header::Encoding;
use sereal::{Compression, EncoderOptions, Limits, Value};
use sluice_blob::{with_trailer, Blob};

/// A `default` profile blob (protocol 5, zstd 3, dedupe) of three small events, as the
/// builder wrote it on 2026-11-22, before the profile was re-measured. Its Sereal part must keep
/// decoding to [`PINNED_JSON`], whatever the profile writes today.
const PINNED_HEX: &[&str] = &[
    "3df3726c4500e20228b52ffd609200c50a0016554f3a304ba60d83f1d0819de6ba29424a8e87283a644686dd324a6411",
    "4969106d6fa132875828aef7c64d13c4645410144ad1bfa33ea1e3c337ad72073e003f003e00030870ad71b3771d67fc",
    "eeac73bfb12579a8cfce3f9ceef81ad9baf383709f5e15894434c42f26c3d9ac47ea15e37ad6ad5205850d1d4c126f9d",
    "67ad47417be66f3eb80c95ac996617deb7d5f9b3dec882e87d6c6bef9e5c95f48e6a3c7f0ad4ac7d9687ee812b726117",
    "04c35ea617061036b8d668b596061a0e086a27fc13217c44fd249e7ea1018324bdf7fa1340081bf42d1b081b9bcf349f",
    "88202bcfcd3db747ddf3bbcfede76ceff0970cbc7c4c86b30578001ff18977107b1071f50c168cab67a8649cf01926a6",
    "be82050f2c091f148e887a493cbd00d243b00bbb28916b42c140fa4d0b4ab1252b8fbdc712538fb7fc5dc8d05938f0f6",
    "4d1b0800e022200cec0561fe0e0b71990c9105ca789941fb55c83d63686b4781aeb702f43b6362bb99677092bc730cf1",
    "7ec3",
];

/// The events of [`PINNED_HEX`] in the JSON mapping.
const PINNED_JSON: &str = r#"[{"epoch":1700000000,"dc":"ams1","type":"WEB","subtype":"www","path":"/index.html","status":200,"timings":{"total_ms":85.123,"db_ms":12.5},"ip":"10.1.2.3","user_id":null,"is_bot":false,"lang":"en-gb","experiments":[{"id":4001,"variant":1}]},{"epoch":1700000000,"dc":"ams1","type":"WEB","subtype":"www","path":"/hotel/nl/grand-canal.html","status":404,"timings":{"total_ms":3.25,"db_ms":0.5},"ip":"10.1.2.3","user_id":123456,"is_bot":true,"lang":"en-gb","search":"Zürich","experiments":[]},{"epoch":1700000000,"dc":"ams1","type":"WEB","subtype":"www","path":"/index.html","status":200,"timings":{"total_ms":1000.0,"db_ms":-0.0},"ip":"185.28.1.10","user_id":-7,"is_bot":false,"lang":"東京","experiments":[{"id":4001,"variant":0},{"id":4017,"variant":2}]}]"#;

fn unhex(parts: &[&str]) -> Vec<u8> {
    let s: String = parts.concat();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("the pinned blob is valid hex"))
        .collect()
}

#[test]
fn a_default_blob_from_before_the_measurements_still_reads() {
    let bytes = unhex(PINNED_HEX);
    let blob = Blob::parse(&bytes).expect("the pinned blob verifies");
    let h = blob.header().expect("header");
    assert_eq!((h.version, h.encoding), (5, Encoding::Zstd));
    let events = blob
        .decode(&Limits::default())
        .expect("the pinned blob decodes");
    assert_eq!(
        sereal::json::to_string(&Value::Array(events.clone())),
        PINNED_JSON
    );
    // The lazy path (select/where) reads it too.
    let mut scratch = Vec::new();
    let doc = blob
        .lazy(&Limits::default(), &mut scratch)
        .expect("lazy open");
    let mut n = 0;
    for item in doc.items().expect("items") {
        item.expect("lazy item");
        n += 1;
    }
    assert_eq!(n, events.len());
}

#[test]
fn every_measured_setting_reads_back() {
    let events = common::web_events(5, 300);
    let array = Value::Array(events.clone());
    for level in [-5, 1, 3, 6, 9, 19] {
        for dedupe_strings in [true, false] {
            for canonical in [false, true] {
                let opts = EncoderOptions {
                    protocol: 5,
                    compression: Compression::Zstd { level },
                    compress_threshold: 0,
                    dedupe_strings,
                    canonical,
                    ..EncoderOptions::default()
                };
                let what = format!("zstd {level}, dedupe {dedupe_strings}, canonical {canonical}");
                let doc = sereal::to_vec(&array, &opts).expect("encodes");
                let stored = with_trailer(&doc);
                let blob = Blob::parse(&stored).expect("verifies");
                assert_eq!(
                    blob.header().expect("header").encoding,
                    Encoding::Zstd,
                    "{what}"
                );
                let back = blob.decode(&Limits::default()).expect("decodes");
                // Canonical order changes key order only: the comparison treats objects as maps.
                common::assert_same_events(&back, &events, &what);
            }
        }
    }
}
