//! Exports of rollup rows: hands [`RollupRow`]s (one step of one group of a rollup, its
//! aggregates evaluated) to the tools that draw them.
//!
//! - [`naming`]: the one owner of names — metric names, labels, Graphite paths, timestamps.
//!   Rollup `web`, aggregate `p95:duration_ms`, group `path=/book` →
//!   `sluice_web_p95_duration_ms{path="/book",rollup="web"}` at the step's **end**;
//!   `count_if:status >= 500` → `sluice_web_count_if{condition="status >= 500",…}`; Graphite
//!   `sluice.web._book.p95_duration_ms` (`count_if_HASH` for a condition). Full rules in the
//!   module and in `docs/metrics-export.md`.
//! - [`prometheus`]: [`prometheus_text`], the text format for `GET /v1/rollups/NAME/metrics`
//!   (the latest step per series, with its timestamp; gauges).
//! - [`remote_write`]: Prometheus remote write (protobuf `WriteRequest`, snappy, HTTP POST).
//! - [`graphite`]: Graphite plaintext over TCP.
//! - [`exporter`]: [`Exporter`], the loop that reads closed steps from a [`RowSource`] and sends
//!   them at least once through a bounded queue, with retries, capped backoff and counters.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod exporter;
pub mod graphite;
pub mod naming;
pub mod prometheus;
pub mod remote_write;

pub use exporter::{
    ConfigError, Exporter, ExporterConfig, ExporterCounters, ExporterStats, RowSource, SinkConfig,
};
pub use graphite::GraphiteSink;
pub use prometheus::prometheus_text;
pub use remote_write::RemoteWriteSink;
pub use sluice_rollups::RollupRow;

/// Why a sink did not take a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// Try again later (down, refused, timed out, HTTP 429 or 5xx).
    Retry(String),
    /// Never: the receiver refuses this batch (HTTP 4xx other than 429).
    Reject(String),
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkError::Retry(m) => write!(f, "{m} (will retry)"),
            SinkError::Reject(m) => write!(f, "{m} (rejected)"),
        }
    }
}

impl std::error::Error for SinkError {}

/// Something that takes batches of rows: acknowledged (`Ok`) means delivered.
pub trait Sink: Send {
    /// Delivers one batch (every aggregate with a value of every row).
    fn send(&mut self, rows: &[RollupRow]) -> Result<(), SinkError>;
    /// What it sends to, for errors (never a secret).
    fn describe(&self) -> String;
}
