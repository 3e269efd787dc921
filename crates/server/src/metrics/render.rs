//! `GET /metrics` in the Prometheus text format: the registry and the store's damage counters
//! through the `prometheus` crate's [`TextEncoder`], the values known only at scrape time
//! (flush lag, store usage) set first.
//!
//! The substream runner's counters ([`render_substreams`]) are still written by hand: they are
//! a snapshot of the runner's own counts, and the encoder would print their labels sorted by
//! name (`reason` before `substream`), which changes series that dashboards and tests match as
//! text.

use prometheus::proto::MetricFamily;
use prometheus::{Encoder, Registry, TextEncoder};

use super::registry::{counter, reg};
use super::{as_gauge, Metrics};

/// Renders every metric in the Prometheus text format, then the store's damage counters.
pub(crate) fn render(m: &Metrics, store: &dyn sluice_store::Store, now: i64) -> String {
    m.flush_lag.set(m.flush_lag_seconds(now));
    if let Some(u) = store.usage() {
        m.store_bytes.set(as_gauge(u.bytes));
        m.store_partitions.set(as_gauge(u.partitions));
        m.store_oldest_epoch.set(u.oldest_epoch.unwrap_or(0));
    }
    let mut families = m.registry.gather();
    families.extend(store_damage(&store.damage_stats()));
    let mut buf = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
        eprintln!("sluice-server: rendering /metrics: {e}");
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// The substream runner's counters: results stored and misses by substream and reason, the
/// queue, the latency from a blob's store to its results, the Python pool.
pub(crate) fn render_substreams(o: &mut String, s: &sluice_substreams::RunnerSnapshot) {
    use std::fmt::Write as _;
    // A Prometheus label value: `\`, `"` and newlines escaped.
    let label = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let head = |o: &mut String, name: &str, help: &str, kind: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    head(
        o,
        "sluice_substream_results_total",
        "Substream results stored, by substream.",
        "counter",
    );
    for (name, st) in &s.substreams {
        let _ = writeln!(
            o,
            "sluice_substream_results_total{{substream=\"{}\"}} {}",
            label(name),
            st.stored
        );
    }
    head(
        o,
        "sluice_substream_result_bytes_total",
        "Bytes of substream results stored, by substream.",
        "counter",
    );
    for (name, st) in &s.substreams {
        let _ = writeln!(
            o,
            "sluice_substream_result_bytes_total{{substream=\"{}\"}} {}",
            label(name),
            st.stored_bytes
        );
    }
    head(
        o,
        "sluice_substream_misses_total",
        "Substream runs shed or failed (no result stored; readers fall back), by substream and reason.",
        "counter",
    );
    for (name, st) in &s.substreams {
        for (reason, n) in &st.misses {
            let _ = writeln!(
                o,
                "sluice_substream_misses_total{{substream=\"{}\",reason=\"{}\"}} {n}",
                label(name),
                label(reason)
            );
        }
    }
    let rows: [(&str, &str, &str, f64); 8] = [
        (
            "sluice_substream_queue",
            "Stored chunks waiting for their substreams.",
            "gauge",
            s.queued as f64,
        ),
        (
            "sluice_substream_queue_capacity",
            "Capacity of the substream queue (substream_queue).",
            "gauge",
            s.queue_capacity as f64,
        ),
        (
            "sluice_substream_blobs_run_total",
            "Stored chunks run through their substreams.",
            "counter",
            s.blobs_run as f64,
        ),
        (
            "sluice_substream_latency_seconds_sum",
            "Seconds from a chunk stored to its substream results stored (sum).",
            "counter",
            s.latency_sum_secs,
        ),
        (
            "sluice_substream_latency_seconds_count",
            "Chunks whose substream latency is summed.",
            "counter",
            s.latency_count as f64,
        ),
        (
            "sluice_substream_latency_seconds_max",
            "Largest latency from a chunk stored to its substream results stored.",
            "gauge",
            s.latency_max_secs,
        ),
        (
            "sluice_substreams_registered",
            "Substreams in the registry.",
            "gauge",
            s.registered as f64,
        ),
        (
            "sluice_substreams_enabled",
            "Substreams enabled (run on new blobs).",
            "gauge",
            s.enabled as f64,
        ),
    ];
    for (name, help, kind, v) in rows {
        head(o, name, help, kind);
        let _ = writeln!(o, "{name} {v}");
    }
    if let Some(p) = &s.pool {
        let rows: [(&str, u64); 8] = [
            ("spawned", p.spawned),
            ("recycled", p.recycled),
            ("killed_wall", p.killed_wall),
            ("killed_cpu", p.killed_cpu),
            ("killed_memory", p.killed_memory),
            ("crashed", p.crashed),
            ("respawn_throttled", p.respawn_throttled),
            ("live", p.live),
        ];
        head(
            o,
            "sluice_substream_python_workers",
            "The Python worker pool of code substreams, by event (live: workers now).",
            "counter",
        );
        for (what, n) in rows {
            let _ = writeln!(o, "sluice_substream_python_workers{{what=\"{what}\"}} {n}");
        }
    }
}

/// The store's damage counters (counted as partitions are loaded, see the store README), as
/// metric families of their own: the store keeps the counts, so they are read per scrape.
fn store_damage(d: &sluice_store::DamageStats) -> Vec<MetricFamily> {
    let rows = [
        (
            "sluice_store_damaged_ranges_total",
            "Damaged ranges skipped in the middle of store logs.",
            d.damaged_ranges,
        ),
        (
            "sluice_store_damaged_bytes_total",
            "Bytes in those damaged ranges.",
            d.damaged_bytes,
        ),
        (
            "sluice_store_torn_tails_total",
            "Torn log tails found (cut by this writer).",
            d.torn_tails,
        ),
        (
            "sluice_store_torn_tail_bytes_total",
            "Bytes in those torn tails.",
            d.torn_tail_bytes,
        ),
        (
            "sluice_store_index_entries_rebuilt_total",
            "Epoch index entries rebuilt from blob keys.",
            d.index_entries_rebuilt,
        ),
    ];
    let r = Registry::new();
    for (name, help, v) in rows {
        reg(&r, counter(name, help)).inc_by(v);
    }
    r.gather()
}

/// The rollup exporters' counters, by sink (`sluice_export_*`).
pub(crate) fn render_exports(o: &mut String, m: &super::Metrics) {
    use std::fmt::Write as _;
    let exporters = m.exporters.lock().unwrap_or_else(|e| e.into_inner());
    if exporters.is_empty() {
        return;
    }
    let label = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let stats: Vec<(String, sluice_exports::ExporterStats)> = exporters
        .iter()
        .map(|(sink, c)| (label(sink), c.snapshot()))
        .collect();
    type Field = fn(&sluice_exports::ExporterStats) -> u64;
    let series: [(&str, &str, &str, Field); 6] = [
        (
            "sluice_export_sent_rows_total",
            "Rollup rows a sink acknowledged.",
            "counter",
            |s| s.sent_rows,
        ),
        (
            "sluice_export_failed_attempts_total",
            "Sends that failed and will be retried.",
            "counter",
            |s| s.failed_attempts,
        ),
        (
            "sluice_export_dropped_rows_total",
            "Rows dropped from a full export queue (oldest first).",
            "counter",
            |s| s.dropped_rows,
        ),
        (
            "sluice_export_rejected_rows_total",
            "Rows a sink refused for good (HTTP 4xx).",
            "counter",
            |s| s.rejected_rows,
        ),
        (
            "sluice_export_source_errors_total",
            "Rollup queries of an exporter that failed.",
            "counter",
            |s| s.source_errors,
        ),
        (
            "sluice_export_queue",
            "Batches waiting to be sent.",
            "gauge",
            |s| s.queue_len,
        ),
    ];
    for (name, help, kind, get) in series {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (sink, s) in &stats {
            let _ = writeln!(o, "{name}{{sink=\"{sink}\"}} {}", get(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use sluice_collector::{DropCounters, DropReason};

    use crate::metrics::tests::value;
    use crate::metrics::IngestCounters;

    #[test]
    fn renders_counters_gauges_and_labels() {
        let m = Metrics::new();
        m.events_flushed.inc_by(3);
        m.pending_events.set(7);
        let m = Arc::new(m);
        let mut d = DropCounters::new();
        d.payloads = 2;
        d.record(DropReason::Malformed, 4);
        let mut c = IngestCounters::new("http", m.clone());
        c.add_drops(&d);
        c.add_events("WEB", 1);
        let text = render(&m, &sluice_store::InMemoryStore::new(), 0);
        assert_eq!(value(&text, "sluice_events_flushed_total"), 3.0);
        assert_eq!(value(&text, "sluice_pending_events"), 7.0);
        assert_eq!(
            value(&text, "sluice_payloads_total{transport=\"http\"}"),
            2.0
        );
        assert_eq!(
            value(
                &text,
                "sluice_events_dropped_total{reason=\"malformed\",transport=\"http\"}"
            ),
            4.0
        );
        assert_eq!(value(&text, "sluice_flush_lag_seconds"), 0.0);
        assert!(text.contains("sluice_build_info{version=\""));
        assert!(value(&text, "process_resident_memory_bytes") > 0.0);
        assert!(value(&text, "process_open_fds") > 0.0);
        assert_eq!(value(&text, "sluice_store_damaged_ranges_total"), 0.0);
    }
}
