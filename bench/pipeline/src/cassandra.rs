//! Row 6: the Cassandra store beside the embedded one, in the same run:
//! ingest events/s (the collector's pipeline into each store), read MB/s (an epoch's chunks
//! fetched with `get_blobs`, checksums verified), bytes on disk per event (SSTables after a
//! `nodetool flush`, all replicas), p99 emit → readable (in-process server, grace 250 ms).
//!
//! The cluster is the tests' one (`scripts/cassandra.sh start N`, started if needed);
//! `SLUICE_SKIP_CASSANDRA=1` skips the row (n/a).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use sluice_blob::Profile;
use sluice_store::{BlobKey, EmbeddedStore, Namespace, Retention, Store};
use sluice_store_cassandra::{CassandraConfig, CassandraStore};

use crate::{fmt_rate, ingest_into, ingest_payloads, measure_latency, unix_now, Args};

fn script(args: &[&str]) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cassandra.sh");
    let out = Command::new("bash")
        .arg(path)
        .args(args)
        .output()
        .context("running scripts/cassandra.sh")?;
    if !out.status.success() {
        bail!(
            "scripts/cassandra.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => total += dir_bytes(&e.path()),
                Ok(_) => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    total
}

/// Reads every listed epoch of `[from, to)`: index, then its chunks with `get_blobs` (parallel
/// where the backend fetches in parallel), each checked by its SHA-1 trailer. (bytes, seconds).
fn read_all(store: &dyn Store, from: i64, to: i64) -> Result<(u64, f64)> {
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for (epoch, dc) in store.list_epochs(None, from, to)? {
        let keys: Vec<String> = store
            .get_epoch_index(epoch, &dc)?
            .iter()
            .map(|e| format!("{epoch}:{dc}:{e}"))
            .collect();
        let bkeys: Vec<BlobKey<'_>> = keys.iter().map(|k| BlobKey::new(epoch, k)).collect();
        for (k, r) in keys.iter().zip(store.get_blobs(&Namespace::Events, &bkeys)) {
            let b = r?.ok_or_else(|| anyhow!("{k} listed but missing"))?;
            sluice_blob::Blob::parse(&b).map_err(|e| anyhow!("{k}: {e}"))?;
            bytes += b.len() as u64;
        }
    }
    Ok((bytes, t0.elapsed().as_secs_f64()))
}

fn p99(mut lat: Vec<f64>, n: usize) -> String {
    if lat.len() < n {
        return format!("{}/{n} seen", lat.len());
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let i = ((lat.len() as f64 * 0.99).ceil() as usize).saturating_sub(1);
    format!("{:.2} s", lat[i.min(lat.len() - 1)])
}

/// One measured store: (label, events/s wall, read MB/s, bytes on disk per event, p99).
struct Measured {
    label: String,
    eps: f64,
    read_mbs: f64,
    disk_per_event: f64,
    p99: String,
}

/// Row 6 (see the module docs).
pub(crate) fn row_cassandra(args: &Args, tmp: &Path, out: &mut String) -> Result<()> {
    out.push_str(&format!(
        "\n## 6. Cassandra store vs embedded, same run ({} WEB events, {} per simulated second, default profile)\n\n",
        args.ingest_events, args.ingest_eps
    ));
    if std::env::var("SLUICE_SKIP_CASSANDRA").is_ok_and(|v| v == "1") {
        out.push_str("n/a: SLUICE_SKIP_CASSANDRA=1\n");
        return Ok(());
    }
    eprintln!(
        "cassandra: generating {} WEB events ...",
        args.ingest_events
    );
    let base = unix_now() - 600;
    let cfg = sluice_gen::GenConfig {
        epoch_start: base,
        events_per_second: args.ingest_eps,
        ..sluice_gen::GenConfig::web(1, args.ingest_events)
    };
    let mut text = Vec::new();
    sluice_gen::write_json_lines(&cfg, &mut text)?;
    let payloads = ingest_payloads(&text, 1000, base, args.ingest_eps);
    drop(text);
    let (from, to) = (base - 10, unix_now() + 10);
    let profile = Profile::default();
    let n = args.ingest_events as f64;
    let mut rows: Vec<Measured> = Vec::new();

    // Embedded, in this run, with the first cluster already up (its JVMs share the cores).
    if let Some(first) = args.cassandra_nodes.first() {
        script(&["start", &first.to_string()])?;
    }
    let dir = tmp.join("cassandra-row-embedded");
    let _ = std::fs::remove_dir_all(&dir);
    let emb: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir)?);
    eprintln!("cassandra: embedded ingest ...");
    let r = ingest_into(&payloads, profile, emb.clone())?;
    let (bytes, secs) = read_all(&*emb, from, to)?;
    drop(emb);
    let disk = dir_bytes(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let lat_dir = tmp.join("cassandra-row-latency-embedded");
    let lat = measure_latency(
        sluice_server::ServerConfig {
            data_dir: lat_dir.clone(),
            http: Some(([127, 0, 0, 1], 0).into()),
            tcp: None,
            udp: None,
            grace_ms: Some(250),
            ..sluice_server::ServerConfig::default()
        },
        args.latency_samples,
    )?;
    let _ = std::fs::remove_dir_all(&lat_dir);
    rows.push(Measured {
        label: "embedded".into(),
        eps: r.events as f64 / r.wall,
        read_mbs: bytes as f64 / 1e6 / secs,
        disk_per_event: disk as f64 / n,
        p99: p99(lat, args.latency_samples),
    });

    for nodes in &args.cassandra_nodes {
        eprintln!("cassandra: starting a {nodes}-node cluster (scripts/cassandra.sh) ...");
        script(&["start", &nodes.to_string()])?;
        let hosts: Vec<String> = (1..=*nodes)
            .map(|k| format!("{}:9042", sluice_store_cassandra::testing::node_ip(k)))
            .collect();
        let rf = (*nodes).min(3) as u32;
        let keyspace = format!("bench_{}_{nodes}", std::process::id());
        let mut config = CassandraConfig::new(hosts.clone(), &keyspace);
        config.replication_factor = rf;
        let store = Arc::new(CassandraStore::connect(
            config.clone(),
            Retention::default(),
        )?);
        eprintln!("cassandra: {nodes}-node ingest ...");
        let r = ingest_into(&payloads, profile, store.clone())?;
        if r.events as f64 != n {
            bail!("cassandra: {} events stored, expected {n}", r.events);
        }
        let (bytes, secs) = read_all(&*store, from, to)?;
        for k in 1..=*nodes {
            script(&["nodetool", &k.to_string(), "flush", &keyspace])?;
        }
        let disk: u64 = script(&["du", &keyspace])?.trim().parse().unwrap_or(0);
        eprintln!("cassandra: {nodes}-node latency ...");
        let lat_dir = tmp.join(format!("cassandra-row-latency-{nodes}"));
        let lat = measure_latency(
            sluice_server::ServerConfig {
                data_dir: lat_dir.clone(),
                store: Some(format!(
                    "{}?rf={rf}",
                    config.to_url().split('?').next().unwrap_or_default()
                )),
                http: Some(([127, 0, 0, 1], 0).into()),
                tcp: None,
                udp: None,
                grace_ms: Some(250),
                ..sluice_server::ServerConfig::default()
            },
            args.latency_samples,
        )?;
        let _ = std::fs::remove_dir_all(&lat_dir);
        let _ = store.drop_keyspace();
        rows.push(Measured {
            label: format!("Cassandra 5.0.6, {nodes} node(s), RF {rf}, write QUORUM, read ONE"),
            eps: r.events as f64 / r.wall,
            read_mbs: bytes as f64 / 1e6 / secs,
            disk_per_event: disk as f64 / n,
            p99: p99(lat, args.latency_samples),
        });
    }
    out.push_str("| store | ingest events/s wall | × embedded | read MB/s (get_blobs, SHA-1 checked) | bytes on disk / event (all replicas) | p99 emit → readable (grace 250 ms) | target | verdict |\n|---|---:|---:|---:|---:|---:|---|---|\n");
    let emb_eps = rows[0].eps;
    for (i, m) in rows.iter().enumerate() {
        let ratio = m.eps / emb_eps;
        let (target, verdict) = if i == 0 {
            ("", "")
        } else if m.label.contains(" 1 node") {
            (
                "ingest ≥ 0.7× embedded",
                if ratio >= 0.7 { "met" } else { "MISSED" },
            )
        } else {
            ("", "")
        };
        out.push_str(&format!(
            "| {} | {} | {ratio:.2} | {:.1} | {:.1} | {} | {target} | {verdict} |\n",
            m.label,
            fmt_rate(m.eps),
            m.read_mbs,
            m.disk_per_event,
            m.p99
        ));
    }
    out.push_str(
        "\nOne machine (2 shared vCPUs): Cassandra's JVMs and the bench share the cores, so these are lower bounds for a real \
         cluster. Ingest = the collector's pipeline on one thread, store writes included (chunk inserts, index and count rows). \
         Disk = SSTables after `nodetool flush` (no table compression on blobs; replicas counted).\n",
    );
    Ok(())
}
