//! The spool: a bounded on-disk FIFO queue of built batches, used by the
//! [`Aggregator`](crate::aggregate::Aggregator) while the store is unavailable or slow.
//!
//! # Layout and framing
//! A directory of append-only segment files `spool-<n>.log` (`n` ascending, 20 digits). Each file
//! is a sequence of records framed as `[len: u32 LE][crc32 of payload: u32 LE][payload]`. A
//! payload is either a *batch* (kind 1: id, then the batch: group key, chunks with event keys,
//! index entries and blob bytes, progress, counts, WAL sequence numbers), an *ack* (kind 2: "every
//! batch with id <= this one is stored"), or *numbers* (kind 3: the chunk keys and index entries
//! of a batch pushed *unnumbered*, i.e. closed while the store's epoch index could not be read;
//! written by [`Spool::number_front`] before any of its blobs is). Batch ids increase by one per
//! push.
//!
//! # Crash safety
//! - Every push and every ack is written and `fsync`ed before the call returns.
//! - On [`Spool::open`] each segment is scanned; the first record that is torn (short) or fails its
//!   CRC ends that segment: the file is truncated there (a torn tail after a crash) and the loss is
//!   reported by [`Spool::dropped_bytes_on_open`].
//! - A batch leaves the spool ([`Spool::pop_front`], which appends an ack) only after the store
//!   confirmed every write of it. Replaying a batch whose blobs and index entries were already
//!   written is harmless (puts of identical bytes are `AlreadyPresent`, index entries form a set).
//!   Nor are the counts added twice: the aggregator adds them with `Store::add_counts_once` under
//!   a token naming the batch's first chunk (stored here with the batch), so a crash between the
//!   store confirming the counts and the ack reaching disk is harmless. Only a batch without
//!   chunks (all its events unencodable) gets a new token when replayed and may be counted twice.
//! - A segment is deleted once none of its batches is live and it is not the one being appended
//!   to; when the spool becomes empty all segments are removed.
//!
//! # Bound and backpressure
//! [`Spool::bytes`] counts the framed size of live batches; a push that would take it past
//! `max_bytes` (default [`DEFAULT_MAX_BYTES`], 1 GiB) is refused with [`SpoolError::Full`] and
//! nothing is written. Disk use may exceed `bytes()` by the acked records of at most one
//! partly-acked head segment plus the segment being appended to (segments are rotated at
//! `max_bytes / 8`, between 64 KiB and 64 MiB). What the aggregator does when the spool is full is
//! described in [`crate::aggregate`] (the batch stays in memory and no new groups are closed).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sluice_store::Counts;

/// Default [`SpoolConfig::max_bytes`]: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default [`SpoolConfig::memory_batches`].
pub const DEFAULT_MEMORY_BATCHES: usize = 16;

const KIND_BATCH: u8 = 1;
const KIND_ACK: u8 = 2;
const KIND_NUMBERS: u8 = 3;
const FRAME: u64 = 8;
const VERSION: u8 = 1;

/// Settings of the aggregator's spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolConfig {
    /// The spool directory (created if missing). Reusing it after a crash replays what it holds.
    pub dir: PathBuf,
    /// Most bytes of live batches on disk (default [`DEFAULT_MAX_BYTES`]).
    pub max_bytes: u64,
    /// Batches kept in memory after a store error before the oldest are spilled to disk (default
    /// [`DEFAULT_MEMORY_BATCHES`]).
    pub memory_batches: usize,
}

impl SpoolConfig {
    /// A spool in `dir` with the default limits.
    pub fn new(dir: impl Into<PathBuf>) -> SpoolConfig {
        SpoolConfig {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            memory_batches: DEFAULT_MEMORY_BATCHES,
        }
    }
}

/// What went wrong in the spool.
#[derive(Debug)]
#[non_exhaustive]
pub enum SpoolError {
    /// The batch does not fit under `max_bytes`; nothing was written.
    Full {
        /// Live bytes in the spool.
        bytes: u64,
        /// The framed size of the refused batch.
        needed: u64,
        /// The configured bound.
        max_bytes: u64,
    },
    /// A file operation failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A record passed its CRC but could not be decoded (written by an incompatible version).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for SpoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpoolError::Full {
                bytes,
                needed,
                max_bytes,
            } => {
                write!(
                    f,
                    "spool full: {bytes} bytes used, {needed} more needed, limit {max_bytes}"
                )
            }
            SpoolError::Io { path, source } => write!(f, "spool {}: {source}", path.display()),
            SpoolError::Corrupt { path, reason } => write!(f, "spool {}: {reason}", path.display()),
        }
    }
}

