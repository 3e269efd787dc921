//! [`StoreUrl::open`]: the one place that turns a store URL into an open `Arc<dyn Store>`, so
//! the server, the CLI and the tests open a backend the same way for the same purpose.
//!
//! The callers differ only in what they will do with the store ([`OpenMode`]): a long-running
//! writer must start while a Cassandra cluster is down (it spools), a command that creates or
//! fills a store needs the cluster now, a reader must change nothing.

use std::sync::Arc;

use sluice_store::{EmbeddedOptions, EmbeddedStore, Retention, Store, StoreError, TypeRetention};

use crate::store::CassandraStore;
use crate::url::StoreUrl;

/// What the opener will do with the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read and write for a long-running writer (`sluice serve`): the embedded store is created
    /// if missing; a Cassandra keyspace is connected lazily, so a cluster that is down at start
    /// makes calls fail with [`StoreError::Unavailable`] (and writes spool), not the open.
    Serve,
    /// Read and write, ready now (`store init`, `store copy --to`): the embedded store is
    /// created if missing; a Cassandra cluster must answer and its schema is created.
    Create,
    /// Read only: nothing is created or changed (the embedded store takes a shared lock and its
    /// partition width from its `FORMAT` file; a Cassandra cluster must answer).
    ReadOnly,
}

impl StoreUrl {
    /// Opens the store this URL names for `mode`, with `retention` (a read-only embedded store
    /// reads its own partition width instead; a read-only Cassandra store needs the writers'
    /// partition width).
    pub fn open(&self, mode: OpenMode, retention: Retention) -> Result<Arc<dyn Store>, StoreError> {
        self.open_with_types(mode, retention, TypeRetention::new(retention.period_secs))
    }

    /// [`open`](Self::open) with retention per type and subtype: `retention.period_secs` must
    /// be `types.longest()`. Only the embedded store takes rules; Cassandra refuses them.
    pub fn open_with_types(
        &self,
        mode: OpenMode,
        retention: Retention,
        types: TypeRetention,
    ) -> Result<Arc<dyn Store>, StoreError> {
        if !types.is_empty() && matches!(self, StoreUrl::Cassandra(_)) {
            return Err(StoreError::InvalidArgument {
                reason: "retention per type needs the embedded store: on Cassandra every type \
                         keeps the tables' TTL"
                    .into(),
            });
        }
        Ok(match (self, mode) {
            (StoreUrl::Embedded(dir), OpenMode::ReadOnly) => {
                Arc::new(EmbeddedStore::open_read_only(dir)?)
            }
            (StoreUrl::Embedded(dir), OpenMode::Serve | OpenMode::Create) => {
                let opts = EmbeddedOptions {
                    retention,
                    type_retention: types,
                    ..EmbeddedOptions::default()
                };
                Arc::new(EmbeddedStore::open_with(dir, opts)?)
            }
            (StoreUrl::Cassandra(c), OpenMode::Serve) => {
                Arc::new(CassandraStore::open(c.clone(), retention)?)
            }
            (StoreUrl::Cassandra(c), OpenMode::Create) => {
                Arc::new(CassandraStore::connect(c.clone(), retention)?)
            }
            (StoreUrl::Cassandra(c), OpenMode::ReadOnly) => {
                Arc::new(CassandraStore::open_read_only(c.clone(), retention)?)
            }
        })
    }

    /// How error messages name this store: the directory of an embedded store, the URL of a
    /// Cassandra keyspace.
    pub fn location(&self) -> String {
        match self {
            StoreUrl::Embedded(dir) => dir.display().to_string(),
            StoreUrl::Cassandra(c) => c.to_url(),
        }
    }
}
