//! Mergeable aggregate states: the quantile sketch and the distinct-count sketch that the
//! query-time reduce (`sluice cat --agg p95:ms,distinct:user`) uses today and the write-time
//! rollups will store, so that a rollup and a query over the same events agree.
//!
//! A state is **mergeable**: two states over two sets of events merge into the state of their
//! union (a minute from its seconds, a day from its minutes), and it has a byte form that reads
//! back as the same state. Exact count, sum, min and max need no sketch (the reducer keeps them).
//!
//! | state | answers | error (tested) | size | byte form |
//! |---|---|---|---|---|
//! | [`Quantiles`] (DDSketch, `sketches-ddsketch`) | any quantile `q` | ≤ 1 % relative to the exact value of rank `⌊q·(n−1)⌋` (measured on 1 M long-tailed latencies: p50 0.96 %, p95 0.62 %, p99 0.97 %, p99.9 0.16 %) | a bin per 2 % of range: 0.1 ms–10 s is ~580 bins (at most 2048, then the lowest collapse); ~3 bytes a bin in the byte form | [`Quantiles::to_bytes`]: version byte + the crate's serde form as JSON |
//! | [`Distinct`] (HyperLogLog, `rust-hll`, AK storage format) | distinct values | exact up to 160 values (explicit); then ±1.04/√2048 = 2.3 % standard error (measured on 1 M ids: 0.47 % integers, 0.74 % strings) | ≤ 1283 bytes | the [AK HLL storage spec](https://github.com/aggregateknowledge/hll-storage-spec), byte for byte what postgresql-hll / java-hll / python-hll write |
//!
//! Why these two:
//! - **DDSketch** gives a *relative* error bound on the value (what a latency percentile needs:
//!   p99 = 1.2 s ± 12 ms, p50 = 8 ms ± 0.08 ms), merges exactly (bins add), and handles
//!   negative values and zero. A t-digest bounds the *rank* error instead and its merges depend
//!   on order.
//! - **HyperLogLog in the AK format** is the one distinct-count state other tools read:
//!   `hll_cardinality(decode(..., 'hex')::hll)` in PostgreSQL, java-hll, js-hll, python-hll.
//!   The parameters are postgresql-hll's defaults (`log2m` 11, `regwidth` 5, explicit cutoff
//!   auto, sparse on), so a state unions with one made there with default settings; values are
//!   hashed as postgresql-hll's `hll_hash_bigint` / `hll_hash_text` / `hll_hash_bytea` hash them
//!   (MurmurHash3 x64 128, seed 0, the first 64 bits; [`murmur3_x64_128`]).
//!
//! The oracle test (`tests/python_hll.rs`) checks the HLL against the real `python-hll` both
//! ways; `docs/decisions.md` ("Sketches") says what was checked in the crates.

#![forbid(unsafe_code)]

mod distinct;
mod quantiles;

pub use distinct::{hash_bytes, hash_i64, murmur3_x64_128, Distinct, LOG2M, REGWIDTH};
pub use quantiles::{Quantiles, RELATIVE_ACCURACY};

/// A state that cannot be read from bytes or merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SketchError(pub String);

impl std::fmt::Display for SketchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SketchError {}
