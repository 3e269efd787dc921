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

mod catalog;
mod record;

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
    /// return. Costs one disk flush per call (see docs/decisions.md for the numbers).
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
    /// When writes are durable.
    pub durability: Durability,
    /// Threads used by [`Store::get_blobs`] (at most; 1 = sequential).
    pub read_threads: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            retention: Retention::default(),
            durability: Durability::default(),
            read_threads: 4,
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
        let p = Arc::new(Partition::new(path));
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
        let (log, scan) = BlobLog::load(&path, self.read_only)?;
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
                missing_index_entries(&read_lock(&blobs.index), &index)
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
        for p in list_partitions(dir, &retention, true)?.into_values() {
            repair_partition(&p.dir, stamp, &mut report)?;
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
        let p = self.partition_for_write(epoch)?;
        let log = self.meta(&p)?;
        {
            let mut len = lock(&log.file.len);
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
        }
        self.after_write(&log.file)
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
        let p = self.partition_for_write(epoch)?;
        let log = self.meta(&p)?;
        {
            let mut len = lock(&log.file.len);
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
        }
        self.after_write(&log.file)
    }
}

impl Store for EmbeddedStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        check_put(ns, key, bytes)?;
        let p = self.partition_for_write(key.epoch)?;
        let log = self.blobs(&p)?;
        let ns_name = ns.as_str();
        let outcome = {
            let mut len = lock(&log.file.len);
            Self::put_locked(log, &mut len, &ns_name, key, bytes)?
        };
        // Also after `AlreadyPresent`: it may be the retry of a put whose sync failed.
        self.after_write(&log.file)?;
        Ok(outcome)
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
            let opened = check_put(ns, first_key, first_bytes)
                .and_then(|()| self.partition_for_write(first_key.epoch));
            let p = match opened {
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
            let first = out.len();
            let mut failed = false;
            {
                let mut len = lock(&log.file.len);
                for (key, bytes) in run {
                    let r = check_put(ns, *key, bytes)
                        .and_then(|()| Self::put_locked(log, &mut len, &ns_name, *key, bytes));
                    failed = r.is_err();
                    out.push(r);
                    if failed {
                        break;
                    }
                }
            }
            // Also after `AlreadyPresent` only: it may be the retry of a put whose sync failed.
            if out[first..].iter().any(Result::is_ok) {
                if let Err(e) = self.after_write(&log.file) {
                    // Handed to the kernel but not synced as `Immediate` promises: the run's
                    // first write reports it, as a lone `put_blob` would (a retry is harmless).
                    out.truncate(first);
                    out.push(Err(e));
                    return out;
                }
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
        // (docs/decisions.md, "Read CPU, round three").
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
        {
            // Under the map lock: take the partitions out and rename their directories, so a
            // write arriving for the same hour makes a fresh directory, never a half-deleted one.
            let mut map = self.map_mut();
            let starts: Vec<i64> = map
                .keys()
                .copied()
                .take_while(|s| self.opts.retention.is_expired(*s, now))
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
    dir: PathBuf,
    load_lock: Mutex<()>,
    blobs: OnceLock<BlobLog>,
    meta: OnceLock<MetaLog>,
    /// What loading its logs found (skipped ranges; torn tails when read-only).
    damage: Mutex<Vec<Damage>>,
}

impl Partition {
    fn new(dir: PathBuf) -> Self {
        Partition {
            dir,
            load_lock: Mutex::new(()),
            blobs: OnceLock::new(),
            meta: OnceLock::new(),
            damage: Mutex::new(Vec::new()),
        }
    }
}

/// An append-only file: a writer lock holding the current length, and a dirty flag for `flush`.
struct LogFile {
    path: PathBuf,
    /// `None`: a read-only store on a log that does not exist (an empty log).
    file: Option<File>,
    len: Mutex<u64>,
    dirty: AtomicBool,
}

impl LogFile {
    /// Opens the file for reading and appending (creating it), or for reading only (never
    /// creating it: a missing log is an empty one).
    fn open(path: &Path, read_only: bool) -> Result<(LogFile, u64)> {
        let file = if read_only {
            match File::open(path) {
                Ok(f) => Some(f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(StoreError::io(path, e)),
            }
        } else {
            let existed = path.exists();
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| StoreError::io(path, e))?;
            if !existed {
                if let Some(parent) = path.parent() {
                    sync_dir(parent)?;
                }
            }
            Some(f)
        };
        let len = match &file {
            Some(f) => f.metadata().map_err(|e| StoreError::io(path, e))?.len(),
            None => 0,
        };
        let log = LogFile {
            path: path.to_path_buf(),
            file,
            len: Mutex::new(0),
            dirty: AtomicBool::new(false),
        };
        Ok((log, len))
    }

    fn handle(&self) -> Result<&File> {
        self.file.as_ref().ok_or_else(|| StoreError::NotFound {
            what: self.path.display().to_string(),
        })
    }

    /// Appends `bytes` at `*len` (the caller holds the writer lock). On failure the file is cut
    /// back to `*len`, so a failed write never leaves a partial record before later ones.
    fn append(&self, len: &mut MutexGuard<'_, u64>, bytes: &[u8]) -> Result<()> {
        let file = self.handle()?;
        let at = **len;
        if let Err(e) = file.write_all_at(bytes, at) {
            let _ = file.set_len(at);
            return Err(StoreError::io(&self.path, e));
        }
        **len = at + bytes.len() as u64;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.handle()?
            .sync_data()
            .map_err(|e| StoreError::io(&self.path, e))
    }

    fn sync_if_dirty(&self) -> Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.sync() {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Cuts the file at `at` (dropping a torn tail) and makes that durable. Writers only.
    fn truncate(&self, at: u64) -> Result<()> {
        self.handle()?
            .set_len(at)
            .map_err(|e| StoreError::io(&self.path, e))?;
        self.sync()
    }
}

/// Where a blob's value is in `blobs.log`.
#[derive(Clone, Copy)]
struct Loc {
    value_off: u64,
    value_len: u32,
    value_crc: u32,
}

/// `(epoch, "<namespace>\0<key>")`.
type BlobId = (i64, Box<str>);

fn blob_id(ns: &str, epoch: i64, key: &str) -> BlobId {
    let mut s = String::with_capacity(ns.len() + 1 + key.len());
    s.push_str(ns);
    s.push('\0');
    s.push_str(key);
    (epoch, s.into_boxed_str())
}

struct BlobLog {
    file: LogFile,
    index: RwLock<HashMap<BlobId, Loc>>,
}

/// What a walk of a log found besides its records.
struct LogScan {
    /// Ranges `(offset, len)` in the middle of the log that hold no valid record.
    skipped: Vec<(u64, u64)>,
    /// The torn tail `(offset, len)`: bytes after the last valid record that hold none.
    torn: Option<(u64, u64)>,
    /// Blob records whose header fails its CRC but whose value proves itself (`blobs.log`
    /// only; see [`salvage_blob_at`]), in log order.
    salvaged: Vec<Salvaged>,
}

/// A blob record salvaged despite its damaged header (see the module docs).
struct Salvaged {
    /// Where the record starts.
    offset: u64,
    /// The whole record.
    len: u64,
    /// Header, namespace and key: the bytes its failed CRC covers.
    names_len: u64,
    id: BlobId,
    /// Its value, with the CRC-32 computed from the value (proven by its SHA-1).
    loc: Loc,
}

/// Keeps each salvaged record of `scan` that `claim` accepts (it takes the record's key: no
/// valid record, nor an earlier salvaged one, holds it); the others become skipped ranges. A
/// salvaged record never takes the place of a valid record: write-once, so a second record of
/// a key can only come from damage (a flipped character in a key).
fn settle_salvaged(scan: &mut LogScan, mut claim: impl FnMut(&Salvaged) -> bool) {
    let mut refused = false;
    for s in std::mem::take(&mut scan.salvaged) {
        if claim(&s) {
            scan.salvaged.push(s);
        } else {
            scan.skipped.push((s.offset, s.len));
            refused = true;
        }
    }
    if refused {
        scan.skipped.sort_unstable();
    }
}

impl BlobLog {
    /// Rebuilds the index by walking the record headers (values are skipped, except the last
    /// record's, which is verified because a torn write may have left it incomplete). Damage in
    /// the middle is skipped (see the module docs); a writer cuts the torn tail, a read-only
    /// store leaves it.
    fn load(path: &Path, read_only: bool) -> Result<(BlobLog, LogScan)> {
        let (file, file_len) = LogFile::open(path, read_only)?;
        let mut index = HashMap::new();
        let mut scan = match &file.file {
            Some(f) => scan_blobs(f, path, file_len, |_, id, loc, _| {
                // Write-once: a duplicate can only come from a bug; the first record wins.
                index.entry(id).or_insert(loc);
            })?,
            None => LogScan {
                skipped: Vec::new(),
                torn: None,
                salvaged: Vec::new(),
            },
        };
        settle_salvaged(&mut scan, |s| match index.entry(s.id.clone()) {
            Entry::Vacant(slot) => {
                slot.insert(s.loc);
                true
            }
            Entry::Occupied(_) => false,
        });
        let mut end = file_len;
        if let Some((at, _)) = scan.torn {
            end = at;
            if !read_only {
                file.truncate(at)?;
            }
        }
        *lock(&file.len) = end;
        Ok((
            BlobLog {
                file,
                index: RwLock::new(index),
            },
            scan,
        ))
    }

    fn read(&self, loc: &Loc, key: &str) -> Result<Vec<u8>> {
        let mut v = vec![0u8; loc.value_len as usize];
        self.read_into(loc, key, &mut v)?;
        Ok(v)
    }

    /// Reads the value at `loc` into `v` (exactly `loc.value_len` bytes) and checks its CRC-32.
    fn read_into(&self, loc: &Loc, key: &str, v: &mut [u8]) -> Result<()> {
        self.file
            .handle()?
            .read_exact_at(v, loc.value_off)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    StoreError::corrupted(key, "blob extends past the end of its log")
                } else {
                    StoreError::io(&self.file.path, e)
                }
            })?;
        if crc32fast::hash(v) != loc.value_crc {
            return Err(StoreError::corrupted(key, "stored value fails its CRC-32"));
        }
        Ok(())
    }
}

