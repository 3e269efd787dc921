//! Deterministic crash points: each step of the path ingest → WAL → route → flush → index →
//! notes → checkpoint calls [`hit`] with its name ([`POINTS`] lists them, in path order), and a
//! test makes the process die at exactly that step, the Nth time it is reached.
//!
//! Why: randomised SIGKILL loops find windows only by luck (the sharded pipeline once lost
//! and doubled late events in 5 of 5 operator runs, while the crash test, with one group, passed).
//! A crash at each named step in turn, with several groups, shards and late events, proves the
//! exactly-once protocol ([`crate::exactly_once`]) step by step.
//!
//! Arming:
//! - **A process**: the environment variable `SLUICE_FAILPOINT=NAME[@N]` (N ≥ 1, default 1), read
//!   once. The Nth hit of `NAME`, counted over every thread, prints the point on stderr and calls
//!   [`std::process::abort`]: like SIGKILL, no destructor, no buffered write, no clean shutdown
//!   runs (what the kernel already holds, written files, survives as it does a SIGKILL).
//! - **A thread** (tests driving the protocol without a server): [`arm_thread`]; the Nth hit on
//!   that thread panics with [`Crash`] instead, for the test to catch and then drop the state
//!   without cleanup.
//!
//! Always compiled: disarmed (no variable), a hit costs one load of a static and, in tests, a
//! thread-local — hits are per payload, per flush or per batch, never per event. Shipping them
//! lets the tests crash the very binary users run (a cargo feature would be unified into that
//! binary only by accident of which tests are built with it).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every crash point, in the order the data path reaches them (see [`crate::exactly_once`] for
/// what each one tests).
pub const POINTS: &[&str] = &[
    "ingest.parsed",
    "ingest.logged",
    "route.sent",
    "route.added",
    "ack.durable",
    "flush.stored",
    "flush.noted",
    "flush.indexed",
    "flush.counted",
    "spool.pushed",
    "settle.synced",
    "settle.noted",
    "settle.published",
    "checkpoint.written",
    "replay.done",
];

/// The panic payload of a thread-armed crash point (see [`arm_thread`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash(pub &'static str);

/// The process-wide arming from `SLUICE_FAILPOINT`.
struct Armed {
    name: String,
    left: AtomicU64,
}

fn process_armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("SLUICE_FAILPOINT").ok()?;
            let (name, n) = match spec.split_once('@') {
                Some((name, n)) => (name, n.trim().parse::<u64>().ok()?.max(1)),
                None => (spec.as_str(), 1),
            };
            let name = name.trim().to_string();
            if !POINTS.contains(&name.as_str()) {
                eprintln!("sluice: SLUICE_FAILPOINT names no crash point: {name:?} (ignored)");
                return None;
            }
            eprintln!("sluice: crash point armed: the process aborts at hit {n} of {name}");
            Some(Armed {
                name,
                left: AtomicU64::new(n),
            })
        })
        .as_ref()
}

thread_local! {
    static THREAD_ARMED: RefCell<Option<(&'static str, u64)>> = const { RefCell::new(None) };
}

/// Arms crash point `name` on this thread: its `n`th hit here (n ≥ 1) panics with [`Crash`].
/// `None` disarms. Panics if `name` is not in [`POINTS`] (a test naming a point that does not
/// exist would pass without crashing).
pub fn arm_thread(point: Option<(&'static str, u64)>) {
    if let Some((name, _)) = point {
        assert!(POINTS.contains(&name), "no crash point {name:?}");
    }
    THREAD_ARMED.with(|a| *a.borrow_mut() = point.map(|(name, n)| (name, n.max(1))));
}

/// Whether this thread's armed point is still waiting for its hit (false once it crashed, or
/// when none is armed): a test fails if the step it meant to crash at was never reached.
pub fn thread_armed_pending() -> bool {
    THREAD_ARMED.with(|a| a.borrow().is_some())
}

/// The step `name` (one of [`POINTS`]) is reached: crashes here when armed for it.
pub fn hit(name: &'static str) {
    if let Some(a) = process_armed() {
        if a.name == name && a.left.fetch_sub(1, Ordering::SeqCst) == 1 {
            eprintln!("sluice: crash point {name} reached: aborting");
            std::process::abort();
        }
    }
    let crash = THREAD_ARMED.with(|a| {
        let mut a = a.borrow_mut();
        match a.as_mut() {
            Some((armed, left)) if *armed == name => {
                *left -= 1;
                if *left == 0 {
                    *a = None;
                    return true;
                }
                false
            }
            _ => false,
        }
    });
    if crash {
        std::panic::panic_any(Crash(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_armed_point_panics_at_its_nth_hit_only() {
        arm_thread(Some(("flush.noted", 2)));
        hit("flush.stored");
        hit("flush.noted");
        assert!(thread_armed_pending());
        let r = std::panic::catch_unwind(|| hit("flush.noted"));
        let payload = r.expect_err("the second hit crashes");
        assert_eq!(payload.downcast_ref::<Crash>(), Some(&Crash("flush.noted")));
        assert!(!thread_armed_pending());
        hit("flush.noted"); // disarmed after its crash
    }

    #[test]
    #[should_panic(expected = "no crash point")]
    fn arming_an_unknown_point_fails() {
        arm_thread(Some(("no.such", 1)));
    }
}
