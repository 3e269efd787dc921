//! The server's counters and gauges ([`Metrics`]), shared by the pipeline thread, the
//! listeners and the HTTP handlers behind one mutex ([`SharedMetrics`]), and their rendering in
//! the Prometheus text format for `GET /metrics` ([`render`]). A new metric: a field here, its
//! update where the thing happens, its lines in [`render`].
//!
//! The mutex is taken through [`LockMetrics::locked`], which takes the data even if a thread
//! panicked while holding the lock: every update leaves the counters consistent, so one panic
//! must not take the metrics (and every thread that counts) down with it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_collector::DropCounters;

use sluice_reader::time::now_unix;

/// Counters shown by `/metrics`, updated by the pipeline thread.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    /// Events accepted, per (transport, type).
    pub events_in: BTreeMap<(String, String), u64>,
    /// Payloads, accepted events and drops per reason.
    pub drops: DropCounters,
    /// Events written to the store.
    pub events_flushed: u64,
    /// Events that arrived after their epoch was flushed.
    pub late_events: u64,
    /// Events lost because they could not be encoded.
    pub dropped_events: u64,
    /// Blobs (chunks) written.
    pub blobs_written: u64,
    /// Bytes of blobs written.
    pub blob_bytes_written: u64,
    /// Store errors met while flushing, expiring or syncing (the work is retried).
    pub store_errors: u64,
    /// Events held by the aggregator, not yet written.
    pub pending_events: u64,
    /// Bytes of those events (see `Aggregator::pending_bytes`).
    pub pending_bytes: u64,
    /// The memory budget (`max_pending_bytes`).
    pub max_pending_bytes: u64,
    /// How long the last flush took (build, write, sync), seconds.
    pub last_flush_seconds: f64,
    /// Unix time of the last flush that wrote something.
    pub last_write_unix: i64,
    /// Partitions dropped by retention.
    pub partitions_expired: u64,
    /// WAL records replayed at start.
    pub wal_replayed_records: u64,
    /// WAL records appended.
    pub wal_appends: u64,
    /// WAL errors (append, checkpoint).
    pub wal_errors: u64,
    /// Highest WAL sequence number checkpointed (its events are in the store).
    pub wal_checkpointed_seq: u64,
    /// WAL done notes appended (groups stored or spooled, see `sluice_collector::replay`).
    pub wal_notes: u64,
    /// Events skipped by the WAL replay at start because notes said they were stored/spooled.
    pub wal_replay_skipped_events: u64,
    /// Batches waiting in the spool (the store failed to take them).
    pub spool_batches: u64,
    /// Bytes of batches waiting in the spool.
    pub spool_bytes: u64,
    /// Events in batches waiting in the spool.
    pub spool_events: u64,
    /// Batches written to neither store nor spool yet, in memory.
    pub memory_batches: u64,
    /// The spool's bound (`spool_max_bytes`).
    pub spool_max_bytes: u64,
    /// Backpressure is on: the spool is full; acknowledged payloads get 503, UDP is shed.
    pub backpressure: bool,
    /// Acknowledged payloads refused under backpressure.
    pub payloads_shed: u64,
    /// Why acknowledged ingest is unavailable now (disk below the reserve, WAL failing), if it
    /// is (see [`crate::disk`]).
    pub disk_unavailable: Option<String>,
    /// Lowest free space of the data, WAL and spool disks at the last check, bytes.
    pub disk_free_bytes: u64,
    /// The free-space reserve (`min_free_bytes`).
    pub min_free_bytes: u64,
    /// Acknowledged payloads refused while ingest was unavailable.
    pub payloads_refused_unavailable: u64,
    /// TCP connections accepted.
    pub tcp_connections: u64,
    /// TCP connections open now.
    pub tcp_connections_open: u64,
    /// TCP messages (lines, frames) received.
    pub tcp_messages: u64,
    /// HTTP connections open now.
    pub http_connections_open: u64,
    /// `GET /v1/tail` streams open now.
    pub tail_streams: u64,
    /// Connections refused, per (transport, reason): `cap` (at the cap, none idle to evict),
    /// `backlog` (too many waiting for an eviction: closed unanswered), `tail_cap` (HTTP 503).
    pub connections_refused: BTreeMap<(&'static str, &'static str), u64>,
    /// Idle connections closed to make room for a new one, per transport.
    pub connections_evicted: BTreeMap<&'static str, u64>,
    /// Connections closed by a timeout, per (transport, kind): HTTP `header` / `idle` /
    /// `write`, TCP `idle` / `read`.
    pub connection_timeouts: BTreeMap<(&'static str, &'static str), u64>,
    /// The connection caps in force (after fitting them to `RLIMIT_NOFILE`), per transport.
    pub max_connections: BTreeMap<&'static str, u64>,
    /// UDP datagrams received (delivered to the ingestor).
    pub udp_datagrams: u64,
    /// UDP payload bytes received.
    pub udp_bytes: u64,
    /// UDP datagrams over the largest size, dropped.
    pub udp_truncated: u64,
    /// UDP datagrams the kernel dropped before Sluice read them.
    pub udp_kernel_drops: u64,
    /// Events served by the read endpoints, per endpoint (`events`, `tail`).
    pub events_out: BTreeMap<String, u64>,
    /// Durations of store writes (put, index, counts, flush).
    pub store_write_seconds: crate::histogram::StoreWriteSeconds,
    /// Sizes of blobs written.
    pub blob_bytes: crate::histogram::BlobBytes,
}