/// Walks the headers of a blob log of `file_len` bytes, calling `on_record(offset, id, loc,
/// record length)` for each valid record in order. A record whose header fails its CRC but
/// that [`salvage_blob_at`] proves is listed in [`LogScan::salvaged`] (not passed to
/// `on_record`; the caller settles it with [`settle_salvaged`]). Other mid-log damage is
/// skipped by [`resync_blobs`]; the last record's value is verified (a torn write) when it
/// ends the file.
fn scan_blobs(
    file: &File,
    path: &Path,
    file_len: u64,
    mut on_record: impl FnMut(u64, BlobId, Loc, u64),
) -> Result<LogScan> {
    let mut pos = 0u64;
    let mut pending: Option<(u64, BlobId, Loc, u64)> = None;
    let window = BLOB_HEADER_LEN + MAX_NAME_LEN + MAX_KEY_LEN;
    let mut buf = vec![0u8; window];
    let mut skipped = Vec::new();
    let mut salvaged = Vec::new();
    let mut unknown_kind = false;
    while pos < file_len {
        let want = window.min((file_len - pos) as usize);
        file.read_exact_at(&mut buf[..want], pos)
            .map_err(|e| StoreError::io(path, e))?;
        if let Some((id, loc, rec_len)) =
            parse_blob_at(&buf[..want], pos, file_len, &mut unknown_kind)
        {
            if let Some((at, id, loc, len)) = pending.take() {
                on_record(at, id, loc, len);
            }
            pending = Some((pos, id, loc, rec_len));
            pos += rec_len;
            continue;
        }
        if unknown_kind {
            return Err(StoreError::corrupted(
                format!("{}@{pos}", path.display()),
                "record of an unknown kind (written by a newer version?)",
            ));
        }
        let found = salvage_blob_at(file, path, &buf[..want], pos, file_len, true)?;
        if let Some((id, loc, rec_len)) = found {
            if let Some((at, id, loc, len)) = pending.take() {
                on_record(at, id, loc, len);
            }
            salvaged.push(Salvaged {
                offset: pos,
                len: rec_len,
                names_len: loc.value_off - pos,
                id,
                loc,
            });
            pos += rec_len;
            continue;
        }
        match resync_blobs(file, path, pos + 1, file_len)? {
            Some(next) => {
                skipped.push((pos, next - pos));
                pos = next;
            }
            None => break,
        }
    }
    // A record whose header made it but whose value did not (or was zero-filled by a crash
    // after the size was extended) is the torn tail too.
    if let Some((start, id, loc, len)) = pending {
        let mut ok = true;
        if pos == file_len && start + len == file_len {
            let mut v = vec![0u8; loc.value_len as usize];
            ok = file.read_exact_at(&mut v, loc.value_off).is_ok()
                && crc32fast::hash(&v) == loc.value_crc;
        }
        if ok {
            on_record(start, id, loc, len);
        } else {
            pos = start;
        }
    }
    let torn = (pos < file_len).then(|| (pos, file_len - pos));
    Ok(LogScan {
        skipped,
        torn,
        salvaged,
    })
}

