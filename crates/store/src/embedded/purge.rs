//! Purging a partition of the groups past their own retention ([`TypeRetention`]).
//!
//! A time partition holds every `(type, subtype)` group of its hour, so it lives as long as the
//! longest retention of any group; once the whole partition lies past a shorter group's
//! retention, the partition is rewritten without that group (derived data — substream outputs
//! and their indexes — keeps the default). A partition is rewritten once per rule it crosses
//! (with `DEBUG = 1d`, default 10 days, `WEB = 30d`: at 1 day, at 10 days, dropped at 30), so
//! the cost is one copy of the kept bytes per rule, not per expiry pass.
//!
//! | step | on disk | a crash (`SIGKILL`) here leaves, and the next writer's open does |
//! |---|---|---|
//! | 1. copy the kept records to `pN.purge/` | `pN/` + a partial copy | `pN/`; deletes the copy |
//! | 2. fsync, rename the copy `pN.purged/` | `pN/` + a complete copy | swaps them (3, 4) |
//! | 3. rename `pN/` → `pN.K.expired/`, then `pN.purged/` → `pN/` | either name | finishes the swap |
//! | 4. delete `pN.K.expired/` | the new `pN/` | deletes the leftover |
//!
//! Writers are kept out while a partition is copied: the purge holds both logs' writer locks
//! from the decision to the swap, and marks the old partition retired before it lets go; a
//! writer that took the partition before the swap sees that under the lock and takes the new
//! one ([`EmbeddedStore::partition_for_write`] callers retry). Readers holding the old
//! partition read its files through their open handles. A partition with damage is left as it
//! is (the damage stays where `check` and `repair` see it) until it expires whole.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Suffix of a purge's copy while it is written.
pub(super) const PURGE_SUFFIX: &str = ".purge";
/// Suffix of a complete purge copy waiting to replace its partition.
pub(super) const PURGED_SUFFIX: &str = ".purged";

/// What one purge keeps, decided from the partition's end and the rules.
struct Keep<'a> {
    rules: &'a TypeRetention,
    /// Seconds since the partition ended.
    age: i64,
    format: &'a dyn BlobFormat,
}

impl Keep<'_> {
    fn group(&self, type_: &str, subtype: &str) -> bool {
        self.age < self.rules.keep_secs(type_, subtype)
    }

    /// Index entries that do not parse as a group are kept (they are not ours to judge).
    fn entry(&self, entry: &str) -> bool {
        self.format
            .entry_group(entry)
            .is_none_or(|(t, s)| self.group(&t, &s))
    }

    /// Derived data (namespaces other than `events`) keeps the default retention.
    fn derived(&self) -> bool {
        self.age < self.rules.default_secs()
    }

    /// Whether the blob `ns\0key` is kept.
    fn blob(&self, id: &BlobId) -> bool {
        match id.1.split_once('\0') {
            Some(("events", key)) => self
                .format
                .index_slot(key)
                .is_none_or(|(_, _, entry)| self.entry(&entry)),
            _ => self.derived(),
        }
    }
}

impl EmbeddedStore {
    /// Rewrites each partition that holds a group past its own retention without it.
    pub(super) fn purge_expired_groups(&self, now: i64, report: &mut ExpireReport) -> Result<()> {
        let rules = &self.opts.type_retention;
        if rules.is_empty() {
            return Ok(());
        }
        let width = self.opts.retention.partition_secs;
        let oldest_end = now.saturating_sub(rules.shortest());
        let candidates: Vec<Arc<Partition>> = self
            .map()
            .iter()
            .filter(|(start, _)| start.saturating_add(width) <= oldest_end)
            .map(|(_, p)| p.clone())
            .collect();
        for p in candidates {
            let keep = Keep {
                rules,
                age: now.saturating_sub(p.start.saturating_add(width)),
                format: &*self.opts.blob_format,
            };
            if let Some(freed) = self.purge_partition(&p, &keep)? {
                report.partitions_purged += 1;
                report.bytes_freed += freed;
            }
        }
        Ok(())
    }

    /// Rewrites `p` with only what `keep` keeps; the bytes freed, or `None` when nothing had to
    /// go (or the partition has damage, or was replaced meanwhile).
    fn purge_partition(&self, p: &Arc<Partition>, keep: &Keep<'_>) -> Result<Option<u64>> {
        let blobs = self.blobs(p)?;
        let meta = self.meta(p)?;
        if !lock(&p.damage).is_empty() {
            return Ok(None);
        }
        let _blob_writer = lock(&blobs.file.len);
        let _meta_writer = lock(&meta.file.len);
        if p.retired.load(Ordering::Acquire) {
            return Ok(None);
        }
        let (meta_bytes, dropped) = kept_meta(meta, keep);
        let mut kept: Vec<(BlobId, Loc)> = Vec::new();
        let mut blobs_dropped = false;
        for (id, loc) in read_lock(&blobs.index).iter() {
            if keep.blob(id) {
                kept.push((id.clone(), *loc));
            } else {
                blobs_dropped = true;
            }
        }
        if !dropped && !blobs_dropped {
            return Ok(None);
        }
        kept.sort_by_key(|(_, loc)| loc.value_off);
        let name = p
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .unwrap_or_else(|| partition_name(p.start));
        let copy = p.dir.with_file_name(format!("{name}{PURGE_SUFFIX}"));
        let done = p.dir.with_file_name(format!("{name}{PURGED_SUFFIX}"));
        let written = write_copy(&copy, blobs, &kept, &meta_bytes);
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&copy);
            return Err(e);
        }
        let old_bytes = file_len(&p.dir.join(BLOBS_FILE)) + file_len(&p.dir.join(META_FILE));
        let new_bytes = file_len(&copy.join(BLOBS_FILE)) + file_len(&copy.join(META_FILE));
        fs::rename(&copy, &done).map_err(|e| StoreError::io(&copy, e))?;
        sync_dir(&self.dir)?;
        let seq = self.expired_seq.fetch_add(1, Ordering::Relaxed);
        let gone = p
            .dir
            .with_file_name(format!("{name}.{seq}{EXPIRED_SUFFIX}"));
        fs::rename(&p.dir, &gone).map_err(|e| StoreError::io(&p.dir, e))?;
        fs::rename(&done, &p.dir).map_err(|e| StoreError::io(&done, e))?;
        sync_dir(&self.dir)?;
        {
            let mut map = self.map_mut();
            map.insert(p.start, Arc::new(Partition::new(p.start, p.dir.clone())));
            p.retired.store(true, Ordering::Release);
        }
        fs::remove_dir_all(&gone).map_err(|e| StoreError::io(&gone, e))?;
        Ok(Some(old_bytes.saturating_sub(new_bytes)))
    }
}

