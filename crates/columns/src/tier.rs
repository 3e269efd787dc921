//! The writer of the columns: every `every` seconds, the seconds the store holds become one
//! Parquet part per (dc, type); closed hours are merged into one hour file; old hours expire.
//!
//! ```text
//! run_due(now):  parts for [watermark, due)        due = (now - settle) rounded down to `every`
//!                hour files for closed hours with parts of ours (rebuilt from the blobs, so
//!                late chunks join them), then our parts of that hour are deleted
//!                expiry of files past `retention` (per type and subtype: retention.rs)
//! ```
//!
//! # Crash safety
//! The store is the truth and the files are derived from it, so a crash at any moment loses
//! nothing: a file is visible only once complete ([`Location::put`]); the watermark is the end
//! of our newest file, found again by listing at start, so a part interrupted before its put is
//! written again; a merge interrupted between the hour file's put and the parts' deletion leaves
//! parts that readers ignore ([`crate::view`]) and the next run deletes. No chunk is ever read
//! from two files: readers pick one file per chunk.
//!
//! # Ownership
//! Each collector converts only its own chunks (`<collector>.<n>`; plain-number chunks belong to
//! the collector that has no id), and names its files with its id, so collectors sharing a
//! store need no coordination.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use sluice_blob::{Blob, EpochKey, EventKey, IndexEntry};
use sluice_store::{BlobKey, Namespace, ReadStore, TypeRetention};

use crate::convert::{to_batch, Row, TypeSchema};
use crate::covers::{sha1_hex, CoveredChunk, Covers, COVERS_KEY, SCHEMA_KEY};
use crate::layout::{hour_of, FileKind, FileName, HOUR};
use crate::parquet_file::{write_file, WriteOptions};
use crate::view::ColumnsView;

/// Rows per record batch handed to the Parquet writer.
const BATCH_ROWS: usize = 65_536;
/// Seconds between two checks of the recent merged hours for chunks stored after the merge.
const LATE_CHECK_EVERY: i64 = 60;
/// Closed hours (before the watermark) checked for late chunks.
const LATE_CHECK_HOURS: i64 = 2;
/// Blobs fetched from the store per call.
const FETCH_BATCH: usize = 64;

/// Why the tier could not do its work (the run stops; the next run tries again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] sluice_store::StoreError),
    /// The location or a file failed.
    #[error(transparent)]
    View(#[from] crate::view::ViewError),
    /// The location failed.
    #[error(transparent)]
    Location(#[from] crate::location::LocationError),
    /// Converting or writing a file failed.
    #[error("writing {path}: {detail}")]
    Write {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
}

/// How the tier runs.
#[derive(Debug, Clone)]
pub struct TierConfig {
    /// Seconds per part (default 60).
    pub every: i64,
    /// Seconds after a part's end before it is written: the flush grace plus a margin (default 5).
    pub settle: i64,
    /// This collector's id (file names; chunks `<id>.<n>` are ours).
    pub owner: String,
    /// Whether plain-number chunks are ours (a collector without an id).
    pub owns_plain: bool,
    /// The Parquet writer's knobs (hour files).
    pub write: WriteOptions,
    /// The zstd level of parts (default 1): a part lives until its hour is merged, so it is
    /// written cheaply; compression was 19 % of a conversion's CPU at level 9.
    pub part_zstd_level: i32,
    /// How long files are kept, per type and subtype (default: forever,
    /// [`crate::retention::FOREVER`]).
    pub retention: TypeRetention,
    /// Hours looked back at start for our newest file (the watermark) and unmerged parts.
    pub lookback_hours: i64,
    /// Where a tier with no file of its own within the lookback starts (default: the oldest
    /// second the store holds within the lookback; older seconds are written by
    /// `sluice columns rebuild`).
    pub start: Option<i64>,
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig {
            every: 60,
            settle: 5,
            owner: "local".into(),
            owns_plain: true,
            write: WriteOptions::default(),
            part_zstd_level: 1,
            retention: TypeRetention::new(crate::retention::FOREVER),
            lookback_hours: 24,
            start: None,
        }
    }
}

/// What one run or rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Files written.
    pub files: u64,
    /// Rows written.
    pub rows: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Parts deleted after a merge, and files expired.
    pub deleted: u64,
    /// Chunks that could not be read from the store (left to the blob path), with why.
    pub skipped: Vec<(String, String)>,
}

