//! `epoch` as people write it (`sluice_collector::epoch`) through ingest: milliseconds, float
//! seconds and RFC 3339 strings in JSON objects, arrays, NDJSON and Sereal payloads are stored
//! as the whole second (the event's `epoch` field an integer); anything else is `bad_epoch`
//! with a hint naming the accepted forms; a drop is counted at its event's second; a WAL
//! holding such payloads replays to the same events, each stored once.

use std::sync::Arc;

use sereal::{EncoderOptions, Key, Value};
use sluice_collector::aggregate::{Aggregator, AggregatorConfig};
use sluice_collector::exactly_once::replay;
use sluice_collector::wal::{FsyncPolicy, Wal, WalConfig};
use sluice_collector::{DropReason, IngestConfig, IngestOutcome, Ingestor};
use sluice_store::{InMemoryStore, Store};

mod common;
use common::{bag, read_back};

/// 2026-11-29T05:00:00Z.
const T: i64 = 1_795_928_400;

fn ingest(payload: &[u8]) -> IngestOutcome {
    Ingestor::new(IngestConfig::default())
        .unwrap()
        .ingest(payload, T + 10)
}

/// Each accepted event's tag epoch and the integer its stored `epoch` field holds.
fn epochs(out: &IngestOutcome) -> Vec<(i64, Option<i64>)> {
    out.events
        .iter()
        .map(|e| {
            let v = e.event.to_value().unwrap();
            (e.epoch, v.get("epoch").and_then(Value::as_i64))
        })
        .collect()
}

/// The forms of `T` (and of `T + 1` with a fraction) an event may carry, as JSON text.
fn forms() -> Vec<(String, i64)> {
    vec![
        (T.to_string(), T),
        ((T * 1000).to_string(), T),
        ((T * 1000 + 999).to_string(), T),
        (format!("{T}.75"), T),
        ("1.7959284e9".to_string(), T),
        (format!("{}.5", T * 1000), T),
        ("\"2026-11-29T05:00:00Z\"".into(), T),
        ("\"2026-11-29T06:00:01.9+01:00\"".into(), T + 1),
        ("\"2026-11-29 05:00:00z\"".into(), T),
    ]
}

