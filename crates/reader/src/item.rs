//! What a range read yields: [`ReadItem`]s (an event, a warning, a notice) and the counters of
//! a read so far ([`ReadStats`]).
//!
//! Its own module because the reader produces them and everything downstream (the hints, the
//! tail, the output writers, the HTTP handlers) consumes them without needing the reader.

use std::fmt;
use std::sync::Arc;

use sereal::Value;
use sluice_blob::EventKey;

/// One event read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadEvent {
    /// The key of the chunk it came from (epoch, dc, type, subtype, chunk); shared by the
    /// chunk's events.
    pub key: Arc<EventKey>,
    /// The event (a map), or with a `select` the map of selected paths.
    pub value: Value,
    /// How many identical events this one stands for: 1, unless [`crate::ReadOptions::repeats`]
    /// let the columns hand over one sparse event for several equal ones.
    pub repeat: u64,
}

/// Something that went wrong with part of a range: the part is skipped, the read goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWarning {
    /// The event key of the chunk (`<epoch>:<dc>:<type>:<subtype>:<chunk>`), or the epochs key
    /// (`<epoch>-<dc>`) when the epoch's index could not be read.
    pub key: String,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for ReadWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// What a [`crate::RangeReader`] yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadItem {
    /// An event (or the selection of one).
    Event(ReadEvent),
    /// A chunk or an epoch index that could not be read (and is skipped).
    Warning(ReadWarning),
    /// Something the reader did that the caller should know but that loses nothing: a
    /// substream result computed client-side from the full blob (the "fallback"). Says so on
    /// stderr / in the HTTP trailer; not a partial read.
    Notice(ReadWarning),
}

/// Counters of a read so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// `(epoch, dc)` pairs listed.
    pub epochs: usize,
    /// Chunks fetched (including ones that turned out bad).
    pub chunks: usize,
    /// Bytes of chunks fetched.
    pub bytes: u64,
    /// Events yielded (after the filter).
    pub events: u64,
    /// Warnings yielded.
    pub warnings: u64,
    /// Substream results computed client-side from the full blob (fallbacks).
    pub fallbacks: u64,
    /// Chunks read from column files instead of their blobs.
    pub from_columns: u64,
}
