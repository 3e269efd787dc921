//! The memory budget's default grows with `pipeline_threads` (512 MiB each, at most a quarter of
//! the machine's memory, never below 512 MiB), the spare-encoder share with it, and an explicit
//! `max_pending_bytes` wins. The last test reads the budget in force from a real server's
//! `/metrics`.

use sluice_server::config::memory_budget::{default_max_pending_bytes, mem_total};
use sluice_server::{Server, ServerConfig};

mod common;
use common::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn with_threads(threads: usize, explicit: &str) -> ServerConfig {
    ServerConfig::from_toml(&format!("pipeline_threads = {threads}\n{explicit}")).unwrap()
}

/// What the default should be here: 512 MiB per thread, capped at a quarter of `MemTotal`, not
/// below 512 MiB.
fn expected(threads: u64) -> u64 {
    let cap = mem_total().map_or(u64::MAX, |m| m / 4);
    (threads * 512 * MIB).min(cap).max(512 * MIB)
}

#[test]
fn the_default_budget_is_512_mib_per_thread_within_a_quarter_of_the_memory() {
    // The rule on given machines: a big one scales, a small one is capped, a tiny one keeps
    // the old 512 MiB; an unknown memory has no cap.
    assert_eq!(default_max_pending_bytes(1, Some(24 * GIB)), 512 * MIB);
    assert_eq!(default_max_pending_bytes(2, Some(24 * GIB)), GIB);
    assert_eq!(default_max_pending_bytes(8, Some(24 * GIB)), 4 * GIB);
    assert_eq!(default_max_pending_bytes(8, Some(8 * GIB)), 2 * GIB);
    assert_eq!(default_max_pending_bytes(8, Some(GIB)), 512 * MIB);
    assert_eq!(default_max_pending_bytes(8, None), 4 * GIB);

    // The config's default on this machine, for 1, 2 and 8 threads.
    assert!(mem_total().is_some(), "no MemTotal in /proc/meminfo");
    for threads in [1, 2, 8] {
        let c = with_threads(threads, "");
        assert_eq!(c.max_pending_bytes, None);
        assert_eq!(
            c.max_pending_bytes(),
            expected(threads as u64),
            "{threads} threads"
        );
        // The spare-encoder share: half the budget over the shards.
        assert_eq!(
            c.spare_bytes_per_shard(threads),
            expected(threads as u64) / 2 / threads as u64
        );
    }
    assert!(with_threads(2, "").max_pending_bytes() > with_threads(1, "").max_pending_bytes());
}

#[test]
fn an_explicit_budget_wins_over_the_default() {
    for threads in [1, 2, 8] {
        let c = with_threads(threads, "max_pending_bytes = 1234567\n");
        assert_eq!(c.max_pending_bytes(), 1234567, "{threads} threads");
        assert_eq!(c.spare_bytes_per_shard(2), 1234567 / 4);
    }
    // Zero is refused, not read as "the default".
    let c = with_threads(2, "max_pending_bytes = 0\n");
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("max_pending_bytes"));
}

#[test]
fn a_server_runs_with_the_budget_of_its_threads() {
    let dir = temp_dir("memory-default");
    // Two threads (the common config): the scaled default is in force.
    let server = Server::start(config(&dir, 0)).unwrap();
    let addr = server.http_addr.unwrap();
    assert_eq!(metric(addr, "sluice_max_pending_bytes"), expected(2) as f64);
    server.shutdown().unwrap();

    // An explicit budget is the one in force.
    let explicit = ServerConfig {
        max_pending_bytes: Some(300 * MIB),
        ..config(&dir, 0)
    };
    let server = Server::start(explicit).unwrap();
    let addr = server.http_addr.unwrap();
    assert_eq!(metric(addr, "sluice_max_pending_bytes"), (300 * MIB) as f64);
    server.shutdown().unwrap();
}
