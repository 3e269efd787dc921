//! Helpers shared by the collector tests: generated events as the ingest layer gives them, a
//! store read back through its epoch indexes, summed counts, and [`Hooked`], a store wrapper
//! whose hook sees (and may fail or record) every write while reads pass straight through.
//!
//! Contract: every helper panics (fails the test) on an unexpected store or decode error; none
//! of them writes to a store except through the writes the test makes.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use sereal::Limits;
use sluice_blob::{Blob, EpochKey, EventKey, IndexEntry};
use sluice_collector::{IngestConfig, Ingestor, ParsedEvent};
use sluice_gen::GenConfig;
use sluice_store::{
    BlobKey, Counts, CountsWrite, ExpireReport, Namespace, PutOutcome, Retention, Store,
    TypeSubtype,
};

/// The first epoch of the generated test data.
pub const E0: i64 = 1_700_000_000;

/// The events of `cfg`, written as JSON lines and ingested at `E0`; asserts that none is dropped.
pub fn ingest_generated(cfg: &GenConfig) -> Vec<ParsedEvent> {
    let mut buf = Vec::new();
    sluice_gen::write_json_lines(cfg, &mut buf).unwrap();
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let out = ing.ingest(&buf, E0);
    assert!(out.is_clean(), "{:?}", out.dropped.first());
    out.events
}

/// An event as JSON text: its identity in a multiset.
pub fn json(v: &sereal::Value) -> String {
    sereal::json::to_json_value(v).to_string()
}

/// Multiset of events, as JSON text.
pub fn bag<'a>(evs: impl IntoIterator<Item = &'a ParsedEvent>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in evs {
        *m.entry(json(&e.event.to_value().unwrap())).or_insert(0) += 1;
    }
    m
}

/// Calls `f(epoch, dc, key, event)` for every event the store lists for epochs `[from, to)`,
/// read through the index; panics when an indexed blob is not stored.
pub fn for_each_stored(
    store: &dyn Store,
    from: i64,
    to: i64,
    mut f: impl FnMut(i64, &str, &str, &sereal::Value),
) {
    for (epoch, dc) in store.list_epochs(None, from, to).unwrap() {
        let ek = EpochKey::new(epoch, &dc).unwrap();
        for entry in store.get_epoch_index(epoch, &dc).unwrap() {
            let key = EventKey::from_parts(&ek, &IndexEntry::parse(&entry).unwrap()).to_string();
            let bytes = store
                .get_blob(&Namespace::Events, BlobKey::new(epoch, &key))
                .unwrap()
                .unwrap_or_else(|| panic!("{key} is indexed but not stored"));
            for v in Blob::parse(&bytes)
                .unwrap()
                .decode(&Limits::default())
                .unwrap()
            {
                f(epoch, &dc, &key, &v);
            }
        }
    }
}

/// Every event the store lists for epochs `[from, to)`, as JSON text with multiplicities.
pub fn read_back(store: &dyn Store, from: i64, to: i64) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for_each_stored(store, from, to, |_, _, _, v| {
        *m.entry(json(v)).or_insert(0) += 1;
    });
    m
}

/// The counts of every epoch and dc in `[from, to)`, summed.
pub fn total_counts(store: &dyn Store, from: i64, to: i64) -> Counts {
    let mut total = Counts::default();
    for (epoch, dc) in store.list_epochs(None, from, to).unwrap() {
        for c in store.get_counts(epoch, &dc).unwrap().values() {
            total.merge(c);
        }
    }
    total
}

/// One write a [`Hooked`] store is asked for.
pub enum WriteOp<'a> {
    /// `put_blob` of a blob of `epoch`.
    PutBlob { epoch: i64 },
    /// `add_to_epoch_index`.
    AddToEpochIndex {
        epoch: i64,
        dc: &'a str,
        entries: &'a [&'a str],
    },
    /// `add_counts`.
    AddCounts { epoch: i64 },
    /// `add_counts_once`.
    AddCountsOnce { epoch: i64 },
}

