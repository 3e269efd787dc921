//! Event blobs and their keys.
//!
//! A **blob** holds the events of one (epoch, dc, type, subtype): a Sereal document whose body is
//! the array of events (string de-duplication on, compressed), followed by the trailer `=chk` +
//! the 20-byte SHA-1 of the Sereal part. Two [`Profile`]s write the Sereal part:
//! [`Profile::Original`] (protocol 3 + zlib: what the original system stored, byte for byte
//! what the Perl reference writes) and [`Profile::Default`] (protocol 5 + zstd).
//!
//! A Sereal part over the chunk limit (default 500 KB) is cut by [`sereal::split()`] — the
//! encoded events are never decoded or re-encoded for that — into **chunks** numbered from 0,
//! each a complete blob with its own trailer that decodes alone.
//!
//! Reading: [`Blob::parse`] verifies the trailer (a mismatch is [`BlobError::Corrupted`]) and
//! gives a [`BlobRef`] that [decodes](BlobRef::decode) the events or opens the Sereal part for
//! [lazy](BlobRef::lazy) path selection.
//!
//! **Origins**: a chunk the aggregator writes with [`Profile::Default`] says which WAL record
//! each of its events came from, in its element index ([`BlobRef::origins`], [`Origins`]).
//!
//! **Keys** ([`key`]): [`EventKey`] `<epoch>:<dc>:<type>:<subtype>:<chunk>` in the `events`
//! namespace, [`EpochKey`] `<epoch>-<dc>` in the `epochs` namespace, whose value is an
//! [`EpochIndex`] `type:subtype:chunk|…`. A [`ChunkId`] is the original plain number or
//! `<collector>.<n>`, so that several collectors never overwrite each other's chunks.
//!
//! ```
//! use sluice_blob::{Blob, BlobBuilder, BlobOptions, ChunkId, EpochIndex, EventKey, Profile};
//!
//! let events: Vec<sereal::Value> = (0..3)
//!     .map(|i| sereal::json::from_json_slice(format!(r#"{{"id":{i},"path":"/index.html"}}"#).as_bytes()).unwrap())
//!     .collect();
//! let mut builder = BlobBuilder::new(BlobOptions::with_profile(Profile::Original))?;
//! let blobs = builder.build(&events)?;
//! assert_eq!(blobs.len(), 1);
//! assert_eq!(&blobs[0].as_bytes()[blobs[0].len() - 24..][..4], b"=chk");
//!
//! // Reading: verify, then decode.
//! let blob = Blob::parse(blobs[0].as_bytes())?;
//! let decoded = blob.decode(&sereal::Limits::default())?;
//! // ASCII text comes back as Sereal binary strings (as Perl writes it); the JSON mapping equates them.
//! let json = |v: &[sereal::Value]| sereal::json::to_string(&sereal::Value::Array(v.to_vec()));
//! assert_eq!(json(&decoded), json(&events));
//!
//! // A flipped bit is caught by the checksum.
//! let mut bad = blobs[0].as_bytes().to_vec();
//! bad[6] ^= 1;
//! assert!(matches!(Blob::parse(&bad), Err(sluice_blob::BlobError::Corrupted { .. })));
//!
//! // Keys and the epochs list.
//! let key = EventKey::new(1_700_000_000, "ams1", "WEB", "", ChunkId::plain(0))?;
//! assert_eq!(key.to_string(), "1700000000:ams1:WEB::0");
//! assert_eq!(key.epoch_key().to_string(), "1700000000-ams1");
//! let mut index = EpochIndex::parse("type1:sub1:0|type1:sub1:1|type3::0")?;
//! index.merge(&EpochIndex::parse("type3::c2.0")?);
//! assert_eq!(index.to_string(), "type1:sub1:0|type1:sub1:1|type3::0|type3::c2.0");
//! # Ok::<(), sluice_blob::BlobError>(())
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod blob;
mod error;
pub mod key;
mod origins;

pub use blob::{
    append_trailer, sha1, with_trailer, writes_element_index, Blob, BlobBuilder, BlobOptions,
    BlobRef, Profile, DEFAULT_CHUNK_LIMIT, DEFAULT_ZSTD_LEVEL, MIN_CHUNK_LIMIT, TRAILER_LEN,
    TRAILER_MAGIC,
};
pub use error::{BlobError, Result};
pub use key::{ChunkId, EpochIndex, EpochKey, EventKey, IndexEntry};
pub use origins::Origins;