impl std::error::Error for SpoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpoolError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One chunk of a spooled batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpooledChunk {
    /// The full event key (`<epoch>:<dc>:<type>:<subtype>:<chunk>`).
    pub key: String,
    /// Its epoch-index entry (`type:subtype:chunk`).
    pub entry: String,
    /// The blob bytes.
    pub bytes: Vec<u8>,
}

/// A built batch as the spool keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpooledBatch {
    /// Epoch of the group.
    pub epoch: i64,
    /// Data center.
    pub dc: String,
    /// Event type.
    pub type_: String,
    /// Event subtype.
    pub subtype: String,
    /// The chunks, in order.
    pub chunks: Vec<SpooledChunk>,
    /// How many leading chunks were already stored when spilled (replay starts there; earlier
    /// ones would be `AlreadyPresent` anyway).
    pub stored: usize,
    /// Whether the index entries were already written.
    pub indexed: bool,
    /// Events in the batch.
    pub events: u64,
    /// The completeness counts to add once the data is indexed.
    pub counts: Counts,
    /// WAL sequence numbers whose events are in this batch (ascending).
    pub seqs: Vec<u64>,
}

impl SpooledBatch {
    /// The smallest and largest WAL sequence number of the batch.
    pub fn seq_range(&self) -> Option<(u64, u64)> {
        Some((*self.seqs.iter().min()?, *self.seqs.iter().max()?))
    }

    fn encode(&self, id: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            64 + self
                .chunks
                .iter()
                .map(|c| c.bytes.len() + c.key.len() * 2 + 12)
                .sum::<usize>(),
        );
        out.push(KIND_BATCH);
        out.push(VERSION);
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        for s in [&self.dc, &self.type_, &self.subtype] {
            put_bytes(&mut out, s.as_bytes());
        }
        out.extend_from_slice(&(self.chunks.len() as u64).to_le_bytes());
        for c in &self.chunks {
            put_bytes(&mut out, c.key.as_bytes());
            put_bytes(&mut out, c.entry.as_bytes());
            put_bytes(&mut out, &c.bytes);
        }
        out.extend_from_slice(&(self.stored as u64).to_le_bytes());
        out.push(u8::from(self.indexed));
        out.extend_from_slice(&self.events.to_le_bytes());
        let c = &self.counts;
        for n in [c.stored, c.late, c.kernel_dropped, c.dropped.len() as u64] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for (reason, n) in &c.dropped {
            put_bytes(&mut out, reason.as_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(self.seqs.len() as u64).to_le_bytes());
        for s in &self.seqs {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    /// Decodes a batch payload (after the kind byte): (id, batch).
    fn decode(p: &[u8]) -> Option<(u64, SpooledBatch)> {
        let mut r = Reader { p };
        if r.u8()? != VERSION {
            return None;
        }
        let id = r.u64()?;
        let epoch = r.u64()? as i64;
        let dc = r.string()?;
        let type_ = r.string()?;
        let subtype = r.string()?;
        let n = r.u64()?;
        let mut chunks = Vec::new();
        for _ in 0..n {
            let key = r.string()?;
            let entry = r.string()?;
            let bytes = r.bytes()?.to_vec();
            chunks.push(SpooledChunk { key, entry, bytes });
        }
        let stored = usize::try_from(r.u64()?).ok()?;
        let indexed = r.u8()? != 0;
        let events = r.u64()?;
        let (stored_c, late, kernel_dropped, nd) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let mut dropped = BTreeMap::new();
        for _ in 0..nd {
            let reason = r.string()?;
            dropped.insert(reason, r.u64()?);
        }
        let ns = r.u64()?;
        let mut seqs = Vec::new();
        for _ in 0..ns {
            seqs.push(r.u64()?);
        }
        if !r.p.is_empty() {
            return None;
        }
        let counts = Counts {
            stored: stored_c,
            late,
            dropped,
            kernel_dropped,
        };
        Some((
            id,
            SpooledBatch {
                epoch,
                dc,
                type_,
                subtype,
                chunks,
                stored,
                indexed,
                events,
                counts,
                seqs,
            },
        ))
    }
}

/// Decodes a numbers payload (after the kind byte): (batch id, (key, entry) per chunk).
fn decode_numbers(p: &[u8]) -> Option<(u64, Vec<(String, String)>)> {
    let mut r = Reader { p };
    let id = r.u64()?;
    let n = r.u64()?;
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push((r.string()?, r.string()?));
    }
    r.p.is_empty().then_some((id, keys))
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a> {
    p: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.p.len() < n {
            return None;
        }
        let (a, b) = self.p.split_at(n);
        self.p = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

/// A live batch: where its record is.
#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    /// Events in the batch.
    events: u64,
    /// Its WAL sequence numbers.
    seqs: Vec<u64>,
    /// Its group (epoch, dc, type, subtype).
    group: crate::note::GroupKey,
    segment: u64,
    /// Offset of the frame.
    offset: u64,
    /// Framed length.
    len: u64,
    /// The chunk keys and index entries given to the batch after it was pushed unnumbered
    /// (a *numbers* record), replacing the empty ones in its record.
    numbers: Option<Vec<(String, String)>>,
}

/// The bounded on-disk FIFO of batches. See the [module docs](self).
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    segment_limit: u64,
    /// Segment numbers present on disk, ascending; the last one is appended to.
    segments: VecDeque<u64>,
    writer: File,
    writer_len: u64,
    live: VecDeque<Entry>,
    next_id: u64,
    bytes: u64,
    dropped_on_open: u64,
}

impl fmt::Debug for Spool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spool")
            .field("dir", &self.dir)
            .field("max_bytes", &self.max_bytes)
            .field("batches", &self.live.len())
            .field("bytes", &self.bytes)
            .field("segments", &self.segments.len())
            .finish()
    }
}

