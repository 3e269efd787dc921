//! The columnar history tier inside `sluice serve`: the writer thread and the view readers share.
//!
//! The writer ([`sluice_columns::tier::Tier`]) runs on its own thread, every few seconds, off the
//! ingest path: it reads what the store holds, so nothing the pipeline does waits for it, and a
//! failed run (store or object store down) is counted and tried again on the next one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_columns::location::open_location;
use sluice_columns::tier::Tier;
use sluice_columns::view::ColumnsView;
use sluice_store::Store;

use crate::config::ServerConfig;
use crate::error::{Error, Result};
use crate::metrics::SharedMetrics;

/// How often the writer wakes to see whether a part is due.
const TICK: Duration = Duration::from_millis(500);
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
        let tier = Tier::open(view.clone(), read_store, config.columns_tier(), now())
            .map_err(|e| Error::Io(format!("columns at {shown}: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("columns".into())
                .spawn(move || write_loop(&tier, &stop, &metrics))
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
