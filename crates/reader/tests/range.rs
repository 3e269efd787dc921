//! Range reads against real blobs in real stores: events from `sluice_gen`, grouped per
//! (epoch, dc, type, subtype), built with `BlobBuilder` (both profiles, a small chunk limit),
//! stored with `put_blob` + `add_to_epoch_index`, read back with `RangeReader`.

use std::collections::BTreeMap;
use std::sync::Arc;

use sereal::{Path, Value};
use sluice_blob::{BlobBuilder, BlobOptions, ChunkId, EventKey, Profile};
use sluice_gen::{GenConfig, Generator};
use sluice_reader::time::{parse_time, TimeError};
use sluice_reader::{
    write_items, Filter, OutputFormat, RangeReader, ReadError, ReadItem, ReadOptions, ReadRequest,
    ReadWarning, Selection,
};
use sluice_store::{BlobKey, EmbeddedStore, InMemoryStore, Namespace, Store};

const START: i64 = 1_700_000_000;
const EPOCHS: i64 = 5;

/// (epoch, dc, type, subtype) → events, in generation order.
type Groups = BTreeMap<GroupKey, Vec<Value>>;
type GroupKey = (i64, String, String, String);
/// What to store instead of a chunk: `None` the real bytes, `Some(None)` nothing (but list it),
/// `Some(Some(bytes))` these bytes.
type Tamper<'a> = &'a dyn Fn(&str, &[u8]) -> Option<Option<Vec<u8>>>;
type Keep = Box<dyn Fn(&GroupKey) -> bool>;

fn groups() -> Groups {
    let cfg = GenConfig {
        dcs: vec!["ams1".into(), "lhr2".into()],
        events_per_second: 240,
        ..GenConfig::mixed(7, 240 * EPOCHS as usize)
    };
    let mut out = Groups::new();
    for ev in Generator::new(cfg) {
        let s = |k: &str| ev.get(k).and_then(|v| v.as_str()).unwrap().to_string();
        let epoch = ev.get("epoch").and_then(|v| v.as_i64()).unwrap();
        out.entry((epoch, s("dc"), s("type"), s("subtype")))
            .or_default()
            .push(ev);
    }
    out
}

struct Written {
    /// Keys of every stored chunk, in the order a reader must return them.
    keys: Vec<String>,
    max_chunks: usize,
}

/// Stores every group; `tamper(key, bytes)` may replace a chunk's bytes (`Some(None)`: do not
/// store it at all, still list it).
fn write(store: &dyn Store, groups: &Groups, tamper: Tamper<'_>) -> Written {
    let opts = |profile| BlobOptions {
        chunk_limit: 700,
        split_threads: 1,
        ..BlobOptions::with_profile(profile)
    };
    let mut original = BlobBuilder::new(opts(Profile::Original)).unwrap();
    let mut default = BlobBuilder::new(opts(Profile::default())).unwrap();
    let mut keys = Vec::new();
    let mut max_chunks = 0;
    for (n, ((epoch, dc, type_, subtype), events)) in groups.iter().enumerate() {
        let builder = if n % 2 == 0 {
            &mut original
        } else {
            &mut default
        };
        let blobs = builder.build(events).unwrap();
        max_chunks = max_chunks.max(blobs.len());
        let mut entries = Vec::new();
        for blob in &blobs {
            let key =
                EventKey::new(*epoch, dc, type_, subtype, ChunkId::plain(blob.index())).unwrap();
            let text = key.to_string();
            match tamper(&text, blob.as_bytes()) {
                None => {
                    store
                        .put_blob(
                            &Namespace::Events,
                            BlobKey::new(*epoch, &text),
                            blob.as_bytes(),
                        )
                        .unwrap();
                }
                Some(Some(bad)) => {
                    store
                        .put_blob(&Namespace::Events, BlobKey::new(*epoch, &text), &bad)
                        .unwrap();
                }
                Some(None) => {}
            }
            entries.push(key.index_entry().to_string());
            keys.push(text);
        }
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        store.add_to_epoch_index(*epoch, dc, &refs).unwrap();
    }
    Written { keys, max_chunks }
}

