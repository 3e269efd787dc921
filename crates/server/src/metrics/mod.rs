//! The server's metrics: counters, gauges and histograms of the `prometheus` crate (each an
//! atomic, or a map of atomics per label set), rendered for `GET /metrics`.
//!
//! - `registry`: [`Metrics`], every metric's definition, registered once.
//! - `ingest_counters`: [`IngestCounters`], a thread's handles on the per-transport counters.
//! - `process`: the standard `process_*` metrics (the crate's process collector).
//! - `render`: the text format (the crate's encoder), with the values read at scrape time.
//!
//! Contracts:
//! - No lock on the ingest path: a count is one atomic add. Labelled families take the crate's
//!   map lock only to find a label set; the threads that count per event keep their handles
//!   ([`IngestCounters`]), so a payload costs a few atomic adds.
//! - Every update leaves the metrics consistent; nothing here can poison (the one piece of
//!   text, why ingest is unavailable, sits behind a lock that tolerates a panicked holder).

mod alerts;
mod ingest_counters;
mod process;
mod registry;
mod render;

pub(crate) use alerts::render_alerts;
pub use ingest_counters::IngestCounters;
pub use registry::{as_gauge, Metrics, SharedMetrics, MAX_TYPE_LABELS};
pub(crate) use render::{render, render_exports, render_substreams};

#[cfg(test)]
pub(crate) mod tests {
    /// The value of the sample whose line starts with `line_start` (name and labels); panics
    /// when there is none, so a missing metric fails the test.
    pub(crate) fn value(text: &str, line_start: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
            .parse()
            .unwrap()
    }
}