/// The first offset at or after `from` that holds a valid blob record (header CRC, kind, ns and
/// key lengths, a value that fits in the file) or a record [`salvage_blob_at`] proves, or
/// `None`: the rest is a torn tail. Reads the log in 1 MiB pieces; a cheap test of the fixed
/// fields comes before the CRC (and before any salvage test).
fn resync_blobs(file: &File, path: &Path, from: u64, file_len: u64) -> Result<Option<u64>> {
    const PIECE: usize = 1 << 20;
    let window = BLOB_HEADER_LEN + MAX_NAME_LEN + MAX_KEY_LEN;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = from;
    let mut unknown_kind = false;
    let mut p = from;
    while p + BLOB_HEADER_LEN as u64 <= file_len {
        let need_end = (p + window as u64).min(file_len);
        if need_end > buf_start + buf.len() as u64 {
            buf_start = p;
            buf.resize(PIECE.max(window).min((file_len - p) as usize), 0);
            file.read_exact_at(&mut buf, p)
                .map_err(|e| StoreError::io(path, e))?;
        }
        let off = (p - buf_start) as usize;
        let b = &buf[off..(need_end - buf_start) as usize];
        let plausible = b[4] == KIND_BLOB
            && b[5] > 0
            && usize::from(u16::from_le_bytes([b[6], b[7]])) <= MAX_KEY_LEN
            && u32::from_le_bytes([b[16], b[17], b[18], b[19]]) as usize <= MAX_BLOB_LEN;
        if plausible
            && (parse_blob_at(b, p, file_len, &mut unknown_kind).is_some()
                || salvage_blob_at(file, path, b, p, file_len, false)?.is_some())
        {
            return Ok(Some(p));
        }
        p += 1;
    }
    Ok(None)
}