fn no_tamper(_: &str, _: &[u8]) -> Option<Option<Vec<u8>>> {
    None
}

fn json(v: &Value) -> String {
    sereal::json::to_string(v)
}

/// Expected events of `groups` passing `keep`, in read order, as JSON.
fn expected(groups: &Groups, keep: impl Fn(&GroupKey) -> bool) -> Vec<String> {
    groups
        .iter()
        .filter(|(k, _)| keep(k))
        .flat_map(|(_, evs)| evs.iter().map(json))
        .collect()
}

/// Reads and splits into (event JSON, warnings).
fn read(store: &dyn Store, req: ReadRequest) -> (Vec<String>, Vec<ReadWarning>) {
    read_with(store, req, ReadOptions::default())
}

fn read_with(
    store: &dyn Store,
    req: ReadRequest,
    opts: ReadOptions,
) -> (Vec<String>, Vec<ReadWarning>) {
    let mut events = Vec::new();
    let mut warnings = Vec::new();
    let mut last: Option<(i64, String)> = None;
    for item in RangeReader::new(store, req, opts).unwrap() {
        match item {
            ReadItem::Event(e) => {
                let here = (e.key.epoch(), e.key.dc().to_string());
                if let Some(prev) = &last {
                    assert!(*prev <= here, "out of order: {prev:?} then {here:?}");
                }
                last = Some(here);
                events.push(json(&e.value));
            }
            ReadItem::Warning(w) => warnings.push(w),
            ReadItem::Notice(_) => {}
        }
    }
    (events, warnings)
}

fn stores() -> Vec<(&'static str, Box<dyn Store>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let embedded = EmbeddedStore::open(dir.path()).unwrap();
    vec![
        ("embedded", Box::new(embedded), Some(dir)),
        ("memory", Box::new(InMemoryStore::new()), None),
    ]
}

#[test]
fn full_range_returns_every_event_once_in_order() {
    let groups = groups();
    for (name, store, _dir) in stores() {
        let written = write(&*store, &groups, &no_tamper);
        assert!(
            written.max_chunks >= 11,
            "want a group of 11+ chunks (10 sorts after 2), got {}",
            written.max_chunks
        );
        let (events, warnings) = read(&*store, ReadRequest::new(START, START + EPOCHS));
        assert!(warnings.is_empty(), "{name}: {warnings:?}");
        let want = expected(&groups, |_| true);
        assert_eq!(events.len(), 240 * EPOCHS as usize, "{name}");
        assert_eq!(
            events, want,
            "{name}: events differ from what was written (content or order)"
        );

        // Chunk keys come in index order (numeric chunk order), each once.
        let mut seen = Vec::new();
        for item in RangeReader::new(
            &*store,
            ReadRequest::new(START, START + EPOCHS),
            ReadOptions::default(),
        )
        .unwrap()
        {
            if let ReadItem::Event(e) = item {
                let k = e.key.to_string();
                if seen.last() != Some(&k) {
                    seen.push(k);
                }
            }
        }
        assert_eq!(seen, written.keys, "{name}: chunk order");

        // The range is half-open, and a wider range around the data changes nothing.
        let (mid, _) = read(&*store, ReadRequest::new(START + 1, START + 3));
        assert_eq!(
            mid,
            expected(&groups, |k| (START + 1..START + 3).contains(&k.0)),
            "{name}"
        );
        let (wide, _) = read(&*store, ReadRequest::new(START - 100, START + 100));
        assert_eq!(wide, want, "{name}");
        let (none, _) = read(&*store, ReadRequest::new(START, START));
        assert!(none.is_empty());

        // Batch size changes nothing.
        for batch in [1, 3, 1000] {
            let opts = ReadOptions {
                fetch_batch: batch,
                ..ReadOptions::default()
            };
            assert_eq!(
                read_with(&*store, ReadRequest::new(START, START + EPOCHS), opts).0,
                want,
                "{name} batch {batch}"
            );
        }
    }
}

