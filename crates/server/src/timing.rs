//! Fixed-bucket histograms for `/metrics` and [`TimedStore`], a [`Store`] wrapper that records
//! how long every store *write* takes (`put_blob`, `put_blobs` (one observation per call),
//! `add_to_epoch_index`, `add_counts`, `add_counts_once`, `flush`: `sluice_store_write_seconds`)
//! and the size of every blob written (`sluice_blob_bytes`).
//! Reads pass through untimed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sluice_store::{
    BlobKey, Counts, CountsWrite, Damage, DamageStats, ExpireReport, Namespace, PutOutcome, Result,
    Retention, Store, TypeSubtype,
};

use crate::metrics::{LockMetrics, SharedMetrics};

/// Upper bounds (seconds) of the `sluice_store_write_seconds` buckets (`+Inf` is implied).
pub const STORE_WRITE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Upper bounds (bytes) of the `sluice_blob_bytes` buckets (`+Inf` is implied).
pub const BLOB_BYTES_BUCKETS: &[f64] = &[
    1024.0, 4096.0, 16384.0, 65536.0, 131072.0, 262144.0, 524288.0, 1048576.0, 4194304.0,
];

/// A Prometheus-style histogram with fixed bucket bounds.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Non-cumulative counts, one per bound plus one for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// `(upper bound, cumulative count)`, the last one `+Inf` (equal to [`count`](Self::count)).
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.counts
            .iter()
            .enumerate()
            .map(|(i, n)| {
                acc += n;
                (self.bounds.get(i).copied().unwrap_or(f64::INFINITY), acc)
            })
            .collect()
    }

    /// Appends the `_bucket`, `_sum` and `_count` series (with HELP / TYPE lines).
    pub fn render(&self, o: &mut String, name: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (le, n) in self.cumulative() {
            if le.is_infinite() {
                let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {n}");
            } else {
                let _ = writeln!(o, "{name}_bucket{{le=\"{le}\"}} {n}");
            }
        }
        let _ = writeln!(o, "{name}_sum {}", self.sum);
        let _ = writeln!(o, "{name}_count {}", self.count);
    }
}

macro_rules! fixed_histogram {
    ($(#[$doc:meta])* $name:ident, $bounds:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub Histogram);
        impl Default for $name {
            fn default() -> Self {
                $name(Histogram::new($bounds))
            }
        }
        impl std::ops::Deref for $name {
            type Target = Histogram;
            fn deref(&self) -> &Histogram {
                &self.0
            }
        }
        impl std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut Histogram {
                &mut self.0
            }
        }
    };
}

fixed_histogram!(
    /// Durations of store writes, seconds ([`STORE_WRITE_BUCKETS`]).
    StoreWriteSeconds,
    STORE_WRITE_BUCKETS
);
fixed_histogram!(
    /// Sizes of blobs written, bytes ([`BLOB_BYTES_BUCKETS`]).
    BlobBytes,
    BLOB_BYTES_BUCKETS
);

/// Times the writes of the store it wraps into the shared metrics.
pub(crate) struct TimedStore {
    pub inner: std::sync::Arc<dyn Store>,
    pub metrics: SharedMetrics,
}

impl TimedStore {
    fn timed<T>(&self, blob_len: Option<usize>, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        let secs = start.elapsed().as_secs_f64();
        let mut m = self.metrics.locked();
        m.store_write_seconds.observe(secs);
        if let Some(n) = blob_len {
            m.blob_bytes.observe(n as f64);
        }
        out
    }
}

impl Store for TimedStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        let start = Instant::now();
        let out = self.inner.put_blob(ns, key, bytes);
        let secs = start.elapsed().as_secs_f64();
        let mut m = self.metrics.locked();
        m.store_write_seconds.observe(secs);
        if matches!(out, Ok(PutOutcome::Written)) {
            m.blob_bytes.observe(bytes.len() as f64);
        }
        out
    }
    fn put_blobs(&self, ns: &Namespace, items: &[(BlobKey<'_>, &[u8])]) -> Vec<Result<PutOutcome>> {
        let start = Instant::now();
        let out = self.inner.put_blobs(ns, items);
        let secs = start.elapsed().as_secs_f64();
        let mut m = self.metrics.lock().unwrap();
        m.store_write_seconds.observe(secs);
        for ((_, bytes), r) in items.iter().zip(&out) {
            if matches!(r, Ok(PutOutcome::Written)) {
                m.blob_bytes.observe(bytes.len() as f64);
            }
        }
        out
    }
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        self.inner.get_blob(ns, key)
    }
    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        self.inner.get_blobs(ns, keys)
    }
    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        self.timed(None, || self.inner.add_to_epoch_index(epoch, dc, entries))
    }
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        self.inner.get_epoch_index(epoch, dc)
    }
    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        self.timed(None, || {
            self.inner
                .add_counts(epoch, dc, event_type, subtype, counts)
        })
    }
    fn add_counts_once(
        &self,
        write: CountsWrite<'_>,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        self.timed(None, || {
            self.inner
                .add_counts_once(write, epoch, dc, event_type, subtype, counts)
        })
    }
    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        self.inner.get_counts(epoch, dc)
    }
    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        self.inner.list_epochs(dc, from, to)
    }
    fn expire(&self, now: i64) -> Result<ExpireReport> {
        self.inner.expire(now)
    }
    fn flush(&self) -> Result<()> {
        self.timed(None, || self.inner.flush())
    }
    fn retention(&self) -> Retention {
        self.inner.retention()
    }
    fn damage(&self, from: i64, to: i64) -> Result<Vec<Damage>> {
        self.inner.damage(from, to)
    }
    fn damage_stats(&self) -> DamageStats {
        self.inner.damage_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_buckets_end_at_count() {
        let mut h = Histogram::new(&[1.0, 10.0]);
        for v in [0.5, 1.0, 5.0, 50.0] {
            h.observe(v);
        }
        assert_eq!(
            h.cumulative(),
            vec![(1.0, 2), (10.0, 3), (f64::INFINITY, 4)]
        );
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum(), 56.5);
        let mut o = String::new();
        h.render(&mut o, "x", "help");
        assert!(o.contains("x_bucket{le=\"+Inf\"} 4\nx_sum 56.5\nx_count 4\n"));
    }
}
