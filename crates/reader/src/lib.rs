//! Reading events back.
//!
//! - [`range`]: range reads over a store ([`RangeReader`], an iterator of [`ReadItem`]s: events in
//!   epoch order, and warnings for chunks that could not be read), with dc / type / subtype
//!   filters, `--select` and `--where` through the codec's lazy reader, and NDJSON / Sereal output.
//! - [`time`]: the `--from` / `--to` arguments (Unix seconds, RFC 3339, `now`, `-5m`).
//! - [`filter`]: the `--where` expression language evaluated on decoded events or on values
//!   selected lazily from a blob.
//!
//! - [`reduce`]: group events by fields and aggregate count/sum/min/max/avg over time windows
//!   (`sluice cat --group-by … --agg … --window …`, `sluice.reduce` in Python).
//! - [`selection`]: the one [`Selection`] (dc, type, subtype, select, where) every read takes,
//!   and its query-string and command-line spellings.
//! - [`tail`]: following the live stream ([`Tail`]): history then new data with the same filters,
//!   resumable from a printable [`Cursor`].

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod filter;
pub mod range;
pub mod reduce;
pub mod selection;
pub mod tail;
pub mod time;
pub mod transform;

pub use filter::{Filter, FilterError};
pub use range::{
    write_items, write_items_noting, EventWriter, OutputFormat, RangeReader, ReadError, ReadEvent,
    ReadItem, ReadOptions, ReadRequest, ReadStats, ReadWarning, WriteSummary,
};
pub use selection::{Selection, SelectionError};
pub use tail::{Cursor, CursorError, Tail, TailOptions, TailRequest};
pub use time::{parse_time, TimeError};
pub use transform::{MultiSelect, SubstreamView};
