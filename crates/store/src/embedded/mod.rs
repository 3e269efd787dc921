//! [`EmbeddedStore`]: time-partitioned, append-only logs under a data directory (Bitcask-style).
//!
//! One directory per time partition (an hour by default) holds `blobs.log` (blob records) and
//! `meta.log` (epoch index and counts records). Both are append-only with CRC-framed records; the
//! in-memory indexes are rebuilt from them when a partition is first touched after open. Expiry
//! renames a partition's directory away and deletes it: no key is ever scanned. Layout and
//! recovery rules: the crate's README.md; byte layout: `record.rs`.

mod record;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use record::{BlobHeader, MetaRecord, BLOB_HEADER_LEN, KIND_BLOB, MAX_META_LEN, META_HEADER_LEN};

use crate::error::{Result, StoreError};
use crate::store::{
    check_counts, check_entries, check_key, check_put, BlobKey, Counts, ExpireReport, Namespace,
    PutOutcome, Retention, Store, TypeSubtype, MAX_KEY_LEN, MAX_NAME_LEN,
};

const FORMAT_FILE: &str = "FORMAT";
const FORMAT_VERSION: &str = "sluice-store segment-log 1";
const BLOBS_FILE: &str = "blobs.log";
const META_FILE: &str = "meta.log";
const EXPIRED_SUFFIX: &str = ".expired";

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
    partitions: RwLock<BTreeMap<i64, Arc<Partition>>>,
    torn_tails: AtomicU64,
    bytes_dropped: AtomicU64,
    expired_seq: AtomicU64,
    /// Held for the life of the store: an exclusive lock on `<dir>/LOCK`, because a second
    /// process would cut what it takes for torn tails out of logs this one is appending to.
    _lock: fs::File,
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
        let lock_path = dir.join("LOCK");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(StoreError::Locked { dir }),
            Err(fs::TryLockError::Error(e)) => return Err(StoreError::io(&lock_path, e)),
        }
        check_format(&dir, &opts.retention)?;
        let mut partitions = BTreeMap::new();
        let entries = fs::read_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            if name.ends_with(EXPIRED_SUFFIX) {
                // An expiry interrupted by a crash: finish it.
                fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
                continue;
            }
            if let Some(start) = parse_partition_name(name) {
                if opts.retention.partition_of(start) != start {
                    return Err(StoreError::corrupted(
                        path.display().to_string(),
                        "partition directory not aligned to the partition width",
                    ));
                }
                partitions.insert(start, Arc::new(Partition::new(path)));
            }
        }
        Ok(EmbeddedStore {
            dir,
            opts,
            partitions: RwLock::new(partitions),
            torn_tails: AtomicU64::new(0),
            bytes_dropped: AtomicU64::new(0),
            expired_seq: AtomicU64::new(0),
            _lock: lock,
        })
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

    /// The partition of `epoch`, creating its directory if it does not exist yet.
    fn partition_for_write(&self, epoch: i64) -> Result<Arc<Partition>> {
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
        if let Some(b) = p.blobs.get() {
            return Ok(b);
        }
        let (log, torn) = BlobLog::load(&p.dir.join(BLOBS_FILE))?;
        self.note_torn(torn);
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
        let (log, torn) = MetaLog::load(&p.dir.join(META_FILE))?;
        self.note_torn(torn);
        Ok(p.meta.get_or_init(|| log))
    }

    fn note_torn(&self, dropped: u64) {
        if dropped > 0 {
            self.torn_tails.fetch_add(1, Ordering::Relaxed);
            self.bytes_dropped.fetch_add(dropped, Ordering::Relaxed);
        }
    }

    fn after_write(&self, file: &LogFile) -> Result<()> {
        match self.opts.durability {
            Durability::Immediate => file.sync(),
            Durability::OnFlush => Ok(()),
        }
    }
}

