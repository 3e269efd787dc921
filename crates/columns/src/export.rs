//! Events read back (from blobs or columns) → Arrow record batches, per (dc, type), for tools
//! outside Sluice: `sluice export --format parquet` writes them as Parquet files, the Python
//! `Reader.iter_batches()` / `to_arrow()` hand them to pyarrow.
//!
//! The batches have the history tier's layout ([`crate::convert`]): `_epoch`, `_subtype`,
//! `_chunk`, a column per field with a type that sticks per (dc, type) for the whole export,
//! `__str` siblings, `_ints` and `_rest`. Memory is bounded: at most `rows_per_batch` events
//! per (dc, type) are held before their batch goes out.

use std::collections::BTreeMap;

use arrow_array::RecordBatch;
use sereal::Value;

use crate::convert::{to_batch, ConvertError, Row, TypeSchema};

/// Events per batch by default: a Parquet row group of the history tier.
pub const DEFAULT_ROWS_PER_BATCH: usize = 65_536;

/// One batch of one (dc, type).
#[derive(Debug)]
pub struct TypeBatch {
    /// The data centre.
    pub dc: String,
    /// The event type.
    pub type_: String,
    /// The rows.
    pub batch: RecordBatch,
}

/// One event waiting for its batch.
struct Pending {
    epoch: i64,
    subtype: String,
    chunk: String,
    event: Value,
}

#[derive(Default)]
struct Group {
    schema: TypeSchema,
    rows: Vec<Pending>,
}

/// Collects events and hands out a batch per (dc, type) every `rows_per_batch` events.
pub struct ArrowBatches {
    rows_per_batch: usize,
    groups: BTreeMap<(String, String), Group>,
}

impl ArrowBatches {
    /// Batches of at most `rows_per_batch` events (at least 1).
    pub fn new(rows_per_batch: usize) -> ArrowBatches {
        ArrowBatches {
            rows_per_batch: rows_per_batch.max(1),
            groups: BTreeMap::new(),
        }
    }

    /// Adds one event; returns its (dc, type)'s batch when that one is full.
    pub fn push(
        &mut self,
        epoch: i64,
        dc: &str,
        type_: &str,
        subtype: &str,
        chunk: &str,
        event: Value,
    ) -> Result<Option<TypeBatch>, ConvertError> {
        let key = (dc.to_owned(), type_.to_owned());
        let group = self.groups.entry(key).or_default();
        group.rows.push(Pending {
            epoch,
            subtype: subtype.to_owned(),
            chunk: chunk.to_owned(),
            event,
        });
        if group.rows.len() < self.rows_per_batch {
            return Ok(None);
        }
        let batch = convert(group)?;
        Ok(Some(TypeBatch {
            dc: dc.to_owned(),
            type_: type_.to_owned(),
            batch,
        }))
    }

    /// The batches of the events left.
    pub fn finish(mut self) -> Result<Vec<TypeBatch>, ConvertError> {
        let mut out = Vec::new();
        for ((dc, type_), group) in &mut self.groups {
            if !group.rows.is_empty() {
                out.push(TypeBatch {
                    dc: dc.clone(),
                    type_: type_.clone(),
                    batch: convert(group)?,
                });
            }
        }
        Ok(out)
    }
}

/// The group's pending rows as a batch (the schema widened by them first), emptied.
fn convert(group: &mut Group) -> Result<RecordBatch, ConvertError> {
    for p in &group.rows {
        group.schema.observe(&p.event);
    }
    let rows: Vec<Row<'_>> = group
        .rows
        .iter()
        .map(|p| Row {
            epoch: p.epoch,
            subtype: &p.subtype,
            chunk: &p.chunk,
            event: &p.event,
        })
        .collect();
    let batch = to_batch(&group.schema, &rows)?;
    group.rows.clear();
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::from_batch;

    fn ev(json: &str) -> Value {
        sereal::json::from_json_slice(json.as_bytes()).expect("json")
    }

    #[test]
    fn batches_per_type_with_sticky_types_and_nothing_lost() {
        let mut b = ArrowBatches::new(2);
        assert!(b
            .push(10, "dc1", "WEB", "", "0", ev(r#"{"status":200}"#))
            .expect("push")
            .is_none());
        assert!(b
            .push(10, "dc1", "LB", "x", "0", ev(r#"{"pool":"a"}"#))
            .expect("push")
            .is_none());
        let full = b
            .push(11, "dc1", "WEB", "", "1", ev(r#"{"status":"oops"}"#))
            .expect("push")
            .expect("a full batch");
        assert_eq!((full.dc.as_str(), full.type_.as_str()), ("dc1", "WEB"));
        let rows = from_batch(&full.batch).expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].event, ev(r#"{"status":"oops"}"#));
        assert_eq!((rows[1].epoch, rows[1].chunk.as_str()), (11, "1"));
        // The type stuck: a later batch of WEB keeps status an integer column.
        b.push(12, "dc1", "WEB", "", "2", ev(r#"{"status":503}"#))
            .expect("push");
        let rest = b.finish().expect("finish");
        assert_eq!(rest.len(), 2, "LB and the last WEB event");
        let web = rest.iter().find(|t| t.type_ == "WEB").expect("web");
        let field = web.batch.schema().field_with_name("status").cloned();
        assert_eq!(
            field.expect("status").data_type(),
            &arrow_schema::DataType::Int64
        );
        assert_eq!(
            from_batch(&web.batch).expect("rows")[0].event,
            ev(r#"{"status":503}"#)
        );
    }
}
