//! The hub's contracts: WAL order under concurrent appends and durability lag, slow tails
//! dropped without slowing ingest, nothing built without tails, WAL failure and shutdown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sereal::Value;
use sluice_blob::Profile;
use sluice_collector::wal::{FsyncPolicy, Wal, WalConfig};
use sluice_collector::{EventBody, ParsedEvent};
use sluice_reader::LiveDoc;
use tokio::sync::mpsc;

use super::*;
use crate::metrics::Metrics;
use crate::pipeline::shards::Shards;

/// Durability the test grants: `wait_durable(seq)` blocks until the mark reaches `seq`, or
/// fails while `fail` is set; `granted` is the highest seq it let through.
#[derive(Default)]
struct Gate {
    mark: Mutex<u64>,
    moved: Condvar,
    fail: Mutex<Option<String>>,
    granted: AtomicU64,
}

impl Gate {
    fn set(&self, mark: u64) {
        *self.mark.lock().unwrap() = mark;
        self.moved.notify_all();
    }

    fn fail(&self, why: &str) {
        *self.fail.lock().unwrap() = Some(why.into());
        self.moved.notify_all();
    }
}

impl Durability for Gate {
    fn wait_durable(&self, first: u64, upto: u64) -> Result<u64, String> {
        let mut mark = self.mark.lock().unwrap();
        loop {
            if let Some(why) = self.fail.lock().unwrap().take() {
                return Err(why);
            }
            if *mark >= first {
                let durable = upto.min(*mark);
                self.granted.fetch_max(durable, Ordering::SeqCst);
                return Ok(durable);
            }
            // Bounded, so that a failing test ends instead of joining a hub that waits forever.
            let (m, waited) = self
                .moved
                .wait_timeout(mark, Duration::from_secs(10))
                .unwrap();
            if waited.timed_out() {
                return Err("the test never made the record durable".into());
            }
            mark = m;
        }
    }
}

fn hub_with(
    gate: Arc<Gate>,
    queue: usize,
    profile: Profile,
    last: u64,
) -> (LiveHub, SharedMetrics) {
    let metrics: SharedMetrics = Arc::new(Metrics::new());
    let settings = LiveSettings {
        queue_records: queue,
        profile,
        collector: Some("c1".into()),
    };
    let hub = LiveHub::start(settings, gate, last, metrics.clone()).unwrap();
    (hub, metrics)
}

/// A record appended: its seq and the ids of its events as its parts hold them.
type Sent = (u64, Vec<i64>);

/// One event of group (`type_`) with id `id`.
fn event(type_: &str, id: i64) -> ParsedEvent {
    let v = sereal::json::from_json_value(&serde_json::json!({
        "epoch": 100, "dc": "ams1", "type": type_, "subtype": "", "id": id,
    }));
    ParsedEvent {
        epoch: 100,
        dc: "ams1".into(),
        type_: type_.into(),
        subtype: String::new(),
        event: EventBody::Value(v),
    }
}

/// The ids of a document's events, part by part.
fn ids(doc: &LiveDoc) -> Vec<i64> {
    doc.parts
        .iter()
        .flat_map(|p| {
            p.blob
                .as_blob_ref()
                .decode(&sereal::Limits::default())
                .unwrap()
        })
        .map(|e| e.get("id").and_then(Value::as_i64).unwrap())
        .collect()
}

fn recv(sub: &LiveSubscription) -> Option<Arc<LiveDoc>> {
    sub.recv_timeout(Duration::from_secs(5)).unwrap()
}

fn none_within(sub: &LiveSubscription, ms: u64) -> bool {
    matches!(sub.recv_timeout(Duration::from_millis(ms)), Ok(None))
}

/// Publishes record `seq` with one event of id `seq` (no append: the order alone).
fn told(hub: &LiveHub, seq: u64) {
    hub.reserve().publish(seq, &[event("WEB", seq as i64)]);
}

