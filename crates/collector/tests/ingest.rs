//! Table-driven tests of the input layer: formats, whole-payload vs per-event drops, tags,
//! limits, Sereal input, and a round trip of generated events.

use sereal::{Compression, EncoderOptions, Key, Value};
use sluice_collector::{
    detect, DropCounters, DropReason, EventBody, Format, IngestConfig, IngestOutcome, Ingestor,
};

const NOW: i64 = 1_700_000_000;

fn ingestor() -> Ingestor {
    Ingestor::new(IngestConfig {
        dc: "ams1".into(),
        ..Default::default()
    })
    .unwrap()
}

fn ingest(payload: &[u8]) -> IngestOutcome {
    ingestor().ingest(payload, NOW)
}

/// (index, reason, whole_payload) of every drop.
fn drops(out: &IngestOutcome) -> Vec<(usize, DropReason, bool)> {
    out.dropped
        .iter()
        .map(|d| (d.index, d.reason, d.whole_payload))
        .collect()
}

fn types(out: &IngestOutcome) -> Vec<&str> {
    out.events.iter().map(|e| e.type_.as_str()).collect()
}

/// An event encoded alone into a one-element array document with the default blob profile's
/// settings (string de-duplication): two bodies that encode alike are the same event.
fn encoded(body: &EventBody) -> Vec<u8> {
    let opts = sluice_blob::Profile::default().encoder_options();
    let mut enc = sereal::ArrayEncoder::new(opts).unwrap();
    match body {
        EventBody::Fragment(f) => enc.push_fragment(f).unwrap(),
        EventBody::Value(v) => enc.push(v).unwrap(),
    }
    let mut out = Vec::new();
    enc.finish_into(&mut out).unwrap();
    out
}

