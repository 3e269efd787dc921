//! Capped exponential backoff with jitter between attempts at one receiver: the first wait is
//! `min`, each failure doubles it up to `max`, and each wait is drawn from [half, all] of it so
//! that several Sluice servers retrying one receiver do not arrive in step.

use std::time::Duration;

/// The waits between failed attempts.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// Starts at `min`, never above `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            current: min,
        }
    }

    /// After a success (or a rejection): the next failure waits `min` again.
    pub fn reset(&mut self) {
        self.current = self.min;
    }

    /// The wait after one more failure: in [current / 2, current], then current doubles.
    pub fn next_wait(&mut self) -> Duration {
        let cur = self.current;
        self.current = (cur * 2).min(self.max);
        let half = cur / 2;
        let spread = (cur - half).as_micros() as u64;
        half + Duration::from_micros(fastrand::u64(0..=spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_with_jitter_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(350));
        let waits: Vec<Duration> = (0..5).map(|_| b.next_wait()).collect();
        let caps = [100, 200, 350, 350, 350];
        for (w, cap) in waits.iter().zip(caps) {
            assert!(
                *w >= ms(cap) / 2 && *w <= ms(cap),
                "{w:?} not in [{cap}/2, {cap}] ms"
            );
        }
        b.reset();
        assert!(b.next_wait() <= ms(100));
    }
}
