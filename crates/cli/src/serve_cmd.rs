//! `sluice serve`: collector + store + HTTP API in one process, zero configuration needed.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::str::FromStr;

use anyhow::{Context, Result};
use clap::Args;
use sluice_server::ServerConfig;

/// Flags of `sluice serve`. Flags override the config file; the file overrides the defaults.
#[derive(Args)]
pub struct ServeArgs {
    /// A TOML config file (every key optional; see crates/server/README.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory of the embedded store (default ./data); with another `--store`, home of
    /// the WAL and the spool.
    #[arg(long)]
    data: Option<PathBuf>,
    /// This collector's id (chunks named `<id>.<n>`): give each of several `sluice serve`
    /// writing one store its own.
    #[arg(long)]
    collector_id: Option<String>,
    /// The store: `embedded:DIR` or
    /// `cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE?rf=3&write_cl=quorum&read_cl=one`
    /// (default: the embedded store in the data directory).
    #[arg(long)]
    store: Option<String>,
    /// HTTP address (default 127.0.0.1:8180), or `off`.
    #[arg(long)]
    http: Option<String>,
    /// TCP address for acknowledged NDJSON / Sereal-frame ingest (default 127.0.0.1:8181), or `off`.
    #[arg(long)]
    tcp: Option<String>,
    /// UDP address for fire-and-forget datagrams (default 127.0.0.1:8182), or `off`.
    #[arg(long)]
    udp: Option<String>,
    /// statsd / DogStatsD lines on UDP and TCP (newline framing) at this address, e.g.
    /// 127.0.0.1:8125 (default off); sources as `--udp-allow` (docs/statsd.md).
    #[arg(long, value_name = "ADDR:PORT")]
    statsd: Option<String>,
    /// This collector's data-centre id, filled into events that carry none (default `local`).
    #[arg(long)]
    dc: Option<String>,
    /// How long to wait after a second ends before storing it: seconds (`1`, `0.25`) or with a
    /// unit (`1s`, `250ms`); default 250 ms (a later event becomes a further chunk).
    #[arg(long, value_parser = parse_grace)]
    grace: Option<std::time::Duration>,
    /// Blob profile: `default` (protocol 5 + zstd), `default:<zstd level>` or `original`
    /// (protocol 3 + zlib).
    #[arg(long, value_parser = sluice_blob::Profile::from_str)]
    profile: Option<sluice_blob::Profile>,
    /// Memory budget for pending events (bytes, or 512m, 1g; default 512m per pipeline thread,
    /// at most 1/4 of RAM, at least 512m); beyond it ingest gets 503 / a TCP `error`, UDP is shed.
    #[arg(long, value_parser = parse_bytes)]
    max_pending_bytes: Option<u64>,
    /// Free-space reserve: while a data, WAL or spool disk has less free, acknowledged ingest
    /// gets 503 / `error unavailable` (bytes, or with a unit: 512k, 64m, 1g; 0 = off; default:
    /// per disk the smaller of 64m and 5 % of its size). The value in force is logged at start.
    #[arg(long, value_parser = parse_bytes)]
    min_free: Option<u64>,
    /// Pipeline threads: each parses payloads and aggregates and flushes the (dc, type,
    /// subtype) groups it owns (default: the available cores; 1..=256).
    #[arg(long)]
    pipeline_threads: Option<usize>,
    /// Start past damaged WAL records: each damaged WAL file is first copied to
    /// `<wal dir>/damaged/`, then the records after the damage in it are skipped (logged).
    #[arg(long)]
    salvage_wal: bool,
    /// Data locality: the substream runner takes only the stored chunks with a replica on this
    /// store node (`IP` or `IP:PORT` as the cluster knows it; Cassandra only), leaving the others
    /// to the workers beside their nodes. Default: every chunk.
    #[arg(long, value_name = "ADDR")]
    local_node: Option<String>,
    /// The columnar history tier: a directory, `s3://bucket/prefix?endpoint=…`, or `off`
    /// (default: DATA/columns with the embedded store, off with Cassandra).
    #[arg(long, value_name = "WHERE")]
    columns: Option<String>,
    /// A Parquet part per (dc, type) this often (default 1m; 1s..1h).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    columns_every: Option<std::time::Duration>,
    /// How long column files are kept, in whole days (`400d`; `0d`: forever; default 400
    /// days); `TYPE=DAYS` or `TYPE/SUBTYPE=DAYS` for one type or subtype. Repeatable.
    #[arg(long, value_parser = parse_retention, value_name = "[TYPE[/SUBTYPE]=]DAYS")]
    columns_retention: Vec<RetentionArg>,
    /// How long blobs are kept, in whole days (`10d`; default 10 days); `TYPE=DAYS` or
    /// `TYPE/SUBTYPE=DAYS` for one type or subtype (embedded store). Repeatable.
    #[arg(long, value_parser = parse_retention, value_name = "[TYPE[/SUBTYPE]=]DAYS")]
    retention: Vec<RetentionArg>,
    /// Send every rollup's closed steps to a Prometheus remote write receiver
    /// (`http://HOST:PORT/api/v1/write`; repeatable). More options: TOML `[[exports]]`.
    #[arg(long, value_name = "URL")]
    export_remote_write: Vec<String>,
    /// Send every rollup's closed steps to a Graphite plaintext listener (`HOST:PORT`;
    /// repeatable).
    #[arg(long, value_name = "HOST:PORT")]
    export_graphite: Vec<String>,
    /// Send alerts to this Alertmanager (its base URL, `http://127.0.0.1:9093`; repeatable).
    #[arg(long, value_name = "URL")]
    alertmanager: Vec<String>,
    /// Send alerts to this webhook in the Alertmanager webhook format (repeatable).
    #[arg(long, value_name = "URL")]
    alert_webhook: Vec<String>,
    /// Every request needs a token with its route's scope (`sluice token create`); `/healthz`
    /// stays open. Needed to serve beyond loopback (see docs/security.md).
    #[arg(long)]
    auth: bool,
    /// Serve beyond loopback without --auth: anyone who reaches the ports can read every event
    /// and send any. Logged as a warning on every start.
    #[arg(long)]
    insecure_no_auth: bool,
    /// `GET /metrics` without a token under --auth.
    #[arg(long)]
    metrics_open: bool,
    /// Code (Python) substreams: registration refused, none run.
    #[arg(long)]
    no_python_substreams: bool,
    /// TLS on HTTP and TCP ingest: the certificate chain (PEM; with --tls-key; reloaded when it
    /// changes).
    #[arg(long, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: CA certificates (PEM) of the client certificates required on TCP ingest and
    /// accepted on HTTP.
    #[arg(long, value_name = "PEM")]
    tls_client_ca: Option<PathBuf>,
    /// TLS with a certificate made at start for localhost and the bound addresses (its SHA-256
    /// fingerprint is printed): a first try, not production.
    #[arg(long)]
    tls_self_signed: bool,
    /// UDP sources taken (CIDRs, comma-separated or repeated; default 127.0.0.0/8,::1/128);
    /// datagrams from others are refused and counted.
    #[arg(long, value_delimiter = ',', value_name = "CIDR")]
    udp_allow: Vec<String>,
}

