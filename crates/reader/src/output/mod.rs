//! Writing a read's events out: the output formats by name ([`OutputFormat`], one parser and
//! one error listing the valid names: [`FormatError`]) and the writers of each
//! ([`EventWriter`], [`write_items`]). The one owner for `sluice cat` / `sluice tail`, the HTTP
//! API (`format=`) and the client; the CLI adds only its flags (terminal, `NO_COLOR`).
//!
//! | name | one event as | times | taken by |
//! |---|---|---|---|
//! | `json` (`ndjson`) | the event's NDJSON line, unchanged | `epoch` as stored | all |
//! | `sereal` | one Sereal document | `epoch` as stored | `cat`, HTTP |
//! | `pretty` | `TIME TYPE[/SUBTYPE] [dc] key=value …` | RFC 3339 in a [`Zone`](crate::Zone) | `cat`, `tail` |
//! | `table` | aligned columns with a header | RFC 3339 | `cat`, `tail` |
//! | `logfmt` | `time=… type=… key=value …` (values quoted when needed) | RFC 3339 | `cat`, `tail` |
//!
//! # Contract
//! - `json` output is byte for byte what it was before other formats existed (consumers parse
//!   it); it is never colored.
//! - The human formats show the event's `epoch` (when it is a number) as `time` in RFC 3339
//!   ([`crate::format_time`]: UTC with `Z`, or the zone's offset); the other fields follow in
//!   their stored order, nested values as compact JSON. Color only in `pretty` and `table`.
//! - `table` fixes its columns from the first [`TABLE_SAMPLE`] events (or the first batch of a
//!   tail: [`EventWriter::end_batch`]): `time`, `type`, then fields in order of first
//!   appearance, at most [`TABLE_COLUMNS`]; a cell is cut at [`TABLE_CELL`] characters.
//!
//! # Sereal
//! `sereal` is **one Sereal document per event** (protocol 5, uncompressed), concatenated. Each
//! document is self-delimiting ([`sereal::Document::len`] / Perl's `decode_with_offset`), so a
//! consumer reads them in sequence and a stream can be cut after any event (HTTP streaming,
//! `head`); per-event documents lose the cross-event string de-duplication of a blob, which is
//! the price of that.

mod format;
mod human;
mod items;
mod writer;

pub use format::{FormatError, OutputFormat};
pub use human::{TABLE_CELL, TABLE_COLUMNS, TABLE_SAMPLE};
pub use items::{write_items, write_items_noting, WriteSummary};
pub use writer::EventWriter;
