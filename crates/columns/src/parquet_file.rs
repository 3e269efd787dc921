//! One Parquet file: written whole into memory with the tier's knobs, opened from bytes, read
//! with projection and pruning.
//!
//! The knobs and their measured reasons (`docs/decisions.md`, "History tier"): zstd 9 (43 → 41
//! B/event over zstd 3 at +0.4 CPU-s per 400 k events); 64 k-row groups (statistics and blooms
//! prune at that grain); dictionaries only on columns whose distinct values are at most a tenth
//! of the rows ("autodict": 43.1 → 37.3 B/event at zstd 3); bloom filters (1 %) on string columns
//! with more distinct values than a tenth of the rows (a `request_id` needle reads 1 row group of
//! 8); page statistics, so the column and offset indexes are written; `sorting_columns` =
//! (`_epoch`, `_subtype`, `_chunk`).

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
pub use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnPath;

use crate::convert::EPOCH_COLUMN;

/// The footer key naming the top-level fields `_rest` holds anywhere in the file (JSON list).
pub const REST_FIELDS_KEY: &str = "sluice.rest_fields";
/// Rows per batch when reading.
const READ_BATCH_ROWS: usize = 8192;
/// Distinct values counted per column before giving up (the column then counts as "many").
const DISTINCT_CAP: usize = 1 << 20;

/// Why a Parquet file could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParquetFileError {
    /// The parquet crate's error.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Arrow's error.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// Nothing to write.
    #[error("no batches to write")]
    Empty,
}

/// The writer's knobs (defaults: the measured candidate of the research).
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// zstd level (1..=22).
    pub zstd_level: i32,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// False-positive rate of the bloom filters.
    pub bloom_fpp: f64,
    /// A string column gets a dictionary when its distinct values are at most this share of
    /// the rows.
    pub dictionary_max_ratio: f64,
    /// A string column gets a bloom filter when its distinct values are over this share of the
    /// rows.
    pub bloom_min_ratio: f64,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            zstd_level: 9,
            row_group_rows: 65_536,
            bloom_fpp: 0.01,
            dictionary_max_ratio: 0.1,
            bloom_min_ratio: 0.1,
        }
    }
}

/// Distinct non-null values of each top-level string column: (name, distinct, rows).
fn string_cardinality(batches: &[RecordBatch]) -> Vec<(String, usize, usize)> {
    let Some(first) = batches.first() else {
        return Vec::new();
    };
    let schema = first.schema();
    let mut out = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        if f.data_type() != &DataType::Utf8 {
            continue;
        }
        let mut seen: HashSet<&str> = HashSet::new();
        let mut rows = 0;
        for b in batches {
            let Some(col) = b.column(i).as_string_opt::<i32>() else {
                continue;
            };
            for v in col.iter().flatten() {
                rows += 1;
                if seen.len() < DISTINCT_CAP {
                    seen.insert(v);
                }
            }
        }
        out.push((f.name().clone(), seen.len(), rows));
    }
    out
}

/// The top-level keys of every `_rest` value (a non-hash event counts as holding everything).
fn rest_fields(batches: &[RecordBatch]) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    for b in batches {
        let Ok(i) = b.schema().index_of(crate::convert::REST_COLUMN) else {
            continue;
        };
        let Some(col) = b.column(i).as_binary_opt::<i32>() else {
            continue;
        };
        for bytes in col.iter().flatten() {
            match sereal::from_slice(bytes) {
                Ok(sereal::Value::Hash(h)) => {
                    names.extend(
                        h.iter()
                            .map(|(k, _)| String::from_utf8_lossy(k.as_bytes()).into_owned()),
                    );
                }
                // Not a hash, or unreadable: any field may be in it; say so with every name.
                _ => {
                    names.insert("*".to_owned());
                }
            }
        }
    }
    names.into_iter().collect()
}

/// Writes batches (same schema) as one Parquet file in memory, with key-value metadata.
pub fn write_file(
    batches: &[RecordBatch],
    metadata: &[(String, String)],
    opts: &WriteOptions,
) -> Result<Vec<u8>, ParquetFileError> {
    let first = batches.first().ok_or(ParquetFileError::Empty)?;
    let schema = first.schema();
    let level = ZstdLevel::try_new(opts.zstd_level.clamp(1, 22))?;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(opts.row_group_rows.max(1)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_sorting_columns(Some(
            (0..3)
                .map(|i| SortingColumn {
                    column_idx: i,
                    descending: false,
                    nulls_first: false,
                })
                .collect(),
        ));
    // Non-string columns: dictionaries pay for ints with few values (status) and cost little
    // otherwise (the writer falls back above its page limit).
    for (name, distinct, rows) in string_cardinality(batches) {
        let path = ColumnPath::from(name.as_str());
        let many = rows > 0 && distinct as f64 > rows as f64 * opts.bloom_min_ratio;
        let few = rows == 0 || distinct as f64 <= rows as f64 * opts.dictionary_max_ratio;
        props = props.set_column_dictionary_enabled(path.clone(), few);
        if many {
            props = props
                .set_column_bloom_filter_enabled(path.clone(), true)
                .set_column_bloom_filter_fpp(path.clone(), opts.bloom_fpp)
                .set_column_bloom_filter_max_ndv(path, distinct.max(1) as u64);
        }
    }
    let mut kv: Vec<KeyValue> = metadata
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    kv.push(KeyValue::new(
        REST_FIELDS_KEY.to_owned(),
        serde_json::to_string(&rest_fields(batches)).unwrap_or_default(),
    ));
    props = props.set_key_value_metadata(Some(kv));
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props.build()))?;
    for b in batches {
        writer.write(b)?;
    }
    writer.close()?;
    Ok(out)
}

