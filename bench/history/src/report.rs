//! The table: one row per piece of work, VictoriaLogs (the anchor) beside Sluice read through
//! its blobs and through its columns, the ratio of the columns to VictoriaLogs and the target.
//! Values are formatted here so that a value below the measurement's resolution (one clock tick
//! of CPU) is shown as a bound, never as a made-up number, and a missing one as `n/a` with why.

use std::fmt::Write as _;

/// One table row, formatted.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// What was measured.
    pub work: String,
    /// VictoriaLogs.
    pub vl: String,
    /// Sluice through its blobs.
    pub blobs: String,
    /// Sluice through its columns.
    pub columns: String,
    /// Sluice columns ÷ VictoriaLogs (or what the row compares, said in the cell).
    pub ratio: String,
    /// The target.
    pub target: String,
    /// Row counts, checks (MISMATCH), what is excluded.
    pub notes: String,
}

/// Events per second, `113 k` from 10 000 on.
pub fn rate(per_sec: f64) -> String {
    if per_sec >= 10_000.0 {
        format!("{} k", group((per_sec / 1000.0).round() as u64))
    } else {
        format!("{per_sec:.0}")
    }
}

/// Digits grouped by thousands: `1,460`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// CPU milliseconds; below one tick, `≤ tick` (the measurement cannot see less).
pub fn cpu_ms(ms: f64, tick_ms: f64) -> String {
    if ms < tick_ms / 2.0 {
        format!("≤ {}", group(tick_ms.round() as u64))
    } else {
        group(ms.round() as u64)
    }
}

/// `a ÷ b` of two CPU times, honest about ticks: when `b` is below one tick, `a ÷ tick` is a
/// lower bound (`≥ 25×`); when both are, nothing can be said.
pub fn cpu_ratio(a: f64, b: f64, tick_ms: f64) -> String {
    let a_zero = a < tick_ms / 2.0;
    let b_zero = b < tick_ms / 2.0;
    match (a_zero, b_zero) {
        (true, true) => "n/a (both ≤ 1 tick)".to_owned(),
        (false, true) => format!("≥ {}×", times(a / tick_ms)),
        (true, false) => format!("≤ {}×", times(tick_ms / b)),
        (false, false) => format!("{}×", times(a / b)),
    }
}

/// A ratio with two significant digits: `14`, `1.4`, `0.14`.
pub fn times(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Renders the rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| work | VictoriaLogs | Sluice blobs | Sluice columns | ratio columns ÷ VL | target | notes |\n\
         |---|---:|---:|---:|---:|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.work, r.vl, r.blobs, r.columns, r.ratio, r.target, r.notes
        );
    }
    out
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), or why not.
pub fn loadavg() -> String {
    match std::fs::read_to_string("/proc/loadavg") {
        Ok(text) => text
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!("unknown ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_the_issue_table() {
        assert_eq!(rate(113_456.0), "113 k");
        assert_eq!(rate(1_234_567.0), "1,235 k");
        assert_eq!(rate(9_000.0), "9000");
        assert_eq!(group(1460), "1,460");
        assert_eq!(group(100), "100");
        assert_eq!(group(1_000_000), "1,000,000");
        assert_eq!(cpu_ms(280.0, 10.0), "280");
        assert_eq!(cpu_ms(0.0, 10.0), "≤ 10");
    }

    #[test]
    fn cpu_ratios_are_bounds_below_one_tick() {
        assert_eq!(cpu_ratio(280.0, 20.0, 10.0), "14×");
        assert_eq!(cpu_ratio(290.0, 250.0, 10.0), "1.2×");
        assert_eq!(cpu_ratio(250.0, 0.0, 10.0), "≥ 25×");
        assert_eq!(cpu_ratio(0.0, 40.0, 10.0), "≤ 0.25×");
        assert_eq!(cpu_ratio(0.0, 0.0, 10.0), "n/a (both ≤ 1 tick)");
    }

    #[test]
    fn the_table_has_a_header_and_a_line_per_row() {
        let rows = vec![Row {
            work: "w".into(),
            vl: "1".into(),
            blobs: "2".into(),
            columns: "3".into(),
            ratio: "3×".into(),
            target: "≤ 1×".into(),
            notes: "n".into(),
        }];
        let t = table(&rows);
        assert_eq!(t.lines().count(), 3);
        assert!(t.ends_with("| w | 1 | 2 | 3 | 3× | ≤ 1× | n |\n"), "{t}");
    }
}
