//! [`ServerConfig`]: every setting of `sluice serve`, with its default, loadable from TOML.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer};
use sluice_blob::{BlobOptions, Profile};
use sluice_collector::aggregate::{AggregatorConfig, SpoolConfig};
use sluice_collector::otlp::OtlpConfig;
use sluice_collector::wal::{FsyncPolicy, WalConfig};
use sluice_collector::IngestConfig;
use sluice_store::TypeRetention;
use std::time::Duration;

use crate::error::Error;

pub mod memory_budget;

/// Default HTTP port (ingest, read API, `/metrics`): `127.0.0.1:8180`.
pub const DEFAULT_HTTP_PORT: u16 = 8180;
/// Default TCP ingest port (NDJSON lines / Sereal frames): `8181`.
pub const DEFAULT_TCP_PORT: u16 = 8181;
/// Default UDP ingest port (one payload per datagram): `8182`.
pub const DEFAULT_UDP_PORT: u16 = 8182;

/// The smallest default of [`ServerConfig::max_pending_bytes`]: 512 MiB (one pipeline thread's
/// share; the default grows with `pipeline_threads`: [`memory_budget`]).
pub const DEFAULT_MAX_PENDING_BYTES: u64 = memory_budget::MIN_BYTES;
/// Default grace period (`grace_ms`): 250 ms. An epoch is stored 250 ms after its second ends
/// (plus the 100 ms flush tick), so an event is readable at most ~1.35 s after it was sent (p99
/// 1.24 s measured against the 1.5 s target, where 1 s gave 2.09 s); an event that arrives
/// later is stored as a further chunk of its second, nothing is lost (`docs/decisions.md`).
pub const DEFAULT_GRACE_MS: u64 = 250;
/// The most pipeline threads (`pipeline_threads`).
pub const MAX_PIPELINE_THREADS: usize = 256;
/// Largest default free-space reserve of a data disk (`min_free_bytes` not set): 64 MiB.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;
/// Default free-space reserve of a data disk, in percent of its total size, when that is below
/// [`DEFAULT_MIN_FREE_BYTES`] (`min_free_bytes` not set): 5 %.
pub const DEFAULT_MIN_FREE_PERCENT: u64 = 5;

