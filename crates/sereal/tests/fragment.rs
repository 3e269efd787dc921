//! Fragments (`FragmentWriter` → `ArrayEncoder::push_fragment`) give a document the same bytes as
//! pushing the value itself, mixed with pushed values in any order, for every option set; a
//! refused fragment leaves no trace; a misused writer yields no fragment; keys encoded ahead
//! write as their text does.

use sereal::{
    ArrayEncoder, Compression, EncodedKey, Encoder, EncoderOptions, FragmentWriter, Key, Value,
    ENCODED_KEY_MAX,
};

/// `v` through the writer (JSON-expressible values only).
fn write(w: &mut FragmentWriter, v: &Value) {
    match v {
        Value::Undef => w.undef(),
        Value::Bool(b) => w.bool(*b),
        Value::Int(i) => w.int(*i),
        Value::UInt(u) => w.uint(*u),
        Value::Float(f) => w.float(*f),
        Value::String(s) => w.str(s),
        Value::Array(items) => {
            w.begin_array();
            for x in items {
                write(w, x);
            }
            w.end();
        }
        Value::Hash(entries) => {
            w.begin_hash();
            for (k, x) in entries {
                w.key(k.as_str().expect("UTF-8 keys"));
                write(w, x);
            }
            w.end();
        }
        other => panic!("not JSON-expressible: {other:?}"),
    }
}

/// JSON-like events: repeated keys and strings (short and long, ASCII and not), booleans,
/// numbers of every width, containers of 15, 16 and 200 elements.
fn events(n: usize) -> Vec<Value> {
    let words = [
        "GET",
        "/index.html",
        "naïve café",
        "abcd",
        "ab",
        "x".repeat(40).leak(),
    ];
    (0..n)
        .map(|i| {
            let mut h: Vec<(Key, Value)> = vec![
                (Key::from("type"), Value::String("WEB".into())),
                (Key::from("path"), Value::String(words[i % 6].into())),
                (Key::from("héllo"), Value::String(words[(i + 2) % 6].into())),
                (Key::from("ok"), Value::Bool(i % 2 == 0)),
                (
                    Key::from("n"),
                    Value::Int([0, 15, -16, -17, 300, i64::MIN][i % 6]),
                ),
                (Key::from("u"), Value::UInt(u64::MAX - i as u64)),
                (Key::from("f"), Value::Float([0.5, 0.1, -0.0, 1e300][i % 4])),
                (Key::from("z"), Value::Undef),
                (
                    Key::from("a"),
                    Value::Array(
                        (0..[0, 15, 16, 200][i % 4])
                            .map(|j| Value::String(words[j % 6].into()))
                            .collect(),
                    ),
                ),
            ];
            let wide: Vec<(Key, Value)> = (0..[3, 15, 16, 40][i % 4])
                .map(|j| (Key::from(format!("k{j}")), Value::Int(j)))
                .collect();
            h.push((Key::from("wide"), Value::Hash(wide)));
            Value::Hash(h)
        })
        .collect()
}

fn option_sets() -> Vec<EncoderOptions> {
    let mut sets = Vec::new();
    for protocol in [3, 5] {
        for dedupe_strings in [false, true] {
            for canonical in [false, true] {
                sets.push(EncoderOptions {
                    protocol,
                    dedupe_strings,
                    canonical,
                    ..EncoderOptions::default()
                });
            }
        }
    }
    sets.push(EncoderOptions::original_events());
    sets.push(EncoderOptions {
        compression: Compression::Zstd { level: 3 },
        compress_threshold: 0,
        dedupe_strings: true,
        ..EncoderOptions::default()
    });
    sets
}

#[test]
fn same_bytes_as_pushing_the_value() {
    let evs = events(60);
    let mut w = FragmentWriter::new();
    let frags: Vec<_> = evs
        .iter()
        .map(|e| {
            write(&mut w, e);
            w.finish().unwrap()
        })
        .collect();
    for opts in option_sets() {
        let want = Encoder::new(opts.clone())
            .unwrap()
            .encode(&Value::Array(evs.clone()))
            .unwrap();
        let mut enc = ArrayEncoder::new(opts.clone()).unwrap();
        for (i, (e, f)) in evs.iter().zip(&frags).enumerate() {
            // Mixed: values and fragments share the de-duplication tables.
            if i % 3 == 1 {
                enc.push(e).unwrap();
            } else {
                enc.push_fragment(f).unwrap();
            }
        }
        let mut got = Vec::new();
        enc.finish_into(&mut got).unwrap();
        assert_eq!(got, want, "{opts:?}");
    }
    // The fragment's own value.
    let v = frags[0].to_value().unwrap();
    assert_eq!(
        sereal::json::to_json_value(&v),
        sereal::json::to_json_value(&evs[0])
    );
}

