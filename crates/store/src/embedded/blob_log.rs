//! [`BlobLog`]: the in-memory index of a partition's `blobs.log`, and the walk that builds it:
//! records are parsed header by header, mid-log damage is skipped by resynchronising on the next
//! valid record, and a record whose header fails its CRC is salvaged when the rest proves it
//! (see the module docs of `embedded`).

#[allow(clippy::wildcard_imports)]
use super::*;

/// Where a blob's value is in `blobs.log`.
#[derive(Clone, Copy)]
pub(super) struct Loc {
    pub(super) value_off: u64,
    pub(super) value_len: u32,
    pub(super) value_crc: u32,
}

/// `(epoch, "<namespace>\0<key>")`.
pub(super) type BlobId = (i64, Box<str>);

pub(super) fn blob_id(ns: &str, epoch: i64, key: &str) -> BlobId {
    let mut s = String::with_capacity(ns.len() + 1 + key.len());
    s.push_str(ns);
    s.push('\0');
    s.push_str(key);
    (epoch, s.into_boxed_str())
}

pub(super) struct BlobLog {
    pub(super) file: LogFile,
    pub(super) index: RwLock<HashMap<BlobId, Loc>>,
}

/// What a walk of a log found besides its records.
pub(super) struct LogScan {
    /// Ranges `(offset, len)` in the middle of the log that hold no valid record.
    pub(super) skipped: Vec<(u64, u64)>,
    /// The torn tail `(offset, len)`: bytes after the last valid record that hold none.
    pub(super) torn: Option<(u64, u64)>,
    /// Blob records whose header fails its CRC but whose value proves itself (`blobs.log`
    /// only; see [`salvage_blob_at`]), in log order.
    pub(super) salvaged: Vec<Salvaged>,
}

/// A blob record salvaged despite its damaged header (see the module docs).
pub(super) struct Salvaged {
    /// Where the record starts.
    pub(super) offset: u64,
    /// The whole record.
    pub(super) len: u64,
    /// Header, namespace and key: the bytes its failed CRC covers.
    pub(super) names_len: u64,
    pub(super) id: BlobId,
    /// Its value, with the CRC-32 computed from the value (proven by its SHA-1).
    pub(super) loc: Loc,
}

/// Keeps each salvaged record of `scan` that `claim` accepts (it takes the record's key: no
/// valid record, nor an earlier salvaged one, holds it); the others become skipped ranges. A
/// salvaged record never takes the place of a valid record: write-once, so a second record of
/// a key can only come from damage (a flipped character in a key).
pub(super) fn settle_salvaged(scan: &mut LogScan, mut claim: impl FnMut(&Salvaged) -> bool) {
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
    pub(super) fn load(
        path: &Path,
        read_only: bool,
        format: &dyn BlobFormat,
    ) -> Result<(BlobLog, LogScan)> {
        let (file, file_len) = LogFile::open(path, read_only)?;
        let mut index = HashMap::new();
        let mut scan = match &file.file {
            Some(f) => scan_blobs(f, path, file_len, format, |_, id, loc, _| {
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

    pub(super) fn read(&self, loc: &Loc, key: &str) -> Result<Vec<u8>> {
        let mut v = vec![0u8; loc.value_len as usize];
        self.read_into(loc, key, &mut v)?;
        Ok(v)
    }

    /// Reads the value at `loc` into `v` (exactly `loc.value_len` bytes) and checks its CRC-32.
    pub(super) fn read_into(&self, loc: &Loc, key: &str, v: &mut [u8]) -> Result<()> {
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
pub(super) fn scan_blobs(
    file: &File,
    path: &Path,
    file_len: u64,
    format: &dyn BlobFormat,
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
        let found = salvage_blob_at(file, path, &buf[..want], pos, file_len, true, format)?;
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
        match resync_blobs(file, path, pos + 1, file_len, format)? {
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
pub(super) fn resync_blobs(
    file: &File,
    path: &Path,
    from: u64,
    file_len: u64,
    format: &dyn BlobFormat,
) -> Result<Option<u64>> {
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
                || salvage_blob_at(file, path, b, p, file_len, false, format)?.is_some())
        {
            return Ok(Some(p));
        }
        p += 1;
    }
    Ok(None)
}

/// Parses the record at the start of `buf` (which holds the log from `pos`). `None`: the record
/// is invalid or incomplete.
pub(super) fn parse_blob_at(
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
pub(super) fn salvage_blob_at(
    file: &File,
    path: &Path,
    buf: &[u8],
    pos: u64,
    file_len: u64,
    durable_end: bool,
    format: &dyn BlobFormat,
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
        || !(format.min_value_len()..=MAX_BLOB_LEN).contains(&value_len)
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
        && format
            .index_slot(key)
            .is_some_and(|(epoch, _, _)| epoch == h.epoch);
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
    if !format.value_is_proven(&value) {
        return Ok(None);
    }
    // Neither a valid record nor the end of the log follows: only a torn tail may.
    if !next_valid && resync_blobs(file, path, end, file_len, format)?.is_some() {
        return Ok(None);
    }
    let loc = Loc {
        value_off,
        value_len: h.value_len,
        value_crc: crc32fast::hash(&value),
    };
    Ok(Some((blob_id(ns, h.epoch, key), loc, h.record_len())))
}
