//! A metric's value from Prometheus exposition text. A metric that is not there panics with the
//! text it was looked for in: an assertion on a counter must be able to fail, and reading a
//! missing counter as 0 would let `== 0.0` pass when the metric was renamed or never exported.
//! A test that expects a series to be absent says so with [`try_metric`] `== None`.

use std::net::SocketAddr;

/// The sum of the samples of family `name` whose labels include every `(label, value)` of
/// `labels` (in any order; `&[]`: every sample of the family). Panics when no sample matches.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    try_metric(text, name, labels)
        .unwrap_or_else(|| panic!("no metric {name}{labels:?} in the metrics:\n{text}"))
}

/// [`metric`], `None` when no sample matches (for asserting that a series is absent).
pub fn try_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (family, have) = split_series(series);
        if family == name && labels.iter().all(|(k, v)| have.contains(&(*k, *v))) {
            let v: f64 = value
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{series}: bad value {value:?}: {e}"));
            sum = Some(sum.unwrap_or(0.0) + v);
        }
    }
    sum
}

/// [`metric`] of a series written as the exporter prints it, `family` or `family{k="v",…}`
/// (labels in any order).
pub fn series(text: &str, series: &str) -> f64 {
    try_series(text, series).unwrap_or_else(|| panic!("no metric {series} in the metrics:\n{text}"))
}

/// [`series`], `None` when no sample matches.
pub fn try_series(text: &str, series: &str) -> Option<f64> {
    let (family, labels) = split_series(series.trim());
    try_metric(text, family, &labels)
}

/// `family{k="v",…}` split into the family and its `(label, value)`s.
fn split_series(series: &str) -> (&str, Vec<(&str, &str)>) {
    let Some((family, rest)) = series.split_once('{') else {
        return (series, Vec::new());
    };
    let mut labels = Vec::new();
    let mut rest = rest.trim_end_matches('}');
    while let Some((key, after)) = rest.split_once("=\"") {
        // A value ends at the first `"` not escaped by a backslash.
        let bytes = after.as_bytes();
        let mut end = 0;
        while end < bytes.len() && !(bytes[end] == b'"' && (end == 0 || bytes[end - 1] != b'\\')) {
            end += 1;
        }
        labels.push((key.trim_start_matches(',').trim(), &after[..end]));
        rest = after.get(end + 1..).unwrap_or("");
    }
    (family, labels)
}

/// `GET /metrics` of the server at `addr` (bounded; panics unless it answers 200): the text.
pub fn fetch(addr: SocketAddr) -> String {
    let r = crate::http::get(addr, "/metrics");
    assert_eq!(r.status, 200, "GET /metrics on {addr}: {}", r.text());
    r.text()
}

/// [`fetch`] from a base URL `http://IP:PORT`.
pub fn fetch_url(base: &str) -> String {
    fetch(crate::http::addr_of(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x\n\
        sluice_events_total{dc=\"ams1\",type=\"WEB\"} 3\n\
        sluice_events_total{dc=\"ams1\",type=\"CRON\"} 4\n\
        sluice_events_total{dc=\"lon1\",type=\"WEB\"} 5\n\
        sluice_pending_events 0\n\
        sluice_odd{path=\"a,\\\"b\"} 1.5\n";

    #[test]
    fn sums_the_samples_that_match() {
        assert_eq!(metric(TEXT, "sluice_events_total", &[]), 12.0);
        assert_eq!(metric(TEXT, "sluice_events_total", &[("dc", "ams1")]), 7.0);
        assert_eq!(
            series(TEXT, "sluice_events_total{type=\"WEB\",dc=\"lon1\"}"),
            5.0
        );
        assert_eq!(metric(TEXT, "sluice_pending_events", &[]), 0.0);
        assert_eq!(series(TEXT, "sluice_odd{path=\"a,\\\"b\"}"), 1.5);
    }

    #[test]
    fn absent_is_none_not_zero() {
        assert_eq!(try_metric(TEXT, "sluice_missing", &[]), None);
        assert_eq!(
            try_metric(TEXT, "sluice_events_total", &[("dc", "fra1")]),
            None
        );
        assert_eq!(try_metric(TEXT, "sluice_events", &[]), None);
    }

    #[test]
    #[should_panic(expected = "no metric sluice_missing")]
    fn a_missing_metric_panics() {
        metric(TEXT, "sluice_missing", &[]);
    }
}
