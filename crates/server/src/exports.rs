//! Rollups handed to the tools that draw them: one [`Exporter`] per configured sink
//! (`--export-remote-write URL`, `--export-graphite HOST:PORT`, TOML `[[exports]]`), each
//! reading closed steps through [`StoreRows`] (the rollup query) and sending them at least once
//! (retries with backoff, a bounded queue; counters in `/metrics` as `sluice_export_*`).
//!
//! Export starts with the steps that close after the server starts; a restart does not send
//! again what the previous run sent, nor what closed while it was down (a gap, not a
//! duplicate — a rollup query still answers for it).

use std::sync::Arc;

use serde::Deserialize;
use sluice_exports::{Exporter, ExporterConfig, RollupRow, RowSource, SinkConfig};
use sluice_rollups::RollupQuery;
use sluice_store::Store;
use sluice_substreams::registry;

use crate::error::{Error, Result};
use crate::metrics::SharedMetrics;

/// One export sink (`[[exports]]`): exactly one of `remote_write` and `graphite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportSpec {
    /// Prometheus remote write: `http(s)://host:port/api/v1/write`.
    #[serde(default)]
    pub remote_write: Option<String>,
    /// Graphite plaintext: `host:port`.
    #[serde(default)]
    pub graphite: Option<String>,
    /// Only these rollups (default: every rollup, including ones added later).
    #[serde(default)]
    pub rollups: Option<Vec<String>>,
    /// Seconds after a step's end before it is sent, so its states are stored (default 5).
    #[serde(default)]
    pub delay_secs: Option<u64>,
}

impl ExportSpec {
    fn sink(&self) -> Result<SinkConfig> {
        match (&self.remote_write, &self.graphite) {
            (Some(url), None) => Ok(SinkConfig::RemoteWrite {
                url: url.clone(),
                headers: Vec::new(),
            }),
            (None, Some(addr)) => Ok(SinkConfig::Graphite { addr: addr.clone() }),
            _ => Err(Error::Config(
                "[[exports]]: give exactly one of remote_write = \"URL\" and graphite = \"HOST:PORT\""
                    .into(),
            )),
        }
    }
}

/// The rollups of a store as rows: what an exporter reads.
pub struct StoreRows {
    store: Arc<dyn Store>,
}

impl RowSource for StoreRows {
    fn rollups(&self) -> Vec<(String, i64)> {
        registry::load(&*self.store)
            .map(|(defs, _)| {
                defs.into_values()
                    .filter(|d| d.enabled)
                    .filter_map(|d| {
                        let step = sluice_rollups::query::rollup_step(&d).ok()?;
                        Some((d.name, step as i64))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn rows(
        &self,
        rollup: &str,
        from: i64,
        to: i64,
    ) -> std::result::Result<Vec<RollupRow>, String> {
        let def = registry::get(&*self.store, rollup).map_err(|e| e.to_string())?;
        let q = RollupQuery {
            from,
            to,
            step: None,
            filter: None,
        };
        let answer = sluice_rollups::query(&*self.store, &def, &q).map_err(|e| e.to_string())?;
        Ok(answer
            .rows
            .into_iter()
            .filter(|r| r.start >= from && r.start < to)
            .collect())
    }
}

/// The running exporters.
pub struct Exports {
    running: Vec<Exporter>,
}

impl Exports {
    /// Starts one exporter per spec (none: nothing runs).
    pub fn start(
        specs: &[ExportSpec],
        store: Arc<dyn Store>,
        metrics: &SharedMetrics,
    ) -> Result<Exports> {
        let source: Arc<dyn RowSource> = Arc::new(StoreRows { store });
        let now = crate::pipeline::now_unix();
        let mut running = Vec::new();
        for spec in specs {
            let mut cfg = ExporterConfig::new(spec.sink()?, now);
            cfg.rollups = spec.rollups.clone();
            if let Some(d) = spec.delay_secs {
                cfg.delay = std::time::Duration::from_secs(d);
            }
            let shown = match &cfg.sink {
                SinkConfig::RemoteWrite { url, .. } => format!("remote_write {url}"),
                SinkConfig::Graphite { addr } => format!("graphite {addr}"),
            };
            let exporter = Exporter::start(cfg, source.clone())
                .map_err(|e| Error::Config(format!("export to {shown}: {e}")))?;
            metrics
                .exporters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((shown, exporter.counters()));
            running.push(exporter);
        }
        Ok(Exports { running })
    }

    /// Stops every exporter (what is queued and unsent is dropped: at least once holds for
    /// what was acknowledged).
    pub fn stop(self) {
        for e in self.running {
            e.stop();
        }
    }
}
