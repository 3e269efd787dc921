//! The live hub through the real pipeline: payloads of several groups ingested concurrently over
//! three shards reach a subscriber from memory, in WAL order, each acknowledged payload once,
//! its parts decoding to the events sent.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_server::{Bytes, Server, ServerConfig};

mod common;
use common::*;

#[test]
fn acknowledged_payloads_reach_a_live_subscriber_in_wal_order() {
    let dir = temp_dir("live-hub");
    let server = Server::start(ServerConfig {
        pipeline_threads: Some(3),
        http: None,
        tcp: None,
        udp: None,
        ..config(&dir, 1)
    })
    .unwrap();
    let ingester = server.ingester();
    let live = ingester.live();
    let sub = live.subscribe();
    let t = now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // 8 senders × 25 payloads, each of 3 groups (two dcs, two types), interleaved.
    let sent: BTreeMap<u64, Vec<(String, String, i64)>> = rt.block_on(async {
        let mut tasks = Vec::new();
        for sender in 0..8i64 {
            let ingester = ingester.clone();
            tasks.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for p in 0..25i64 {
                    let mut body = String::new();
                    let mut events = Vec::new();
                    for k in 0..6i64 {
                        let id = sender * 10_000 + p * 10 + k;
                        let (dc, type_) =
                            [("ams1", "WEB"), ("lhr2", "WEB"), ("ams1", "CRON")][(k % 3) as usize];
                        body.push_str(&format!(
                            "{{\"epoch\":{t},\"dc\":\"{dc}\",\"type\":\"{type_}\",\"id\":{id}}}\n"
                        ));
                        events.push((dc.to_string(), type_.to_string(), id));
                    }
                    let summary = ingester.ingest(Bytes::from(body)).await.unwrap();
                    assert_eq!(summary.accepted, 6);
                    acked.push((summary.wal_seq.unwrap(), events));
                }
                acked
            }));
        }
        let mut sent = BTreeMap::new();
        for task in tasks {
            sent.extend(task.await.unwrap());
        }
        sent
    });
    assert_eq!(sent.len(), 200);
    let mut last = sub.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = 0;
    while got < sent.len() {
        assert!(
            Instant::now() < deadline,
            "only {got} of {} records came",
            sent.len()
        );
        let Some(doc) = sub.recv_timeout(Duration::from_secs(1)).unwrap() else {
            continue;
        };
        assert!(doc.seq > last, "record {} after {last}", doc.seq);
        last = doc.seq;
        let events = sent
            .get(&doc.seq)
            .unwrap_or_else(|| panic!("record {} not sent", doc.seq));
        got += 1;
        // Parts by (dc, type) in payload order, each with its events in payload order.
        let mut want: Vec<((String, String), Vec<i64>)> = Vec::new();
        for (dc, type_, id) in events {
            match want.iter_mut().find(|(g, _)| g.0 == *dc && g.1 == *type_) {
                Some((_, ids)) => ids.push(*id),
                None => want.push(((dc.clone(), type_.clone()), vec![*id])),
            }
        }
        let parts: Vec<((String, String), Vec<i64>)> = doc
            .parts
            .iter()
            .map(|p| {
                assert_eq!(p.epoch, t);
                let ids = p
                    .blob
                    .as_blob_ref()
                    .decode(&sereal::Limits::default())
                    .unwrap()
                    .iter()
                    .map(|e| e.get("id").and_then(sereal::Value::as_i64).unwrap())
                    .collect();
                ((p.dc.clone(), p.type_.clone()), ids)
            })
            .collect();
        assert_eq!(parts, want, "record {}", doc.seq);
        assert_eq!(doc.max_epoch, t);
    }
    assert!(matches!(
        sub.recv_timeout(Duration::from_millis(200)),
        Ok(None)
    ));
    assert_eq!(live.subscribers(), 1);
    drop(live);
    server.shutdown().unwrap();
    let ended = sub.recv_timeout(Duration::from_secs(5)).unwrap_err();
    assert!(ended.reason.contains("shutting down"), "{}", ended.reason);
}
