//! Times the first load of a partition (the header walk of `blobs.log`, the replay of
//! `meta.log`) on open: `cargo run --release -p sluice-store --example load_time -- [BLOBS]
//! [damage]`. With `damage`, a blob header and a meta record near the start are flipped first,
//! so the load resynchronises (docs/decisions.md, "Store damage").

use std::time::Instant;

use sluice_store::{BlobKey, EmbeddedStore, Namespace, Store};

const E: i64 = 1_700_002_800;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let damage = args.next().as_deref() == Some("damage");
    let dir = tempfile::tempdir()?;
    {
        let s = EmbeddedStore::open(dir.path())?;
        let value = vec![7u8; 1000];
        for i in 0..n {
            let epoch = E + (i % 3600) as i64;
            let key = format!("{epoch}:ams:WEB:sub:{}", i / 3600);
            s.put_blob(&Namespace::Events, BlobKey::new(epoch, &key), &value)?;
            let entry = format!("WEB:sub:{}", i / 3600);
            s.add_to_epoch_index(epoch, "ams", &[&entry])?;
        }
        s.flush()?;
    }
    let part = dir.path().join(format!("p{E}"));
    if damage {
        for (file, at) in [("blobs.log", 5_000usize), ("meta.log", 5_000)] {
            let path = part.join(file);
            let mut b = std::fs::read(&path)?;
            for x in &mut b[at..at + 8] {
                *x ^= 0xa5;
            }
            std::fs::write(&path, b)?;
        }
    }
    let blobs_len = std::fs::metadata(part.join("blobs.log"))?.len();
    let meta_len = std::fs::metadata(part.join("meta.log"))?.len();
    let mut times = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        let s = EmbeddedStore::open(dir.path())?;
        let key = format!("{E}:ams:WEB:sub:0");
        let _ = s.get_blob(&Namespace::Events, BlobKey::new(E, &key))?;
        let _ = s.get_epoch_index(E, "ams")?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{n} blobs ({blobs_len} B blobs.log, {meta_len} B meta.log){}: load median {:.1} ms, min {:.1} ms",
        if damage { ", damaged" } else { "" },
        times[times.len() / 2],
        times[0]
    );
    Ok(())
}
