//! [`InMemoryStore`]: the reference behaviour, for tests.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::Result;
use crate::store::{
    check_catalog, check_counts, check_counts_write, check_entries, check_key, check_put, BlobKey,
    Counts, CountsWrite, ExpireReport, Namespace, PutOutcome, Retention, Store, TypeSubtype,
};
use crate::StoreError;

/// Catalog records by `(kind, name)`.
type CatalogMap = BTreeMap<(String, String), Vec<u8>>;

#[derive(Default)]
struct Partition {
    blobs: HashMap<(Namespace, i64, String), Arc<[u8]>>,
    index: BTreeMap<(i64, String), BTreeSet<String>>,
    ns_index: BTreeMap<(Namespace, i64, String), BTreeSet<String>>,
    counts: BTreeMap<(i64, String), BTreeMap<TypeSubtype, Counts>>,
    /// The `add_counts_once` tokens applied: (epoch, dc, writer, batch).
    applied: HashSet<(i64, String, String, String)>,
    bytes: u64,
}

/// A store that keeps everything in memory, partitioned by time like the embedded one so that
/// [`expire`](Store::expire) behaves the same. Cloning gives another handle on the same data
/// (which is how tests "reopen" it). `flush` does nothing; nothing survives the process.
#[derive(Clone, Default)]
pub struct InMemoryStore {
    retention: Retention,
    partitions: Arc<RwLock<BTreeMap<i64, Partition>>>,
    catalog: Arc<RwLock<CatalogMap>>,
}

impl InMemoryStore {
    /// An empty store with the default retention.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with `retention`.
    pub fn with_retention(retention: Retention) -> Result<Self> {
        retention.validate()?;
        Ok(InMemoryStore {
            retention,
            partitions: Arc::default(),
            catalog: Arc::default(),
        })
    }

    // A poisoned lock only means another thread panicked mid-update of plain maps; the maps are
    // still consistent enough for a test store, so take the data rather than panic again.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<i64, Partition>> {
        self.partitions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<i64, Partition>> {
        self.partitions.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store for InMemoryStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        check_put(ns, key, bytes)?;
        let mut parts = self.write();
        let part = parts
            .entry(self.retention.partition_of(key.epoch))
            .or_default();
        let k = (ns.clone(), key.epoch, key.key.to_owned());
        if let Some(existing) = part.blobs.get(&k) {
            return if **existing == *bytes {
                Ok(PutOutcome::AlreadyPresent)
            } else {
                Err(StoreError::Exists {
                    key: key.key.to_owned(),
                })
            };
        }
        part.bytes += bytes.len() as u64;
        part.blobs.insert(k, Arc::from(bytes));
        Ok(PutOutcome::Written)
    }

    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        check_key(ns, key)?;
        let parts = self.read();
        let Some(part) = parts.get(&self.retention.partition_of(key.epoch)) else {
            return Ok(None);
        };
        let k = (ns.clone(), key.epoch, key.key.to_owned());
        Ok(part.blobs.get(&k).map(|b| b.to_vec()))
    }

    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        check_entries(dc, entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let mut parts = self.write();
        let part = parts.entry(self.retention.partition_of(epoch)).or_default();
        let set = part.index.entry((epoch, dc.to_owned())).or_default();
        set.extend(entries.iter().map(|e| (*e).to_owned()));
        Ok(())
    }

    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        let parts = self.read();
        Ok(parts
            .get(&self.retention.partition_of(epoch))
            .and_then(|p| p.index.get(&(epoch, dc.to_owned())))
            .cloned()
            .unwrap_or_default())
    }

    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        ns.validate()?;
        if *ns == Namespace::Events {
            return self.add_to_epoch_index(epoch, dc, entries);
        }
        check_entries(dc, entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let mut parts = self.write();
        let part = parts.entry(self.retention.partition_of(epoch)).or_default();
        let set = part
            .ns_index
            .entry((ns.clone(), epoch, dc.to_owned()))
            .or_default();
        set.extend(entries.iter().map(|e| (*e).to_owned()));
        Ok(())
    }

    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        ns.validate()?;
        if *ns == Namespace::Events {
            return self.get_epoch_index(epoch, dc);
        }
        let parts = self.read();
        Ok(parts
            .get(&self.retention.partition_of(epoch))
            .and_then(|p| p.ns_index.get(&(ns.clone(), epoch, dc.to_owned())))
            .cloned()
            .unwrap_or_default())
    }

    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        check_catalog(kind, name, value)?;
        let mut catalog = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let id = (kind.to_owned(), name.to_owned());
        match value {
            Some(v) => {
                catalog.insert(id, v.to_vec());
            }
            None => {
                catalog.remove(&id);
            }
        }
        Ok(())
    }

    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        Ok(catalog
            .iter()
            .filter(|((k, _), _)| k == kind)
            .map(|((_, name), v)| (name.clone(), v.clone()))
            .collect())
    }

    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        check_counts(dc, event_type, subtype, counts)?;
        let mut parts = self.write();
        let part = parts.entry(self.retention.partition_of(epoch)).or_default();
        part.counts
            .entry((epoch, dc.to_owned()))
            .or_default()
            .entry((event_type.to_owned(), subtype.to_owned()))
            .or_default()
            .merge(counts);
        Ok(())
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
        check_counts_write(write)?;
        check_counts(dc, event_type, subtype, counts)?;
        let mut parts = self.write();
        let part = parts.entry(self.retention.partition_of(epoch)).or_default();
        let token = (
            epoch,
            dc.to_owned(),
            write.writer.to_owned(),
            write.batch.to_owned(),
        );
        if !part.applied.insert(token) {
            return Ok(());
        }
        part.counts
            .entry((epoch, dc.to_owned()))
            .or_default()
            .entry((event_type.to_owned(), subtype.to_owned()))
            .or_default()
            .merge(counts);
        Ok(())
    }

    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        let parts = self.read();
        Ok(parts
            .get(&self.retention.partition_of(epoch))
            .and_then(|p| p.counts.get(&(epoch, dc.to_owned())))
            .cloned()
            .unwrap_or_default())
    }

    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let parts = self.read();
        let first = self.retention.partition_of(from);
        for part in parts.range(first..to).map(|(_, p)| p) {
            for ((epoch, d), set) in part.index.range((from, String::new())..) {
                if *epoch >= to {
                    break;
                }
                if !set.is_empty() && (dc.is_none() || dc == Some(d.as_str())) {
                    out.push((*epoch, d.clone()));
                }
            }
        }
        Ok(out)
    }

    fn expire(&self, now: i64) -> Result<ExpireReport> {
        let mut parts = self.write();
        let mut report = ExpireReport::default();
        let doomed: Vec<i64> = parts
            .keys()
            .copied()
            .filter(|s| self.retention.is_expired(*s, now))
            .collect();
        for start in doomed {
            if let Some(p) = parts.remove(&start) {
                report.partitions_dropped += 1;
                report.bytes_freed += p.bytes;
            }
        }
        Ok(report)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn retention(&self) -> Retention {
        self.retention
    }
}
