//! What `put_owned_blob_lists` is on Cassandra, on a real single node (started by
//! `scripts/cassandra.sh` if needed; skipped only with `SLUICE_SKIP_CASSANDRA=1`): a plain insert
//! without the write-once check — the reason the collector, which owns its chunk keys, is the
//! only caller — while `put_blob` and `put_blob_lists` keep the lightweight transaction.

use sluice_store::{BlobKey, Namespace, PutOutcome, Retention, Store, StoreError};
use sluice_store_cassandra::testing::{cluster, fresh_keyspace};
use sluice_store_cassandra::{CassandraConfig, CassandraStore};

#[test]
fn owned_puts_skip_the_write_once_check_and_checked_puts_keep_it() {
    let Some(guard) = cluster(1, "owned puts") else {
        return;
    };
    let keyspace = fresh_keyspace("owned");
    let config = CassandraConfig::new(guard.hosts.clone(), &keyspace);
    let s = CassandraStore::connect(config, Retention::default()).expect("connect");
    let ev = Namespace::Events;
    let e = 1_700_000_000;
    let k = BlobKey::new(e, "1700000000:ams:WEB::c1.0");

    let got = s.put_owned_blob_lists(&ev, &[vec![(k, &b"first"[..])]]);
    assert!(
        matches!(got[..], [ref l] if matches!(l[..], [Ok(PutOutcome::Written)])),
        "{got:?}"
    );
    // The checked calls still see the blob and refuse other bytes.
    assert_eq!(
        s.put_blob(&ev, k, b"first").unwrap(),
        PutOutcome::AlreadyPresent
    );
    assert!(matches!(
        s.put_blob(&ev, k, b"other"),
        Err(StoreError::Exists { .. })
    ));
    let got = s.put_blob_lists(&ev, &[vec![(k, &b"other"[..])]]);
    assert!(
        matches!(got[0][..], [Err(StoreError::Exists { .. })]),
        "{got:?}"
    );
    assert_eq!(s.get_blob(&ev, k).unwrap().as_deref(), Some(&b"first"[..]));

    // An owned put does not check: other bytes under the key replace the blob. The caller's
    // promise (one set of bytes per key) is what keeps this from happening.
    let got = s.put_owned_blob_lists(&ev, &[vec![(k, &b"second"[..])]]);
    assert!(matches!(got[0][..], [Ok(PutOutcome::Written)]), "{got:?}");
    assert_eq!(s.get_blob(&ev, k).unwrap().as_deref(), Some(&b"second"[..]));

    let _ = s.drop_keyspace();
}
