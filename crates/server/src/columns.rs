//! The columnar history tier inside `sluice serve`: the writer thread and the view readers share.
//!
//! The writer ([`sluice_columns::tier::Tier`]) runs on its own thread, every few seconds, off the
//! ingest path: it reads what the store holds, so nothing the pipeline does waits for it, and a
//! failed run (store or object store down) is counted and tried again on the next one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_columns::location::{open_location, LocationError};
use sluice_columns::tier::{Tier, TierError};
use sluice_columns::view::{ColumnsView, ViewError};
use sluice_store::Store;

use crate::config::ServerConfig;
use crate::error::{Error, Result};
use crate::metrics::SharedMetrics;

/// How often the writer wakes to see whether a part is due.
const TICK: Duration = Duration::from_millis(500);
/// How often the writer tries to open a location that did not answer at start.
const OPEN_RETRY: Duration = Duration::from_secs(5);
/// How often the bytes of the location are summed for `sluice_columns_bytes`.
const SIZE_EVERY: Duration = Duration::from_secs(60);

/// The running tier: the view readers use, and the writer thread.
pub struct Columns {
    /// What readers read through.
    pub view: Arc<ColumnsView>,
    stop: Arc<AtomicBool>,
    writer: Option<JoinHandle<()>>,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Columns {
    /// Opens the configured location and starts the writer; `None` when the tier is off.
    pub fn start(
        config: &ServerConfig,
        store: Arc<dyn Store>,
        metrics: SharedMetrics,
    ) -> Result<Option<Columns>> {
        let Some(spec) = config.columns_location() else {
            return Ok(None);
        };
        let location = open_location(&spec).map_err(|e| Error::Config(format!("columns: {e}")))?;
        let view = Arc::new(ColumnsView::new(Arc::from(location)));
        // `Arc<dyn Store>` is a `Store` itself, so it reads as a `ReadStore`.
        let read_store: Arc<dyn sluice_store::ReadStore> = Arc::new(store);
        // The location as users may see it: an S3 URL's keys left out.
        let shown = view.location().describe();
        let tier_config = config.columns_tier();
        // Opening lists the location. Refused keys or a bad URL stop the start (a configuration
        // to fix); an object store that is down or slow does not: the writer opens the tier
        // when it answers, counting each failure, and ingest goes on meanwhile.
        let opened = match Tier::open(view.clone(), read_store.clone(), tier_config.clone(), now())
        {
            Ok(tier) => Some(tier),
            Err(e) if is_configuration(&e) => {
                return Err(Error::Io(format!("columns at {shown}: {e}")))
            }
            Err(e) => {
                metrics.columns_errors.inc();
                eprintln!("columns at {shown}: {e} (the writer tries again every {OPEN_RETRY:?})");
                None
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            let view = view.clone();
            std::thread::Builder::new()
                .name("columns".into())
                .spawn(move || {
                    let tier = match opened {
                        Some(t) => t,
                        None => match open_retrying(view, read_store, tier_config, &stop, &metrics)
                        {
                            Some(t) => t,
                            None => return,
                        },
                    };
                    write_loop(&tier, &stop, &metrics)
                })
                .map_err(|e| Error::Config(format!("columns: starting the writer: {e}")))?
        };
        Ok(Some(Columns {
            view,
            stop,
            writer: Some(writer),
        }))
    }

    /// Stops the writer (a run in progress finishes its file first).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Whether opening failed on the configuration (refused keys, a bad URL), not an outage.
fn is_configuration(e: &TierError) -> bool {
    let location = match e {
        TierError::Location(l) | TierError::View(ViewError::Location(l)) => l,
        _ => return false,
    };
    matches!(
        location,
        LocationError::Denied { .. } | LocationError::Url { .. }
    )
}

/// Opens the tier once the location answers (`None`: stopped first), counting each failure.
fn open_retrying(
    view: Arc<ColumnsView>,
    store: Arc<dyn sluice_store::ReadStore>,
    config: sluice_columns::tier::TierConfig,
    stop: &AtomicBool,
    metrics: &SharedMetrics,
) -> Option<Tier> {
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        if waited >= OPEN_RETRY {
            waited = Duration::ZERO;
            match Tier::open(view.clone(), store.clone(), config.clone(), now()) {
                Ok(t) => {
                    eprintln!("columns at {}: open", view.location().describe());
                    return Some(t);
                }
                Err(e) => {
                    metrics.columns_errors.inc();
                    eprintln!("columns: {e} (tried again in {OPEN_RETRY:?})");
                }
            }
        }
        std::thread::sleep(TICK);
        waited += TICK;
    }
    None
}

fn write_loop(tier: &Tier, stop: &AtomicBool, metrics: &SharedMetrics) {
    let mut sized_at: Option<std::time::Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let t = now();
        match tier.run_due(t) {
            Ok(report) => {
                metrics.columns_files_written.inc_by(report.files);
                metrics.columns_rows_written.inc_by(report.rows);
                metrics.columns_bytes_written.inc_by(report.bytes);
                for (key, why) in &report.skipped {
                    eprintln!("columns: {key} left to the blob path: {why}");
                }
            }
            Err(e) => {
                metrics.columns_errors.inc();
                eprintln!("columns: {e} (tried again in a moment)");
            }
        }
        metrics
            .columns_lag_seconds
            .set(tier.watermark().map_or(0, |w| (t - w).max(0)));
        if sized_at.is_none_or(|at| at.elapsed() >= SIZE_EVERY) {
            if let Ok(files) = tier.view().location().list("") {
                metrics
                    .columns_bytes
                    .set(files.iter().map(|f| f.size as i64).sum());
            }
            sized_at = Some(std::time::Instant::now());
        }
        std::thread::sleep(TICK);
    }
}