#[test]
fn refused_fragment_leaves_no_trace() {
    let evs = events(10);
    let mut deep = Value::Int(1);
    for _ in 0..20 {
        deep = Value::Array(vec![deep]);
    }
    let mut w = FragmentWriter::new();
    write(&mut w, &Value::Hash(vec![(Key::from("d"), deep)]));
    let too_deep = w.finish().unwrap();
    let opts = EncoderOptions {
        dedupe_strings: true,
        max_depth: 10,
        ..EncoderOptions::default()
    };
    let want = Encoder::new(opts.clone())
        .unwrap()
        .encode(&Value::Array(evs.clone()))
        .unwrap();
    let mut enc = ArrayEncoder::new(opts).unwrap();
    for (i, e) in evs.iter().enumerate() {
        write(&mut w, e);
        enc.push_fragment(&w.finish().unwrap()).unwrap();
        if i % 4 == 0 {
            assert!(enc.push_fragment(&too_deep).is_err());
        }
    }
    assert_eq!(enc.len(), evs.len());
    let mut got = Vec::new();
    enc.finish_into(&mut got).unwrap();
    assert_eq!(got, want);
}

#[test]
fn misuse_yields_no_fragment() {
    let mut w = FragmentWriter::new();
    // Nothing written; two top-level values; an unclosed container; a key outside a hash; a
    // value without its key; a close too many.
    assert!(w.finish().is_err());
    w.int(1);
    w.int(2);
    assert!(w.finish().is_err());
    w.begin_hash();
    assert!(w.finish().is_err());
    w.begin_array();
    w.key("k");
    w.int(1);
    w.end();
    assert!(w.finish().is_err());
    w.begin_hash();
    w.key("k");
    w.int(1);
    w.int(2);
    w.end();
    assert!(w.finish().is_err());
    w.begin_array();
    w.end();
    w.end();
    assert!(w.finish().is_err());
    // And the writer is usable again after each.
    w.begin_hash();
    w.key("k");
    w.str("v");
    w.end();
    let f = w.finish().unwrap();
    assert_eq!(
        sereal::json::to_json_value(&f.to_value().unwrap()),
        serde_json::json!({"k": "v"})
    );
}

/// A key written from its [`EncodedKey`] gives the very fragment (bytes and marks) that writing
/// its text gives: ASCII and UTF-8, every length an `EncodedKey` holds, in the event hash and in
/// a nested one; longer texts are refused.
#[test]
fn encoded_keys_are_written_keys() {
    for len in 0..=ENCODED_KEY_MAX + 2 {
        let ascii: String = (0..len)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let utf8: String = "é".repeat(len / 2) + &"x".repeat(len % 2);
        for text in [ascii, utf8] {
            assert_eq!(text.len(), len);
            let Some(encoded) = EncodedKey::new(&text) else {
                assert!(len > ENCODED_KEY_MAX, "{text:?} refused");
                continue;
            };
            assert!(len <= ENCODED_KEY_MAX, "{text:?} taken");
            let (mut plain, mut fast) = (FragmentWriter::new(), FragmentWriter::new());
            plain.begin_hash();
            plain.key(&text);
            plain.begin_hash();
            plain.key(&text);
            fast.begin_hash();
            fast.encoded_key(&encoded);
            fast.begin_hash();
            fast.encoded_key(&encoded);
            for w in [&mut plain, &mut fast] {
                w.str(&text);
                w.end();
                w.key("next");
                w.int(1);
                w.end();
            }
            let (plain, fast) = (plain.finish().unwrap(), fast.finish().unwrap());
            assert_eq!(plain, fast, "{text:?}");
        }
    }
}