impl Store for EmbeddedStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        check_put(ns, key, bytes)?;
        let p = self.partition_for_write(key.epoch)?;
        let log = self.blobs(&p)?;
        let ns_name = ns.as_str();
        let id = blob_id(&ns_name, key.epoch, key.key);
        {
            let mut len = lock(&log.file.len);
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
            log.file.append(&mut len, &record)?;
            let loc = Loc {
                value_off: *len - bytes.len() as u64,
                value_len: bytes.len() as u32,
                value_crc,
            };
            write_lock(&log.index).insert(id, loc);
        }
        self.after_write(&log.file)?;
        Ok(PutOutcome::Written)
    }

    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        check_key(ns, key)?;
        let Some(p) = self.existing(key.epoch) else {
            return Ok(None);
        };
        let log = self.blobs(&p)?;
        let id = blob_id(&ns.as_str(), key.epoch, key.key);
        let Some(loc) = read_lock(&log.index).get(&id).copied() else {
            return Ok(None);
        };
        log.read(&loc, key.key).map(Some)
    }

    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        let threads = self.opts.read_threads.min(keys.len());
        if threads <= 1 {
            return keys.iter().map(|k| self.get_blob(ns, *k)).collect();
        }
        // A small scoped pool: each thread takes the next index until none are left.
        let next = AtomicUsize::new(0);
        let mut results: Vec<Option<GetResult>> = Vec::new();
        results.resize_with(keys.len(), || None);
        let parts: Vec<Vec<(usize, GetResult)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut got = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(k) = keys.get(i) else { break };
                            got.push((i, self.get_blob(ns, *k)));
                        }
                        got
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
            let fresh: Vec<&str> = {
                let index = read_lock(&log.index);
                let have = index.get(&id);
                let mut seen = BTreeSet::new();
                entries
                    .iter()
                    .copied()
                    .filter(|e| !have.is_some_and(|h| h.contains(*e)) && seen.insert(*e))
                    .collect()
            };
            if fresh.is_empty() {
                return Ok(());
            }
            log.file
                .append(&mut len, &record::encode_index_add(epoch, dc, &fresh))?;
            let mut index = write_lock(&log.index);
            index
                .entry(id)
                .or_default()
                .extend(fresh.iter().map(|e| (*e).to_owned()));
        }
        self.after_write(&log.file)
    }

    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        let Some(p) = self.existing(epoch) else {
            return Ok(BTreeSet::new());
        };
        let log = self.meta(&p)?;
        let index = read_lock(&log.index);
        Ok(index
            .get(&(epoch, dc.to_owned()))
            .cloned()
            .unwrap_or_default())
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
        if counts.is_zero() {
            return Ok(());
        }
        let p = self.partition_for_write(epoch)?;
        let log = self.meta(&p)?;
        {
            let mut len = lock(&log.file.len);
            let rec = record::encode_counts_add(epoch, dc, event_type, subtype, counts);
            log.file.append(&mut len, &rec)?;
            write_lock(&log.counts)
                .entry((epoch, dc.to_owned()))
                .or_default()
                .entry((event_type.to_owned(), subtype.to_owned()))
                .or_default()
                .merge(counts);
        }
        self.after_write(&log.file)
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
        let first = self.opts.retention.partition_of(from);
        let parts: Vec<Arc<Partition>> = self
            .map()
            .range(first..to)
            .map(|(_, p)| p.clone())
            .collect();
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
}

/// The result of one get.
type GetResult = Result<Option<Vec<u8>>>;

/// One time partition; its logs are loaded on first use.
struct Partition {
    dir: PathBuf,
    load_lock: Mutex<()>,
    blobs: OnceLock<BlobLog>,
    meta: OnceLock<MetaLog>,
}

impl Partition {
    fn new(dir: PathBuf) -> Self {
        Partition {
            dir,
            load_lock: Mutex::new(()),
            blobs: OnceLock::new(),
            meta: OnceLock::new(),
        }
    }
}

/// An append-only file: a writer lock holding the current length, and a dirty flag for `flush`.
struct LogFile {
    path: PathBuf,
    file: File,
    len: Mutex<u64>,
    dirty: AtomicBool,
}

impl LogFile {
    /// Opens (creating) the file for reading and appending.
    fn open(path: &Path) -> Result<(LogFile, u64)> {
        let existed = path.exists();
        let file = OpenOptions::new()
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
        let len = file.metadata().map_err(|e| StoreError::io(path, e))?.len();
        let log = LogFile {
            path: path.to_path_buf(),
            file,
            len: Mutex::new(0),
            dirty: AtomicBool::new(false),
        };
        Ok((log, len))
    }

