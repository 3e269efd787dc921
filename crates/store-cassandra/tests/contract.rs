//! The store contract suite (`sluice_store::store_contract_tests!`), unchanged, against a real
//! single-node Cassandra (started by `scripts/cassandra.sh` if needed; skipped only with
//! `SLUICE_SKIP_CASSANDRA=1`). Each item runs in a keyspace of its own, dropped at the end.

use std::sync::Arc;

use sluice_store::testkit::StoreHarness;
use sluice_store::{Retention, Store};
use sluice_store_cassandra::testing::{cluster, fresh_keyspace, ClusterGuard};
use sluice_store_cassandra::{CassandraConfig, CassandraStore};

/// A keyspace of its own on the shared single node; "reopen" is a new session on it.
struct CassandraHarness {
    guard: Option<ClusterGuard>,
    keyspace: String,
    retention: Retention,
    store: Option<Arc<CassandraStore>>,
}

impl CassandraHarness {
    fn new() -> Self {
        CassandraHarness {
            guard: cluster(1, "store contract"),
            keyspace: fresh_keyspace("contract"),
            retention: Retention::default(),
            store: None,
        }
    }

    fn open(&mut self) -> Arc<CassandraStore> {
        let guard = self.guard.as_ref().expect("cluster");
        let config = CassandraConfig::new(guard.hosts.clone(), &self.keyspace);
        let s = Arc::new(CassandraStore::connect(config, self.retention).expect("connect"));
        self.store = Some(s.clone());
        s
    }
}

impl StoreHarness for CassandraHarness {
    fn store(&mut self) -> Arc<dyn Store> {
        match &self.store {
            Some(s) => s.clone(),
            None => self.open(),
        }
    }
    fn reopen(&mut self) -> Arc<dyn Store> {
        self.store = None;
        self.open()
    }
    fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }
}

impl Drop for CassandraHarness {
    fn drop(&mut self) {
        if let Some(s) = self.store.take() {
            let _ = s.drop_keyspace();
        }
    }
}

/// The harness, or a skip: the macro's tests call the harness's methods, so a skipped run
/// returns from each test before using it.
macro_rules! skip_or {
    () => {{
        let h = $crate::CassandraHarness::new();
        if h.guard.is_none() {
            return;
        }
        h
    }};
}

mod cassandra {
    sluice_store::store_contract_tests!(skip_or!());
}