/// Parses the record at the start of `buf` (which holds the log from `pos`). `None`: the record
/// is invalid or incomplete.
fn parse_blob_at(
    buf: &[u8],
    pos: u64,
    file_len: u64,
    unknown_kind: &mut bool,
) -> Option<(BlobId, Loc, u64)> {
    let head: &[u8; BLOB_HEADER_LEN] = buf.get(..BLOB_HEADER_LEN)?.try_into().ok()?;
    let h = BlobHeader::parse(head);
    let names = buf.get(BLOB_HEADER_LEN..h.value_offset())?;
    let (ns, key) = names.split_at(h.ns_len);
    if record::header_crc(&head[4..], ns, key) != h.header_crc {
        return None;
    }
    if h.kind != KIND_BLOB {
        *unknown_kind = true;
        return None;
    }
    if pos + h.record_len() > file_len {
        return None;
    }
    let ns = std::str::from_utf8(ns).ok()?;
    let key = std::str::from_utf8(key).ok()?;
    let loc = Loc {
        value_off: pos + h.value_offset() as u64,
        value_len: h.value_len,
        value_crc: h.value_crc,
    };
    Some((blob_id(ns, h.epoch, key), loc, h.record_len()))
}

/// The record at `pos` as a salvaged one, when its header fails its CRC (the caller found that)
/// but the rest proves it: kind 1; lengths within the store's limits (namespace and key ≥ 1
/// byte, key ≤ [`MAX_KEY_LEN`], value between the `=chk` trailer and [`MAX_BLOB_LEN`]) that
/// end exactly at a record whose header holds, at the end of the log, or — with `durable_end`
/// (the header walk, not a resynchronisation) — where only a torn tail follows (no valid record
/// at or after that offset: the end of the durable data); a valid namespace and a key that is
/// an event key of the header's epoch (the SHA-1 proves the value, these checks the address);
/// and a value that passes its own `=chk` SHA-1. `buf` holds the log from `pos` (the header,
/// namespace and key when they fit in the file). Reads the next header and the value only when
/// every cheap test passed; allocates at most the value, which fits in the file.
fn salvage_blob_at(
    file: &File,
    path: &Path,
    buf: &[u8],
    pos: u64,
    file_len: u64,
    durable_end: bool,
) -> Result<Option<(BlobId, Loc, u64)>> {
    let Some(head) = buf
        .get(..BLOB_HEADER_LEN)
        .and_then(|h| <&[u8; BLOB_HEADER_LEN]>::try_from(h).ok())
    else {
        return Ok(None);
    };
    let h = BlobHeader::parse(head);
    let value_len = h.value_len as usize;
    if h.kind != KIND_BLOB
        || h.ns_len == 0
        || h.key_len == 0
        || h.key_len > MAX_KEY_LEN
        || !(sluice_blob::TRAILER_LEN..=MAX_BLOB_LEN).contains(&value_len)
    {
        return Ok(None);
    }
    let Some(end) = pos
        .checked_add(h.record_len())
        .filter(|end| *end <= file_len)
    else {
        return Ok(None);
    };
    let Some(names) = buf.get(BLOB_HEADER_LEN..h.value_offset()) else {
        return Ok(None);
    };
    let (ns, key) = names.split_at(h.ns_len);
    let (Ok(ns), Ok(key)) = (std::str::from_utf8(ns), std::str::from_utf8(key)) else {
        return Ok(None);
    };
    let addressed = Namespace::parse(ns)
        .is_ok_and(|n| check_key(&n, BlobKey::new(h.epoch, key)).is_ok())
        && sluice_blob::EventKey::parse(key).is_ok_and(|k| k.epoch() == h.epoch);
    if !addressed {
        return Ok(None);
    }
    let mut next_valid = end == file_len;
    if !next_valid {
        let window = BLOB_HEADER_LEN + MAX_NAME_LEN + MAX_KEY_LEN;
        let mut next = vec![0u8; window.min((file_len - end) as usize)];
        file.read_exact_at(&mut next, end)
            .map_err(|e| StoreError::io(path, e))?;
        let mut unknown_kind = false;
        next_valid = parse_blob_at(&next, end, file_len, &mut unknown_kind).is_some();
        if !next_valid && !durable_end {
            return Ok(None);
        }
    }
    let value_off = pos + h.value_offset() as u64;
    let mut value = vec![0u8; value_len];
    file.read_exact_at(&mut value, value_off)
        .map_err(|e| StoreError::io(path, e))?;
    if sluice_blob::BlobRef::parse(&value).is_err() {
        return Ok(None);
    }
    // Neither a valid record nor the end of the log follows: only a torn tail may.
    if !next_valid && resync_blobs(file, path, end, file_len)?.is_some() {
        return Ok(None);
    }
    let loc = Loc {
        value_off,
        value_len: h.value_len,
        value_crc: crc32fast::hash(&value),
    };
    Ok(Some((blob_id(ns, h.epoch, key), loc, h.record_len())))
}

