//! [`MetaLog`]: the epoch index, namespace indexes and counts of a partition, rebuilt from its
//! `meta.log`; damaged records in the middle are skipped, not taken for the end.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) type IndexMap = BTreeMap<(i64, String), BTreeSet<String>>;
pub(super) type CountsMap = BTreeMap<(i64, String), BTreeMap<TypeSubtype, Counts>>;

/// An applied `add_counts_once` token: `(epoch, "dc\0writer\0batch")` (NUL is refused in all
/// three, so the join is unambiguous).
pub(super) type AppliedToken = (i64, Box<str>);

pub(super) fn applied_token(epoch: i64, dc: &str, writer: &str, batch: &str) -> AppliedToken {
    let mut s = String::with_capacity(dc.len() + writer.len() + batch.len() + 2);
    s.push_str(dc);
    s.push('\0');
    s.push_str(writer);
    s.push('\0');
    s.push_str(batch);
    (epoch, s.into_boxed_str())
}

pub(super) struct MetaLog {
    pub(super) file: LogFile,
    /// The events index.
    pub(super) index: RwLock<IndexMap>,
    /// The index of each other namespace, by its name (`substreams/<name>`).
    pub(super) ns_index: RwLock<BTreeMap<String, IndexMap>>,
    pub(super) counts: RwLock<CountsMap>,
    /// Tokens of the counts adds in the log (changed only under the writer lock).
    pub(super) applied: RwLock<HashSet<AppliedToken>>,
}

impl MetaLog {
    /// Calls `f` with the index of the events (`ns` = `None`) or of `ns` (`None` if it has none).
    pub(super) fn with_index<R>(
        &self,
        ns: Option<&str>,
        f: impl FnOnce(Option<&IndexMap>) -> R,
    ) -> R {
        match ns {
            None => f(Some(&read_lock(&self.index))),
            Some(ns) => f(read_lock(&self.ns_index).get(ns)),
        }
    }

    pub(super) fn extend_index(
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
    pub(super) fn load(path: &Path, read_only: bool) -> Result<(MetaLog, LogScan)> {
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
                // A token alone (a purge keeps those of groups it removed) adds no group.
                if c.is_zero() {
                    return;
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
pub(super) fn meta_record_at(bytes: &[u8], pos: usize) -> Option<std::ops::Range<usize>> {
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
pub(super) fn scan_meta<'a>(
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
