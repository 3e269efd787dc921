//! Byte layout of the two logs of a partition. All integers little-endian. See README.md.
//!
//! Blob record (`blobs.log`), a 24-byte header then three byte strings:
//! ```text
//!  0 u32 header_crc   CRC-32 of bytes 4..24 and of ns + key
//!  4 u8  kind         1 = blob
//!  5 u8  ns_len
//!  6 u16 key_len
//!  8 i64 epoch
//! 16 u32 value_len
//! 20 u32 value_crc    CRC-32 of the value
//! 24 ns, key, value
//! ```
//! The header CRC lets a scan rebuild the index without reading values; the value CRC is
//! checked on every read.
//!
//! Meta record (`meta.log`), small and read whole on load:
//! ```text
//!  0 u32 crc          CRC-32 of bytes 4..8+len
//!  4 u32 len          payload length (kind byte included)
//!  8 u8  kind         1 = epoch index add, 2 = counts add, 3 = counts add once,
//!                     4 = namespace index add
//!  9     payload      strings are u16 length + UTF-8
//! ```
//! Kind 3 (`add_counts_once`) is kind 2 with the token's `str writer, str batch` after the dc;
//! kind 4 (`add_to_namespace_index` of a substream namespace) is kind 1 with `str namespace`
//! first. A log without kind 3 or 4 records (written before they existed) loads as before.

use std::collections::BTreeMap;

use crate::store::Counts;

pub(crate) const BLOB_HEADER_LEN: usize = 24;
pub(crate) const KIND_BLOB: u8 = 1;
pub(crate) const META_HEADER_LEN: usize = 8;
pub(crate) const KIND_INDEX_ADD: u8 = 1;
pub(crate) const KIND_COUNTS_ADD: u8 = 2;
pub(crate) const KIND_COUNTS_ONCE: u8 = 3;
pub(crate) const KIND_NS_INDEX_ADD: u8 = 4;
/// Largest meta record accepted on read (a guard against a garbage length).
pub(crate) const MAX_META_LEN: usize = 64 << 20;

/// A parsed blob header.
pub(crate) struct BlobHeader {
    pub header_crc: u32,
    pub kind: u8,
    pub ns_len: usize,
    pub key_len: usize,
    pub epoch: i64,
    pub value_len: u32,
    pub value_crc: u32,
}

impl BlobHeader {
    pub fn parse(b: &[u8; BLOB_HEADER_LEN]) -> BlobHeader {
        BlobHeader {
            header_crc: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            kind: b[4],
            ns_len: b[5] as usize,
            key_len: u16::from_le_bytes([b[6], b[7]]) as usize,
            epoch: i64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
            value_len: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
            value_crc: u32::from_le_bytes([b[20], b[21], b[22], b[23]]),
        }
    }

    /// Length of header + ns + key: where the value starts, relative to the record.
    pub fn value_offset(&self) -> usize {
        BLOB_HEADER_LEN + self.ns_len + self.key_len
    }

    pub fn record_len(&self) -> u64 {
        self.value_offset() as u64 + u64::from(self.value_len)
    }
}

/// CRC of a header (bytes 4..24) followed by ns and key.
pub(crate) fn header_crc(header_tail: &[u8], ns: &[u8], key: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header_tail);
    h.update(ns);
    h.update(key);
    h.finalize()
}

/// Encodes a whole blob record. `ns` ≤ 255 bytes and `key` ≤ 65535 are checked by the caller.
pub(crate) fn encode_blob(ns: &[u8], epoch: i64, key: &[u8], value: &[u8]) -> (Vec<u8>, u32) {
    let value_crc = crc32fast::hash(value);
    let mut buf = Vec::with_capacity(BLOB_HEADER_LEN + ns.len() + key.len() + value.len());
    buf.extend_from_slice(&[0; 4]);
    buf.push(KIND_BLOB);
    buf.push(ns.len() as u8);
    buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
    buf.extend_from_slice(&epoch.to_le_bytes());
    buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
    buf.extend_from_slice(&value_crc.to_le_bytes());
    let crc = header_crc(&buf[4..BLOB_HEADER_LEN], ns, key);
    buf[0..4].copy_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(ns);
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    (buf, value_crc)
}

/// Builds a meta record: call the `put_*` methods, then [`MetaWriter::finish`].
pub(crate) struct MetaWriter {
    buf: Vec<u8>,
}

