//! The registry of the server's metrics: [`Metrics`], every counter, gauge and histogram with
//! its name, help and buckets, registered once in one [`Registry`] (the process collector
//! beside them, see `process.rs`), and the few updates that are more than one add
//! (why ingest is unavailable, the flush lag's wait).
//!
//! A new metric: a field here, registered in [`Metrics::new`], updated where the thing happens.
//! The names and labels are a contract with dashboards and tests: a rename is a breaking change.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use prometheus::core::Collector;
use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};
use sluice_collector::DropReason;

/// Most distinct event types counted under their own `sluice_events_in_total` label (all
/// transports together); the rest count as `_other`.
pub const MAX_TYPE_LABELS: usize = 256;

/// Upper bounds (seconds) of the store-write and flush-duration buckets.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Upper bounds (bytes) of the `sluice_blob_bytes` buckets.
const BLOB_BYTES_BUCKETS: &[f64] = &[
    1024.0, 4096.0, 16384.0, 65536.0, 131072.0, 262144.0, 524288.0, 1048576.0, 4194304.0,
];
/// Upper bounds (seconds) of the freshness buckets (an event's second to stored).
const FRESHNESS_BUCKETS: &[f64] = &[0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0, 60.0];
/// Upper bounds (seconds) of the HTTP request-duration buckets.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Every metric of the server, shared as [`SharedMetrics`].
pub struct Metrics {
    pub(super) registry: Registry,
    /// Events accepted, by transport and type (see [`IngestCounters`]).
    pub events_in: IntCounterVec,
    /// The (transport, type) label sets of `events_in` (at most [`MAX_TYPE_LABELS`]); taken
    /// only when a thread meets a type it has no handle for.
    pub(super) type_labels: Mutex<HashSet<(String, String)>>,
    /// Events (or payloads) dropped at ingest, by transport and reason.
    pub events_dropped: IntCounterVec,
    /// Payloads received, by transport.
    pub payloads: IntCounterVec,
    /// Payloads refused as a whole, by transport.
    pub payloads_rejected: IntCounterVec,
    /// Events written to the store.
    pub events_flushed: IntCounter,
    /// Events that arrived after their epoch was flushed.
    pub late_events: IntCounter,
    /// Events lost because they could not be encoded.
    pub dropped_events: IntCounter,
    /// Blobs (chunks) written.
    pub blobs_written: IntCounter,
    /// Column files written (parts and merged hours).
    pub columns_files_written: IntCounter,
    /// Rows written to column files.
    pub columns_rows_written: IntCounter,
    /// Bytes of column files written.
    pub columns_bytes_written: IntCounter,
    /// Runs of the columns writer that failed (retried on the next run).
    pub columns_errors: IntCounter,
    /// Seconds between now and the end of what the column files cover.
    pub columns_lag_seconds: IntGauge,
    /// Bytes of this collector's column files (sampled by the writer).
    pub columns_bytes: IntGauge,
    /// Bytes of blobs written.
    pub blob_bytes_written: IntCounter,
    /// Store errors met while flushing, expiring or syncing (the work is retried).
    pub store_errors: IntCounter,
    /// Events held by the aggregator, not yet written.
    pub pending_events: IntGauge,
    /// Bytes of those events (see `Aggregator::pending_bytes`).
    pub pending_bytes: IntGauge,
    /// The memory budget (`max_pending_bytes`).
    pub max_pending_bytes: IntGauge,
    /// Durations of flushes that wrote something (build, write, sync).
    pub flush_seconds: Histogram,
    /// How long an acknowledged payload waited in a pipeline queue before a shard took it
    /// (where the tail latency of `POST /v1/events` comes from).
    pub ingest_queue_seconds: Histogram,
    /// How long it then waited for its WAL record's fsync.
    pub ingest_durable_seconds: Histogram,
    /// Unix time of the last flush that wrote something (0: none yet).
    pub last_write_unix: AtomicI64,
    /// Unix time data started waiting with nothing written since (0: nothing waits).
    pub waiting_since_unix: AtomicI64,
    /// From an event's second to its blob stored, per group stored, seconds.
    pub freshness_seconds: Histogram,
    /// Partitions dropped by retention.
    pub partitions_expired: IntCounter,
    /// The rollup exporters' counters, by sink (`sluice_export_*`).
    pub exporters: std::sync::Mutex<Vec<(String, Arc<sluice_exports::ExporterCounters>)>>,
    /// The alert engine's counters and the notifier (`sluice_alert_*`), while they run.
    pub alerts: std::sync::Mutex<Option<AlertStats>>,
    /// Partitions rewritten without the types or subtypes past their own retention.
    pub partitions_purged: IntCounter,
    /// WAL records replayed at start.
    pub wal_replayed_records: IntGauge,
    /// WAL records appended.
    pub wal_appends: IntCounter,
    /// WAL errors (append, checkpoint).
    pub wal_errors: IntCounter,
    /// Highest WAL sequence number checkpointed (its events are in the store).
    pub wal_checkpointed_seq: IntGauge,
    /// WAL done notes appended (groups stored or spooled, see `sluice_collector::exactly_once`).
    pub wal_notes: IntCounter,
    /// Events skipped by the WAL replay at start because notes said they were stored/spooled.
    pub wal_replay_skipped_events: IntGauge,
    /// Batches waiting in the spool (the store failed to take them).
    pub spool_batches: IntGauge,
    /// Bytes of batches waiting in the spool.
    pub spool_bytes: IntGauge,
    /// Events in batches waiting in the spool.
    pub spool_events: IntGauge,
    /// Batches written to neither store nor spool yet, in memory.
    pub memory_batches: IntGauge,
    /// Bytes of big encoders kept for the next second's groups (beside `pending_bytes`).
    pub spare_encoder_bytes: IntGauge,
    /// The spool's bound (`spool_max_bytes`).
    pub spool_max_bytes: IntGauge,
    /// 1 while backpressure is on: acknowledged payloads get 503, UDP is shed.
    pub backpressure: IntGauge,
    /// Acknowledged payloads refused under backpressure.
    pub payloads_shed: IntCounter,
    /// 1 while acknowledged ingest is unavailable (see [`crate::disk`]); why: [`Self::unavailable`].
    pub disk_unavailable: IntGauge,
    unavailable_reason: RwLock<Option<String>>,
    /// Lowest free space of the data, WAL and spool disks at the last check, bytes.
    pub disk_free_bytes: IntGauge,
    /// The free-space reserve in force on the data directory's disk (`min_free_bytes`, or its
    /// default for that disk: see `disk::reserve_for`).
    pub min_free_bytes: IntGauge,
    /// Acknowledged payloads refused while ingest was unavailable.
    pub payloads_refused_unavailable: IntCounter,
    /// TCP connections accepted.
    pub tcp_connections: IntCounter,
    /// TCP connections open now.
    pub tcp_connections_open: IntGauge,
    /// TCP messages (lines, frames) received.
    pub tcp_messages: IntCounter,
    /// HTTP connections open now.
    pub http_connections_open: IntGauge,
    /// `GET /v1/tail` streams open now.
    pub tail_streams: IntGauge,
    /// Tails attached to the live hub now (`crate::live`).
    pub tail_live_subscribers: IntGauge,
    /// Tails the live hub dropped, by reason: `slow` (queue full), `wal` (WAL failed),
    /// `shutdown`.
    pub tail_live_dropped: IntCounterVec,
    /// Records the live hub handed to tails (each built once, whatever the number of tails).
    pub tail_live_records: IntCounter,
    /// Connections refused, by transport and reason: `cap`, `backlog`, `tail_cap`.
    pub connections_refused: IntCounterVec,
    /// Requests refused by authentication or authorization, by transport and reason
    /// (`missing`, `malformed`, `unknown`, `expired`, `revoked`, `scope`, `types`, `cross_site`).
    pub auth_refused: IntCounterVec,
    /// Admin actions done, by action and token name (`local` for the per-start secret).
    pub admin_actions: IntCounterVec,
    /// UDP datagrams refused, by reason (`source`: outside `udp_allow`).
    pub udp_refused: IntCounterVec,
    /// TLS handshakes that failed, by transport.
    pub tls_handshake_errors: IntCounterVec,
    /// Certificate reloads, by outcome (`ok`, `error`).
    pub tls_reloads: IntCounterVec,
    /// Idle connections closed to make room for a new one, by transport.
    pub connections_evicted: IntCounterVec,
    /// Connections closed by a timeout, by transport and kind (HTTP `header` / `idle` /
    /// `write`, TCP `idle` / `read`).
    pub connection_timeouts: IntCounterVec,
    /// The connection caps in force (after fitting them to `RLIMIT_NOFILE`), by transport.
    pub max_connections: IntGaugeVec,
    /// UDP datagrams received (delivered to the ingestor).
    pub udp_datagrams: IntCounter,
    /// UDP payload bytes received.
    pub udp_bytes: IntCounter,
    /// UDP datagrams over the largest size, dropped.
    pub udp_truncated: IntCounter,
    /// UDP datagrams the kernel dropped before Sluice read them.
    pub udp_kernel_drops: IntCounter,
    /// statsd lines received (non-blank), by transport (`udp`, `tcp`).
    pub statsd_lines: IntCounterVec,
    /// Events made from statsd lines, by transport.
    pub statsd_events: IntCounterVec,
    /// statsd lines dropped, by reason (`sluice_statsd::Reject` labels; `shed`: refused under
    /// backpressure).
    pub statsd_dropped: IntCounterVec,
    /// statsd UDP datagrams received.
    pub statsd_datagrams: IntCounter,
    /// statsd UDP datagrams the kernel dropped before Sluice read them.
    pub statsd_kernel_drops: IntCounter,
    /// statsd UDP datagrams over the largest size, dropped.
    pub statsd_truncated: IntCounter,
    /// statsd datagrams and connections refused, by transport and reason (`source`: outside
    /// `udp_allow`).
    pub statsd_refused: IntCounterVec,
    /// Drops reported by emitters (`POST /v1/drops`), by reason (the standard five, else `other`).
    pub client_drops: IntCounterVec,
    /// OTLP log records received on `POST /v1/logs`, by outcome (`accepted`, `rejected`).
    pub otlp_records: IntCounterVec,
    /// OTLP log records rejected, by reason (`too_many`, `too_deep`, or the ingest's drop reasons).
    pub otlp_rejected: IntCounterVec,
    /// `POST /v1/logs` requests refused whole, by reason (`bad_body`, `too_large`,
    /// `unsupported_media_type`, `unsupported_encoding`, `forbidden`, `unavailable`).
    pub otlp_refused: IntCounterVec,
    /// Events served by the read endpoints, by endpoint (`events`, `tail`).
    pub events_out: IntCounterVec,
    /// HTTP responses, by route and status code.
    pub http_responses: IntCounterVec,
    /// HTTP request durations (to the response head; a stream's body is not included), by route.
    pub http_request_seconds: HistogramVec,
    /// Durations of store writes (put, index, counts, flush).
    pub store_write_seconds: Histogram,
    /// Sizes of blobs written.
    pub blob_bytes: Histogram,
    /// Seconds since data last reached the store while data waits (set at scrape time).
    pub(super) flush_lag: Gauge,
    /// Bytes the store holds on disk (set at scrape time, when the backend can tell).
    pub(super) store_bytes: IntGauge,
    /// Time partitions the store holds (idem).
    pub(super) store_partitions: IntGauge,
    /// First second of the oldest partition held, Unix time (0: none; idem).
    pub(super) store_oldest_epoch: IntGauge,
    /// `sluice_build_info{version}` = 1.
    build_info: IntGaugeVec,
}

