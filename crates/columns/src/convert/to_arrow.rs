//! Rows → one Arrow record batch with a [`TypeSchema`]'s columns.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, ListArray, RecordBatch,
    StringArray, StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::Field;
use sereal::{EncoderOptions, Key, Value};

use super::schema::{arrow_type, column_name_allowed, fits, Kind, TypeSchema};
use super::{ConvertError, Row};

/// One step of a path in `_ints`: a key or an index.
#[derive(Clone, serde::Serialize)]
#[serde(untagged)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// Notes where `value` (which fits `kind`) has an integer in a float column.
fn int_paths<'a>(
    kind: &Kind,
    value: &'a Value,
    path: &mut Vec<Step<'a>>,
    out: &mut Vec<Vec<Step<'a>>>,
) {
    match (kind, value.resolve()) {
        (Kind::Float, Value::Int(_)) => out.push(path.clone()),
        (Kind::Struct(children), Value::Hash(entries)) => {
            for (k, v) in entries {
                let Some(name) = k.as_str() else { continue };
                if let Some(c) = children.iter().find(|c| c.name == name) {
                    path.push(Step::Key(name));
                    int_paths(&c.kind, v, path, out);
                    path.pop();
                }
            }
        }
        (Kind::List(elem), Value::Array(items)) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Step::Index(i));
                int_paths(elem, v, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Whether a kind holds a float anywhere (only then can a value have integers to note).
fn has_float(kind: &Kind) -> bool {
    match kind {
        Kind::Float => true,
        Kind::Struct(children) => children.iter().any(|c| has_float(&c.kind)),
        Kind::List(elem) => has_float(elem),
        _ => false,
    }
}

/// Rows → one batch with `schema.arrow_schema()`. Values that do not fit their column go to the
/// string sibling or `_rest` (never lost). Call [`TypeSchema::observe`] on every event first,
/// or the new fields travel in `_rest`.
pub fn to_batch(schema: &TypeSchema, rows: &[Row<'_>]) -> Result<RecordBatch, ConvertError> {
    let n = rows.len();
    let index: HashMap<&str, usize> = schema
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name.as_str(), i))
        .collect();
    let mut values: Vec<Vec<Option<&Value>>> = vec![vec![None; n]; schema.fields.len()];
    let mut strings: Vec<Vec<Option<&str>>> = schema
        .fields
        .iter()
        .map(|f| if f.strings { vec![None; n] } else { Vec::new() })
        .collect();
    let mut rest: Vec<Option<Vec<u8>>> = vec![None; n];
    let mut ints: Vec<Vec<Vec<Step<'_>>>> = (0..n).map(|_| Vec::new()).collect();
    let floats: Vec<bool> = schema.fields.iter().map(|f| has_float(&f.kind)).collect();
    let opts = EncoderOptions::default();
    for (r, row) in rows.iter().enumerate() {
        let Value::Hash(entries) = row.event.resolve() else {
            // Not a hash (never from ingest): the whole event travels in `_rest`.
            rest[r] = Some(encode(row.event, &opts)?);
            continue;
        };
        let mut leftover: Vec<(Key, Value)> = Vec::new();
        for (key, value) in entries {
            let slot = key
                .as_str()
                .filter(|name| column_name_allowed(name))
                .and_then(|name| index.get(name).copied());
            let Some(i) = slot else {
                leftover.push((key.clone(), value.clone()));
                continue;
            };
            if values[i][r].is_none() && fits(&schema.fields[i].kind, value) {
                values[i][r] = Some(value);
                if floats[i] {
                    let mut found = Vec::new();
                    let name = schema.fields[i].name.as_str();
                    let mut path = vec![Step::Key(name)];
                    int_paths(&schema.fields[i].kind, value, &mut path, &mut found);
                    ints[r].extend(found);
                }
            } else if schema.fields[i].strings && strings[i][r].is_none() {
                match value.as_str() {
                    Some(s) if !matches!(schema.fields[i].kind, Kind::Str) => {
                        strings[i][r] = Some(s);
                    }
                    _ => leftover.push((key.clone(), value.clone())),
                }
            } else {
                leftover.push((key.clone(), value.clone()));
            }
        }
        if !leftover.is_empty() {
            rest[r] = Some(encode(&Value::Hash(leftover), &opts)?);
        }
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields.len() * 2 + 4);
    columns.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|r| r.epoch),
    )));
    columns.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|r| r.subtype),
    )));
    columns.push(Arc::new(StringArray::from_iter_values(
        rows.iter().map(|r| r.chunk),
    )));
    for (i, f) in schema.fields.iter().enumerate() {
        columns.push(build(&f.kind, &values[i])?);
        if f.strings {
            columns.push(Arc::new(StringArray::from(std::mem::take(&mut strings[i]))));
        }
    }
    columns.push(Arc::new(StringArray::from(
        ints.iter()
            .map(|paths| {
                (!paths.is_empty()).then(|| serde_json::to_string(paths).unwrap_or_default())
            })
            .collect::<Vec<_>>(),
    )));
    columns.push(Arc::new(BinaryArray::from_iter(rest)));
    Ok(RecordBatch::try_new(schema.arrow_schema(), columns)?)
}

