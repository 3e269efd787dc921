//! Encoders kept from closed groups for the next second's groups.
//!
//! A group's encoder holds its body and de-duplication tables; at a high rate one second of
//! one stream is a big one (~150 MB for 500 k of the bench's events). Freed at the flush and
//! allocated again a moment later by the same stream's next second, that memory went back to
//! the OS and was faulted in — zeroed by the kernel — once more, and every doubling of the
//! growing body copied it again: with two pipeline threads near 1 M events/s, the kernel's
//! `clear_page_erms` alone took 13.8 % of the process's CPU (`docs/decisions.md`, "Spare
//! encoders by size"). Kept here, the stream's next group takes its encoder back with the
//! capacity it needs.
//!
//! The rules, all in this file:
//! - small encoders (at most [`SMALL_BYTES`] held) are kept up to [`MAX_SPARES`] in all, for as
//!   long as they wait;
//! - bigger ones are kept while the big spares' total stays within the aggregator's
//!   `max_spare_bytes`, and dropped once unused for [`MAX_IDLE`]: a burst's buffers do not stay
//!   for the quiet seconds after it;
//! - a new group takes the smallest spare that holds as much as its stream's last second did
//!   (the largest if none does; the smallest for a stream not seen yet).
//!
//! Spares are memory outside the pending-bytes budget; the server gives each shard's
//! aggregator a share of it (`max_pending_bytes` / 2 over all shards). The default budget grows
//! with the pipeline threads (512 MiB each, at most a quarter of the machine's memory, at least
//! 512 MiB: `sluice_server::config::memory_budget`), so each shard's share stays 256 MiB — more
//! than one second's encoder of a shard near its top rate (~175 MB) — where a fixed 512 MiB gave
//! two shards 128 MiB each and no reuse.

use std::time::{Duration, Instant};

use sereal::ArrayEncoder;

/// Spare encoders kept at most.
pub const MAX_SPARES: usize = 64;

/// An encoder holding at most this many bytes is "small": kept without counting against the
/// big spares' budget, and without expiring.
pub const SMALL_BYTES: usize = 4 << 20;

/// A big spare not taken within this long is dropped (its memory returned).
pub const MAX_IDLE: Duration = Duration::from_secs(2);

/// One kept encoder.
struct Spare {
    doc: ArrayEncoder,
    /// Its `memory_bytes()` when kept.
    bytes: usize,
    kept_at: Instant,
}

/// The kept encoders of an aggregator (see the [module docs](self)).
pub(crate) struct Spares {
    kept: Vec<Spare>,
    /// Sum of the big spares' bytes.
    big_bytes: u64,
    /// Budget of the big spares.
    max_big_bytes: u64,
}

impl Spares {
    /// Keeps big spares up to `max_big_bytes` in all.
    pub fn new(max_big_bytes: u64) -> Spares {
        Spares {
            kept: Vec::new(),
            big_bytes: 0,
            max_big_bytes,
        }
    }

    /// A spare for a group whose stream held `want` bytes last second (`None`: unknown).
    pub fn take(&mut self, want: Option<usize>) -> Option<ArrayEncoder> {
        // An unknown stream wants nothing: the smallest spare holds as much.
        let want = want.unwrap_or(0);
        let spares = || self.kept.iter().enumerate();
        let (at, _) = spares()
            .filter(|(_, s)| s.bytes >= want)
            .min_by_key(|(_, s)| s.bytes)
            .or_else(|| spares().max_by_key(|(_, s)| s.bytes))?;
        let spare = self.kept.swap_remove(at);
        if spare.bytes > SMALL_BYTES {
            self.big_bytes -= spare.bytes as u64;
        }
        Some(spare.doc)
    }

    /// Keeps `doc` (cleared) if the rules allow; otherwise it is dropped.
    pub fn keep(&mut self, doc: ArrayEncoder) {
        if self.kept.len() >= MAX_SPARES {
            return;
        }
        let bytes = doc.memory_bytes();
        if bytes > SMALL_BYTES {
            if self.big_bytes + bytes as u64 > self.max_big_bytes {
                return;
            }
            self.big_bytes += bytes as u64;
        }
        self.kept.push(Spare {
            doc,
            bytes,
            kept_at: Instant::now(),
        });
    }

    /// Drops the big spares unused for [`MAX_IDLE`].
    pub fn expire(&mut self) {
        self.expire_at(Instant::now());
    }

    /// [`expire`](Self::expire) as of `now`.
    fn expire_at(&mut self, now: Instant) {
        if self.big_bytes == 0 {
            return;
        }
        let big_bytes = &mut self.big_bytes;
        self.kept.retain(|s| {
            let stale =
                s.bytes > SMALL_BYTES && now.saturating_duration_since(s.kept_at) > MAX_IDLE;
            if stale {
                *big_bytes -= s.bytes as u64;
            }
            !stale
        });
    }

    /// Bytes held by the big spares.
    pub fn big_bytes(&self) -> u64 {
        self.big_bytes
    }

    /// How many encoders are kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sereal::{EncoderOptions, Value};

    /// A cleared encoder that held `events` elements of ~200 bytes.
    fn used(events: usize) -> ArrayEncoder {
        let mut doc = ArrayEncoder::new(EncoderOptions::default()).unwrap();
        for i in 0..events {
            // Unique strings: de-duplication would keep the body small.
            let text = Value::String(format!("{i:0200}"));
            doc.push(&Value::Array(vec![Value::Int(i as i64), text]))
                .unwrap();
        }
        doc.clear();
        doc
    }

    #[test]
    fn a_stream_gets_the_spare_that_holds_its_last_second() {
        let mut spares = Spares::new(1 << 30);
        let (small, big) = (used(10), used(40_000));
        let (small_bytes, big_bytes) = (small.memory_bytes(), big.memory_bytes());
        assert!(small_bytes <= SMALL_BYTES && big_bytes > SMALL_BYTES);
        spares.keep(big);
        spares.keep(small);
        assert_eq!(spares.big_bytes(), big_bytes as u64);
        // Unknown stream: the smallest; a big stream: the one that holds as much.
        assert_eq!(spares.take(None).unwrap().memory_bytes(), small_bytes);
        spares.keep(used(10));
        assert_eq!(
            spares.take(Some(big_bytes)).unwrap().memory_bytes(),
            big_bytes
        );
        assert_eq!(spares.big_bytes(), 0);
        // None holds as much: the largest there is.
        spares.keep(used(1000));
        assert!(spares.take(Some(big_bytes)).unwrap().memory_bytes() > small_bytes);
        assert_eq!(spares.take(Some(1)).unwrap().memory_bytes(), small_bytes);
        assert!(spares.take(None).is_none());
    }

    #[test]
    fn big_spares_stay_within_their_budget_and_expire_unused() {
        let big = used(40_000);
        let bytes = big.memory_bytes() as u64;
        let mut spares = Spares::new(bytes + bytes / 2);
        spares.keep(big);
        spares.keep(used(40_000));
        assert_eq!(
            (spares.len(), spares.big_bytes()),
            (1, bytes),
            "over the budget: dropped"
        );
        for _ in 0..MAX_SPARES + 5 {
            spares.keep(used(1));
        }
        assert_eq!(spares.len(), MAX_SPARES);
        // Small spares wait for as long as it takes; big ones for MAX_IDLE.
        spares.expire_at(Instant::now());
        assert_eq!(spares.big_bytes(), bytes);
        spares.expire_at(Instant::now() + MAX_IDLE + Duration::from_millis(1));
        assert_eq!((spares.len(), spares.big_bytes()), (MAX_SPARES - 1, 0));
    }
}