#[test]
fn dc_type_and_subtype_filters() {
    let groups = groups();
    let store = InMemoryStore::new();
    write(&store, &groups, &no_tamper);
    let range = || ReadRequest::new(START, START + EPOCHS);
    let sel = |selection: Selection| ReadRequest {
        selection,
        ..range()
    };
    let cases: Vec<(ReadRequest, Keep)> = vec![
        (
            sel(Selection {
                dc: Some("lhr2".into()),
                ..Selection::default()
            }),
            Box::new(|k| k.1 == "lhr2"),
        ),
        (
            sel(Selection {
                type_: Some("LB".into()),
                ..Selection::default()
            }),
            Box::new(|k| k.2 == "LB"),
        ),
        (
            sel(Selection {
                type_: Some("WEB".into()),
                subtype: Some("api".into()),
                ..Selection::default()
            }),
            Box::new(|k| k.2 == "WEB" && k.3 == "api"),
        ),
        (
            sel(Selection {
                subtype: Some("".into()),
                ..Selection::default()
            }),
            Box::new(|k| k.3.is_empty()),
        ),
        (
            sel(Selection {
                dc: Some("ams1".into()),
                type_: Some("CRON".into()),
                ..Selection::default()
            }),
            Box::new(|k| k.1 == "ams1" && k.2 == "CRON"),
        ),
        (
            sel(Selection {
                dc: Some("nowhere".into()),
                ..Selection::default()
            }),
            Box::new(|_| false),
        ),
        (
            sel(Selection {
                type_: Some("NOPE".into()),
                ..Selection::default()
            }),
            Box::new(|_| false),
        ),
    ];
    for (req, keep) in cases {
        let label = format!(
            "{:?}/{:?}/{:?}",
            req.selection.dc, req.selection.type_, req.selection.subtype
        );
        let (events, warnings) = read(&store, req);
        assert!(warnings.is_empty());
        let want = expected(&groups, keep);
        assert_eq!(events.len(), want.len(), "{label}");
        assert_eq!(events, want, "{label}");
    }
    // Sanity: the filters selected something (CRON has only the empty subtype).
    assert!(!expected(&groups, |k| k.3.is_empty()).is_empty());
}

/// What `select` + `filter` must give, computed on fully decoded events.
fn select_expected(groups: &Groups, select: &[&str], filter: Option<&Filter>) -> Vec<String> {
    let paths: Vec<Path> = select.iter().map(|p| Path::parse(p).unwrap()).collect();
    let mut out = Vec::new();
    for ev in groups.values().flatten() {
        if filter.is_some_and(|f| !f.matches(ev)) {
            continue;
        }
        if paths.is_empty() {
            out.push(json(ev));
            continue;
        }
        let mut obj = serde_json::Map::new();
        for (text, p) in select.iter().zip(&paths) {
            let found = p.eval(ev);
            let v = if text.contains("[*]") {
                serde_json::Value::Array(
                    found
                        .iter()
                        .map(|v| sereal::json::to_json_value(v))
                        .collect(),
                )
            } else {
                found
                    .first()
                    .map(|v| sereal::json::to_json_value(v))
                    .unwrap_or(serde_json::Value::Null)
            };
            obj.insert(text.to_string(), v);
        }
        out.push(serde_json::to_string(&obj).unwrap());
    }
    out
}

