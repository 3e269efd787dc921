//! Server CPU from `/proc`: utime + stime of a whole process (every thread, exited ones
//! included) or of one of its threads, in milliseconds.
//!
//! Why CPU and not wall time: the machine is shared (2 cores, other builds running), so wall time
//! says more about the neighbours than about the server; the CPU a server spends on the same
//! request from the same client is what compares the two engines. The resolution is one clock
//! tick (10 ms at the usual 100 Hz), which the report says where a value is below it.

use std::path::Path;

use nix::unistd::{sysconf, SysconfVar};

use crate::error::{BenchError, Result};

/// Converts clock ticks to milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Milliseconds per clock tick (10 at 100 Hz).
    pub ms_per_tick: f64,
}

impl Clock {
    /// The system's clock (`sysconf(_SC_CLK_TCK)`).
    pub fn system() -> Result<Clock> {
        let ticks = sysconf(SysconfVar::CLK_TCK)
            .map_err(|e| BenchError::parse("sysconf(CLK_TCK)", e))?
            .filter(|t| *t > 0)
            .ok_or_else(|| BenchError::parse("sysconf(CLK_TCK)", "no value"))?;
        Ok(Clock {
            ms_per_tick: 1000.0 / ticks as f64,
        })
    }

    /// CPU milliseconds (utime + stime) of process `pid`, all its threads.
    pub fn process_ms(&self, pid: u32) -> Result<f64> {
        self.stat_ms(&Path::new("/proc").join(pid.to_string()).join("stat"))
    }

    /// CPU milliseconds (utime + stime) of thread `tid` of process `pid`.
    pub fn thread_ms(&self, pid: u32, tid: u32) -> Result<f64> {
        let path = Path::new("/proc")
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string())
            .join("stat");
        self.stat_ms(&path)
    }

    fn stat_ms(&self, path: &Path) -> Result<f64> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("reading", path, e))?;
        let ticks = stat_ticks(&text).ok_or_else(|| {
            BenchError::parse(path.display().to_string(), "no utime/stime fields")
        })?;
        Ok(ticks as f64 * self.ms_per_tick)
    }
}

/// utime + stime (fields 14 and 15 of `/proc/PID/stat`), in clock ticks. The command name
/// (field 2) is in parentheses and may itself hold spaces and parentheses, so the fields are
/// counted from the last `)`.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    // After the name: state (3), ppid (4), … utime is field 14, the 12th after the name.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The id of the thread of process `pid` named `name` (`/proc/PID/task/TID/comm`), if any.
pub fn thread_named(pid: u32, name: &str) -> Option<u32> {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    std::fs::read_dir(tasks).ok()?.flatten().find_map(|entry| {
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        (comm.trim_end() == name)
            .then(|| entry.file_name().to_str()?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_counts_fields_after_the_last_parenthesis() {
        // A command name with a space and a parenthesis; utime 1234, stime 56.
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 9 0";
        assert_eq!(stat_ticks(stat), Some(1290));
    }

    #[test]
    fn stat_ticks_refuses_a_truncated_line() {
        assert_eq!(stat_ticks("4242 (sluice) S 1 4242"), None);
        assert_eq!(stat_ticks("no parenthesis at all"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time_and_its_main_thread_a_name() {
        let clock = Clock::system().unwrap();
        assert!(clock.ms_per_tick > 0.0);
        // Burn some CPU so that at least one tick is counted.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let pid = std::process::id();
        assert!(clock.process_ms(pid).unwrap() > 0.0);
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(thread_named(pid, comm.trim_end()), Some(pid));
        assert_eq!(thread_named(pid, "no-such-thread-name"), None);
    }
}
