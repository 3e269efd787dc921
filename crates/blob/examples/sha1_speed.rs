//! SHA-1 throughput of `sluice_blob::sha1` on one buffer, to compare with `openssl speed` /
//! `sha1sum` on the same machine (docs/decisions.md, "Reader and queries").
//!
//! `cargo run --release -p sluice-blob --example sha1_speed -- [bytes] [rounds]`

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000);
    // Not all zeros, so nothing in the path can shortcut it.
    let data: Vec<u8> = (0..len).map(|i| (i * 131 + i / 7) as u8).collect();
    let mut acc = 0u8;
    let start = Instant::now();
    for _ in 0..rounds {
        acc ^= sluice_blob::sha1(&data)[0];
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = (len * rounds) as f64;
    println!(
        "sha1: {len} B x {rounds}: {:.3} s, {:.2} GB/s (check byte {acc})",
        secs,
        bytes / secs / 1e9
    );
}
