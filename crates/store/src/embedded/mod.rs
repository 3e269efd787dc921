//! [`EmbeddedStore`]: time-partitioned, append-only logs under a data directory (Bitcask-style).
//!
//! One directory per time partition (an hour by default) holds `blobs.log` (blob records) and
//! `meta.log` (epoch index, namespace index and counts records). Both are append-only with
//! CRC-framed records; the in-memory indexes are rebuilt from them when a partition is first
//! touched after open. Expiry renames a partition's directory away and deletes it: no key is ever
//! scanned. The catalog (`CATALOG`, outside the partitions) is rewritten whole on each change
//! (`catalog.rs`). Layout and recovery rules: the crate's README.md; byte layout: `record.rs`.
//!
//! # Damage (contract)
//! - A store opened with [`EmbeddedStore::open_read_only`] never modifies the directory: no file
//!   or directory is created, truncated, renamed or written (not even `LOCK` or `FORMAT`).
//! - A record that fails its checks in the *middle* of a log is skipped, not taken for the end:
//!   the load resynchronises on the next offset that holds a valid record (blob: header CRC,
//!   kind, lengths that fit in the file; meta: CRC, length, decodable payload), records the
//!   skipped range as a [`Damage`] and reads on. Only bytes after the last valid record are a
//!   torn tail; only a writer cuts it, and only it.
//! - A blob record whose header fails its CRC is **salvaged**, not skipped, when the rest proves
//!   it: kind 1, lengths within the limits that lead exactly to a record whose header holds, to
//!   the end of the log or to a torn tail (the end of the durable data), a valid namespace, a key
//!   that is an event key of the header's epoch, and a value that passes its own `=chk` SHA-1
//!   (the trailer every blob carries: it proves the value byte for byte, as the CRC would have
//!   proven the header). It is read as stored, reported as [`DamageKind::Salvaged`] naming the
//!   blob, never cut as a torn tail and never put in place of a valid record of the same key;
//!   [`EmbeddedStore::repair`] copies it with a valid header. Anything else that fails its
//!   header CRC is skipped as above.
//! - When `meta.log` lost records (skipped or torn), the partition's epoch index is rebuilt from
//!   the keys of its `events` blobs (they carry epoch, dc, type, subtype and chunk), so no event
//!   becomes unlisted; lost completeness counts cannot be rebuilt and are reported. A writer that
//!   cut a torn tail appends the rebuilt entries (the damage is gone from the file, so the next
//!   load would not rebuild them); for mid-log damage the rebuild is redone on every load.
//! - Damage is kept per partition ([`Store::damage`]) and counted ([`Store::damage_stats`]);
//!   [`EmbeddedStore::check`] also verifies every value; [`EmbeddedStore::repair`] writes clean
//!   copies of damaged logs (salvaged records with a rewritten header) and keeps the originals as
//!   `<log>.damaged-<unix time>`.

mod blob_format;
mod blob_log;
mod catalog;
mod layout;
mod lock;
mod log_file;
mod meta_log;
mod purge;
mod record;
mod repair;

pub use blob_format::{BlobFormat, CodecFormat};
use blob_log::*;
use layout::*;
use lock::*;
use log_file::*;
use meta_log::*;
use purge::*;
use repair::*;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use record::{
    BlobHeader, MetaRecord, BLOB_HEADER_LEN, KIND_BLOB, KIND_COUNTS_ADD, KIND_COUNTS_ONCE,
    KIND_INDEX_ADD, KIND_NS_INDEX_ADD, MAX_META_LEN, META_HEADER_LEN,
};

use crate::error::{Result, StoreError};
use crate::store::{
    check_counts, check_counts_write, check_entries, check_key, check_put, BlobKey, Counts,
    CountsWrite, Damage, DamageKind, DamageStats, ExpireReport, Namespace, PutOutcome, Retention,
    Store, StoreUsage, TypeSubtype, MAX_BLOB_LEN, MAX_KEY_LEN, MAX_NAME_LEN,
};
use crate::type_retention::TypeRetention;

const FORMAT_FILE: &str = "FORMAT";
const FORMAT_VERSION: &str = "sluice-store segment-log 1";
const BLOBS_FILE: &str = "blobs.log";
const META_FILE: &str = "meta.log";
const EXPIRED_SUFFIX: &str = ".expired";
const LOCK_FILE: &str = "LOCK";
/// Suffix of the clean copy a repair writes before it replaces the log.
const REPAIR_SUFFIX: &str = ".repair";

