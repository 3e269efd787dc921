//! [`TypeSchema`]: the sticky fields and types of one (dc, type), and its Arrow schema.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use sereal::Value;

use super::{
    ConvertError, CHUNK_COLUMN, EPOCH_COLUMN, INTS_COLUMN, REST_COLUMN, STR_SUFFIX, SUBTYPE_COLUMN,
};

/// Most top-level fields with a column of their own; the rest travel in `_rest` (VictoriaLogs
/// caps a stream at 2000 fields; a Parquet file with thousands of columns has a footer larger
/// than its data).
pub const DEFAULT_COLUMN_CAP: usize = 1000;

/// Integers a float column holds exactly: |i| ≤ 2^53.
pub(super) const EXACT_IN_F64: i64 = 1 << 53;

/// The type of a column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Kind {
    Bool,
    Int,
    Float,
    Str,
    Struct(Vec<FieldDef>),
    List(Box<Kind>),
}

/// A named column (a top-level field, or a child of a STRUCT).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct FieldDef {
    pub name: String,
    pub kind: Kind,
    /// Strings met where the field holds another type: a `<name>__str` column (top level).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strings: bool,
}

/// The sticky schema of one (dc, type): field names and types in first-seen order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeSchema {
    pub(super) fields: Vec<FieldDef>,
    #[serde(default = "default_cap")]
    pub(super) cap: usize,
}

fn default_cap() -> usize {
    DEFAULT_COLUMN_CAP
}

impl Default for TypeSchema {
    fn default() -> Self {
        TypeSchema::new()
    }
}

/// Whether a top-level name can be a column (else its values travel in `_rest`).
pub(super) fn column_name_allowed(name: &str) -> bool {
    !matches!(
        name,
        EPOCH_COLUMN | SUBTYPE_COLUMN | CHUNK_COLUMN | REST_COLUMN
    ) && !name.ends_with(STR_SUFFIX)
        && !name.is_empty()
}

impl TypeSchema {
    /// An empty schema with the default column cap.
    pub fn new() -> TypeSchema {
        TypeSchema {
            fields: Vec::new(),
            cap: DEFAULT_COLUMN_CAP,
        }
    }

    /// The same with at most `cap` top-level columns.
    pub fn with_column_cap(mut self, cap: usize) -> TypeSchema {
        self.cap = cap;
        self
    }

    /// Top-level fields with a column.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether no field has a column yet.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Takes one event into account: new fields get a column (up to the cap); a field keeps its
    /// first type (an integer column widens to float when a float comes; objects gain fields).
    pub fn observe(&mut self, event: &Value) {
        let Value::Hash(entries) = event.resolve() else {
            return;
        };
        for (key, value) in entries {
            let Some(name) = key.as_str() else { continue };
            if !column_name_allowed(name) {
                continue;
            }
            let Some(kind) = kind_of(value) else {
                continue;
            };
            let count = self.fields.len();
            match self.fields.iter_mut().find(|f| f.name == name) {
                Some(f) => {
                    let fits = merge(&mut f.kind, &kind);
                    f.strings |= !fits && kind == Kind::Str;
                }
                None if count < self.cap => self.fields.push(FieldDef {
                    name: name.to_owned(),
                    kind,
                    strings: false,
                }),
                None => {}
            }
        }
    }

    /// The Arrow schema of a file written with this schema (hidden columns first, then each
    /// field and its string sibling, then `_rest`).
    pub fn arrow_schema(&self) -> SchemaRef {
        let mut fields = vec![
            Field::new(EPOCH_COLUMN, DataType::Int64, false),
            Field::new(SUBTYPE_COLUMN, DataType::Utf8, false),
            Field::new(CHUNK_COLUMN, DataType::Utf8, false),
        ];
        for f in &self.fields {
            fields.push(Field::new(&f.name, arrow_type(&f.kind), true));
            if f.strings {
                fields.push(Field::new(
                    format!("{}{STR_SUFFIX}", f.name),
                    DataType::Utf8,
                    true,
                ));
            }
        }
        fields.push(Field::new(INTS_COLUMN, DataType::Utf8, true));
        fields.push(Field::new(REST_COLUMN, DataType::Binary, true));
        Arc::new(Schema::new(fields))
    }

    /// Persisted form (JSON) so types stick across files and restarts.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses [`TypeSchema::to_json`].
    pub fn from_json(bytes: &[u8]) -> Result<TypeSchema, ConvertError> {
        serde_json::from_slice(bytes).map_err(|e| ConvertError::Schema(e.to_string()))
    }
}

/// The columns (by name, in schema order) that hold top-level field `name`: its column, its
/// string sibling, `_ints` and `_rest` — what to project to read that field.
pub fn columns_for_field(schema: &Schema, name: &str) -> Vec<String> {
    let sibling = format!("{name}{STR_SUFFIX}");
    schema
        .fields()
        .iter()
        .map(|f| f.name())
        .filter(|n| *n == name || **n == sibling || *n == REST_COLUMN || *n == INTS_COLUMN)
        .cloned()
        .collect()
}