impl RunReport {
    pub(crate) fn add(&mut self, other: RunReport) {
        self.files += other.files;
        self.rows += other.rows;
        self.bytes += other.bytes;
        self.deleted += other.deleted;
        self.skipped.extend(other.skipped);
    }
}

struct State {
    /// Every second before this is written (by a part or an hour file of ours); `None` until
    /// the store holds a second (then its oldest).
    watermark: Option<i64>,
    /// Hours holding parts of ours that are not merged yet.
    unmerged: BTreeSet<i64>,
    /// The sticky schema of each (dc, type).
    schemas: HashMap<(String, String), TypeSchema>,
    /// When expiry last ran.
    expired_at: Option<i64>,
    /// When the merged hours were last checked for late chunks.
    late_checked_at: Option<i64>,
    /// Per recent hour, the chunks still uncovered after its last merge (unreadable blobs): a
    /// recent hour is merged again only when more arrive, never in a loop over the same damage.
    uncovered_after_merge: HashMap<i64, u64>,
}

/// The columns writer of one collector.
pub struct Tier {
    view: Arc<ColumnsView>,
    store: Arc<dyn ReadStore>,
    config: TierConfig,
    state: Mutex<State>,
}

/// One chunk to convert: its key and where it goes.
struct Todo {
    epoch: i64,
    entry: IndexEntry,
    key: String,
}

impl Tier {
    /// Opens the tier: finds the watermark (the end of our newest file within the lookback, else
    /// [`TierConfig::start`], else the oldest second stored) and our unmerged hours.
    pub fn open(
        view: Arc<ColumnsView>,
        store: Arc<dyn ReadStore>,
        config: TierConfig,
        now: i64,
    ) -> Result<Tier, TierError> {
        let mut watermark = None;
        let mut unmerged = BTreeSet::new();
        let current = hour_of(now);
        for back in 0..=config.lookback_hours.max(0) {
            let hour = current - back * HOUR;
            let files = view.hour(hour)?;
            for f in files.files.iter().filter(|f| f.name.owner == config.owner) {
                let end = f.name.span().1;
                watermark = Some(watermark.map_or(end, |w: i64| w.max(end)));
                if matches!(f.name.kind, FileKind::Part { .. }) {
                    unmerged.insert(hour);
                }
            }
        }
        let tier = Tier {
            view,
            store,
            config,
            state: Mutex::new(State {
                watermark: None,
                unmerged,
                schemas: HashMap::new(),
                expired_at: None,
                late_checked_at: None,
                uncovered_after_merge: HashMap::new(),
            }),
        };
        let start = match watermark.or(tier.config.start) {
            Some(w) => Some(w),
            None => tier.first_stored(now)?,
        };
        tier.lock().watermark = start;
        Ok(tier)
    }

    /// With no file of ours: the oldest second the store holds within the lookback, rounded
    /// down to `every` (a collector killed before its first part must not skip what it stored;
    /// an empty store starts the tier at the first second stored later).
    fn first_stored(&self, now: i64) -> Result<Option<i64>, TierError> {
        let every = self.config.every.max(1);
        let since = now - self.config.lookback_hours.max(0) * HOUR;
        Ok(self
            .store
            .list_epochs(None, since, now + 1)?
            .first()
            .map(|(e, _)| e - e.rem_euclid(every)))
    }
    /// The view the tier writes through (readers share it).
    pub fn view(&self) -> &Arc<ColumnsView> {
        &self.view
    }

    /// Every second before this is in a file of ours (`None`: nothing stored yet).
    pub fn watermark(&self) -> Option<i64> {
        self.lock().watermark
    }

    /// Writes what is due at `now`: parts, merges of closed hours, expiry.
    pub fn run_due(&self, now: i64) -> Result<RunReport, TierError> {
        let every = self.config.every.max(1);
        let due = (now - self.config.settle).div_euclid(every) * every;
        let mut report = RunReport::default();
        if self.lock().watermark.is_none() {
            let first = self.first_stored(now)?;
            self.lock().watermark = first;
        }
        loop {
            let Some(from) = self.lock().watermark else {
                break;
            };
            if from >= due {
                break;
            }
            let next_every = from - from.rem_euclid(every) + every;
            let to = next_every.min(hour_of(from) + HOUR).min(due);
            report.add(self.write_span(from, to, FileKind::Part { from, to })?);
            let mut st = self.lock();
            st.watermark = Some(to);
            st.unmerged.insert(hour_of(from));
        }
        // Merge hours that closed (every second of them is written and settled).
        let closed: Vec<i64> = {
            let st = self.lock();
            st.unmerged
                .iter()
                .copied()
                .filter(|h| st.watermark.is_some_and(|w| h + HOUR <= w))
                .collect()
        };
        for hour in closed {
            report.add(self.merge_hour(hour)?);
            self.lock().unmerged.remove(&hour);
        }
        if self
            .lock()
            .late_checked_at
            .is_none_or(|at| now - at >= LATE_CHECK_EVERY)
        {
            report.add(self.remerge_late()?);
            self.lock().late_checked_at = Some(now);
        }
        if self.lock().expired_at.is_none_or(|at| now - at >= 600) {
            report.add(self.expire(now)?);
            self.lock().expired_at = Some(now);
        }
        Ok(report)
    }