#[test]
fn select_and_where_equal_filtering_decoded_events() {
    let groups = groups();
    let store = InMemoryStore::new();
    write(&store, &groups, &no_tamper);
    let cases: &[(&[&str], Option<&str>)] = &[
        (
            &["status", "path", "experiments[*].id", "timings.total_ms"],
            None,
        ),
        (&["request_id", "status"], Some("status >= 400")),
        (
            &[],
            Some(r#"type == "WEB" and not path ~ "^/static/" and status in [404, 500]"#),
        ),
        (
            &["host", "tls.version"],
            Some("exists tls and tls.resumed == true"),
        ),
        (
            &["queries[*].table", "missing.field"],
            Some(r#"lang == "de" or currency == "JPY""#),
        ),
        (&["job"], Some("nothing_here > 1")),
        // The pipeline bench's read; and a path both selected and filtered on, next to a prefix.
        (
            &["path", "request_id", "timings.total_ms"],
            Some("status >= 500"),
        ),
        (
            &["status", "timings", "timings.db_ms"],
            Some("status >= 400 and timings.total_ms < 100"),
        ),
    ];
    for (select, filter) in cases {
        let filter = filter.map(|f| Filter::parse(f).unwrap());
        let selection = Selection {
            select: select.iter().map(|p| Path::parse(p).unwrap()).collect(),
            filter: filter.clone(),
            ..Selection::default()
        };
        let req = ReadRequest::selected(START, START + EPOCHS, selection);
        let (events, warnings) = read(&store, req);
        assert!(warnings.is_empty());
        let want = select_expected(&groups, select, filter.as_ref());
        assert_eq!(events.len(), want.len(), "{select:?} {filter:?}");
        assert_eq!(events, want, "{select:?} {filter:?}");
    }
    // The filters are not trivial.
    let f = Filter::parse("status >= 400").unwrap();
    let n = select_expected(&groups, &[], Some(&f)).len();
    assert!(n > 0 && n < 240 * EPOCHS as usize, "{n}");
}

#[test]
fn corrupt_and_missing_chunks_are_reported_and_the_rest_returned() {
    let groups = groups();
    // Pick victims among the chunks: one of garbage bytes, one bit-flipped, one missing.
    let probe = InMemoryStore::new();
    let all = write(&probe, &groups, &no_tamper).keys;
    let garbage = all[3].clone();
    let flipped = all[all.len() / 2].clone();
    let missing = all[all.len() - 2].clone();
    let tamper = |key: &str, bytes: &[u8]| -> Option<Option<Vec<u8>>> {
        if key == garbage {
            Some(Some(b"definitely not a blob, just some bytes".to_vec()))
        } else if key == flipped {
            let mut b = bytes.to_vec();
            b[bytes.len() / 2] ^= 0x10;
            Some(Some(b))
        } else if key == missing {
            Some(None)
        } else {
            None
        }
    };
    for (name, store, _dir) in stores() {
        write(&*store, &groups, &tamper);
        // Expected: every event except those of the three victim chunks. Rebuild the chunks'
        // contents from a clean store to know which events they held.
        let mut want = Vec::new();
        for item in RangeReader::new(
            &probe,
            ReadRequest::new(START, START + EPOCHS),
            ReadOptions::default(),
        )
        .unwrap()
        {
            if let ReadItem::Event(e) = item {
                let k = e.key.to_string();
                if k != garbage && k != flipped && k != missing {
                    want.push(json(&e.value));
                }
            }
        }
        // Bytes damaged before they reached the store pass its own checksum: only the SHA-1
        // finds them (see `a_store_that_checks_each_read_skips_the_sha1_unless_asked`).
        let verify = || ReadOptions {
            verify_sha1: true,
            ..ReadOptions::default()
        };
        let (events, warnings) =
            read_with(&*store, ReadRequest::new(START, START + EPOCHS), verify());
        assert_eq!(events, want, "{name}");
        let keys: Vec<&str> = warnings.iter().map(|w| w.key.as_str()).collect();
        // Warnings come in read order, i.e. the order of the keys.
        let mut victims = vec![garbage.as_str(), flipped.as_str(), missing.as_str()];
        victims.sort_by_key(|k| all.iter().position(|a| a == k));
        assert_eq!(keys, victims, "{name}: {warnings:?}");
        let reason = |k: &str| warnings.iter().find(|w| w.key == k).unwrap().reason.clone();
        assert!(
            reason(&flipped).contains("SHA-1"),
            "{name}: {}",
            reason(&flipped)
        );
        assert!(
            reason(&missing).contains("missing"),
            "{name}: {}",
            reason(&missing)
        );
        assert!(
            reason(&garbage).contains("trailer"),
            "{name}: {}",
            reason(&garbage)
        );
        for w in &warnings {
            assert!(w.to_string().starts_with(&w.key));
        }

        // Same with select + where (the lazy path) and the writer's summary.
        let selection = Selection {
            filter: Some(Filter::parse("exists dc").unwrap()),
            select: vec![Path::parse("dc").unwrap()],
            ..Selection::default()
        };
        let req = ReadRequest::selected(START, START + EPOCHS, selection);
        let reader = RangeReader::new(&*store, req, verify()).unwrap();
        let mut seen = Vec::new();
        let mut out = Vec::new();
        let summary = write_items(reader, OutputFormat::Json, &mut out, |w| {
            seen.push(w.key.clone())
        })
        .unwrap();
        assert_eq!(summary.warnings, 3);
        assert_eq!(summary.events as usize, want.len());
        assert_eq!(seen, victims);
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), want.len());
    }
}

