//! `TimedStore`, a [`Store`] wrapper that records how long every store *write* takes (`put_blob`, `put_blobs`, `put_blob_lists`, `put_owned_blob_lists`,
//! `add_to_epoch_indexes`, `add_counts_once_many` (one observation per call),
//! `add_to_epoch_index`, `add_counts`, `add_counts_once`, `flush`: `sluice_store_write_seconds`)
//! and the size of every blob written (`sluice_blob_bytes`), in the histograms of
//! [`crate::metrics`].
//! Reads pass through untimed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sluice_store::{
    BlobKey, Counts, CountsAdd, CountsWrite, Damage, DamageStats, ExpireReport, Namespace,
    PutOutcome, Result, Retention, Store, TypeSubtype,
};

use crate::metrics::SharedMetrics;

/// Times the writes of the store it wraps into the shared metrics.
pub(crate) struct TimedStore {
    pub inner: std::sync::Arc<dyn Store>,
    pub metrics: SharedMetrics,
}

impl TimedStore {
    /// `inner` with its writes timed into `metrics`.
    pub(crate) fn wrap(
        inner: std::sync::Arc<dyn Store>,
        metrics: SharedMetrics,
    ) -> std::sync::Arc<dyn Store> {
        std::sync::Arc::new(TimedStore { inner, metrics })
    }

    fn timed<T>(&self, blob_len: Option<usize>, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        let secs = start.elapsed().as_secs_f64();
        self.metrics.store_write_seconds.observe(secs);
        if let Some(n) = blob_len {
            self.metrics.blob_bytes.observe(n as f64);
        }
        out
    }
}

impl Store for TimedStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        let start = Instant::now();
        let out = self.inner.put_blob(ns, key, bytes);
        let secs = start.elapsed().as_secs_f64();
        self.metrics.store_write_seconds.observe(secs);
        if matches!(out, Ok(PutOutcome::Written)) {
            self.metrics.blob_bytes.observe(bytes.len() as f64);
        }
        out
    }
    fn put_blobs(&self, ns: &Namespace, items: &[(BlobKey<'_>, &[u8])]) -> Vec<Result<PutOutcome>> {
        let start = Instant::now();
        let out = self.inner.put_blobs(ns, items);
        let secs = start.elapsed().as_secs_f64();
        self.metrics.store_write_seconds.observe(secs);
        for ((_, bytes), r) in items.iter().zip(&out) {
            if matches!(r, Ok(PutOutcome::Written)) {
                self.metrics.blob_bytes.observe(bytes.len() as f64);
            }
        }
        out
    }
    fn put_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        let out = self.timed(None, || self.inner.put_blob_lists(ns, lists));
        for (list, results) in lists.iter().zip(&out) {
            for ((_, bytes), r) in list.iter().zip(results) {
                if matches!(r, Ok(PutOutcome::Written)) {
                    self.metrics.blob_bytes.observe(bytes.len() as f64);
                }
            }
        }
        out
    }
    fn put_owned_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        let out = self.timed(None, || self.inner.put_owned_blob_lists(ns, lists));
        for (list, results) in lists.iter().zip(&out) {
            for ((_, bytes), r) in list.iter().zip(results) {
                if matches!(r, Ok(PutOutcome::Written)) {
                    self.metrics.blob_bytes.observe(bytes.len() as f64);
                }
            }
        }
        out
    }
    fn add_to_epoch_indexes(&self, items: &[(i64, &str, Vec<&str>)]) -> Vec<Result<()>> {
        self.timed(None, || self.inner.add_to_epoch_indexes(items))
    }
    fn keys_on_node(&self, node: &str, ns: &Namespace, keys: &[BlobKey<'_>]) -> Result<Vec<bool>> {
        self.inner.keys_on_node(node, ns, keys)
    }
    fn add_counts_once_many(&self, items: &[CountsAdd<'_>]) -> Vec<Result<()>> {
        self.timed(None, || self.inner.add_counts_once_many(items))
    }
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        self.inner.get_blob(ns, key)
    }
    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        self.inner.get_blobs(ns, keys)
    }
    fn checks_each_read(&self) -> bool {
        self.inner.checks_each_read()
    }
    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        self.timed(None, || self.inner.add_to_epoch_index(epoch, dc, entries))
    }
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        self.inner.get_epoch_index(epoch, dc)
    }
    fn get_epoch_index_latest(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        self.inner.get_epoch_index_latest(epoch, dc)
    }
    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        self.timed(None, || {
            self.inner.add_to_namespace_index(ns, epoch, dc, entries)
        })
    }
    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        self.inner.get_namespace_index(ns, epoch, dc)
    }
    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        self.inner.put_catalog(kind, name, value)
    }
    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        self.inner.get_catalog(kind)
    }
    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        self.timed(None, || {
            self.inner
                .add_counts(epoch, dc, event_type, subtype, counts)
        })
    }
    fn add_counts_once(
        &self,
        write: CountsWrite<'_>,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        self.timed(None, || {
            self.inner
                .add_counts_once(write, epoch, dc, event_type, subtype, counts)
        })
    }
    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        self.inner.get_counts(epoch, dc)
    }
    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        self.inner.list_epochs(dc, from, to)
    }
    fn expire(&self, now: i64) -> Result<ExpireReport> {
        self.inner.expire(now)
    }
    fn flush(&self) -> Result<()> {
        self.timed(None, || self.inner.flush())
    }
    fn retention(&self) -> Retention {
        self.inner.retention()
    }
    fn damage(&self, from: i64, to: i64) -> Result<Vec<Damage>> {
        self.inner.damage(from, to)
    }
    fn usage(&self) -> Option<sluice_store::StoreUsage> {
        self.inner.usage()
    }
    fn damage_stats(&self) -> DamageStats {
        self.inner.damage_stats()
    }
}