    /// Rebuilds the hour files of every hour meeting `[from, to)` from the blobs, replacing our
    /// parts and hour files there. An hour whose files hold chunks the store no longer has is
    /// left as it is (rebuilding it would lose them) and reported in `skipped`.
    pub fn rebuild(&self, from: i64, to: i64) -> Result<RunReport, TierError> {
        let mut report = RunReport::default();
        let mut hour = hour_of(from);
        while hour < to {
            report.add(self.merge_hour(hour)?);
            hour += HOUR;
        }
        Ok(report)
    }

    /// One hour file of ours from the blobs, then our parts of the hour deleted.
    fn merge_hour(&self, hour: i64) -> Result<RunReport, TierError> {
        let files = self.view.hour(hour)?;
        // Chunks our files hold whose blobs are gone: only the columns have them now.
        for f in files
            .files
            .iter()
            .filter(|f| f.name.owner == self.config.owner)
        {
            let gone = self.first_missing_blob(&f.covers)?;
            if let Some(key) = gone {
                return Ok(RunReport {
                    skipped: vec![(
                        f.path.clone(),
                        format!("not rebuilt: blob {key} is no longer stored (the columns are all that is left of it)"),
                    )],
                    ..RunReport::default()
                });
            }
        }
        let mut report = self.write_span(hour, hour + HOUR, FileKind::Hour)?;
        let mine_parts: Vec<String> = self
            .view
            .location()
            .list(&crate::layout::hour_prefix(hour))?
            .into_iter()
            .filter_map(|l| FileName::parse(&l.path).map(|n| (n, l.path)))
            .filter(|(n, _)| {
                n.owner == self.config.owner && matches!(n.kind, FileKind::Part { .. })
            })
            .map(|(_, p)| p)
            .collect();
        for path in mine_parts {
            self.view.location().delete(&path)?;
            self.view.forget(&path);
            report.deleted += 1;
        }
        self.view.invalidate(hour);
        Ok(report)
    }

    fn first_missing_blob(&self, covers: &Covers) -> Result<Option<String>, TierError> {
        // The epoch index says what is stored without fetching the blobs: one read per second
        // (the covers list chunks by second).
        let mut stored: Option<(i64, BTreeSet<IndexEntry>)> = None;
        for c in &covers.chunks {
            if stored.as_ref().is_none_or(|(e, _)| *e != c.epoch) {
                let entries = self
                    .store
                    .get_epoch_index(c.epoch, &covers.dc)?
                    .iter()
                    .filter_map(|t| IndexEntry::parse(t).ok())
                    .collect();
                stored = Some((c.epoch, entries));
            }
            let entry = sluice_blob::ChunkId::parse(&c.chunk)
                .ok()
                .and_then(|chunk| IndexEntry::new(&covers.type_, &c.subtype, chunk).ok());
            let held = match (&entry, &stored) {
                (Some(e), Some((_, set))) => set.contains(e),
                _ => false,
            };
            if !held {
                return Ok(Some(format!(
                    "{}:{}:{}:{}:{}",
                    c.epoch, covers.dc, covers.type_, c.subtype, c.chunk
                )));
            }
        }
        Ok(None)
    }