/// What to read from a file. Pruning is coarse (row groups); callers filter rows exactly.
#[derive(Debug, Clone)]
pub struct FileQuery {
    /// Columns to read by name (`None`: all; names the file lacks are ignored).
    pub columns: Option<Vec<String>>,
    /// First second wanted.
    pub epoch_from: i64,
    /// One past the last second wanted.
    pub epoch_to: i64,
    /// Only these subtypes (`None`: all).
    pub subtypes: Option<Vec<String>>,
    /// `column == value` on top-level string columns: row groups whose statistics or bloom
    /// filter rule the value out are skipped.
    pub string_equals: Vec<(String, String)>,
    /// `min <= column <= max` on top-level numeric columns (bounds inclusive, `None` open).
    pub numeric_ranges: Vec<(String, Option<f64>, Option<f64>)>,
}

impl FileQuery {
    /// Every row, every column.
    pub fn all() -> FileQuery {
        FileQuery {
            columns: None,
            epoch_from: i64::MIN,
            epoch_to: i64::MAX,
            subtypes: None,
            string_equals: Vec::new(),
            numeric_ranges: Vec::new(),
        }
    }
}

impl Default for FileQuery {
    fn default() -> Self {
        FileQuery::all()
    }
}

/// An opened file: bytes in memory, footer parsed once; cheap to clone.
#[derive(Clone)]
pub struct ParquetFile {
    bytes: Bytes,
    meta: ArrowReaderMetadata,
}

impl std::fmt::Debug for ParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetFile")
            .field("bytes", &self.bytes.len())
            .field("rows", &self.num_rows())
            .finish()
    }
}