/// Shared handle to the metrics.
pub type SharedMetrics = Arc<Metrics>;

/// The alert engine's counters and the notifier (its per-receiver stats), for `/metrics`.
pub type AlertStats = (
    Arc<sluice_alerts::engine::EngineStats>,
    Option<Arc<sluice_alerts::notify::Notifier>>,
);

/// A count as a gauge value (gauges are `i64`; a count beyond `i64::MAX` shows as the maximum).
pub fn as_gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered.
    pub fn new() -> Metrics {
        let r = Registry::new();
        super::process::register(&r);
        let m = Metrics {
            events_in: reg(&r, counter_vec("sluice_events_in_total", "Events accepted, by transport and type.", &["transport", "type"])),
            type_labels: Mutex::new(HashSet::new()),
            events_dropped: reg(&r, counter_vec("sluice_events_dropped_total", "Events (or payloads) dropped at ingest, by transport and reason.", &["transport", "reason"])),
            payloads: reg(&r, counter_vec("sluice_payloads_total", "Payloads received, by transport.", &["transport"])),
            payloads_rejected: reg(&r, counter_vec("sluice_payloads_rejected_total", "Payloads refused as a whole, by transport.", &["transport"])),
            events_flushed: reg(&r, counter("sluice_events_flushed_total", "Events written to the store and readable.")),
            late_events: reg(&r, counter("sluice_events_late_total", "Events written after their epoch was first flushed.")),
            dropped_events: reg(&r, counter("sluice_events_unencodable_total", "Events lost because they could not be encoded.")),
            blobs_written: reg(&r, counter("sluice_blobs_written_total", "Blob chunks written.")),
            columns_files_written: reg(&r, counter("sluice_columns_files_written_total", "Column files written (minute parts and merged hours).")),
            columns_rows_written: reg(&r, counter("sluice_columns_rows_written_total", "Rows written to column files.")),
            columns_bytes_written: reg(&r, counter("sluice_columns_bytes_written_total", "Bytes of column files written.")),
            columns_errors: reg(&r, counter("sluice_columns_errors_total", "Runs of the columns writer that failed (retried on the next run).")),
            columns_lag_seconds: reg(&r, gauge("sluice_columns_lag_seconds", "Seconds between now and the end of what the column files cover.")),
            columns_bytes: reg(&r, gauge("sluice_columns_bytes", "Bytes of column files under the columns location.")),
            blob_bytes_written: reg(&r, counter("sluice_blob_bytes_written_total", "Bytes of blob chunks written.")),
            store_errors: reg(&r, counter("sluice_store_errors_total", "Store errors while flushing, syncing or expiring (work is retried).")),
            pending_events: reg(&r, gauge("sluice_pending_events", "Events held in open epochs, not yet written.")),
            pending_bytes: reg(&r, gauge("sluice_pending_bytes", "Bytes of pending events in memory (open epochs and unwritten batches).")),
            max_pending_bytes: reg(&r, gauge("sluice_max_pending_bytes", "Memory budget for pending events; beyond it the server applies backpressure.")),
            flush_seconds: reg(&r, histogram("sluice_flush_duration_seconds", "Duration of the flushes that wrote data (build, write, sync), seconds.", SECONDS_BUCKETS)),
            ingest_queue_seconds: reg(&r, histogram("sluice_ingest_queue_seconds", "Time an acknowledged payload waited in a pipeline queue before a shard took it, seconds.", SECONDS_BUCKETS)),
            ingest_durable_seconds: reg(&r, histogram("sluice_ingest_durable_seconds", "Time an acknowledged payload waited for its WAL record to be durable after it was parsed and logged, seconds.", SECONDS_BUCKETS)),
            last_write_unix: AtomicI64::new(0),
            waiting_since_unix: AtomicI64::new(0),
            freshness_seconds: reg(&r, histogram("sluice_freshness_seconds", "From the end of an event's second to its blob being readable, per group with on-time events stored, seconds.", FRESHNESS_BUCKETS)),
            partitions_expired: reg(&r, counter("sluice_partitions_expired_total", "Time partitions dropped by retention.")),
            exporters: std::sync::Mutex::new(Vec::new()),
            alerts: std::sync::Mutex::new(None),
            partitions_purged: reg(&r, counter("sluice_partitions_purged_total", "Time partitions rewritten without the types or subtypes past their own retention (retention_by_type).")),
            wal_replayed_records: reg(&r, gauge("sluice_wal_replayed_records", "WAL records replayed at start.")),
            wal_appends: reg(&r, counter("sluice_wal_appends_total", "Payloads logged in the WAL.")),
            wal_errors: reg(&r, counter("sluice_wal_errors_total", "WAL append or checkpoint errors.")),
            wal_checkpointed_seq: reg(&r, gauge("sluice_wal_checkpointed_seq", "Highest WAL record whose events are stored.")),
            wal_notes: reg(&r, counter("sluice_wal_notes_total", "WAL done notes appended (groups stored or spooled; replay skips them).")),
            wal_replay_skipped_events: reg(&r, gauge("sluice_wal_replay_skipped_events", "Events the WAL replay at start skipped because a done note covered them.")),
            spool_batches: reg(&r, gauge("sluice_spool_batches", "Batches waiting in the on-disk spool for the store (the backlog).")),
            spool_bytes: reg(&r, gauge("sluice_spool_bytes", "Bytes of batches waiting in the spool.")),
            spool_events: reg(&r, gauge("sluice_spool_events", "Events in batches waiting in the spool.")),
            memory_batches: reg(&r, gauge("sluice_memory_batches", "Closed batches held in memory, not yet stored or spooled.")),
            spare_encoder_bytes: reg(&r, gauge("sluice_spare_encoder_bytes", "Bytes of big encoders of closed groups kept for the next second's groups (beside sluice_pending_bytes; at most half of max_pending_bytes).")),
            spool_max_bytes: reg(&r, gauge("sluice_spool_max_bytes", "Spool bound; beyond it the server applies backpressure.")),
            backpressure: reg(&r, gauge("sluice_backpressure", "1 while the spool is full or pending events exceed max_pending_bytes: acknowledged payloads get 503, UDP events are shed.")),
            payloads_shed: reg(&r, counter("sluice_payloads_shed_total", "Acknowledged payloads refused under backpressure (the sender retries).")),
            disk_unavailable: reg(&r, gauge("sluice_disk_unavailable", "1 while acknowledged ingest is refused: a disk below min_free_bytes, or WAL writes failing.")),
            unavailable_reason: RwLock::new(None),
            disk_free_bytes: reg(&r, gauge("sluice_disk_free_bytes", "Lowest free space of the data, WAL and spool disks at the last check.")),
            min_free_bytes: reg(&r, gauge("sluice_disk_min_free_bytes", "The free-space reserve in force on the data directory's disk (min_free_bytes, or the smaller of 64 MiB and 5 % of the disk): below it ingest is refused.")),
            payloads_refused_unavailable: reg(&r, counter("sluice_payloads_refused_unavailable_total", "Acknowledged payloads refused while ingest was unavailable (the sender retries).")),
            tcp_connections: reg(&r, counter("sluice_tcp_connections_total", "TCP connections accepted.")),
            tcp_connections_open: reg(&r, gauge("sluice_tcp_connections_open", "TCP connections open.")),
            tcp_messages: reg(&r, counter("sluice_tcp_messages_total", "TCP messages (lines or frames) received.")),
            http_connections_open: reg(&r, gauge("sluice_http_connections", "HTTP connections open.")),
            tail_streams: reg(&r, gauge("sluice_tail_streams", "GET /v1/tail streams open.")),
            tail_live_subscribers: reg(&r, gauge("sluice_tail_live_subscribers", "Tails receiving acknowledged events from memory (the live hub).")),
            tail_live_dropped: reg(&r, counter_vec("sluice_tail_live_dropped_total", "Tails the live hub dropped, by reason (slow: queue full; wal: WAL failed; shutdown); they resume from the store with their cursor.", &["reason"])),
            tail_live_records: reg(&r, counter("sluice_tail_live_records_total", "WAL records the live hub handed to tails (each built once for every tail).")),
            connections_refused: reg(&r, counter_vec("sluice_connections_refused_total", "Connections or streams refused, by transport and reason (cap, backlog, tail_cap).", &["transport", "reason"])),
            auth_refused: reg(&r, counter_vec("sluice_auth_refused_total", "Requests refused by authentication or authorization, by transport and reason (missing, malformed, unknown, expired, revoked, scope, types, cross_site).", &["transport", "reason"])),
            admin_actions: reg(&r, counter_vec("sluice_admin_actions_total", "Admin actions done, by action and token name (local: the per-start secret).", &["action", "token"])),
            udp_refused: reg(&r, counter_vec("sluice_udp_refused_total", "UDP datagrams refused, by reason (source: outside udp_allow).", &["reason"])),
            tls_handshake_errors: reg(&r, counter_vec("sluice_tls_handshake_errors_total", "TLS handshakes that failed, by transport.", &["transport"])),
            tls_reloads: reg(&r, counter_vec("sluice_tls_reloads_total", "Certificate reloads after the files changed, by outcome (ok, error).", &["outcome"])),
            connections_evicted: reg(&r, counter_vec("sluice_connections_evicted_total", "Idle connections closed to admit a new one at the cap.", &["transport"])),
            connection_timeouts: reg(&r, counter_vec("sluice_connection_timeouts_total", "Connections closed by a timeout, by transport and kind (header, idle, write, read).", &["transport", "kind"])),
            max_connections: reg(&r, gauge_vec("sluice_max_connections", "Connection cap in force per transport (after fitting RLIMIT_NOFILE).", &["transport"])),
            udp_datagrams: reg(&r, counter("sluice_udp_datagrams_total", "UDP datagrams received.")),
            udp_bytes: reg(&r, counter("sluice_udp_bytes_total", "UDP payload bytes received.")),
            udp_truncated: reg(&r, counter("sluice_udp_truncated_total", "UDP datagrams over the largest size, dropped.")),
            udp_kernel_drops: reg(&r, counter("sluice_udp_kernel_drops_total", "UDP datagrams the kernel dropped before Sluice read them.")),
            statsd_lines: reg(&r, counter_vec("sluice_statsd_lines_total", "statsd lines received (non-blank), by transport (udp, tcp).", &["transport"])),
            statsd_events: reg(&r, counter_vec("sluice_statsd_events_total", "Events made from statsd lines, by transport (udp, tcp).", &["transport"])),
            statsd_dropped: reg(&r, counter_vec("sluice_statsd_dropped_total", "statsd lines dropped, by reason (too_long, bad_utf8, no_value, bad_name, bad_value, bad_type, bad_rate, bad_tag, too_many_tags, bad_field; shed: refused under backpressure).", &["reason"])),
            statsd_datagrams: reg(&r, counter("sluice_statsd_datagrams_total", "statsd UDP datagrams received.")),
            statsd_kernel_drops: reg(&r, counter("sluice_statsd_kernel_drops_total", "statsd UDP datagrams the kernel dropped before Sluice read them.")),
            statsd_truncated: reg(&r, counter("sluice_statsd_truncated_total", "statsd UDP datagrams over the largest size, dropped.")),
            statsd_refused: reg(&r, counter_vec("sluice_statsd_refused_total", "statsd datagrams and connections refused, by transport and reason (source: outside udp_allow).", &["transport", "reason"])),
            client_drops: reg(&r, counter_vec("sluice_client_drops_total", "Events emitters reported dropped on their side (POST /v1/drops), by reason (retry_budget, queue_full, buffer_full, too_large, rejected; other).", &["reason"])),
            otlp_records: reg(&r, counter_vec("sluice_otlp_log_records_total", "OTLP log records received on POST /v1/logs, by outcome (accepted, rejected).", &["outcome"])),
            otlp_rejected: reg(&r, counter_vec("sluice_otlp_rejected_total", "OTLP log records rejected (partial success), by reason (too_many, too_deep, or an ingest drop reason).", &["reason"])),
            otlp_refused: reg(&r, counter_vec("sluice_otlp_refused_total", "POST /v1/logs requests refused whole, by reason (bad_body, too_large, unsupported_media_type, unsupported_encoding, forbidden, unavailable).", &["reason"])),
            events_out: reg(&r, counter_vec("sluice_events_out_total", "Events served by the read endpoints, by endpoint (events, tail).", &["endpoint"])),
            http_responses: reg(&r, counter_vec("sluice_http_responses_total", "HTTP responses, by route and status code.", &["route", "status"])),
            http_request_seconds: reg(&r, histogram_vec("sluice_http_request_duration_seconds", "HTTP request durations to the response head (a stream's body not included), by route, seconds.", &["route"], REQUEST_BUCKETS)),
            store_write_seconds: reg(&r, histogram("sluice_store_write_seconds", "Duration of store writes (blob put, epoch index, counts, flush), seconds.", SECONDS_BUCKETS)),
            blob_bytes: reg(&r, histogram("sluice_blob_bytes", "Size of the blob chunks written, bytes.", BLOB_BYTES_BUCKETS)),
            flush_lag: reg(&r, float_gauge("sluice_flush_lag_seconds", "Seconds since data last reached the store, while events or batches wait to be written (0 when nothing waits).")),
            store_bytes: reg(
                &r,
                gauge(
                    "sluice_store_bytes",
                    "Bytes the store holds on disk (embedded store: logs and catalog).",
                ),
            ),
            store_partitions: reg(
                &r,
                gauge("sluice_store_partitions", "Time partitions the store holds."),
            ),
            store_oldest_epoch: reg(
                &r,
                gauge(
                    "sluice_store_oldest_partition_timestamp_seconds",
                    "First second of the oldest partition held, Unix time (0: none): the retention actually kept.",
                ),
            ),
            build_info: reg(&r, gauge_vec("sluice_build_info", "1, labelled with the version of this build.", &["version"])),
            registry: r,
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // Series every dashboard expects from the start, at 0.
        for endpoint in ["events", "tail"] {
            m.events_out.with_label_values(&[endpoint]);
        }
        for transport in ["udp", "tcp"] {
            m.statsd_lines.with_label_values(&[transport]);
            m.statsd_events.with_label_values(&[transport]);
        }
        for reason in sluice_statsd::Reject::ALL {
            m.statsd_dropped.with_label_values(&[reason.as_str()]);
        }
        for reason in crate::http::drops::STANDARD_REASONS
            .iter()
            .chain(&["other"])
        {
            m.client_drops.with_label_values(&[reason]);
        }
        for outcome in ["accepted", "rejected"] {
            m.otlp_records.with_label_values(&[outcome]);
        }
        for transport in ["http", "tcp", "udp"] {
            m.payloads.with_label_values(&[transport]);
            m.payloads_rejected.with_label_values(&[transport]);
            for reason in DropReason::ALL {
                m.events_dropped
                    .with_label_values(&[transport, reason.as_str()]);
            }
        }
        m
    }

    /// Why acknowledged ingest is unavailable now, if it is.
    pub fn unavailable(&self) -> Option<String> {
        self.unavailable_reason
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets (or clears) why acknowledged ingest is unavailable, and the gauge with it.
    pub fn set_unavailable(&self, why: Option<&str>) {
        self.disk_unavailable.set(i64::from(why.is_some()));
        *self
            .unavailable_reason
            .write()
            .unwrap_or_else(|e| e.into_inner()) = why.map(str::to_owned);
    }

    /// Records that the aggregator holds `pending` events and `batches` unwritten batches now:
    /// starts or ends the wait the flush lag measures.
    pub fn set_waiting(&self, waiting: bool, now: i64) {
        if !waiting {
            self.waiting_since_unix.store(0, Ordering::Relaxed);
        } else {
            let _ = self.waiting_since_unix.compare_exchange(
                0,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Records a flush that wrote data, taking `secs`, at `now`.
    pub fn flushed(&self, secs: f64, now: i64) {
        self.flush_seconds.observe(secs);
        self.last_write_unix.store(now, Ordering::Relaxed);
    }

    /// A handle on the `sluice_events_in_total` counter of (`transport`, `type_`); `_other`
    /// once [`MAX_TYPE_LABELS`] types have their own.
    pub(super) fn events_in_counter(&self, transport: &str, type_: &str) -> IntCounter {
        let mut known = self.type_labels.lock().unwrap_or_else(|e| e.into_inner());
        let key = (transport.to_owned(), type_.to_owned());
        if known.contains(&key) || known.len() < MAX_TYPE_LABELS {
            known.insert(key);
            return self.events_in.with_label_values(&[transport, type_]);
        }
        self.events_in.with_label_values(&[transport, "_other"])
    }

    /// Seconds since data last reached the store while data waits; 0 when nothing waits.
    pub(super) fn flush_lag_seconds(&self, now: i64) -> f64 {
        let since = self.waiting_since_unix.load(Ordering::Relaxed);
        if since == 0 {
            return 0.0;
        }
        let last = self.last_write_unix.load(Ordering::Relaxed);
        (now - since.max(last)).max(0) as f64
    }
}

// Construction helpers. The names and help texts are constants of the metrics module, so a failure here
// is a programming error caught by every test that starts a server; it is reported, not
// panicked on, by registering a fresh unregistered metric instead (see `reg`).

pub(super) fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).unwrap_or_else(|e| invalid(name, e))
}

pub(super) fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).unwrap_or_else(|e| invalid(name, e))
}