    /// Converts our chunks of `[from, to)` into one file per (dc, type).
    fn write_span(&self, from: i64, to: i64, kind: FileKind) -> Result<RunReport, TierError> {
        let mut report = RunReport::default();
        // (dc, type) → chunks in row order: second, then the index's (subtype, chunk) order.
        let mut groups: BTreeMap<(String, String), Vec<Todo>> = BTreeMap::new();
        for (epoch, dc) in self.store.list_epochs(None, from, to)? {
            let ek = match EpochKey::new(epoch, &dc) {
                Ok(k) => k,
                Err(e) => {
                    report
                        .skipped
                        .push((format!("{epoch}-{dc}"), e.to_string()));
                    continue;
                }
            };
            let mut entries: Vec<IndexEntry> = self
                .store
                .get_epoch_index(epoch, &dc)?
                .iter()
                .filter_map(|t| IndexEntry::parse(t).ok())
                .filter(|e| self.owns(e))
                .collect();
            entries.sort();
            entries.dedup();
            for entry in entries {
                let key = EventKey::from_parts(&ek, &entry).to_string();
                groups
                    .entry((dc.clone(), entry.type_().to_owned()))
                    .or_default()
                    .push(Todo { epoch, entry, key });
            }
        }
        for ((dc, type_), todo) in groups {
            report.add(self.write_group(from, &kind, &dc, &type_, &todo)?);
        }
        Ok(report)
    }

    /// Merges again the recent closed hours whose store holds chunks of ours no file covers
    /// (stored after the merge: a replay after a crash, a spool drained late, a backfill), so
    /// they join the columns instead of staying on the blob path.
    fn remerge_late(&self) -> Result<RunReport, TierError> {
        let mut report = RunReport::default();
        let Some(watermark) = self.lock().watermark else {
            return Ok(report);
        };
        let last_closed = hour_of(watermark) - HOUR;
        for back in 0..LATE_CHECK_HOURS {
            let hour = last_closed - back * HOUR;
            let known = self
                .lock()
                .uncovered_after_merge
                .get(&hour)
                .copied()
                .unwrap_or(0);
            if self.uncovered_chunks(hour)? > known {
                report.add(self.merge_hour(hour)?);
                let left = self.uncovered_chunks(hour)?;
                self.lock().uncovered_after_merge.insert(hour, left);
            }
        }
        self.lock()
            .uncovered_after_merge
            .retain(|h, _| *h > last_closed - LATE_CHECK_HOURS * HOUR);
        Ok(report)
    }