/// When a write is durable. In every mode a write method returns only after its bytes were
/// handed to the operating system (`pwrite` returned), so they survive a crash or `SIGKILL` of the
/// process; the mode decides about power loss and kernel crashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` the log before each write method returns: durable against power loss on
    /// return. Costs one disk flush per call (numbers: docs/decisions.md, "Embedded store and
    /// the `Store` trait", its engine measurement).
    Immediate,
    /// Durable against power loss once [`Store::flush`] returns (group commit: the collector
    /// flushes once per second's batch). The default.
    #[default]
    OnFlush,
}

/// Options of an [`EmbeddedStore`].
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// Retention period and partition width. The partition width is recorded in the data
    /// directory on creation; reopening with another width is refused.
    pub retention: Retention,
    /// Groups kept for another period than `retention.period_secs` (which must be the longest
    /// of all: [`TypeRetention::longest`]); [`Store::expire`] removes the others from older
    /// partitions (`purge.rs`).
    pub type_retention: TypeRetention,
    /// When writes are durable.
    pub durability: Durability,
    /// Threads used by [`Store::get_blobs`] (at most; 1 = sequential).
    pub read_threads: usize,
    /// What repair and salvage ask about blob keys and values (the codec's rules).
    pub blob_format: Arc<dyn BlobFormat>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            retention: Retention::default(),
            type_retention: TypeRetention::default(),
            durability: Durability::default(),
            read_threads: 4,
            blob_format: Arc::new(CodecFormat),
        }
    }
}

/// What recovery found since open: torn or invalid log tails that were cut off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Log files whose tail was invalid and truncated.
    pub torn_tails: u64,
    /// Bytes removed by those truncations.
    pub bytes_dropped: u64,
}

/// The embedded backend. See the [module docs](self) and the crate README for the layout.
pub struct EmbeddedStore {
    dir: PathBuf,
    opts: EmbeddedOptions,
    /// Opened with [`open_read_only`](EmbeddedStore::open_read_only): never writes a byte.
    read_only: bool,
    partitions: RwLock<BTreeMap<i64, Arc<Partition>>>,
    torn_tails: AtomicU64,
    bytes_dropped: AtomicU64,
    damage_counters: DamageCounters,
    expired_seq: AtomicU64,
    /// The small named records of `put_catalog` (see [`catalog`]).
    catalog: catalog::Catalog,
    /// Held for the life of the store: an exclusive lock on `<dir>/LOCK` (shared when read-only),
    /// because a second writer would cut what it takes for torn tails out of logs this one is
    /// appending to. `None`: read-only on a directory without a `LOCK` file.
    _lock: Option<fs::File>,
}

