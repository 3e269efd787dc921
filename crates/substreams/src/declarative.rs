//! Declarative substreams: every `--select` / `--where` substream that applies to a blob, in
//! **one** pass over it ([`sluice_reader::MultiSelect`]: one lazy walk per event over the paths
//! every event needs, each distinct `where` evaluated once per event for all of them, outputs
//! read only for the events a filter kept), and the encoding of any result as a normal Sluice
//! blob.
//!
//! # Contract
//! - [`DeclarativeSet::apply`] gives, per substream, exactly what a range read with that
//!   substream's selection gives for the blob (same code), or one error for all of them (a blob
//!   is all or nothing).
//! - [`encode_result`] makes a blob of the default profile (Sereal v5 + zstd, `=chk` SHA-1) of
//!   the result events: always **one** blob (the size is bounded by the substream's
//!   `max_result_bytes` budget instead of by chunking), so a result has exactly the key of the
//!   blob it came from.

use std::collections::HashMap;

use sereal::{Limits, Value};
use sluice_blob::{BlobBuilder, BlobError, BlobOptions, Profile};
use sluice_reader::{MultiSelect, Selection, TransformError};

/// The one-pass sets built so far, by the names of the substreams in them (blobs of different
/// types see different sets; a registry change clears them).
#[derive(Debug, Default)]
pub struct DeclarativeSet {
    sets: HashMap<Vec<String>, MultiSelect>,
}

impl DeclarativeSet {
    /// Forgets the built sets (the registry changed).
    pub fn clear(&mut self) {
        self.sets.clear();
    }

    /// The outputs of `subs` (name, selection) on the blob `bytes`, in their order.
    pub fn apply(
        &mut self,
        subs: &[(&str, &Selection)],
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<Vec<Vec<Value>>, TransformError> {
        let names: Vec<String> = subs.iter().map(|(n, _)| (*n).to_owned()).collect();
        if self.sets.len() > 1024 {
            self.sets.clear();
        }
        let set = self
            .sets
            .entry(names)
            .or_insert_with(|| MultiSelect::new(subs.iter().map(|(_, s)| *s)));
        set.apply(bytes, limits)
    }
}

/// The builder of result blobs (default profile, one chunk: the result budget bounds the size).
/// Reuse it: it keeps its encoder and buffers.
pub fn result_builder() -> Result<BlobBuilder, BlobError> {
    let opts = BlobOptions {
        chunk_limit: usize::MAX / 4,
        split_threads: 1,
        ..BlobOptions::with_profile(Profile::default())
    };
    BlobBuilder::new(opts)
}

/// Why a result could not be made into a blob.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The encoder refused the events.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The events did not fit one blob (a result has exactly its source blob's key).
    #[error("result encoded as {0} blobs, expected one")]
    NotOne(usize),
}

/// One blob (default profile, one chunk) holding `events`, built with a [`result_builder`].
pub fn encode_result(builder: &mut BlobBuilder, events: &[Value]) -> Result<Vec<u8>, EncodeError> {
    let mut blobs = builder.build(events)?;
    match blobs.len() {
        1 => Ok(blobs.remove(0).into_bytes()),
        n => Err(EncodeError::NotOne(n)),
    }
}