#[test]
fn every_form_is_stored_as_the_whole_second_in_every_json_shape() {
    for (form, want) in forms() {
        let ev = format!(r#"{{"type":"WEB","epoch":{form},"n":1}}"#);
        let ndjson = format!("{ev}\n{ev}\n");
        let array = format!("[{ev},{ev}]");
        for payload in [ev.clone(), ndjson, array] {
            let out = ingest(payload.as_bytes());
            assert!(out.is_clean(), "{payload}: {:?}", out.dropped);
            assert!(!out.events.is_empty());
            for got in epochs(&out) {
                assert_eq!(got, (want, Some(want)), "{payload}");
            }
        }
    }
}

#[test]
fn sereal_payloads_are_read_the_same_way() {
    let ev = |epoch: Value| {
        Value::Hash(vec![
            (Key::from("type"), Value::String("WEB".into())),
            (Key::from("epoch"), epoch),
        ])
    };
    let doc = Value::Array(vec![
        ev(Value::Int(T * 1000 + 1)),
        ev(Value::Float(T as f64 + 0.5)),
        ev(Value::String("2026-11-29T05:00:00.5Z".into())),
        ev(Value::Binary(b"2026-11-29T05:00:00Z".to_vec())),
        ev(Value::Int(T)),
        ev(Value::String("tomorrow".into())),
    ]);
    let out = ingest(&sereal::to_vec(&doc, &EncoderOptions::default()).unwrap());
    assert_eq!(epochs(&out), vec![(T, Some(T)); 5]);
    assert_eq!(out.dropped.len(), 1, "{:?}", out.dropped);
    assert_eq!(out.dropped[0].reason, DropReason::BadEpoch);
    assert!(out.dropped[0].detail.contains("RFC 3339"));
}

#[test]
fn other_values_are_bad_epoch_with_a_hint() {
    for bad in [
        "\"1795928400\"",
        "\"2026-11-29T05:00:00\"",
        "\"2026-11-29\"",
        "\"soon\"",
        "true",
        "[1]",
        "{}",
        "18446744073709551615",
    ] {
        let out = ingest(format!(r#"{{"type":"WEB","epoch":{bad}}}"#).as_bytes());
        assert!(out.events.is_empty(), "{bad}");
        let d = &out.dropped[0];
        assert_eq!(d.reason, DropReason::BadEpoch, "{bad}");
        for form in ["Unix seconds", "milliseconds", "float seconds", "RFC 3339"] {
            assert!(d.detail.contains(form), "{bad}: {}", d.detail);
        }
    }
    // Outside the window once normalised: still bad_epoch, naming the window.
    let out =
        ingest(format!(r#"{{"type":"WEB","epoch":{}}}"#, (T - 30 * 86_400) * 1000).as_bytes());
    assert_eq!(out.dropped[0].reason, DropReason::BadEpoch);
    assert!(
        out.dropped[0].detail.contains("window"),
        "{}",
        out.dropped[0].detail
    );
}

#[test]
fn a_dropped_event_is_counted_at_its_normalised_second() {
    let cfg = IngestConfig {
        max_event_bytes: 80,
        ..IngestConfig::default()
    };
    let big = "x".repeat(100);
    let payload = format!(
        "{{\"type\":\"WEB\",\"epoch\":{},\"pad\":\"{big}\"}}\n{{\"type\":\"WEB\",\"epoch\":\"2026-11-29T05:00:00Z\",\"pad\":\"{big}\"}}\n",
        T * 1000
    );
    let out = Ingestor::new(cfg)
        .unwrap()
        .ingest(payload.as_bytes(), T + 10);
    assert_eq!(out.dropped.len(), 2, "{:?}", out.dropped);
    for d in &out.dropped {
        assert_eq!(d.reason, DropReason::Oversized);
        assert_eq!(d.tags.as_ref().and_then(|t| t.epoch), Some(T), "{d:?}");
    }
}

/// The WAL logs the payload as received; replay parses it again, so a run that crashes with a
/// second still open stores, after its replay, every event once with the same integer epochs.
#[test]
fn a_replayed_wal_gives_the_same_seconds() {
    let dir = sluice_test_support::temp_dir("epoch-forms-replay");
    let wal_cfg = || WalConfig {
        fsync: FsyncPolicy::Never,
        ..WalConfig::default()
    };
    let store: Arc<InMemoryStore> = Arc::new(InMemoryStore::new());
    let arrival = T + 4;
    // Second T in milliseconds and RFC 3339; second T + 3 as float seconds and an offset.
    let payload = format!(
        "{{\"type\":\"A\",\"epoch\":{},\"n\":1}}\n{{\"type\":\"A\",\"epoch\":\"2026-11-29T05:00:00.250Z\",\"n\":2}}\n\
         {{\"type\":\"A\",\"epoch\":{}.9,\"n\":3}}\n{{\"type\":\"A\",\"epoch\":\"2026-11-29T06:00:03+01:00\",\"n\":4}}\n",
        T * 1000 + 250,
        T + 3
    )
    .into_bytes();
    let want = bag(&Ingestor::new(IngestConfig::default())
        .unwrap()
        .ingest(&payload, arrival)
        .events);
    assert_eq!(want.len(), 4);
    for (event, n) in &want {
        let v: serde_json::Value = serde_json::from_str(event).unwrap();
        assert!(v["epoch"] == T || v["epoch"] == T + 3, "{event}");
        assert_eq!(*n, 1);
    }
    {
        let (wal, _) = Wal::open(&dir, wal_cfg()).unwrap();
        let wal = Arc::new(wal);
        let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
        let log = wal.clone();
        agg.set_note_log(Box::new(move |note| {
            log.append_note(&note.encode(), arrival)?;
            Ok(())
        }));
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let seq = wal.append(&payload, arrival).unwrap();
        agg.add_logged(ing.ingest(&payload, arrival).events, arrival, seq);
        // Second T is stored, T + 3 still open: then the process "crashes".
        assert!(agg.flush_due(T + 3).is_ok());
        assert_eq!(read_back(&*store, T, T + 10).len(), 2);
    }
    let (_wal, records) = Wal::open(&dir, wal_cfg()).unwrap();
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let store_dyn: Arc<dyn Store> = store.clone();
    let mut agg = Aggregator::new(AggregatorConfig::default(), store_dyn).unwrap();
    let report = replay(&records, &mut ing, &mut agg, |now| now);
    assert!(report.bad_notes.is_empty(), "{:?}", report.bad_notes);
    let r = agg.flush_all(T + 20);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(read_back(&*store, T, T + 10), want);
}
