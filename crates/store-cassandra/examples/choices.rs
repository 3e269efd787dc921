//! The measurements behind the Cassandra store's choices (docs/decisions.md):
//! 1. completeness counts as per-writer rows (what the store does) vs counter columns;
//! 2. the cost of the sync bridge (spawn on the store's runtime + a channel) vs a round trip.
//!
//! `cargo run --release -p sluice-store-cassandra --example choices` against a running node
//! (`scripts/cassandra.sh start 1`).

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::Counter;
use sluice_store::{BlobKey, Counts, CountsWrite, Namespace, Retention, Store};
use sluice_store_cassandra::{CassandraConfig, CassandraStore};

const N: usize = 4000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = vec!["127.0.0.1:9042".to_string()];
    let ks = format!("choices_{}", std::process::id());
    let store = Arc::new(CassandraStore::connect(
        CassandraConfig::new(hosts.clone(), &ks),
        Retention::default(),
    )?);
    let e = 1_700_000_000i64;
    let c = Counts {
        stored: 10,
        late: 1,
        ..Counts::default()
    };

    // 1a. Per-writer rows through the store, 8 threads (as 8 collectors would).
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..8 {
            let store = store.clone();
            let c = c.clone();
            s.spawn(move || {
                for i in 0..N / 8 {
                    let batch = format!("b{i}");
                    store
                        .add_counts_once(
                            CountsWrite::new(&format!("c{w}"), &batch),
                            e + (i % 10) as i64,
                            "ams",
                            "WEB",
                            "",
                            &c,
                        )
                        .expect("add");
                }
            });
        }
    });
    let rows_write = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for i in 0..10 {
        store.get_counts(e + i, "ams")?;
    }
    let rows_read = t0.elapsed().as_secs_f64() / 10.0;

    // 1b. Counter columns, same adds (32 in flight), straight on the driver.
    let rt = tokio::runtime::Runtime::new()?;
    let (counter_write, counter_read) = rt.block_on(async {
        let s = SessionBuilder::new().known_nodes(&hosts).build().await?;
        s.query_unpaged(
            format!("CREATE TABLE IF NOT EXISTS {ks}.counts_counter (epoch bigint, dc text, type text, subtype text, \
             stored counter, late counter, PRIMARY KEY ((epoch, dc), type, subtype))"),
            (),
        )
        .await?;
        let p = s
            .prepare(format!(
                "UPDATE {ks}.counts_counter SET stored = stored + ?, late = late + ? WHERE epoch = ? AND dc = ? AND type = ? AND subtype = ?"
            ))
            .await?;
        let t0 = Instant::now();
        for chunk in (0..N).collect::<Vec<_>>().chunks(32) {
            let futs = chunk.iter().map(|i| {
                s.execute_unpaged(&p, (Counter(10), Counter(1), e + (*i % 10) as i64, "ams", "WEB", ""))
            });
            for r in join_all(futs).await {
                r?;
            }
        }
        let w = t0.elapsed().as_secs_f64();
        let q = s
            .prepare(format!("SELECT stored, late FROM {ks}.counts_counter WHERE epoch = ? AND dc = ?"))
            .await?;
        let t0 = Instant::now();
        for i in 0..10 {
            s.execute_unpaged(&q, (e + i, "ams")).await?;
        }
        Ok::<_, Box<dyn std::error::Error>>((w, t0.elapsed().as_secs_f64() / 10.0))
    })?;

    // 2. The bridge alone: spawn a ready future on a 2-thread runtime and wait on a channel.
    let bridge_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    for _ in 0..N {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        bridge_rt.spawn(async move {
            let _ = tx.send(1u8);
        });
        rx.recv()?;
    }
    let bridge = t0.elapsed().as_secs_f64() / N as f64;
    let t0 = Instant::now();
    for i in 0..N {
        store.get_blob(&Namespace::Events, BlobKey::new(e, &format!("absent{i}")))?;
    }
    let round_trip = t0.elapsed().as_secs_f64() / N as f64;
    let _ = store.drop_keyspace();

    println!(
        "counts, {N} adds by 8 writers, per-writer rows (store API, 8 threads): {:.0} adds/s",
        N as f64 / rows_write
    );
    println!(
        "counts, {N} adds, counter columns (driver, 32 in flight):            {:.0} adds/s",
        N as f64 / counter_write
    );
    println!(
        "get_counts of one (epoch, dc) holding {} rows: {:.2} ms; counters (1 row): {:.2} ms",
        N / 10,
        rows_read * 1e3,
        counter_read * 1e3
    );
    println!("sync bridge (spawn + channel): {:.1} µs; sync get_blob round trip (absent key): {:.0} µs ({:.1} %)", bridge * 1e6, round_trip * 1e6, bridge / round_trip * 100.0);
    Ok(())
}
