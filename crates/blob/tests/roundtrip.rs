//! Build → parse → decode, for both profiles, one blob and many chunks.

mod common;

use common::{mixed_events, web_events};
use sereal::header::Encoding;
use sereal::{Limits, Value};
use sluice_blob::{
    Blob, BlobBuilder, BlobError, BlobOptions, Profile, DEFAULT_CHUNK_LIMIT, TRAILER_LEN,
};

fn profiles() -> [Profile; 3] {
    [
        Profile::Original,
        Profile::default(),
        Profile::Default { zstd_level: 19 },
    ]
}

/// Every chunk verifies and decodes alone; together they are `events`, in order.
fn check_chunks(blobs: &[Blob], events: &[Value], limit: usize) {
    let mut all = Vec::new();
    for (i, b) in blobs.iter().enumerate() {
        assert_eq!(b.index() as usize, i, "chunks are numbered from 0");
        assert!(
            b.sereal_part().len() <= limit,
            "chunk {i}: {} > {limit}",
            b.sereal_part().len()
        );
        assert_eq!(b.len(), b.sereal_part().len() + TRAILER_LEN);
        let parsed = Blob::parse(b.as_bytes()).expect("chunk verifies");
        assert_eq!(parsed.sereal_part(), b.sereal_part());
        assert_eq!(parsed.checksum(), sluice_blob::sha1(b.sereal_part()));
        let part = parsed
            .decode(&Limits::default())
            .expect("chunk decodes alone");
        assert!(!part.is_empty(), "chunk {i} is empty");
        all.extend(part);
    }
    assert_eq!(all.len(), events.len());
    common::assert_same_events(&all, events, "chunks");
}

#[test]
fn small_blob_round_trips_in_both_profiles() {
    let events = web_events(1, 200);
    for profile in profiles() {
        let mut b = BlobBuilder::with_profile(profile).unwrap();
        let blobs = b.build(&events).unwrap();
        assert_eq!(blobs.len(), 1, "{profile}");
        let blob = Blob::parse(blobs[0].as_bytes()).unwrap();
        let h = blob.header().unwrap();
        match profile {
            Profile::Original => {
                assert_eq!(h.version, 3);
                assert_eq!(h.encoding, Encoding::Zlib);
            }
            Profile::Default { .. } => {
                assert_eq!(h.version, 5);
                assert_eq!(h.encoding, Encoding::Zstd);
            }
        }
        common::assert_same_events(
            &blob.decode(&Limits::default()).unwrap(),
            &events,
            profile.name(),
        );
        let mut dec = sereal::Decoder::new();
        common::assert_same_events(
            &blob.decode_with(&mut dec).unwrap(),
            &events,
            profile.name(),
        );
        // The builder is reusable and deterministic.
        assert_eq!(b.build(&events).unwrap(), blobs);
        assert_eq!(b.build_array(&Value::Array(events.clone())).unwrap(), blobs);
    }
}

#[test]
fn mixed_events_round_trip() {
    let events = mixed_events(7, 3_000);
    for profile in profiles() {
        let mut b = BlobBuilder::with_profile(profile).unwrap();
        let blobs = b.build(&events).unwrap();
        check_chunks(&blobs, &events, DEFAULT_CHUNK_LIMIT);
    }
}

#[test]
fn default_profile_compresses_even_tiny_blobs_original_keeps_the_threshold() {
    // Two small events: below the reference's 1024-byte threshold.
    let events = web_events(3, 2);
    let orig = BlobBuilder::with_profile(Profile::Original)
        .unwrap()
        .build(&events)
        .unwrap();
    let h = Blob::parse(orig[0].as_bytes()).unwrap().header().unwrap();
    let raw = sereal::de::body_bytes(orig[0].sereal_part(), &Limits::default()).unwrap();
    if raw.len() < 1024 {
        assert_eq!(
            h.encoding,
            Encoding::Raw,
            "original follows the reference's threshold"
        );
    }
    let def = BlobBuilder::with_profile(Profile::default())
        .unwrap()
        .build(&events)
        .unwrap();
    let h = Blob::parse(def[0].as_bytes()).unwrap().header().unwrap();
    assert_eq!(
        h.encoding,
        Encoding::Zstd,
        "default compresses whenever that helps"
    );
}

