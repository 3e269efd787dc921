//! The default memory budget (`max_pending_bytes` not set), grown with the pipeline threads.
//!
//! Each pipeline shard holds its own open seconds: near its top rate (~500 k of the bench's
//! events/s per shard) an open second's encoder takes ~350 bytes per event, ~175 MB, and the
//! pending events span the open second, the grace (250 ms), the flush tick and the batch being
//! written: ~2 s, ~350 MB per shard at the peak. One fixed 512 MiB for all shards held that for
//! one shard only: a two-shard server near 1 M events/s answered a fifth of its POSTs with 503,
//! and the spare-encoder share (half the budget over the shards, 128 MiB each) was smaller than
//! one second's encoder, so none was kept.
//!
//! The rule: [`PER_SHARD_BYTES`] (512 MiB) per pipeline thread — one shard keeps the old
//! 512 MiB, and each shard's spare share (half of it, 256 MiB) holds a ~175 MB encoder — capped
//! at [`MEMORY_SHARE_DIVISOR`] (a quarter) of the machine's `MemTotal` (`/proc/meminfo`): RSS
//! stays within about 2–3× the budget above the idle process
//! (`crates/cli/tests/server_memory.rs`), so a quarter keeps a saturated server within about
//! three quarters of the machine, with room for the page cache the store and reader live on.
//! The cap never goes below [`MIN_BYTES`] (512 MiB, the old default): no machine gets less than
//! before. Without `/proc/meminfo` there is no cap. An explicit `max_pending_bytes` always wins
//! (`docs/decisions.md`, "Memory budget default").

/// Budget per pipeline thread: 512 MiB.
pub const PER_SHARD_BYTES: u64 = 512 << 20;

/// The smallest default budget, whatever the machine's memory: 512 MiB.
pub const MIN_BYTES: u64 = 512 << 20;

/// The default budget is at most `MemTotal` divided by this (a quarter).
pub const MEMORY_SHARE_DIVISOR: u64 = 4;

/// The default budget for `threads` pipeline threads on a machine of `mem_total` bytes
/// (`None`: unknown, no cap): see the [module docs](self).
pub fn default_max_pending_bytes(threads: usize, mem_total: Option<u64>) -> u64 {
    let scaled = PER_SHARD_BYTES.saturating_mul(threads.max(1) as u64);
    let capped = match mem_total {
        Some(total) => scaled.min(total / MEMORY_SHARE_DIVISOR),
        None => scaled,
    };
    capped.max(MIN_BYTES)
}

/// The machine's memory, bytes: `MemTotal` of `/proc/meminfo` (`None` where there is none or
/// it does not parse — then the default has no cap).
pub fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&text)
}

/// `MemTotal:  24684092 kB` → bytes.
fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mem_total_in_kib() {
        let text = "MemTotal:       24684092 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_mem_total(text), Some(24684092 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: x kB\n"), None);
    }
}
