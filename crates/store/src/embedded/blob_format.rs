//! [`BlobFormat`]: the little the embedded store must know about the blobs it holds, asked of
//! the blob codec instead of parsed here.
//!
//! The store treats keys and values as opaque, except when it repairs: to rebuild an epoch
//! index that lost records it needs the index entry an `events` key names, and to salvage a
//! blob whose header is damaged it needs the value to prove itself (its `=chk` SHA-1 trailer).
//! Both rules are the codec's (`sluice-blob`); [`CodecFormat`] asks it, and an opener may pass
//! another [`BlobFormat`] in [`EmbeddedOptions`](super::EmbeddedOptions).

use std::fmt::Debug;

/// What the embedded store asks about a blob's key and value when it rebuilds or salvages.
pub trait BlobFormat: Send + Sync + Debug {
    /// The smallest length a valid value can have.
    fn min_value_len(&self) -> usize;

    /// Whether `value` proves itself byte for byte (its own checksum holds).
    fn value_is_proven(&self, value: &[u8]) -> bool;

    /// The epoch-index slot `(epoch, dc, entry)` an `events` key names, or `None` when the key
    /// is not an event key.
    fn index_slot(&self, key: &str) -> Option<(i64, String, String)>;

    /// The `(type, subtype)` group an epoch-index entry names, or `None` when it is not one.
    fn entry_group(&self, entry: &str) -> Option<(String, String)>;
}

/// The format of `sluice-blob`: event keys `EPOCH:DC:TYPE:SUBTYPE:CHUNK`, values with a
/// `=chk` SHA-1 trailer. The default of [`EmbeddedOptions`](super::EmbeddedOptions).
#[derive(Clone, Copy, Debug, Default)]
pub struct CodecFormat;

impl BlobFormat for CodecFormat {
    fn min_value_len(&self) -> usize {
        sluice_blob::TRAILER_LEN
    }

    fn value_is_proven(&self, value: &[u8]) -> bool {
        sluice_blob::BlobRef::parse(value).is_ok()
    }

    fn index_slot(&self, key: &str) -> Option<(i64, String, String)> {
        let key = sluice_blob::EventKey::parse(key).ok()?;
        Some((
            key.epoch(),
            key.dc().to_owned(),
            key.index_entry().to_string(),
        ))
    }

    fn entry_group(&self, entry: &str) -> Option<(String, String)> {
        let entry = sluice_blob::IndexEntry::parse(entry).ok()?;
        Some((entry.type_().to_owned(), entry.subtype().to_owned()))
    }
}