/// The meta records of what `keep` keeps (index entries, counts, and every applied token, so
/// a retried counts add of a purged batch is still applied once), and whether anything goes.
fn kept_meta(meta: &MetaLog, keep: &Keep<'_>) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut dropped = false;
    for ((epoch, dc), entries) in read_lock(&meta.index).iter() {
        let kept: Vec<&str> = entries
            .iter()
            .map(String::as_str)
            .filter(|e| keep.entry(e))
            .collect();
        dropped |= kept.len() != entries.len();
        if !kept.is_empty() {
            out.extend(record::encode_index_add(None, *epoch, dc, &kept));
        }
    }
    for (ns, index) in read_lock(&meta.ns_index).iter() {
        if !keep.derived() {
            dropped |= !index.is_empty();
            continue;
        }
        for ((epoch, dc), entries) in index {
            let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
            out.extend(record::encode_index_add(Some(ns), *epoch, dc, &refs));
        }
    }
    for ((epoch, dc), groups) in read_lock(&meta.counts).iter() {
        for ((type_, subtype), counts) in groups {
            if keep.group(type_, subtype) {
                out.extend(record::encode_counts_add(
                    *epoch, dc, None, type_, subtype, counts,
                ));
            } else {
                dropped = true;
            }
        }
    }
    for (epoch, token) in read_lock(&meta.applied).iter() {
        let mut parts = token.splitn(3, '\0');
        if let (Some(dc), Some(writer), Some(batch)) = (parts.next(), parts.next(), parts.next()) {
            // A token alone: zero counts, which a load applies as "seen" and adds nothing.
            out.extend(record::encode_counts_add(
                *epoch,
                dc,
                Some((writer, batch)),
                "",
                "",
                &Counts::default(),
            ));
        }
    }
    (out, dropped)
}

/// Writes `kept` blobs (read from `blobs`, each value checked) and `meta_bytes` into a fresh
/// directory `copy`, all durable.
fn write_copy(
    copy: &Path,
    blobs: &BlobLog,
    kept: &[(BlobId, Loc)],
    meta_bytes: &[u8],
) -> Result<()> {
    match fs::remove_dir_all(copy) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io(copy, e)),
    }
    fs::create_dir(copy).map_err(|e| StoreError::io(copy, e))?;
    let path = copy.join(BLOBS_FILE);
    let file = File::create(&path).map_err(|e| StoreError::io(&path, e))?;
    let mut out = io::BufWriter::with_capacity(1 << 20, &file);
    let mut value = Vec::new();
    for ((epoch, id), loc) in kept {
        let (ns, key) = id.split_once('\0').unwrap_or(("", id));
        value.resize(loc.value_len as usize, 0);
        blobs.read_into(loc, key, &mut value)?;
        let (record, _) = record::encode_blob(ns.as_bytes(), *epoch, key.as_bytes(), &value);
        out.write_all(&record)
            .map_err(|e| StoreError::io(&path, e))?;
    }
    out.flush().map_err(|e| StoreError::io(&path, e))?;
    drop(out);
    file.sync_all().map_err(|e| StoreError::io(&path, e))?;
    let path = copy.join(META_FILE);
    let mut file = File::create(&path).map_err(|e| StoreError::io(&path, e))?;
    file.write_all(meta_bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| StoreError::io(&path, e))?;
    sync_dir(copy)
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// Finishes or undoes a purge a crash interrupted (see the module's table); writers only, at
/// open, before the partitions are listed.
pub(super) fn recover_purges(dir: &Path) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    for name in &names {
        let path = dir.join(name);
        if name.ends_with(PURGE_SUFFIX) {
            fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
        } else if let Some(part) = name.strip_suffix(PURGED_SUFFIX) {
            let live = dir.join(part);
            if live.exists() {
                // The copy is complete and not renamed in yet: the live one is the old one.
                let gone = dir.join(format!("{part}.purge-old{EXPIRED_SUFFIX}"));
                fs::rename(&live, &gone).map_err(|e| StoreError::io(&live, e))?;
            }
            fs::rename(&path, &live).map_err(|e| StoreError::io(&path, e))?;
            sync_dir(dir)?;
        }
    }
    Ok(())
}
