//! The store of Sluice: where blobs and their per-second metadata live.
//!
//! One trait, [`Store`], several backends; its read half, [`ReadStore`], for readers and
//! read-only views (every `Store` is one):
//!
//! | type | what | for |
//! |---|---|---|
//! | [`EmbeddedStore`] | time-partitioned append-only logs under a data directory | the default, zero set-up |
//! | [`InMemoryStore`] | maps in memory, same partitioning and retention | tests (`testkit` feature) |
//! | [`FaultyStore`] | wraps any store and fails operations on demand ([`Faults`]) | spool / replay tests (`testkit` feature) |
//!
//! The Cassandra / ScyllaDB backend lives in its own crate, `sluice-store-cassandra`.
//!
//! What a store holds (keys as in DESIGN.md; their format is the blob crate's business, the store
//! treats them as opaque strings):
//! - **blobs** in a [`Namespace`] (`events`, `substreams/<name>`) under a [`BlobKey`]
//!   `(epoch, key)`, write-once ([`PutOutcome`], [`StoreError::Exists`]);
//! - the **epoch index** of each `(epoch, dc)`: a set of `type:subtype:chunk` entries, merged by
//!   union;
//! - **completeness [`Counts`]** per `(epoch, dc, type, subtype)`, merged by addition;
//! - a [`Retention`]: data is grouped in time partitions (an hour) and
//!   [`expire`](Store::expire) drops whole partitions; a [`TypeRetention`] keeps some types (or
//!   subtypes) for less or more time than the rest.
//!
//! Modules: `store` (the trait and its value types), `stored` (what a flush stored,
//! [`StoredBatch`]), [`copy`] (a time range from one store to
//! another), `embedded` (with `record`, the byte layout), `error`, and with the `testkit`
//! feature the test doubles `memory` and `faulty` and [`testkit`]: the contract suite any
//! backend (in this crate or another) runs with [`store_contract_tests!`]. The test doubles sit
//! behind the feature so that no production build can pick one up by mistake. The on-disk
//! layout is in the crate's README.md.
//!
//! ```
//! use sluice_store::{BlobKey, EmbeddedStore, Namespace, PutOutcome, Store};
//!
//! # fn main() -> Result<(), sluice_store::StoreError> {
//! let dir = std::env::temp_dir().join(format!("sluice-store-doc-{}", std::process::id()));
//! let store = EmbeddedStore::open(&dir)?;
//! let key = BlobKey::new(1_700_000_000, "1700000000:ams:WEB::0");
//! assert_eq!(store.put_blob(&Namespace::Events, key, b"blob bytes")?, PutOutcome::Written);
//! store.add_to_epoch_index(1_700_000_000, "ams", &["WEB::0"])?;
//! store.flush()?; // durable against power loss from here on
//! assert_eq!(store.get_blob(&Namespace::Events, key)?.as_deref(), Some(&b"blob bytes"[..]));
//! assert_eq!(store.list_epochs(None, 1_700_000_000, 1_700_000_001)?, vec![(1_700_000_000, "ams".to_string())]);
//! # drop(store);
//! # let _ = std::fs::remove_dir_all(&dir);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod copy;
mod embedded;
mod error;
#[cfg(feature = "testkit")]
mod faulty;
#[cfg(feature = "testkit")]
mod memory;
mod store;
mod stored;
#[cfg(feature = "testkit")]
pub mod testkit;
mod type_retention;

pub use crate::embedded::{
    BlobFormat, CheckReport, CodecFormat, Durability, EmbeddedOptions, EmbeddedStore,
    RecoveryStats, RepairReport,
};
pub use crate::error::{Result, StoreError};
#[cfg(feature = "testkit")]
pub use crate::faulty::{Faults, FaultyStore};
#[cfg(feature = "testkit")]
pub use crate::memory::InMemoryStore;
pub use crate::stored::{StoredBatch, StoredChunk};
pub use crate::type_retention::TypeRetention;

/// The file in a data directory naming the running server's HTTP address (`http://ADDR`), so
/// that readers (`sluice cat --data DIR`, `sluice_client::resolve_data_dir`) can go through that
/// server while it holds the store's lock. The server writes it at start and removes it at
/// shutdown; a stale one is harmless (it is read only when the lock is held).
pub const SERVER_FILE: &str = "SERVER";
/// The argument checks every backend applies before it writes (one owner: a backend in another
/// crate calls these instead of copying them).
pub mod checks {
    pub use crate::store::{
        check_catalog, check_counts, check_counts_write, check_entries, check_key, check_put,
        check_text,
    };
}
pub use crate::store::{
    BlobKey, Counts, CountsAdd, CountsWrite, Damage, DamageKind, DamageStats, ExpireReport,
    Namespace, PutOutcome, ReadStore, Retention, Store, StoreUsage, TypeSubtype, MAX_BLOB_LEN,
};
