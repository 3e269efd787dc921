//! The ingest row for one profile, without the rest of the bench: a target for `perf` and
//! `valgrind --tool=callgrind` (which then count only this path, not event generation).
//!
//! The generated NDJSON is cached in the temp directory (`ingest-prof-<events>.ndjson`).
//!
//! `cargo run --release -p sluice-pipeline-bench --example ingest_prof -- [default|original] [events] [digest]`
//!
//! With `digest`, the stored blobs are kept and a digest of them (in flush order) is printed
//! after the timing: equal digests before and after a change = byte-identical blobs.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use sluice_blob::{BlobOptions, Profile};
use sluice_collector::aggregate::{Aggregator, AggregatorConfig};
use sluice_collector::{IngestConfig, Ingestor};
use sluice_store::{EmbeddedStore, Store};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let profile: Profile = args
        .next()
        .unwrap_or_else(|| "default".into())
        .parse()
        .map_err(|e| anyhow!("{e}"))?;
    let events: usize = args
        .next()
        .map_or(Ok(100_000), |s| s.parse())
        .context("event count")?;
    let digest = args.next().as_deref() == Some("digest");
    let mut kept: Vec<sluice_collector::aggregate::StoredBatch> = Vec::new();
    let eps = 10_000usize;
    let base = 1_700_000_000i64;
    let cfg = sluice_gen::GenConfig {
        epoch_start: base,
        events_per_second: eps as u32,
        ..sluice_gen::GenConfig::web(1, events)
    };
    // Generating costs more than ingesting: keep the text between runs so profiles show ingest.
    let cache = std::env::temp_dir().join(format!("ingest-prof-{events}.ndjson"));
    let text = match std::fs::read(&cache) {
        Ok(t) => t,
        Err(_) => {
            let mut t = Vec::new();
            sluice_gen::write_json_lines(&cfg, &mut t)?;
            std::fs::write(&cache, &t).context("writing the cache")?;
            t
        }
    };
    // Payloads of 1000 lines, each with its simulated arrival second (as the bench does).
    let mut payloads = Vec::new();
    let (mut start, mut lines, mut index) = (0usize, 0usize, 0usize);
    for (i, &b) in text.iter().enumerate() {
        if b == b'\n' {
            lines += 1;
            if lines == 1000 || i + 1 == text.len() {
                payloads.push((base + (index / eps) as i64, text[start..=i].to_vec()));
                (start, index, lines) = (i + 1, index + lines, 0);
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("ingest-prof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(EmbeddedStore::open(&dir).context("opening the store")?);
    let acfg = AggregatorConfig {
        blob: BlobOptions::with_profile(profile),
        ..AggregatorConfig::default()
    };
    let mut agg = Aggregator::new(acfg, store.clone()).map_err(|e| anyhow!("{e}"))?;
    let mut ing = Ingestor::new(IngestConfig::default()).map_err(|e| anyhow!("{e}"))?;
    let t0 = Instant::now();
    let cpu0 = cpu_seconds();
    let (faults0, sys0, rss0) = kernel_work();
    let mut last = i64::MIN;
    let mut n = 0usize;
    for (now, payload) in &payloads {
        if *now != last {
            if last != i64::MIN {
                let r = agg.flush_due(*now);
                if let Some(e) = r.errors.first() {
                    bail!("flush: {e}");
                }
                if digest {
                    kept.extend(r.stored);
                }
                store.flush().context("store flush")?;
            }
            last = *now;
        }
        let out = ing.ingest(payload, *now);
        if !out.is_clean() {
            bail!("dropped: {:?}", out.dropped.first());
        }
        n += out.events.len();
        agg.add(out.events, *now);
    }
    let r = agg.flush_all(last + 2);
    if let Some(e) = r.errors.first() {
        bail!("flush: {e}");
    }
    if digest {
        kept.extend(r.stored);
    }
    store.flush().context("store flush")?;
    let cpu = cpu_seconds() - cpu0;
    let secs = t0.elapsed().as_secs_f64();
    let (faults, sys, rss) = kernel_work();
    eprintln!(
        "{n} events in {secs:.3} s wall, {cpu:.3} CPU-s ({:.3} in the kernel, {} page faults, peak RSS +{} MiB): {:.0} events/CPU-s",
        sys - sys0,
        faults - faults0,
        (rss - rss0) / 1024,
        n as f64 / cpu
    );
    if digest {
        // FNV-1a over every chunk's key and bytes.
        let (mut h, mut chunks, mut bytes) = (0xcbf2_9ce4_8422_2325u64, 0usize, 0usize);
        for c in kept.iter().flat_map(|b| &b.chunks) {
            for &x in c.key.as_bytes().iter().chain(&c.data) {
                h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
            }
            chunks += 1;
            bytes += c.data.len();
        }
        eprintln!("blobs digest {h:016x} ({chunks} chunks, {bytes} bytes)");
    }
    drop(agg);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// (minor page faults, system CPU seconds, peak RSS in KiB) of the process so far: the kernel's
/// share (page zeroing on faults, the store's writes) and how much memory was ever touched.
fn kernel_work() -> (i64, f64, i64) {
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (0, f64::NAN, 0);
    }
    let st = ru.ru_stime;
    (
        ru.ru_minflt,
        st.tv_sec as f64 + st.tv_usec as f64 * 1e-6,
        ru.ru_maxrss,
    )
}

/// Process CPU time (all threads), seconds.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
