//! Bounded polling: a test waits for a condition, never longer than its caller's limit, and a
//! timeout says what was awaited.

use std::time::{Duration, Instant};

/// How often [`wait_for`] polls: short next to the waits the tests make, long enough that
/// polling a server's `/metrics` does not load it.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `done` until it is true; panics with "timed out waiting for `what`" after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what} ({timeout:?})"
        );
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_when_done() {
        let mut n = 0;
        wait_for(Duration::from_secs(5), "three polls", || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
    }

    #[test]
    #[should_panic(expected = "timed out waiting for never")]
    fn panics_naming_what() {
        wait_for(Duration::from_millis(50), "never", || false);
    }
}