/// Settings of the server. Every field has a default (`ServerConfig::default()`, or an empty
/// TOML file); unknown TOML keys are refused.
///
/// ```toml
/// data_dir = "./data"          # embedded store directory (and default WAL / spool home)
/// # store = "cassandra://127.0.0.1:9042/sluice?rf=3&write_cl=quorum&read_cl=one"
/// #                            # or "embedded:DIR"; default: the embedded store in data_dir
/// http = "127.0.0.1:8180"      # or "off"
/// dc = "local"                 # dc filled into events without one
/// grace_ms = 250              # an epoch is stored once its second ended grace_ms ago
/// # grace_secs = 1             # the same in whole seconds (grace_ms overrides it)
/// profile = "default"          # blob profile: original | default | default:<zstd level>
/// chunk_limit = 500000         # largest blob chunk, bytes
/// retention_days = 10
/// # retention_by_type = { DEBUG = 1, "WEB/error" = 90 } # days, per type or TYPE/SUBTYPE
/// # collector_id = "c1"        # chunks named <id>.<n> (several writers per dc)
/// max_body_bytes = 8388608     # largest POST body (413 above)
/// max_event_bytes = 65536
/// max_events = 100000          # per payload
/// max_future_secs = 300
/// request_timeout_secs = 30
/// queue = 64                   # payloads waiting for each pipeline thread
/// # pipeline_threads = 2       # parse + aggregate + flush threads (default: available cores)
/// expire_interval_secs = 3600
/// # wal_dir = "./data/wal"     # write-ahead log (default <data_dir>/wal)
/// fsync = "batch"              # always | batch | batch:<ms> | never (see below)
/// tcp = "127.0.0.1:8181"       # or "off"
/// tcp_max_connections = 1024   # at the cap a new client evicts the longest-idle one, else `error unavailable`
/// tcp_idle_timeout_secs = 300  # no new message for this long: connection closed
/// http_max_connections = 1024  # at the cap a new client evicts the longest-idle one, else 503
/// http_max_tail_streams = 64   # concurrent GET /v1/tail streams (more get 503)
/// tail_live_queue_records = 1024 # records queued for a live tail; a tail that falls further behind is dropped
/// http_header_timeout_secs = 10 # a request's head must arrive within this (from connect / first byte)
/// http_idle_timeout_secs = 60  # keep-alive: no new request for this long: connection closed
/// shutdown_timeout_secs = 10   # on shutdown, how long busy connections may finish
/// # fd_reserve = 256           # descriptors kept for the store/WAL (default max(96, RLIMIT_NOFILE/4))
/// udp = "127.0.0.1:8182"       # or "off"
/// udp_recv_buffer_bytes = 33554432
/// # statsd = "127.0.0.1:8125"  # statsd lines on UDP and TCP (newline framing); default off
/// # spool_dir = "./data/spool" # batches the store could not take (default <data_dir>/spool)
/// spool_max_bytes = 1073741824 # then backpressure: 503 / TCP error, UDP shed
/// spool_memory_batches = 16    # batches kept in memory before spilling to the spool
/// # max_pending_bytes = 536870912 # events held in memory (future-dated ones too); then 503
///                                # (default 512 MiB per pipeline thread, at most 1/4 of RAM)
/// # auth = true               # every request needs a token (see docs/security.md)
/// # insecure_no_auth = false  # serve beyond loopback without auth (refused otherwise)
/// # metrics_open = false      # GET /metrics without a token under auth
/// # python_substreams = true  # false: code substreams refused and not run
/// # allowed_origins = []      # browser origins allowed to change state
/// # tls_cert = "cert.pem"     # TLS on HTTP and TCP (with tls_key); reloaded on change
/// # tls_key = "key.pem"
/// # tls_client_ca = "ca.pem"  # mutual TLS: client certificates (required on TCP ingest)
/// # tls_self_signed = false   # a certificate made at start (fingerprint printed)
/// # udp_allow = ["127.0.0.0/8", "::1/128"] # UDP sources taken; others refused and counted
/// # min_free_bytes = 67108864  # ingest refused (503) while a data disk has less free
/// #                            # (default: the smaller of 64 MiB and 5 % of each disk; 0 = off)
/// wal_segment_bytes = 67108864 # WAL segment size
/// salvage_wal = false          # start past WAL damage after copying it to <wal>/damaged/
/// substream_queue = 1024       # stored chunks waiting for their substreams; more are shed
/// substream_threads = 1        # substream runner threads
/// substream_python_workers = 2 # Python worker processes (started with the first code substream)
/// substream_memory_bytes = 536870912 # address-space limit of each Python worker
/// substream_nice = 10          # added to the nice value of substream threads and Python workers
/// # local_node = "127.0.0.2"   # substreams only for chunks with a replica on this store node
/// # columns = "./data/columns" # the columnar history tier: a directory, "s3://bucket/prefix?endpoint=…",
/// #                            # or "off" (default: <data_dir>/columns with the embedded store, off with Cassandra)
/// columns_every_secs = 60      # a Parquet part per (dc, type) this often
/// columns_retention_days = 400 # column files kept (0 = forever); per type below
/// # columns_retention_by_type = { WEB = 30, "WEB/debug" = 7 } # TYPE or TYPE/SUBTYPE
/// # POST /v1/logs (OTLP logs, docs/otlp.md): attributes → tags, first found wins
/// otlp_type_attributes = ["service.name"]
/// otlp_dc_attributes = ["deployment.environment", "deployment.environment.name", "cloud.region"]
/// otlp_subtype_attributes = [] # before the severity text (lowercased)
/// otlp_default_type = "otlp"   # no type attribute
/// otlp_default_subtype = "log" # no subtype attribute, no severity text
/// otlp_max_records = 50000     # log records per request; more are rejected (partial success)
/// otlp_max_attribute_depth = 8 # nesting in one attribute value or body; deeper: rejected
///
/// # [[rollups]]               # registered at start (as `sluice rollup add`)
/// # name = "web"
/// # type = "WEB"
/// # group_by = ["path"]
/// # agg = ["count", "p95:timings.total_ms"]
/// # step = "10s"
/// ```
///
/// `fsync` (the WAL's [`FsyncPolicy`]): acknowledged payloads (HTTP, TCP) are answered only
/// once their WAL record is durable under this policy. `always`: one fsync per payload, on the
/// pipeline thread. `batch` (default; `batch:<ms>` sets the background period, default 5 ms):
/// group commit — a payload is acknowledged after an fsync covering it, shared by every
/// payload appended meanwhile. `never`: acknowledged once written to the OS: survives SIGKILL
/// of the process, not an OS crash or power loss.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Directory of the embedded store (default `./data`); created if missing.
    pub data_dir: PathBuf,
    /// The store (`--store`): `embedded:DIR` or `cassandra://HOST:PORT[,…]/KEYSPACE?…`
    /// (parsed by [`sluice_store_cassandra::StoreUrl`]); `None`: the embedded store in
    /// `data_dir`. The WAL and the spool stay under `data_dir` either way.
    pub store: Option<String>,
    /// HTTP listen address (default `127.0.0.1:8180`, [`DEFAULT_HTTP_PORT`]); `None` (TOML:
    /// `"off"`) serves no HTTP. Port 0 picks a free port ([`crate::Server::http_addr`]).
    #[serde(deserialize_with = "de_addr")]
    pub http: Option<SocketAddr>,
    /// Data-centre id filled into events without a `dc` (default `local`).
    pub dc: String,
    /// Seconds to wait after an epoch ends before writing it (default: [`DEFAULT_GRACE_MS`]).
    pub grace_secs: Option<u64>,
    /// The grace period in milliseconds; overrides `grace_secs` when set. Neither set:
    /// [`DEFAULT_GRACE_MS`].
    pub grace_ms: Option<u64>,
    /// Blob profile: `original`, `default` or `default:<zstd level>` (default `default`).
    #[serde(deserialize_with = "de_from_str")]
    pub profile: Profile,
    /// Largest blob chunk in bytes (default 500,000).
    pub chunk_limit: usize,
    /// Days of data kept; partitions older are dropped hourly (default 10).
    pub retention_days: u32,
    /// Days blobs of a type (`TYPE`) or subtype (`TYPE/SUBTYPE`) are kept, overriding
    /// `retention_days` (each at least 1). Partitions live for the longest; the groups kept
    /// shorter are removed from them (embedded store) or written with their own TTL (Cassandra).
    pub retention_by_type: std::collections::BTreeMap<String, u32>,
    /// This collector's id: chunks are named `<id>.<n>` (default none: plain `<n>`).
    pub collector_id: Option<String>,
    /// Largest HTTP request body in bytes (default 8 MiB); larger gets 413.
    pub max_body_bytes: usize,
    /// Largest single event in bytes (default 64 KiB).
    pub max_event_bytes: usize,
    /// Most events per payload (default 100,000).
    pub max_events: usize,
    /// Newest epoch accepted, seconds ahead of now (default 300). The oldest is the retention.
    pub max_future_secs: i64,
    /// Time limit of a request (default 30 s): the whole request for ingest and blob reads,
    /// the time to the first byte for streamed range reads; also the longest an HTTP response
    /// write may wait for the client to read before the connection is cut.
    pub request_timeout_secs: u64,
    /// Payloads queued for each pipeline thread before handlers wait (default 64).
    pub queue: usize,
    /// Pipeline threads (shards): each parses payloads and aggregates and flushes the groups
    /// it owns (see `pipeline::shards`). `None` (default): the available cores.
    pub pipeline_threads: Option<usize>,
    /// How often expired partitions are dropped (default 3600 s).
    pub expire_interval_secs: u64,
    /// Directory of the write-ahead log (default `<data_dir>/wal`).
    pub wal_dir: Option<PathBuf>,
    /// WAL fsync policy: `always`, `batch` (default, 5 ms), `batch:<ms>` or `never`.
    #[serde(deserialize_with = "de_from_str")]
    pub fsync: FsyncPolicy,
    /// TCP ingest address (default `127.0.0.1:8181`, [`DEFAULT_TCP_PORT`]); `None` (TOML:
    /// `"off"`) disables it. Protocol: see the crate README.
    #[serde(deserialize_with = "de_addr")]
    pub tcp: Option<SocketAddr>,
    /// Most simultaneous TCP connections (default 1024; lowered to fit `RLIMIT_NOFILE`, see
    /// `fd_reserve`). At the cap a new connection evicts the longest-idle one; when none is
    /// idle it gets `error unavailable too many connections …` and is closed.
    pub tcp_max_connections: usize,
    /// A TCP connection that sends no new message for this long is closed (default 300 s).
    /// Once a message has begun, the rest of it must arrive within `request_timeout_secs`.
    pub tcp_idle_timeout_secs: u64,
    /// Most simultaneous HTTP connections (default 1024; lowered to fit `RLIMIT_NOFILE`). At the
    /// cap a new connection evicts the longest-idle one (no request in progress); when none is
    /// idle it gets 503 and is closed.
    pub http_max_connections: usize,
    /// Most concurrent `GET /v1/tail` streams (default 64; each holds a blocking thread); more
    /// get 503. Must be below `http_max_connections`.
    pub http_max_tail_streams: usize,
    /// Records queued for each tail fed from memory (default
    /// [`crate::live::DEFAULT_QUEUE_RECORDS`]: ~10 s of 10 k events/s in 100-event payloads); a
    /// tail that falls further behind is dropped with a reason and resumes from the store.
    pub tail_live_queue_records: usize,
    /// A request head must be complete within this many seconds of the connection opening or of
    /// its first byte (default 10); else the connection is closed.
    pub http_header_timeout_secs: u64,
    /// An HTTP connection with no request in progress is closed after this many seconds
    /// without a new one (default 60).
    pub http_idle_timeout_secs: u64,
    /// On shutdown, idle connections are closed at once; busy ones (HTTP requests, TCP messages
    /// awaiting their reply) get this many seconds to finish, then are cut (default 10).
    pub shutdown_timeout_secs: u64,
    /// File descriptors kept out of the connection caps for the store, the WAL and the spool
    /// (default `max(96, RLIMIT_NOFILE / 4)`). At start the caps are lowered so that
    /// `http_max_connections + tcp_max_connections <= RLIMIT_NOFILE - fd_reserve`.
    pub fd_reserve: Option<usize>,
    /// UDP ingest address (default `127.0.0.1:8182`, [`DEFAULT_UDP_PORT`]); `None` (TOML:
    /// `"off"`) disables it.
    #[serde(deserialize_with = "de_addr")]
    pub udp: Option<SocketAddr>,
    /// Requested UDP receive buffer (`SO_RCVBUF`), bytes (default 32 MiB).
    pub udp_recv_buffer_bytes: usize,
    /// statsd listener address, UDP and TCP (newline framing) on the same port; default `None`
    /// (off). Its sources are checked against `udp_allow` on both (statsd carries no
    /// credentials). See `docs/statsd.md`.
    #[serde(deserialize_with = "de_addr")]
    pub statsd: Option<SocketAddr>,
    /// Directory of the spool, where batches wait while the store fails (default
    /// `<data_dir>/spool`).
    pub spool_dir: Option<PathBuf>,
    /// Most bytes of batches in the spool (default 1 GiB). Beyond it the server applies
    /// backpressure: acknowledged payloads get 503 / a TCP `error`, UDP events are shed (counted).
    pub spool_max_bytes: u64,
    /// Batches kept in memory after a store error before the oldest are spilled (default 16).
    pub spool_memory_batches: usize,
    /// Memory budget for pending events, bytes (`None`, the default: 512 MiB per pipeline
    /// thread, at most a quarter of the machine's memory, never below 512 MiB — see
    /// [`memory_budget`] and [`ServerConfig::max_pending_bytes`]): events accepted but not yet
    /// stored — in open seconds (future-dated ones wait up to `max_future_secs`) or in batches
    /// not yet written — counted as their encoded size. While it is exceeded the server applies
    /// the same backpressure as for a full spool: acknowledged payloads get 503 / a TCP `error`
    /// (not logged, the sender retries), UDP events are shed (counted). A payload is checked
    /// before it is taken, so the budget may be exceeded by one payload (its events and the
    /// buffer growth they cause). Encoders of closed seconds kept for the next ones take up to
    /// half the budget more (`sluice_spare_encoder_bytes`). RSS stays within about 2–3× the
    /// budget above the idle process (`tests/memory.rs`).
    pub max_pending_bytes: Option<u64>,
    /// Free-space reserve, bytes: while a disk holding the data, WAL or spool directory has
    /// less free, acknowledged ingest is refused (503 / TCP `error unavailable`), so the store
    /// can still flush and the WAL checkpoint and shrink. `Some(n)` (the TOML key, `sluice serve
    /// --min-free`): `n` bytes on every disk, as given; 0 disables the check. `None` (default):
    /// per disk, the smaller of [`DEFAULT_MIN_FREE_BYTES`] (64 MiB) and
    /// [`DEFAULT_MIN_FREE_PERCENT`] (5 %) of its total size (`statvfs`), so that a small disk
    /// (a 48 MiB volume: 2.4 MiB) still takes data. The reserve in force is logged at start
    /// (`free-space reserve …`, with a warning when it exceeds the disk or its free space) and
    /// shown as `sluice_disk_min_free_bytes`; see [`crate::disk::reserve_for`].
    pub min_free_bytes: Option<u64>,
    /// A WAL segment is closed once it holds this many bytes (default 64 MiB).
    pub wal_segment_bytes: u64,
    /// Start past damaged WAL records (default false): the damaged files are first copied to
    /// `<wal dir>/damaged/`, the records after the damage in a file are lost (logged).
    pub salvage_wal: bool,
    /// Stored chunks waiting for their substreams (default 1024); when full, further chunks are
    /// shed for every substream that applies (reason `queue_full`), never slowing ingest.
    pub substream_queue: usize,
    /// Substream runner threads (default 1).
    pub substream_threads: usize,
    /// Python worker processes of code substreams (default 2; started on first need).
    pub substream_python_workers: usize,
    /// Address-space limit (`RLIMIT_AS`) of each Python worker, bytes (default 512 MiB): the
    /// memory budget of a code substream run.
    pub substream_memory_bytes: u64,
    /// Added to the nice value of the substream runner threads and the Python workers they
    /// start (0..=19, default 10): on a busy machine substreams yield the CPU to ingest.
    pub substream_nice: i32,
    /// Data locality of the substream runner: only chunks with a replica on this store node
    /// (`IP` or `IP:PORT`; see `sluice_substreams::RunnerConfig::local_node`). Default: all.
    pub local_node: Option<String>,
    /// The columnar history tier (`--columns`): a directory, an `s3://bucket/prefix?endpoint=…`
    /// URL, or `"off"`. Default (`None`): `<data_dir>/columns` with the embedded store, off with
    /// Cassandra (its collectors share no disk: give them an S3 URL).
    pub columns: Option<String>,
    /// Seconds per column part (default 60; 1..=3600).
    pub columns_every_secs: u64,
    /// Days column files are kept (default 400; 0 keeps them forever).
    pub columns_retention_days: u32,
    /// Rollups registered at start (`[[rollups]]`: `name`, `type`, `subtype`, `dc`, `where`,
    /// `group_by`, `agg`, `step`, `max_groups`), as `sluice rollup add` would; a name
    /// registered with another definition refuses the start.
    pub rollups: Vec<sluice_substreams::Spec>,
    /// Rollup exports (`[[exports]]`: `remote_write = "URL"` or `graphite = "HOST:PORT"`,
    /// optional `rollups = [...]`, `delay_secs`); the flags add to them.
    pub exports: Vec<crate::exports::ExportSpec>,
    /// `--export-remote-write URL` (repeatable): every rollup to a Prometheus remote write.
    #[serde(skip)]
    pub export_remote_write: Vec<String>,
    /// `--export-graphite HOST:PORT` (repeatable): every rollup to a Graphite listener.
    #[serde(skip)]
    pub export_graphite: Vec<String>,
    /// Alert rules registered at start (`[[alerts]]`: the fields of `sluice alert add`,
    /// docs/alerts.md); a stored rule of the same name is replaced when it differs.
    pub alerts: Vec<sluice_alerts::RuleSpec>,
    /// Alertmanagers alerts are sent to (`--alertmanager URL`, repeatable: its base URL,
    /// `http://127.0.0.1:9093`).
    pub alertmanager: Vec<String>,
    /// Webhooks alerts are sent to in the Alertmanager webhook format (`--alert-webhook URL`).
    pub alert_webhook: Vec<String>,
    /// A bearer token sent to every alert receiver (default none).
    pub alert_bearer_token: Option<String>,
    /// Milliseconds after a step's flush (`grace_ms`) before alert rules evaluate it, for its
    /// rollup states to be stored (default 300).
    pub alert_settle_ms: u64,
    /// This server's URL as receivers should link to it (default `http://` + the HTTP address).
    pub external_url: Option<String>,
    /// Days column files of a type (`TYPE`) or subtype (`TYPE/SUBTYPE`) are kept, overriding
    /// `columns_retention_days` (0: forever).
    pub columns_retention_by_type: std::collections::BTreeMap<String, u32>,
    /// Every request needs a token (`sluice token create`) with its route's scope, `/healthz`
    /// aside (default false: on loopback, ingest and reads are open and admin routes take the
    /// per-start local secret or an admin token). See `docs/security.md`.
    pub auth: bool,
    /// Serve beyond loopback without `auth` (default false: such a start is refused). Every
    /// start with it logs a warning.
    pub insecure_no_auth: bool,
    /// `GET /metrics` without a token even when `auth` is on (default false: `read` scope).
    pub metrics_open: bool,
    /// Code (Python) substreams may be registered and run (default true; `sluice serve
    /// --no-python-substreams` switches them off: registration refused, none run).
    pub python_substreams: bool,
    /// Origins (`scheme://host[:port]`) besides the server's own whose browser requests may
    /// change state (POST, PUT, DELETE); default none: a cross-site request is refused.
    pub allowed_origins: Vec<String>,
    /// TLS certificate chain (PEM) for HTTP and TCP ingest, with `tls_key`; reloaded when the
    /// files change. Default: no TLS.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) whose client certificates are required on TCP ingest and accepted
    /// on HTTP (mutual TLS). Default: no client certificates.
    pub tls_client_ca: Option<PathBuf>,
    /// Serve TLS with a certificate made at start for `localhost` and the bound addresses (its
    /// SHA-256 fingerprint is printed); for a first try, not for production.
    pub tls_self_signed: bool,
    /// Sources (CIDRs) UDP datagrams are taken from (default loopback: `127.0.0.0/8`, `::1/128`);
    /// others are refused and counted (`sluice_udp_refused_total{reason="source"}`). UDP carries
    /// no credentials. The statsd listener (UDP and TCP) takes the same sources
    /// (`sluice_statsd_refused_total{reason="source"}`).
    pub udp_allow: Vec<String>,
    /// OTLP logs: attributes whose string value is the `type` (resource first, then the record;
    /// default `["service.name"]`). See `docs/otlp.md`.
    pub otlp_type_attributes: Vec<String>,
    /// OTLP logs: attributes whose value is the `dc` (default `deployment.environment`,
    /// `deployment.environment.name`, `cloud.region`); none: `dc`.
    pub otlp_dc_attributes: Vec<String>,
    /// OTLP logs: attributes whose value is the `subtype`, before the severity text (default none).
    pub otlp_subtype_attributes: Vec<String>,
    /// OTLP logs: the `type` of a record without a type attribute (default `otlp`).
    pub otlp_default_type: String,
    /// OTLP logs: the `subtype` of a record without subtype attribute or severity text (default `log`).
    pub otlp_default_subtype: String,
    /// OTLP logs: most log records per request (default 50,000); more are rejected.
    pub otlp_max_records: usize,
    /// OTLP logs: deepest nesting of one attribute value or body (default 8); deeper: rejected.
    pub otlp_max_attribute_depth: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            data_dir: PathBuf::from("./data"),
            store: None,
            http: Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::LOCALHOST,
                DEFAULT_HTTP_PORT,
            ))),
            dc: "local".into(),
            grace_secs: None,
            grace_ms: None,
            profile: Profile::default(),
            chunk_limit: sluice_blob::DEFAULT_CHUNK_LIMIT,
            retention_days: 10,
            retention_by_type: std::collections::BTreeMap::new(),
            rollups: Vec::new(),
            exports: Vec::new(),
            export_remote_write: Vec::new(),
            export_graphite: Vec::new(),
            alerts: Vec::new(),
            alertmanager: Vec::new(),
            alert_webhook: Vec::new(),
            alert_bearer_token: None,
            alert_settle_ms: 300,
            external_url: None,
            collector_id: None,
            max_body_bytes: 8 << 20,
            max_event_bytes: 64 << 10,
            max_events: 100_000,
            max_future_secs: 300,
            request_timeout_secs: 30,
            queue: 64,
            pipeline_threads: None,
            expire_interval_secs: 3600,
            wal_dir: None,
            fsync: FsyncPolicy::BATCH,
            tcp: Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::LOCALHOST,
                DEFAULT_TCP_PORT,
            ))),
            tcp_max_connections: 1024,
            tcp_idle_timeout_secs: 300,
            http_max_connections: 1024,
            http_max_tail_streams: 64,
            tail_live_queue_records: crate::live::DEFAULT_QUEUE_RECORDS,
            http_header_timeout_secs: 10,
            http_idle_timeout_secs: 60,
            shutdown_timeout_secs: 10,
            fd_reserve: None,
            udp: Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::LOCALHOST,
                DEFAULT_UDP_PORT,
            ))),
            udp_recv_buffer_bytes: 32 << 20,
            statsd: None,
            spool_dir: None,
            spool_max_bytes: sluice_collector::spool::DEFAULT_MAX_BYTES,
            spool_memory_batches: sluice_collector::spool::DEFAULT_MEMORY_BATCHES,
            max_pending_bytes: None,
            min_free_bytes: None,
            wal_segment_bytes: WalConfig::default().segment_size,
            salvage_wal: false,
            substream_queue: 1024,
            substream_threads: 1,
            substream_python_workers: 2,
            substream_memory_bytes: 512 << 20,
            substream_nice: 10,
            local_node: None,
            columns: None,
            columns_every_secs: 60,
            columns_retention_days: 400,
            columns_retention_by_type: std::collections::BTreeMap::new(),
            auth: false,
            insecure_no_auth: false,
            metrics_open: false,
            python_substreams: true,
            allowed_origins: Vec::new(),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_self_signed: false,
            udp_allow: vec!["127.0.0.0/8".into(), "::1/128".into()],
            otlp_type_attributes: OtlpConfig::default().type_attributes,
            otlp_dc_attributes: OtlpConfig::default().dc_attributes,
            otlp_subtype_attributes: OtlpConfig::default().subtype_attributes,
            otlp_default_type: OtlpConfig::default().default_type,
            otlp_default_subtype: OtlpConfig::default().default_subtype,
            otlp_max_records: OtlpConfig::default().max_records,
            otlp_max_attribute_depth: OtlpConfig::default().max_attribute_depth,
        }
    }
}