#[test]
fn formats_and_drop_scopes() {
    use DropReason::*;
    let deep_ok = format!(
        r#"{{"type":"A","x":{}1{}}}"#,
        "[".repeat(31),
        "]".repeat(31)
    );
    let deep_bad = format!(
        r#"{{"type":"A","x":{}1{}}}"#,
        "[".repeat(32),
        "]".repeat(32)
    );
    let hostile = "[".repeat(10_000);
    let balanced = format!("{hostile}{}", "]".repeat(10_000));
    let ndjson_hostile = format!("{{\"type\":\"A\"}}\n{hostile}\n{{\"type\":\"B\"}}\n");
    let ndjson_hostile_obj = format!("{{\"type\":\"A\"}}\n{{\"x\":{hostile}\n{{\"type\":\"B\"}}\n");
    let deep_in_array = format!(r#"[{{"type":"A"}},{deep_bad},{{"type":"B"}}]"#);
    type Case<'a> = (
        &'a str,
        Vec<u8>,
        Format,
        Vec<&'a str>,
        Vec<(usize, DropReason, bool)>,
    );
    let cases: Vec<Case> = vec![
        ("object", br#"{"type":"A","n":1}"#.to_vec(), Format::JsonObject, vec!["A"], vec![]),
        ("array", br#"[{"type":"A"},{"type":"B"}]"#.to_vec(), Format::JsonArray, vec!["A", "B"], vec![]),
        ("empty array", b" [ ] ".to_vec(), Format::JsonArray, vec![], vec![]),
        ("ndjson", b"{\"type\":\"A\"}\n{\"type\":\"B\"}\n".to_vec(), Format::Ndjson, vec!["A", "B"], vec![]),
        ("ndjson crlf no final newline", b"{\"type\":\"A\"}\r\n{\"type\":\"B\"}".to_vec(), Format::Ndjson, vec!["A", "B"], vec![]),
        (
            "ndjson with array lines",
            b"[{\"type\":\"A\"},{\"type\":\"B\"}]\n{\"type\":\"C\"}\n[]\n".to_vec(),
            Format::Ndjson,
            vec!["A", "B", "C"],
            vec![],
        ),
        ("bom object", b"\xEF\xBB\xBF \n {\"type\":\"A\"} \n".to_vec(), Format::JsonObject, vec!["A"], vec![]),
        ("bom ndjson", b"\xEF\xBB\xBF{\"type\":\"A\"}\n{\"type\":\"B\"}".to_vec(), Format::Ndjson, vec!["A", "B"], vec![]),
        ("bom array", b"\xEF\xBB\xBF[{\"type\":\"A\"}]".to_vec(), Format::JsonArray, vec!["A"], vec![]),
        (
            "pretty object",
            b"{\n  \"type\": \"A\",\n  \"x\": {\"y\": 1}\n}\n".to_vec(),
            Format::JsonObject,
            vec!["A"],
            vec![],
        ),
        (
            "pretty array",
            b"[\n  {\"type\": \"A\"},\n  {\"type\": \"B\"}\n]\n".to_vec(),
            Format::JsonArray,
            vec!["A", "B"],
            vec![],
        ),
        ("empty", b"".to_vec(), Format::Empty, vec![], vec![(0, PayloadError, true)]),
        ("blank", b" \r\n\n\t ".to_vec(), Format::Empty, vec![], vec![(0, PayloadError, true)]),
        ("bom only", b"\xEF\xBB\xBF".to_vec(), Format::Empty, vec![], vec![(0, PayloadError, true)]),
        (
            "ndjson blank lines, bad middle line",
            b"\n{\"type\":\"A\"}\n\n{\"type\":\n  \r\n{\"type\":\"C\"}\n\n".to_vec(),
            Format::Ndjson,
            vec!["A", "C"],
            vec![(1, Malformed, false)],
        ),
        (
            "ndjson bad lines of every kind",
            b"{\"type\":\"A\"}\n42\n{\"x\":1}\n[{\"type\":\"B\"},7]\n[{\"type\":\n{\"type\":\"C\",\"dc\":\"\"}\n{\"type\":\"D\"}".to_vec(),
            Format::Ndjson,
            vec!["A", "B", "D"],
            vec![(1, NotAMap, false), (2, MissingType, false), (4, NotAMap, false), (5, Malformed, false), (6, BadTag, false)],
        ),
        (
            "array with mixed elements",
            br#"[{"type":"A"}, 42, {"x":1}, {"type":"B","dc":"a:b"}, {"type":"C","epoch":1.5}, [], null, {"type":"D"}]"#.to_vec(),
            Format::JsonArray,
            vec!["A", "D"],
            vec![(1, NotAMap, false), (2, MissingType, false), (3, BadTag, false), (4, BadEpoch, false), (5, NotAMap, false), (6, NotAMap, false)],
        ),
        (
            "array with a syntax error loses the whole array",
            br#"[{"type":"A"}, {"type": }]"#.to_vec(),
            Format::JsonArray,
            vec![],
            vec![(0, PayloadError, true)],
        ),
        ("truncated array", br#"[{"type":"A"}"#.to_vec(), Format::JsonArray, vec![], vec![(0, PayloadError, true)]),
        ("malformed object", br#"{"type":"A""#.to_vec(), Format::JsonObject, vec![], vec![(0, PayloadError, true)]),
        ("trailing garbage", br#"{"type":"A"} x"#.to_vec(), Format::JsonObject, vec![], vec![(0, PayloadError, true)]),
        ("garbage", b"hello".to_vec(), Format::JsonObject, vec![], vec![(0, PayloadError, true)]),
        ("statsd line", b"api.hits:1|c|@0.5|#env:prod".to_vec(), Format::JsonObject, vec![], vec![(0, StatsdLine, true)]),
        ("statsd lines", b"a:1|c\nb:2|g\nc:x|ms\n".to_vec(), Format::Ndjson, vec![], vec![(0, StatsdLine, true)]),
        ("almost statsd", b"a:1|zz".to_vec(), Format::JsonObject, vec![], vec![(0, PayloadError, true)]),
        (
            "statsd after a JSON line is one malformed line",
            b"{\"type\":\"A\"}\na:1|c".to_vec(),
            Format::Ndjson,
            vec!["A"],
            vec![(1, Malformed, false)],
        ),
        ("scalar", b"42".to_vec(), Format::JsonObject, vec![], vec![(0, NotAMap, false)]),
        ("string", b"\"s\"".to_vec(), Format::JsonObject, vec![], vec![(0, NotAMap, false)]),
        ("missing type", br#"{"dc":"x"}"#.to_vec(), Format::JsonObject, vec![], vec![(0, MissingType, false)]),
        ("null type", br#"{"type":null}"#.to_vec(), Format::JsonObject, vec![], vec![(0, MissingType, false)]),
        ("depth 32 ok", deep_ok.into_bytes(), Format::JsonObject, vec!["A"], vec![]),
        ("depth 33 too deep", deep_bad.clone().into_bytes(), Format::JsonObject, vec![], vec![(0, TooDeep, false)]),
        ("too deep element", deep_in_array.into_bytes(), Format::JsonArray, vec!["A", "B"], vec![(1, TooDeep, false)]),
        // Unclosed: the splitter skips nesting without recursion and finds the end missing.
        ("10k [", hostile.clone().into_bytes(), Format::JsonArray, vec![], vec![(0, PayloadError, true)]),
        ("10k [ closed", balanced.clone().into_bytes(), Format::JsonArray, vec![], vec![(0, NotAMap, false)]),
        (
            "10k [ closed in an array element",
            format!(r#"[{{"type":"A"}},{{"x":{balanced}}},{{"type":"B"}}]"#).into_bytes(),
            Format::JsonArray,
            vec!["A", "B"],
            vec![(1, TooDeep, false)],
        ),
        ("10k [ in an object", format!("{{\"x\":{hostile}").into_bytes(), Format::JsonObject, vec![], vec![(0, TooDeep, false)]),
        ("10k [ ndjson line", ndjson_hostile.into_bytes(), Format::Ndjson, vec!["A", "B"], vec![(1, Malformed, false)]),
        ("10k [ ndjson object line", ndjson_hostile_obj.into_bytes(), Format::Ndjson, vec!["A", "B"], vec![(1, TooDeep, false)]),
        (
            "duplicate type",
            br#"{"type":"A","type":"B"}"#.to_vec(),
            Format::JsonObject,
            vec![],
            vec![(0, BadTag, false)],
        ),
        (
            "duplicate keys below the top level are kept",
            br#"{"type":"A","x":{"k":1,"k":2}}"#.to_vec(),
            Format::JsonObject,
            vec!["A"],
            vec![],
        ),
    ];
    for (name, payload, format, want_types, want_drops) in cases {
        assert_eq!(detect(&payload), format, "{name}: detect");
        let out = ingest(&payload);
        assert_eq!(out.format, format, "{name}: format");
        assert_eq!(
            types(&out),
            want_types,
            "{name}: accepted ({:?})",
            out.dropped
        );
        assert_eq!(drops(&out), want_drops, "{name}: drops {:?}", out.dropped);
        if out.payload_rejected().is_some() {
            assert!(out.events.is_empty(), "{name}");
        }
    }
}

#[test]
fn drop_offsets() {
    let out = ingest(b"{\"type\":\"A\"}\n\n  {\"type\":\n{\"type\":\"C\"}");
    assert_eq!(out.dropped[0].offset, 16);
    let out = ingest(br#"[{"type":"A"}, 42]"#);
    assert_eq!(out.dropped[0].offset, 15);
    let out = ingest(b"\xEF\xBB\xBF[{\"type\":\"A\"}, 42]");
    assert_eq!(out.dropped[0].offset, 18);
}

#[test]
fn invalid_utf8_reports_the_offset() {
    // A JSON document: the whole payload.
    let out = ingest(b"{\"type\":\"A\",\"x\":\"\xff\"}");
    assert_eq!(drops(&out), vec![(0, DropReason::BadUtf8, true)]);
    assert_eq!(out.dropped[0].offset, 17);
    assert!(
        out.dropped[0].detail.contains("17"),
        "{}",
        out.dropped[0].detail
    );
    // Behind a BOM: offsets count from the first byte received.
    let out = ingest(b"\xEF\xBB\xBF[{\"type\":\"A\",\"x\":\"ok\xc3\x28\"}]");
    assert_eq!(drops(&out), vec![(0, DropReason::BadUtf8, true)]);
    assert_eq!(out.dropped[0].offset, 3 + 20);
    // NDJSON: only the line.
    let out = ingest(b"{\"type\":\"A\"}\n{\"type\":\"\xfe\"}\n{\"type\":\"B\"}");
    assert_eq!(types(&out), ["A", "B"]);
    assert_eq!(drops(&out), vec![(1, DropReason::BadUtf8, false)]);
    assert_eq!(out.dropped[0].offset, 13 + 9);
    // A key with invalid UTF-8.
    let out = ingest(b"{\"type\":\"A\",\"\xc0\":1}");
    assert_eq!(drops(&out), vec![(0, DropReason::BadUtf8, true)]);
}

#[test]
fn tags_are_filled_into_the_event() {
    let out = ingest(br#"{"type":"WEB","x":1}"#);
    let e = &out.events[0];
    assert_eq!(
        (e.epoch, e.dc.as_str(), e.type_.as_str(), e.subtype.as_str()),
        (NOW, "ams1", "WEB", "")
    );
    assert_eq!(
        sereal::json::to_string(&e.event.to_value().unwrap()),
        format!(r#"{{"type":"WEB","x":1,"epoch":{NOW},"dc":"ams1","subtype":""}}"#)
    );
    // Given tags are kept where they are; nulls are filled in place.
    let out = ingest(
        format!(
            r#"{{"epoch":{},"dc":"lhr2","type":"CRON","subtype":null}}"#,
            NOW - 5
        )
        .as_bytes(),
    );
    let e = &out.events[0];
    assert_eq!(
        (e.epoch, e.dc.as_str(), e.type_.as_str(), e.subtype.as_str()),
        (NOW - 5, "lhr2", "CRON", "")
    );
    assert_eq!(
        sereal::json::to_string(&e.event.to_value().unwrap()),
        format!(
            r#"{{"epoch":{},"dc":"lhr2","type":"CRON","subtype":""}}"#,
            NOW - 5
        )
    );
    let out = ingest(br#"{"type":"LB","subtype":"health","dc":null,"epoch":null}"#);
    let e = &out.events[0];
    assert_eq!(
        (e.epoch, e.dc.as_str(), e.subtype.as_str()),
        (NOW, "ams1", "health")
    );
    assert_eq!(
        sereal::json::to_string(&e.event.to_value().unwrap()),
        format!(r#"{{"type":"LB","subtype":"health","dc":"ams1","epoch":{NOW}}}"#)
    );
}

#[test]
fn tag_validation() {
    use DropReason::*;
    let long = "x".repeat(64);
    let too_long = "x".repeat(65);
    let cases: Vec<(String, Option<DropReason>)> = vec![
        (r#"{"type":"WEB"}"#.into(), None),
        (
            format!(r#"{{"type":"{long}","dc":"{long}","subtype":"{long}"}}"#),
            None,
        ),
        (format!(r#"{{"type":"{too_long}"}}"#), Some(BadTag)),
        (format!(r#"{{"type":"A","dc":"{too_long}"}}"#), Some(BadTag)),
        (
            format!(r#"{{"type":"A","subtype":"{too_long}"}}"#),
            Some(BadTag),
        ),
        (r#"{"type":"A","subtype":""}"#.into(), None),
        (r#"{"type":""}"#.into(), Some(BadTag)),
        (r#"{"type":"A","dc":""}"#.into(), Some(BadTag)),
        (r#"{"type":5}"#.into(), Some(BadTag)),
        (r#"{"type":["A"]}"#.into(), Some(BadTag)),
        (r#"{"type":"A:B"}"#.into(), Some(BadTag)),
        (r#"{"type":"A|B"}"#.into(), Some(BadTag)),
        (r#"{"type":"A\nB"}"#.into(), Some(BadTag)),
        (r#"{"type":"A\u0000"}"#.into(), Some(BadTag)),
        (r#"{"type":"A","subtype":"a:b"}"#.into(), Some(BadTag)),
        (r#"{"type":"A","subtype":false}"#.into(), Some(BadTag)),
        (r#"{"type":"é-ü"}"#.into(), None),
        (r#"{"type":"A","dc":"x","dc":"y"}"#.into(), Some(BadTag)),
        (r#"{"type":"A","epoch":1,"epoch":2}"#.into(), Some(BadEpoch)),
        (r#"{"Type":"A"}"#.into(), Some(MissingType)),
    ];
    for (json, want) in cases {
        let out = ingest(json.as_bytes());
        let got = out.dropped.first().map(|d| d.reason);
        assert_eq!(got, want, "{json}: {:?}", out.dropped);
        assert_eq!(out.events.len(), usize::from(want.is_none()), "{json}");
    }
}

#[test]
fn epoch_window() {
    let day = 86_400;
    let cases: Vec<(String, Option<i64>)> = vec![
        (NOW.to_string(), Some(NOW)),
        ((NOW - 10 * day).to_string(), Some(NOW - 10 * day)),
        ((NOW - 10 * day - 1).to_string(), None),
        ((NOW + 300).to_string(), Some(NOW + 300)),
        ((NOW + 301).to_string(), None),
        ("0".into(), None),
        ("-1".into(), None),
        // Float seconds are floored (`sluice_collector::epoch`; tests/epoch_forms.rs has the rest).
        ("1.7e9".into(), Some(NOW)),
        ("1700000000.0".into(), Some(NOW)),
        (format!("\"{NOW}\""), None),
        ("18446744073709551615".into(), None),
        ("true".into(), None),
        ("{}".into(), None),
    ];
    for (epoch, want) in &cases {
        let out = ingest(format!(r#"{{"type":"A","epoch":{epoch}}}"#).as_bytes());
        match want {
            Some(e) => assert_eq!(out.events[0].epoch, *e, "{epoch}"),
            None => assert_eq!(
                drops(&out),
                vec![(0, DropReason::BadEpoch, false)],
                "{epoch}"
            ),
        }
    }
    // A configured window.
    let cfg = IngestConfig {
        max_past_secs: 60,
        max_future_secs: 0,
        ..Default::default()
    };
    let mut ing = Ingestor::new(cfg).unwrap();
    for (epoch, ok) in [
        (NOW, true),
        (NOW - 60, true),
        (NOW - 61, false),
        (NOW + 1, false),
    ] {
        let out = ing.ingest(format!(r#"{{"type":"A","epoch":{epoch}}}"#).as_bytes(), NOW);
        assert_eq!(out.events.len() == 1, ok, "{epoch}");
    }
    // Near the ends of i64, nothing overflows.
    let out = ing.ingest(br#"{"type":"A","epoch":-9223372036854775808}"#, i64::MIN);
    assert_eq!(out.events.len(), 1);
    let out = ing.ingest(br#"{"type":"A"}"#, i64::MAX);
    assert_eq!(out.events[0].epoch, i64::MAX);
}

#[test]
fn size_and_count_limits() {
    // Oversized event: only it is dropped.
    let big = "x".repeat(70_000);
    let payload =
        format!("{{\"type\":\"A\"}}\n{{\"type\":\"B\",\"x\":\"{big}\"}}\n{{\"type\":\"C\"}}\n");
    let out = ingest(payload.as_bytes());
    assert_eq!(types(&out), ["A", "C"]);
    assert_eq!(drops(&out), vec![(1, DropReason::Oversized, false)]);
    let payload = format!("[{{\"type\":\"A\"}},{{\"type\":\"B\",\"x\":\"{big}\"}}]");
    let out = ingest(payload.as_bytes());
    assert_eq!(drops(&out), vec![(1, DropReason::Oversized, false)]);
    let out = ingest(format!("{{\"type\":\"B\",\"x\":\"{big}\"}}").as_bytes());
    assert_eq!(drops(&out), vec![(0, DropReason::Oversized, false)]);

    // Oversized payload: the whole of it.
    let cfg = IngestConfig {
        max_payload_bytes: 100,
        max_events: 3,
        ..Default::default()
    };
    let mut ing = Ingestor::new(cfg).unwrap();
    let out = ing.ingest(&[b' '; 101], NOW);
    assert_eq!(drops(&out), vec![(0, DropReason::Oversized, true)]);

    // Too many events: the excess as one drop with a count.
    let out = ing.ingest(
        br#"[{"type":"A"},{"type":"B"},5,{"type":"D"},{"type":"E"}]"#,
        NOW,
    );
    assert_eq!(types(&out), ["A", "B"]);
    assert_eq!(
        drops(&out),
        vec![
            (2, DropReason::NotAMap, false),
            (3, DropReason::TooMany, false)
        ]
    );
    assert_eq!(out.dropped[1].count, 2);
    assert_eq!(out.dropped_count(), 3);
    let out = ing.ingest(
        b"{\"type\":\"A\"}\n{\"type\":\"B\"}\n\n{\"type\":\"C\"}\n{\"type\":\"D\"}\n\n{}\n",
        NOW,
    );
    assert_eq!(types(&out), ["A", "B", "C"]);
    assert_eq!(drops(&out), vec![(3, DropReason::TooMany, false)]);
    assert_eq!(out.dropped[0].count, 2);
    let out = ing.ingest(
        b"[{\"type\":\"A\"},{\"type\":\"B\"}]\n[{\"type\":\"C\"},{\"type\":\"D\"}]\n{}",
        NOW,
    );
    assert_eq!(types(&out), ["A", "B", "C"]);
    assert_eq!(out.dropped_count(), 2);
}

#[test]
fn config_is_validated() {
    assert!(Ingestor::new(IngestConfig {
        dc: "a:b".into(),
        ..Default::default()
    })
    .is_err());
    assert!(Ingestor::new(IngestConfig {
        dc: "".into(),
        ..Default::default()
    })
    .is_err());
    assert!(Ingestor::new(IngestConfig {
        max_depth: 0,
        ..Default::default()
    })
    .is_err());
    assert!(Ingestor::new(IngestConfig {
        max_past_secs: -1,
        ..Default::default()
    })
    .is_err());
    assert!(Ingestor::new(IngestConfig::default()).is_ok());
}

fn hash(pairs: &[(&str, Value)]) -> Value {
    Value::Hash(
        pairs
            .iter()
            .map(|(k, v)| (Key::from(*k), v.clone()))
            .collect(),
    )
}

fn s(x: &str) -> Value {
    Value::String(x.into())
}

#[test]
fn sereal_payloads() {
    let ev = |t: &str| {
        hash(&[
            ("type", s(t)),
            ("ms", Value::Int(5)),
            ("path", s("/index/page/long/enough")),
        ])
    };
    let array = Value::Array(
        (0..200)
            .map(|i| ev(if i % 2 == 0 { "A" } else { "B" }))
            .collect(),
    );
    let option_sets = [
        EncoderOptions::default(),
        EncoderOptions {
            protocol: 3,
            ..Default::default()
        },
        EncoderOptions::original_events(),
        EncoderOptions {
            compression: Compression::Zstd { level: 3 },
            compress_threshold: 0,
            ..Default::default()
        },
        EncoderOptions {
            compression: Compression::Snappy,
            dedupe_strings: true,
            ..Default::default()
        },
    ];
    for opts in &option_sets {
        let doc = sereal::to_vec(&array, opts).unwrap();
        assert_eq!(detect(&doc), Format::Sereal);
        let out = ingest(&doc);
        assert!(out.is_clean(), "{opts:?}: {:?}", out.dropped);
        assert_eq!(out.events.len(), 200);
        assert_eq!(out.events[1].type_, "B");
        assert_eq!(
            out.events[0]
                .event
                .to_value()
                .unwrap()
                .get("dc")
                .and_then(Value::as_str),
            Some("ams1")
        );
        assert_eq!(
            out.events[0]
                .event
                .to_value()
                .unwrap()
                .get("path")
                .and_then(Value::as_str),
            Some("/index/page/long/enough")
        );
    }
    // A compressed document really is compressed.
    let doc = sereal::to_vec(&array, &EncoderOptions::original_events()).unwrap();
    assert_eq!(doc[4] >> 4, 3, "zlib document type");

    // One event as the body; a scalar body; mixed elements.
    let out = ingest(&sereal::to_vec(&ev("X"), &EncoderOptions::default()).unwrap());
    assert_eq!(types(&out), ["X"]);
    let out = ingest(&sereal::to_vec(&Value::Int(3), &EncoderOptions::default()).unwrap());
    assert_eq!(drops(&out), vec![(0, DropReason::NotAMap, false)]);
    let mixed = Value::Array(vec![
        ev("A"),
        Value::Int(1),
        hash(&[("x", Value::Int(1))]),
        hash(&[("type", Value::Int(1))]),
        ev("E"),
    ]);
    let out = ingest(&sereal::to_vec(&mixed, &EncoderOptions::default()).unwrap());
    assert_eq!(types(&out), ["A", "E"]);
    assert_eq!(
        drops(&out),
        vec![
            (1, DropReason::NotAMap, false),
            (2, DropReason::MissingType, false),
            (3, DropReason::BadTag, false)
        ]
    );
    // Binary strings (as Perl writes them) work as tags.
    let perl = Value::Array(vec![Value::Hash(vec![
        (
            Key::Binary(b"type"[..].into()),
            Value::Binary(b"WEB".to_vec()),
        ),
        (
            Key::Binary(b"dc"[..].into()),
            Value::Binary(b"fra3".to_vec()),
        ),
    ])]);
    let out = ingest(&sereal::to_vec(&perl, &EncoderOptions::default()).unwrap());
    assert_eq!(
        (out.events[0].type_.as_str(), out.events[0].dc.as_str()),
        ("WEB", "fra3")
    );

    // Too deep, oversized.
    let mut deep = Value::Int(1);
    for _ in 0..40 {
        deep = Value::Array(vec![deep]);
    }
    let out = ingest(
        &sereal::to_vec(
            &Value::Array(vec![ev("A"), hash(&[("type", s("B")), ("d", deep)])]),
            &Default::default(),
        )
        .unwrap(),
    );
    assert_eq!(types(&out), ["A"]);
    assert_eq!(drops(&out)[0].1, DropReason::TooDeep);
    let out = ingest(
        &sereal::to_vec(
            &Value::Array(vec![
                hash(&[("type", s("B")), ("x", s(&"y".repeat(70_000)))]),
                ev("A"),
            ]),
            &Default::default(),
        )
        .unwrap(),
    );
    assert_eq!(types(&out), ["A"]);
    assert_eq!(drops(&out), vec![(0, DropReason::Oversized, false)]);

    // Corrupt documents: the whole payload.
    for opts in &option_sets {
        let doc = sereal::to_vec(&array, opts).unwrap();
        for corrupt in [
            doc[..doc.len() / 2].to_vec(),
            [doc.as_slice(), b"xx"].concat(),
            doc[..6].to_vec(),
        ] {
            let out = ingest(&corrupt);
            assert_eq!(out.format, Format::Sereal);
            assert!(out.events.is_empty());
            assert_eq!(
                drops(&out),
                vec![(0, DropReason::PayloadError, true)],
                "{opts:?}"
            );
        }
    }
    let out = ingest(b"=srl");
    assert_eq!(drops(&out), vec![(0, DropReason::PayloadError, true)]);
}

#[test]
fn generated_events_round_trip() {
    let mut buf = Vec::new();
    sluice_gen::write_json_lines(&sluice_gen::GenConfig::web(1, 1000), &mut buf).unwrap();
    let text = std::str::from_utf8(&buf).unwrap();
    let mut ing = ingestor();
    let out = ing.ingest(&buf, NOW);
    assert_eq!(out.format, Format::Ndjson);
    assert!(out.is_clean(), "{:?}", out.dropped.first());
    assert_eq!(out.events.len(), 1000);
    for (line, ev) in text.lines().zip(&out.events) {
        let want: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            sereal::json::to_json_value(&ev.event.to_value().unwrap()),
            want
        );
        // Taken by the fast path, and encoded as the codec's own JSON mapping is.
        assert!(matches!(ev.event, EventBody::Fragment(_)));
        let value = sereal::json::from_json_slice(line.as_bytes()).unwrap();
        assert_eq!(encoded(&ev.event), encoded(&EventBody::Value(value)));
        assert_eq!(ev.type_, "WEB");
        assert_eq!(Some(ev.dc.as_str()), want["dc"].as_str());
        assert_eq!(Some(ev.epoch), want["epoch"].as_i64());
    }
    // On the value path (here: an integer beyond 64 bits), equal keys share one allocation,
    // across events and payloads.
    let key_of = |v: &EventBody, i: usize| match v {
        EventBody::Value(Value::Hash(h)) => h[i].0.clone(),
        other => panic!("not a value tree: {other:?}"),
    };
    let slow: String = text
        .lines()
        .map(|l| format!("{},\"big\":123456789012345678901}}\n", &l[..l.len() - 1]))
        .collect();
    let slow_out = ing.ingest(slow.as_bytes(), NOW);
    let again = ing.ingest(slow.lines().next().unwrap().as_bytes(), NOW);
    for (a, b) in [
        (&slow_out.events[0].event, &slow_out.events[999].event),
        (&slow_out.events[0].event, &again.events[0].event),
    ] {
        match (key_of(a, 2), key_of(b, 2)) {
            (Key::Utf8(x), Key::Utf8(y)) => assert!(std::sync::Arc::ptr_eq(&x, &y)),
            other => panic!("{other:?}"),
        }
    }
    // The same events as a JSON array and as a Sereal blob give the same result.
    let array = format!("[{}]", text.trim_end().replace('\n', ","));
    assert_eq!(ing.ingest(array.as_bytes(), NOW).events, out.events);
    let blob = sereal::to_vec(
        &sluice_gen::events_array(&sluice_gen::GenConfig::web(1, 1000)),
        &EncoderOptions::original_events(),
    )
    .unwrap();
    let from_blob = ing.ingest(&blob, NOW);
    assert!(from_blob.is_clean());
    for (a, b) in from_blob.events.iter().zip(&out.events) {
        assert_eq!(
            sereal::json::to_json_value(&a.event.to_value().unwrap()),
            sereal::json::to_json_value(&b.event.to_value().unwrap())
        );
    }
}

#[test]
fn drop_counters() {
    let mut c = DropCounters::new();
    let mut ing = Ingestor::new(IngestConfig {
        max_events: 2,
        ..Default::default()
    })
    .unwrap();
    c.add(&ing.ingest(b"{\"type\":\"A\"}\n{\"x\":1}\n{\"type\":\"C\"}\n{}", NOW));
    c.add(&ing.ingest(b"", NOW));
    c.add(&ing.ingest(b"[1]", NOW));
    assert_eq!(c.get(DropReason::MissingType), 1);
    assert_eq!(c.get(DropReason::TooMany), 2);
    assert_eq!(c.get(DropReason::PayloadError), 1);
    assert_eq!(c.get(DropReason::NotAMap), 1);
    assert_eq!(
        (c.accepted, c.payloads, c.payloads_rejected, c.total()),
        (1, 3, 1, 5)
    );
    let names: Vec<&str> = c.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "payload_error",
            "malformed",
            "oversized",
            "too_deep",
            "not_a_map",
            "missing_type",
            "bad_tag",
            "bad_epoch",
            "bad_utf8",
            "too_many",
            "shed",
            "statsd_line"
        ]
    );
    let mut sum = DropCounters::new();
    sum.merge(&c);
    sum.merge(&c);
    assert_eq!(sum.total(), 10);
}

/// The original's producers used integer data-centre ids (`1413813813:1:type1:subtype1`): the
/// tag is the decimal form, the event keeps the number.
#[test]
fn integer_dc_is_accepted() {
    let out = ingest(br#"{"type":"type1","subtype":"subtype1","dc":1}"#);
    assert!(out.is_clean(), "{:?}", out.dropped);
    let e = &out.events[0];
    assert_eq!(e.dc, "1");
    assert_eq!(e.event.to_value().unwrap().get("dc"), Some(&Value::Int(1)));
    let out = ingest(br#"{"type":"A","dc":18446744073709551615}"#);
    assert_eq!(out.events[0].dc, "18446744073709551615");
    let out = ingest(br#"{"type":"A","dc":-3}"#);
    assert_eq!(out.events[0].dc, "-3");
    // Other non-strings are still refused.
    for bad in [
        r#"{"type":"A","dc":1.5}"#,
        r#"{"type":"A","dc":true}"#,
        r#"{"type":"A","dc":[1]}"#,
    ] {
        let out = ingest(bad.as_bytes());
        assert_eq!(drops(&out), [(0, DropReason::BadTag, false)], "{bad}");
    }
}

/// An unchanged Perl producer of the original: `Sereal::Encoder` encodes a hash whose `dc` is a
/// number (the reference encoder is the oracle, run as a real process).
#[test]
fn original_perl_producer_with_integer_dc() {
    let script = format!(
        r#"use Sereal::Encoder; binmode STDOUT; print Sereal::Encoder->new->encode({{epoch => {}, dc => 1, type => "type1", subtype => "subtype1", ms => 12}});"#,
        NOW - 1
    );
    let out = std::process::Command::new("perl")
        .args(["-e", &script])
        .output()
        .expect("perl runs (make deps installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = ingest(&out.stdout);
    assert!(got.is_clean(), "{:?}", got.dropped);
    let e = &got.events[0];
    assert_eq!(
        (e.epoch, e.dc.as_str(), e.type_.as_str(), e.subtype.as_str()),
        (NOW - 1, "1", "type1", "subtype1")
    );
    assert_eq!(e.event.to_value().unwrap().get("dc"), Some(&Value::Int(1)));
}

/// Integers beyond 64 bits are kept exactly (as their digits), never rounded to a float; in
/// documents the fast JSON path declines too (deep nesting), and never inside strings.
#[test]
fn big_integers_are_kept_exactly() {
    let big = "123456789012345678901234567890";
    let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    let cases = [
        format!(r#"{{"type":"A","n":{big}}}"#),
        format!(r#"{{"type":"A","n":-{big},"s":"x\"{big}"}}"#),
        format!(r#"{{"type":"A","deep":{deep},"n":{big}}}"#),
    ];
    for json in &cases {
        let cfg = IngestConfig {
            dc: "ams1".into(),
            max_depth: 64,
            ..Default::default()
        };
        let out = Ingestor::new(cfg).unwrap().ingest(json.as_bytes(), NOW);
        assert!(out.is_clean(), "{json}: {:?}", out.dropped);
        let n = out.events[0]
            .event
            .to_value()
            .unwrap()
            .get("n")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let want = if json.contains(&format!("-{big}")) {
            format!("-{big}")
        } else {
            big.to_owned()
        };
        assert_eq!(n.as_deref(), Some(want.as_str()), "{json}");
    }
    // In range: still numbers; a string holding digits is untouched.
    let out = ingest(br#"{"type":"A","u":18446744073709551615,"i":-9223372036854775808,"f":1e30,"s":"123456789012345678901234567890"}"#);
    let e = &out.events[0].event.to_value().unwrap();
    assert_eq!(e.get("u"), Some(&Value::UInt(u64::MAX)));
    assert_eq!(e.get("i"), Some(&Value::Int(i64::MIN)));
    assert_eq!(e.get("f"), Some(&Value::Float(1e30)));
    assert_eq!(e.get("s").and_then(Value::as_str), Some(big));
}

/// A dropped event carries the tags ingest could read of it (for the per-second completeness
/// counts), whichever path dropped it; none when its `type` could not be read.
#[test]
fn dropped_events_carry_their_tags() {
    use sluice_collector::DropTags;
    let mut ingestor = Ingestor::new(IngestConfig {
        dc: "ams1".into(),
        max_event_bytes: 60,
        max_past_secs: 100,
        max_future_secs: 100,
        ..Default::default()
    })
    .unwrap();
    let tags = |epoch: Option<i64>, dc: Option<&str>, type_: &str, subtype: &str| {
        Some(DropTags {
            epoch,
            dc: dc.map(str::to_owned),
            type_: type_.into(),
            subtype: subtype.into(),
        })
    };
    let long_type = format!(r#"{{"type":"{}"}}"#, "t".repeat(100));
    let payload = format!(
        r#"[{{"epoch":1000,"dc":"x","type":"t","subtype":"s","big":[1,2,3,4,5,6,7,8,9]}}, 42,
        {{"epoch":5,"type":"a:b"}}, {{"epoch":999,"type":"u","dc":7,"subtype":"a|b"}},
        {{"epoch":5,"type":"v","dc":"a:b"}}, {{"type":"w","type":"w"}}, {long_type}]"#
    );
    let out = ingestor.ingest(payload.as_bytes(), 1000);
    let got: Vec<(DropReason, Option<DropTags>)> = out
        .dropped
        .iter()
        .map(|d| (d.reason, d.tags.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            // Too large: read without building the event.
            (DropReason::Oversized, tags(Some(1000), Some("x"), "t", "s")),
            (DropReason::NotAMap, None),
            // A type ingest refuses is no type.
            (DropReason::BadTag, None),
            // An integer dc is named as ingest names it; a bad subtype reads as "".
            (DropReason::BadTag, tags(Some(999), Some("7"), "u", "")),
            // A bad dc and an epoch outside the window are left to the fallback.
            (DropReason::BadTag, tags(None, None, "v", "")),
            // A repeated tag key: nothing is read.
            (DropReason::BadTag, None),
            (DropReason::Oversized, None),
        ]
    );
    // NDJSON: a malformed line is read up to its first value; a long line by its text.
    let deep = format!(
        r#"{{"type":"d","x":{}1{}}}"#,
        "[".repeat(40),
        "]".repeat(40)
    );
    let ndjson = format!("{deep}\n{{\"type\":\"m\"}} x\n[1,\n");
    let out = ingestor.ingest(ndjson.as_bytes(), 1000);
    let got: Vec<(DropReason, Option<DropTags>)> = out
        .dropped
        .iter()
        .map(|d| (d.reason, d.tags.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (DropReason::Oversized, tags(None, None, "d", "")),
            (DropReason::Malformed, tags(None, None, "m", "")),
            (DropReason::Malformed, None),
        ]
    );
    // Whole payloads and Sereal events carry none.
    let out = ingestor.ingest(b"{\"type\":", 1000);
    assert_eq!(out.dropped[0].tags, None);
}
