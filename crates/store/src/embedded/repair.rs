//! Repair of a partition: clean copies of damaged logs (valid records only, salvaged blobs with
//! a rewritten header, the epoch index rebuilt from blob keys), the originals kept beside them.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The epoch index entries that the `events` blobs of `blobs` imply and `index` lacks, by
/// `(epoch, dc)`. Keys that do not parse as event keys (other writers' test data) are ignored.
pub(super) fn missing_index_entries(
    blobs: &HashMap<BlobId, Loc>,
    index: &IndexMap,
    format: &dyn BlobFormat,
) -> BTreeMap<(i64, String), BTreeSet<String>> {
    let mut missing: BTreeMap<(i64, String), BTreeSet<String>> = BTreeMap::new();
    for (epoch, id) in blobs.keys() {
        let Some(key) = id.strip_prefix("events\0") else {
            continue;
        };
        let Some((_, dc, entry)) = format.index_slot(key) else {
            continue;
        };
        let slot = (*epoch, dc);
        if !index.get(&slot).is_some_and(|have| have.contains(&entry)) {
            missing.entry(slot).or_default().insert(entry);
        }
    }
    missing
}

/// Repairs one partition directory (see [`EmbeddedStore::repair`]): each log with damage, a
/// torn tail, a bad value or (meta) lost index entries is replaced by a clean copy.
pub(super) fn repair_partition(
    dir: &Path,
    stamp: u64,
    format: &dyn BlobFormat,
    report: &mut RepairReport,
) -> Result<()> {
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
        let mut scan = scan_blobs(&file, &blobs_path, file_len, format, |at, id, loc, len| {
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
    let missing = missing_index_entries(&blob_index, &index, format);
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
pub(super) type KeptRecord = (u64, u64, Option<(BlobId, Loc)>);

/// The record of a salvaged blob with a valid header: its value read again (and checked
/// against the CRC-32 computed when its SHA-1 proved it), re-encoded under its namespace, key
/// and epoch.
pub(super) fn rewrite_salvaged(
    file: &File,
    epoch: i64,
    name: &str,
    loc: &Loc,
) -> io::Result<Vec<u8>> {
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
pub(super) fn replace_log(
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
