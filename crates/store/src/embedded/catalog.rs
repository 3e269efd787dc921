//! The catalog file (`<dir>/CATALOG`): the small named records of [`Store::put_catalog`]
//! (the substream registry), kept outside the time partitions so expiry never drops them.
//!
//! Contract:
//! - Every change rewrites the whole file: written to `CATALOG.tmp`, fsynced, renamed over
//!   `CATALOG`, directory fsynced. A crash leaves the old or the new catalog, never a mix, so
//!   the file has no torn tail to cut and a read-only open reads it as it is.
//! - [`Catalog::get`] reads the file on every call: the catalog is small (a few records), and a
//!   read-only process (a tail on `--data`) sees the writer's changes without reopening.
//! - A file whose trailer CRC fails is [`StoreError::Corrupted`]: reads report it, nothing is
//!   guessed; the next write replaces it only with the records read from a *valid* file, so a
//!   damaged catalog is never silently emptied by a write (the write fails too).
//!
//! Layout (integers little-endian):
//! ```text
//! "SLUICE-CATALOG-1\n"  magic
//! u32 count
//! count × (u16 kind_len, kind, u16 name_len, name, u32 value_len, value)
//! u32 crc               CRC-32 of everything before it
//! ```
//!
//! [`Store::put_catalog`]: crate::Store::put_catalog

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Result, StoreError};
use crate::store::check_catalog;

/// The catalog's file name in the store directory.
pub(crate) const CATALOG_FILE: &str = "CATALOG";
const MAGIC: &[u8] = b"SLUICE-CATALOG-1\n";
/// Most records in one catalog (all kinds together).
pub(crate) const MAX_CATALOG_RECORDS: usize = 10_000;

type Records = BTreeMap<(String, String), Vec<u8>>;

/// The catalog of one store directory.
pub(crate) struct Catalog {
    path: PathBuf,
    /// Serialises read-modify-write of the file within the (single) writer process.
    write: Mutex<()>,
}

impl Catalog {
    pub(crate) fn new(dir: &Path) -> Catalog {
        Catalog {
            path: dir.join(CATALOG_FILE),
            write: Mutex::new(()),
        }
    }

    /// Sets (`Some`) or deletes (`None`) the record `name` of `kind`.
    pub(crate) fn put(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        check_catalog(kind, name, value)?;
        let _guard = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let mut records = self.read_all()?;
        let id = (kind.to_owned(), name.to_owned());
        match value {
            Some(v) => {
                if !records.contains_key(&id) && records.len() >= MAX_CATALOG_RECORDS {
                    return Err(StoreError::invalid(format!(
                        "the catalog holds {MAX_CATALOG_RECORDS} records already"
                    )));
                }
                records.insert(id, v.to_vec());
            }
            None => {
                if records.remove(&id).is_none() {
                    return Ok(());
                }
            }
        }
        self.write_all(&records)
    }

    /// The records of `kind`, by name.
    pub(crate) fn get(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        Ok(self
            .read_all()?
            .into_iter()
            .filter(|((k, _), _)| k == kind)
            .map(|((_, name), v)| (name, v))
            .collect())
    }

    fn read_all(&self) -> Result<Records> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Records::new()),
            Err(e) => return Err(StoreError::io(&self.path, e)),
        };
        decode(&bytes).ok_or_else(|| {
            StoreError::corrupted(
                self.path.display().to_string(),
                "catalog file fails its checksum or layout",
            )
        })
    }

    fn write_all(&self, records: &Records) -> Result<()> {
        let tmp = self.path.with_extension("tmp");
        let bytes = encode(records);
        let io_err = |e| StoreError::io(&tmp, e);
        let mut f = File::create(&tmp).map_err(io_err)?;
        f.write_all(&bytes).map_err(io_err)?;
        f.sync_all().map_err(io_err)?;
        drop(f);
        fs::rename(&tmp, &self.path).map_err(|e| StoreError::io(&self.path, e))?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| StoreError::io(dir, e))?;
        }
        Ok(())
    }
}

fn encode(records: &Records) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for ((kind, name), value) in records {
        // Lengths were checked on the way in (MAX_NAME_LEN < u16, MAX_CATALOG_VALUE < u32).
        out.extend_from_slice(&(kind.len() as u16).to_le_bytes());
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn decode(bytes: &[u8]) -> Option<Records> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut r = body.strip_prefix(MAGIC)?;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, rest) = r.split_at_checked(n)?;
        r = rest;
        Some(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let mut records = Records::new();
    for _ in 0..count.min(MAX_CATALOG_RECORDS) {
        let n = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let kind = std::str::from_utf8(take(n)?).ok()?.to_owned();
        let n = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(n)?).ok()?.to_owned();
        let n = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let value = take(n)?.to_vec();
        records.insert((kind, name), value);
    }
    r.is_empty().then_some(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_crc() {
        let mut r = Records::new();
        r.insert(("substream".into(), "a".into()), b"{}".to_vec());
        r.insert(("substream".into(), "b".into()), vec![0, 1, 2]);
        let bytes = encode(&r);
        assert_eq!(decode(&bytes), Some(r));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert_eq!(decode(&bad), None, "flipped byte {i} accepted");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
    }
}
