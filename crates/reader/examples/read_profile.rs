//! Profiling harness for the read hot path (not a test; numbers go to stderr).
//!
//! ```text
//! read_profile build DIR N original|default   # store N WEB events of one second (like the pipeline bench)
//! read_profile read DIR select|full|stages|dump [REPS]
//! ```
//! `read` runs a `RangeReader` over the stored second (`select`: select path, request_id,
//! timings.total_ms where status >= 500; `full`: full decode); `stages` splits the cost into store
//! get, SHA-1, decompression and a bare walk of the items. The build is kept out of what is
//! profiled, so `valgrind --tool=callgrind read_profile read …` measures the read alone.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::error::Error;
use std::time::Instant;

use sereal::{Limits, Value};
use sluice_blob::{Blob, BlobBuilder, BlobOptions, ChunkId, EventKey, Profile};
use sluice_reader::{Filter, RangeReader, ReadItem, ReadOptions, ReadRequest};
use sluice_store::{BlobKey, EmbeddedStore, Namespace, Store};

type R<T> = Result<T, Box<dyn Error>>;

const EPOCH: i64 = 1_700_000_000;
const SELECT: [&str; 3] = ["path", "request_id", "timings.total_ms"];
const WHERE: &str = "status >= 500";

fn cpu() -> f64 {
    // Process CPU time (all threads) from /proc/self/stat, in clock ticks (10 ms): coarse, but
    // the passes measured here take tenths of seconds, and std has no process CPU clock.
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn build(dir: &str, n: usize, profile: Profile) -> R<()> {
    const BATCH: usize = 10_000;
    let store = EmbeddedStore::open(dir)?;
    let cfg = sluice_gen::GenConfig {
        epoch_start: EPOCH,
        events_per_second: u32::try_from(n)?,
        ..sluice_gen::GenConfig::web(7, n)
    };
    let mut builder = BlobBuilder::new(BlobOptions::with_profile(profile))?;
    let mut groups: BTreeMap<(String, String), (Vec<Value>, u32)> = BTreeMap::new();
    let mut total = 0usize;
    let mut plain = 0usize;
    let mut flush = |dc: &str, sub: &str, events: &mut Vec<Value>, next: &mut u32| -> R<()> {
        if events.is_empty() {
            return Ok(());
        }
        let blobs = builder.build_array(&Value::Array(std::mem::take(events)))?;
        let mut entries = Vec::new();
        for b in blobs {
            let key = EventKey::new(EPOCH, dc, "WEB", sub, ChunkId::plain(*next))?;
            *next += 1;
            let ks = key.to_string();
            store.put_blob(&Namespace::Events, BlobKey::new(EPOCH, &ks), b.as_bytes())?;
            total += b.len();
            plain +=
                sereal::de::body_bytes(b.as_blob_ref().sereal_part(), &Limits::default())?.len();
            entries.push(key.index_entry().to_string());
        }
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        store.add_to_epoch_index(EPOCH, dc, &refs)?;
        Ok(())
    };
    for ev in sluice_gen::Generator::new(cfg) {
        let dc = ev
            .get("dc")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let sub = ev
            .get("subtype")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let g = groups.entry((dc.clone(), sub.clone())).or_default();
        g.0.push(ev);
        if g.0.len() >= BATCH {
            let (events, next) = g;
            flush(&dc, &sub, events, next)?;
        }
    }
    for ((dc, sub), (events, next)) in groups.iter_mut() {
        flush(dc, sub, events, next)?;
    }
    store.flush()?;
    eprintln!("stored {n} events: {total} B compressed ({:.1} B/event), {plain} B of bodies ({:.1} B/event)", total as f64 / n as f64, plain as f64 / n as f64);
    Ok(())
}

fn read(store: &EmbeddedStore, lazy: bool) -> R<u64> {
    let mut req = ReadRequest::new(EPOCH, EPOCH + 1);
    if lazy {
        req.selection.select = SELECT
            .iter()
            .map(|p| sereal::Path::parse(p))
            .collect::<Result<_, _>>()?;
        req.selection.filter = Some(Filter::parse(WHERE)?);
    }
    let reader = RangeReader::new(store, req, ReadOptions::default())?;
    let mut n = 0;
    for item in reader {
        match item {
            ReadItem::Event(e) => {
                std::hint::black_box(&e);
                n += 1;
            }
            ReadItem::Warning(w) => return Err(format!("warning: {w}").into()),
            ReadItem::Notice(_) => {}
        }
    }
    Ok(n)
}

/// The Sereal part of a stored blob without verifying its SHA-1 (to time the other stages alone).
fn sereal_part(blob: &[u8]) -> R<&[u8]> {
    Ok(blob
        .get(..blob.len().saturating_sub(sluice_blob::TRAILER_LEN))
        .filter(|p| !p.is_empty())
        .ok_or("blob shorter than its trailer")?)
}

fn keys(store: &EmbeddedStore) -> R<Vec<String>> {
    let mut out = Vec::new();
    for (epoch, dc) in store.list_epochs(None, EPOCH, EPOCH + 1)? {
        for e in store.get_epoch_index(epoch, &dc)? {
            out.push(format!("{epoch}:{dc}:{e}"));
        }
    }
    Ok(out)
}

fn stages(store: &EmbeddedStore) -> R<()> {
    let keys = keys(store)?;
    let t = |name: &str, c0: f64, w0: Instant| {
        eprintln!(
            "{name:>12}: {:.3} CPU-s, {:.3} s wall",
            cpu() - c0,
            w0.elapsed().as_secs_f64()
        )
    };
    let (c0, w0) = (cpu(), Instant::now());
    let bkeys: Vec<BlobKey<'_>> = keys.iter().map(|k| BlobKey::new(EPOCH, k)).collect();
    let mut blobs = Vec::new();
    for batch in bkeys.chunks(16) {
        for r in store.get_blobs(&Namespace::Events, batch) {
            blobs.push(r?.ok_or("missing")?);
        }
    }
    t("get", c0, w0);
    let (c0, w0) = (cpu(), Instant::now());
    for b in &blobs {
        Blob::parse(b)?;
    }
    t("sha1", c0, w0);
    let limits = Limits::default();
    let mut scratch = Vec::new();
    let (c0, w0) = (cpu(), Instant::now());
    let mut body = 0;
    for b in &blobs {
        body += sereal::LazyDoc::open(sereal_part(b)?, &limits, &mut scratch)?
            .body()
            .len();
    }
    t("decompress", c0, w0);
    let (c0, w0) = (cpu(), Instant::now());
    let mut n = 0;
    for b in &blobs {
        let doc = sereal::LazyDoc::open(sereal_part(b)?, &limits, &mut scratch)?;
        for it in doc.items()? {
            it?;
            n += 1;
        }
    }
    t("decomp+walk", c0, w0);
    eprintln!("{} blobs, {n} events, {body} body bytes", blobs.len());
    Ok(())
}

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("build") => {
            let n = args.get(3).ok_or("N")?.parse()?;
            let profile: Profile = args.get(4).ok_or("profile")?.parse()?;
            build(args.get(2).ok_or("DIR")?, n, profile)
        }
        Some("read") => {
            // READ_THREADS: the store's `read_threads` (default 4), to see what the fetch threads cost.
            let mut opts = sluice_store::EmbeddedOptions::default();
            if let Ok(t) = std::env::var("READ_THREADS") {
                opts.read_threads = t.parse()?;
            }
            let store = EmbeddedStore::open_with(args.get(2).ok_or("DIR")?, opts)?;
            let mode = args.get(3).map(String::as_str).unwrap_or("select");
            let reps: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(1);
            for _ in 0..reps {
                let (c0, w0) = (cpu(), Instant::now());
                match mode {
                    "select" | "full" => {
                        let n = read(&store, mode == "select")?;
                        eprintln!(
                            "{mode}: {n} events, {:.3} CPU-s, {:.3} s wall",
                            cpu() - c0,
                            w0.elapsed().as_secs_f64()
                        );
                    }
                    "stages" => stages(&store)?,
                    "dump" => {
                        // Every decompressed body, concatenated, to stdout (for `zstd -b`).
                        use std::io::Write;
                        let keys = keys(&store)?;
                        let mut out = std::io::stdout().lock();
                        for k in &keys {
                            let b = store
                                .get_blob(&Namespace::Events, BlobKey::new(EPOCH, k))?
                                .ok_or("missing")?;
                            out.write_all(&sereal::de::body_bytes(
                                sereal_part(&b)?,
                                &Limits::default(),
                            )?)?;
                        }
                    }
                    _ => return Err("mode: select|full|stages".into()),
                }
            }
            Ok(())
        }
        _ => Err("usage: read_profile build DIR N PROFILE | read DIR MODE [REPS]".into()),
    }
}