#[test]
fn a_store_that_checks_each_read_skips_the_sha1_unless_asked() {
    let groups = groups();
    let probe = InMemoryStore::new();
    let all = write(&probe, &groups, &no_tamper).keys;
    let victim = all[all.len() / 2].clone();
    // The document intact, its SHA-1 wrong: what only the trailer check can see.
    let tamper = |key: &str, bytes: &[u8]| -> Option<Option<Vec<u8>>> {
        (key == victim).then(|| {
            let mut b = bytes.to_vec();
            let last = b.len() - 1;
            b[last] ^= 0x01;
            Some(b)
        })
    };
    let whole = read(&probe, ReadRequest::new(START, START + EPOCHS)).0;
    for (name, store, _dir) in stores() {
        write(&*store, &groups, &tamper);
        let checks = store.checks_each_read();
        assert_eq!(checks, name == "embedded", "{name}");
        let (events, warnings) = read(&*store, ReadRequest::new(START, START + EPOCHS));
        if checks {
            // The embedded store checked the CRC-32 it wrote with these bytes: not hashed again.
            assert_eq!(events, whole, "{name}");
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        } else {
            assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
            assert!(warnings[0].reason.contains("SHA-1"), "{name}: {warnings:?}");
        }
        let verify = ReadOptions {
            verify_sha1: true,
            ..ReadOptions::default()
        };
        let (events, warnings) =
            read_with(&*store, ReadRequest::new(START, START + EPOCHS), verify);
        assert!(events.len() < whole.len(), "{name}");
        let keys: Vec<&str> = warnings.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(keys, [victim.as_str()], "{name}");
        assert!(warnings[0].reason.contains("SHA-1"), "{name}: {warnings:?}");
    }
}

#[test]
fn bad_index_entries_and_bad_blob_bodies_are_warnings() {
    let store = InMemoryStore::new();
    // A valid blob whose body is not an array of events; an index entry that is not one.
    let doc = sereal::to_vec(&Value::Int(5), &sereal::EncoderOptions::default()).unwrap();
    let blob = sluice_blob::with_trailer(&doc);
    store
        .put_blob(
            &Namespace::Events,
            BlobKey::new(START, &format!("{START}:ams1:WEB::0")),
            &blob,
        )
        .unwrap();
    store
        .add_to_epoch_index(START, "ams1", &["WEB::0", "not-an-entry"])
        .unwrap();
    for lazy in [false, true] {
        let selection = Selection {
            filter: lazy.then(|| Filter::parse("exists x").unwrap()),
            ..Selection::default()
        };
        let req = ReadRequest::selected(START, START + 1, selection);
        let (events, warnings) = read(&store, req);
        assert!(events.is_empty());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(warnings[0].key, format!("{START}-ams1"));
        assert!(warnings[0].reason.contains("not-an-entry"));
        assert_eq!(warnings[1].key, format!("{START}:ams1:WEB::0"));
        assert!(
            warnings[1].reason.contains("array"),
            "{}",
            warnings[1].reason
        );
    }
}