fn encode(value: &Value, opts: &EncoderOptions) -> Result<Vec<u8>, ConvertError> {
    sereal::to_vec(value, opts).map_err(|e| ConvertError::Rest(e.to_string()))
}

/// One column of `kind` from per-row values (`None`: null); every `Some` fits `kind`.
fn build(kind: &Kind, vals: &[Option<&Value>]) -> Result<ArrayRef, ConvertError> {
    Ok(match kind {
        Kind::Bool => Arc::new(BooleanArray::from(
            vals.iter()
                .map(|v| {
                    v.and_then(|v| match v.resolve() {
                        Value::Bool(b) => Some(*b),
                        _ => None,
                    })
                })
                .collect::<Vec<_>>(),
        )),
        Kind::Int => Arc::new(Int64Array::from(
            vals.iter()
                .map(|v| v.and_then(Value::as_i64))
                .collect::<Vec<_>>(),
        )),
        Kind::Float => Arc::new(Float64Array::from(
            vals.iter()
                .map(|v| v.and_then(Value::as_f64))
                .collect::<Vec<_>>(),
        )),
        Kind::Str => Arc::new(StringArray::from(
            vals.iter()
                .map(|v| v.and_then(Value::as_str))
                .collect::<Vec<_>>(),
        )),
        Kind::Struct(children) => {
            let mut fields = Vec::with_capacity(children.len());
            let mut arrays = Vec::with_capacity(children.len());
            for c in children {
                let child: Vec<Option<&Value>> = vals
                    .iter()
                    .map(|v| v.and_then(|v| v.get(&c.name)))
                    .collect();
                fields.push(Field::new(&c.name, arrow_type(&c.kind), true));
                arrays.push(build(&c.kind, &child)?);
            }
            let nulls = NullBuffer::from(vals.iter().map(Option::is_some).collect::<Vec<_>>());
            if children.is_empty() {
                Arc::new(StructArray::new_empty_fields(vals.len(), Some(nulls)))
            } else {
                Arc::new(StructArray::try_new(fields.into(), arrays, Some(nulls))?)
            }
        }
        Kind::List(elem) => {
            let mut offsets: Vec<i32> = Vec::with_capacity(vals.len() + 1);
            offsets.push(0);
            let mut items: Vec<Option<&Value>> = Vec::new();
            for v in vals {
                if let Some(Value::Array(elems)) = v.map(Value::resolve) {
                    for e in elems {
                        items.push((!matches!(e.resolve(), Value::Undef)).then_some(e));
                    }
                }
                let len = i32::try_from(items.len())
                    .map_err(|_| ConvertError::Column("a list over 2^31 items".into()))?;
                offsets.push(len);
            }
            let child = build(elem, &items)?;
            let nulls = NullBuffer::from(vals.iter().map(Option::is_some).collect::<Vec<_>>());
            Arc::new(ListArray::try_new(
                Arc::new(Field::new("item", arrow_type(elem), true)),
                OffsetBuffer::new(offsets.into()),
                child,
                Some(nulls),
            )?)
        }
    })
}