    /// Chunks of ours in the hour that no file covers.
    fn uncovered_chunks(&self, hour: i64) -> Result<u64, TierError> {
        let files = self.view.hour(hour)?;
        let mut n = 0;
        for (epoch, dc) in self.store.list_epochs(None, hour, hour + HOUR)? {
            for text in self.store.get_epoch_index(epoch, &dc)? {
                let Ok(e) = IndexEntry::parse(&text) else {
                    continue;
                };
                if self.owns(&e)
                    && files
                        .chunk(epoch, &dc, e.type_(), e.subtype(), &e.chunk().to_string())
                        .is_none()
                {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    fn owns(&self, entry: &IndexEntry) -> bool {
        match entry.chunk().collector_id() {
            Some(id) => id == self.config.owner,
            None => self.config.owns_plain,
        }
    }

    /// Reads the chunks of one (dc, type), converts them and puts the file.
    fn write_group(
        &self,
        from: i64,
        kind: &FileKind,
        dc: &str,
        type_: &str,
        todo: &[Todo],
    ) -> Result<RunReport, TierError> {
        let mut report = RunReport::default();
        let limits = sereal::Limits::default();
        let checked = self.store.checks_each_read();
        // Decoded chunks, in order: (todo index, sha1, events).
        let mut chunks: Vec<(usize, String, Vec<sereal::Value>)> = Vec::new();
        for (b, batch) in todo.chunks(FETCH_BATCH).enumerate() {
            let keys: Vec<BlobKey<'_>> = batch
                .iter()
                .map(|t| BlobKey::new(t.epoch, &t.key))
                .collect();
            let answers = self.store.get_blobs(&Namespace::Events, &keys);
            for (i, (t, answer)) in batch.iter().zip(answers).enumerate() {
                let skip = |why: String| (t.key.clone(), why);
                let bytes = match answer {
                    Ok(Some(bytes)) => bytes,
                    Ok(None) => {
                        report.skipped.push(skip("missing from the store".into()));
                        continue;
                    }
                    Err(e) => return Err(TierError::Store(e)),
                };
                let parsed = if checked {
                    Blob::parse_store_checked(&bytes)
                } else {
                    Blob::parse(&bytes)
                };
                let decoded = parsed.and_then(|blob| {
                    let sha1 = sha1_hex(&blob.checksum());
                    blob.decode(&limits).map(|events| (sha1, events))
                });
                match decoded {
                    Ok((sha1, events)) => chunks.push((b * FETCH_BATCH + i, sha1, events)),
                    Err(e) => report.skipped.push(skip(e.to_string())),
                }
            }
        }
        let name = FileName {
            hour: hour_of(from),
            dc: dc.to_owned(),
            type_: type_.to_owned(),
            kind: kind.clone(),
            owner: self.config.owner.clone(),
        };
        let path = name.path();
        if chunks.is_empty() {
            return Ok(report);
        }
        let write_err = |detail: String| TierError::Write {
            path: path.clone(),
            detail,
        };
        let key = (dc.to_owned(), type_.to_owned());
        let mut schema = match self.lock().schemas.get(&key) {
            Some(s) => s.clone(),
            None => self.newest_schema(dc, type_, from),
        };
        for (_, _, events) in &chunks {
            for e in events {
                schema.observe(e);
            }
        }
        let mut covers = Covers {
            dc: dc.to_owned(),
            type_: type_.to_owned(),
            owner: self.config.owner.clone(),
            from: name.span().0,
            to: name.span().1,
            chunks: Vec::with_capacity(chunks.len()),
        };
        for (i, sha1, events) in &chunks {
            let t = &todo[*i];
            covers.chunks.push(CoveredChunk {
                epoch: t.epoch,
                subtype: t.entry.subtype().to_owned(),
                chunk: t.entry.chunk().to_string(),
                sha1: sha1.clone(),
                events: events.len() as u64,
            });
        }
        let mut rows: Vec<Row<'_>> = Vec::new();
        let mut batches = Vec::new();
        for (c, (_, _, events)) in covers.chunks.iter().zip(&chunks) {
            for event in events {
                rows.push(Row {
                    epoch: c.epoch,
                    subtype: &c.subtype,
                    chunk: &c.chunk,
                    event,
                });
                if rows.len() >= BATCH_ROWS {
                    batches.push(to_batch(&schema, &rows).map_err(|e| write_err(e.to_string()))?);
                    rows.clear();
                }
            }
        }
        if !rows.is_empty() {
            batches.push(to_batch(&schema, &rows).map_err(|e| write_err(e.to_string()))?);
        }
        drop(rows);
        let schema_json = String::from_utf8_lossy(&schema.to_json()).into_owned();
        let metadata = vec![
            (COVERS_KEY.to_owned(), covers.to_json()),
            (SCHEMA_KEY.to_owned(), schema_json),
        ];
        let opts = match kind {
            FileKind::Part { .. } => WriteOptions {
                zstd_level: self.config.part_zstd_level,
                ..self.config.write.clone()
            },
            FileKind::Hour => self.config.write.clone(),
        };
        let bytes = write_file(&batches, &metadata, &opts).map_err(|e| write_err(e.to_string()))?;
        self.view.location().put(&path, &bytes)?;
        self.view.forget(&path);
        self.view.invalidate(name.hour);
        self.lock().schemas.insert(key, schema);
        report.files += 1;
        report.rows += covers.events();
        report.bytes += bytes.len() as u64;
        Ok(report)
    }

    /// The schema our newest file of (dc, type) before `before` was written with, so types
    /// stick across restarts; a new one when there is none within the lookback.
    fn newest_schema(&self, dc: &str, type_: &str, before: i64) -> TypeSchema {
        let mut hour = hour_of(before);
        for _ in 0..=self.config.lookback_hours.max(0) {
            if let Ok(files) = self.view.hour(hour) {
                let newest = files
                    .files
                    .iter()
                    .filter(|f| f.covers.dc == dc && f.covers.type_ == type_)
                    .max_by_key(|f| f.name.span().1);
                if let Some(f) = newest {
                    if let Ok(file) = self.view.file(&f.path) {
                        if let Some(s) = file
                            .metadata_value(SCHEMA_KEY)
                            .and_then(|t| TypeSchema::from_json(t.as_bytes()).ok())
                        {
                            return s;
                        }
                    }
                }
            }
            hour -= HOUR;
        }
        TypeSchema::new()
    }

    /// Deletes or rewrites the files past their retention (`retention.rs`).
    fn expire(&self, now: i64) -> Result<RunReport, TierError> {
        crate::retention::expire(
            &self.view,
            &self.config.retention,
            &self.config.write,
            self.config.part_zstd_level,
            now,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
