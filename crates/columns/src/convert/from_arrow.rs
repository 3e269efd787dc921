//! A record batch (all columns, or a projection) → events.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use sereal::{Key, Value};

use super::{
    ConvertError, RowOut, CHUNK_COLUMN, EPOCH_COLUMN, INTS_COLUMN, REST_COLUMN, STR_SUFFIX,
    SUBTYPE_COLUMN,
};

/// What a column holds for the event.
#[derive(Debug, Clone)]
enum Role {
    /// The field of this name, with the keys of its nested objects.
    Field(Key, Shape),
    /// Strings of the field of this name.
    Strings(Key),
    /// `_rest`.
    Rest,
    /// `_ints`.
    Ints,
}

/// A batch (possibly projected: any subset of columns, the hidden ones required) → rows; each
/// event holds the fields present (non-null) in the columns read, then `_rest`'s fields.
pub fn from_batch(batch: &RecordBatch) -> Result<Vec<RowOut>, ConvertError> {
    let rows = BatchRows::new(batch)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in 0..rows.len() {
        out.push(RowOut {
            epoch: rows.epoch(row),
            subtype: rows.subtype(row).to_owned(),
            chunk: rows.chunk(row).to_owned(),
            event: rows.event(row)?,
        });
    }
    Ok(out)
}

/// A batch read back row by row, on demand: the key columns of any row, and the event of only
/// the rows asked for (a filtered read builds the events it keeps, not the others).
#[derive(Debug, Clone)]
pub struct BatchRows {
    batch: RecordBatch,
    epochs: Int64Array,
    subtypes: StringArray,
    chunks: StringArray,
    /// Every other column, with what it holds for the event.
    roles: Vec<(Role, ArrayRef)>,
}

impl BatchRows {
    /// The rows of `batch`; fails when a hidden column is missing or not of its type.
    pub fn new(batch: &RecordBatch) -> Result<BatchRows, ConvertError> {
        let schema = batch.schema();
        let column = |name: &str| {
            schema
                .index_of(name)
                .map(|i| batch.column(i).clone())
                .map_err(|_| ConvertError::Column(name.to_owned()))
        };
        let epochs = column(EPOCH_COLUMN)?
            .as_primitive_opt::<Int64Type>()
            .cloned()
            .ok_or_else(|| ConvertError::Column(EPOCH_COLUMN.into()))?;
        let subtypes = column(SUBTYPE_COLUMN)?
            .as_string_opt::<i32>()
            .cloned()
            .ok_or_else(|| ConvertError::Column(SUBTYPE_COLUMN.into()))?;
        let chunks = column(CHUNK_COLUMN)?
            .as_string_opt::<i32>()
            .cloned()
            .ok_or_else(|| ConvertError::Column(CHUNK_COLUMN.into()))?;
        let mut roles: Vec<(Role, ArrayRef)> = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            let name = f.name().as_str();
            let role = match name {
                EPOCH_COLUMN | SUBTYPE_COLUMN | CHUNK_COLUMN => continue,
                REST_COLUMN => Role::Rest,
                INTS_COLUMN => Role::Ints,
                _ => match name.strip_suffix(STR_SUFFIX) {
                    Some(base) if f.data_type() == &DataType::Utf8 => {
                        Role::Strings(Key::Utf8(Arc::from(base)))
                    }
                    _ => Role::Field(Key::Utf8(Arc::from(name)), Shape::of(f.data_type())),
                },
            };
            roles.push((role, batch.column(i).clone()));
        }
        Ok(BatchRows {
            batch: batch.clone(),
            epochs,
            subtypes,
            chunks,
            roles,
        })
    }

    /// The batch.
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.epochs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.epochs.is_empty()
    }

    /// The second of `row`.
    pub fn epoch(&self, row: usize) -> i64 {
        self.epochs.value(row)
    }

    /// The subtype of `row`.
    pub fn subtype(&self, row: usize) -> &str {
        self.subtypes.value(row)
    }

    /// The chunk id of `row`.
    pub fn chunk(&self, row: usize) -> &str {
        self.chunks.value(row)
    }

    /// The event of `row` (the fields of the columns read).
    pub fn event(&self, row: usize) -> Result<Value, ConvertError> {
        let mut entries: Vec<(Key, Value)> = Vec::new();
        let mut whole: Option<Value> = None;
        let mut ints: Option<&str> = None;
        for (role, array) in &self.roles {
            if array.is_null(row) {
                continue;
            }
            match role {
                Role::Field(key, shape) => {
                    entries.push((key.clone(), value_at(array, row, shape)?))
                }
                Role::Strings(key) => {
                    let s = array.as_string_opt::<i32>().ok_or_else(|| {
                        ConvertError::Column(format!(
                            "{}{STR_SUFFIX}",
                            String::from_utf8_lossy(key.as_bytes())
                        ))
                    })?;
                    entries.push((key.clone(), Value::String(s.value(row).to_owned())));
                }
                Role::Ints => {
                    let s = array
                        .as_string_opt::<i32>()
                        .ok_or_else(|| ConvertError::Column(INTS_COLUMN.into()))?;
                    ints = Some(s.value(row));
                }
                Role::Rest => {
                    let bytes = array
                        .as_binary_opt::<i32>()
                        .ok_or_else(|| ConvertError::Column(REST_COLUMN.into()))?
                        .value(row);
                    match sereal::from_slice(bytes)
                        .map_err(|e| ConvertError::Rest(e.to_string()))?
                    {
                        Value::Hash(more) => entries.extend(more),
                        other => whole = Some(other),
                    }
                }
            }
        }
        if let Some(text) = ints {
            let paths: Vec<Vec<serde_json::Value>> = serde_json::from_str(text)
                .map_err(|e| ConvertError::Column(format!("{INTS_COLUMN}: {e}")))?;
            for path in &paths {
                restore_int(&mut entries, path);
            }
        }
        Ok(whole.unwrap_or(Value::Hash(entries)))
    }
}

