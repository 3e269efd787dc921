//! What the column files cover, for readers: per hour, the files and the chunks each holds.
//!
//! A reader asks [`ColumnsView::hour`] for the hours of its range and [`HourFiles::chunk`] for
//! each chunk the blob index lists (or, past the blobs' retention, [`HourFiles::epochs`] for
//! what only the columns still hold). Footers are read once per file (files never change once
//! written) and kept; an hour's listing is kept for [`LISTING_FRESH`] and then listed again, so a
//! reader in the serving process or beside it sees new parts and merged hours soon.
//!
//! Files are chosen per chunk: an owner's hour file hides that owner's parts of the same hour
//! (a merge that crashed before deleting them), then the first file (hour files first, then parts
//! by path) that lists a chunk holds it. A file whose footer cannot be read is skipped and kept
//! in [`HourFiles::damaged`]: its chunks are read from blobs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::covers::{Covers, COVERS_KEY};
use crate::layout::{hour_prefix, FileKind, FileName};
use crate::location::{Location, LocationError};
use crate::parquet_file::ParquetFile;

/// How long an hour's listing is reused before it is listed again.
pub const LISTING_FRESH: Duration = Duration::from_secs(5);
/// Opened files kept in memory (their bytes and parsed footers), most recently used last.
const OPEN_FILES_KEPT: usize = 64;

/// Why the columns cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    /// Listing or reading the location failed.
    #[error(transparent)]
    Location(#[from] LocationError),
    /// A file listed a moment ago is gone (merged or expired since).
    #[error("{0}: gone (merged or expired since it was listed)")]
    Gone(String),
    /// A file is not a readable Parquet file with covers.
    #[error("{path}: {detail}")]
    Damaged {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
}

/// One file and what it covers.
#[derive(Debug, Clone)]
pub struct CoveredFile {
    /// Its name.
    pub name: FileName,
    /// Its path under the location.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// The chunks it holds.
    pub covers: Arc<Covers>,
}

/// Where one chunk's rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlace {
    /// Index into [`HourFiles::files`].
    pub file: usize,
    /// Its rows.
    pub events: u64,
}

/// Per type, the (subtype, chunk) pairs held for one (epoch, dc).
type TypesHeld = BTreeMap<String, BTreeSet<(String, String)>>;

/// The files of one hour and the chunks they hold.
#[derive(Debug, Default)]
pub struct HourFiles {
    /// The hour's first second.
    pub hour: i64,
    /// The files in use, hour files first.
    pub files: Vec<CoveredFile>,
    /// Files skipped, with why.
    pub damaged: Vec<(String, String)>,
    /// (epoch, dc, type, subtype, chunk) → place.
    chunks: HashMap<(i64, String, String, String, String), ChunkPlace>,
    /// (epoch, dc) → type → the covered (subtype, chunk) pairs, for reads past the blobs.
    by_epoch: BTreeMap<(i64, String), TypesHeld>,
}

impl HourFiles {
    /// Where the rows of one chunk are, if a file holds it.
    pub fn chunk(
        &self,
        epoch: i64,
        dc: &str,
        type_: &str,
        subtype: &str,
        chunk: &str,
    ) -> Option<ChunkPlace> {
        // A lookup key of owned strings: the map is small per hour and this is off the row path.
        self.chunks
            .get(&(
                epoch,
                dc.to_owned(),
                type_.to_owned(),
                subtype.to_owned(),
                chunk.to_owned(),
            ))
            .copied()
    }

    /// The (epoch, dc) pairs the files hold, in order.
    pub fn epochs(&self) -> impl Iterator<Item = (i64, &str)> {
        self.by_epoch.keys().map(|(e, dc)| (*e, dc.as_str()))
    }

    /// The `type:subtype:chunk` index entries the files hold for (epoch, dc).
    pub fn entries(&self, epoch: i64, dc: &str) -> Vec<String> {
        self.by_epoch
            .get(&(epoch, dc.to_owned()))
            .map(|types| {
                types
                    .iter()
                    .flat_map(|(t, set)| set.iter().map(move |(s, c)| format!("{t}:{s}:{c}")))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Rows and bytes of the files in use.
    pub fn totals(&self) -> (u64, u64) {
        self.files
            .iter()
            .fold((0, 0), |(r, b), f| (r + f.covers.events(), b + f.size))
    }

    fn build(hour: i64, mut files: Vec<CoveredFile>, damaged: Vec<(String, String)>) -> Self {
        // Owners with an hour file: their parts of this hour are leftovers of a merge.
        let merged: BTreeSet<String> = files
            .iter()
            .filter(|f| f.name.kind == FileKind::Hour)
            .map(|f| f.name.owner.clone())
            .collect();
        files.retain(|f| f.name.kind == FileKind::Hour || !merged.contains(&f.name.owner));
        files.sort_by(|a, b| {
            let rank = |f: &CoveredFile| u8::from(f.name.kind != FileKind::Hour);
            rank(a).cmp(&rank(b)).then_with(|| a.path.cmp(&b.path))
        });
        let mut out = HourFiles {
            hour,
            damaged,
            ..HourFiles::default()
        };
        for (i, f) in files.iter().enumerate() {
            for c in &f.covers.chunks {
                let key = (
                    c.epoch,
                    f.covers.dc.clone(),
                    f.covers.type_.clone(),
                    c.subtype.clone(),
                    c.chunk.clone(),
                );
                if out.chunks.contains_key(&key) {
                    continue;
                }
                out.chunks.insert(
                    key,
                    ChunkPlace {
                        file: i,
                        events: c.events,
                    },
                );
                out.by_epoch
                    .entry((c.epoch, f.covers.dc.clone()))
                    .or_default()
                    .entry(f.covers.type_.clone())
                    .or_default()
                    .insert((c.subtype.clone(), c.chunk.clone()));
            }
        }
        out.files = files;
        out
    }
}

/// The read side of a columns location.
pub struct ColumnsView {
    location: Arc<dyn Location>,
    hours: Mutex<HashMap<i64, (Instant, Arc<HourFiles>)>>,
    /// Opened files by path: (bytes + footer, covers), most recently used last.
    open: Mutex<Vec<(String, ParquetFile, Arc<Covers>)>>,
}

impl std::fmt::Debug for ColumnsView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnsView")
            .field("location", &self.location.describe())
            .finish_non_exhaustive()
    }
}

impl ColumnsView {
    /// A view of `location`.
    pub fn new(location: Arc<dyn Location>) -> ColumnsView {
        ColumnsView {
            location,
            hours: Mutex::new(HashMap::new()),
            open: Mutex::new(Vec::new()),
        }
    }