type IndexMap = BTreeMap<(i64, String), BTreeSet<String>>;
type CountsMap = BTreeMap<(i64, String), BTreeMap<TypeSubtype, Counts>>;

/// An applied `add_counts_once` token: `(epoch, "dc\0writer\0batch")` (NUL is refused in all
/// three, so the join is unambiguous).
type AppliedToken = (i64, Box<str>);

fn applied_token(epoch: i64, dc: &str, writer: &str, batch: &str) -> AppliedToken {
    let mut s = String::with_capacity(dc.len() + writer.len() + batch.len() + 2);
    s.push_str(dc);
    s.push('\0');
    s.push_str(writer);
    s.push('\0');
    s.push_str(batch);
    (epoch, s.into_boxed_str())
}

struct MetaLog {
    file: LogFile,
    /// The events index.
    index: RwLock<IndexMap>,
    /// The index of each other namespace, by its name (`substreams/<name>`).
    ns_index: RwLock<BTreeMap<String, IndexMap>>,
    counts: RwLock<CountsMap>,
    /// Tokens of the counts adds in the log (changed only under the writer lock).
    applied: RwLock<HashSet<AppliedToken>>,
}

impl MetaLog {
    /// Calls `f` with the index of the events (`ns` = `None`) or of `ns` (`None` if it has none).
    fn with_index<R>(&self, ns: Option<&str>, f: impl FnOnce(Option<&IndexMap>) -> R) -> R {
        match ns {
            None => f(Some(&read_lock(&self.index))),
            Some(ns) => f(read_lock(&self.ns_index).get(ns)),
        }
    }

    fn extend_index(
        &self,
        ns: Option<&str>,
        id: (i64, String),
        entries: impl IntoIterator<Item = String>,
    ) {
        match ns {
            None => write_lock(&self.index)
                .entry(id)
                .or_default()
                .extend(entries),
            Some(ns) => write_lock(&self.ns_index)
                .entry(ns.to_owned())
                .or_default()
                .entry(id)
                .or_default()
                .extend(entries),
        }
    }

    /// Replays the whole (small) log. Damage in the middle is skipped (see the module docs); a
    /// writer cuts the torn tail, a read-only store leaves it.
    fn load(path: &Path, read_only: bool) -> Result<(MetaLog, LogScan)> {
        let (file, _) = LogFile::open(path, read_only)?;
        let mut bytes = Vec::new();
        if let Some(mut f) = file.file.as_ref() {
            f.read_to_end(&mut bytes)
                .map_err(|e| StoreError::io(path, e))?;
        }
        let mut index = IndexMap::new();
        let mut ns_index: BTreeMap<String, IndexMap> = BTreeMap::new();
        let mut counts = CountsMap::new();
        let mut applied = HashSet::new();
        let scan = scan_meta(&bytes, path, |_, _, rec| match rec {
            MetaRecord::IndexAdd {
                ns: None,
                epoch,
                dc,
                entries,
            } => {
                let set = index.entry((epoch, dc.to_owned())).or_default();
                set.extend(entries.into_iter().map(str::to_owned));
            }
            MetaRecord::IndexAdd {
                ns: Some(ns),
                epoch,
                dc,
                entries,
            } => {
                let set = ns_index
                    .entry(ns.to_owned())
                    .or_default()
                    .entry((epoch, dc.to_owned()))
                    .or_default();
                set.extend(entries.into_iter().map(str::to_owned));
            }
            MetaRecord::CountsAdd {
                epoch,
                dc,
                write,
                event_type,
                subtype,
                counts: c,
            } => {
                // A token seen twice (never written so by this code) counts once.
                if let Some((writer, batch)) = write {
                    if !applied.insert(applied_token(epoch, dc, writer, batch)) {
                        return;
                    }
                }
                counts
                    .entry((epoch, dc.to_owned()))
                    .or_default()
                    .entry((event_type.to_owned(), subtype.to_owned()))
                    .or_default()
                    .merge(&c);
            }
        })?;
        let mut end = bytes.len() as u64;
        if let Some((at, _)) = scan.torn {
            end = at;
            if !read_only {
                file.truncate(at)?;
            }
        }
        *lock(&file.len) = end;
        Ok((
            MetaLog {
                file,
                index: RwLock::new(index),
                ns_index: RwLock::new(ns_index),
                counts: RwLock::new(counts),
                applied: RwLock::new(applied),
            },
            scan,
        ))
    }
}

