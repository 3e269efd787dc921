//! The error bounds of issue 25, measured: p50/p95/p99 within 1 % relative of the exact values
//! on 1 M generated long-tailed latencies; distinct counts within 3 × 1.04/√m on 1 M ids; merges
//! equal one sketch over both inputs; byte forms read back as the same state.

use sluice_sketches::{Distinct, Quantiles, LOG2M};

/// SplitMix64: a fixed-seed generator (the same numbers on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// Latencies in ms: a log-normal body (median ~12 ms) with a Pareto tail (5 % of requests,
/// α = 1.2, from 200 ms), so p99 is far from p50.
fn latencies(seed: u64, n: usize) -> Vec<f64> {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| {
            if r.unit() < 0.05 {
                200.0 / r.unit().powf(1.0 / 1.2)
            } else {
                // Box-Muller.
                let z = (-2.0 * r.unit().ln()).sqrt() * (std::f64::consts::TAU * r.unit()).cos();
                (2.5 + 0.9 * z).exp()
            }
        })
        .collect()
}

/// The exact value of quantile `q` by the sketch's rank rule: rank ⌊q·(n−1)⌋ of the sorted values.
fn exact(sorted: &[f64], q: f64) -> f64 {
    sorted[(q * (sorted.len() as f64 - 1.0)) as usize]
}

#[test]
fn quantiles_within_one_percent_on_a_million_latencies() {
    let values = latencies(25, 1_000_000);
    let mut q = Quantiles::new();
    for &v in &values {
        q.add(v);
    }
    let mut sorted = values.clone();
    sorted.sort_by(f64::total_cmp);
    assert!(
        exact(&sorted, 0.99) > 20.0 * exact(&sorted, 0.5),
        "long-tailed"
    );
    for p in [0.5, 0.95, 0.99, 0.999] {
        let want = exact(&sorted, p);
        let got = q.quantile(p).expect("not empty");
        let err = (got - want).abs() / want;
        eprintln!(
            "p{}: exact {want:.4} sketch {got:.4} relative error {:.3} %",
            p * 100.0,
            err * 100.0
        );
        assert!(err <= 0.01, "p{p}: {got} vs {want} ({err})");
    }
    assert_eq!(q.count(), 1_000_000);
    assert_eq!(q.quantile(0.0), Some(sorted[0]));
    assert_eq!(q.quantile(1.0), Some(sorted[sorted.len() - 1]));
    assert_eq!(Quantiles::new().quantile(0.5), None);
    assert_eq!(q.quantile(1.5), None);

    // Negative values and zero keep the bound too.
    let mut mixed = Quantiles::new();
    let vals: Vec<f64> = (-500..=500).map(|i| f64::from(i) * 1.5).collect();
    for &v in &vals {
        mixed.add(v);
    }
    for p in [0.1, 0.5, 0.9] {
        let want = exact(&vals, p);
        let got = mixed.quantile(p).expect("value");
        assert!(
            (got - want).abs() <= 0.01 * want.abs() + 1e-12,
            "{p}: {got} vs {want}"
        );
    }
}

#[test]
fn distinct_within_three_standard_errors_on_a_million_ids() {
    let bound = 3.0 * 1.04 / ((1u64 << LOG2M) as f64).sqrt();
    let mut d = Distinct::new();
    let mut d_text = Distinct::new();
    for id in 0..1_000_000i64 {
        // Every id twice: duplicates do not count.
        d.add_i64(id);
        d.add_i64(id);
        d_text.add_bytes(format!("user-{id}").as_bytes());
    }
    for (what, sketch) in [("integers", &d), ("strings", &d_text)] {
        let got = sketch.cardinality() as f64;
        let err = (got - 1e6).abs() / 1e6;
        eprintln!(
            "distinct {what}: 1000000 ids, estimate {got}, relative error {:.3} % (bound {:.2} %)",
            err * 100.0,
            bound * 100.0
        );
        assert!(err <= bound, "{what}: {got}");
        assert!(!sketch.is_exact());
    }
    // Small sets are exact (the explicit form).
    let mut small = Distinct::new();
    for id in 0..150 {
        small.add_i64(id % 100);
    }
    assert!(small.is_exact());
    assert_eq!(small.cardinality(), 100);
    assert_eq!(Distinct::new().cardinality(), 0);
}

#[test]
fn merged_sketches_equal_one_sketch_over_both_inputs() {
    let values = latencies(7, 200_000);
    let (a_vals, b_vals) = values.split_at(77_777);
    let (mut a, mut b, mut all) = (Quantiles::new(), Quantiles::new(), Quantiles::new());
    a_vals.iter().for_each(|&v| a.add(v));
    b_vals.iter().for_each(|&v| b.add(v));
    values.iter().for_each(|&v| all.add(v));
    a.merge(&b).expect("merge");
    assert_eq!(a.count(), all.count());
    for i in 0..=1000 {
        let p = f64::from(i) / 1000.0;
        assert_eq!(a.quantile(p), all.quantile(p), "q {p}");
    }

    // Distinct: every pair of forms (empty, explicit, sparse, full), overlapping inputs.
    let sizes = [0i64, 50, 400, 5_000, 60_000];
    for &na in &sizes {
        for &nb in &sizes {
            let (mut x, mut y, mut both) = (Distinct::new(), Distinct::new(), Distinct::new());
            for id in 0..na {
                x.add_i64(id);
                both.add_i64(id);
            }
            for id in na / 2..na / 2 + nb {
                y.add_i64(id);
                both.add_i64(id);
            }
            x.merge(&y).expect("merge");
            assert_eq!(x.cardinality(), both.cardinality(), "{na} ∪ {nb}");
            assert_eq!(x.to_bytes(), both.to_bytes(), "{na} ∪ {nb}: bytes");
        }
    }
}

#[test]
fn byte_forms_round_trip() {
    let mut q = Quantiles::new();
    for v in latencies(3, 50_000) {
        q.add(v);
    }
    q.add(0.0);
    q.add(-3.5);
    let bytes = q.to_bytes();
    let back = Quantiles::from_bytes(&bytes).expect("read back");
    assert_eq!(back.to_bytes(), bytes);
    for i in 0..=100 {
        let p = f64::from(i) / 100.0;
        assert_eq!(back.quantile(p), q.quantile(p));
    }
    assert_eq!(
        Quantiles::from_bytes(&Quantiles::new().to_bytes())
            .expect("empty")
            .count(),
        0
    );
    for bad in [&b""[..], b"\x02{}", b"\x01{", b"\x01{}"] {
        assert!(Quantiles::from_bytes(bad).is_err(), "{bad:?}");
    }
    // A store whose keys lie outside its bins would make a merge index out of range.
    let text = String::from_utf8(bytes[1..].to_vec()).expect("json");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["store"]["max_key"] = serde_json::json!(1_000_000);
    let mut tampered = vec![1u8];
    tampered.extend(serde_json::to_vec(&v).expect("json"));
    assert!(Quantiles::from_bytes(&tampered).is_err());

    for n in [0i64, 10, 300, 100_000] {
        let mut d = Distinct::new();
        for id in 0..n {
            d.add_i64(id * 7919);
        }
        let bytes = d.to_bytes();
        let back = Distinct::from_bytes(&bytes).expect("read back");
        assert_eq!(back.to_bytes(), bytes, "{n}");
        assert_eq!(back.cardinality(), d.cardinality(), "{n}");
        assert_eq!(back, d);
    }
}
