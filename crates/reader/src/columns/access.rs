//! A path's value read straight from a batch's columns, as the filter sees it ([`Scalar`]): the
//! column reads evaluate `where` and the hints on these, and build the events of the rows kept
//! only.
//!
//! A path has an accessor in a file only when its value is surely in the columns: a chain of
//! keys (no index, no wildcard: those go through lists) whose top-level field the file's
//! `_rest` never holds (its footer lists the fields it does). The value is then the typed
//! column's, or at the top level its `__str` sibling's; a null in both (or in a parent struct)
//! means the event has no such path. Any other path is read from the built event, as before.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use sereal::lazy::Step;
use sereal::Path;
use sluice_columns::convert::STR_SUFFIX;

use crate::filter::Scalar;

/// Where one path's value is in a batch.
pub(crate) enum PathAccess {
    /// The file has no column for the path and `_rest` does not hold it: never there.
    Absent,
    /// In `leaf` (or, at the top level, in the `strings` sibling) unless a parent is null.
    Column {
        parents: Vec<ArrayRef>,
        leaf: ArrayRef,
        strings: Option<ArrayRef>,
    },
}

impl PathAccess {
    /// The accessor of `path` in `batch`, or `None` when the value may be elsewhere than the
    /// columns (`rest_fields`: the top-level fields `_rest` holds in the file, `None` unknown).
    pub(crate) fn new(
        batch: &RecordBatch,
        path: &Path,
        rest_fields: Option<&[String]>,
    ) -> Option<PathAccess> {
        let keys: Vec<&str> = path
            .steps()
            .iter()
            .map(|s| match s {
                Step::Key(k) => Some(k.as_str()),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let (first, rest) = keys.split_first()?;
        let rest_fields = rest_fields?;
        if rest_fields.iter().any(|f| f == "*" || f == first) {
            return None;
        }
        let schema = batch.schema();
        let strings = schema
            .index_of(&format!("{first}{STR_SUFFIX}"))
            .ok()
            .map(|i| batch.column(i).clone())
            .filter(|a| a.data_type() == &DataType::Utf8);
        let Ok(top) = schema.index_of(first) else {
            return Some(match strings {
                Some(s) if rest.is_empty() => PathAccess::Column {
                    parents: Vec::new(),
                    leaf: s,
                    strings: None,
                },
                // Strings only at the top level: a deeper path of a string field is missing.
                _ => PathAccess::Absent,
            });
        };
        let mut parents = Vec::new();
        let mut leaf = batch.column(top).clone();
        for key in rest {
            let child = match leaf.as_struct_opt() {
                Some(s) => s.column_by_name(key).cloned(),
                // A key under a scalar, a list or a string: never there.
                None => return Some(PathAccess::Absent),
            };
            let Some(child) = child else {
                return Some(PathAccess::Absent);
            };
            parents.push(leaf);
            leaf = child;
        }
        // Below the top level a string sibling cannot hold the path.
        let strings = strings.filter(|_| rest.is_empty());
        Some(PathAccess::Column {
            parents,
            leaf,
            strings,
        })
    }

    /// The value at `row`, `None` when the event has no such path.
    pub(crate) fn get(&self, row: usize) -> Option<Scalar<'_>> {
        let PathAccess::Column {
            parents,
            leaf,
            strings,
        } = self
        else {
            return None;
        };
        if parents.iter().any(|p| p.is_null(row)) {
            return None;
        }
        if leaf.is_valid(row) {
            return scalar_at(leaf, row);
        }
        strings
            .as_ref()
            .filter(|s| s.is_valid(row))
            .and_then(|s| scalar_at(s, row))
    }
}

/// The non-null value at `row` of a column.
fn scalar_at(array: &ArrayRef, row: usize) -> Option<Scalar<'_>> {
    Some(match array.data_type() {
        DataType::Int64 => Scalar::Int(array.as_primitive_opt::<Int64Type>()?.value(row)),
        DataType::Float64 => Scalar::Float(array.as_primitive_opt::<Float64Type>()?.value(row)),
        DataType::Boolean => Scalar::Bool(array.as_boolean_opt()?.value(row)),
        DataType::Utf8 => Scalar::Str(array.as_string_opt::<i32>()?.value(row).as_bytes()),
        _ => Scalar::Other,
    })
}
