//! The UDP ingest listener: a dedicated thread reading datagrams in batches
//! ([`sluice_udp::UdpReceiver`]), one payload per datagram (one event, a JSON array, NDJSON or
//! a Sereal document), fire and forget: nothing is acknowledged or logged in the WAL, bad input
//! is counted per reason (`/metrics`) and dropped.
//!
//! Completeness: once a second the thread adds to the store's counts of the current epoch, for
//! `(dc = the configured dc, type = "", subtype = "")` — the documented convention for what
//! cannot be attributed to a type — the datagrams the kernel dropped since the last time
//! (`kernel_dropped`) and the events dropped at ingest per reason (`dropped`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_collector::{DropCounters, IngestConfig, Ingestor};
use sluice_store::{Counts, Store};
use sluice_udp::{UdpReceiver, UdpStats};

use crate::metrics::{IngestCounters, SharedMetrics};
use crate::pipeline::{now_unix, Msg};

/// What the UDP thread needs.
pub(crate) struct UdpContext {
    pub tx: crate::pipeline::PipelineTx,
    pub store: Arc<dyn Store>,
    pub metrics: SharedMetrics,
    pub ingest: IngestConfig,
    pub dc: String,
    pub stop: Arc<AtomicBool>,
}

impl UdpContext {
    /// Receives until `stop` is set.
    pub(crate) fn run(self, mut receiver: UdpReceiver) {
        let mut ingestor = match Ingestor::new(self.ingest.clone()) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("sluice-server: UDP ingest config: {e}");
                return;
            }
        };
        let mut prev = UdpStats::default();
        let mut counters = IngestCounters::new("udp", self.metrics.clone());
        let mut second_drops = DropCounters::new();
        let mut last_report = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let now = now_unix();
            let mut events = Vec::new();
            let mut drops = DropCounters::new();
            let res = receiver.recv_batch(|payload, _from| {
                let out = ingestor.ingest(payload, now);
                drops.add(&out);
                events.extend(out.events);
            });
            if let Err(e) = res {
                eprintln!("sluice-server: UDP receive: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            if drops.payloads > 0 {
                counters.add_drops(&drops);
                for e in &events {
                    counters.add_events(&e.type_, 1);
                }
                second_drops.merge(&drops);
            }
            if !events.is_empty() && self.tx.blocking_send(Msg::Events { events, now }).is_err() {
                break; // the pipeline is gone
            }
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                prev = self.report(&mut receiver, prev, &mut second_drops, now);
            }
        }
        self.report(&mut receiver, prev, &mut second_drops, now_unix());
    }

    /// Publishes the receiver's counters and adds the second's drops to the store's counts.
    fn report(
        &self,
        receiver: &mut UdpReceiver,
        prev: UdpStats,
        drops: &mut DropCounters,
        now: i64,
    ) -> UdpStats {
        let stats = receiver.stats();
        let m = &self.metrics;
        m.udp_datagrams
            .inc_by(stats.datagrams.saturating_sub(prev.datagrams));
        m.udp_bytes.inc_by(stats.bytes.saturating_sub(prev.bytes));
        m.udp_truncated
            .inc_by(stats.truncated.saturating_sub(prev.truncated));
        m.udp_kernel_drops
            .inc_by(stats.kernel_drops.saturating_sub(prev.kernel_drops));
        let mut dropped: BTreeMap<String, u64> = drops
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.as_str().to_string(), n))
            .collect();
        let truncated = stats.truncated.saturating_sub(prev.truncated);
        if truncated > 0 {
            *dropped.entry("oversized".into()).or_default() += truncated;
        }
        let counts = Counts {
            kernel_dropped: stats.kernel_drops.saturating_sub(prev.kernel_drops),
            dropped,
            ..Counts::default()
        };
        *drops = DropCounters::new();
        if !counts.is_zero() {
            if let Err(e) = self.store.add_counts(now, &self.dc, "", "", &counts) {
                eprintln!("sluice-server: recording UDP drops: {e}");
                self.metrics.store_errors.inc();
            }
        }
        stats
    }
}