/// The totals behind [`DamageStats`].
#[derive(Default)]
struct DamageCounters {
    ranges: AtomicU64,
    bytes: AtomicU64,
    torn_tails: AtomicU64,
    torn_bytes: AtomicU64,
    rebuilt: AtomicU64,
    salvaged: AtomicU64,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, EmbeddedOptions::default())
    }

    /// Opens (creating if needed) the store in `dir`.
    ///
    /// Only the list of partitions is read here; each partition's logs are read (and a torn
    /// tail cut off) the first time it is used. Only one process may open a directory at a
    /// time: a second open fails with [`StoreError::Locked`].
    pub fn open_with(dir: impl AsRef<Path>, opts: EmbeddedOptions) -> Result<Self> {
        opts.retention.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let lock = lock_dir(&dir, false)?;
        check_format(&dir, &opts.retention)?;
        let partitions = list_partitions(&dir, &opts.retention, false)?;
        Ok(Self::with_parts(dir, opts, false, partitions, lock))
    }

    /// Opens an existing store for reading only: nothing in `dir` is created or changed (torn
    /// tails are left in place and reported, not cut; an interrupted expiry is not finished).
    /// The partition width is read from `FORMAT`. Holds a *shared* lock on `LOCK` (when it
    /// exists), so readers run side by side but never beside a writer
    /// ([`StoreError::Locked`]). Write methods fail with [`StoreError::InvalidArgument`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(StoreError::NotFound {
                what: format!("data directory {}", dir.display()),
            });
        }
        let lock = lock_dir(&dir, true)?;
        let partition_secs = read_format(&dir)?;
        let opts = EmbeddedOptions {
            retention: Retention {
                partition_secs,
                ..Retention::default()
            },
            ..EmbeddedOptions::default()
        };
        opts.retention.validate()?;
        let partitions = list_partitions(&dir, &opts.retention, true)?;
        Ok(Self::with_parts(dir, opts, true, partitions, lock))
    }

    fn with_parts(
        dir: PathBuf,
        opts: EmbeddedOptions,
        read_only: bool,
        partitions: BTreeMap<i64, Arc<Partition>>,
        lock: Option<File>,
    ) -> Self {
        EmbeddedStore {
            catalog: catalog::Catalog::new(&dir),
            dir,
            opts,
            read_only,
            partitions: RwLock::new(partitions),
            torn_tails: AtomicU64::new(0),
            bytes_dropped: AtomicU64::new(0),
            damage_counters: DamageCounters::default(),
            expired_seq: AtomicU64::new(0),
            _lock: lock,
        }
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Torn tails found and cut off since open.
    pub fn recovery_stats(&self) -> RecoveryStats {
        RecoveryStats {
            torn_tails: self.torn_tails.load(Ordering::Relaxed),
            bytes_dropped: self.bytes_dropped.load(Ordering::Relaxed),
        }
    }

    /// Whether this store was opened with [`open_read_only`](EmbeddedStore::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<i64, Arc<Partition>>> {
        self.partitions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn map_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<i64, Arc<Partition>>> {
        self.partitions.write().unwrap_or_else(|e| e.into_inner())
    }

    fn existing(&self, epoch: i64) -> Option<Arc<Partition>> {
        self.map()
            .get(&self.opts.retention.partition_of(epoch))
            .cloned()
    }

    /// The partition and location of a stored blob (`None`: not stored).
    fn locate(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<(Arc<Partition>, Loc)>> {
        check_key(ns, key)?;
        let Some(p) = self.existing(key.epoch) else {
            return Ok(None);
        };
        let log = self.blobs(&p)?;
        let id = blob_id(&ns.as_str(), key.epoch, key.key);
        let loc = read_lock(&log.index).get(&id).copied();
        Ok(loc.map(|loc| (p, loc)))
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(StoreError::invalid(format!(
                "{} is opened read-only",
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// The partitions holding any epoch of `from..to` (`from < to`), oldest first.
    fn partitions_overlapping(&self, from: i64, to: i64) -> Vec<Arc<Partition>> {
        let first = self.opts.retention.partition_of(from);
        self.map()
            .range(first..to)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// The partition of `epoch`, creating its directory if it does not exist yet.
    fn partition_for_write(&self, epoch: i64) -> Result<Arc<Partition>> {
        self.check_writable()?;
        if let Some(p) = self.existing(epoch) {
            return Ok(p);
        }
        let start = self.opts.retention.partition_of(epoch);
        let mut map = self.map_mut();
        if let Some(p) = map.get(&start) {
            return Ok(p.clone());
        }
        let path = self.dir.join(partition_name(start));
        fs::create_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
        // Make the new directory entry durable before anything is written into it.
        sync_dir(&self.dir)?;
        let p = Arc::new(Partition::new(start, path));
        map.insert(start, p.clone());
        Ok(p)
    }

    fn blobs<'p>(&self, p: &'p Partition) -> Result<&'p BlobLog> {
        if let Some(b) = p.blobs.get() {
            return Ok(b);
        }
        let _guard = lock(&p.load_lock);
        self.blobs_locked(p)
    }

    /// Loads the blob log; the caller holds `p.load_lock`.
    fn blobs_locked<'p>(&self, p: &'p Partition) -> Result<&'p BlobLog> {
        if let Some(b) = p.blobs.get() {
            return Ok(b);
        }
        let path = p.dir.join(BLOBS_FILE);
        let (log, scan) = BlobLog::load(&path, self.read_only, &*self.opts.blob_format)?;
        let mut found = Vec::new();
        for (offset, len) in &scan.skipped {
            found.push(Damage {
                location: path.display().to_string(),
                offset: *offset,
                len: *len,
                kind: DamageKind::Skipped,
                what: "invalid blob record header (fails its CRC or its lengths): skipped, \
                       the blob(s) in this range are lost"
                    .into(),
            });
        }
        for s in &scan.salvaged {
            let (ns, key) = s.id.1.split_once('\0').unwrap_or(("?", &s.id.1));
            found.push(Damage {
                location: path.display().to_string(),
                offset: s.offset,
                len: s.names_len,
                kind: DamageKind::Salvaged,
                what: format!(
                    "blob {key} (namespace {ns}, epoch {}): its record header fails its CRC, but \
                     its lengths lead to the next valid record or the end of the log and its \
                     value passes its own =chk SHA-1: salvaged, read as stored (a repair \
                     rewrites the header)",
                    s.id.0
                ),
            });
        }
        found.sort_by_key(|d| d.offset);
        self.damage_counters
            .salvaged
            .fetch_add(scan.salvaged.len() as u64, Ordering::Relaxed);
        self.note_load(&path, &scan.skipped, scan.torn, &mut found);
        lock(&p.damage).extend(found);
        Ok(p.blobs.get_or_init(|| log))
    }

    fn meta<'p>(&self, p: &'p Partition) -> Result<&'p MetaLog> {
        if let Some(m) = p.meta.get() {
            return Ok(m);
        }
        let _guard = lock(&p.load_lock);
        if let Some(m) = p.meta.get() {
            return Ok(m);
        }
        let path = p.dir.join(META_FILE);
        let (log, scan) = MetaLog::load(&path, self.read_only)?;
        let mut rebuilt = 0;
        if !scan.skipped.is_empty() || scan.torn.is_some() {
            // Index records may be lost with the damage: list every stored events blob again.
            let blobs = self.blobs_locked(p)?;
            let missing = {
                let index = read_lock(&log.index);
                missing_index_entries(&read_lock(&blobs.index), &index, &*self.opts.blob_format)
            };
            // A cut tail leaves no damage behind to trigger this rebuild on the next load, so
            // the writer logs what it rebuilt; mid-log damage stays and is rebuilt every time.
            if !self.read_only && scan.torn.is_some() {
                let mut len = lock(&log.file.len);
                for ((epoch, dc), entries) in &missing {
                    let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
                    log.file
                        .append(&mut len, &record::encode_index_add(None, *epoch, dc, &refs))?;
                }
            }
            let mut index = write_lock(&log.index);
            for (id, entries) in missing {
                rebuilt += entries.len() as u64;
                index.entry(id).or_default().extend(entries);
            }
        }
        self.damage_counters
            .rebuilt
            .fetch_add(rebuilt, Ordering::Relaxed);
        let mut found = Vec::new();
        for (offset, len) in &scan.skipped {
            found.push(Damage {
                location: path.display().to_string(),
                offset: *offset,
                len: *len,
                kind: DamageKind::Skipped,
                what: format!(
                    "invalid meta record(s) (fail their CRC or length): skipped; the epoch index \
                     is rebuilt from the blob keys (entries rebuilt in this partition: {rebuilt}), \
                     completeness counts in this range are lost"
                ),
            });
        }
        self.note_load(&path, &scan.skipped, scan.torn, &mut found);
        lock(&p.damage).extend(found);
        Ok(p.meta.get_or_init(|| log))
    }

    /// Counts what a load found; a torn tail left in place (read-only) is reported as damage.
    fn note_load(
        &self,
        path: &Path,
        skipped: &[(u64, u64)],
        torn: Option<(u64, u64)>,
        found: &mut Vec<Damage>,
    ) {
        let c = &self.damage_counters;
        c.ranges.fetch_add(skipped.len() as u64, Ordering::Relaxed);
        let bytes: u64 = skipped.iter().map(|(_, len)| len).sum();
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        let Some((offset, len)) = torn else { return };
        c.torn_tails.fetch_add(1, Ordering::Relaxed);
        c.torn_bytes.fetch_add(len, Ordering::Relaxed);
        if self.read_only {
            found.push(Damage {
                location: path.display().to_string(),
                offset,
                len,
                kind: DamageKind::TornTail,
                what: "torn tail (an incomplete last write): ignored here, cut by the writer \
                       when it next opens the directory"
                    .into(),
            });
        } else {
            self.torn_tails.fetch_add(1, Ordering::Relaxed);
            self.bytes_dropped.fetch_add(len, Ordering::Relaxed);
        }
    }

    /// Loads every partition and verifies every blob value (reads all the data): the damage
    /// found, partition by partition. Changes nothing (torn tails are cut only if this store is
    /// a writer, as any load does).
    pub fn check(&self) -> Result<CheckReport> {
        let parts: Vec<Arc<Partition>> = self.map().values().cloned().collect();
        let mut report = CheckReport::default();
        for p in parts {
            let meta = self.meta(&p)?;
            let blobs = self.blobs(&p)?;
            report.partitions += 1;
            report.epochs += read_lock(&meta.index).len() as u64;
            let locs: Vec<(BlobId, Loc)> = read_lock(&blobs.index)
                .iter()
                .map(|(id, loc)| (id.clone(), *loc))
                .collect();
            report.blobs += locs.len() as u64;
            let path = p.dir.join(BLOBS_FILE);
            let mut bad = Vec::new();
            for (id, loc) in locs {
                report.blob_bytes += u64::from(loc.value_len);
                let key = id.1.replace('\0', "/");
                match blobs.read(&loc, &key) {
                    Ok(_) => {}
                    Err(StoreError::Corrupted { reason, .. }) => bad.push(Damage {
                        location: path.display().to_string(),
                        offset: loc.value_off,
                        len: u64::from(loc.value_len),
                        kind: DamageKind::BadValue,
                        what: format!("value of blob {key} (epoch {}): {reason}", id.0),
                    }),
                    Err(e) => return Err(e),
                }
            }
            bad.sort_by_key(|d| d.offset);
            report.damage.extend(lock(&p.damage).iter().cloned());
            report.damage.extend(bad);
        }
        Ok(report)
    }

    /// Writes a clean copy of every damaged log under `dir` (valid records only; a rebuilt
    /// epoch index when index records were lost), keeps each damaged original as
    /// `<log>.damaged-<unix time>`, fsyncs. Takes the directory's exclusive lock, so it refuses
    /// ([`StoreError::Locked`]) while a server or a reader has it open.
    pub fn repair(dir: impl AsRef<Path>) -> Result<RepairReport> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(StoreError::NotFound {
                what: format!("data directory {}", dir.display()),
            });
        }
        let _lock = lock_dir(dir, false)?;
        let partition_secs = read_format(dir)?;
        let retention = Retention {
            partition_secs,
            ..Retention::default()
        };
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut report = RepairReport::default();
        let format = CodecFormat;
        for p in list_partitions(dir, &retention, true)?.into_values() {
            repair_partition(&p.dir, stamp, &format, &mut report)?;
        }
        Ok(report)
    }

    fn after_write(&self, file: &LogFile) -> Result<()> {
        match self.opts.durability {
            Durability::Immediate => file.sync(),
            Durability::OnFlush => Ok(()),
        }
    }

    /// Puts one blob into `log` while the caller holds its writer lock (`len`).
    fn put_locked(
        log: &BlobLog,
        len: &mut MutexGuard<'_, u64>,
        ns_name: &str,
        key: BlobKey<'_>,
        bytes: &[u8],
    ) -> Result<PutOutcome> {
        let id = blob_id(ns_name, key.epoch, key.key);
        let existing = read_lock(&log.index).get(&id).copied();
        if let Some(loc) = existing {
            let stored = log.read(&loc, key.key)?;
            return if stored == bytes {
                Ok(PutOutcome::AlreadyPresent)
            } else {
                Err(StoreError::Exists {
                    key: key.key.to_owned(),
                })
            };
        }
        let (record, value_crc) =
            record::encode_blob(ns_name.as_bytes(), key.epoch, key.key.as_bytes(), bytes);
        log.file.append(len, &record)?;
        let loc = Loc {
            value_off: **len - bytes.len() as u64,
            value_len: bytes.len() as u32,
            value_crc,
        };
        write_lock(&log.index).insert(id, loc);
        Ok(PutOutcome::Written)
    }

    /// The counts add of [`Store::add_counts`] (`write: None`) and
    /// [`Store::add_counts_once`]: one meta record, appended with the token under the log's
    /// writer lock, so a token is applied (in memory and in the file) at most once.
    /// Adds index entries of the events index (`ns` = `None`) or of the namespace `ns`.
    fn add_index_entries(
        &self,
        ns: Option<&str>,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        check_entries(dc, entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        loop {
            let p = self.partition_for_write(epoch)?;
            let log = self.meta(&p)?;
            let mut len = lock(&log.file.len);
            if p.retired.load(Ordering::Acquire) {
                continue; // purged meanwhile: write to its copy
            }
            let id = (epoch, dc.to_owned());
            // Only the entries not yet present are logged (the writer lock makes this exact).
            let fresh: Vec<&str> = log.with_index(ns, |index| {
                let have = index.and_then(|i| i.get(&id));
                let mut seen = BTreeSet::new();
                entries
                    .iter()
                    .copied()
                    .filter(|e| !have.is_some_and(|h| h.contains(*e)) && seen.insert(*e))
                    .collect()
            });
            if fresh.is_empty() {
                return Ok(());
            }
            log.file
                .append(&mut len, &record::encode_index_add(ns, epoch, dc, &fresh))?;
            log.extend_index(ns, id, fresh.iter().map(|e| (*e).to_owned()));
            drop(len);
            return self.after_write(&log.file);
        }
    }

    /// The entries of `(epoch, dc)` in the events index (`ns` = `None`) or the namespace `ns`.
    fn index_entries(&self, ns: Option<&str>, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        let Some(p) = self.existing(epoch) else {
            return Ok(BTreeSet::new());
        };
        let log = self.meta(&p)?;
        let id = (epoch, dc.to_owned());
        Ok(log.with_index(ns, |index| {
            index.and_then(|i| i.get(&id)).cloned().unwrap_or_default()
        }))
    }

    fn add_counts_record(
        &self,
        write: Option<CountsWrite<'_>>,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        check_counts(dc, event_type, subtype, counts)?;
        if let Some(w) = write {
            check_counts_write(w)?;
        }
        if counts.is_zero() {
            return Ok(());
        }
        loop {
            let p = self.partition_for_write(epoch)?;
            let log = self.meta(&p)?;
            let mut len = lock(&log.file.len);
            if p.retired.load(Ordering::Acquire) {
                continue; // purged meanwhile: write to its copy
            }
            let token = write.map(|w| applied_token(epoch, dc, w.writer, w.batch));
            if let Some(t) = &token {
                if read_lock(&log.applied).contains(t) {
                    return Ok(());
                }
            }
            let rec = record::encode_counts_add(
                epoch,
                dc,
                write.map(|w| (w.writer, w.batch)),
                event_type,
                subtype,
                counts,
            );
            log.file.append(&mut len, &rec)?;
            if let Some(t) = token {
                write_lock(&log.applied).insert(t);
            }
            write_lock(&log.counts)
                .entry((epoch, dc.to_owned()))
                .or_default()
                .entry((event_type.to_owned(), subtype.to_owned()))
                .or_default()
                .merge(counts);
            drop(len);
            return self.after_write(&log.file);
        }
    }
}