#[test]
fn over_500_kb_comes_back_whole_from_several_chunks() {
    let events = web_events(42, 60_000);
    for profile in [Profile::Original, Profile::default()] {
        let mut b = BlobBuilder::with_profile(profile).unwrap();
        let blobs = b.build(&events).unwrap();
        let total: usize = blobs.iter().map(|b| b.len()).sum();
        eprintln!(
            "{profile}: 60k events -> {} chunks, {total} bytes",
            blobs.len()
        );
        assert!(
            blobs.len() >= 3,
            "{profile}: {} chunks of {total} bytes",
            blobs.len()
        );
        check_chunks(&blobs, &events, DEFAULT_CHUNK_LIMIT);
        // Chunks are filled: all but the last are at least half the limit.
        for c in &blobs[..blobs.len() - 1] {
            assert!(
                c.sereal_part().len() > DEFAULT_CHUNK_LIMIT / 2,
                "{profile}: underfull chunk {}",
                c.len()
            );
        }
        // Each chunk has the profile's header.
        for c in &blobs {
            let h = Blob::parse(c.as_bytes()).unwrap().header().unwrap();
            assert_eq!(h.version, if profile == Profile::Original { 3 } else { 5 });
        }
    }
}

#[test]
fn small_chunk_limit_and_split_threads() {
    let events = web_events(5, 2_000);
    for profile in profiles() {
        for threads in [1, 0] {
            let limit = 20_000;
            let opts = BlobOptions {
                profile,
                chunk_limit: limit,
                split_threads: threads,
                ..BlobOptions::default()
            };
            let blobs = BlobBuilder::new(opts).unwrap().build(&events).unwrap();
            assert!(blobs.len() > 3, "{profile}: {} chunks", blobs.len());
            check_chunks(&blobs, &events, limit);
        }
    }
}

#[test]
fn lazy_select_on_a_chunk() {
    let events = web_events(9, 500);
    let blobs = BlobBuilder::new(BlobOptions {
        chunk_limit: 8_000,
        ..BlobOptions::default()
    })
    .unwrap()
    .build(&events)
    .unwrap();
    assert!(blobs.len() > 1);
    let mut selector = sereal::lazy::Selector::parse(&["status", "dc"]).unwrap();
    let mut scratch = Vec::new();
    let mut seen = 0;
    for b in &blobs {
        let blob = Blob::parse(b.as_bytes()).unwrap();
        let doc = blob.lazy(&Limits::default(), &mut scratch).unwrap();
        for item in doc.items().unwrap() {
            let item = item.unwrap();
            let got = selector.select(&item).unwrap();
            let event = &events[seen];
            assert_eq!(got[0], vec![event.get("status").unwrap().clone()]);
            assert_eq!(got[1][0].as_str(), event.get("dc").unwrap().as_str());
            seen += 1;
        }
    }
    assert_eq!(seen, events.len());
}

