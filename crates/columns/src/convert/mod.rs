//! Sereal events ↔ Arrow record batches: the columns of one (dc, type).
//!
//! ```text
//! _epoch _subtype _chunk | field … (STRUCT for objects, LIST for arrays) | field__str … | _rest
//! ```
//!
//! - The first three columns come from the blob key, not the event: the second, the subtype
//!   and the chunk a row was read from.
//! - A field's type **sticks** ([`TypeSchema`], kept per (dc, type) by the caller): the first
//!   type seen is kept; an integer field widens to float only while every integer seen is exact
//!   below 2^53, and a float field takes exact integers.
//! - A string where the field holds another type goes to the sibling `<name>__str`; any other
//!   value that does not fit its column (a conflict inside an object, an array mixing kinds, a
//!   `null`, a value JSON cannot hold: blessed objects, regexps, references, non-UTF-8 bytes,
//!   integers above `i64::MAX`) goes, with its whole top-level field, to `_rest`: a hash of those
//!   fields as Sereal bytes. Nothing is lost.
//! - An integer in a float column (`58` where the field mostly holds `58.5`) is stored as the
//!   float and its path noted in `_ints`, so DuckDB sees every value in the column and the
//!   reader gives the integer back.
//! - Read back ([`from_batch`]), an event equals the original as a JSON value. Not kept: key
//!   order (columns first, in schema order, then `_rest`'s), and the binary/UTF-8 distinction of
//!   strings whose bytes are UTF-8 (the JSON mapping's rule). `null` stays distinct from missing
//!   (an explicit `null` travels in `_rest`).

mod from_arrow;
mod schema;
mod to_arrow;

pub use arrow_array::RecordBatch;
pub use from_arrow::{from_batch, BatchRows};
pub use schema::{columns_for_field, TypeSchema, DEFAULT_COLUMN_CAP};
pub use to_arrow::to_batch;

/// The hidden column of the row's second (Int64).
pub const EPOCH_COLUMN: &str = "_epoch";
/// The hidden column of the row's subtype (Utf8).
pub const SUBTYPE_COLUMN: &str = "_subtype";
/// The hidden column of the row's chunk id (Utf8).
pub const CHUNK_COLUMN: &str = "_chunk";
/// Sereal bytes of a hash of the fields that have no column in this row (null when none).
pub const REST_COLUMN: &str = "_rest";
/// Where an integer sits in a float column (JSON: a list of paths, each a list of keys and
/// indexes), so that it comes back an integer (null when none).
pub const INTS_COLUMN: &str = "_ints";
/// The suffix of a field's sibling column of strings.
pub const STR_SUFFIX: &str = "__str";

/// One stored event with where it came from (the blob key's parts).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The second.
    pub epoch: i64,
    /// The subtype.
    pub subtype: &'a str,
    /// The chunk id.
    pub chunk: &'a str,
    /// The event.
    pub event: &'a sereal::Value,
}

/// One event read back from columns.
#[derive(Debug, Clone, PartialEq)]
pub struct RowOut {
    /// The second.
    pub epoch: i64,
    /// The subtype.
    pub subtype: String,
    /// The chunk id.
    pub chunk: String,
    /// The event (only the fields of the columns read).
    pub event: sereal::Value,
}

/// Why events could not be converted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// Arrow refused the arrays (a bug: the schema and the arrays disagree).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The persisted schema does not parse.
    #[error("schema: {0}")]
    Schema(String),
    /// A column the reader needs is missing or of the wrong type.
    #[error("column {0}: missing or not of its type")]
    Column(String),
    /// `_rest` bytes that do not decode.
    #[error("_rest: {0}")]
    Rest(String),
}
