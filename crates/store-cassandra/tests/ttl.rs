//! Retention by TTL on a real node (skipped only with `SLUICE_SKIP_CASSANDRA=1`): with a
//! 2-second retention in 1-second partitions the tables' `default_time_to_live` is 3 s, and
//! blobs, index, counts and the listing are gone a little after it, with no `expire` call.

use std::time::Duration;

use sluice_store::{BlobKey, Counts, Namespace, Retention, Store};
use sluice_store_cassandra::testing::{cluster, fresh_keyspace};
use sluice_store_cassandra::{CassandraConfig, CassandraStore};

#[test]
fn data_expires_by_ttl_without_expire() {
    let Some(c) = cluster(1, "ttl") else {
        return;
    };
    let retention = Retention {
        period_secs: 2,
        partition_secs: 1,
    };
    let config = CassandraConfig::new(c.hosts.clone(), &fresh_keyspace("ttl"));
    let s = CassandraStore::connect(config, retention).expect("connect");
    let e = 1_700_000_000;
    let key = format!("{e}:ams:WEB::0");
    let ev = Namespace::Events;
    s.put_blob(&ev, BlobKey::new(e, &key), b"soon gone")
        .unwrap();
    s.add_to_epoch_index(e, "ams", &["WEB::0"]).unwrap();
    s.add_counts(
        e,
        "ams",
        "WEB",
        "",
        &Counts {
            stored: 1,
            ..Counts::default()
        },
    )
    .unwrap();
    assert!(s.get_blob(&ev, BlobKey::new(e, &key)).unwrap().is_some());
    assert_eq!(s.list_epochs(None, e, e + 1).unwrap().len(), 1);
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(s.get_blob(&ev, BlobKey::new(e, &key)).unwrap(), None);
    assert!(s.get_epoch_index(e, "ams").unwrap().is_empty());
    assert!(s.get_counts(e, "ams").unwrap().is_empty());
    assert!(s.list_epochs(None, e, e + 1).unwrap().is_empty());
    let _ = s.drop_keyspace();
}