/// The meta record at `pos` if its length fits, its kind is known and its CRC holds: the
/// payload's byte range. (Whether the payload decodes is the caller's check.)
fn meta_record_at(bytes: &[u8], pos: usize) -> Option<std::ops::Range<usize>> {
    let rec = bytes.get(pos..pos + META_HEADER_LEN)?;
    let crc = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
    let len = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]) as usize;
    if len > MAX_META_LEN {
        return None;
    }
    let payload = pos + META_HEADER_LEN..pos + META_HEADER_LEN + len;
    bytes.get(payload.clone())?;
    if crc32fast::hash(&bytes[pos + 4..payload.end]) != crc {
        return None;
    }
    Some(payload)
}

/// Walks a meta log, calling `on_record(offset, record length, record)` for each valid record.
/// Mid-log damage is skipped: the next offset whose record has a plausible kind, a valid CRC
/// and a payload that decodes. A record with a valid CRC that does not decode is refused
/// (`Corrupted`): it may be data from a newer version.
fn scan_meta<'a>(
    bytes: &'a [u8],
    path: &Path,
    mut on_record: impl FnMut(usize, usize, MetaRecord<'a>),
) -> Result<LogScan> {
    let mut pos = 0usize;
    let mut skipped = Vec::new();
    while pos < bytes.len() {
        if let Some(payload) = meta_record_at(bytes, pos) {
            let end = payload.end;
            match record::decode_meta(&bytes[payload]) {
                Some(rec) => on_record(pos, end - pos, rec),
                None => {
                    return Err(StoreError::corrupted(
                        format!("{}@{pos}", path.display()),
                        "meta record with a valid CRC but an unknown kind or layout",
                    ))
                }
            }
            pos = end;
            continue;
        }
        let next = (pos + 1..bytes.len()).find(|&q| {
            let kind = bytes.get(q + META_HEADER_LEN).copied();
            matches!(
                kind,
                Some(KIND_INDEX_ADD | KIND_COUNTS_ADD | KIND_COUNTS_ONCE | KIND_NS_INDEX_ADD)
            ) && meta_record_at(bytes, q).is_some_and(|r| record::decode_meta(&bytes[r]).is_some())
        });
        match next {
            Some(q) => {
                skipped.push((pos as u64, (q - pos) as u64));
                pos = q;
            }
            None => break,
        }
    }
    let torn = (pos < bytes.len()).then(|| (pos as u64, (bytes.len() - pos) as u64));
    Ok(LogScan {
        skipped,
        torn,
        salvaged: Vec::new(),
    })
}

/// The epoch index entries that the `events` blobs of `blobs` imply and `index` lacks, by
/// `(epoch, dc)`. Keys that do not parse as event keys (other writers' test data) are ignored.
fn missing_index_entries(
    blobs: &HashMap<BlobId, Loc>,
    index: &IndexMap,
) -> BTreeMap<(i64, String), BTreeSet<String>> {
    let mut missing: BTreeMap<(i64, String), BTreeSet<String>> = BTreeMap::new();
    for (epoch, id) in blobs.keys() {
        let Some(key) = id.strip_prefix("events\0") else {
            continue;
        };
        let Ok(key) = sluice_blob::EventKey::parse(key) else {
            continue;
        };
        let slot = (*epoch, key.dc().to_owned());
        let entry = key.index_entry().to_string();
        if !index.get(&slot).is_some_and(|have| have.contains(&entry)) {
            missing.entry(slot).or_default().insert(entry);
        }
    }
    missing
}

