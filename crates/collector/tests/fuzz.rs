//! A cheap deterministic fuzz loop: random bytes and mutations of valid payloads never panic,
//! and every outcome is self-consistent.

use sereal::{Compression, EncoderOptions};
use sluice_collector::{IngestConfig, IngestOutcome, Ingestor};

const NOW: i64 = 1_700_000_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn check(out: &IngestOutcome) {
    if out.payload_rejected().is_some() {
        assert!(out.events.is_empty());
        assert_eq!(out.dropped.len(), 1);
    }
    for e in &out.events {
        for (k, want) in [("dc", &e.dc), ("type", &e.type_), ("subtype", &e.subtype)] {
            assert_eq!(
                e.event
                    .to_value()
                    .unwrap()
                    .get(k)
                    .and_then(sereal::Value::as_str),
                Some(want.as_str())
            );
            assert!(!want.contains([':', '|']));
        }
        assert_eq!(
            e.event
                .to_value()
                .unwrap()
                .get("epoch")
                .and_then(sereal::Value::as_i64),
            Some(e.epoch)
        );
        assert!(!e.type_.is_empty() && !e.dc.is_empty());
    }
    for d in &out.dropped {
        assert!(!d.reason.as_str().is_empty());
        assert!(d.count >= 1);
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    sluice_gen::write_json_lines(&sluice_gen::GenConfig::mixed(7, 20), &mut lines).unwrap();
    let text = String::from_utf8(lines.clone()).unwrap();
    let array = format!("[{}]", text.trim_end().replace('\n', ","));
    let events = sluice_gen::events_array(&sluice_gen::GenConfig::mixed(7, 20));
    let mut out = vec![
        lines,
        array.into_bytes(),
        br#"{"type":"A","epoch":1700000000,"x":[1,2.5,{"y":null}]}"#.to_vec(),
        b"\xEF\xBB\xBF[{\"type\":\"A\"},42,\"s\",[[[]]]]\n{\"type\":\"B\"}".to_vec(),
    ];
    for opts in [
        EncoderOptions::default(),
        EncoderOptions::original_events(),
        EncoderOptions {
            compression: Compression::Zstd { level: 1 },
            compress_threshold: 0,
            ..Default::default()
        },
        EncoderOptions {
            compression: Compression::Snappy,
            compress_threshold: 0,
            dedupe_strings: true,
            ..Default::default()
        },
    ] {
        out.push(sereal::to_vec(&events, &opts).unwrap());
    }
    out
}

#[test]
fn random_inputs_never_panic() {
    let cfg = IngestConfig {
        max_depth: 8,
        max_events: 15,
        max_event_bytes: 700,
        ..Default::default()
    };
    let mut ing = Ingestor::new(cfg).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let seeds = seeds();
    let alphabet = b"{}[]\",:\n\r\t 0123456789-.eEtruefalsnl\\u\xEF\xBB\xBF\xff\xc3=srl\xF3";
    let iterations = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    for i in 0..iterations {
        let payload: Vec<u8> = match i % 4 {
            // Random bytes, either uniform or from a JSON-ish alphabet.
            0 => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
            1 => (0..rng.below(96))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect(),
            // Mutations of valid payloads.
            _ => {
                let mut p = seeds[rng.below(seeds.len())].clone();
                for _ in 0..1 + rng.below(4) {
                    if p.is_empty() {
                        break;
                    }
                    let at = rng.below(p.len());
                    match rng.below(5) {
                        0 => p[at] = rng.next() as u8,
                        1 => p[at] ^= 1 << rng.below(8),
                        2 => p.insert(at, alphabet[rng.below(alphabet.len())]),
                        3 => p.truncate(at),
                        _ => {
                            let end = (at + rng.below(32)).min(p.len());
                            let chunk = p[at..end].to_vec();
                            let to = rng.below(p.len());
                            p.splice(to..to, chunk);
                        }
                    }
                }
                p
            }
        };
        let out = ing.ingest(&payload, NOW);
        check(&out);
    }
}
