//! The element index in the user header (`sereal::index`): written by both encoders the same way,
//! used by the lazy reader, re-made per chunk by the splitter, and never trusted when it does not
//! match its body (damaged, copied onto another body): then elements are walked, same results.

use sereal::index::{ElementIndex, Parsed};
use sereal::lazy::{IndexUse, LazyDoc, Path, Selector};
use sereal::{
    split, to_vec, ArrayEncoder, Compression, Encoder, EncoderOptions, Limits, SplitOptions, Value,
};

/// `n` small events of varying length (strings repeat, so keys and values are COPY'd).
fn events(n: usize) -> Vec<Value> {
    let text = (0..n)
        .map(|i| {
            format!(
                r#"{{"id":{i},"host":"web{:03}","path":"/p/{}","status":{},"tags":[{}],"note":"{}"}}"#,
                i % 17,
                "x".repeat(i % 40),
                [200, 200, 404, 500][i % 4],
                (0..i % 5).map(|t| t.to_string()).collect::<Vec<_>>().join(","),
                if i % 3 == 0 { "repeated note" } else { "other" },
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    match sereal::json::from_json_slice(format!("[{text}]").as_bytes()).unwrap() {
        Value::Array(v) => v,
        other => panic!("{other:?}"),
    }
}

fn opts(protocol: u8, compression: Compression, element_index: bool) -> EncoderOptions {
    EncoderOptions {
        protocol,
        compression,
        compress_threshold: 0,
        dedupe_strings: true,
        element_index,
        ..EncoderOptions::default()
    }
}

/// (start, end) of every element, as the lazy reader yields them, and what it did with the index.
fn spans(doc: &[u8]) -> (Vec<(usize, usize)>, IndexUse) {
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(doc, &Limits::default(), &mut scratch).unwrap();
    let spans = lazy
        .items()
        .unwrap()
        .map(|i| {
            let i = i.unwrap();
            (i.start(), i.end())
        })
        .collect();
    (spans, lazy.element_index().clone())
}

/// Selected `status` and `path` of every element with status >= 400, via the filter-first walk.
fn filtered(doc: &[u8]) -> Vec<Vec<Vec<Value>>> {
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(doc, &Limits::default(), &mut scratch).unwrap();
    let mut items = lazy.items().unwrap();
    let mut filter = Selector::new(vec![Path::parse("status").unwrap()]);
    let mut select = Selector::new(vec![
        Path::parse("path").unwrap(),
        Path::parse("tags").unwrap(),
    ]);
    let (mut fh, mut sh) = (Vec::new(), Vec::new());
    let mut out = Vec::new();
    while let Some(item) = filter.next_selected(&mut items, &mut fh) {
        let item = item.unwrap();
        let status = fh[0].first().map(|h| h.as_i64().unwrap().unwrap());
        if status.is_some_and(|s| s >= 400) {
            select.select_handles(&item, &mut sh).unwrap();
            out.push(
                sh.iter()
                    .map(|hs| hs.iter().map(|h| h.decode().unwrap()).collect())
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn both_encoders_write_the_same_indexed_document() {
    for n in [1, 2, 15, 16, 17, 300, 20_000] {
        let evs = events(n);
        for (protocol, compression) in [
            (5, Compression::Zstd { level: 3 }),
            (3, Compression::Zlib { level: 6 }),
            (4, Compression::None),
        ] {
            let o = opts(protocol, compression, true);
            let one_shot = to_vec(&Value::Array(evs.clone()), &o).unwrap();
            let mut streamed = Vec::new();
            let mut enc = ArrayEncoder::new(o.clone()).unwrap();
            for e in &evs {
                enc.push(e).unwrap();
            }
            enc.finish_into(&mut streamed).unwrap();
            assert_eq!(one_shot, streamed, "{n} events, protocol {protocol}");
            let plain = to_vec(
                &Value::Array(evs.clone()),
                &opts(protocol, compression, false),
            )
            .unwrap();
            let (with, used) = spans(&one_shot);
            let (without, absent) = spans(&plain);
            assert_eq!(used, IndexUse::Used(n), "{n} events, protocol {protocol}");
            assert_eq!(absent, IndexUse::Absent);
            assert_eq!(
                with, without,
                "{n} events: the index names the walked bounds"
            );
            assert_eq!(filtered(&one_shot), filtered(&plain));
            assert_eq!(
                sereal::from_slice(&one_shot).unwrap(),
                sereal::from_slice(&plain).unwrap()
            );
        }
    }
    // Not an array: no index, nothing else changes.
    let o = opts(5, Compression::None, true);
    let doc = to_vec(&Value::Int(7), &o).unwrap();
    assert_eq!(
        doc,
        to_vec(&Value::Int(7), &opts(5, Compression::None, false)).unwrap()
    );
    // An empty array: no index either.
    let doc = to_vec(&Value::Array(vec![]), &o).unwrap();
    assert_eq!(spans(&doc).1, IndexUse::Absent);
}

#[test]
fn a_rolled_back_push_leaves_no_trace_in_the_index() {
    // A rolled-back push (too deep) leaves no trace in the index.
    let o = EncoderOptions {
        max_depth: 4,
        ..opts(5, Compression::None, true)
    };
    let deep = sereal::json::from_json_slice(br#"{"a":{"b":{"c":{"d":1}}}}"#).unwrap();
    let mut enc = ArrayEncoder::new(o.clone()).unwrap();
    let evs = events(40);
    for (i, e) in evs.iter().enumerate() {
        enc.push(e).unwrap();
        if i % 7 == 0 {
            assert!(enc.push(&deep).is_err());
        }
    }
    let mut doc = Vec::new();
    enc.finish_into(&mut doc).unwrap();
    assert_eq!(
        doc,
        Encoder::new(o).unwrap().encode(&Value::Array(evs)).unwrap()
    );
    assert_eq!(spans(&doc).1, IndexUse::Used(40));
}

/// The user header body's range in `doc`.
fn user_header(doc: &[u8]) -> std::ops::Range<usize> {
    sereal::header::parse(doc).unwrap().user_header.unwrap()
}

#[test]
fn every_flipped_bit_of_the_index_is_caught_and_the_elements_walked() {
    let evs = events(120);
    let doc = to_vec(
        &Value::Array(evs.clone()),
        &opts(5, Compression::Zstd { level: 3 }, true),
    )
    .unwrap();
    let plain = to_vec(
        &Value::Array(evs),
        &opts(5, Compression::Zstd { level: 3 }, false),
    )
    .unwrap();
    let (truth, _) = spans(&plain);
    let want = filtered(&plain);
    let uh = user_header(&doc);
    let mut ignored = 0;
    for at in uh.clone() {
        for bit in 0..8 {
            let mut bad = doc.clone();
            bad[at] ^= 1 << bit;
            let mut scratch = Vec::new();
            let Ok(lazy) = LazyDoc::open(&bad, &Limits::default(), &mut scratch) else {
                continue; // the header itself no longer parses: an error, not a wrong answer
            };
            match lazy.element_index() {
                IndexUse::Used(_) => panic!("byte {at} bit {bit}: a damaged index was used"),
                IndexUse::Ignored(reason) => {
                    assert!(reason.starts_with("element index: "), "{reason}");
                    ignored += 1;
                }
                IndexUse::Absent => {}
            }
            drop(lazy);
            assert_eq!(spans(&bad).0, truth, "byte {at} bit {bit}");
            assert_eq!(filtered(&bad), want, "byte {at} bit {bit}");
        }
    }
    assert!(ignored > (uh.len() - 8) * 8 / 2, "{ignored} flips reported");
}

/// `doc` with its user header body replaced by `uh`.
fn with_user_header(doc: &[u8], uh: &[u8]) -> Vec<u8> {
    let h = sereal::header::parse(doc).unwrap();
    let mut out = Vec::new();
    sereal::header::write_with_user_header(&mut out, h.version, h.encoding, uh);
    out.extend_from_slice(&doc[h.body_offset..]);
    out
}

#[test]
fn an_index_copied_onto_another_body_is_ignored() {
    let o = opts(5, Compression::None, true);
    let a = to_vec(&Value::Array(events(50)), &o).unwrap();
    let mut other = events(50);
    other.reverse(); // same elements, same count and body length, other bounds
    let b = to_vec(&Value::Array(other.clone()), &o).unwrap();
    let b_plain = to_vec(&Value::Array(other), &opts(5, Compression::None, false)).unwrap();
    let swapped = with_user_header(&b, &a[user_header(&a)]);
    let (got, use_) = spans(&swapped);
    assert!(matches!(use_, IndexUse::Ignored(_)), "{use_:?}");
    assert_eq!(got, spans(&b_plain).0);
    assert_eq!(filtered(&swapped), filtered(&b_plain));
    // Another user header (not an index) is simply not an index.
    let foreign = with_user_header(&b, b"\x64meta");
    assert_eq!(spans(&foreign).1, IndexUse::Absent);
    assert_eq!(ElementIndex::parse(b"\x64meta"), Parsed::NotAnIndex);
}

#[test]
fn split_chunks_carry_their_own_index() {
    let evs = events(3_000);
    for compression in [Compression::Zstd { level: 3 }, Compression::None] {
        let doc = to_vec(&Value::Array(evs.clone()), &opts(5, compression, true)).unwrap();
        let chunks = split(
            &doc,
            doc.len() / 5,
            &SplitOptions {
                threads: 1,
                ..SplitOptions::default()
            },
            &Limits::default(),
        )
        .unwrap();
        assert!(chunks.len() >= 5, "{} chunks", chunks.len());
        let mut total = 0;
        for c in &chunks {
            assert!(c.len() <= doc.len() / 5);
            let n = match sereal::from_slice(c).unwrap() {
                Value::Array(v) => v.len(),
                other => panic!("{other:?}"),
            };
            let (with, use_) = spans(c);
            assert_eq!(
                use_,
                IndexUse::Used(n),
                "each chunk indexes its own elements"
            );
            // The bounds are the walked ones: strip the index and compare.
            let h = sereal::header::parse(c).unwrap();
            let mut stripped = Vec::new();
            sereal::header::write(&mut stripped, h.version, h.encoding);
            stripped.extend_from_slice(&c[h.body_offset..]);
            assert_eq!(with, spans(&stripped).0);
            total += n;
        }
        assert_eq!(total, evs.len());
    }
}

/// Origins of `n` elements: runs of varying length, seqs mostly ascending, some repeated out of
/// order, some 0 (no record).
fn some_origins(n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| match i / 37 % 5 {
            3 => 0,
            4 => 1_000 + (i / 37) as u64 / 2,
            _ => 5_000 + (i / 37) as u64 * 3,
        })
        .collect()
}

/// The origins a lazy reader finds in `doc`, one seq per element.
fn origins_read(doc: &[u8]) -> Option<Vec<u64>> {
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(doc, &Limits::default(), &mut scratch).unwrap();
    lazy.origins().map(|runs| {
        runs.iter()
            .flat_map(|&(seq, n)| std::iter::repeat_n(seq, n as usize))
            .collect()
    })
}

/// `evs` streamed with one origin per element.
fn encode_with_origins(evs: &[Value], seqs: &[u64], o: &EncoderOptions) -> Vec<u8> {
    let mut enc = ArrayEncoder::new(o.clone()).unwrap();
    for (e, &seq) in evs.iter().zip(seqs) {
        enc.push(e).unwrap();
        enc.push_origin(seq);
    }
    let mut doc = Vec::new();
    enc.finish_into(&mut doc).unwrap();
    doc
}

#[test]
fn the_array_encoder_writes_origins_into_the_index() {
    let evs = events(500);
    let seqs = some_origins(evs.len());
    let o = opts(5, Compression::Zstd { level: 3 }, true);
    let doc = encode_with_origins(&evs, &seqs, &o);
    assert_eq!(spans(&doc).1, IndexUse::Used(500));
    assert_eq!(origins_read(&doc), Some(seqs.clone()));
    // The body is the one without origins: only the user header differs.
    let plain = to_vec(&Value::Array(evs.clone()), &o).unwrap();
    assert_eq!(origins_read(&plain), None);
    assert_eq!(
        sereal::from_slice(&doc).unwrap(),
        sereal::from_slice(&plain).unwrap()
    );
    let (h, p) = (
        sereal::header::parse(&doc).unwrap(),
        sereal::header::parse(&plain).unwrap(),
    );
    assert_eq!(doc[h.body_offset..], plain[p.body_offset..]);
    // Origins missing for one element are left out (and the encoder is clear for the next).
    let mut enc = ArrayEncoder::new(o.clone()).unwrap();
    for (i, e) in evs.iter().enumerate() {
        enc.push(e).unwrap();
        if i != 10 {
            enc.push_origin(seqs[i]);
        }
    }
    let mut partial = Vec::new();
    enc.finish_into(&mut partial).unwrap();
    assert_eq!(
        partial, plain,
        "origins that do not cover every element are left out"
    );
    assert!(enc.origins().is_empty());
    // Without the element index there is nowhere to put them: the document is unchanged.
    let bare = opts(5, Compression::Zstd { level: 3 }, false);
    assert_eq!(
        encode_with_origins(&evs, &seqs, &bare),
        to_vec(&Value::Array(evs), &bare).unwrap()
    );
}

#[test]
fn split_chunks_carry_the_origins_of_their_own_elements() {
    let evs = events(3_000);
    let seqs = some_origins(evs.len());
    for compression in [Compression::Zstd { level: 3 }, Compression::None] {
        let doc = encode_with_origins(&evs, &seqs, &opts(5, compression, true));
        for threads in [1, 4] {
            let chunks = split(
                &doc,
                doc.len() / 5,
                &SplitOptions {
                    threads,
                    ..SplitOptions::default()
                },
                &Limits::default(),
            )
            .unwrap();
            assert!(chunks.len() >= 5, "{} chunks", chunks.len());
            let mut at = 0;
            for (i, c) in chunks.iter().enumerate() {
                let n = match sereal::from_slice(c).unwrap() {
                    Value::Array(v) => v.len(),
                    other => panic!("{other:?}"),
                };
                assert_eq!(spans(c).1, IndexUse::Used(n));
                assert_eq!(
                    origins_read(c).as_deref(),
                    Some(&seqs[at..at + n]),
                    "chunk {i}: its own elements' origins"
                );
                at += n;
            }
            assert_eq!(at, evs.len());
        }
    }
    // An input index without origins gives chunks without origins.
    let doc = to_vec(&Value::Array(evs), &opts(5, Compression::None, true)).unwrap();
    let chunks = split(
        &doc,
        doc.len() / 3,
        &SplitOptions::default(),
        &Limits::default(),
    )
    .unwrap();
    assert!(chunks.len() >= 3);
    assert!(chunks.iter().all(|c| origins_read(c).is_none()));
}

#[test]
fn origins_of_a_5000_event_chunk_of_100_payloads_cost_about_200_bytes() {
    // The measurement docs/decisions.md quotes: 100 WAL records of 50 events each.
    let evs = events(5_000);
    let seqs: Vec<u64> = (0..evs.len()).map(|i| 90_000 + (i / 50) as u64).collect();
    let o = opts(5, Compression::Zstd { level: 2 }, true);
    let with = encode_with_origins(&evs, &seqs, &o);
    let without = to_vec(&Value::Array(evs), &o).unwrap();
    let (a, b) = (user_header(&with).len(), user_header(&without).len());
    let cost = with.len() - without.len();
    eprintln!(
        "origins: {cost} bytes ({b} → {a} bytes of index; chunk {} bytes)",
        with.len()
    );
    // nruns (1 byte), the first run's absolute seq (3 bytes) and count, then per run a 1-byte
    // delta and a 1-byte count; the length varints before the index may grow by a byte or two.
    assert!((200..=210).contains(&cost), "{cost} bytes");
    assert_eq!(origins_read(&with), Some(seqs));
}