/// A setting spelled as its type's `FromStr` reads it (`fsync`, `profile`), refused at load with
/// that type's message.
fn de_from_str<'de, D: Deserializer<'de>, T: FromStr>(d: D) -> Result<T, D::Error>
where
    T::Err: std::fmt::Display,
{
    let s = String::deserialize(d)?;
    T::from_str(&s).map_err(serde::de::Error::custom)
}

fn de_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || s == "off" {
        return Ok(None);
    }
    SocketAddr::from_str(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

impl ServerConfig {
    /// Parses a TOML document (missing keys take their defaults).
    pub fn from_toml(text: &str) -> Result<ServerConfig, Error> {
        toml::from_str(text).map_err(|e| Error::Config(e.to_string()))
    }

    /// Reads and parses a TOML file.
    pub fn load(path: impl AsRef<Path>) -> Result<ServerConfig, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        ServerConfig::from_toml(&text)
    }

    /// Where the column files go, or `None` when the tier is off (see [`ServerConfig::columns`]).
    pub fn columns_location(&self) -> Option<String> {
        match self.columns.as_deref() {
            Some("off") => None,
            Some(spec) => Some(spec.to_owned()),
            None if self
                .store
                .as_deref()
                .is_some_and(|s| !s.starts_with("embedded:")) =>
            {
                None
            }
            None => {
                let dir = match self
                    .store
                    .as_deref()
                    .and_then(|s| s.strip_prefix("embedded:"))
                {
                    Some(d) => PathBuf::from(d),
                    None => self.data_dir.clone(),
                };
                Some(dir.join("columns").display().to_string())
            }
        }
    }

    /// The columns writer's settings (the owner is this collector's id, else `local`).
    pub fn columns_tier(&self) -> sluice_columns::tier::TierConfig {
        sluice_columns::tier::TierConfig {
            every: self.columns_every_secs as i64,
            // The flush grace plus a margin for the flush itself.
            settle: (self.grace().as_millis() as i64 + 999) / 1000 + 2,
            owner: self.collector_id.clone().unwrap_or_else(|| "local".into()),
            owns_plain: self.collector_id.is_none(),
            // Checked by `validate`; a bad rule here would have stopped the start.
            retention: self
                .columns_retention()
                .unwrap_or_else(|_| TypeRetention::new(sluice_columns::retention::FOREVER)),
            ..sluice_columns::tier::TierConfig::default()
        }
    }

    /// Every export: `[[exports]]` and the flags'.
    pub fn exports_all(&self) -> Result<Vec<crate::exports::ExportSpec>, Error> {
        let mut all = self.exports.clone();
        for url in &self.export_remote_write {
            all.push(crate::exports::ExportSpec {
                remote_write: Some(url.clone()),
                ..Default::default()
            });
        }
        for addr in &self.export_graphite {
            all.push(crate::exports::ExportSpec {
                graphite: Some(addr.clone()),
                ..Default::default()
            });
        }
        Ok(all)
    }

    /// How long column files are kept, per type and subtype (0 days: forever).
    pub fn columns_retention(&self) -> Result<TypeRetention, Error> {
        let secs = |d: u32| match d {
            0 => sluice_columns::retention::FOREVER,
            d => i64::from(d) * 86_400,
        };
        let mut r = TypeRetention::new(secs(self.columns_retention_days));
        for (key, days) in &self.columns_retention_by_type {
            r.insert(key, secs(*days))
                .map_err(|e| Error::Config(format!("columns_retention_by_type: {e}")))?;
        }
        Ok(r)
    }

    /// How long blobs are kept, per type and subtype.
    pub fn blob_retention(&self) -> Result<TypeRetention, Error> {
        let mut r = TypeRetention::new(i64::from(self.retention_days) * 86_400);
        for (key, days) in &self.retention_by_type {
            r.insert(key, i64::from(*days) * 86_400)
                .map_err(|e| Error::Config(format!("retention_by_type: {e}")))?;
        }
        Ok(r)
    }

    /// The longest retention of blobs, in seconds: how long a time partition lives, and the
    /// oldest epoch ingest takes.
    pub fn retention_secs(&self) -> i64 {
        self.blob_retention()
            .map_or(i64::from(self.retention_days) * 86_400, |r| r.longest())
    }

    /// The collector input settings this configuration implies.
    pub fn ingest_config(&self) -> IngestConfig {
        IngestConfig {
            dc: self.dc.clone(),
            max_payload_bytes: self.max_body_bytes,
            max_event_bytes: self.max_event_bytes,
            max_events: self.max_events,
            max_past_secs: self.retention_secs(),
            max_future_secs: self.max_future_secs,
            ..IngestConfig::default()
        }
    }

    /// The pipeline threads to run: `pipeline_threads`, else the available cores (at least 1).
    pub fn pipeline_threads(&self) -> usize {
        self.pipeline_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    /// The memory budget in force: `max_pending_bytes` as given, else the default for
    /// [`pipeline_threads`](Self::pipeline_threads) on this machine ([`memory_budget`]).
    pub fn max_pending_bytes(&self) -> u64 {
        self.max_pending_bytes.unwrap_or_else(|| {
            memory_budget::default_max_pending_bytes(
                self.pipeline_threads(),
                memory_budget::mem_total(),
            )
        })
    }

    /// Bytes of spare encoders each of `shards` aggregators may keep: half the budget in force,
    /// shared over the shards (memory beside the budget; `sluice_collector::spares`).
    pub fn spare_bytes_per_shard(&self, shards: usize) -> u64 {
        self.max_pending_bytes() / 2 / shards.max(1) as u64
    }

    /// The grace period: `grace_ms`, else `grace_secs`, else [`DEFAULT_GRACE_MS`].
    pub fn grace(&self) -> Duration {
        match (self.grace_ms, self.grace_secs) {
            (Some(ms), _) => Duration::from_millis(ms),
            (None, Some(secs)) => Duration::from_secs(secs),
            (None, None) => Duration::from_millis(DEFAULT_GRACE_MS),
        }
    }

    /// The substream runner's settings: its queue and threads, the Python pool, sources written
    /// to `<data_dir>/substreams-code` (the store ignores directories it does not own), status
    /// records written under this server's `collector_id` or else its dc.
    pub fn substream_config(&self) -> sluice_substreams::RunnerConfig {
        sluice_substreams::RunnerConfig {
            queue: self.substream_queue,
            threads: self.substream_threads,
            code_dir: self.data_dir.join("substreams-code"),
            python: sluice_substreams::exec::PythonSettings {
                workers: self.substream_python_workers,
                memory_limit_bytes: self.substream_memory_bytes,
                ..Default::default()
            },
            writer: self.collector_id.clone().unwrap_or_else(|| self.dc.clone()),
            nice: self.substream_nice,
            local_node: self.local_node.clone(),
            python_enabled: self.python_substreams,
            ..Default::default()
        }
    }

    /// The spool directory: `spool_dir`, or `<data_dir>/spool`.
    pub fn spool_path(&self) -> PathBuf {
        self.spool_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("spool"))
    }

    /// The aggregator settings this configuration implies. Its `grace_secs` is 0: the server
    /// applies the (millisecond) grace itself by running the aggregator on a clock set back by
    /// it (see `pipeline::FlushClock`).
    pub fn aggregator_config(&self) -> Result<AggregatorConfig, Error> {
        let profile = self.profile;
        Ok(AggregatorConfig {
            collector_id: self.collector_id.clone(),
            grace_secs: 0,
            spool: Some(SpoolConfig {
                dir: self.spool_path(),
                max_bytes: self.spool_max_bytes,
                memory_batches: self.spool_memory_batches,
            }),
            blob: BlobOptions {
                profile,
                chunk_limit: self.chunk_limit,
                ..BlobOptions::default()
            },
            ..AggregatorConfig::default()
        })
    }

    /// The store this config names (see [`store`](Self::store)).
    pub fn store_url(&self) -> Result<sluice_store_cassandra::StoreUrl, Error> {
        match &self.store {
            None => Ok(sluice_store_cassandra::StoreUrl::Embedded(
                self.data_dir.clone(),
            )),
            Some(s) => s
                .parse()
                .map_err(|e: sluice_store_cassandra::StoreUrlError| Error::Config(e.to_string())),
        }
    }

    /// The WAL directory: `wal_dir`, or `<data_dir>/wal`.
    pub fn wal_path(&self) -> PathBuf {
        self.wal_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("wal"))
    }

    /// The WAL settings this configuration implies (`fsync` parsed).
    pub fn wal_config(&self) -> Result<WalConfig, Error> {
        let fsync = self.fsync;
        Ok(WalConfig {
            fsync,
            segment_size: self.wal_segment_bytes,
        })
    }

    /// `udp_allow` parsed.
    pub fn udp_allow_nets(&self) -> Result<Vec<ipnet::IpNet>, Error> {
        self.udp_allow
            .iter()
            .map(|c| {
                // A bare address is a network of one.
                c.parse::<ipnet::IpNet>()
                    .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        Error::Config(format!("udp_allow: {c:?} is not a CIDR (e.g. 10.0.0.0/8)"))
                    })
            })
            .collect()
    }

    /// Whether HTTP and TCP ingest serve TLS.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() || self.tls_self_signed
    }

    /// The first HTTP or TCP listener bound beyond loopback, if any (UDP is governed by
    /// `udp_allow`).
    pub fn public_listener(&self) -> Option<SocketAddr> {
        [self.http, self.tcp]
            .into_iter()
            .flatten()
            .find(|a| !a.ip().is_loopback())
    }

    /// Checks the values that are not checked elsewhere.
    pub fn validate(&self) -> Result<(), Error> {
        if !(1..=3600).contains(&self.columns_every_secs) {
            return Err(Error::Config(format!(
                "columns_every_secs {} is outside 1..=3600",
                self.columns_every_secs
            )));
        }
        self.wal_config()?;
        self.store_url()?;
        if !self.blob_retention()?.is_empty()
            && matches!(
                self.store_url()?,
                sluice_store_cassandra::StoreUrl::Cassandra(_)
            )
        {
            return Err(Error::Config(
                "retention_by_type needs the embedded store: on Cassandra every type keeps \
                 retention_days (the tables' TTL)"
                    .into(),
            ));
        }
        self.columns_retention()?;
        if self.tcp_max_connections == 0 || self.tcp_idle_timeout_secs == 0 {
            return Err(Error::Config(
                "tcp_max_connections and tcp_idle_timeout_secs must be positive".into(),
            ));
        }
        if self.http_max_connections < 2
            || self.http_max_tail_streams == 0
            || self.http_max_tail_streams >= self.http_max_connections
        {
            return Err(Error::Config(
                "http_max_tail_streams must be positive and below http_max_connections".into(),
            ));
        }
        if self.tail_live_queue_records == 0 {
            return Err(Error::Config(
                "tail_live_queue_records must be positive".into(),
            ));
        }
        if self.http_header_timeout_secs == 0
            || self.http_idle_timeout_secs == 0
            || self.shutdown_timeout_secs == 0
        {
            return Err(Error::Config(
                "http_header_timeout_secs, http_idle_timeout_secs and shutdown_timeout_secs must be positive".into(),
            ));
        }
        if self.queue == 0 || self.request_timeout_secs == 0 || self.expire_interval_secs == 0 {
            return Err(Error::Config(
                "queue, request_timeout_secs and expire_interval_secs must be positive".into(),
            ));
        }
        if self.grace() > Duration::from_secs(3600) {
            return Err(Error::Config(
                "grace_secs / grace_ms: at most one hour".into(),
            ));
        }
        if self
            .pipeline_threads
            .is_some_and(|n| n == 0 || n > MAX_PIPELINE_THREADS)
        {
            return Err(Error::Config(format!(
                "pipeline_threads must be 1..={MAX_PIPELINE_THREADS}"
            )));
        }
        if self.wal_segment_bytes == 0 {
            return Err(Error::Config("wal_segment_bytes must be positive".into()));
        }
        if self.spool_max_bytes == 0 {
            return Err(Error::Config("spool_max_bytes must be positive".into()));
        }
        if self.max_pending_bytes == Some(0) {
            return Err(Error::Config("max_pending_bytes must be positive".into()));
        }
        if self.substream_queue == 0
            || self.substream_threads == 0
            || self.substream_python_workers == 0
        {
            return Err(Error::Config(
                "substream_queue, substream_threads and substream_python_workers must be positive"
                    .into(),
            ));
        }
        if let Some(n) = &self.local_node {
            if n.parse::<std::net::IpAddr>().is_err() && n.parse::<SocketAddr>().is_err() {
                return Err(Error::Config(format!(
                    "local_node {n:?}: expected IP or IP:PORT of a store node"
                )));
            }
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(Error::Config(
                "tls_cert and tls_key go together (or tls_self_signed alone)".into(),
            ));
        }
        if self.tls_self_signed && self.tls_cert.is_some() {
            return Err(Error::Config(
                "tls_self_signed or tls_cert/tls_key, not both".into(),
            ));
        }
        if self.tls_client_ca.is_some() && !self.tls() {
            return Err(Error::Config(
                "tls_client_ca needs TLS (tls_cert/tls_key or tls_self_signed)".into(),
            ));
        }
        self.udp_allow_nets()?;
        if !self.auth && !self.insecure_no_auth {
            if let Some(a) = self.public_listener() {
                return Err(Error::Config(format!(
                    "{a} is beyond loopback and auth is off: anyone who reaches it could read every event and run code; \
                     turn on auth (auth = true / --auth, then `sluice token create`) or, knowingly, --insecure-no-auth"
                )));
            }
        }
        if !(0..=19).contains(&self.substream_nice) {
            return Err(Error::Config("substream_nice: 0 ..= 19".into()));
        }
        if self.substream_memory_bytes < (64 << 20) {
            return Err(Error::Config(
                "substream_memory_bytes: at least 64 MiB (a Python worker needs that to start)"
                    .into(),
            ));
        }
        if self.max_body_bytes == 0 {
            return Err(Error::Config("max_body_bytes must be positive".into()));
        }
        self.ingest_config()
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.aggregator_config()?;
        self.otlp_config().validate().map_err(Error::Config)?;
        Ok(())
    }

    /// The OTLP logs mapping and limits (`otlp_*`).
    pub fn otlp_config(&self) -> OtlpConfig {
        OtlpConfig {
            type_attributes: self.otlp_type_attributes.clone(),
            dc_attributes: self.otlp_dc_attributes.clone(),
            subtype_attributes: self.otlp_subtype_attributes.clone(),
            default_type: self.otlp_default_type.clone(),
            default_subtype: self.otlp_default_subtype.clone(),
            max_records: self.otlp_max_records,
            max_attribute_depth: self.otlp_max_attribute_depth,
        }
    }
}
