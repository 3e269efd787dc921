//! Fixed-bucket histograms in the Prometheus text format: [`Histogram`] and the two the server
//! keeps in its metrics ([`StoreWriteSeconds`], [`BlobBytes`], observed by
//! `timing::TimedStore`).
//!
//! Contracts: the bounds are fixed at construction (ascending, `+Inf` implied); an observation
//! costs a scan of the bounds and never allocates; rendering gives cumulative `_bucket{le}`
//! series ending at `+Inf` equal to `_count`.

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