impl Store for EmbeddedStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        check_put(ns, key, bytes)?;
        let ns_name = ns.as_str();
        loop {
            let p = self.partition_for_write(key.epoch)?;
            let log = self.blobs(&p)?;
            let mut len = lock(&log.file.len);
            if p.retired.load(Ordering::Acquire) {
                continue; // purged meanwhile: write to its copy
            }
            let outcome = Self::put_locked(log, &mut len, &ns_name, key, bytes)?;
            drop(len);
            // Also after `AlreadyPresent`: it may be the retry of a put whose sync failed.
            self.after_write(&log.file)?;
            return Ok(outcome);
        }
    }

    /// Items of one partition that follow each other are appended under one hold of the log's
    /// writer lock, and with [`Durability::Immediate`] share one fdatasync.
    fn put_blobs(&self, ns: &Namespace, items: &[(BlobKey<'_>, &[u8])]) -> Vec<Result<PutOutcome>> {
        let ns_name = ns.as_str();
        let mut out: Vec<Result<PutOutcome>> = Vec::with_capacity(items.len());
        let mut i = 0;
        while i < items.len() {
            let part = self.opts.retention.partition_of(items[i].0.epoch);
            let end = items[i..]
                .iter()
                .position(|(k, _)| self.opts.retention.partition_of(k.epoch) != part)
                .map_or(items.len(), |n| i + n);
            let run = &items[i..end];
            i = end;
            let (first_key, first_bytes) = run[0];
            if let Err(e) = check_put(ns, first_key, first_bytes) {
                out.push(Err(e));
                return out;
            }
            let first = out.len();
            let mut failed = false;
            loop {
                let p = match self.partition_for_write(first_key.epoch) {
                    Ok(p) => p,
                    Err(e) => {
                        out.push(Err(e));
                        return out;
                    }
                };
                let log = match self.blobs(&p) {
                    Ok(log) => log,
                    Err(e) => {
                        out.push(Err(e));
                        return out;
                    }
                };
                let mut len = lock(&log.file.len);
                if p.retired.load(Ordering::Acquire) {
                    continue; // purged meanwhile: write to its copy
                }
                for (key, bytes) in run {
                    let r = check_put(ns, *key, bytes)
                        .and_then(|()| Self::put_locked(log, &mut len, &ns_name, *key, bytes));
                    failed = r.is_err();
                    out.push(r);
                    if failed {
                        break;
                    }
                }
                drop(len);
                // Also after `AlreadyPresent` only: it may be the retry of a put whose sync
                // failed.
                if out[first..].iter().any(Result::is_ok) {
                    if let Err(e) = self.after_write(&log.file) {
                        // Handed to the kernel but not synced as `Immediate` promises: the run's
                        // first write reports it, as a lone `put_blob` would (a retry is
                        // harmless).
                        out.truncate(first);
                        out.push(Err(e));
                        return out;
                    }
                }
                break;
            }
            if failed {
                return out;
            }
        }
        out
    }

    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        let Some((p, loc)) = self.locate(ns, key)? else {
            return Ok(None);
        };
        self.blobs(&p)?.read(&loc, key.key).map(Some)
    }

    /// Yes: every value is read against the CRC-32 written with it (`read_into`).
    fn checks_each_read(&self) -> bool {
        true
    }

    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        let threads = self.opts.read_threads.min(keys.len());
        if threads <= 1 {
            return keys.iter().map(|k| self.get_blob(ns, *k)).collect();
        }
        // Located and allocated here, read on the threads. The buffers are allocated by the
        // calling thread, which is also the one that frees them: a buffer allocated on a fetch
        // thread outlives that thread, so the allocator cannot reuse its pages and each batch
        // faulted in (and the kernel zeroed) fresh memory — 7 % of a page-cache read's CPU
        // (docs/decisions.md, "Embedded store and the `Store` trait"; numbers under "Reader and
        // queries").
        let mut results: Vec<Option<GetResult>> = Vec::new();
        results.resize_with(keys.len(), || None);
        let mut groups: Vec<Vec<FetchJob>> = (0..threads).map(|_| Vec::new()).collect();
        let mut queued = 0usize;
        for (i, key) in keys.iter().enumerate() {
            match self.locate(ns, *key) {
                Ok(Some((partition, loc))) => {
                    groups[queued % threads].push(FetchJob {
                        index: i,
                        partition,
                        loc,
                        buf: vec![0u8; loc.value_len as usize],
                    });
                    queued += 1;
                }
                Ok(None) => results[i] = Some(Ok(None)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        groups.retain(|g| !g.is_empty());
        let parts: Vec<Vec<(usize, GetResult)>> = std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|jobs| {
                    s.spawn(move || {
                        jobs.into_iter()
                            .map(|mut job| {
                                let key = keys[job.index].key;
                                let r = self
                                    .blobs(&job.partition)
                                    .and_then(|log| log.read_into(&job.loc, key, &mut job.buf))
                                    .map(|()| Some(job.buf));
                                (job.index, r)
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        for (i, r) in parts.into_iter().flatten() {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(StoreError::Unavailable {
                        reason: "a read thread panicked".into(),
                    })
                })
            })
            .collect()
    }

    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        self.add_index_entries(None, epoch, dc, entries)
    }

    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        self.index_entries(None, epoch, dc)
    }

    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        ns.validate()?;
        match ns {
            Namespace::Events => self.add_index_entries(None, epoch, dc, entries),
            Namespace::Substream(_) => {
                self.add_index_entries(Some(&ns.as_str()), epoch, dc, entries)
            }
        }
    }

    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        ns.validate()?;
        match ns {
            Namespace::Events => self.index_entries(None, epoch, dc),
            Namespace::Substream(_) => self.index_entries(Some(&ns.as_str()), epoch, dc),
        }
    }

    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        self.check_writable()?;
        self.catalog.put(kind, name, value)
    }

    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        self.catalog.get(kind)
    }

    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        self.add_counts_record(None, epoch, dc, event_type, subtype, counts)
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
        self.add_counts_record(Some(write), epoch, dc, event_type, subtype, counts)
    }

    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        let Some(p) = self.existing(epoch) else {
            return Ok(BTreeMap::new());
        };
        let log = self.meta(&p)?;
        let counts = read_lock(&log.counts);
        Ok(counts
            .get(&(epoch, dc.to_owned()))
            .cloned()
            .unwrap_or_default())
    }

    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let parts = self.partitions_overlapping(from, to);
        for p in parts {
            let log = self.meta(&p)?;
            let index = read_lock(&log.index);
            for ((epoch, d), set) in index.range((from, String::new())..) {
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
        self.check_writable()?;
        let mut report = ExpireReport::default();
        let mut doomed = Vec::new();
        // A partition lives as long as its longest-kept group; shorter-kept groups are purged.
        let mut whole = self.opts.retention;
        if !self.opts.type_retention.is_empty() {
            whole.period_secs = whole.period_secs.max(self.opts.type_retention.longest());
        }
        {
            // Under the map lock: take the partitions out and rename their directories, so a
            // write arriving for the same hour makes a fresh directory, never a half-deleted one.
            let mut map = self.map_mut();
            let starts: Vec<i64> = map
                .keys()
                .copied()
                .take_while(|s| whole.is_expired(*s, now))
                .collect();
            for start in starts {
                let Some(p) = map.remove(&start) else {
                    continue;
                };
                let seq = self.expired_seq.fetch_add(1, Ordering::Relaxed);
                let gone = p
                    .dir
                    .with_file_name(format!("{}.{seq}{EXPIRED_SUFFIX}", partition_name(start)));
                match fs::rename(&p.dir, &gone) {
                    Ok(()) => doomed.push(gone),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        map.insert(start, p.clone());
                        return Err(StoreError::io(&p.dir, e));
                    }
                }
                report.partitions_dropped += 1;
            }
        }
        for dir in doomed {
            for f in [BLOBS_FILE, META_FILE] {
                report.bytes_freed += fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
            }
            fs::remove_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        }
        self.purge_expired_groups(now, &mut report)?;
        Ok(report)
    }

    fn flush(&self) -> Result<()> {
        let parts: Vec<Arc<Partition>> = self.map().values().cloned().collect();
        // Blobs before metadata, so metadata never outlives the data it lists.
        for p in &parts {
            if let Some(b) = p.blobs.get() {
                b.file.sync_if_dirty()?;
            }
        }
        for p in &parts {
            if let Some(m) = p.meta.get() {
                m.file.sync_if_dirty()?;
            }
        }
        Ok(())
    }

    fn retention(&self) -> Retention {
        self.opts.retention
    }

    fn damage(&self, from: i64, to: i64) -> Result<Vec<Damage>> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let parts = self.partitions_overlapping(from, to);
        for p in parts {
            self.meta(&p)?;
            self.blobs(&p)?;
            out.extend(lock(&p.damage).iter().cloned());
        }
        Ok(out)
    }

    fn usage(&self) -> Option<StoreUsage> {
        let parts: Vec<(i64, PathBuf)> = self
            .map()
            .iter()
            .map(|(start, p)| (*start, p.dir.clone()))
            .collect();
        let size = |path: &Path| fs::metadata(path).map_or(0, |m| m.len());
        let mut bytes = size(&self.dir.join(catalog::CATALOG_FILE));
        for (_, dir) in &parts {
            bytes += size(&dir.join(BLOBS_FILE)) + size(&dir.join(META_FILE));
        }
        Some(StoreUsage {
            bytes,
            partitions: parts.len() as u64,
            oldest_epoch: parts.first().map(|(start, _)| *start),
        })
    }

    fn damage_stats(&self) -> DamageStats {
        let c = &self.damage_counters;
        DamageStats {
            damaged_ranges: c.ranges.load(Ordering::Relaxed),
            damaged_bytes: c.bytes.load(Ordering::Relaxed),
            torn_tails: c.torn_tails.load(Ordering::Relaxed),
            torn_tail_bytes: c.torn_bytes.load(Ordering::Relaxed),
            index_entries_rebuilt: c.rebuilt.load(Ordering::Relaxed),
            salvaged_records: c.salvaged.load(Ordering::Relaxed),
        }
    }
}

