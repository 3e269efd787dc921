//! The bad day on a real single-node Cassandra (skipped only with `SLUICE_SKIP_CASSANDRA=1`):
//! the node is down when `sluice serve --store cassandra://…` starts, and goes down again while
//! it runs. Acknowledged ingest goes on (the WAL), the events are held (pending in memory while
//! the aggregator cannot read the epoch index it numbers chunks from; in the spool when a write
//! fails after numbering), and once the node is back every acknowledged id reads back exactly
//! once.
//!
//! One test in its own binary: it stops the shared node, so no other test may use it meanwhile
//! (test binaries run one after another).

mod cassandra_common;
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use cassandra_common::{assert_exactly_once, emit, events, ids, metric, Keyspace};
use common::{now, serve_store_http_only, wait_for};
use sluice_store_cassandra::testing::{cluster, run_script};

/// Restarts node 1 even if the test fails midway, so the next binary finds it up.
struct RestartOnDrop;
impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        run_script(&["start-node", "1"]);
    }
}

/// Events the server holds for the store: pending in memory plus spooled.
fn held(base: &str) -> f64 {
    metric(base, "sluice_pending_events") + metric(base, "sluice_spool_events")
}

#[test]
fn cassandra_down_at_start_and_while_running_loses_nothing_acknowledged() {
    let Some(c) = cluster(1, "cassandra outage") else {
        return;
    };
    let ks = Keyspace::new(&c.hosts, "outage");
    let url = ks.url("rf=1&timeout_ms=2000&connect_timeout_ms=1000");
    let tmp = tempfile::tempdir().expect("tmp");
    let restart = RestartOnDrop;
    run_script(&["stop-node", "1"]);

    let (mut server, base) = serve_store_http_only(&url, tmp.path());
    // Down at start: ingest is acknowledged (WAL) and the batches wait in the spool.
    let e1 = now();
    let first = events("down-at-start", 300, e1, "ams");
    assert!(
        emit("http", &base, &first),
        "acknowledged while the store is down"
    );
    wait_for("events held", Duration::from_secs(30), || held(&base) > 0.0);
    run_script(&["start-node", "1"]);
    let mut want = ids(&first);
    let none = BTreeSet::new();
    assert_exactly_once(&url, e1 - 5, e1 + 60, &want, &none, Duration::from_secs(90));
    wait_for("nothing held", Duration::from_secs(60), || {
        held(&base) == 0.0
    });

    // Down while running.
    run_script(&["stop-node", "1"]);
    let e2 = now();
    let second = events("down-while-running", 300, e2, "ams");
    assert!(
        emit("http", &base, &second),
        "acknowledged while the store is down"
    );
    wait_for("events held", Duration::from_secs(30), || held(&base) > 0.0);
    drop(restart);
    want.extend(ids(&second));
    assert_exactly_once(&url, e1 - 5, e2 + 60, &want, &none, Duration::from_secs(90));
    server.terminate(Duration::from_secs(20));
}
