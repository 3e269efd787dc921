//! What a live tail receives from memory: one acknowledged payload's accepted events, before
//! their second is flushed.
//!
//! The server's live hub (`crates/server`, `live`) builds a [`LiveDoc`] once per durable WAL
//! record, while tails are attached, and hands the same `Arc` to every tail; a
//! [`Tail`](crate::Tail) turns it into items with the selection of a stored chunk
//! ([`Tail::deliver_live`](crate::Tail::deliver_live)) and records the record's sequence number
//! in its cursor, so that the chunk that later holds these events (its WAL origins say which
//! records it holds: [`sluice_blob::Origins`]) is not delivered again.

use sluice_blob::Blob;

/// The accepted events of one WAL record (`seq`), one part per (epoch, dc, type, subtype).
#[derive(Debug, Clone)]
pub struct LiveDoc {
    /// The WAL record's sequence number (≥ 1).
    pub seq: u64,
    /// The latest epoch among the record's events (bounds how long a cursor must remember
    /// `seq`: a tail never looks at chunks of epochs below its watermark).
    pub max_epoch: i64,
    /// The record's events, by group, in payload order within each group.
    pub parts: Vec<LivePart>,
}

/// The events of one WAL record that belong to one (epoch, dc, type, subtype).
#[derive(Debug, Clone)]
pub struct LivePart {
    /// The events' second.
    pub epoch: i64,
    /// Data-centre id.
    pub dc: String,
    /// Event type.
    pub type_: String,
    /// Subtype (possibly empty).
    pub subtype: String,
    /// The events as a blob of the default profile (a Sereal array with the `=chk` trailer),
    /// encoded as the aggregator encodes them into the group's chunk, so that a tail prints them
    /// as it would print them read back from the store.
    pub blob: Blob,
}
