//! The Sluice collector, without sockets or threads (the server owns those): one received
//! payload (a UDP datagram, an HTTP request body, a TCP NDJSON line or Sereal frame) in,
//! validated and tagged events out with an exact account of what was dropped and why
//! ([`ingest`]); then logged ([`wal`]), grouped per second and written to a store exactly once
//! ([`aggregate`], [`exactly_once`]), spooled to disk while the store is down ([`spool`]).
//!
//! ```
//! use sluice_collector::{IngestConfig, Ingestor, DropReason};
//!
//! let mut ingestor = Ingestor::new(IngestConfig { dc: "ams1".into(), ..Default::default() }).unwrap();
//! let now = 1_700_000_000;
//! let out = ingestor.ingest(b"{\"type\":\"WEB\",\"ms\":5}\n{\"ms\":7}\n", now);
//! assert_eq!(out.events.len(), 1);
//! assert_eq!(out.events[0].dc, "ams1");
//! assert_eq!(out.events[0].epoch, now);
//! assert_eq!(out.dropped[0].reason, DropReason::MissingType);
//! assert_eq!(out.dropped[0].reason.as_str(), "missing_type");
//! ```
//!
//! Modules:
//! - [`ingest`]: format detection, parsing, tag filling and validation ([`Ingestor`]).
//! - [`aggregate`]: per-second grouping and flushing to a store ([`aggregate::Aggregator`]).
//! - [`wal`]: the write-ahead log of accepted payloads ([`wal::Wal`]) that makes acknowledged
//!   ingest durable before its events are stored; replayed through an [`Ingestor`] on restart.
//! - [`spool`]: the bounded on-disk queue of batches used while the store is unavailable.
//! - [`exactly_once`]: the protocol that stores every acknowledged event once across crashes
//!   ([`exactly_once::ExactlyOnce`], driven after each flush; [`exactly_once::replay`] at start),
//!   proven step by step at the crash points of [`failpoint`].
//! - [`drops`]: why an event or payload was dropped ([`DropReason`], [`Drop`] with the tags read
//!   of the event, [`DropTags`]) and per-reason counters for `/metrics` ([`DropCounters`]).
//! - [`epoch`]: `epoch` as people write it (seconds, milliseconds, float seconds, RFC 3339)
//!   normalised to whole seconds, in one place.
//! - [`batch`]: accepted events as one buffer ([`EventBatch`]) handed between threads.
//! - [`otlp`]: OTLP logs request bodies (protobuf, JSON, gzip) → events, and the answers.
//! - [`note`]: the done notes the aggregator writes to the WAL once a batch is stored.
//! - `json` (the fast JSON path), `spares` (reused buffers): internal.
//!
//! The crate README lists the formats, the tag rules and the limits with their defaults.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod aggregate;
pub mod batch;
pub mod drops;
pub mod epoch;
pub mod exactly_once;
pub mod failpoint;
pub mod ingest;
mod json;
pub mod note;
pub mod otlp;
mod spares;
pub mod spool;
pub mod wal;

pub use batch::{BodyRef, EventBatch, EventRef};
pub use drops::{Drop, DropCounters, DropReason, DropTags};
pub use ingest::{
    detect, ConfigError, EventBody, Format, IngestConfig, IngestOutcome, Ingestor, ParsedEvent,
};
