//! The `process_*` metrics every Prometheus exporter has (CPU seconds, resident and virtual
//! memory, open and maximum descriptors, threads, start time): the `prometheus` crate's own
//! collector (its `process` feature), which reads `/proc/self` at each scrape. Its names are
//! the standard ones that the server's hand-written gauges had, and `process_max_fds` is the
//! soft `RLIMIT_NOFILE` as before. Linux only, as `/proc` is.

use prometheus::Registry;

/// Registers the process collector in `r` (nothing off Linux).
pub(super) fn register(r: &Registry) {
    #[cfg(target_os = "linux")]
    if let Err(e) = r.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    )) {
        // Only a second registration could fail; `/metrics` then lacks the process figures.
        eprintln!("sluice-server: the process metrics: {e}");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = r;
}