pub(super) fn float_gauge(name: &str, help: &str) -> Gauge {
    Gauge::new(name, help).unwrap_or_else(|e| invalid(name, e))
}

pub(super) fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| invalid(name, e))
}

pub(super) fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| invalid(name, e))
}

pub(super) fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .unwrap_or_else(|e| invalid(name, e))
}

pub(super) fn histogram_vec(
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .unwrap_or_else(|e| invalid(name, e))
}

/// A metric definition that the crate refused: a bug in this file's constants.
fn invalid<T>(name: &str, e: prometheus::Error) -> T {
    unreachable!("metric {name} is defined wrongly in metrics/registry.rs: {e}")
}

pub(super) fn reg<C: Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        unreachable!("metric registered twice in metrics/registry.rs: {e}");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_lag_is_zero_while_nothing_waits() {
        let m = Metrics::new();
        m.flushed(0.01, 100);
        assert_eq!(m.flush_lag_seconds(160), 0.0, "idle: no lag");
        m.set_waiting(true, 150);
        assert_eq!(m.flush_lag_seconds(160), 10.0);
        m.set_waiting(true, 155); // still the same wait
        assert_eq!(m.flush_lag_seconds(160), 10.0);
        m.flushed(0.01, 158);
        assert_eq!(m.flush_lag_seconds(160), 2.0);
        m.set_waiting(false, 160);
        assert_eq!(m.flush_lag_seconds(200), 0.0);
    }
}
