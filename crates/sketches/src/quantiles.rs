//! Quantiles: a DDSketch with 1 % relative error (`sketches-ddsketch`).

use sketches_ddsketch::{Config, DDSketch};

use crate::SketchError;

/// The relative error of [`Quantiles::quantile`]: the answer `x` for a true value `v` has
/// `|x − v| ≤ 0.01·|v|`.
pub const RELATIVE_ACCURACY: f64 = 0.01;
/// Most bins per sign; past it the lowest bins merge (their quantiles lose the bound, the high
/// ones keep it). 2048 bins at 1 % span a ratio of 1.02^2048 ≈ 10^17 between the smallest and
/// the largest value kept exactly.
const MAX_BINS: u32 = 2048;
/// Values closer to 0 than this count as 0.
const MIN_VALUE: f64 = 1e-9;
/// The first byte of [`Quantiles::to_bytes`].
const FORMAT_VERSION: u8 = 1;

/// A mergeable quantile sketch (see the crate docs).
#[derive(Clone)]
pub struct Quantiles {
    sketch: DDSketch,
}

impl std::fmt::Debug for Quantiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quantiles")
            .field("count", &self.count())
            .finish()
    }
}

impl Default for Quantiles {
    fn default() -> Self {
        Quantiles::new()
    }
}

fn config() -> Config {
    Config::new(RELATIVE_ACCURACY, MAX_BINS, MIN_VALUE)
}

impl Quantiles {
    /// An empty sketch.
    pub fn new() -> Quantiles {
        Quantiles {
            sketch: DDSketch::new(config()),
        }
    }

    /// Adds one value (a NaN or an infinity is ignored: it has no place on the scale).
    pub fn add(&mut self, v: f64) {
        if v.is_finite() {
            self.sketch.add(v);
        }
    }

    /// Values added (merges included).
    pub fn count(&self) -> u64 {
        self.sketch.count() as u64
    }

    /// The value at quantile `q` (0 ≤ q ≤ 1) of the values added: within 1 % of the exact value
    /// of rank `⌊q·(n−1)⌋` (0-based, values sorted); `q` 0 and 1 give the exact min and max.
    /// `None` when empty or `q` is outside 0..=1.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.sketch.quantile(q).ok().flatten()
    }

    /// Adds the values of `other` (as if they had been added here).
    pub fn merge(&mut self, other: &Quantiles) -> Result<(), SketchError> {
        self.sketch
            .merge(&other.sketch)
            .map_err(|e| SketchError(format!("quantile sketches: {e}")))
    }

    /// The byte form: a version byte (1), then the sketch's serde form as JSON (bins as
    /// counts from an offset; ~3 bytes a bin); nothing more for an empty sketch (its min and max
    /// are infinities, which JSON has not). A sum past ±1.8e308 would be written as `null`
    /// and not read back.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![FORMAT_VERSION];
        if self.count() == 0 {
            return out;
        }
        // Serialising plain numbers and vectors into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, &self.sketch);
        out
    }

    /// Reads [`Quantiles::to_bytes`]; refuses another version, bad JSON and a sketch made with
    /// other parameters (it would not merge).
    pub fn from_bytes(bytes: &[u8]) -> Result<Quantiles, SketchError> {
        match bytes.split_first() {
            Some((&FORMAT_VERSION, [])) => Ok(Quantiles::new()),
            Some((&FORMAT_VERSION, body)) => {
                let bad = |m: &str| SketchError(format!("quantile sketch bytes: {m}"));
                // Typed reads (a rollup query parses one state per stored blob: a JSON value
                // tree per state was most of its CPU). The stores' fields first, checked —
                // the crate trusts them (a merge indexes bins by them) — then the sketch.
                let fields: StoreFields =
                    serde_json::from_slice(body).map_err(|e| bad(&e.to_string()))?;
                for (name, store) in [
                    ("store", &fields.store),
                    ("negative_store", &fields.negative_store),
                ] {
                    if !store.is_sound() {
                        return Err(bad(&format!("{name} is inconsistent")));
                    }
                }
                let sketch: DDSketch =
                    serde_json::from_slice(body).map_err(|e| bad(&e.to_string()))?;
                // A sketch with other parameters refuses to merge: check by merging it into an
                // empty one of ours (which also gives back our own configuration).
                let mut ours = Quantiles::new();
                ours.sketch
                    .merge(&sketch)
                    .map_err(|_| SketchError("quantile sketch bytes: other parameters".into()))?;
                Ok(ours)
            }
            Some((v, _)) => Err(SketchError(format!(
                "quantile sketch bytes: unknown version {v}"
            ))),
            None => Err(SketchError("quantile sketch bytes: empty".into())),
        }
    }
}

/// The two stores of a serialised sketch (the other fields are read with the sketch).
#[derive(serde::Deserialize)]
struct StoreFields {
    store: Store,
    negative_store: Store,
}

/// A serialised store's fields that must agree.
#[derive(serde::Deserialize)]
struct Store {
    bins: Vec<u64>,
    count: u64,
    bin_limit: u64,
    offset: i64,
    min_key: i64,
    max_key: i64,
}

impl Store {
    /// At most [`MAX_BINS`] bins whose sum is `count`, and (when not empty)
    /// `offset ≤ min_key ≤ max_key < offset + bins`.
    fn is_sound(&self) -> bool {
        let sum = self.bins.iter().fold(0u64, |a, b| a.saturating_add(*b));
        if self.count != sum
            || self.bin_limit != u64::from(MAX_BINS)
            || self.bins.len() > MAX_BINS as usize
        {
            return false;
        }
        sum == 0
            || (self.offset <= self.min_key
                && self.min_key <= self.max_key
                && self.max_key < self.offset + self.bins.len() as i64)
    }
}
