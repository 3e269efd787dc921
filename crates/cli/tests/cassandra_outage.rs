//! The bad day on a real single-node Cassandra (skipped only with `SLUICE_SKIP_CASSANDRA=1`):
//! the node is down when `sluice serve --store cassandra://…` starts, and goes down again while
//! it runs. Acknowledged ingest goes on (the WAL; the documented rule: a payload is acked once
//! logged, 503 only under backpressure, i.e. a full spool), the closed batches go to the spool
//! beyond `spool_memory_batches` (2 here) even though the epoch index they are numbered from
//! cannot be read (they are spooled unnumbered and numbered when replayed), and once the node is
//! back every acknowledged id reads back exactly once and the spool empties.
//!
//! One test in its own binary: it stops the shared node, so no other test may use it meanwhile
//! (test binaries run one after another).

mod cassandra_common;
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use cassandra_common::{assert_exactly_once, emit, events, ids, metric, Keyspace};
use common::{now, serve_store_http_only_with, wait_for, Proc};
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

/// `sluice serve --store URL` with at most 2 batches in memory before the spool (HTTP only).
fn serve(url: &str, data: &std::path::Path) -> (Proc, String) {
    let config = data.join("serve.toml");
    std::fs::write(&config, "spool_memory_batches = 2\n").expect("config");
    serve_store_http_only_with(url, data, &["--config", config.to_str().expect("path")])
}

/// 30 events in each of the 10 seconds up to `last` (3 groups a second: 30 batches).
fn spread(prefix: &str, last: i64) -> Vec<String> {
    (0..10)
        .flat_map(|k| events(&format!("{prefix}-{k}"), 30, last - k, "ams"))
        .collect()
}

/// Bytes of the files in the spool directory (shard 0's) and its `shard-<i>` directories.
fn spool_dir_bytes(data: &std::path::Path) -> u64 {
    fn files(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir).map_or(0, |rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => files(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
    }
    files(&data.join("spool"))
}

/// Waits until the spool holds batches (metric and files) while at most 2 per shard wait in memory.
fn wait_spooled(base: &str, data: &std::path::Path) {
    // The spool once filled slowly here (8 batches after 60 s, then a CI timeout at 120 s): a
    // flush asked the down store for each closed group's index, one 2 s timeout per group, while
    // the other shard waited for its flush turn. Now a flush stops asking after the first
    // transient failure (`a_flush_with_the_store_down_asks_it_once_not_per_group`).
    let start = std::time::Instant::now();
    let mut shown = 0;
    wait_for(Duration::from_secs(120), "batches in the spool", || {
        let spooled = metric(base, "sluice_spool_batches");
        if start.elapsed().as_secs() >= shown + 10 {
            shown = start.elapsed().as_secs();
            println!(
                "after {shown} s: {spooled} batches spooled, {} in memory, {} events held",
                metric(base, "sluice_memory_batches"),
                held(base)
            );
        }
        spooled >= 10.0 && spool_dir_bytes(data) > 0
    });
    println!("spooled after {:?}", start.elapsed());
    // `spool_memory_batches` (2) is per pipeline shard; the test servers run 2 shards.
    assert!(
        metric(base, "sluice_memory_batches") <= 4.0,
        "{} batches held in memory",
        metric(base, "sluice_memory_batches")
    );
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

    let (mut server, base) = serve(&url, tmp.path());
    // Down at start: ingest is acknowledged (WAL) and the batches wait in the spool.
    let e1 = now();
    let first = spread("down-at-start", e1);
    assert!(
        emit("http", &base, &first),
        "acknowledged while the store is down"
    );
    wait_for(Duration::from_secs(30), "events held", || held(&base) > 0.0);
    wait_spooled(&base, tmp.path());
    run_script(&["start-node", "1"]);
    let mut want = ids(&first);
    let none = BTreeSet::new();
    assert_exactly_once(
        &url,
        e1 - 15,
        e1 + 60,
        &want,
        &none,
        Duration::from_secs(90),
    );
    wait_for(Duration::from_secs(60), "nothing held", || {
        held(&base) == 0.0 && metric(&base, "sluice_spool_batches") == 0.0
    });

    // Down while running (the store's session is up, its requests fail).
    run_script(&["stop-node", "1"]);
    let e2 = now();
    let second = spread("down-while-running", e2);
    assert!(
        emit("http", &base, &second),
        "acknowledged while the store is down"
    );
    wait_for(Duration::from_secs(30), "events held", || held(&base) > 0.0);
    wait_spooled(&base, tmp.path());
    drop(restart);
    want.extend(ids(&second));
    assert_exactly_once(
        &url,
        e1 - 15,
        e2 + 60,
        &want,
        &none,
        Duration::from_secs(90),
    );
    wait_for(Duration::from_secs(60), "the spool empties", || {
        metric(&base, "sluice_spool_batches") == 0.0
    });
    server.terminate(Duration::from_secs(20));
}
