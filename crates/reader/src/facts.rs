//! What a read saw besides its output ([`ReadFacts`]): the types in the epoch indexes, and per
//! select / where path whether it was met and the kinds of its values.
//!
//! Kept by the chunk decoder ([`crate::range`]), read by the hints ([`crate::hints`]) and summed
//! over polls by the tail ([`crate::tail`]); its own module so that none of them depends on
//! another for it.
use std::collections::BTreeSet;

/// What a read saw besides its output, for [`crate::RangeReader::hints`]: cheap to keep (a flag and a
/// kind mask per select / where path, a count, the types in the epoch indexes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadFacts {
    /// Events decoded or scanned (before the `where` filter; 0 for chunks never fetched).
    pub scanned: u64,
    /// Event types listed in the range's epoch indexes (before the type filter; at most
    /// [`MAX_TYPES_SEEN`]).
    pub types: BTreeSet<String>,
    /// Per lazy path (the select paths, then the filter's): whether any scanned event had it.
    pub path_seen: Vec<bool>,
    /// Per lazy path: the kinds of values met ([`KIND_NUMBER`] | [`KIND_STRING`] | [`KIND_OTHER`];
    /// known for the filter's paths, whose values are decoded for every event).
    pub path_kinds: Vec<u8>,
}

impl ReadFacts {
    /// Records a type listed in an index (up to [`MAX_TYPES_SEEN`]).
    pub fn see_type(&mut self, type_: &str) {
        if self.types.len() < MAX_TYPES_SEEN && !self.types.contains(type_) {
            self.types.insert(type_.to_owned());
        }
    }

    /// Adds what another read of the same selection saw (a tail's next poll).
    pub fn add_scan(&mut self, other: &ReadFacts) {
        self.scanned += other.scanned;
        for t in &other.types {
            self.see_type(t);
        }
        if self.path_seen.len() < other.path_seen.len() {
            self.path_seen.resize(other.path_seen.len(), false);
            self.path_kinds.resize(other.path_kinds.len(), 0);
        }
        for (a, b) in self.path_seen.iter_mut().zip(&other.path_seen) {
            *a |= *b;
        }
        for (a, b) in self.path_kinds.iter_mut().zip(&other.path_kinds) {
            *a |= *b;
        }
    }
}

/// Most distinct types [`ReadFacts::types`] keeps.
pub const MAX_TYPES_SEEN: usize = 256;
/// [`ReadFacts::path_kinds`]: a number was met.
pub const KIND_NUMBER: u8 = 1;
/// [`ReadFacts::path_kinds`]: a string was met.
pub const KIND_STRING: u8 = 2;
/// [`ReadFacts::path_kinds`]: something else (a map, an array, a boolean, null) was met.
pub const KIND_OTHER: u8 = 4;

/// The kind ([`KIND_NUMBER`], [`KIND_STRING`] or [`KIND_OTHER`]) of a decoded value.
pub(crate) fn kind_of(v: &sereal::Value) -> u8 {
    match v.resolve() {
        sereal::Value::Int(_) | sereal::Value::UInt(_) | sereal::Value::Float(_) => KIND_NUMBER,
        sereal::Value::String(_) | sereal::Value::Binary(_) => KIND_STRING,
        sereal::Value::Ref(inner) => kind_of(inner),
        _ => KIND_OTHER,
    }
}

/// The kind of a value read from a column.
pub(crate) fn kind_of_scalar(v: crate::filter::Scalar<'_>) -> u8 {
    match v {
        crate::filter::Scalar::Int(_) | crate::filter::Scalar::Float(_) => KIND_NUMBER,
        crate::filter::Scalar::Str(_) => KIND_STRING,
        crate::filter::Scalar::Bool(_) | crate::filter::Scalar::Other => KIND_OTHER,
    }
}