#[test]
fn output_formats_ndjson_and_sereal() {
    let groups = groups();
    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    write(&*store, &groups, &no_tamper);
    let want = expected(&groups, |k| k.0 == START + 2);
    let req = || ReadRequest::new(START + 2, START + 3);

    // NDJSON: one event per line, each line parses as JSON.
    let reader = RangeReader::new(store.clone(), req(), ReadOptions::default()).unwrap();
    let mut out = Vec::new();
    let summary = write_items(reader, OutputFormat::Json, &mut out, |w| panic!("{w}")).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(summary.events as usize, want.len());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), want.len());
    for (line, w) in lines.iter().zip(&want) {
        let a: serde_json::Value = serde_json::from_str(line).unwrap();
        let b: serde_json::Value = serde_json::from_str(w).unwrap();
        assert_eq!(a, b);
    }

    // Sereal: concatenated documents, one per event.
    let reader = RangeReader::new(store.clone(), req(), ReadOptions::default()).unwrap();
    let mut out = Vec::new();
    write_items(reader, "sereal".parse().unwrap(), &mut out, |w| {
        panic!("{w}")
    })
    .unwrap();
    let mut decoder = sereal::Decoder::new();
    let mut rest = &out[..];
    let mut got = Vec::new();
    while !rest.is_empty() {
        let doc = decoder.decode_document(rest).unwrap();
        got.push(json(&doc.body));
        rest = &rest[doc.len..];
    }
    assert_eq!(got, want);
    assert!("xml".parse::<OutputFormat>().is_err());
}

#[test]
fn bad_requests_and_stats() {
    let store = InMemoryStore::new();
    let groups = groups();
    write(&store, &groups, &no_tamper);
    assert!(matches!(
        RangeReader::new(
            &store,
            ReadRequest::new(START + 1, START),
            ReadOptions::default()
        ),
        Err(ReadError::BadRequest(_))
    ));
    let mut reader = RangeReader::new(
        &store,
        ReadRequest::new(START, START + EPOCHS),
        ReadOptions::default(),
    )
    .unwrap();
    assert_eq!(reader.stats().epochs, 2 * EPOCHS as usize);
    let n = reader.by_ref().count();
    let stats = reader.stats();
    assert_eq!(stats.events as usize, n);
    assert_eq!(stats.warnings, 0);
    assert!(stats.chunks >= groups.len() && stats.bytes > 0);
}

#[test]
fn time_arguments() {
    let now = 1_800_000_000;
    assert_eq!(parse_time("1700000000", now), Ok(1_700_000_000));
    assert_eq!(parse_time("0", now), Ok(0));
    assert_eq!(parse_time(" 1700000000 ", now), Ok(1_700_000_000));
    assert_eq!(parse_time("1970-01-01T00:00:00Z", now), Ok(0));
    assert_eq!(parse_time("2023-11-14T22:13:20Z", now), Ok(1_700_000_000));
    assert_eq!(parse_time("2023-11-14t22:13:20z", now), Ok(1_700_000_000));
    assert_eq!(parse_time("2023-11-14 22:13:20Z", now), Ok(1_700_000_000));
    assert_eq!(
        parse_time("2023-11-14T22:13:20.999Z", now),
        Ok(1_700_000_000)
    );
    assert_eq!(
        parse_time("2023-11-15T00:13:20+02:00", now),
        Ok(1_700_000_000)
    );
    assert_eq!(
        parse_time("2023-11-14T17:43:20-04:30", now),
        Ok(1_700_000_000)
    );
    assert_eq!(parse_time("2026-11-22T08:00:00Z", now), Ok(1_795_334_400));
    assert_eq!(parse_time("2024-02-29T00:00:00Z", now), Ok(1_709_164_800));
    assert_eq!(parse_time("now", now), Ok(now));
    assert_eq!(parse_time("NOW", now), Ok(now));
    assert_eq!(parse_time("-90s", now), Ok(now - 90));
    assert_eq!(parse_time("-5m", now), Ok(now - 300));
    assert_eq!(parse_time("-2h", now), Ok(now - 7_200));
    assert_eq!(parse_time("-1d", now), Ok(now - 86_400));
    assert_eq!(parse_time("+10s", now), Ok(now + 10));
    assert_eq!(parse_time("-0s", now), Ok(now));

    assert_eq!(parse_time("", now), Err(TimeError::Empty));
    assert_eq!(parse_time("   ", now), Err(TimeError::Empty));
    for bad in ["yesterday", "5m", "1.5", "17e8", "0x10", "-", "--5m"] {
        let e = parse_time(bad, now).unwrap_err();
        assert!(
            matches!(
                e,
                TimeError::Unrecognised(_) | TimeError::BadRelative { .. }
            ),
            "{bad}: {e:?}"
        );
        assert!(!e.to_string().is_empty());
    }
    for bad in ["-5", "-5y", "-5mm", "-m"] {
        assert!(
            matches!(parse_time(bad, now), Err(TimeError::BadRelative { .. })),
            "{bad}"
        );
    }
    for bad in [
        "2023-13-01T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2023-04-31T00:00:00Z",
        "2023-11-14T24:00:00Z",
        "2023-11-14T22:60:00Z",
        "2023-11-14T22:13:20+2:00",
        "2023-11-14T22:13:20+02:00x",
        "2023-11-14T22:13:20.Z",
        "2023-11-14X22:13:20Z",
        "2023-1-14T22:13:20Z",
    ] {
        let e = parse_time(bad, now).unwrap_err();
        assert!(matches!(e, TimeError::BadRfc3339 { .. }), "{bad}: {e:?}");
        assert!(e.to_string().contains("RFC 3339"));
    }
    assert!(matches!(
        parse_time("1969-12-31T23:59:59Z", now),
        Err(TimeError::OutOfRange(_))
    ));
    assert!(matches!(
        parse_time("99999999999999999999", now),
        Err(TimeError::OutOfRange(_))
    ));
    assert!(matches!(
        parse_time("-999999999999999d", now),
        Err(TimeError::OutOfRange(_))
    ));
}