impl WriteOp<'_> {
    /// The name of the `Store` method.
    pub fn name(&self) -> &'static str {
        match self {
            WriteOp::PutBlob { .. } => "put_blob",
            WriteOp::AddToEpochIndex { .. } => "add_to_epoch_index",
            WriteOp::AddCounts { .. } => "add_counts",
            WriteOp::AddCountsOnce { .. } => "add_counts_once",
        }
    }

    /// The epoch written to.
    pub fn epoch(&self) -> i64 {
        match self {
            WriteOp::PutBlob { epoch }
            | WriteOp::AddToEpochIndex { epoch, .. }
            | WriteOp::AddCounts { epoch }
            | WriteOp::AddCountsOnce { epoch } => *epoch,
        }
    }
}

/// What a [`Hooked`] store does around each write of its inner store.
pub trait WriteHook: Send + Sync {
    /// Answers write `op`; `apply` performs it on `inner` (or is not called, to drop it).
    fn write<S: Store, T>(
        &self,
        inner: &S,
        op: WriteOp<'_>,
        apply: impl FnOnce(&S) -> sluice_store::Result<T>,
    ) -> sluice_store::Result<T>;
}

/// A store that passes reads to `inner` and every write through `hook`.
pub struct Hooked<S, H> {
    pub inner: S,
    pub hook: H,
}

impl<S: Store, H: WriteHook> Store for Hooked<S, H> {
    fn put_blob(
        &self,
        ns: &Namespace,
        key: BlobKey<'_>,
        bytes: &[u8],
    ) -> sluice_store::Result<PutOutcome> {
        let op = WriteOp::PutBlob { epoch: key.epoch };
        self.hook
            .write(&self.inner, op, |s| s.put_blob(ns, key, bytes))
    }
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> sluice_store::Result<Option<Vec<u8>>> {
        self.inner.get_blob(ns, key)
    }
    fn add_to_epoch_index(
        &self,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> sluice_store::Result<()> {
        let op = WriteOp::AddToEpochIndex { epoch, dc, entries };
        self.hook.write(&self.inner, op, |s| {
            s.add_to_epoch_index(epoch, dc, entries)
        })
    }
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> sluice_store::Result<BTreeSet<String>> {
        self.inner.get_epoch_index(epoch, dc)
    }
    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> sluice_store::Result<()> {
        self.inner.add_to_namespace_index(ns, epoch, dc, entries)
    }
    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> sluice_store::Result<BTreeSet<String>> {
        self.inner.get_namespace_index(ns, epoch, dc)
    }
    fn put_catalog(
        &self,
        kind: &str,
        name: &str,
        value: Option<&[u8]>,
    ) -> sluice_store::Result<()> {
        self.inner.put_catalog(kind, name, value)
    }
    fn get_catalog(&self, kind: &str) -> sluice_store::Result<BTreeMap<String, Vec<u8>>> {
        self.inner.get_catalog(kind)
    }
    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        t: &str,
        st: &str,
        counts: &Counts,
    ) -> sluice_store::Result<()> {
        let op = WriteOp::AddCounts { epoch };
        self.hook
            .write(&self.inner, op, |s| s.add_counts(epoch, dc, t, st, counts))
    }
    fn add_counts_once(
        &self,
        w: CountsWrite<'_>,
        epoch: i64,
        dc: &str,
        t: &str,
        st: &str,
        counts: &Counts,
    ) -> sluice_store::Result<()> {
        let op = WriteOp::AddCountsOnce { epoch };
        self.hook.write(&self.inner, op, |s| {
            s.add_counts_once(w, epoch, dc, t, st, counts)
        })
    }
    fn get_counts(
        &self,
        epoch: i64,
        dc: &str,
    ) -> sluice_store::Result<BTreeMap<TypeSubtype, Counts>> {
        self.inner.get_counts(epoch, dc)
    }
    fn list_epochs(
        &self,
        dc: Option<&str>,
        from: i64,
        to: i64,
    ) -> sluice_store::Result<Vec<(i64, String)>> {
        self.inner.list_epochs(dc, from, to)
    }
    fn expire(&self, now: i64) -> sluice_store::Result<ExpireReport> {
        self.inner.expire(now)
    }
    fn flush(&self) -> sluice_store::Result<()> {
        self.inner.flush()
    }
    fn retention(&self) -> Retention {
        self.inner.retention()
    }
}
