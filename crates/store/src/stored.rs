//! What a flush stored, as its consumers see it: the chunks of one (epoch, dc, type, subtype)
//! with their keys, index entries and bytes. The collector reports them after each flush and the
//! substreams runner derives from them; the type lives here, with the store it describes, so that
//! neither consumer depends on the other.

use std::fmt;

use crate::store::Namespace;

/// A batch of one (epoch, dc, type, subtype) whose data and index entries are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// The namespace the chunks were stored in ([`Namespace::Events`]).
    pub namespace: Namespace,
    /// The second the events belong to.
    pub epoch: i64,
    /// The datacenter.
    pub dc: String,
    /// The event type.
    pub type_: String,
    /// The event subtype.
    pub subtype: String,
    /// Events in the chunks, all together (a chunk's share is in its blob).
    pub events: u64,
    /// Of those, events that arrived late.
    pub late_events: u64,
    /// The chunks, in chunk order.
    pub chunks: Vec<StoredChunk>,
}

/// One stored chunk of a [`StoredBatch`].
#[derive(Clone, PartialEq, Eq)]
pub struct StoredChunk {
    /// The blob key, `<epoch>:<dc>:<type>:<subtype>:<chunk>`.
    pub key: String,
    /// Its epoch-index entry, `<type>:<subtype>:<chunk>`.
    pub entry: String,
    /// The blob as stored.
    pub data: Vec<u8>,
}

/// The bytes by their length only: a chunk is up to megabytes.
impl fmt::Debug for StoredChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredChunk")
            .field("key", &self.key)
            .field("entry", &self.entry)
            .field("bytes", &self.data.len())
            .finish()
    }
}