#[test]
fn a_bad_element_index_is_a_notice_and_changes_no_result() {
    let groups = groups();
    // Flip a byte in the element index of every `default` chunk (the trailer recomputed, as a
    // buggy writer would have stored it): the reader must not trust it.
    let flip = |_: &str, bytes: &[u8]| -> Option<Option<Vec<u8>>> {
        let sereal_part = &bytes[..bytes.len() - sluice_blob::TRAILER_LEN];
        let h = sereal::header::parse(sereal_part).unwrap();
        let range = h.user_header?;
        let mut doc = sereal_part.to_vec();
        doc[range.end - 6] ^= 0x10;
        Some(Some(sluice_blob::with_trailer(&doc)))
    };
    let good = InMemoryStore::new();
    write(&good, &groups, &no_tamper);
    let bad = InMemoryStore::new();
    write(&bad, &groups, &flip);
    let filter = Filter::parse("status >= 400").unwrap();
    let selection = Selection {
        select: ["path", "request_id", "timings.total_ms"]
            .iter()
            .map(|p| Path::parse(p).unwrap())
            .collect(),
        filter: Some(filter.clone()),
        ..Selection::default()
    };
    let want = select_expected(
        &groups,
        &["path", "request_id", "timings.total_ms"],
        Some(&filter),
    );
    for (name, store, bad_index) in [("good", &good, false), ("bad", &bad, true)] {
        let req = ReadRequest::selected(START, START + EPOCHS, selection.clone());
        let (mut events, mut notices, mut warnings) = (Vec::new(), Vec::new(), Vec::new());
        for item in RangeReader::new(store, req, ReadOptions::default()).unwrap() {
            match item {
                ReadItem::Event(e) => events.push(json(&e.value)),
                ReadItem::Notice(n) => notices.push(n),
                ReadItem::Warning(w) => warnings.push(w),
            }
        }
        assert!(warnings.is_empty(), "{name}: {warnings:?}");
        assert_eq!(events, want, "{name}");
        if bad_index {
            assert!(!notices.is_empty(), "a bad index is reported");
            for n in &notices {
                assert!(
                    n.reason.starts_with("element index: ")
                        && n.reason.ends_with("events found by walking instead"),
                    "{n}"
                );
            }
        } else {
            assert!(notices.is_empty(), "{notices:?}");
        }
    }
}
