//! Damaged blobs: every change is caught by the trailer, every prefix is an error, nothing panics.

mod common;

use sereal::Limits;
use sluice_blob::{Blob, BlobBuilder, BlobError, BlobOptions, Profile, TRAILER_LEN};

fn sample_blobs() -> Vec<(String, Vec<u8>)> {
    let events = common::web_events(61, 40);
    let mut out = Vec::new();
    for profile in [Profile::Original, Profile::default()] {
        let blobs = BlobBuilder::with_profile(profile)
            .unwrap()
            .build(&events)
            .unwrap();
        out.push((profile.to_string(), blobs[0].as_bytes().to_vec()));
    }
    // An uncompressed one too (tiny, under the original threshold).
    let tiny = BlobBuilder::with_profile(Profile::Original)
        .unwrap()
        .build(&common::web_events(62, 1))
        .unwrap();
    out.push(("tiny".into(), tiny[0].as_bytes().to_vec()));
    out
}

#[test]
fn any_flipped_byte_is_detected() {
    for (name, blob) in sample_blobs() {
        assert!(Blob::parse(&blob).is_ok());
        let sereal_len = blob.len() - TRAILER_LEN;
        for i in 0..blob.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut bad = blob.clone();
                bad[i] ^= mask;
                match Blob::parse(&bad) {
                    Err(BlobError::Corrupted { reason }) => {
                        assert!(i < sereal_len || i >= sereal_len + 4, "{name}@{i}");
                        assert!(reason.contains("SHA-1"), "{reason}");
                    }
                    Err(BlobError::MissingTrailer { .. }) => {
                        assert!((sereal_len..sereal_len + 4).contains(&i), "{name}@{i}")
                    }
                    other => panic!("{name}: byte {i} ^ {mask:#x}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn every_prefix_and_truncated_trailer_is_an_error() {
    for (name, blob) in sample_blobs() {
        for n in 0..blob.len() {
            let err = Blob::parse(&blob[..n])
                .expect_err(&format!("{name}: prefix of {n} bytes accepted"));
            if n < TRAILER_LEN {
                assert!(
                    matches!(err, BlobError::Truncated { len } if len == n),
                    "{name}/{n}: {err}"
                );
            }
            // Display never panics and says something.
            assert!(!err.to_string().is_empty());
        }
        // The Sereal part alone (trailer dropped) is not a blob.
        assert!(Blob::parse(&blob[..blob.len() - TRAILER_LEN]).is_err());
        // Trailer cut short by one byte, or a byte appended.
        assert!(Blob::parse(&blob[..blob.len() - 1]).is_err());
        let mut longer = blob.clone();
        longer.push(0);
        assert!(Blob::parse(&longer).is_err());
    }
    assert!(matches!(
        Blob::parse(b""),
        Err(BlobError::Truncated { len: 0 })
    ));
    assert!(matches!(
        Blob::parse(&[0u8; 24]),
        Err(BlobError::MissingTrailer { len: 24 })
    ));
}

/// Garbage inside a *valid* trailer (someone re-checksummed damaged data, or a writer bug):
/// decoding and lazy reading return errors or data, never panic.
#[test]
fn damaged_sereal_with_a_valid_trailer_never_panics() {
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut scratch = Vec::new();
    for (_, blob) in sample_blobs() {
        let part = &blob[..blob.len() - TRAILER_LEN];
        for _ in 0..400 {
            let mut bad = part.to_vec();
            match next() % 3 {
                0 => {
                    let i = (next() as usize) % bad.len();
                    bad[i] = next() as u8;
                }
                1 => bad.truncate((next() as usize) % bad.len()),
                _ => {
                    let i = (next() as usize) % bad.len();
                    bad.insert(i, next() as u8);
                }
            }
            let blob = sluice_blob::with_trailer(&bad);
            let parsed = Blob::parse(&blob).expect("trailer is valid");
            let _ = parsed.decode(&limits);
            if let Ok(doc) = parsed.lazy(&limits, &mut scratch) {
                if let Ok(items) = doc.items() {
                    for item in items.take(100) {
                        let Ok(item) = item else { break };
                        let _ = item.decode();
                    }
                }
            }
        }
    }
}

#[test]
fn chunks_are_independently_verified() {
    let events = common::web_events(63, 1_000);
    let blobs = BlobBuilder::new(BlobOptions {
        chunk_limit: 10_000,
        ..BlobOptions::default()
    })
    .unwrap()
    .build(&events)
    .unwrap();
    assert!(blobs.len() > 2);
    // Damage one chunk: only that one fails; the others still verify and decode.
    let mut stored: Vec<Vec<u8>> = blobs.iter().map(|b| b.as_bytes().to_vec()).collect();
    stored[1][20] ^= 0x40;
    for (i, b) in stored.iter().enumerate() {
        let r = Blob::parse(b);
        if i == 1 {
            assert!(matches!(r, Err(BlobError::Corrupted { .. })));
        } else {
            assert!(!r.unwrap().decode(&Limits::default()).unwrap().is_empty());
        }
    }
}
