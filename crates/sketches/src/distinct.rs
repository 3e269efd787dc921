//! Distinct counts: HyperLogLog in the Aggregate Knowledge storage format (`rust-hll`), and the
//! hash postgresql-hll users feed it.

use rust_hll::{Hll, Settings};

use crate::SketchError;

/// log2 of the number of registers (postgresql-hll's default): m = 2048, standard error
/// 1.04/√m = 2.3 %.
pub const LOG2M: u32 = 11;
/// Bits a register (postgresql-hll's default): counts up to ~10^18 distinct values.
pub const REGWIDTH: u32 = 5;
/// The explicit cutoff "auto" (postgresql-hll's default `expthresh` -1: exact up to as many
/// values as fit in the dense form's bytes, 160 here).
const EXPTHRESH_AUTO: i32 = -1;
/// Register counts accepted from bytes: `rust-hll` masks sparse register values with the index
/// mask, wrong below 2^8 registers; above 2^16 a state is 40+ KB.
const LOG2M_READ: std::ops::RangeInclusive<u32> = 8..=16;

/// A mergeable distinct-count sketch (see the crate docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Distinct {
    hll: Hll,
}

impl Default for Distinct {
    fn default() -> Self {
        Distinct::new()
    }
}

fn settings() -> Settings {
    // Constant parameters within the crate's bounds.
    Settings::new(LOG2M, REGWIDTH, EXPTHRESH_AUTO, true).expect("valid HLL parameters")
}

impl Distinct {
    /// An empty sketch with postgresql-hll's default parameters.
    pub fn new() -> Distinct {
        Distinct {
            hll: Hll::new(settings()),
        }
    }

    /// Adds a value already hashed (64 well-mixed bits; see [`hash_bytes`]). As in java-hll's
    /// probabilistic modes, the hash 0 is not counted.
    pub fn add_hash(&mut self, hash: u64) {
        self.hll.add_raw(hash);
    }

    /// Adds a byte string (postgresql-hll: `hll_hash_text` / `hll_hash_bytea`).
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        self.add_hash(hash_bytes(bytes));
    }

    /// Adds an integer (postgresql-hll: `hll_hash_bigint`).
    pub fn add_i64(&mut self, v: i64) {
        self.add_hash(hash_i64(v));
    }

    /// The estimated number of distinct values: exact while the sketch is explicit (up to 160
    /// values), then the HLL estimate with java-hll's small- and large-range corrections,
    /// rounded up (what `hll_cardinality` and python-hll's `cardinality()` give).
    pub fn cardinality(&self) -> u64 {
        self.hll.cardinality()
    }

    /// Whether [`Distinct::cardinality`] is exact (the explicit form: a list of the hashes).
    pub fn is_exact(&self) -> bool {
        matches!(self.hll, Hll::Empty(_) | Hll::Explicit(_))
    }

    /// Adds the values of `other` (the union); both must have the same `log2m` and `regwidth`.
    pub fn merge(&mut self, other: &Distinct) -> Result<(), SketchError> {
        self.hll
            .union(true, &other.hll)
            .map_err(|e| SketchError(format!("distinct sketches: {e}")))
    }

    /// The byte form of the AK storage spec (version 1): empty, explicit, sparse or full.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.hll.to_bytes()
    }

    /// Reads the AK storage format (ours, or what postgresql-hll, java-hll, js-hll or python-hll
    /// wrote). The bytes are checked first (the crate indexes by them): `log2m` 8–16, a known
    /// type, lengths that match it, sparse registers in range.
    pub fn from_bytes(bytes: &[u8]) -> Result<Distinct, SketchError> {
        check_storage(bytes).map_err(|m| SketchError(format!("HLL bytes: {m}")))?;
        let hll = Hll::from_bytes(bytes).map_err(|e| SketchError(format!("HLL bytes: {e}")))?;
        Ok(Distinct { hll })
    }
}