#[test]
fn oversized_event_policy() {
    // One event far bigger than the limit (incompressible-ish text).
    let mut big = String::new();
    let mut x: u64 = 1;
    while big.len() < 40_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        big.push_str(&format!("{:x}", x >> 11));
    }
    let mut events = web_events(11, 300);
    events.insert(
        150,
        sereal::json::from_json_slice(format!(r#"{{"blob":"{big}"}}"#).as_bytes()).unwrap(),
    );
    let limit = 10_000;
    // Default: the big event becomes a chunk of its own, over the limit; nothing is lost.
    let blobs = BlobBuilder::new(BlobOptions {
        chunk_limit: limit,
        ..BlobOptions::default()
    })
    .unwrap()
    .build(&events)
    .unwrap();
    let over: Vec<_> = blobs
        .iter()
        .filter(|b| b.sereal_part().len() > limit)
        .collect();
    assert_eq!(over.len(), 1);
    assert_eq!(
        Blob::parse(over[0].as_bytes())
            .unwrap()
            .decode(&Limits::default())
            .unwrap()
            .len(),
        1
    );
    check_chunks(&blobs, &events, usize::MAX);
    // Strict: an error, not a panic.
    let strict = BlobOptions {
        chunk_limit: limit,
        allow_oversized_events: false,
        ..BlobOptions::default()
    };
    let err = BlobBuilder::new(strict)
        .unwrap()
        .build(&events)
        .unwrap_err();
    assert!(
        matches!(err, BlobError::Codec(ref e) if e.is_limit()),
        "{err}"
    );
}

#[test]
fn canonical_option_gives_order_independent_bytes() {
    let events = web_events(13, 100);
    let reversed: Vec<Value> = events
        .iter()
        .map(|e| match e {
            Value::Hash(h) => Value::Hash(h.iter().rev().cloned().collect()),
            other => other.clone(),
        })
        .collect();
    for profile in profiles() {
        let opts = BlobOptions {
            profile,
            canonical: true,
            ..BlobOptions::default()
        };
        let mut b = BlobBuilder::new(opts).unwrap();
        assert_eq!(b.build(&events).unwrap(), b.build(&reversed).unwrap());
    }
}

#[test]
fn json_lines_and_empty_input() {
    let cfg = sluice_gen::GenConfig::web(17, 300);
    let text = sluice_gen::events_json_lines(&cfg);
    let events = common::web_events(17, 300);
    let mut b = BlobBuilder::with_profile(Profile::Original).unwrap();
    let from_lines = b.build_from_json_lines(text.as_bytes()).unwrap();
    let got = Blob::parse(from_lines[0].as_bytes())
        .unwrap()
        .decode(&Limits::default())
        .unwrap();
    common::assert_same_events(&got, &events, "json lines");
    let err = b
        .build_from_json_lines(b"{\"a\":1}\n\n{oops\n")
        .unwrap_err();
    assert!(matches!(err, BlobError::Json { line: 3, .. }), "{err}");
    // No events: one valid blob of an empty array.
    let empty = b.build(&[]).unwrap();
    assert_eq!(empty.len(), 1);
    assert!(Blob::parse(empty[0].as_bytes())
        .unwrap()
        .decode(&Limits::default())
        .unwrap()
        .is_empty());
}

#[test]
fn bad_inputs_and_options_are_typed_errors() {
    let mut b = BlobBuilder::with_profile(Profile::default()).unwrap();
    let err = b.build(&[Value::Hash(vec![]), Value::Int(3)]).unwrap_err();
    assert!(
        matches!(err, BlobError::NotAnEvent { index: 1, .. }),
        "{err}"
    );
    let err = b.build_array(&Value::Int(3)).unwrap_err();
    assert!(matches!(err, BlobError::NotAnArray { .. }), "{err}");
    // Nesting deeper than the encoder allows.
    let mut deep = Value::Hash(vec![]);
    for _ in 0..600 {
        deep = Value::Hash(vec![("k".into(), deep)]);
    }
    assert!(matches!(b.build(&[deep]).unwrap_err(), BlobError::Codec(_)));
    for bad in [
        BlobOptions {
            chunk_limit: 10,
            ..BlobOptions::default()
        },
        BlobOptions {
            profile: Profile::Default { zstd_level: 23 },
            ..BlobOptions::default()
        },
        BlobOptions {
            profile: Profile::Default { zstd_level: 0 },
            ..BlobOptions::default()
        },
    ] {
        assert!(matches!(
            BlobBuilder::new(bad).unwrap_err(),
            BlobError::BadOption { .. }
        ));
    }
    // A valid trailer over something that is not an events array.
    let doc = sereal::to_vec(&Value::Int(5), &sereal::EncoderOptions::default()).unwrap();
    let blob = sluice_blob::with_trailer(&doc);
    let err = Blob::parse(&blob)
        .unwrap()
        .decode(&Limits::default())
        .unwrap_err();
    assert!(matches!(err, BlobError::NotAnArray { .. }), "{err}");
    let blob = sluice_blob::with_trailer(b"definitely not sereal");
    let err = Blob::parse(&blob)
        .unwrap()
        .decode(&Limits::default())
        .unwrap_err();
    assert!(matches!(err, BlobError::Codec(_)), "{err}");
}

#[test]
fn profile_names() {
    assert_eq!("original".parse::<Profile>().unwrap(), Profile::Original);
    assert_eq!(
        "default".parse::<Profile>().unwrap(),
        Profile::Default { zstd_level: 2 }
    );
    assert_eq!(
        "default:19".parse::<Profile>().unwrap(),
        Profile::Default { zstd_level: 19 }
    );
    for bad in ["", "Original", "default:", "default:99", "zstd"] {
        assert!(
            matches!(bad.parse::<Profile>(), Err(BlobError::BadOption { .. })),
            "{bad}"
        );
    }
    let o = Profile::Original.encoder_options();
    assert_eq!(
        (
            o.protocol,
            o.compression,
            o.compress_threshold,
            o.dedupe_strings
        ),
        (3, sereal::Compression::Zlib { level: 6 }, 1024, true)
    );
    let d = Profile::default().encoder_options();
    assert_eq!(
        (
            d.protocol,
            d.compression,
            d.compress_threshold,
            d.dedupe_strings
        ),
        (5, sereal::Compression::Zstd { level: 2 }, 0, true)
    );
}
