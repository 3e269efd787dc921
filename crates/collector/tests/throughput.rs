//! Throughput sanity check: not timed-asserted, it only prints events/s (meaningful with
//! `cargo test --release -p sluice-collector --test throughput -- --nocapture`).

use std::time::Instant;

use sluice_collector::{IngestConfig, Ingestor};

#[test]
fn throughput_sanity() {
    let n = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    let mut buf = Vec::new();
    sluice_gen::write_json_lines(&sluice_gen::GenConfig::web(1, n), &mut buf).unwrap();
    // Bodies of ~1,000 events (~500 KB), as HTTP requests would bring them.
    let mut bodies = Vec::new();
    let mut start = 0;
    let mut lines = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b == b'\n' {
            lines += 1;
            if lines % 1000 == 0 {
                bodies.push(&buf[start..=i]);
                start = i + 1;
            }
        }
    }
    if start < buf.len() {
        bodies.push(&buf[start..]);
    }
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let t = Instant::now();
    let mut events = 0;
    for body in &bodies {
        let out = ing.ingest(body, 1_700_000_000);
        assert!(out.is_clean());
        events += out.events.len();
    }
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(events, n);
    eprintln!(
        "ingest (NDJSON, gen WEB events, {} bytes): {events} events in {secs:.3} s = {:.0} events/s, {:.0} MB/s{}",
        buf.len(),
        events as f64 / secs,
        buf.len() as f64 / secs / 1e6,
        if cfg!(debug_assertions) { " (debug build: not meaningful)" } else { "" }
    );
}