#[test]
fn a_record_waits_for_an_earlier_append_and_for_durability() {
    let gate = Arc::new(Gate::default());
    let (hub, _m) = hub_with(gate.clone(), 16, Profile::default(), 0);
    let sub = hub.subscribe();
    assert_eq!((sub.start(), sub.collector().as_deref()), (0, Some("c1")));
    gate.set(u64::MAX);
    // Two appends under way; the later reservation finishes first as record 2.
    let first = hub.reserve();
    let second = hub.reserve();
    second.publish(2, &[event("WEB", 2)]);
    assert!(
        none_within(&sub, 150),
        "2 released while the append of 1 was under way"
    );
    first.publish(1, &[event("WEB", 1)]);
    assert_eq!(recv(&sub).map(|d| d.seq), Some(1));
    assert_eq!(recv(&sub).map(|d| d.seq), Some(2));

    // Durability lag: 3 and 4 are told, only 3 is durable.
    gate.set(2);
    told(&hub, 3);
    told(&hub, 4);
    assert!(none_within(&sub, 150), "released before durable");
    gate.set(3);
    let d3 = recv(&sub).unwrap();
    assert_eq!((d3.seq, ids(&d3)), (3, vec![3]));
    assert!(none_within(&sub, 150), "4 released before durable");
    gate.set(4);
    assert_eq!(recv(&sub).map(|d| d.seq), Some(4));
    // A failed append only lifts its reservation: later records flow.
    drop(hub.reserve());
    gate.set(6);
    told(&hub, 6);
    assert_eq!(recv(&sub).map(|d| d.seq), Some(6));
}