/// The checks of [`Distinct::from_bytes`].
fn check_storage(bytes: &[u8]) -> Result<(), String> {
    let [head, params, cutoff, payload @ ..] = bytes else {
        return Err(format!("{} bytes, shorter than the header", bytes.len()));
    };
    if head >> 4 != 1 {
        return Err(format!("schema version {} (only 1 is defined)", head >> 4));
    }
    let regwidth = u32::from(params >> 5) + 1;
    let log2m = u32::from(params & 0x1f);
    if !LOG2M_READ.contains(&log2m) {
        return Err(format!("log2m {log2m} (read: {LOG2M_READ:?})"));
    }
    // Bit 7 is unused; an explicit cutoff is 2^(c-1) for c ≤ 18 (the spec's largest), 63 = auto.
    let c = cutoff & 0x3f;
    if cutoff & 0x80 != 0 || (19..63).contains(&c) {
        return Err(format!("cutoff byte {cutoff:#04x}"));
    }
    let m = 1u64 << log2m;
    match head & 0x0f {
        1 if payload.is_empty() => Ok(()),
        2 if payload.len() % 8 == 0 => Ok(()),
        3 => {
            let word = log2m + regwidth;
            let words = payload.len() as u64 * 8 / u64::from(word);
            for i in 0..words {
                let w = read_bits(payload, i * u64::from(word), word);
                let (index, value) = (w >> regwidth, w & ((1 << regwidth) - 1));
                if index >= m || value == 0 {
                    return Err(format!("sparse register {index} = {value}"));
                }
            }
            Ok(())
        }
        4 if payload.len() as u64 == (m * u64::from(regwidth)).div_ceil(8) => Ok(()),
        t @ 1..=4 => Err(format!("type {t} with {} payload bytes", payload.len())),
        t => Err(format!("unknown type {t}")),
    }
}

/// `n` (≤ 32) bits from bit `at` of `buf`, most significant first (the spec's bit packing).
fn read_bits(buf: &[u8], at: u64, n: u32) -> u64 {
    let mut v = 0u64;
    for bit in at..at + u64::from(n) {
        let byte = buf.get((bit / 8) as usize).copied().unwrap_or(0);
        v = (v << 1) | u64::from((byte >> (7 - bit % 8)) & 1);
    }
    v
}

/// The 64-bit hash postgresql-hll's `hll_hash_*` functions give (seed 0): the first half of
/// MurmurHash3 x64 128.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    murmur3_x64_128(bytes, 0).0
}

/// `hll_hash_bigint`: the hash of the integer's 8 little-endian bytes.
pub fn hash_i64(v: i64) -> u64 {
    hash_bytes(&v.to_le_bytes())
}

/// MurmurHash3 x64 128 (Austin Appleby's `MurmurHash3_x64_128`): the two 64-bit halves
/// `(h1, h2)` (the C function writes h1 first).
pub fn murmur3_x64_128(data: &[u8], seed: u32) -> (u64, u64) {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let fmix = |mut k: u64| {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    };
    let mix_k1 = |k1: u64| k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    let mix_k2 = |k2: u64| k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    let (mut h1, mut h2) = (u64::from(seed), u64::from(seed));
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        let k1 = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let k2 = u64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
        h1 ^= mix_k1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= mix_k2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    let (mut k1, mut k2) = (0u64, 0u64);
    for (i, &b) in tail.iter().enumerate() {
        if i < 8 {
            k1 |= u64::from(b) << (8 * i);
        } else {
            k2 |= u64::from(b) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        h2 ^= mix_k2(k2);
    }
    if !tail.is_empty() {
        h1 ^= mix_k1(k1);
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_published_values() {
        // mmh3.hash64(b"hello", seed=0, signed=True)[0] (the reference C code through mmh3).
        assert_eq!(hash_bytes(b"hello") as i64, -3_758_069_500_696_749_310);
        assert_eq!(murmur3_x64_128(b"", 0), (0, 0));
    }

    #[test]
    fn malformed_bytes_are_refused_not_panicked_on() {
        let good = {
            let mut d = Distinct::new();
            for i in 0..300 {
                d.add_i64(i);
            }
            d.to_bytes()
        };
        assert_eq!(good[0] & 0x0f, 3, "sparse");
        Distinct::from_bytes(&good).expect("ours");
        let mut cases: Vec<Vec<u8>> = vec![vec![], vec![0x11], vec![0x21, 0x8b, 0x7f]];
        for cut in 0..good.len() {
            cases.push(good[..cut].to_vec());
        }
        let mut big_cutoff = good.clone();
        big_cutoff[2] = 0x40 | 40;
        cases.push(big_cutoff);
        let mut small_m = good.clone();
        small_m[1] = (4 << 5) | 4;
        cases.push(small_m);
        let mut dense_short = vec![0x14, 0x8b, 0x7f];
        dense_short.extend([0u8; 100]);
        cases.push(dense_short);
        for c in cases {
            // Either refused or read: never a panic.
            let _ = Distinct::from_bytes(&c);
        }
        assert!(Distinct::from_bytes(&[0x14, 0x8b, 0x7f, 0]).is_err());
    }
}