    /// Appends `bytes` at `*len` (the caller holds the writer lock). On failure the file is cut
    /// back to `*len`, so a failed write never leaves a partial record before later ones.
    fn append(&self, len: &mut MutexGuard<'_, u64>, bytes: &[u8]) -> Result<()> {
        let at = **len;
        if let Err(e) = self.file.write_all_at(bytes, at) {
            let _ = self.file.set_len(at);
            return Err(StoreError::io(&self.path, e));
        }
        **len = at + bytes.len() as u64;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.file
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

    /// Cuts the file at `at` (dropping a torn tail) and makes that durable.
    fn truncate(&self, at: u64) -> Result<()> {
        self.file
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

impl BlobLog {
    /// Rebuilds the index by walking the record headers (values are skipped, except the last
    /// record's, which is verified because a torn write may have left it incomplete). Returns the
    /// log and the number of bytes of torn tail that were cut off.
    fn load(path: &Path) -> Result<(BlobLog, u64)> {
        let (file, file_len) = LogFile::open(path)?;
        let mut index = HashMap::new();
        let mut pos = 0u64;
        let mut last: Option<(u64, BlobId, Loc)> = None;
        let window = BLOB_HEADER_LEN + MAX_NAME_LEN + MAX_KEY_LEN;
        let mut buf = vec![0u8; window];
        let mut unknown_kind = false;
        while pos < file_len {
            let want = window.min((file_len - pos) as usize);
            file.file
                .read_exact_at(&mut buf[..want], pos)
                .map_err(|e| StoreError::io(path, e))?;
            let Some((id, loc, rec_len)) =
                parse_blob_at(&buf[..want], pos, file_len, &mut unknown_kind)
            else {
                break;
            };
            last = Some((pos, id.clone(), loc));
            // Write-once: a duplicate can only come from a bug; the first record wins.
            index.entry(id).or_insert(loc);
            pos += rec_len;
        }
        if unknown_kind {
            return Err(StoreError::corrupted(
                format!("{}@{pos}", path.display()),
                "record of an unknown kind (written by a newer version?)",
            ));
        }
        // A record whose header made it but whose value did not (or was zero-filled by a crash
        // after the size was extended) is the torn tail too.
        if let Some((start, id, loc)) = last {
            if pos == file_len {
                let mut v = vec![0u8; loc.value_len as usize];
                let ok = file.file.read_exact_at(&mut v, loc.value_off).is_ok()
                    && crc32fast::hash(&v) == loc.value_crc;
                if !ok {
                    index.remove(&id);
                    pos = start;
                }
            }
        }
        let dropped = file_len - pos;
        if dropped > 0 {
            file.truncate(pos)?;
        }
        *lock(&file.len) = pos;
        Ok((
            BlobLog {
                file,
                index: RwLock::new(index),
            },
            dropped,
        ))
    }

    fn read(&self, loc: &Loc, key: &str) -> Result<Vec<u8>> {
        let mut v = vec![0u8; loc.value_len as usize];
        self.file
            .file
            .read_exact_at(&mut v, loc.value_off)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    StoreError::corrupted(key, "blob extends past the end of its log")
                } else {
                    StoreError::io(&self.file.path, e)
                }
            })?;
        if crc32fast::hash(&v) != loc.value_crc {
            return Err(StoreError::corrupted(key, "stored value fails its CRC-32"));
        }
        Ok(v)
    }
}

/// Parses the record at the start of `buf` (which holds the log from `pos`). `None`: the record
/// is invalid or incomplete, i.e. the log ends here.
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

type IndexMap = BTreeMap<(i64, String), BTreeSet<String>>;
type CountsMap = BTreeMap<(i64, String), BTreeMap<TypeSubtype, Counts>>;

struct MetaLog {
    file: LogFile,
    index: RwLock<IndexMap>,
    counts: RwLock<CountsMap>,
}

impl MetaLog {
    /// Replays the whole (small) log; the first invalid record and everything after it is a
    /// torn tail and is cut off.
    fn load(path: &Path) -> Result<(MetaLog, u64)> {
        let (file, _) = LogFile::open(path)?;
        let mut bytes = Vec::new();
        (&file.file)
            .read_to_end(&mut bytes)
            .map_err(|e| StoreError::io(path, e))?;
        let mut index = IndexMap::new();
        let mut counts = CountsMap::new();
        let mut pos = 0usize;
        while let Some(rec) = bytes.get(pos..pos + META_HEADER_LEN) {
            let crc = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
            let len = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]) as usize;
            if len > MAX_META_LEN {
                break;
            }
            let Some(payload) = bytes.get(pos + META_HEADER_LEN..pos + META_HEADER_LEN + len)
            else {
                break;
            };
            if crc32fast::hash(&bytes[pos + 4..pos + META_HEADER_LEN + len]) != crc {
                break;
            }
            match record::decode_meta(payload) {
                Some(MetaRecord::IndexAdd { epoch, dc, entries }) => {
                    let set = index.entry((epoch, dc.to_owned())).or_default();
                    set.extend(entries.into_iter().map(str::to_owned));
                }
                Some(MetaRecord::CountsAdd {
                    epoch,
                    dc,
                    event_type,
                    subtype,
                    counts: c,
                }) => {
                    counts
                        .entry((epoch, dc.to_owned()))
                        .or_default()
                        .entry((event_type.to_owned(), subtype.to_owned()))
                        .or_default()
                        .merge(&c);
                }
                None => {
                    // The CRC matched, so this is not a torn write: refuse rather than cut off
                    // what may be valid data from a newer version.
                    return Err(StoreError::corrupted(
                        format!("{}@{pos}", path.display()),
                        "meta record with a valid CRC but an unknown kind or layout",
                    ));
                }
            }
            pos += META_HEADER_LEN + len;
        }
        let dropped = (bytes.len() - pos) as u64;
        if dropped > 0 {
            file.truncate(pos as u64)?;
        }
        *lock(&file.len) = pos as u64;
        Ok((
            MetaLog {
                file,
                index: RwLock::new(index),
                counts: RwLock::new(counts),
            },
            dropped,
        ))
    }
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