fn segment_name(n: u64) -> String {
    format!("spool-{n:020}.log")
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, bounded by `max_bytes` of live batches. Scans every
    /// segment, truncating it at the first torn or corrupt record, and finds the live batches.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> Result<Spool, SpoolError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut numbers = Vec::new();
        for e in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let e = e.map_err(io_err(&dir))?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(n) = name
                .strip_prefix("spool-")
                .and_then(|s| s.strip_suffix(".log"))
            {
                if let Ok(n) = n.parse::<u64>() {
                    numbers.push(n);
                }
            }
        }
        numbers.sort_unstable();
        let mut all = Vec::new();
        let mut acked: Option<u64> = None;
        let mut dropped_on_open = 0;
        let mut sizes = BTreeMap::new();
        for &n in &numbers {
            let path = dir.join(segment_name(n));
            let mut data = Vec::new();
            File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut data))
                .map_err(io_err(&path))?;
            let mut off = 0usize;
            while off < data.len() {
                let Some(rec) = frame_at(&data, off) else {
                    break;
                };
                let len = FRAME as usize + rec.len();
                match rec.first() {
                    Some(&KIND_BATCH) => {
                        let (id, b) =
                            SpooledBatch::decode(&rec[1..]).ok_or_else(|| SpoolError::Corrupt {
                                path: path.clone(),
                                reason: format!("undecodable batch at offset {off}"),
                            })?;
                        all.push(Entry {
                            id,
                            events: b.events,
                            group: (b.epoch, b.dc, b.type_, b.subtype),
                            seqs: b.seqs,
                            segment: n,
                            offset: off as u64,
                            len: len as u64,
                            numbers: None,
                        });
                    }
                    Some(&KIND_NUMBERS) => {
                        let (id, keys) =
                            decode_numbers(&rec[1..]).ok_or_else(|| SpoolError::Corrupt {
                                path: path.clone(),
                                reason: format!("undecodable numbers at offset {off}"),
                            })?;
                        if let Some(e) = all.iter_mut().rev().find(|e| e.id == id) {
                            e.numbers = Some(keys);
                        }
                    }
                    Some(&KIND_ACK) if rec.len() == 9 => {
                        let id = u64::from_le_bytes(rec[1..9].try_into().expect("8 bytes"));
                        acked = Some(acked.map_or(id, |a| a.max(id)));
                    }
                    _ => {
                        return Err(SpoolError::Corrupt {
                            path,
                            reason: format!("unknown record at offset {off}"),
                        });
                    }
                }
                off += len;
            }
            if off < data.len() {
                // A torn (or corrupt) tail: drop it.
                dropped_on_open += (data.len() - off) as u64;
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(&path))?;
                f.set_len(off as u64).map_err(io_err(&path))?;
                f.sync_all().map_err(io_err(&path))?;
            }
            sizes.insert(n, off as u64);
        }
        let next_id = all
            .iter()
            .map(|e| e.id + 1)
            .max()
            .unwrap_or(0)
            .max(acked.map_or(0, |a| a + 1));
        let live: VecDeque<Entry> = all
            .into_iter()
            .filter(|e| acked.is_none_or(|a| e.id > a))
            .collect();
        let bytes = live.iter().map(|e| e.len).sum();
        let mut segments: VecDeque<u64> = numbers.into_iter().collect();
        let (writer, writer_len) = match segments.back() {
            Some(&n) => {
                let path = dir.join(segment_name(n));
                let f = OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .map_err(io_err(&path))?;
                (f, sizes[&n])
            }
            None => {
                segments.push_back(0);
                (create_segment(&dir, 0)?, 0)
            }
        };
        let segment_limit = (max_bytes / 8).clamp(64 << 10, 64 << 20);
        let mut spool = Spool {
            dir,
            max_bytes,
            segment_limit,
            segments,
            writer,
            writer_len,
            live,
            next_id,
            bytes,
            dropped_on_open,
        };
        spool.collect_segments()?;
        Ok(spool)
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound on [`bytes`](Self::bytes).
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Batches waiting in the spool.
    pub fn batches(&self) -> usize {
        self.live.len()
    }

    /// Whether no batch waits.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Framed bytes of the batches waiting (what `max_bytes` bounds).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Events in the batches waiting.
    pub fn events(&self) -> u64 {
        self.live.iter().map(|e| e.events).sum()
    }

    /// The WAL sequence numbers of each waiting batch, oldest batch first.
    pub fn seqs(&self) -> impl Iterator<Item = &[u64]> + '_ {
        self.live.iter().map(|e| e.seqs.as_slice())
    }

    /// The group and WAL sequence numbers of every batch held, oldest first: the spool's own
    /// done facts, which a WAL replay honours like done notes (the spool is fsynced before the
    /// batch's note is logged: see [`crate::exactly_once`]).
    pub fn groups(&self) -> impl Iterator<Item = (&crate::note::GroupKey, &[u64])> + '_ {
        self.live.iter().map(|e| (&e.group, e.seqs.as_slice()))
    }

    /// Bytes of torn or corrupt tails truncated by [`open`](Self::open).
    pub fn dropped_bytes_on_open(&self) -> u64 {
        self.dropped_on_open
    }

    /// Appends `batch` (durably) at the back. Errors: [`SpoolError::Full`] when it does not fit
    /// (nothing written), or an I/O error.
    pub fn push(&mut self, batch: &SpooledBatch) -> Result<(), SpoolError> {
        let payload = batch.encode(self.next_id);
        let needed = FRAME + payload.len() as u64;
        if self.bytes.saturating_add(needed) > self.max_bytes {
            return Err(SpoolError::Full {
                bytes: self.bytes,
                needed,
                max_bytes: self.max_bytes,
            });
        }
        if self.writer_len > 0 && self.writer_len + needed > self.segment_limit {
            self.rotate()?;
        }
        let offset = self.writer_len;
        self.append(&payload)?;
        let segment = *self.segments.back().expect("a segment");
        self.live.push_back(Entry {
            id: self.next_id,
            events: batch.events,
            group: (
                batch.epoch,
                batch.dc.clone(),
                batch.type_.clone(),
                batch.subtype.clone(),
            ),
            seqs: batch.seqs.clone(),
            segment,
            offset,
            len: needed,
            numbers: None,
        });
        self.next_id += 1;
        self.bytes += needed;
        Ok(())
    }

    /// The oldest batch, read back from disk.
    pub fn front(&self) -> Result<Option<SpooledBatch>, SpoolError> {
        let Some(e) = self.live.front() else {
            return Ok(None);
        };
        let path = self.dir.join(segment_name(e.segment));
        let mut f = File::open(&path).map_err(io_err(&path))?;
        f.seek(SeekFrom::Start(e.offset)).map_err(io_err(&path))?;
        let mut buf = vec![0u8; e.len as usize];
        f.read_exact(&mut buf).map_err(io_err(&path))?;
        let corrupt = |reason: &str| SpoolError::Corrupt {
            path: path.clone(),
            reason: format!("{reason} at offset {}", e.offset),
        };
        let rec = frame_at(&buf, 0).ok_or_else(|| corrupt("bad frame"))?;
        if rec.first() != Some(&KIND_BATCH) {
            return Err(corrupt("not a batch"));
        }
        let (id, mut batch) =
            SpooledBatch::decode(&rec[1..]).ok_or_else(|| corrupt("undecodable batch"))?;
        if id != e.id {
            return Err(corrupt("unexpected batch id"));
        }
        if let Some(numbers) = &e.numbers {
            if numbers.len() != batch.chunks.len() {
                return Err(corrupt("numbers of another batch"));
            }
            for (c, (key, entry)) in batch.chunks.iter_mut().zip(numbers) {
                c.key.clone_from(key);
                c.entry.clone_from(entry);
            }
        }
        Ok(Some(batch))
    }

    /// Durably records the chunk keys and index entries (`(key, entry)` per chunk, in order) of
    /// the oldest batch, pushed unnumbered (empty keys): [`front`](Self::front) returns them
    /// from now on, across reopens. The aggregator calls it before writing any blob of the
    /// batch, so a replay after a crash writes the same keys.
    pub fn number_front(&mut self, keys: &[(String, String)]) -> Result<(), SpoolError> {
        let Some(id) = self.live.front().map(|e| e.id) else {
            return Ok(());
        };
        let mut payload = vec![KIND_NUMBERS];
        payload.extend_from_slice(&id.to_le_bytes());
        payload.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        for (key, entry) in keys {
            put_bytes(&mut payload, key.as_bytes());
            put_bytes(&mut payload, entry.as_bytes());
        }
        self.append(&payload)?;
        if let Some(e) = self.live.front_mut() {
            e.numbers = Some(keys.to_vec());
        }
        Ok(())
    }

    /// Removes the oldest batch: durably records that it is stored, then deletes segments no
    /// longer needed. Call only once the store confirmed every write of it.
    pub fn pop_front(&mut self) -> Result<(), SpoolError> {
        let Some(e) = self.live.front().cloned() else {
            return Ok(());
        };
        let mut payload = vec![KIND_ACK];
        payload.extend_from_slice(&e.id.to_le_bytes());
        self.append(&payload)?;
        self.live.pop_front();
        self.bytes -= e.len;
        self.collect_segments()
    }

    fn append(&mut self, payload: &[u8]) -> Result<(), SpoolError> {
        let mut frame = Vec::with_capacity(payload.len() + FRAME as usize);
        frame.extend_from_slice(
            &u32::try_from(payload.len())
                .expect("batch under 4 GiB")
                .to_le_bytes(),
        );
        frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        frame.extend_from_slice(payload);
        let path = self
            .dir
            .join(segment_name(*self.segments.back().expect("a segment")));
        let res = self
            .writer
            .write_all(&frame)
            .and_then(|()| self.writer.sync_data());
        if let Err(source) = res {
            // Cut off whatever part was written so the file stays well-formed.
            let _ = self.writer.set_len(self.writer_len);
            return Err(SpoolError::Io { path, source });
        }
        self.writer_len += frame.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), SpoolError> {
        let n = self.segments.back().map_or(0, |n| n + 1);
        self.writer = create_segment(&self.dir, n)?;
        self.segments.push_back(n);
        self.writer_len = 0;
        Ok(())
    }

    /// Deletes head segments without live batches; when nothing is live, starts over with one
    /// empty segment.
    fn collect_segments(&mut self) -> Result<(), SpoolError> {
        if self.live.is_empty() {
            if self.writer_len == 0 && self.segments.len() == 1 {
                return Ok(());
            }
            // New segment first, so a crash in between never leaves acks without their batches
            // or batches without their acks.
            self.rotate()?;
            while self.segments.len() > 1 {
                let n = self.segments.pop_front().expect("a segment");
                let path = self.dir.join(segment_name(n));
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
            sync_dir(&self.dir);
            return Ok(());
        }
        let first_live = self.live.front().map(|e| e.segment).expect("live");
        let mut removed = false;
        while self.segments.len() > 1 && self.segments.front().is_some_and(|&n| n < first_live) {
            let n = self.segments.pop_front().expect("a segment");
            let path = self.dir.join(segment_name(n));
            fs::remove_file(&path).map_err(io_err(&path))?;
            removed = true;
        }
        if removed {
            sync_dir(&self.dir);
        }
        Ok(())
    }
}

/// The payload of the well-formed record at `off`, or `None` if torn or failing its CRC.
fn frame_at(data: &[u8], off: usize) -> Option<&[u8]> {
    let head = data.get(off..off + FRAME as usize)?;
    let len = u32::from_le_bytes(head[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().ok()?);
    let start = off + FRAME as usize;
    let payload = data.get(start..start.checked_add(len)?)?;
    (len > 0 && crc32fast::hash(payload) == crc).then_some(payload)
}

fn create_segment(dir: &Path, n: u64) -> Result<File, SpoolError> {
    let path = dir.join(segment_name(n));
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io_err(&path))?;
    f.set_len(0).map_err(io_err(&path))?;
    sync_dir(dir);
    Ok(f)
}

fn sync_dir(dir: &Path) {
    // Best effort: makes file creation and removal durable where the platform allows it.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}
