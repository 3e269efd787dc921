//! Replication on a real 3-node Cassandra cluster on 127.0.0.1-3 (skipped only with
//! `SLUICE_SKIP_CASSANDRA=1`): `sluice serve --store cassandra://…?rf=3&write_cl=quorum` keeps
//! ingesting while one node is stopped mid-ingest; reads go on; nothing acknowledged is lost;
//! after the node returns every acknowledged id reads back exactly once.
//!
//! One test in its own binary: it stops a node of the shared cluster.

mod cassandra_common;
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cassandra_common::{assert_exactly_once, cat_ids, emit, events, ids, Keyspace};
use common::{now, serve_store_http_only};
use sluice_store_cassandra::testing::{cluster, run_script};

struct RestartOnDrop;
impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        run_script(&["start-node", "3"]);
    }
}

#[test]
fn rf3_one_node_stopped_mid_ingest_loses_nothing_acknowledged() {
    let Some(c) = cluster(3, "rf3") else {
        return;
    };
    let ks = Keyspace::new(&c.hosts, "rf3");
    let url = ks.url("rf=3&write_cl=quorum&read_cl=one&timeout_ms=3000");
    let read_quorum = ks.url("read_cl=quorum");
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut server, base) = serve_store_http_only(&url, tmp.path());
    // Warm-up: the server connects and creates the keyspace (schema agreement on 3 nodes).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !emit("http", &base, &events("warmup", 1, now(), "ams")) {
        assert!(Instant::now() < deadline, "the server never acknowledged");
    }
    // An emitter sends a batch of 100 every 200 ms until told to stop; a batch is acknowledged
    // when `emit` succeeds.
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let sent = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let first = now();
    let emitter = std::thread::spawn({
        let (acked, sent, stop, base) = (acked.clone(), sent.clone(), stop.clone(), base.clone());
        move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let batch = events(&format!("b{n}"), 100, now(), "ams");
                let batch_ids = ids(&batch);
                sent.lock().expect("lock").extend(batch_ids.clone());
                if emit("http", &base, &batch) {
                    acked.lock().expect("lock").extend(batch_ids);
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    let restart = RestartOnDrop;
    run_script(&["stop-node", "3"]);
    // Ingest and reads go on with node 3 down.
    std::thread::sleep(Duration::from_secs(4));
    let before: BTreeSet<String> = acked.lock().expect("lock").clone();
    assert!(!before.is_empty());
    let got = cat_ids(&read_quorum, first - 5, now() + 5).expect("reads go on at QUORUM");
    assert!(!got.is_empty(), "nothing readable with a node down");
    std::thread::sleep(Duration::from_secs(2));
    drop(restart); // node 3 back
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    emitter.join().expect("emitter");
    let acked = acked.lock().expect("lock").clone();
    let sent = sent.lock().expect("lock").clone();
    assert!(acked.len() >= 1000, "only {} acknowledged", acked.len());
    let to = now() + 60;
    let mut sent = sent;
    sent.insert("warmup-0".to_string());
    let mut acked = acked;
    acked.insert("warmup-0".to_string());
    assert_exactly_once(
        &read_quorum,
        first - 65,
        to,
        &acked,
        &sent,
        Duration::from_secs(60),
    );
    server.terminate(Duration::from_secs(20));
}
