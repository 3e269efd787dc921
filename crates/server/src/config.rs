//! [`ServerConfig`]: every setting of `sluice serve`, with its default, loadable from TOML.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer};
use sluice_blob::{BlobOptions, Profile};
use sluice_collector::aggregate::AggregatorConfig;
use sluice_collector::IngestConfig;

use crate::Error;

/// Default HTTP port (ingest, read API, `/metrics`): `127.0.0.1:8180`.
pub const DEFAULT_HTTP_PORT: u16 = 8180;
/// Default TCP ingest port (NDJSON lines / Sereal frames), reserved: `8181` (not served yet).
pub const DEFAULT_TCP_PORT: u16 = 8181;
/// Default UDP ingest port (one payload per datagram), reserved: `8182` (not served yet).
pub const DEFAULT_UDP_PORT: u16 = 8182;

/// Settings of the server. Every field has a default (`ServerConfig::default()`, or an empty
/// TOML file); unknown TOML keys are refused.
///
/// ```toml
/// data_dir = "./data"          # embedded store directory
/// http = "127.0.0.1:8180"      # or "off"
/// dc = "local"                 # dc filled into events without one
/// grace_secs = 1               # an epoch is flushed once epoch + grace_secs < now
/// profile = "default"          # blob profile: original | default | default:<zstd level>
/// chunk_limit = 500000         # largest blob chunk, bytes
/// retention_days = 10
/// # collector_id = "c1"        # chunks named <id>.<n> (several writers per dc)
/// max_body_bytes = 8388608     # largest POST body (413 above)
/// max_event_bytes = 65536
/// max_events = 100000          # per payload
/// max_future_secs = 300
/// request_timeout_secs = 30
/// queue = 64                   # payloads waiting for the pipeline
/// expire_interval_secs = 3600
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Directory of the embedded store (default `./data`); created if missing.
    pub data_dir: PathBuf,
    /// HTTP listen address (default `127.0.0.1:8180`, [`DEFAULT_HTTP_PORT`]); `None` (TOML:
    /// `"off"`) serves no HTTP. Port 0 picks a free port ([`crate::RunningServer::http_addr`]).
    #[serde(deserialize_with = "de_addr")]
    pub http: Option<SocketAddr>,
    /// Data-centre id filled into events without a `dc` (default `local`).
    pub dc: String,
    /// Seconds to wait after an epoch ends before writing it (default 1).
    pub grace_secs: u64,
    /// Blob profile: `original`, `default` or `default:<zstd level>` (default `default`).
    pub profile: String,
    /// Largest blob chunk in bytes (default 500,000).
    pub chunk_limit: usize,
    /// Days of data kept; partitions older are dropped hourly (default 10).
    pub retention_days: u32,
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
    /// the time to the first byte for streamed range reads.
    pub request_timeout_secs: u64,
    /// Payloads queued for the pipeline before handlers wait (default 64).
    pub queue: usize,
    /// How often expired partitions are dropped (default 3600 s).
    pub expire_interval_secs: u64,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            data_dir: PathBuf::from("./data"),
            http: Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::LOCALHOST,
                DEFAULT_HTTP_PORT,
            ))),
            dc: "local".into(),
            grace_secs: 1,
            profile: "default".into(),
            chunk_limit: sluice_blob::DEFAULT_CHUNK_LIMIT,
            retention_days: 10,
            collector_id: None,
            max_body_bytes: 8 << 20,
            max_event_bytes: 64 << 10,
            max_events: 100_000,
            max_future_secs: 300,
            request_timeout_secs: 30,
            queue: 64,
            expire_interval_secs: 3600,
        }
    }
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

    /// Retention in seconds.
    pub fn retention_secs(&self) -> i64 {
        i64::from(self.retention_days) * 86_400
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

    /// The aggregator settings this configuration implies.
    pub fn aggregator_config(&self) -> Result<AggregatorConfig, Error> {
        let profile = Profile::from_str(&self.profile).map_err(|e| Error::Config(e.to_string()))?;
        Ok(AggregatorConfig {
            collector_id: self.collector_id.clone(),
            grace_secs: self.grace_secs,
            blob: BlobOptions {
                profile,
                chunk_limit: self.chunk_limit,
                ..BlobOptions::default()
            },
            ..AggregatorConfig::default()
        })
    }

    /// Checks the values that are not checked elsewhere.
    pub fn validate(&self) -> Result<(), Error> {
        if self.queue == 0 || self.request_timeout_secs == 0 || self.expire_interval_secs == 0 {
            return Err(Error::Config(
                "queue, request_timeout_secs and expire_interval_secs must be positive".into(),
            ));
        }
        if self.max_body_bytes == 0 {
            return Err(Error::Config("max_body_bytes must be positive".into()));
        }
        self.ingest_config()
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        self.aggregator_config()?;
        Ok(())
    }
}