/// A size: plain bytes or with a binary unit `k`, `m`, `g` (case-insensitive, optional `b`/`ib`).
fn parse_bytes(value: &str) -> std::result::Result<u64, String> {
    let bad = || format!("{value:?}: expected bytes (1048576) or a size (512k, 64m, 1g)");
    let v = value.trim().to_ascii_lowercase();
    let v = v
        .strip_suffix("ib")
        .or_else(|| v.strip_suffix('b'))
        .unwrap_or(&v);
    let (digits, shift) = match v.chars().last() {
        Some('k') => (&v[..v.len() - 1], 10),
        Some('m') => (&v[..v.len() - 1], 20),
        Some('g') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// One `--retention` / `--columns-retention` value.
#[derive(Debug, Clone)]
enum RetentionArg {
    /// The default, in days.
    Default(u32),
    /// `TYPE` or `TYPE/SUBTYPE` (checked by the config), in days.
    Group(String, u32),
}

/// `DAYS` or `TYPE[/SUBTYPE]=DAYS`.
fn parse_retention(value: &str) -> std::result::Result<RetentionArg, String> {
    match value.split_once('=') {
        Some((group, days)) => Ok(RetentionArg::Group(
            group.trim().to_owned(),
            parse_days(days)?,
        )),
        None => parse_days(value).map(RetentionArg::Default),
    }
}

/// Sets `default` or adds to `by_group` from each argument, in order.
fn apply_retention(
    args: &[RetentionArg],
    default: &mut u32,
    by_group: &mut std::collections::BTreeMap<String, u32>,
) {
    for a in args {
        match a {
            RetentionArg::Default(days) => *default = *days,
            RetentionArg::Group(group, days) => {
                by_group.insert(group.clone(), *days);
            }
        }
    }
}

/// A retention in whole days: `400d`, `2w`, or a plain number of days.
fn parse_days(value: &str) -> std::result::Result<u32, String> {
    if let Ok(days) = value.trim().parse::<u32>() {
        return Ok(days);
    }
    let d = humantime::parse_duration(value.trim()).map_err(|e| format!("{value:?}: {e}"))?;
    let secs = d.as_secs();
    if secs % 86_400 != 0 || d.subsec_nanos() != 0 {
        return Err(format!("{value:?}: give whole days (e.g. 400d)"));
    }
    u32::try_from(secs / 86_400).map_err(|_| format!("{value:?}: too long"))
}

/// A grace period: plain seconds (`1`, `0.25`) or a duration with units (`250ms`, `1s`, any
/// form `humantime` reads); at most one hour.
fn parse_grace(value: &str) -> std::result::Result<std::time::Duration, String> {
    let grace = match value.trim().parse::<f64>() {
        Ok(secs) => std::time::Duration::try_from_secs_f64(secs).map_err(|_| {
            format!("{value:?}: expected seconds (1, 0.25) or a duration (250ms, 1s)")
        })?,
        Err(_) => humantime::parse_duration(value.trim()).map_err(|e| {
            format!("{value:?}: {e}; expected seconds (1, 0.25) or a duration (250ms, 1s)")
        })?,
    };
    if grace > std::time::Duration::from_secs(3600) {
        return Err(format!("{value:?}: at most one hour"));
    }
    Ok(grace)
}

/// `ADDR` or `off`.
pub fn parse_listen(flag: &str, value: &str) -> Result<Option<SocketAddr>> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .with_context(|| format!("--{flag} {value:?}: expected ADDR:PORT or off"))
}

/// Build the configuration from the file and the flags.
pub fn config(a: &ServeArgs) -> Result<ServerConfig> {
    let mut c = match &a.config {
        Some(path) => ServerConfig::load(path).with_context(|| path.display().to_string())?,
        None => ServerConfig::default(),
    };
    if let Some(d) = &a.data {
        c.data_dir = d.clone();
    }
    if let Some(id) = &a.collector_id {
        c.collector_id = Some(id.clone());
    }
    if let Some(s) = &a.store {
        c.store = Some(s.clone());
    }
    if let Some(h) = &a.http {
        c.http = parse_listen("http", h)?;
    }
    if let Some(t) = &a.tcp {
        c.tcp = parse_listen("tcp", t)?;
    }
    if let Some(u) = &a.udp {
        c.udp = parse_listen("udp", u)?;
    }
    if let Some(u) = &a.statsd {
        c.statsd = parse_listen("statsd", u)?;
    }
    if let Some(dc) = &a.dc {
        c.dc = dc.clone();
    }
    if let Some(g) = a.grace {
        c.grace_ms = Some(g.as_millis() as u64);
    }
    if let Some(p) = a.profile {
        c.profile = p;
    }
    if let Some(n) = a.max_pending_bytes {
        c.max_pending_bytes = Some(n);
    }
    if let Some(m) = a.min_free {
        c.min_free_bytes = Some(m);
    }
    if let Some(n) = a.pipeline_threads {
        c.pipeline_threads = Some(n);
    }
    if a.salvage_wal {
        c.salvage_wal = true;
    }
    if let Some(n) = &a.local_node {
        c.local_node = Some(n.clone());
    }
    if let Some(spec) = &a.columns {
        c.columns = Some(spec.clone());
    }
    if let Some(every) = a.columns_every {
        c.columns_every_secs = every.as_secs();
    }
    apply_retention(
        &a.columns_retention,
        &mut c.columns_retention_days,
        &mut c.columns_retention_by_type,
    );
    apply_retention(
        &a.retention,
        &mut c.retention_days,
        &mut c.retention_by_type,
    );
    c.export_remote_write
        .extend(a.export_remote_write.iter().cloned());
    c.export_graphite.extend(a.export_graphite.iter().cloned());
    c.alertmanager.extend(a.alertmanager.iter().cloned());
    c.alert_webhook.extend(a.alert_webhook.iter().cloned());
    c.auth |= a.auth;
    c.insecure_no_auth |= a.insecure_no_auth;
    c.metrics_open |= a.metrics_open;
    if a.no_python_substreams {
        c.python_substreams = false;
    }
    if let Some(p) = &a.tls_cert {
        c.tls_cert = Some(p.clone());
    }
    if let Some(p) = &a.tls_key {
        c.tls_key = Some(p.clone());
    }
    if let Some(p) = &a.tls_client_ca {
        c.tls_client_ca = Some(p.clone());
    }
    c.tls_self_signed |= a.tls_self_signed;
    if !a.udp_allow.is_empty() {
        c.udp_allow = a.udp_allow.clone();
    }
    Ok(c)
}

/// Run `sluice serve` until SIGTERM or Ctrl-C; open seconds are stored before it exits.
pub fn run(a: ServeArgs) -> Result<()> {
    let config = config(&a)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(sluice_server::run(config, sluice_server::shutdown_signal()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_grace};
    use std::time::Duration;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512k"), Ok(512 << 10));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        for bad in ["", "m", "-1", "1t", "99999999999g"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn grace_forms() {
        assert_eq!(parse_grace("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_grace("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_grace("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_grace("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_grace("0"), Ok(Duration::ZERO));
        assert_eq!(parse_grace("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_grace("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "-1", "fast", "2h", "nan", "inf", "3601", "-250ms"] {
            assert!(parse_grace(bad).is_err(), "{bad}");
        }
    }
}
