//! [`IngestCounters`]: one thread's handles on the ingest counters of one transport, so that
//! counting a payload costs a few atomic adds and never the counter maps' lock.
//!
//! The number of event types with a label of their own is capped ([`MAX_TYPE_LABELS`]): a
//! flood of distinct types neither grows `/metrics` nor this cache without bound.

use std::collections::HashMap;

use prometheus::IntCounter;
use sluice_collector::{DropCounters, DropReason};

use super::{SharedMetrics, MAX_TYPE_LABELS};

/// One thread's handles on the ingest counters of one transport (`sluice_events_in_total` by
/// type, `sluice_payloads_total`, `sluice_payloads_rejected_total`,
/// `sluice_events_dropped_total` by reason): the counter maps' locks are taken once per new
/// label set, then each count is one atomic add.
pub struct IngestCounters {
    transport: &'static str,
    metrics: SharedMetrics,
    by_type: HashMap<String, IntCounter>,
    /// The `_other` handle, once the cache is full.
    other: Option<IntCounter>,
    payloads: IntCounter,
    payloads_rejected: IntCounter,
    dropped: Vec<IntCounter>,
}

impl IngestCounters {
    /// Handles for `transport` (`http`, `tcp`, `udp`).
    pub fn new(transport: &'static str, metrics: SharedMetrics) -> IngestCounters {
        IngestCounters {
            transport,
            by_type: HashMap::new(),
            other: None,
            payloads: metrics.payloads.with_label_values(&[transport]),
            payloads_rejected: metrics.payloads_rejected.with_label_values(&[transport]),
            dropped: DropReason::ALL
                .iter()
                .map(|r| {
                    metrics
                        .events_dropped
                        .with_label_values(&[transport, r.as_str()])
                })
                .collect(),
            metrics,
        }
    }

    /// Counts `n` accepted events of `type_`.
    pub fn add_events(&mut self, type_: &str, n: u64) {
        if let Some(c) = self.by_type.get(type_) {
            c.inc_by(n);
            return;
        }
        if self.by_type.len() >= MAX_TYPE_LABELS {
            // The label set is full: a type not met yet counts as `_other` (a flood of distinct
            // types neither grows this cache nor takes the shared lock per event).
            let other = self.other.get_or_insert_with(|| {
                self.metrics
                    .events_in
                    .with_label_values(&[self.transport, "_other"])
            });
            other.inc_by(n);
            return;
        }
        let c = self.metrics.events_in_counter(self.transport, type_);
        c.inc_by(n);
        self.by_type.insert(type_.to_owned(), c);
    }

    /// Adds ingest outcomes (payloads, rejections, drops by reason).
    pub fn add_drops(&self, d: &DropCounters) {
        self.payloads.inc_by(d.payloads);
        self.payloads_rejected.inc_by(d.payloads_rejected);
        for ((_, n), c) in d.iter().zip(&self.dropped) {
            if n > 0 {
                c.inc_by(n);
            }
        }
    }

    /// Counts `n` events dropped for `reason`.
    pub fn add_drop(&self, reason: DropReason, n: u64) {
        if let Some(i) = DropReason::ALL.iter().position(|r| *r == reason) {
            self.dropped[i].inc_by(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::metrics::tests::value;
    use crate::metrics::{render, Metrics};

    #[test]
    fn type_labels_are_capped() {
        let m = Arc::new(Metrics::new());
        let mut c = IngestCounters::new("http", m.clone());
        for i in 0..MAX_TYPE_LABELS + 10 {
            c.add_events(&format!("T{i}"), 1);
        }
        c.add_events("T0", 1);
        let text = render(&m, &sluice_store::InMemoryStore::new(), 0);
        let series = text
            .lines()
            .filter(|l| l.starts_with("sluice_events_in_total{"))
            .count();
        assert_eq!(series, MAX_TYPE_LABELS + 1, "{text}");
        assert_eq!(
            value(
                &text,
                "sluice_events_in_total{transport=\"http\",type=\"_other\"}"
            ),
            10.0
        );
        assert_eq!(
            value(
                &text,
                "sluice_events_in_total{transport=\"http\",type=\"T0\"}"
            ),
            2.0
        );
    }
}
