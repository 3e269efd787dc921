//! What the parent reads about a worker from `/proc/<pid>/`: CPU time and memory.

use std::time::Duration;

use nix::unistd::{sysconf, SysconfVar};

fn clock_ticks_per_sec() -> u64 {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as u64,
        _ => 100,
    }
}

fn page_size() -> u64 {
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as u64,
        _ => 4096,
    }
}

/// User + system CPU time of `pid` (granularity: one clock tick, 10 ms on Linux), or `None`
/// when the process is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After ')': state is field 3, so utime (14) and stime (15) are the 12th and 13th here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    let hz = clock_ticks_per_sec();
    Some(Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
}

/// `(address space, resident set)` of `pid` in bytes, or `None` when it is gone (or a zombie).
pub fn memory(pid: u32) -> Option<(u64, u64)> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let mut fields = statm.split_ascii_whitespace();
    let size: u64 = fields.next()?.parse().ok()?;
    let resident: u64 = fields.next()?.parse().ok()?;
    let page = page_size();
    Some((size * page, resident * page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        // Burn a little CPU so the reading is not trivially zero everywhere.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_time(pid).is_some());
        let (vm, rss) = memory(pid).expect("statm");
        assert!(vm >= rss && rss > 0);
        assert_eq!(cpu_time(u32::MAX), None);
    }
}