impl MetaWriter {
    pub fn new(kind: u8) -> Self {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&[0; META_HEADER_LEN]);
        buf.push(kind);
        MetaWriter { buf }
    }

    pub fn put_str(&mut self, s: &str) {
        // Strings are validated to ≤ 1024 bytes before they get here.
        self.buf.extend_from_slice(&(s.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub fn put_u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn put_i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn finish(mut self) -> Vec<u8> {
        let len = (self.buf.len() - META_HEADER_LEN) as u32;
        self.buf[4..8].copy_from_slice(&len.to_le_bytes());
        let crc = crc32fast::hash(&self.buf[4..]);
        self.buf[0..4].copy_from_slice(&crc.to_le_bytes());
        self.buf
    }
}

/// Reads a meta payload; every getter returns `None` past the end or on bad UTF-8.
pub(crate) struct MetaReader<'a> {
    b: &'a [u8],
}

impl<'a> MetaReader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        MetaReader { b }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    pub fn i64(&mut self) -> Option<i64> {
        let b = self.take(8)?;
        Some(i64::from_le_bytes(b.try_into().ok()?))
    }

    pub fn str(&mut self) -> Option<&'a str> {
        let len = self.take(2)?;
        let len = u16::from_le_bytes([len[0], len[1]]) as usize;
        std::str::from_utf8(self.take(len)?).ok()
    }

    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

/// A decoded meta record.
pub(crate) enum MetaRecord<'a> {
    IndexAdd {
        /// The namespace of a kind 4 record (`substreams/<name>`); `None`: the events index.
        ns: Option<&'a str>,
        epoch: i64,
        dc: &'a str,
        entries: Vec<&'a str>,
    },
    CountsAdd {
        epoch: i64,
        dc: &'a str,
        /// `(writer, batch)` of a kind 3 record.
        write: Option<(&'a str, &'a str)>,
        event_type: &'a str,
        subtype: &'a str,
        counts: Counts,
    },
}

/// An index add: kind 1 for the events index (`ns` = `None`), kind 4 for another namespace's.
pub(crate) fn encode_index_add(
    ns: Option<&str>,
    epoch: i64,
    dc: &str,
    entries: &[&str],
) -> Vec<u8> {
    let mut w = MetaWriter::new(if ns.is_some() {
        KIND_NS_INDEX_ADD
    } else {
        KIND_INDEX_ADD
    });
    if let Some(ns) = ns {
        w.put_str(ns);
    }
    w.put_i64(epoch);
    w.put_str(dc);
    w.put_u64(entries.len() as u64);
    for e in entries {
        w.put_str(e);
    }
    w.finish()
}

/// A counts add: kind 2, or kind 3 with the `(writer, batch)` token when `write` is given.
pub(crate) fn encode_counts_add(
    epoch: i64,
    dc: &str,
    write: Option<(&str, &str)>,
    event_type: &str,
    subtype: &str,
    c: &Counts,
) -> Vec<u8> {
    let kind = if write.is_some() {
        KIND_COUNTS_ONCE
    } else {
        KIND_COUNTS_ADD
    };
    let mut w = MetaWriter::new(kind);
    w.put_i64(epoch);
    w.put_str(dc);
    if let Some((writer, batch)) = write {
        w.put_str(writer);
        w.put_str(batch);
    }
    w.put_str(event_type);
    w.put_str(subtype);
    w.put_u64(c.stored);
    w.put_u64(c.late);
    w.put_u64(c.kernel_dropped);
    w.put_u64(c.dropped.len() as u64);
    for (reason, n) in &c.dropped {
        w.put_str(reason);
        w.put_u64(*n);
    }
    w.finish()
}

/// Decodes a meta payload (kind byte first). `None`: malformed.
pub(crate) fn decode_meta(payload: &[u8]) -> Option<MetaRecord<'_>> {
    let mut r = MetaReader::new(payload);
    let rec = match r.u8()? {
        kind @ (KIND_INDEX_ADD | KIND_NS_INDEX_ADD) => {
            let ns = if kind == KIND_NS_INDEX_ADD {
                Some(r.str()?)
            } else {
                None
            };
            let epoch = r.i64()?;
            let dc = r.str()?;
            let n = r.u64()?;
            // Each entry needs ≥ 2 bytes: never pre-allocate more than the payload justifies.
            let mut entries = Vec::with_capacity((n as usize).min(payload.len() / 2));
            for _ in 0..n {
                entries.push(r.str()?);
            }
            MetaRecord::IndexAdd {
                ns,
                epoch,
                dc,
                entries,
            }
        }
        kind @ (KIND_COUNTS_ADD | KIND_COUNTS_ONCE) => {
            let epoch = r.i64()?;
            let dc = r.str()?;
            let write = if kind == KIND_COUNTS_ONCE {
                Some((r.str()?, r.str()?))
            } else {
                None
            };
            let event_type = r.str()?;
            let subtype = r.str()?;
            let stored = r.u64()?;
            let late = r.u64()?;
            let kernel_dropped = r.u64()?;
            let n = r.u64()?;
            let mut dropped = BTreeMap::new();
            for _ in 0..n {
                let reason = r.str()?;
                let count = r.u64()?;
                let slot: &mut u64 = dropped.entry(reason.to_owned()).or_insert(0);
                *slot = slot.saturating_add(count);
            }
            let counts = Counts {
                stored,
                late,
                dropped,
                kernel_dropped,
            };
            MetaRecord::CountsAdd {
                epoch,
                dc,
                write,
                event_type,
                subtype,
                counts,
            }
        }
        _ => return None,
    };
    if !r.is_empty() {
        return None;
    }
    Some(rec)
}