/// Repairs one partition directory (see [`EmbeddedStore::repair`]): each log with damage, a
/// torn tail, a bad value or (meta) lost index entries is replaced by a clean copy.
fn repair_partition(dir: &Path, stamp: u64, report: &mut RepairReport) -> Result<()> {
    let blobs_path = dir.join(BLOBS_FILE);
    let mut blob_index: HashMap<BlobId, Loc> = HashMap::new();
    let blobs_file = match File::open(&blobs_path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(StoreError::io(&blobs_path, e)),
    };
    if let Some(file) = blobs_file {
        report.logs_checked += 1;
        let file_len = file
            .metadata()
            .map_err(|e| StoreError::io(&blobs_path, e))?
            .len();
        let mut records = Vec::new();
        let mut scan = scan_blobs(&file, &blobs_path, file_len, |at, id, loc, len| {
            records.push((at, len, id, loc));
        })?;
        // As a load does: a salvaged record never takes the key of a valid one.
        let mut held: HashSet<BlobId> = records.iter().map(|r| r.2.clone()).collect();
        settle_salvaged(&mut scan, |s| held.insert(s.id.clone()));
        drop(held);
        // First pass: verify every value; only `(offset, len)` of the records kept is held (and
        // for a salvaged record what its new header needs), the copy streams them again (a
        // partition may be larger than memory).
        let mut keep: Vec<KeptRecord> = Vec::new();
        let mut bad = 0u64;
        let mut kept_bytes = 0u64;
        let mut value = Vec::new();
        for (at, len, id, loc) in records {
            value.resize(loc.value_len as usize, 0);
            file.read_exact_at(&mut value, loc.value_off)
                .map_err(|e| StoreError::io(&blobs_path, e))?;
            if crc32fast::hash(&value) != loc.value_crc {
                bad += 1;
                continue;
            }
            if blob_index.contains_key(&id) {
                continue;
            }
            kept_bytes += len;
            keep.push((at, len, None));
            blob_index.insert(id, loc);
        }
        // Salvaged records were proven by their SHA-1 during the scan; each is copied with a
        // fresh header (same length), so a reader finds a valid record there.
        for s in &scan.salvaged {
            kept_bytes += s.len;
            keep.push((s.offset, s.len, Some((s.id.clone(), s.loc))));
            blob_index.insert(s.id.clone(), s.loc);
        }
        keep.sort_by_key(|k| k.0);
        let rewritten = scan.salvaged.len() as u64;
        if bad > 0 || !scan.skipped.is_empty() || scan.torn.is_some() || rewritten > 0 {
            report.blobs_kept += keep.len() as u64;
            report.bad_values_dropped += bad;
            report.headers_rewritten += rewritten;
            report.bytes_left_out += file_len - kept_bytes;
            let aside = replace_log(&blobs_path, stamp, |w| {
                let mut rec = Vec::new();
                for (at, len, salvaged) in &keep {
                    match salvaged {
                        None => {
                            rec.resize(*len as usize, 0);
                            file.read_exact_at(&mut rec, *at)?;
                            w.write_all(&rec)?;
                        }
                        Some(((epoch, name), loc)) => {
                            w.write_all(&rewrite_salvaged(&file, *epoch, name, loc)?)?;
                        }
                    }
                }
                Ok(())
            })?;
            report.replaced.push((blobs_path.clone(), aside));
        }
    }
    let meta_path = dir.join(META_FILE);
    let bytes = match fs::read(&meta_path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(&meta_path, e)),
    };
    report.logs_checked += 1;
    let mut ranges = Vec::new();
    let mut index = IndexMap::new();
    let scan = scan_meta(&bytes, &meta_path, |at, len, rec| {
        ranges.push(at..at + len);
        if let MetaRecord::IndexAdd {
            ns: None,
            epoch,
            dc,
            entries,
        } = rec
        {
            let set = index.entry((epoch, dc.to_owned())).or_default();
            set.extend(entries.into_iter().map(str::to_owned));
        }
    })?;
    if scan.skipped.is_empty() && scan.torn.is_none() {
        return Ok(());
    }
    let missing = missing_index_entries(&blob_index, &index);
    let mut extra = Vec::new();
    for ((epoch, dc), entries) in &missing {
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        report.index_entries_rebuilt += refs.len() as u64;
        extra.push(record::encode_index_add(None, *epoch, dc, &refs));
    }
    let kept: u64 = ranges.iter().map(|r| (r.end - r.start) as u64).sum();
    report.bytes_left_out += bytes.len() as u64 - kept;
    let aside = replace_log(&meta_path, stamp, |w| {
        for r in ranges {
            w.write_all(&bytes[r])?;
        }
        for rec in &extra {
            w.write_all(rec)?;
        }
        Ok(())
    })?;
    report.replaced.push((meta_path, aside));
    Ok(())
}

/// A record a repair copies: `(offset, length, None)`, or a salvaged one with what its new
/// header needs.
type KeptRecord = (u64, u64, Option<(BlobId, Loc)>);

/// The record of a salvaged blob with a valid header: its value read again (and checked
/// against the CRC-32 computed when its SHA-1 proved it), re-encoded under its namespace, key
/// and epoch.
fn rewrite_salvaged(file: &File, epoch: i64, name: &str, loc: &Loc) -> io::Result<Vec<u8>> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let (ns, key) = name
        .split_once('\0')
        .ok_or_else(|| invalid("salvaged blob without a namespace"))?;
    let mut value = vec![0u8; loc.value_len as usize];
    file.read_exact_at(&mut value, loc.value_off)?;
    if crc32fast::hash(&value) != loc.value_crc {
        return Err(invalid("salvaged blob changed during the repair"));
    }
    Ok(record::encode_blob(ns.as_bytes(), epoch, key.as_bytes(), &value).0)
}

