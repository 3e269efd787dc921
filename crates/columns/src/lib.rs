//! The columnar history tier: the events the store holds, a second time, as Apache Parquet.
//!
//! Blobs stay the write-once truth (what the original's clients read, what substreams run on);
//! this crate keeps a columnar copy beside them for field queries and long retention:
//!
//! ```text
//! store (blobs) ──► tier: every minute, per (dc, type), the stored seconds ──► convert (Sereal
//!   values → Arrow columns, a schema that widens itself) ──► parquet_file (zstd, statistics,
//!   page index, blooms) ──► location (a directory, or S3) under layout's Hive-style paths
//!   with covers (the blob keys + SHA-1s each file holds) in the footer
//! reader: covers say which chunks a file holds ──► source streams those rows back, in the
//!   blob path's order; chunks no file covers are read from blobs
//! ```
//!
//! - [`convert`]: Sereal events ↔ Arrow record batches; [`convert::TypeSchema`], the sticky
//!   per-(dc, type) schema.
//! - [`parquet_file`]: writing and opening one Parquet file (the writer's knobs in one place).
//! - [`layout`]: file paths (`date=…/hour=…/dc=…/type=…/…parquet`) and their parsing.
//! - [`covers`]: what a file holds (blob keys, SHA-1s, event counts), kept in its footer.
//! - [`export`]: events read back → Arrow batches per (dc, type), for `sluice export` and pyarrow.
//! - [`location`]: where files live (a local directory, or an S3 bucket), atomic puts.
//! - [`tier`]: the writer (parts every minute, hour merges, expiry, rebuild).
//! - [`view`]: the read side: per hour, which file holds which chunk.
//! - [`verify`]: every covered chunk checked against its blob (`sluice columns verify`).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod convert;
pub mod covers;
pub mod export;
pub mod layout;
pub mod location;
pub mod parquet_file;
pub mod retention;
pub mod tier;
pub mod verify;
pub mod view;
