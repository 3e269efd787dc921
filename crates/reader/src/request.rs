//! What a range read is asked for: [`ReadRequest`] (which epochs, which events) and
//! [`ReadOptions`] (namespace, decoder limits, batch size, substream, checksums).
//!
//! Its own module because the reader ([`crate::range`]), the hints ([`crate::hints`]) and the
//! tail ([`crate::tail`]) all take them: none of them owns the others' inputs.

use std::sync::Arc;

use sereal::Limits;
use sluice_store::Namespace;

use crate::selection::Selection;
use crate::transform::SubstreamView;

/// What to read: a half-open range of epochs and a [`Selection`].
#[derive(Debug, Clone, Default)]
pub struct ReadRequest {
    /// First epoch (Unix second) included.
    pub from: i64,
    /// First epoch *not* included (`to == from` reads nothing).
    pub to: i64,
    /// Which events, and which parts of them.
    pub selection: Selection,
}

impl ReadRequest {
    /// Every event of `from <= epoch < to`.
    pub fn new(from: i64, to: i64) -> ReadRequest {
        ReadRequest {
            from,
            to,
            ..ReadRequest::default()
        }
    }

    /// The events `selection` picks from `from <= epoch < to`.
    pub fn selected(from: i64, to: i64, selection: Selection) -> ReadRequest {
        ReadRequest {
            from,
            to,
            selection,
        }
    }

    /// Whether the lazy reader is used (a `select` or a `filter` is given).
    pub fn is_lazy(&self) -> bool {
        self.selection.is_lazy()
    }
}

/// How to read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The namespace to read (`events`, or a substream: same keys, same blob format).
    pub namespace: Namespace,
    /// Limits of the Sereal decoder (per chunk).
    pub limits: Limits,
    /// Chunks fetched per [`sluice_store::ReadStore::get_blobs`] call (at least 1; default 16). The store may fetch
    /// them in parallel; the reader holds at most this many chunks' bytes at once.
    pub fetch_batch: usize,
    /// The substream named by [`Selection::substream`] (required with it; see "Substreams" in
    /// the module docs). `namespace` is then ignored.
    pub substream: Option<Arc<dyn SubstreamView>>,
    /// Check every chunk's SHA-1 trailer even when the store checked a checksum of the same
    /// bytes on the read ([`sluice_store::ReadStore::checks_each_read`]: the embedded store and Cassandra do,
    /// so by default their chunks are not hashed twice). Default: false (`sluice cat --verify-sha1`).
    pub verify_sha1: bool,
    /// The column files: chunks a file holds are read from it, the rest from blobs (same
    /// answer). `None` reads blobs only (`columns=off`). Not used by substream reads.
    pub columns: Option<Arc<sluice_columns::view::ColumnsView>>,
    /// The paths the consumer reads of each event (a reduce's fields): the columns then read
    /// only those fields. `None`: whole events. Ignored with a `select` (which names its own).
    pub needs: Option<Vec<sereal::Path>>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            namespace: Namespace::Events,
            limits: Limits::default(),
            fetch_batch: 16,
            substream: None,
            verify_sha1: false,
            columns: None,
            needs: None,
        }
    }
}
