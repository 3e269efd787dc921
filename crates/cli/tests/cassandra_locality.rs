//! Data locality of substream workers on a real 3-node Cassandra cluster (skipped only with
//! `SLUICE_SKIP_CASSANDRA=1`): two substream runners started beside different nodes
//! (`RunnerConfig::local_node`, what `sluice serve --local-node ADDR` sets) split a set of blob
//! keys so that every key is taken by at least one of them and each runner takes only keys with a
//! replica on its node. The replicas are checked against Cassandra's own answer
//! (`nodetool getendpoints`), not only the driver's token ring the runners use.

use std::process::Command;
use std::sync::Arc;

use sluice_store::{BlobKey, Namespace, Retention, Store};
use sluice_store_cassandra::testing::{cluster, fresh_keyspace, node_ip, script};
use sluice_store_cassandra::{CassandraConfig, CassandraStore};
use sluice_substreams::{Runner, RunnerConfig};

/// The nodes holding a blob's partition `(ns, epoch, key)`, as node 1's `nodetool getendpoints`
/// reports them (`:` inside a component escaped for the composite key).
fn endpoints(keyspace: &str, ns: &str, epoch: i64, key: &str) -> Vec<String> {
    let pk = format!("{ns}:{epoch}:{}", key.replace(':', "\\:"));
    let out = Command::new("bash")
        .arg(script())
        .args(["nodetool", "1", "getendpoints", keyspace, "blobs", &pk])
        .output()
        .expect("nodetool");
    assert!(
        out.status.success(),
        "nodetool getendpoints: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn runners_beside_two_nodes_split_the_keys_by_replica() {
    let Some(c) = cluster(3, "cassandra locality") else {
        return;
    };
    let keyspace = fresh_keyspace("locality");
    let mut config = CassandraConfig::new(c.hosts.clone(), &keyspace);
    // RF 2 on 3 nodes: every key lives on two of them, so runners beside nodes 1 and 2 cover
    // every key between them (node 3's keys all have a second replica on 1 or 2).
    config.replication_factor = 2;
    let store = Arc::new(CassandraStore::connect(config, Retention::default()).expect("connect"));
    let epoch = 1_700_000_000;
    let keys: Vec<String> = (0..24)
        .map(|i| format!("{}:ams:WEB:www:{i}", epoch + i / 4))
        .collect();
    let bkeys: Vec<BlobKey<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| BlobKey::new(epoch + i as i64 / 4, k))
        .collect();
    let ns = Namespace::Events;

    // A keyspace created moments ago may not be in the driver's metadata yet: the store refreshes
    // it, and says so (an error, the runner then takes every key) until it places every key.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while let Err(e) = store.keys_on_node(&node_ip(1), &ns, &bkeys) {
        assert!(
            std::time::Instant::now() < deadline,
            "replicas unknown after 30 s: {e}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }

    let code = tempfile::tempdir().expect("tmp");
    let runner = |k: usize| {
        Runner::start(
            store.clone(),
            RunnerConfig {
                local_node: Some(node_ip(k)),
                code_dir: code.path().join(k.to_string()),
                ..RunnerConfig::default()
            },
        )
    };
    let (r1, r2) = (runner(1), runner(2));
    let (t1, t2) = (r1.takes(&ns, &bkeys), r2.takes(&ns, &bkeys));
    // Without a local node a runner takes everything (a single store, as before).
    let all = Runner::start(
        store.clone(),
        RunnerConfig {
            code_dir: code.path().join("all"),
            ..RunnerConfig::default()
        },
    );
    assert!(all.takes(&ns, &bkeys).iter().all(|&t| t));

    let (n1, n2) = (node_ip(1), node_ip(2));
    for (i, k) in bkeys.iter().enumerate() {
        assert!(t1[i] || t2[i], "{} is taken by no runner", k.key);
        let replicas = endpoints(&keyspace, "events", k.epoch, k.key);
        assert_eq!(replicas.len(), 2, "{}: replicas {replicas:?}", k.key);
        assert_eq!(t1[i], replicas.contains(&n1), "{} on {replicas:?}", k.key);
        assert_eq!(t2[i], replicas.contains(&n2), "{} on {replicas:?}", k.key);
    }
    // A real split: each runner leaves some keys to the other.
    let (c1, c2) = (
        t1.iter().filter(|&&t| t).count(),
        t2.iter().filter(|&&t| t).count(),
    );
    assert!(
        c1 < keys.len() && c2 < keys.len(),
        "taken: {c1} and {c2} of {}",
        keys.len()
    );
    println!(
        "runner at {n1} takes {c1}, at {n2} takes {c2} of {} keys",
        keys.len()
    );
    r1.stop();
    r2.stop();
    all.stop();
    let _ = store.drop_keyspace();
}
