//! Acknowledged load for the crash tests (`crashes.rs`, `failpoints.rs`): HTTP clients posting
//! batches of events over several (dc, type, subtype) groups, a fifth of each batch dated 2–3 s
//! back (late), to whichever server is running; then the check that every acknowledged id was
//! stored exactly once and nothing else appeared.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use super::common::now;
use super::process::try_request;

/// Events per batch: four fifths current, one fifth late.
pub const BATCH: u64 = 50;

/// The (type, subtype) groups events are spread over (all in dc `local`); with 2 or 4 pipeline
/// threads they belong to different shards, so a payload's events are routed between shards.
pub const GROUPS: [(&str, &str); 4] = [("KILL", "a"), ("KILL", "b"), ("WEB", "a"), ("LB", "x")];

/// One batch: ids `batch * BATCH + n`, over every group; the last fifth dated 2–3 s before now.
pub fn batch_body(batch: u64, now: i64) -> String {
    (0..BATCH)
        .map(|n| {
            let epoch = if is_late(n) { now - 2 - (n % 2) as i64 } else { now };
            let (type_, subtype) = GROUPS[((batch + n) % GROUPS.len() as u64) as usize];
            json!({"type": type_, "subtype": subtype, "epoch": epoch, "dc": "local", "id": batch * BATCH + n})
                .to_string()
                + "\n"
        })
        .collect()
}

/// Whether event `id` (or its index in a batch) is one of the late ones.
pub fn is_late(id: u64) -> bool {
    id % BATCH >= BATCH * 4 / 5
}

/// What the clients sent.
#[derive(Default, Debug)]
pub struct Sent {
    /// Batches answered 200 (every event of them must be stored exactly once).
    pub acked: Vec<u64>,
    /// Batches sent but not acknowledged (at most once).
    pub unacked: Vec<u64>,
}

/// Clients posting batches to the server at `addr` (none while it is `None`).
pub struct Load {
    pub addr: Arc<Mutex<Option<SocketAddr>>>,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Sent>>,
    clients: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `clients` posting threads.
    pub fn start(clients: usize) -> Load {
        let addr: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Sent::default()));
        let next_batch = Arc::new(AtomicU64::new(0));
        let clients = (0..clients)
            .map(|_| {
                let (addr, stop, sent, next_batch) =
                    (addr.clone(), stop.clone(), sent.clone(), next_batch.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Some(a) = *addr.lock().unwrap() else {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        };
                        let batch = next_batch.fetch_add(1, Ordering::Relaxed);
                        let body = batch_body(batch, now());
                        match try_request(a, "POST", "/v1/events", body.as_bytes()) {
                            Ok(r) if r.status == 200 => sent.lock().unwrap().acked.push(batch),
                            // Refused (backpressure, unavailable): not acknowledged.
                            Ok(r) if r.status == 503 => sent.lock().unwrap().unacked.push(batch),
                            Ok(r) => panic!("batch {batch}: {} {}", r.status, r.text()),
                            Err(_) => {
                                sent.lock().unwrap().unacked.push(batch);
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            addr,
            stop,
            sent,
            clients,
        }
    }

    /// Points the clients at `addr` (`None`: they wait).
    pub fn target(&self, addr: Option<SocketAddr>) {
        *self.addr.lock().unwrap() = addr;
    }

    /// Batches acknowledged so far.
    pub fn acked(&self) -> usize {
        self.sent.lock().unwrap().acked.len()
    }

    /// Stops the clients and returns what they sent.
    pub fn stop(self) -> Sent {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.join().unwrap();
        }
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

/// What a check found.
#[derive(Debug)]
pub struct Verdict {
    pub acked_events: u64,
    pub read: usize,
    pub lost: Vec<u64>,
    pub twice: Vec<(u64, u32)>,
    pub unknown: Vec<u64>,
}

impl Verdict {
    /// One line for the test output.
    pub fn summary(&self) -> String {
        let late_lost = self.lost.iter().filter(|id| is_late(**id)).count();
        let late_twice = self.twice.iter().filter(|(id, _)| is_late(*id)).count();
        format!(
            "{} acked events, {} read, {} lost ({late_lost} late), {} twice ({late_twice} late)",
            self.acked_events,
            self.read,
            self.lost.len(),
            self.twice.len()
        )
    }

    /// Panics unless every acknowledged id was read once and nothing unknown was.
    pub fn assert_exactly_once(&self) {
        assert!(
            self.lost.is_empty(),
            "acknowledged events lost: {:?} ({})",
            &self.lost[..self.lost.len().min(20)],
            self.summary()
        );
        assert!(
            self.twice.is_empty(),
            "events stored twice: {:?} ({})",
            &self.twice[..self.twice.len().min(20)],
            self.summary()
        );
        assert!(
            self.unknown.is_empty(),
            "events nobody sent: {:?}",
            &self.unknown[..self.unknown.len().min(20)]
        );
    }
}

/// Checks `events` (as read back) against `sent`.
pub fn check(sent: &Sent, events: &[Value]) -> Verdict {
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for e in events {
        let id = e["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("an event without an id: {e}"));
        *seen.entry(id).or_default() += 1;
    }
    let ids = |b: &u64| (b * BATCH)..((b + 1) * BATCH);
    let lost = sent
        .acked
        .iter()
        .flat_map(ids)
        .filter(|id| !seen.contains_key(id))
        .collect();
    let twice = seen
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(&id, &c)| (id, c))
        .collect();
    let known: BTreeSet<u64> = sent.acked.iter().chain(&sent.unacked).copied().collect();
    let unknown = seen
        .keys()
        .filter(|id| !known.contains(&(*id / BATCH)))
        .copied()
        .collect();
    Verdict {
        acked_events: sent.acked.len() as u64 * BATCH,
        read: events.len(),
        lost,
        twice,
        unknown,
    }
}

/// The completeness counts' `stored` summed over `from..to` (`GET /v1/counts`), per (type,
/// subtype), from the server at `server`.
pub fn counted(server: &super::process::Server, from: i64, to: i64) -> BTreeMap<String, u64> {
    let r = server.get(&format!("/v1/counts?from={from}&to={to}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut by_group = BTreeMap::new();
    for l in super::common::lines(&r.text()) {
        let (Some(t), Some(s)) = (l["type"].as_str(), l["subtype"].as_str()) else {
            continue; // the trailer
        };
        let stored = l["stored"]
            .as_u64()
            .unwrap_or_else(|| panic!("a counts line without stored: {l}"));
        *by_group.entry(format!("{t}:{s}")).or_insert(0) += stored;
    }
    by_group
}

/// The events read, per (type, subtype), as [`counted`] keys them.
pub fn read_by_group(events: &[Value]) -> BTreeMap<String, u64> {
    let mut by_group = BTreeMap::new();
    for e in events {
        let key = format!(
            "{}:{}",
            e["type"].as_str().unwrap_or_default(),
            e["subtype"].as_str().unwrap_or_default()
        );
        *by_group.entry(key).or_insert(0) += 1;
    }
    by_group
}