/// The real append path: shards append concurrently to a real WAL (with done notes between
/// them), durability lags behind; every subscriber gets exactly the payload records above its
/// start, strictly increasing, none missing, each only once durable, each with its events.
#[test]
fn concurrent_appends_reach_every_subscriber_in_wal_order_without_gaps() {
    let dir = std::env::temp_dir().join(format!("sluice-live-order-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = WalConfig {
        fsync: FsyncPolicy::Never,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(&dir, cfg).unwrap();
    let wal = Arc::new(wal);
    let gate = Arc::new(Gate::default());
    let (hub, metrics) = hub_with(gate.clone(), 100_000, Profile::default(), wal.last_seq());
    let hub = Arc::new(hub);
    let routes = (0..4).map(|_| mpsc::unbounded_channel().0).collect();
    let shards = Arc::new(Shards::new(routes));
    let early = hub.subscribe();
    // Durability trails the log (a record is durable a moment after it is appended).
    let stop = Arc::new(AtomicBool::new(false));
    let lag = {
        let (gate, wal, stop) = (gate.clone(), wal.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let last = wal.last_seq();
                std::thread::sleep(Duration::from_micros(300));
                gate.set(last);
            }
        })
    };
    const PER_THREAD: i64 = 400;
    let appended: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let late: Arc<Mutex<Option<LiveSubscription>>> = Arc::default();
    let appenders: Vec<_> = (0..4)
        .map(|t| {
            let (hub, shards, wal, appended, late) = (
                hub.clone(),
                shards.clone(),
                wal.clone(),
                appended.clone(),
                late.clone(),
            );
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let id = t * 1_000_000 + i * 10;
                    // Two groups per payload, interleaved.
                    let events = vec![
                        event("WEB", id),
                        event("CRON", id + 1),
                        event("WEB", id + 2),
                    ];
                    let r = hub.reserve();
                    let seq = shards.append(&wal, b"{}", 1, 1).unwrap();
                    r.publish(seq, &events);
                    shards.release(seq);
                    appended
                        .lock()
                        .unwrap()
                        .push((seq, vec![id, id + 2, id + 1]));
                    if t == 0 && i % 7 == 0 {
                        wal.append_note(b"note", 1).unwrap();
                    }
                    if t == 1 && i == PER_THREAD / 2 {
                        *late.lock().unwrap() = Some(hub.subscribe());
                    }
                }
            })
        })
        .collect();
    for a in appenders {
        a.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    lag.join().unwrap();
    gate.set(u64::MAX);
    let mut appended = Arc::try_unwrap(appended).unwrap().into_inner().unwrap();
    appended.sort();
    let late = late.lock().unwrap().take().unwrap();
    for sub in [&early, &late] {
        let want: Vec<&Sent> = appended.iter().filter(|(s, _)| *s > sub.start()).collect();
        assert!(!want.is_empty());
        for (seq, ids_sent) in want {
            let doc = recv(sub).unwrap_or_else(|| panic!("record {seq} never came"));
            assert_eq!(
                doc.seq,
                *seq,
                "out of order or a gap (start {})",
                sub.start()
            );
            assert!(
                doc.seq <= gate.granted.load(Ordering::SeqCst),
                "not durable"
            );
            assert_eq!(&ids(&doc), ids_sent, "record {seq}'s events");
        }
        assert!(none_within(sub, 100), "more than the payload records");
    }
    assert!(late.start() > early.start());
    // Each record built once for both subscribers.
    assert_eq!(metrics.tail_live_records.get(), appended.len() as u64);
    drop((early, late));
    assert_eq!(hub.subscribers(), 0);
    assert_eq!(metrics.tail_live_subscribers.get(), 0);
    drop(hub);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_slow_subscriber_is_dropped_and_ingest_never_waits_for_it() {
    let gate = Arc::new(Gate::default());
    gate.set(u64::MAX);
    let (hub, metrics) = hub_with(gate, 4, Profile::default(), 0);
    let slow = hub.subscribe();
    let reader = hub.subscribe();
    // The reader keeps up (reads each record as it comes); the slow one reads nothing, and
    // telling the hub never waits for it.
    let mut telling = Duration::ZERO;
    for seq in 1..=50 {
        let took = Instant::now();
        told(&hub, seq);
        telling += took.elapsed();
        assert_eq!(recv(&reader).map(|d| d.seq), Some(seq));
    }
    assert!(
        telling < Duration::from_secs(2),
        "publishing waited: {telling:?}"
    );
    // The slow one gets what was queued before the drop, then the reason.
    let mut got = Vec::new();
    let ended = loop {
        match slow.recv_timeout(Duration::from_secs(5)) {
            Ok(Some(d)) => got.push(d.seq),
            Ok(None) => panic!("the slow subscriber was not dropped"),
            Err(e) => break e,
        }
    };
    assert_eq!(got, vec![1, 2, 3, 4]);
    assert!(
        ended
            .reason
            .starts_with("slow subscriber: 4 records behind"),
        "{}",
        ended.reason
    );
    assert_eq!(
        metrics.tail_live_dropped.with_label_values(&["slow"]).get(),
        1
    );
    assert_eq!(
        (hub.subscribers(), metrics.tail_live_subscribers.get()),
        (1, 1)
    );
}

#[test]
fn without_subscribers_nothing_is_copied_or_built() {
    let gate = Arc::new(Gate::default());
    gate.set(u64::MAX);
    let (hub, metrics) = hub_with(gate, 16, Profile::default(), 10);
    for seq in 11..=15 {
        told(&hub, seq);
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!((hub.captured(), metrics.tail_live_records.get()), (0, 0));
    // A subscriber starts after them; only what comes after it is copied.
    let sub = hub.subscribe();
    assert_eq!(sub.start(), 15);
    told(&hub, 16);
    assert_eq!(recv(&sub).map(|d| d.seq), Some(16));
    assert_eq!((hub.captured(), metrics.tail_live_records.get()), (1, 1));
    drop(sub);
    told(&hub, 17);
    assert_eq!(hub.captured(), 1);
}

#[test]
fn a_wal_failure_drops_every_subscriber_and_later_ones_still_get_records() {
    let gate = Arc::new(Gate::default());
    let (hub, metrics) = hub_with(gate.clone(), 16, Profile::default(), 0);
    let (a, b) = (hub.subscribe(), hub.subscribe());
    gate.fail("fsync failed");
    told(&hub, 1);
    for sub in [&a, &b] {
        let e = sub.recv_timeout(Duration::from_secs(5)).unwrap_err();
        assert!(
            e.reason.contains("WAL failed (fsync failed)"),
            "{}",
            e.reason
        );
    }
    assert_eq!(
        metrics.tail_live_dropped.with_label_values(&["wal"]).get(),
        2
    );
    gate.set(u64::MAX);
    let c = hub.subscribe();
    assert_eq!(c.start(), 1);
    told(&hub, 2);
    assert_eq!(recv(&c).map(|d| d.seq), Some(2));
}

#[test]
fn shutdown_ends_subscribers_and_the_original_profile_has_no_live_tail() {
    let gate = Arc::new(Gate::default());
    let (hub, metrics) = hub_with(gate.clone(), 16, Profile::default(), 0);
    let sub = hub.subscribe();
    hub.stop();
    let e = sub.recv_timeout(Duration::from_secs(5)).unwrap_err();
    assert!(e.reason.contains("shutting down"), "{}", e.reason);
    assert_eq!(
        metrics
            .tail_live_dropped
            .with_label_values(&["shutdown"])
            .get(),
        1
    );
    assert!(hub.subscribe().recv_timeout(Duration::ZERO).is_err());

    let (off, _) = hub_with(gate, 16, Profile::Original, 0);
    let sub = off.subscribe();
    let e = sub.recv_timeout(Duration::ZERO).unwrap_err();
    assert!(e.reason.contains("`original`"), "{}", e.reason);
    told(&off, 1);
    assert_eq!((off.subscribers(), off.captured()), (0, 0));
}
