//! Hostile inputs fail with a clean, typed error within limits: no panic, no stack overflow, no
//! runaway memory.

use std::io::Write;

use sereal::{Category, Decoder, Limits};

mod common;

const V3: &[u8] = b"=\xF3rl\x03\x00";

fn doc(body: &[u8]) -> Vec<u8> {
    let mut d = V3.to_vec();
    d.extend_from_slice(body);
    d
}

fn err(d: &[u8]) -> sereal::Error {
    match sereal::from_slice(d) {
        Ok(v) => panic!("decoded hostile input {d:02x?} to {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn truncated_and_bad_lengths_are_eof() {
    assert!(err(&doc(b"")).is_eof());
    assert!(
        err(&doc(&[0x26, 0x05, b'a'])).is_eof(),
        "BINARY longer than the input"
    );
    assert!(
        err(&doc(&[0x27, 0xff, 0xff, 0xff, 0x0f])).is_eof(),
        "STR_UTF8 length past the end"
    );
    assert!(
        err(&doc(&[0x2b, 0x03, 0x01])).is_eof(),
        "ARRAY with fewer items than declared"
    );
    assert!(err(&doc(&[0x23, 0x00, 0x00])).is_eof(), "DOUBLE cut short");
    assert!(err(&doc(&[0x20, 0x80, 0x80])).is_eof(), "VARINT cut short");
}

#[test]
fn bad_varints_and_tags() {
    let e = err(&doc(&[
        0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ]));
    assert_eq!(e.classify(), Category::Invalid);
    assert_eq!(e.offset(), 7, "the offset names the varint");
    for tag in [0x36u8, 0x37, 0x3c, 0x3d, 0x3e] {
        let e = err(&doc(&[tag]));
        assert_eq!(e.classify(), Category::Invalid, "tag {tag:02x}");
        assert_eq!(e.offset(), 6);
    }
    assert_eq!(
        err(b"=srl\x09\x00\x01").classify(),
        Category::Invalid,
        "version 9"
    );
    assert_eq!(
        err(b"{\"json\":1}").classify(),
        Category::Invalid,
        "not Sereal"
    );
    assert_eq!(
        err(&doc(&[0x2a, 0x01, 0x01, 0x01])).classify(),
        Category::Invalid,
        "integer hash key"
    );
}

#[test]
fn back_references_must_point_backwards() {
    // COPY to itself, COPY forward, REFP/ALIAS to something never tracked, OBJECTV to a non-string.
    assert_eq!(err(&doc(&[0x2f, 0x01])).classify(), Category::Invalid);
    assert_eq!(
        err(&doc(&[0x42, 0x2f, 0x05, 0x01])).classify(),
        Category::Invalid
    );
    assert_eq!(
        err(&doc(&[0x42, 0x01, 0x29, 0x02])).classify(),
        Category::Invalid
    );
    assert_eq!(
        err(&doc(&[0x42, 0x01, 0x2e, 0x02])).classify(),
        Category::Invalid
    );
    assert_eq!(
        err(&doc(&[0x42, 0x01, 0x2d, 0x02, 0x01])).classify(),
        Category::Invalid
    );
    // A COPY of an item that itself contains a COPY (the spec forbids it; loops need it).
    let e = err(&doc(&[0x43, 0x61, b'a', 0x41, 0x2f, 0x02, 0x2f, 0x04]));
    assert_eq!(e.classify(), Category::Invalid, "{e}");
    // A reference back into an item still being decoded (a cycle).
    assert_eq!(
        err(&doc(&[0x28, 0xab, 0x01, 0x29, 0x02])).classify(),
        Category::Invalid
    );
}

#[test]
fn deep_nesting_hits_the_depth_limit_not_the_stack() {
    for opener in [
        &[0x28u8][..],
        &[0x41],
        &[0x2b, 0x01],
        &[0x30, 0x28],
        &[0x51, 0x61, b'k'],
    ] {
        let mut body = Vec::new();
        for _ in 0..200_000 {
            body.extend_from_slice(opener);
        }
        body.push(0x01);
        let e = err(&doc(&body));
        assert!(e.is_limit(), "{opener:02x?}: {e}");
    }
    // The limit is configurable, and lower limits apply.
    let mut body = vec![0x41; 20];
    body.push(0x01);
    let mut d = Decoder::with_limits(Limits {
        max_depth: 10,
        ..Limits::default()
    });
    assert!(d.decode(&doc(&body)).unwrap_err().is_limit());
    assert!(sereal::from_slice(&doc(&body)).is_ok());
}

#[test]
fn lying_counts_do_not_allocate() {
    // An array claiming 2^40 elements must fail on the element-count limit before allocating.
    let e = err(&doc(&[0x2b, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x01]));
    assert!(e.is_limit(), "{e}");
    // Under the limit but far beyond the input: EOF, after allocating no more than the input.
    let e = err(&doc(&[0x2b, 0xff, 0xff, 0xff, 0x03, 0x01]));
    assert!(e.is_eof(), "{e}");
}

fn zlib_doc(declared: u64, payload: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(payload).expect("compress");
    let compressed = z.finish().expect("finish");
    let mut d = b"=\xF3rl\x33\x00".to_vec();
    sereal::varint::write(&mut d, declared);
    sereal::varint::write(&mut d, compressed.len() as u64);
    d.extend_from_slice(&compressed);
    d
}

#[test]
fn zlib_bomb_with_lying_length_is_refused() {
    // 300 MiB of zeros compress to ~300 KB; the header claims 100 bytes.
    let mut payload = vec![0x2b_u8, 0x80, 0x80, 0x80, 0x01];
    payload.resize(300 << 20, 0);
    let bomb = zlib_doc(100, &payload);
    assert!(bomb.len() < 1 << 20);
    let e = err(&bomb);
    assert!(e.is_limit(), "{e}");
    // Declared honestly, the size limit refuses it up front.
    let e = err(&zlib_doc(payload.len() as u64, &payload));
    assert!(e.is_limit(), "{e}");
    // A declared length that does not match what inflates is invalid.
    let e = err(&zlib_doc(3, &[0x41, 0x01]));
    assert_eq!(e.classify(), Category::Invalid, "{e}");
    // Also when it is far more than the stream could ever inflate to (within the limit): no
    // buffer of the claimed size is filled for it.
    let e = err(&zlib_doc(200 << 20, &[0x41, 0x01]));
    assert_eq!(e.classify(), Category::Invalid, "{e}");
    // And a small, honest one decodes.
    assert_eq!(
        sereal::from_slice(&zlib_doc(2, &[0x41, 0x01])).expect("ok"),
        sereal::Value::Array(vec![sereal::Value::Int(1)])
    );
}

#[test]
fn zstd_and_snappy_bombs_are_refused() {
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut payload = vec![0x26_u8, 0x80, 0x80, 0x80, 0x01];
    payload.resize(4 << 20, b'x');
    for compression in [
        sereal::Compression::Zstd { level: 3 },
        sereal::Compression::Snappy,
    ] {
        // Build a valid document that decompresses to 4 MiB, and decode it under a 1 MiB limit.
        let v = sereal::Value::Binary(payload.clone());
        let d = sereal::to_vec(
            &v,
            &sereal::EncoderOptions {
                compression,
                ..Default::default()
            },
        )
        .expect("encode");
        let e = Decoder::with_limits(limits.clone()).decode(&d).unwrap_err();
        assert!(e.is_limit(), "{compression:?}: {e}");
    }
}

#[test]
fn copy_amplification_is_bounded() {
    // A 64 KiB string copied 500k times would materialise 32 GB; the total-string-bytes limit
    // stops it.
    let body = common::copy_amplification_body();
    let e = err(&doc(&body));
    assert!(e.is_limit(), "{e}");
}

#[test]
fn garbage_never_panics() {
    // A cheap deterministic fuzz on top of the real fuzz targets: random bodies after a valid
    // header, and random mutations of a real document.
    let base = sereal::to_vec(
        &sereal::json::from_json_slice(
            br#"[{"a":[1,2,{"b":"cccc"}],"d":"cccc","e":1.5},{"a":"x","d":"cccc"}]"#,
        )
        .expect("json"),
        &sereal::EncoderOptions {
            dedupe_strings: true,
            protocol: 3,
            ..Default::default()
        },
    )
    .expect("encode");
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut d = base.clone();
        for _ in 0..(next() % 4 + 1) {
            let i = 6 + (next() as usize) % (d.len() - 6);
            d[i] = next() as u8;
        }
        let _ = sereal::from_slice(&d);
        let len = (next() % 40) as usize;
        let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let _ = sereal::from_slice(&doc(&body));
    }
}

#[test]
fn reference_chains_cannot_expand_exponentially() {
    // x0 = [1] tracked; x(n+1) = [REFP xn, REFP xn] tracked: 60 levels would expand to 2^60
    // values when rendered as JSON. The decoder charges each reference its target's full size.
    // Top level: ARRAY of 61 items: a tracked ARRAYREF_1 [1] at offset 3, then 60 tracked
    // ARRAYREF_2 each holding two REFPs to the previous one.
    let body = common::reference_chain_body(60);
    let e = err(&doc(&body));
    assert!(e.is_limit(), "{e}");
}

#[test]
fn runs_of_pad_do_not_recurse() {
    for pad in [0x3fu8, 0xbf] {
        let mut body = vec![pad; 1_000_000];
        body.push(0x01);
        assert_eq!(
            sereal::from_slice(&doc(&body))
                .expect("PADs then 1")
                .resolve(),
            &sereal::Value::Int(1)
        );
        body.pop();
        assert!(err(&doc(&body)).is_eof());
    }
}

#[test]
fn truncated_zlib_streams_are_eof() {
    let mut payload = vec![0x2b_u8];
    sereal::varint::write(&mut payload, 2000);
    for i in 0..2000u32 {
        payload.push(0x64);
        payload.extend_from_slice(&i.to_le_bytes());
    }
    let good = zlib_doc(payload.len() as u64, &payload);
    assert!(sereal::from_slice(&good).is_ok());
    // Cut the zlib stream but keep the framing consistent with the cut: the inflater runs dry.
    for cut in [3usize, 10, 100, 500] {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&payload).expect("compress");
        let mut compressed = z.finish().expect("finish");
        compressed.truncate(compressed.len() - cut);
        let mut d = b"=\xF3rl\x33\x00".to_vec();
        sereal::varint::write(&mut d, payload.len() as u64);
        sereal::varint::write(&mut d, compressed.len() as u64);
        d.extend_from_slice(&compressed);
        let e = err(&d);
        assert!(
            e.is_eof() || e.classify() == Category::Invalid,
            "cut {cut}: {e}"
        );
    }
}
