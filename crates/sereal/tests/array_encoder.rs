//! `ArrayEncoder` (one element at a time) writes the same bytes as `Encoder` on the whole array,
//! for every array-header length and option set, and a refused element leaves no trace.

use std::sync::Arc;

use sereal::{ArrayEncoder, Compression, Encoder, EncoderOptions, Key, Object, Value};

/// Deterministic pseudo-random events: shared and unshared keys, repeated and unique strings,
/// non-ASCII text, nesting, numbers, and blessed objects (for `OBJECTV` back-references).
fn events(n: usize, seed: u64) -> Vec<Value> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let shared: Vec<Key> = ["type", "path", "status", "timings", "ua", "héllo", "x"]
        .iter()
        .map(|&k| Key::from(k))
        .collect();
    let words = [
        "GET",
        "/index.html",
        "Mozilla/5.0 (X11; Linux x86_64)",
        "ams1",
        "naïve café",
        "abcd",
        "ab",
    ];
    (0..n)
        .map(|i| {
            let r = next();
            let mut h: Vec<(Key, Value)> = Vec::new();
            h.push((shared[0].clone(), Value::String("WEB".into())));
            h.push((
                shared[1].clone(),
                Value::String(words[(r % 7) as usize].into()),
            ));
            h.push((Key::from("status"), Value::Int((r % 600) as i64 - 50)));
            h.push((
                shared[3].clone(),
                Value::Hash(vec![(
                    Key::from("total_ms"),
                    Value::Float((r % 1000) as f64 / 7.0),
                )]),
            ));
            h.push((
                shared[5].clone(),
                Value::String(format!("id-{}", next() % 5000)),
            ));
            if r % 3 == 0 {
                h.push((
                    shared[4].clone(),
                    Value::Array(vec![
                        Value::String(words[(r % 5) as usize].into());
                        (r % 20) as usize
                    ]),
                ));
            }
            if r % 5 == 0 {
                let class = if r % 2 == 0 { "My::Class" } else { "Other" };
                h.push((
                    Key::from("obj"),
                    Value::Object(Box::new(Object {
                        class: class.into(),
                        value: Value::Int(i as i64),
                        frozen: false,
                    })),
                ));
            }
            if r % 7 == 0 {
                h.push((
                    shared[6].clone(),
                    Value::Shared(Arc::new(Value::Binary(b"binary blob".to_vec()))),
                ));
            }
            Value::Hash(h)
        })
        .collect()
}

fn option_sets() -> Vec<EncoderOptions> {
    vec![
        EncoderOptions {
            protocol: 3,
            dedupe_strings: true,
            ..Default::default()
        },
        EncoderOptions::original_events(),
        EncoderOptions {
            protocol: 5,
            compression: Compression::Zstd { level: 3 },
            compress_threshold: 0,
            dedupe_strings: true,
            ..Default::default()
        },
        EncoderOptions {
            protocol: 5,
            dedupe_strings: true,
            canonical: true,
            ..Default::default()
        },
        EncoderOptions {
            protocol: 4,
            ..Default::default()
        },
    ]
}

/// `items` pushed one by one into `arr` and finished: asserts the document is `want`.
fn streamed(
    arr: &mut ArrayEncoder,
    items: &[Value],
    want: &[u8],
    opts: &EncoderOptions,
) -> Vec<u8> {
    for e in items {
        arr.push(e).unwrap();
    }
    assert_eq!(arr.len(), items.len());
    let mut got = Vec::new();
    arr.finish_into(&mut got).unwrap();
    assert!(
        got == want,
        "{} elements with {opts:?}: {} vs {} bytes",
        items.len(),
        got.len(),
        want.len()
    );
    got
}

#[test]
fn same_bytes_as_one_shot() {
    let all = events(16_500, 7);
    for opts in option_sets() {
        let mut one = Encoder::new(opts.clone()).unwrap();
        let mut arr = ArrayEncoder::new(opts.clone()).unwrap();
        for n in [
            0, 1, 2, 15, 16, 17, 100, 127, 128, 129, 1000, 16_383, 16_384, 16_500,
        ] {
            let items = &all[..n];
            let want = one.encode(&Value::Array(items.to_vec())).unwrap();
            let got = streamed(&mut arr, items, &want, &opts);
            assert!(sereal::from_slice(&got).is_ok());
        }
    }
}

#[test]
fn refused_element_leaves_no_trace() {
    let opts = EncoderOptions {
        max_depth: 6,
        ..EncoderOptions::original_events()
    };
    let all = events(300, 11);
    let mut deep = Value::Int(1);
    for _ in 0..10 {
        deep = Value::Hash(vec![
            (Key::from("path"), deep),
            (Key::from("new key"), Value::String("a new string".into())),
        ]);
    }
    let mut arr = ArrayEncoder::new(opts.clone()).unwrap();
    for (i, e) in all.iter().enumerate() {
        if i % 50 == 3 {
            assert!(arr.push(&deep).is_err());
        }
        arr.push(e).unwrap();
    }
    let mut got = Vec::new();
    arr.finish_into(&mut got).unwrap();
    let want = Encoder::new(opts)
        .unwrap()
        .encode(&Value::Array(all))
        .unwrap();
    assert!(got == want);
}

/// One encoder reused for documents whose array headers differ in length in every order (each
/// document reserves the previous one's header), with and without the element index: the same
/// bytes as one-shot encoding every time.
#[test]
fn a_reused_encoder_guesses_each_header_from_the_last() {
    let all = events(16_500, 3);
    let mut sets = option_sets();
    sets.push(EncoderOptions {
        protocol: 5,
        compression: Compression::Zstd { level: 2 },
        compress_threshold: 0,
        dedupe_strings: true,
        element_index: true,
        ..Default::default()
    });
    for opts in sets {
        let mut arr = ArrayEncoder::new(opts.clone()).unwrap();
        for n in [
            16_500, 16_500, 10, 16_384, 200, 200, 0, 17, 16_500, 1, 130, 16, 16_383, 16_500, 15,
        ] {
            let items = &all[..n];
            let want = sereal::to_vec(&Value::Array(items.to_vec()), &opts).unwrap();
            streamed(&mut arr, items, &want, &opts);
        }
    }
}

/// `expect_len` with a right or a wrong guess, before the first element or (ignored) after it:
/// the same bytes as one-shot encoding.
#[test]
fn an_expected_length_right_or_wrong_changes_no_byte() {
    let all = events(16_500, 5);
    for opts in option_sets() {
        let mut arr = ArrayEncoder::new(opts.clone()).unwrap();
        for (n, guess) in [
            (16_500, 16_500),
            (16_500, 10),
            (10, 16_500),
            (200, 200),
            (0, 16_384),
            (17, 15),
            (16_384, 16_383),
        ] {
            let items = &all[..n];
            let want = sereal::to_vec(&Value::Array(items.to_vec()), &opts).unwrap();
            arr.expect_len(guess);
            for (i, e) in items.iter().enumerate() {
                arr.push(e).unwrap();
                if i == 0 {
                    arr.expect_len(1); // too late: ignored
                }
            }
            let mut got = Vec::new();
            arr.finish_into(&mut got).unwrap();
            assert!(got == want, "{n} elements, guessed {guess}, {opts:?}");
        }
    }
}
