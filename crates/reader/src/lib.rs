//! Reading events back.
//!
//! - [`range`]: range reads over a store ([`RangeReader`], an iterator of [`ReadItem`]s: events in
//!   epoch order, and warnings for chunks that could not be read), with dc / type / subtype
//!   filters, `--select` and `--where` through the codec's lazy reader. Its inputs are in
//!   [`request`] ([`ReadRequest`], [`ReadOptions`]), its outputs in [`item`], what it saw for
//!   the hints in [`facts`]; one chunk's decoding is the private `chunk` module.
//! - [`output`]: the output formats (names, parsing) and their writers ([`EventWriter`],
//!   [`write_items`]): the one owner for the CLI, the HTTP API and the Python bindings.
//! - [`time`]: the `--from` / `--to` arguments (Unix seconds or ms, RFC 3339, local times in a
//!   `--tz`, `now`, `-5m`) and how times are shown (RFC 3339 in a [`Zone`]).
//! - [`counts`]: the completeness counts of a range ([`counts::read_counts`]), for
//!   `GET /v1/counts` and `sluice counts`.
//! - [`filter`]: the `--where` expression language evaluated on decoded events or on values
//!   selected lazily from a blob.
//!
//! - [`funnel`]: how many sessions reach each of a sequence of `--where` steps, and how fast
//!   (`sluice funnel`, `GET /v1/funnel`; docs/funnels.md).
//! - [`hints`]: what to tell a user whose read printed nothing or named a field never seen
//!   (typos, a string compared with a number, a range beyond retention): one owner for the CLI
//!   and the HTTP API.
//! - [`reduce`]: group events by fields and aggregate count/sum/min/max/avg over time windows
//!   (`sluice cat --group-by … --agg … --window …`, `--count-by`, `--top`; `sluice.reduce`).
//! - [`selection`]: the one [`Selection`] (dc, type, subtype, select, where) every read takes,
//!   and its query-string and command-line spellings.
//! - [`tail`]: following the live stream ([`Tail`]): history then new data with the same filters,
//!   resumable from a printable [`Cursor`].

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod chunk;
pub use chunk::ReduceDecoder;
mod columns;
pub mod counts;
pub mod facts;
pub mod filter;
pub mod funnel;
pub mod hints;
pub mod item;
pub mod live;
pub mod output;
pub mod range;
pub mod reduce;
pub mod request;
pub mod selection;
pub mod tail;
pub mod time;
pub mod transform;

pub use facts::ReadFacts;
pub use filter::{Filter, FilterError, LiteralKind, Scalar};
pub use item::{ReadEvent, ReadItem, ReadStats, ReadWarning};
pub use live::{LiveDoc, LivePart};
pub use output::{
    write_items, write_items_noting, EventWriter, FormatError, OutputFormat, WriteSummary,
};
pub use range::{RangeReader, ReadError};
pub use request::{ReadOptions, ReadRequest};
pub use selection::{Selection, SelectionError};
pub use tail::{Cursor, CursorError, Tail, TailOptions, TailRequest};
pub use time::{format_time, parse_time, parse_time_in, TimeError, Zone};
pub use transform::{ComputeError, MultiSelect, SubstreamView, TransformError};