/// Shared handle to the metrics.
pub type SharedMetrics = Arc<Mutex<Metrics>>;

/// Locking the metrics without the poison cascade (see the module docs).
pub trait LockMetrics {
    /// The metrics, locked; a poisoned lock is taken as is.
    fn locked(&self) -> MutexGuard<'_, Metrics>;
}

impl LockMetrics for Mutex<Metrics> {
    fn locked(&self) -> MutexGuard<'_, Metrics> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the metrics in the Prometheus text format.
pub(crate) fn render(m: &Metrics) -> String {
    let mut o = String::new();
    let counter = |o: &mut String, name: &str, help: &str, kind: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    counter(
        &mut o,
        "sluice_events_in_total",
        "Events accepted, by transport and type.",
        "counter",
    );
    for ((transport, type_), n) in &m.events_in {
        let _ = writeln!(
            o,
            "sluice_events_in_total{{transport=\"{}\",type=\"{}\"}} {n}",
            label(transport),
            label(type_)
        );
    }
    counter(
        &mut o,
        "sluice_events_dropped_total",
        "Events (or payloads) dropped at ingest, by reason.",
        "counter",
    );
    for (reason, n) in m.drops.iter() {
        let _ = writeln!(
            o,
            "sluice_events_dropped_total{{reason=\"{}\"}} {n}",
            reason.as_str()
        );
    }
    let rows: [(&str, &str, &str, f64); 35] = [
        (
            "sluice_payloads_total",
            "Payloads received.",
            "counter",
            m.drops.payloads as f64,
        ),
        (
            "sluice_payloads_rejected_total",
            "Payloads refused as a whole.",
            "counter",
            m.drops.payloads_rejected as f64,
        ),
        (
            "sluice_events_flushed_total",
            "Events written to the store and readable.",
            "counter",
            m.events_flushed as f64,
        ),
        (
            "sluice_events_late_total",
            "Events written after their epoch was first flushed.",
            "counter",
            m.late_events as f64,
        ),
        (
            "sluice_events_unencodable_total",
            "Events lost because they could not be encoded.",
            "counter",
            m.dropped_events as f64,
        ),
        (
            "sluice_blobs_written_total",
            "Blob chunks written.",
            "counter",
            m.blobs_written as f64,
        ),
        (
            "sluice_blob_bytes_written_total",
            "Bytes of blob chunks written.",
            "counter",
            m.blob_bytes_written as f64,
        ),
        (
            "sluice_store_errors_total",
            "Store errors while flushing, syncing or expiring (work is retried).",
            "counter",
            m.store_errors as f64,
        ),
        (
            "sluice_pending_events",
            "Events held in open epochs, not yet written.",
            "gauge",
            m.pending_events as f64,
        ),
        (
            "sluice_pending_bytes",
            "Bytes of pending events in memory (open epochs and unwritten batches).",
            "gauge",
            m.pending_bytes as f64,
        ),
        (
            "sluice_max_pending_bytes",
            "Memory budget for pending events; beyond it the server applies backpressure.",
            "gauge",
            m.max_pending_bytes as f64,
        ),
        (
            "sluice_flush_duration_seconds",
            "Duration of the last flush (build, write, sync).",
            "gauge",
            m.last_flush_seconds,
        ),
        (
            "sluice_flush_lag_seconds",
            "Seconds since the last flush that wrote data (0 before any).",
            "gauge",
            if m.last_write_unix == 0 {
                0.0
            } else {
                (now_unix() - m.last_write_unix) as f64
            },
        ),
        (
            "sluice_partitions_expired_total",
            "Time partitions dropped by retention.",
            "counter",
            m.partitions_expired as f64,
        ),
        (
            "sluice_wal_replayed_records",
            "WAL records replayed at start.",
            "gauge",
            m.wal_replayed_records as f64,
        ),
        (
            "sluice_wal_appends_total",
            "Payloads logged in the WAL.",
            "counter",
            m.wal_appends as f64,
        ),
        (
            "sluice_wal_errors_total",
            "WAL append or checkpoint errors.",
            "counter",
            m.wal_errors as f64,
        ),
        (
            "sluice_wal_checkpointed_seq",
            "Highest WAL record whose events are stored.",
            "gauge",
            m.wal_checkpointed_seq as f64,
        ),
        (
            "sluice_wal_notes_total",
            "WAL done notes appended (groups stored or spooled; replay skips them).",
            "counter",
            m.wal_notes as f64,
        ),
        (
            "sluice_wal_replay_skipped_events",
            "Events the WAL replay at start skipped because a done note covered them.",
            "gauge",
            m.wal_replay_skipped_events as f64,
        ),
        (
            "sluice_spool_batches",
            "Batches waiting in the on-disk spool for the store (the backlog).",
            "gauge",
            m.spool_batches as f64,
        ),
        (
            "sluice_spool_bytes",
            "Bytes of batches waiting in the spool.",
            "gauge",
            m.spool_bytes as f64,
        ),
        (
            "sluice_spool_events",
            "Events in batches waiting in the spool.",
            "gauge",
            m.spool_events as f64,
        ),
        (
            "sluice_spool_max_bytes",
            "Spool bound; beyond it the server applies backpressure.",
            "gauge",
            m.spool_max_bytes as f64,
        ),
        (
            "sluice_memory_batches",
            "Closed batches held in memory, not yet stored or spooled.",
            "gauge",
            m.memory_batches as f64,
        ),
        (
            "sluice_backpressure",
            "1 while the spool is full or pending events exceed max_pending_bytes: acknowledged payloads get 503, UDP events are shed.",
            "gauge",
            if m.backpressure { 1.0 } else { 0.0 },
        ),
        (
            "sluice_payloads_shed_total",
            "Acknowledged payloads refused under backpressure (the sender retries).",
            "counter",
            m.payloads_shed as f64,
        ),
        (
            "sluice_tcp_connections_total",
            "TCP connections accepted.",
            "counter",
            m.tcp_connections as f64,
        ),
        (
            "sluice_tcp_connections_open",
            "TCP connections open.",
            "gauge",
            m.tcp_connections_open as f64,
        ),
        (
            "sluice_udp_datagrams_total",
            "UDP datagrams received.",
            "counter",
            m.udp_datagrams as f64,
        ),
        (
            "sluice_udp_bytes_total",
            "UDP payload bytes received.",
            "counter",
            m.udp_bytes as f64,
        ),
        (
            "sluice_udp_truncated_total",
            "UDP datagrams over the largest size, dropped.",
            "counter",
            m.udp_truncated as f64,
        ),
        (
            "sluice_udp_kernel_drops_total",
            "UDP datagrams the kernel dropped before Sluice read them.",
            "counter",
            m.udp_kernel_drops as f64,
        ),
        (
            "sluice_udp_payloads_total",
            "UDP datagrams ingested (same as datagrams).",
            "counter",
            m.udp_datagrams as f64,
        ),
        (
            "sluice_tcp_messages_total",
            "TCP messages (lines or frames) received.",
            "counter",
            m.tcp_messages as f64,
        ),
    ];
    for (name, help, kind, v) in rows {
        counter(&mut o, name, help, kind);
        let _ = writeln!(o, "{name} {v}");
    }
    // The disk guard (crate::disk).
    let disk: [(&str, &str, &str, f64); 4] = [
        (
            "sluice_disk_unavailable",
            "1 while acknowledged ingest is refused: a disk below min_free_bytes, or WAL writes failing.",
            "gauge",
            if m.disk_unavailable.is_some() { 1.0 } else { 0.0 },
        ),
        (
            "sluice_disk_free_bytes",
            "Lowest free space of the data, WAL and spool disks at the last check.",
            "gauge",
            m.disk_free_bytes as f64,
        ),
        (
            "sluice_disk_min_free_bytes",
            "The free-space reserve below which ingest is refused.",
            "gauge",
            m.min_free_bytes as f64,
        ),
        (
            "sluice_payloads_refused_unavailable_total",
            "Acknowledged payloads refused while ingest was unavailable (the sender retries).",
            "counter",
            m.payloads_refused_unavailable as f64,
        ),
    ];
    for (name, help, kind, v) in disk {
        counter(&mut o, name, help, kind);
        let _ = writeln!(o, "{name} {v}");
    }
    counter(
        &mut o,
        "sluice_events_out_total",
        "Events served by the read endpoints, by endpoint (events, tail).",
        "counter",
    );
    for endpoint in ["events", "tail"] {
        let n = m.events_out.get(endpoint).copied().unwrap_or(0);
        let _ = writeln!(o, "sluice_events_out_total{{endpoint=\"{endpoint}\"}} {n}");
    }
    render_connections(&mut o, m);
    m.store_write_seconds.render(
        &mut o,
        "sluice_store_write_seconds",
        "Duration of store writes (blob put, epoch index, counts, flush), seconds.",
    );
    m.blob_bytes.render(
        &mut o,
        "sluice_blob_bytes",
        "Size of the blob chunks written, bytes.",
    );
    o
}

/// The connection metrics (caps, refusals, evictions, timeouts: see [`crate::limits`]).
fn render_connections(o: &mut String, m: &Metrics) {
    let head = |o: &mut String, name: &str, help: &str, kind: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    head(
        o,
        "sluice_http_connections",
        "HTTP connections open.",
        "gauge",
    );
    let _ = writeln!(o, "sluice_http_connections {}", m.http_connections_open);
    head(
        o,
        "sluice_tail_streams",
        "GET /v1/tail streams open.",
        "gauge",
    );
    let _ = writeln!(o, "sluice_tail_streams {}", m.tail_streams);
    head(
        o,
        "sluice_max_connections",
        "Connection cap in force per transport (after fitting RLIMIT_NOFILE).",
        "gauge",
    );
    for (transport, n) in &m.max_connections {
        let _ = writeln!(o, "sluice_max_connections{{transport=\"{transport}\"}} {n}");
    }
    head(
        o,
        "sluice_connections_refused_total",
        "Connections or streams refused, by transport and reason (cap, backlog, tail_cap).",
        "counter",
    );
    for ((transport, reason), n) in &m.connections_refused {
        let _ = writeln!(
            o,
            "sluice_connections_refused_total{{transport=\"{transport}\",reason=\"{reason}\"}} {n}"
        );
    }
    head(
        o,
        "sluice_connections_evicted_total",
        "Idle connections closed to admit a new one at the cap.",
        "counter",
    );
    for (transport, n) in &m.connections_evicted {
        let _ = writeln!(
            o,
            "sluice_connections_evicted_total{{transport=\"{transport}\"}} {n}"
        );
    }
    head(
        o,
        "sluice_connection_timeouts_total",
        "Connections closed by a timeout, by transport and kind (header, idle, write, read).",
        "counter",
    );
    for ((transport, kind), n) in &m.connection_timeouts {
        let _ = writeln!(
            o,
            "sluice_connection_timeouts_total{{transport=\"{transport}\",kind=\"{kind}\"}} {n}"
        );
    }
}

/// Appends the store's damage counters (counted as partitions are loaded, see the store README).
/// The substream runner's counters: results stored and misses by substream and reason, the
/// queue, the latency from a blob's store to its results, the Python pool.
pub(crate) fn render_substreams(o: &mut String, s: &sluice_substreams::RunnerSnapshot) {
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

pub(crate) fn render_store_damage(o: &mut String, d: &sluice_store::DamageStats) {
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
    for (name, help, v) in rows {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
    }
}