    /// The location.
    pub fn location(&self) -> &Arc<dyn Location> {
        &self.location
    }

    /// The files of the hour starting at `hour` (listed again when older than [`LISTING_FRESH`]).
    pub fn hour(&self, hour: i64) -> Result<Arc<HourFiles>, ViewError> {
        if let Some((at, files)) = self.lock_hours().get(&hour) {
            if at.elapsed() < LISTING_FRESH {
                return Ok(files.clone());
            }
        }
        let listed = self.location.list(&hour_prefix(hour))?;
        let mut files = Vec::new();
        let mut damaged = Vec::new();
        for l in listed {
            let Some(name) = FileName::parse(&l.path) else {
                continue;
            };
            match self.open_covers(&l.path) {
                Ok((_, covers)) => files.push(CoveredFile {
                    name,
                    path: l.path,
                    size: l.size,
                    covers,
                }),
                // Deleted between the listing and the read: a merge or expiry; not there.
                Err(ViewError::Gone(_)) => {}
                Err(e) => damaged.push((l.path, e.to_string())),
            }
        }
        let built = Arc::new(HourFiles::build(hour, files, damaged));
        self.lock_hours()
            .insert(hour, (Instant::now(), built.clone()));
        Ok(built)
    }

    /// Forgets the listing of `hour` (the writer changed it).
    pub fn invalidate(&self, hour: i64) {
        self.lock_hours().remove(&hour);
    }

    /// The opened file at `path`.
    pub fn file(&self, path: &str) -> Result<ParquetFile, ViewError> {
        self.open_covers(path).map(|(f, _)| f)
    }

    /// Forgets an opened file (deleted by a merge or expiry).
    pub fn forget(&self, path: &str) {
        self.lock_open().retain(|(p, ..)| p != path);
    }

    fn open_covers(&self, path: &str) -> Result<(ParquetFile, Arc<Covers>), ViewError> {
        {
            let mut open = self.lock_open();
            if let Some(i) = open.iter().position(|(p, ..)| p == path) {
                let hit = open.remove(i);
                let out = (hit.1.clone(), hit.2.clone());
                open.push(hit);
                return Ok(out);
            }
        }
        let bytes = self
            .location
            .get(path)?
            .ok_or_else(|| ViewError::Gone(path.to_owned()))?;
        let damaged = |detail: String| ViewError::Damaged {
            path: path.to_owned(),
            detail,
        };
        let file = ParquetFile::open(bytes).map_err(|e| damaged(e.to_string()))?;
        let covers = file
            .metadata_value(COVERS_KEY)
            .ok_or_else(|| damaged(format!("no {COVERS_KEY} in the footer")))
            .and_then(|text| Covers::from_json(text).map_err(|e| damaged(e.to_string())))?;
        let covers = Arc::new(covers);
        let mut open = self.lock_open();
        if open.len() >= OPEN_FILES_KEPT {
            open.remove(0);
        }
        open.push((path.to_owned(), file.clone(), covers.clone()));
        Ok((file, covers))
    }

    fn lock_hours(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (Instant, Arc<HourFiles>)>> {
        self.hours.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, Vec<(String, ParquetFile, Arc<Covers>)>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The column files of a data directory (`DATA/columns`), opened read-only: what a reader of a
/// data directory (`sluice cat`, the Python `Reader`) reads besides its blobs. `None` when the
/// directory has none.
pub fn data_dir_view(data: &std::path::Path) -> Option<Arc<ColumnsView>> {
    let dir = data.join("columns");
    if !dir.is_dir() {
        return None;
    }
    let location = crate::location::LocalDir::open_read_only(&dir).ok()?;
    Some(Arc::new(ColumnsView::new(Arc::new(location))))
}
