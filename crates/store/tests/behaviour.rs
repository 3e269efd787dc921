//! The contract suite (`sluice_store::testkit`) run against every in-tree backend, plus the
//! fault-injecting wrapper over each.

use std::sync::Arc;

use sluice_store::testkit::{Harness, StoreHarness};
use sluice_store::{
    BlobKey, EmbeddedOptions, EmbeddedStore, FaultyStore, InMemoryStore, Namespace, Retention,
    Store,
};

const E: i64 = 1_700_000_000;

/// An in-memory store; "reopen" is another handle on the same maps.
fn memory() -> impl StoreHarness {
    let mut data: Option<InMemoryStore> = None;
    Harness::new(move |retention: Retention| -> Arc<dyn Store> {
        let m = data
            .get_or_insert_with(|| InMemoryStore::with_retention(retention).expect("retention"))
            .clone();
        Arc::new(m)
    })
}

/// An embedded store in a temp dir (removed when the harness is dropped).
fn embedded() -> impl StoreHarness {
    let dir = tempfile::tempdir().expect("temp dir");
    Harness::new(move |retention: Retention| -> Arc<dyn Store> {
        let opts = EmbeddedOptions {
            retention,
            ..EmbeddedOptions::default()
        };
        Arc::new(EmbeddedStore::open_with(dir.path(), opts).expect("open embedded store"))
    })
}

mod memory {
    sluice_store::store_contract_tests!(super::memory());
}

mod embedded {
    sluice_store::store_contract_tests!(super::embedded());
}

fn faulty_wrapper_fails_on_demand(h: &mut dyn StoreHarness) {
    let (s, faults) = FaultyStore::new(h.store());
    let ev = Namespace::Events;
    faults.fail_next_writes(2);
    let k = |i: i64| format!("{E}:ams:WEB::{i}");
    let e1 = s.put_blob(&ev, BlobKey::new(E, &k(0)), b"a").unwrap_err();
    assert!(e1.is_transient(), "{e1:?}");
    assert!(s.add_to_epoch_index(E, "ams", &["WEB::0"]).is_err());
    // The failed writes never reached the inner store.
    assert_eq!(s.get_blob(&ev, BlobKey::new(E, &k(0))).unwrap(), None);
    assert!(s.get_epoch_index(E, "ams").unwrap().is_empty());
    s.put_blob(&ev, BlobKey::new(E, &k(0)), b"a").unwrap();
    faults.fail_writes(true);
    assert!(s.put_blob(&ev, BlobKey::new(E, &k(1)), b"b").is_err());
    assert!(s.flush().is_err());
    faults.fail_writes(false);
    faults.fail_reads(true);
    assert!(s.get_blob(&ev, BlobKey::new(E, &k(0))).is_err());
    assert!(s.get_blobs(&ev, &[BlobKey::new(E, &k(0))])[0].is_err());
    faults.fail_reads(false);
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(E, &k(0))).unwrap().as_deref(),
        Some(&b"a"[..])
    );
    assert_eq!(faults.injected(), 6);
}

#[test]
fn faulty_wrapper_fails_on_demand_memory() {
    faulty_wrapper_fails_on_demand(&mut memory());
}

#[test]
fn faulty_wrapper_fails_on_demand_embedded() {
    faulty_wrapper_fails_on_demand(&mut embedded());
}

/// `testkit::CONTRACT` (for runners without `#[test]`) holds working items.
#[test]
fn contract_list_runs_on_memory() {
    assert_eq!(sluice_store::testkit::CONTRACT.len(), 18);
    for (name, item) in sluice_store::testkit::CONTRACT {
        eprintln!("{name}");
        item(&mut memory());
    }
}