impl ParquetFile {
    /// Parses the footer of a whole file.
    pub fn open(bytes: Bytes) -> Result<ParquetFile, ParquetFileError> {
        let meta = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new())?;
        Ok(ParquetFile { bytes, meta })
    }

    /// A key-value metadata entry of the footer.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.meta
            .metadata()
            .file_metadata()
            .key_value_metadata()?
            .iter()
            .find(|kv| kv.key == key)?
            .value
            .as_deref()
    }

    /// The Arrow schema.
    pub fn arrow_schema(&self) -> SchemaRef {
        self.meta.schema().clone()
    }

    /// Rows in the file.
    pub fn num_rows(&self) -> u64 {
        self.meta.metadata().file_metadata().num_rows().max(0) as u64
    }

    /// Bytes of the file.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the file has no bytes (never, for a file that opened).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The leaf index of a top-level column (its only leaf for a primitive column).
    fn leaf(&self, name: &str) -> Option<usize> {
        self.meta
            .metadata()
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.path().string() == name)
    }

    /// Reads the rows `query` may want, a batch at a time (an owned iterator: it holds the
    /// file's bytes, not a borrow).
    pub fn read(&self, query: &FileQuery) -> Result<ParquetRecordBatchReader, ParquetFileError> {
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.bytes.clone(),
            self.meta.clone(),
        );
        let md = self.meta.metadata().clone();
        let epoch_leaf = self.leaf(EPOCH_COLUMN);
        let mut keep = Vec::new();
        for (i, rg) in md.row_groups().iter().enumerate() {
            if let Some(leaf) = epoch_leaf {
                if let Some(Statistics::Int64(s)) = rg.column(leaf).statistics() {
                    if let (Some(min), Some(max)) = (s.min_opt(), s.max_opt()) {
                        if *max < query.epoch_from || *min >= query.epoch_to {
                            continue;
                        }
                    }
                }
            }
            if !self.numeric_ranges_may_match(rg, query) {
                continue;
            }
            if !self.needles_may_match(&builder, i, rg, query)? {
                continue;
            }
            keep.push(i);
        }
        // A range narrower than the row groups kept: rows are sorted by second, so read the
        // `_epoch` column alone first and select only the rows of the range.
        let narrower = keep.iter().any(|&i| {
            epoch_leaf
                .and_then(|leaf| match md.row_group(i).column(leaf).statistics() {
                    Some(Statistics::Int64(s)) => Some((*s.min_opt()?, *s.max_opt()?)),
                    _ => None,
                })
                .is_none_or(|(min, max)| min < query.epoch_from || max >= query.epoch_to)
        });
        let selection = match (narrower, epoch_leaf) {
            (true, Some(_)) if query.epoch_from > i64::MIN || query.epoch_to < i64::MAX => {
                Some(self.epoch_selection(&keep, query.epoch_from, query.epoch_to)?)
            }
            _ => None,
        };
        let mut builder = builder
            .with_row_groups(keep)
            .with_batch_size(READ_BATCH_ROWS);
        if let Some(selection) = selection {
            builder = builder.with_row_selection(selection);
        }
        if let Some(cols) = &query.columns {
            let schema = self.meta.schema();
            let roots: Vec<usize> = schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| cols.iter().any(|c| c == f.name()))
                .map(|(i, _)| i)
                .collect();
            let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), roots);
            builder = builder.with_projection(mask);
        }
        Ok(builder.build()?)
    }

    /// The rows of row groups `keep` whose `_epoch` lies in `[from, to)`.
    fn epoch_selection(
        &self,
        keep: &[usize],
        from: i64,
        to: i64,
    ) -> Result<RowSelection, ParquetFileError> {
        let schema = self.meta.schema();
        let root = schema.index_of(EPOCH_COLUMN)?;
        let mask =
            ProjectionMask::roots(self.meta.metadata().file_metadata().schema_descr(), [root]);
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.bytes.clone(),
            self.meta.clone(),
        )
        .with_row_groups(keep.to_vec())
        .with_projection(mask)
        .with_batch_size(READ_BATCH_ROWS)
        .build()?;
        let mut selectors: Vec<RowSelector> = Vec::new();
        let mut push = |wanted: bool, n: usize| match selectors.last_mut() {
            Some(last) if last.skip != wanted => last.row_count += n,
            _ => selectors.push(if wanted {
                RowSelector::select(n)
            } else {
                RowSelector::skip(n)
            }),
        };
        for batch in reader {
            let batch = batch?;
            let Some(epochs) = batch
                .column(0)
                .as_primitive_opt::<arrow_array::types::Int64Type>()
            else {
                return Err(ParquetFileError::Arrow(
                    arrow_schema::ArrowError::SchemaError(format!("{EPOCH_COLUMN} is not Int64")),
                ));
            };
            for e in epochs.values().iter() {
                push((from..to).contains(e), 1);
            }
        }
        Ok(RowSelection::from(selectors))
    }

    fn numeric_ranges_may_match(
        &self,
        rg: &parquet::file::metadata::RowGroupMetaData,
        query: &FileQuery,
    ) -> bool {
        for (name, lo, hi) in &query.numeric_ranges {
            let Some(leaf) = self.leaf(name) else {
                // A file without the column has no row where it holds a number.
                return false;
            };
            let (min, max) = match rg.column(leaf).statistics() {
                Some(Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                    (Some(a), Some(b)) => (*a as f64, *b as f64),
                    _ => continue,
                },
                Some(Statistics::Double(s)) => match (s.min_opt(), s.max_opt()) {
                    (Some(a), Some(b)) => (*a, *b),
                    _ => continue,
                },
                _ => continue,
            };
            if lo.is_some_and(|lo| max < lo) || hi.is_some_and(|hi| min > hi) {
                return false;
            }
        }
        true
    }

    fn needles_may_match(
        &self,
        builder: &ParquetRecordBatchReaderBuilder<Bytes>,
        rg_index: usize,
        rg: &parquet::file::metadata::RowGroupMetaData,
        query: &FileQuery,
    ) -> Result<bool, ParquetFileError> {
        // A string may also sit in the field's `__str` sibling or in `_rest`: prune only when
        // neither can hold it (the footer names every field `_rest` holds in the file).
        let rest_fields: Option<Vec<String>> = self
            .metadata_value(REST_FIELDS_KEY)
            .and_then(|t| serde_json::from_str(t).ok());
        for (name, value) in &query.string_equals {
            let in_rest = rest_fields
                .as_ref()
                .is_none_or(|f| f.iter().any(|n| n == name || n == "*"));
            let sibling = format!("{name}{}", crate::convert::STR_SUFFIX);
            if in_rest || self.leaf(&sibling).is_some() {
                continue;
            }
            let Some(leaf) = self.leaf(name) else {
                return Ok(false);
            };
            if let Some(Statistics::ByteArray(s)) = rg.column(leaf).statistics() {
                if let (Some(min), Some(max)) = (s.min_opt(), s.max_opt()) {
                    let v = value.as_bytes();
                    if v < min.data() || v > max.data() {
                        return Ok(false);
                    }
                }
            }
            if let Some(bloom) = builder.get_row_group_column_bloom_filter(rg_index, leaf)? {
                if !bloom.check(value.as_str()) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}