/// What [`EmbeddedStore::check`] found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// Partitions checked.
    pub partitions: u64,
    /// `(epoch, dc)` pairs with an epoch index.
    pub epochs: u64,
    /// Blobs indexed (values verified).
    pub blobs: u64,
    /// Bytes of those values.
    pub blob_bytes: u64,
    /// Every damaged range, partition by partition, in file order.
    pub damage: Vec<Damage>,
}

/// What [`EmbeddedStore::repair`] did.
#[derive(Clone, Debug, Default)]
pub struct RepairReport {
    /// Logs scanned.
    pub logs_checked: u64,
    /// Logs rewritten: `(log, where the damaged original was kept)`.
    pub replaced: Vec<(PathBuf, PathBuf)>,
    /// Blob records copied into the clean copies.
    pub blobs_kept: u64,
    /// Blob records dropped because their value fails its CRC.
    pub bad_values_dropped: u64,
    /// Bytes of the originals left out of the clean copies (damage, torn tails, bad values).
    pub bytes_left_out: u64,
    /// Epoch index entries rebuilt from blob keys and written into clean `meta.log`s.
    pub index_entries_rebuilt: u64,
    /// Salvaged blob records (header damaged, value proven by its `=chk` SHA-1) copied with a
    /// rewritten, valid header (also counted in `blobs_kept`).
    pub headers_rewritten: u64,
}

