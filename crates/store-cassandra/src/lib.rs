//! The Cassandra / ScyllaDB backend of Sluice's store, and [`StoreUrl`]: the one parser of
//! `--store` (and of the TOML key `store`) that the server and the CLI share.
//!
//! | item | what |
//! |---|---|
//! | [`CassandraStore`] | [`sluice_store::Store`] on a keyspace, via the `scylla` driver on its own runtime |
//! | [`StoreUrl`], [`CassandraConfig`] | `embedded:DIR` or `cassandra://HOST:PORT[,…]/KEYSPACE?rf=3&write_cl=quorum&read_cl=one` |
//! | [`StoreUrl::open`], [`OpenMode`] | the one way to open the store a URL names, as `Arc<dyn Store>` |
//! | [`schema`] | the CQL tables (reasons in docs/decisions.md) |
//!
//! The schema and the choices behind it (sync trait over an own runtime, per-writer count rows
//! instead of counters, one partition per blob) are in the crate's README.md.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod open;
pub mod schema;
mod session;
mod store;
mod tables;
pub mod testing;
mod url;

pub use crate::open::OpenMode;
pub use crate::session::ATTEMPTS;
pub use crate::store::CassandraStore;
pub use crate::url::{CassandraConfig, StoreUrl, StoreUrlError};