/// Turns the float at `path` (keys and indexes) back into the integer it was.
fn restore_int(entries: &mut [(Key, Value)], path: &[serde_json::Value]) {
    let Some((serde_json::Value::String(first), rest)) = path.split_first() else {
        return;
    };
    let Some(mut at) = entries
        .iter_mut()
        .find(|(k, _)| k.as_bytes() == first.as_bytes())
        .map(|(_, v)| v)
    else {
        return;
    };
    for step in rest {
        let next = match (step, at) {
            (serde_json::Value::String(k), Value::Hash(h)) => h
                .iter_mut()
                .find(|(key, _)| key.as_bytes() == k.as_bytes())
                .map(|(_, v)| v),
            (serde_json::Value::Number(i), Value::Array(items)) => {
                i.as_u64().and_then(|i| items.get_mut(i as usize))
            }
            _ => None,
        };
        let Some(next) = next else { return };
        at = next;
    }
    if let Value::Float(f) = *at {
        *at = Value::Int(f as i64);
    }
}

/// The keys of a column's nested objects, made once per batch: a row's event clones them (an
/// `Arc` each) instead of allocating them.
#[derive(Debug, Clone)]
enum Shape {
    /// A scalar.
    Leaf,
    /// An object: its fields' keys and shapes, in the struct's order.
    Struct(Vec<(Key, Shape)>),
    /// An array of items of this shape.
    List(Box<Shape>),
}

impl Shape {
    fn of(data_type: &DataType) -> Shape {
        match data_type {
            DataType::Struct(fields) => Shape::Struct(
                fields
                    .iter()
                    .map(|f| {
                        (
                            Key::Utf8(Arc::from(f.name().as_str())),
                            Shape::of(f.data_type()),
                        )
                    })
                    .collect(),
            ),
            DataType::List(item) => Shape::List(Box::new(Shape::of(item.data_type()))),
            _ => Shape::Leaf,
        }
    }
}

/// The value at `row` of a non-null slot.
fn value_at(array: &ArrayRef, row: usize, shape: &Shape) -> Result<Value, ConvertError> {
    let bad = || ConvertError::Column(format!("of type {}", array.data_type()));
    Ok(match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean_opt().ok_or_else(bad)?.value(row)),
        DataType::Int64 => Value::Int(
            array
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(bad)?
                .value(row),
        ),
        DataType::Float64 => Value::Float(
            array
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(bad)?
                .value(row),
        ),
        DataType::Utf8 => Value::String(
            array
                .as_string_opt::<i32>()
                .ok_or_else(bad)?
                .value(row)
                .to_owned(),
        ),
        DataType::Struct(fields) => {
            let s = array.as_struct_opt().ok_or_else(bad)?;
            let Shape::Struct(keys) = shape else {
                return Err(bad());
            };
            let mut entries = Vec::with_capacity(fields.len());
            for ((key, child_shape), child) in keys.iter().zip(s.columns()) {
                if !child.is_null(row) {
                    entries.push((key.clone(), value_at(child, row, child_shape)?));
                }
            }
            Value::Hash(entries)
        }
        DataType::List(_) => {
            let l = array.as_list_opt::<i32>().ok_or_else(bad)?;
            let Shape::List(item_shape) = shape else {
                return Err(bad());
            };
            let items = l.value(row);
            let mut out = Vec::with_capacity(items.len());
            for i in 0..items.len() {
                out.push(if items.is_null(i) {
                    Value::Undef
                } else {
                    value_at(&items, i, item_shape)?
                });
            }
            Value::Array(out)
        }
        _ => return Err(bad()),
    })
}
