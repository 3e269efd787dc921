//! Exactly once across repeated SIGKILLs of a real `sluice serve` (issue 8, finding 3): a client
//! posts acknowledged batches mixing late events (dated 1–3 s before now) and current ones while
//! the server is killed every 0.3–1.5 s (randomised); after a final clean start and flush every
//! acknowledged id is read back exactly once, every unacknowledged one at most once.
//!
//! Needs the `sluice` binary: `cargo build -p sluice` first (`cargo test --workspace` builds it).

mod common;
mod process;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::now;
use process::{try_request, Server, XorShift};
use serde_json::json;

/// Events per batch: half current, half late.
const BATCH: u64 = 40;

#[derive(Default)]
struct Sent {
    /// Batches answered 200 (every event of them must be stored exactly once).
    acked: Vec<u64>,
    /// Batches sent but not acknowledged (at most once).
    unacked: Vec<u64>,
}

/// One batch: ids `batch * BATCH + n`, the first half dated now, the rest 1–3 s before now.
fn batch_body(batch: u64, now: i64) -> String {
    (0..BATCH)
        .map(|n| {
            let epoch = if n < BATCH / 2 { now } else { now - 1 - (n % 3) as i64 };
            json!({"type": "KILL", "subtype": "s", "epoch": epoch, "dc": "local", "id": batch * BATCH + n})
                .to_string()
                + "\n"
        })
        .collect()
}

#[test]
fn repeated_sigkill_stores_every_acked_event_exactly_once() {
    let seed = std::env::var("SLUICE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now() as u64);
    println!("seed {seed} (SLUICE_KILL_SEED to repeat)");
    let mut rng = XorShift::new(seed);
    let dir = common::temp_dir("crashes");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\ntcp = \"off\"\nudp = \"off\"\n",
            dir.join("data")
        ),
    )
    .unwrap();
    let start = now();

    let addr = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Sent::default()));
    let poster = {
        let (addr, stop, sent) = (addr.clone(), stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let mut batch = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Some(a) = *addr.lock().unwrap() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let body = batch_body(batch, now());
                match try_request(a, "POST", "/v1/events", body.as_bytes()) {
                    Ok(r) if r.status == 200 => sent.lock().unwrap().acked.push(batch),
                    Ok(r) => panic!("batch {batch}: {} {}", r.status, r.text()),
                    Err(_) => {
                        sent.lock().unwrap().unacked.push(batch);
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                batch += 1;
            }
        })
    };

    let kills = 15 + rng.below(11);
    let deadline = Instant::now() + Duration::from_secs(90);
    for k in 0..kills {
        let mut server = Server::start(&config, &dir.join("data"));
        *addr.lock().unwrap() = Some(server.addr);
        // Counted from the spawn: a kill may land in the first flush of what was replayed.
        let wait = Duration::from_millis(300 + rng.below(1201));
        let started = server.spawned.elapsed();
        std::thread::sleep(wait.saturating_sub(started));
        server.kill();
        println!(
            "kill {k} {wait:?} after the spawn (serving after {started:?}): {} acked so far",
            sent.lock().unwrap().acked.len()
        );
        assert!(Instant::now() < deadline, "kills took too long");
    }
    stop.store(true, Ordering::Relaxed);
    // The poster may be inside a request to the dead server: it fails fast (connection refused).
    poster.join().unwrap();
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    assert!(
        sent.acked.len() > 50,
        "too few acknowledged batches: {}",
        sent.acked.len()
    );

    // A clean start: the WAL is replayed and everything flushed.
    let server = Server::start(&config, &dir.join("data"));
    server.wait_idle(Duration::from_secs(30));
    let events = server.read(start - 10, now() + 10);
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for e in &events {
        *seen.entry(e["id"].as_u64().unwrap()).or_default() += 1;
    }
    let ids = |b: &u64| (b * BATCH)..((b + 1) * BATCH);
    let lost: Vec<u64> = sent
        .acked
        .iter()
        .flat_map(ids)
        .filter(|id| !seen.contains_key(id))
        .collect();
    let twice: Vec<(u64, u32)> = seen
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(&id, &c)| (id, c))
        .collect();
    let late_twice = twice
        .iter()
        .filter(|(id, _)| id % BATCH >= BATCH / 2)
        .count();
    println!(
        "{kills} kills, {} acked batches ({} events), {} unacked, {} events read, {} lost, {} twice ({late_twice} late)",
        sent.acked.len(),
        sent.acked.len() as u64 * BATCH,
        sent.unacked.len(),
        events.len(),
        lost.len(),
        twice.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged events lost: {:?}",
        &lost[..lost.len().min(20)]
    );
    assert!(
        twice.is_empty(),
        "events stored twice: {:?}",
        &twice[..twice.len().min(20)]
    );
    let known: std::collections::BTreeSet<u64> =
        sent.acked.iter().chain(&sent.unacked).copied().collect();
    assert!(
        seen.keys().all(|id| known.contains(&(id / BATCH))),
        "an event nobody sent"
    );
    server.stop();
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    println!(
        "restarts that found a done note without its index entries (a kill inside a flush): {}",
        log.matches("without their index entries").count()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