/// The result of one get.
type GetResult = Result<Option<Vec<u8>>>;

/// One blob [`Store::get_blobs`] reads on a fetch thread, into a buffer the caller allocated.
struct FetchJob {
    index: usize,
    partition: Arc<Partition>,
    loc: Loc,
    buf: Vec<u8>,
}

/// One time partition; its logs are loaded on first use.
struct Partition {
    /// Its first epoch.
    start: i64,
    dir: PathBuf,
    /// Replaced by a purged copy (`purge.rs`): a writer that sees this under a log's writer
    /// lock takes the partition again from the map.
    retired: AtomicBool,
    load_lock: Mutex<()>,
    blobs: OnceLock<BlobLog>,
    meta: OnceLock<MetaLog>,
    /// What loading its logs found (skipped ranges; torn tails when read-only).
    damage: Mutex<Vec<Damage>>,
}

impl Partition {
    fn new(start: i64, dir: PathBuf) -> Self {
        Partition {
            start,
            dir,
            retired: AtomicBool::new(false),
            load_lock: Mutex::new(()),
            blobs: OnceLock::new(),
            meta: OnceLock::new(),
            damage: Mutex::new(Vec::new()),
        }
    }
}

// Poisoning only says that another thread panicked while holding the lock; every critical
// section here leaves the maps consistent at each step, so the data is taken as is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
