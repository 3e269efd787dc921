//! [`FaultyStore`]: a wrapper that fails operations on demand, for spool and replay tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::store::{
    BlobKey, Counts, CountsWrite, Damage, DamageStats, ExpireReport, Namespace, PutOutcome,
    Retention, Store, TypeSubtype,
};

/// The switches of a [`FaultyStore`], shared with the test that drives it (clone it freely).
#[derive(Clone, Default)]
pub struct Faults {
    inner: Arc<FaultState>,
}

#[derive(Default)]
struct FaultState {
    fail_writes: AtomicBool,
    fail_reads: AtomicBool,
    fail_next_writes: AtomicU64,
    failed: AtomicU64,
}

impl Faults {
    /// Every write (blob put, index add, counts add, flush) fails while `on` is true. (A
    /// `put_blobs` call is one write: its first item fails, so none is attempted.)
    pub fn fail_writes(&self, on: bool) {
        self.inner.fail_writes.store(on, Ordering::SeqCst);
    }

    /// Every read (get, index, counts, list) fails while `on` is true.
    pub fn fail_reads(&self, on: bool) {
        self.inner.fail_reads.store(on, Ordering::SeqCst);
    }

    /// The next `n` writes fail, then writes succeed again.
    pub fn fail_next_writes(&self, n: u64) {
        self.inner.fail_next_writes.store(n, Ordering::SeqCst);
    }

    /// How many operations were failed on purpose so far.
    pub fn injected(&self) -> u64 {
        self.inner.failed.load(Ordering::SeqCst)
    }

    fn check_write(&self, what: &str) -> Result<()> {
        let s = &self.inner;
        let countdown = s
            .fail_next_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if countdown || s.fail_writes.load(Ordering::SeqCst) {
            s.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable {
                reason: format!("injected fault: {what}"),
            });
        }
        Ok(())
    }

    fn check_read(&self, what: &str) -> Result<()> {
        if self.inner.fail_reads.load(Ordering::SeqCst) {
            self.inner.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable {
                reason: format!("injected fault: {what}"),
            });
        }
        Ok(())
    }
}

/// Wraps any [`Store`] and fails operations (with [`StoreError::Unavailable`], a transient error)
/// when its [`Faults`] say so; otherwise passes every call through. A failed write does not reach
/// the inner store. `expire` and `retention` are never failed.
pub struct FaultyStore<S> {
    inner: S,
    faults: Faults,
}

impl<S: Store> FaultyStore<S> {
    /// Wraps `inner`; returns the store and the handle that controls it.
    pub fn new(inner: S) -> (Self, Faults) {
        let faults = Faults::default();
        (
            FaultyStore {
                inner,
                faults: faults.clone(),
            },
            faults,
        )
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        self.faults.check_write("put_blob")?;
        self.inner.put_blob(ns, key, bytes)
    }

    fn put_blobs(&self, ns: &Namespace, items: &[(BlobKey<'_>, &[u8])]) -> Vec<Result<PutOutcome>> {
        if items.is_empty() {
            return Vec::new();
        }
        if let Err(e) = self.faults.check_write("put_blobs") {
            return vec![Err(e)];
        }
        self.inner.put_blobs(ns, items)
    }

    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        self.faults.check_read("get_blob")?;
        self.inner.get_blob(ns, key)
    }

    fn checks_each_read(&self) -> bool {
        self.inner.checks_each_read()
    }

    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        if let Err(e) = self.faults.check_read("get_blobs") {
            let reason = e.to_string();
            return keys
                .iter()
                .map(|_| {
                    Err(StoreError::Unavailable {
                        reason: reason.clone(),
                    })
                })
                .collect();
        }
        self.inner.get_blobs(ns, keys)
    }

    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        self.faults.check_write("add_to_epoch_index")?;
        self.inner.add_to_epoch_index(epoch, dc, entries)
    }

    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        self.faults.check_read("get_epoch_index")?;
        self.inner.get_epoch_index(epoch, dc)
    }

    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        self.faults.check_write("add_to_namespace_index")?;
        self.inner.add_to_namespace_index(ns, epoch, dc, entries)
    }

    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        self.faults.check_read("get_namespace_index")?;
        self.inner.get_namespace_index(ns, epoch, dc)
    }

    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        self.faults.check_write("put_catalog")?;
        self.inner.put_catalog(kind, name, value)
    }

    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        self.faults.check_read("get_catalog")?;
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
        self.faults.check_write("add_counts")?;
        self.inner
            .add_counts(epoch, dc, event_type, subtype, counts)
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
        self.faults.check_write("add_counts_once")?;
        self.inner
            .add_counts_once(write, epoch, dc, event_type, subtype, counts)
    }

    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        self.faults.check_read("get_counts")?;
        self.inner.get_counts(epoch, dc)
    }

    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        self.faults.check_read("list_epochs")?;
        self.inner.list_epochs(dc, from, to)
    }

    fn expire(&self, now: i64) -> Result<ExpireReport> {
        self.inner.expire(now)
    }

    fn flush(&self) -> Result<()> {
        self.faults.check_write("flush")?;
        self.inner.flush()
    }

    fn retention(&self) -> Retention {
        self.inner.retention()
    }

    fn damage(&self, from: i64, to: i64) -> Result<Vec<Damage>> {
        self.inner.damage(from, to)
    }

    fn damage_stats(&self) -> DamageStats {
        self.inner.damage_stats()
    }

    fn usage(&self) -> Option<crate::StoreUsage> {
        self.inner.usage()
    }
}