/// The Arrow type of a kind.
pub(super) fn arrow_type(kind: &Kind) -> DataType {
    match kind {
        Kind::Bool => DataType::Boolean,
        Kind::Int => DataType::Int64,
        Kind::Float => DataType::Float64,
        Kind::Str => DataType::Utf8,
        Kind::Struct(children) => DataType::Struct(Fields::from(
            children
                .iter()
                .map(|c| Field::new(&c.name, arrow_type(&c.kind), true))
                .collect::<Vec<_>>(),
        )),
        Kind::List(elem) => DataType::List(Arc::new(Field::new("item", arrow_type(elem), true))),
    }
}

/// The kind of a value, or `None` when it can have no column (null, an empty array, an array
/// mixing kinds, Sereal-only values, non-UTF-8 keys or bytes).
pub(super) fn kind_of(value: &Value) -> Option<Kind> {
    match value.resolve() {
        Value::Bool(_) => Some(Kind::Bool),
        Value::Int(_) => Some(Kind::Int),
        Value::UInt(u) => (*u <= i64::MAX as u64).then_some(Kind::Int),
        Value::Float(_) => Some(Kind::Float),
        Value::String(_) => Some(Kind::Str),
        Value::Binary(b) => std::str::from_utf8(b).is_ok().then_some(Kind::Str),
        Value::Hash(entries) => {
            let mut children: Vec<FieldDef> = Vec::new();
            for (k, v) in entries {
                let name = k.as_str()?;
                if children.iter().any(|c| c.name == name) {
                    return None;
                }
                let kind = kind_of(v)?;
                children.push(FieldDef {
                    name: name.to_owned(),
                    kind,
                    strings: false,
                });
            }
            // An empty object has nothing to put in columns (Parquet has no empty STRUCT).
            (!children.is_empty()).then_some(Kind::Struct(children))
        }
        Value::Array(items) => {
            let mut elem: Option<Kind> = None;
            for item in items {
                if matches!(item.resolve(), Value::Undef) {
                    continue;
                }
                let k = kind_of(item)?;
                match &mut elem {
                    None => elem = Some(k),
                    Some(e) => {
                        if !merge(e, &k) {
                            return None;
                        }
                    }
                }
            }
            elem.map(|e| Kind::List(Box::new(e)))
        }
        Value::Undef | Value::Ref(_) | Value::Object(_) | Value::Regexp(_) => None,
        Value::Shared(_) => None,
    }
}

/// Merges `new` into `have`: true when compatible (`have` widened as needed).
pub(super) fn merge(have: &mut Kind, new: &Kind) -> bool {
    match (&mut *have, new) {
        (Kind::Bool, Kind::Bool)
        | (Kind::Int, Kind::Int)
        | (Kind::Float, Kind::Float)
        | (Kind::Float, Kind::Int)
        | (Kind::Str, Kind::Str) => true,
        (Kind::Int, Kind::Float) => {
            *have = Kind::Float;
            true
        }
        (Kind::Struct(children), Kind::Struct(more)) => {
            let mut ok = true;
            for m in more {
                match children.iter_mut().find(|c| c.name == m.name) {
                    Some(c) => ok &= merge(&mut c.kind, &m.kind),
                    None => children.push(m.clone()),
                }
            }
            ok
        }
        (Kind::List(elem), Kind::List(e)) => merge(elem, e),
        _ => false,
    }
}

/// Whether `value` is stored exactly by a column of `kind` (else it goes to `_rest`).
pub(super) fn fits(kind: &Kind, value: &Value) -> bool {
    match (kind, value.resolve()) {
        (Kind::Bool, Value::Bool(_)) => true,
        (Kind::Int, Value::Int(_)) => true,
        (Kind::Int, Value::UInt(u)) => *u <= i64::MAX as u64,
        (Kind::Float, Value::Float(_)) => true,
        (Kind::Float, Value::Int(i)) => i.unsigned_abs() <= EXACT_IN_F64 as u64,
        (Kind::Str, Value::String(_)) => true,
        (Kind::Str, Value::Binary(b)) => std::str::from_utf8(b).is_ok(),
        (Kind::Struct(children), Value::Hash(entries)) => {
            let mut seen: Vec<&str> = Vec::with_capacity(entries.len());
            entries.iter().all(|(k, v)| {
                let Some(name) = k.as_str() else { return false };
                if seen.contains(&name) {
                    return false;
                }
                seen.push(name);
                children
                    .iter()
                    .find(|c| c.name == name)
                    .is_some_and(|c| fits(&c.kind, v))
            })
        }
        (Kind::List(elem), Value::Array(items)) => items
            .iter()
            .all(|i| matches!(i.resolve(), Value::Undef) || fits(elem, i)),
        _ => false,
    }
}