/// Writes the clean copy (`fill`) to `<log>.repair`, fsyncs it, keeps the original as
/// `<log>.damaged-<stamp>` (a hard link, so the log name always names a whole log), renames the
/// copy over the log and fsyncs the directory. Returns where the original was kept.
fn replace_log(
    log: &Path,
    stamp: u64,
    fill: impl FnOnce(&mut io::BufWriter<File>) -> io::Result<()>,
) -> Result<PathBuf> {
    let name = log
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("log")
        .to_owned();
    let tmp = log.with_file_name(format!("{name}{REPAIR_SUFFIX}"));
    let mut aside = log.with_file_name(format!("{name}.damaged-{stamp}"));
    let mut n = 1;
    while aside.exists() {
        aside = log.with_file_name(format!("{name}.damaged-{stamp}.{n}"));
        n += 1;
    }
    {
        let f = File::create(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
        let mut w = io::BufWriter::new(f);
        fill(&mut w).map_err(|e| StoreError::io(&tmp, e))?;
        let f = w
            .into_inner()
            .map_err(|e| StoreError::io(&tmp, e.into_error()))?;
        f.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
    }
    fs::hard_link(log, &aside).map_err(|e| StoreError::io(&aside, e))?;
    fs::rename(&tmp, log).map_err(|e| StoreError::io(log, e))?;
    if let Some(parent) = log.parent() {
        sync_dir(parent)?;
    }
    Ok(aside)
}

/// Takes the lock of `dir`: exclusive for a writer (creating `LOCK`), shared for a reader (never
/// creating it; `None` when there is none).
fn lock_dir(dir: &Path, shared: bool) -> Result<Option<File>> {
    let lock_path = dir.join(LOCK_FILE);
    let lock = if shared {
        match File::open(&lock_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&lock_path, e)),
        }
    } else {
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, e))?
    };
    let taken = if shared {
        lock.try_lock_shared()
    } else {
        lock.try_lock()
    };
    match taken {
        Ok(()) => Ok(Some(lock)),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.display().to_string(),
        }),
        Err(fs::TryLockError::Error(e)) => Err(StoreError::io(&lock_path, e)),
    }
}

/// The partition directories of `dir`. A writer finishes interrupted expiries (deletes
/// `*.expired`); a reader skips them.
fn list_partitions(
    dir: &Path,
    retention: &Retention,
    read_only: bool,
) -> Result<BTreeMap<i64, Arc<Partition>>> {
    let mut partitions = BTreeMap::new();
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if name.ends_with(EXPIRED_SUFFIX) {
            if !read_only {
                // An expiry interrupted by a crash: finish it.
                fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
            }
            continue;
        }
        if let Some(start) = parse_partition_name(name) {
            if retention.partition_of(start) != start {
                return Err(StoreError::corrupted(
                    path.display().to_string(),
                    "partition directory not aligned to the partition width",
                ));
            }
            partitions.insert(start, Arc::new(Partition::new(path)));
        }
    }
    Ok(partitions)
}

/// The partition width recorded in `dir/FORMAT` (which must exist and be of this version).
fn read_format(dir: &Path) -> Result<i64> {
    let path = dir.join(FORMAT_FILE);
    let found = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StoreError::NotFound {
                what: format!("{} (not a sluice data directory?)", path.display()),
            })
        }
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    let mut lines = found.lines();
    let first = lines.next().unwrap_or("");
    if first != FORMAT_VERSION {
        return Err(StoreError::corrupted(
            path.display().to_string(),
            format!("unknown format {first:?}, expected {FORMAT_VERSION:?}"),
        ));
    }
    lines
        .next()
        .and_then(|l| l.strip_prefix("partition_secs "))
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            StoreError::corrupted(path.display().to_string(), "no valid partition_secs line")
        })
}

fn partition_name(start: i64) -> String {
    format!("p{start}")
}

fn parse_partition_name(name: &str) -> Option<i64> {
    let n = name.strip_prefix('p')?;
    let v: i64 = n.parse().ok()?;
    // Only the canonical spelling (no "+", no leading zeros) names a partition.
    (partition_name(v) == name).then_some(v)
}

/// Writes the FORMAT file on creation; on reopen checks the version and the partition width.
fn check_format(dir: &Path, retention: &Retention) -> Result<()> {
    let path = dir.join(FORMAT_FILE);
    let expected = format!(
        "{FORMAT_VERSION}\npartition_secs {}\n",
        retention.partition_secs
    );
    match fs::read_to_string(&path) {
        Ok(found) => {
            if found != expected {
                let first = found.lines().next().unwrap_or("");
                if first != FORMAT_VERSION {
                    return Err(StoreError::corrupted(
                        path.display().to_string(),
                        format!("unknown format {first:?}, expected {FORMAT_VERSION:?}"),
                    ));
                }
                return Err(StoreError::invalid(format!(
                    "{} was created with another partition width ({}); open it with that width",
                    dir.display(),
                    found.lines().nth(1).unwrap_or("?"),
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Write to a temporary name and rename, so a crash never leaves a half FORMAT file.
            let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
            let mut f = File::create(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
            f.write_all(expected.as_bytes())
                .map_err(|e| StoreError::io(&tmp, e))?;
            f.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
            fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))?;
            sync_dir(dir)
        }
        Err(e) => Err(StoreError::io(&path, e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, e))
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
