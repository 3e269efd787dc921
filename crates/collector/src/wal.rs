//! A write-ahead log of accepted payloads, so that an acknowledged payload survives a crash
//! before its events reach the store.
//!
//! A record is `(seq, now, payload)`: the raw payload as received and its arrival second.
//! [`Ingestor::ingest`](crate::Ingestor::ingest) is deterministic given `(payload, now)`, so
//! replaying a record reproduces exactly the events it gave the first time. The caller logs only
//! payloads it accepted (not wholly rejected).
//!
//! # On disk
//!
//! A directory holding:
//! - segment files `wal-<first seq, 20 digits>.log`, each a sequence of records framed as
//!   `len u32 | crc32 u32 | seq u64 | now i64 | payload` (little endian; `len` is the payload
//!   length, its top bit set for a note; the CRC-32 covers `seq | now | payload`, preceded by
//!   `note` for a note). Sequence numbers start at 1 and increase by
//!   one, across segments and restarts. A segment is closed (fsynced, unless
//!   [`FsyncPolicy::Never`]) and a new one started once it reaches
//!   [`WalConfig::segment_size`] bytes.
//! - `checkpoint`: the highest sequence number whose events are in the store (8 bytes + CRC-32),
//!   replaced atomically (temp file, fsync, rename, fsync of the directory).
//!
//! # Opening, replay, checkpoints
//!
//! [`Wal::open`] reads every segment and returns the records after the checkpoint, oldest first,
//! for the caller to replay through an `Ingestor` and an
//! [`Aggregator`](crate::aggregate::Aggregator) (with
//! [`add_logged`](crate::aggregate::Aggregator::add_logged)); [`Wal::open_with`] also returns
//! an [`OpenReport`] of everything skipped, for the caller to log; [`Wal::open_replay`] returns
//! the records as a [`ReplayLog`] read again one segment at a time (a server's replay holds one
//! segment in memory, however long the log is). Damage is never skipped silently:
//! - A *torn tail* — what a crash in the middle of the last write leaves: a header cut short,
//!   the expected next record cut short or failing its CRC while reaching exactly the end of
//!   the last segment, or a tail of zeros, with no intact record anywhere after it — is
//!   truncated away and reported.
//! - Any other bad record (garbage, a record out of sequence, one followed by an intact one),
//!   or a missing segment, is [`WalError::Corrupted`]: the log does not open. With `salvage`,
//!   [`Wal::open_with`] copies the damaged file to `damaged/` first, cuts it at the damage
//!   (reporting how many bytes were given up) and accepts the gap.
//! - Damage in a segment wholly behind the checkpoint (left by a failed delete) costs nothing:
//!   its records are stored. It is reported and skipped.
//! - An unreadable checkpoint file is reported; every record present is returned (from the
//!   oldest segment on, which bounds the lost checkpoint). Done notes live in the log after the
//!   records they name, so [`crate::exactly_once`] still skips what is stored: exactly once.
//! - Records of a segment from the first number of the next segment on were re-logged there
//!   (see *Errors*): ignored, and reported.
//!
//! When it returns records to replay, `open` starts a fresh segment, so the first checkpoint
//! after the replay deletes all the replayed ones (a replay on a nearly full disk frees space).
//!
//! [`Wal::checkpoint`]`(upto)` records that everything `≤ upto` is stored and deletes the segments
//! holding only such records. With the aggregator the caller does
//! `wal.checkpoint(agg.min_pending_seq().map_or(wal.last_seq(), |s| s - 1))` after each flush.
//!
//! # Durability: what survives what
//!
//! | policy | [`append`](Wal::append) returns when | process crash / SIGKILL | OS crash / power loss |
//! |---|---|---|---|
//! | [`Always`](FsyncPolicy::Always) | the record is fsynced | every appended record | every appended record |
//! | [`Batch`](FsyncPolicy::Batch) | the record is written to the OS | every appended record | records up to the last fsync: every record whose [`wait_durable`](Wal::wait_durable) (or [`sync`](Wal::sync)) returned, and every record older than about `max_delay` |
//! | [`Never`](FsyncPolicy::Never) | the record is written to the OS | every appended record | anything may be lost; [`Wal::open`] may even report [`WalError::Corrupted`] (pages written back out of order) |
//!
//! "Written to the OS" means one `write(2)` of the whole record returned: the kernel's page cache
//! holds it, which a killed process cannot undo. So on acknowledged transports a server
//! acknowledges a request after [`append`](Wal::append) with `Always`, or after
//! [`wait_durable`](Wal::wait_durable)`(seq)` with `Batch` (group commit: many requests, one
//! fsync — while one fsync runs, the records appended meanwhile wait for the next one, which
//! covers all of them). Under `Never` an acknowledgement only protects against a process crash.
//!
//! # Exactly once, at least once
//!
//! Replay never re-stores a payload whose events were all written before the checkpoint. A
//! payload whose events span several groups (epochs, types…) is held until all of them are
//! stored; the groups already stored (or spooled) are named by *done notes* the server appends
//! after each flush, and [`crate::exactly_once::replay`] skips them. What remains at least once
//! (never lost): see [`crate::exactly_once`] (notes logged before the index close the store-write
//! window); and a caller that writes no notes gets the whole payload again.
//!
//! # Errors
//!
//! No error breaks the log for good; [`Wal::failing`] tells the last error while it stands, and
//! the next successful write clears it (a full disk is a state, not a failure).
//! - A failed write (e.g. `ENOSPC`) fails that append only: the partial record is cut away
//!   (`set_len` back to the last whole record) and the sequence number is not used. If the cut
//!   fails, the next append first rolls to a fresh segment (below).
//! - A failed fsync leaves the page cache of that file in an unknown state (Linux may drop the
//!   dirty pages and report success later). The log keeps an in-memory copy of every record not
//!   yet fsynced (not under `Never`): it *rolls* to a fresh segment named after the first of them,
//!   writes them there again and fsyncs it, and cuts the old segment back to what was durable
//!   (best effort; `open` ignores the old copies anyway). Waiters are answered only once their
//!   record is durable in the new segment; if the roll fails too, they get the error (not
//!   acknowledged) and the next append or sync tries again. A record whose fsync failed may still
//!   be replayed after a crash (at least once for a payload that was not acknowledged).
//!
//! Only one `Wal` may use a directory at a time (not enforced by a lock file).
//!
//! ```
//! use sluice_collector::wal::{FsyncPolicy, Wal, WalConfig};
//!
//! let dir = std::env::temp_dir().join(format!("sluice-wal-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let cfg = WalConfig { fsync: FsyncPolicy::Always, ..WalConfig::default() };
//! let (wal, replay) = Wal::open(&dir, cfg.clone()).unwrap();
//! assert!(replay.is_empty());
//! let seq = wal.append(b"{\"type\":\"WEB\"}", 1_700_000_000).unwrap(); // durable now
//! assert_eq!(seq, 1);
//! drop(wal);
//! let (wal, replay) = Wal::open(&dir, cfg.clone()).unwrap();
//! assert_eq!((replay[0].seq, replay[0].now, &replay[0].payload[..]), (1, 1_700_000_000, &b"{\"type\":\"WEB\"}"[..]));
//! wal.checkpoint(1).unwrap(); // its events are stored
//! drop(wal);
//! assert!(Wal::open(&dir, cfg).unwrap().1.is_empty());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes before the payload in a record: `len u32 | crc32 u32 | seq u64 | now i64`.
pub const HEADER_LEN: usize = 24;

const CHECKPOINT: &str = "checkpoint";
const CHECKPOINT_TMP: &str = "checkpoint.tmp";

/// When appended records are fsynced. See the [module docs](self) for what survives what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync after every append: [`Wal::append`] returns only once the record is durable
    /// (concurrent appends share fsyncs).
    Always,
    /// Group commit: [`Wal::append`] only writes; [`Wal::wait_durable`] / [`Wal::sync`] fsync
    /// everything appended so far. A background thread also fsyncs pending records every
    /// `max_delay`, bounding how long a record nobody waits for stays only in the page cache.
    Batch {
        /// Period of the background fsync.
        max_delay: Duration,
    },
    /// Never fsync (except on explicit [`Wal::sync`] and for checkpoints): records live in the
    /// OS page cache, surviving a process crash or SIGKILL but not an OS crash or power loss.
    Never,
}

impl FsyncPolicy {
    /// The default group commit: [`Batch`](FsyncPolicy::Batch) with a 5 ms background fsync.
    pub const BATCH: FsyncPolicy = FsyncPolicy::Batch {
        max_delay: Duration::from_millis(5),
    };
}

/// The setting's spelling: `always`, `batch` (5 ms), `batch:<ms>` (ms > 0) or `never`.
impl std::str::FromStr for FsyncPolicy {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<FsyncPolicy, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            "batch" => Ok(FsyncPolicy::BATCH),
            other => match other
                .strip_prefix("batch:")
                .and_then(|ms| ms.parse::<u64>().ok())
            {
                Some(ms) if ms > 0 => Ok(FsyncPolicy::Batch {
                    max_delay: Duration::from_millis(ms),
                }),
                _ => Err(format!(
                    "fsync {other:?} is not always, batch, batch:<ms> or never"
                )),
            },
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => f.write_str("always"),
            FsyncPolicy::Never => f.write_str("never"),
            FsyncPolicy::Batch { max_delay } => write!(f, "batch:{}", max_delay.as_millis()),
        }
    }
}

/// Settings of a [`Wal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// When records are fsynced (default [`FsyncPolicy::Always`]).
    pub fsync: FsyncPolicy,
    /// A segment is closed and a new one started once it holds at least this many bytes
    /// (default 64 MiB). One record is never split, so a segment may exceed it by one record.
    pub segment_size: u64,
}

impl Default for WalConfig {
    fn default() -> WalConfig {
        WalConfig {
            fsync: FsyncPolicy::Always,
            segment_size: 64 << 20,
        }
    }
}

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A payload as received ([`Wal::append`]).
    Payload,
    /// A note about earlier records ([`Wal::append_note`]), e.g. which of their events are
    /// already stored; the log does not interpret it.
    Note,
}

/// One logged payload or note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalRecord {
    /// Its sequence number (from 1, increasing by one; payloads and notes share the sequence).
    pub seq: u64,
    /// Its arrival time (UTC Unix seconds), as given to `Ingestor::ingest`.
    pub now: i64,
    /// Payload or note.
    pub kind: RecordKind,
    /// The payload as received (or the note's bytes).
    pub payload: Vec<u8>,
}

/// What went wrong in the write-ahead log.
#[derive(Debug)]
#[non_exhaustive]
pub enum WalError {
    /// An I/O error.
    Io {
        /// What was being done, naming the file.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// A bad record that is not a torn tail (or a record out of sequence), or an unreadable
    /// checkpoint file. Nothing is skipped: the operator must look.
    Corrupted {
        /// The file.
        segment: PathBuf,
        /// Byte offset of the bad record in it.
        offset: u64,
    },
    /// A payload larger than a record can hold (2 GiB).
    TooLarge(usize),
    /// [`Wal::checkpoint`] or [`Wal::wait_durable`] named a sequence number not appended yet.
    BadSeq {
        /// The number given.
        seq: u64,
        /// The last appended one.
        last: u64,
    },
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::Io { what, source } => write!(f, "wal: {what}: {source}"),
            WalError::Corrupted { segment, offset } => {
                write!(
                    f,
                    "wal: corrupted record in {} at byte {offset}",
                    segment.display()
                )
            }
            WalError::TooLarge(n) => {
                write!(f, "wal: payload of {n} bytes is too large for a record")
            }
            WalError::BadSeq { seq, last } => write!(
                f,
                "wal: sequence number {seq} is beyond the last one ({last})"
            ),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result of WAL operations.
pub type Result<T, E = WalError> = std::result::Result<T, E>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> WalError {
    let what = what.into();
    move |source| WalError::Io { what, source }
}

fn segment_name(first: u64) -> String {
    format!("wal-{first:020}.log")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The bit of the `len` field that marks a [`RecordKind::Note`].
const NOTE_FLAG: u32 = 1 << 31;
/// Largest payload or note of one record (the `len` field's other 31 bits).
const MAX_RECORD: usize = (NOTE_FLAG - 1) as usize;

fn record_crc(kind: RecordKind, seq: u64, now: i64, payload: &[u8]) -> u32 {
    let mut payload_crc = crc32fast::Hasher::new();
    payload_crc.update(payload);
    record_crc_with(kind, seq, now, &payload_crc)
}

/// [`record_crc`] from the payload's own CRC (computed before the log's lock is taken: the
/// sequence number that precedes the payload in the checksum is known only under it).
fn record_crc_with(kind: RecordKind, seq: u64, now: i64, payload_crc: &crc32fast::Hasher) -> u32 {
    let mut h = crc32fast::Hasher::new();
    // Notes are checksummed differently so that a flipped kind bit fails the check.
    if kind == RecordKind::Note {
        h.update(b"note");
    }
    h.update(&seq.to_le_bytes());
    h.update(&now.to_le_bytes());
    h.combine(payload_crc);
    h.finalize()
}

/// A record's header: length (with the note flag), CRC, sequence number, time.
fn record_header(
    kind: RecordKind,
    seq: u64,
    now: i64,
    payload_len: usize,
    payload_crc: &crc32fast::Hasher,
) -> [u8; HEADER_LEN] {
    let len = payload_len as u32
        | if kind == RecordKind::Note {
            NOTE_FLAG
        } else {
            0
        };
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&record_crc_with(kind, seq, now, payload_crc).to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&now.to_le_bytes());
    h
}

/// Writes every byte of `parts`, in order, with as few `writev` calls as the kernel allows.
fn write_all_vectored(mut file: &File, parts: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    let mut parts = parts;
    while !parts.is_empty() {
        match file.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The records appended since the last fsync (not under `Never`), encoded: written again to a
/// fresh segment when an fsync fails. Trimmed after every fsync by moving a start offset: a
/// `drain` moved the rest of the buffer each time (a record or two, ~1 MB at 1 M events/s, a
/// thousand times a second, under the log's lock); the buffer is compacted only once the
/// trimmed prefix is at least half of it.
#[derive(Debug, Default)]
struct Undurable {
    buf: Vec<u8>,
    head: usize,
}

impl Undurable {
    fn bytes(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Forgets the first `n` bytes (they are durable).
    fn consume(&mut self, n: usize) {
        self.head += n.min(self.len());
        if self.head == self.buf.len() {
            self.clear();
        } else if self.head >= self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.head = 0;
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("fsync of directory {}", dir.display())))
}

/// How one segment parsed.
struct Parsed {
    /// Its records after the checkpoint.
    records: Vec<RecordAt>,
    /// How many valid records it holds (those up to the checkpoint included).
    count: u64,
    /// Length of the valid prefix.
    valid_len: u64,
    /// Whether bytes follow the valid prefix that hold no record (a torn tail, or records
    /// re-logged in the next segment).
    torn: bool,
    /// Whether the records after the valid prefix were re-logged in the next segment.
    relogged: bool,
}

/// A valid record found in a segment's bytes: its header fields and where its payload is.
struct RecordAt {
    seq: u64,
    now: i64,
    kind: RecordKind,
    payload: std::ops::Range<usize>,
}

/// Parses a segment's bytes. `last`: the last segment, where a bad final record is a torn tail.
/// `first`: the sequence number its first record must carry. Records `≤ keep_after` are counted
/// but not returned. `next`: the first sequence number of the next segment: records from it on
/// were re-logged there after a failed write or fsync, so they (and anything bad from there on)
/// are ignored here.
fn parse_segment(
    path: &Path,
    bytes: &[u8],
    last: bool,
    first: u64,
    keep_after: u64,
    next: Option<u64>,
) -> Result<Parsed> {
    let mut p = Parsed {
        records: Vec::new(),
        count: 0,
        valid_len: 0,
        torn: false,
        relogged: false,
    };
    let mut off = 0usize;
    while off < bytes.len() {
        let expect = first + p.count;
        if next == Some(expect) {
            // Everything from here on lives in the next segment.
            p.torn = true;
            p.relogged = true;
            break;
        }
        let rest = &bytes[off..];
        let field = |at: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            let n = if at < 8 { 4 } else { 8 };
            b[..n].copy_from_slice(&rest[at..at + n]);
            b
        };
        // Whether the record here is complete, fits and checks: `None` if so, else whether the
        // bad record may be a torn tail: the write of the last record cut short or with some of
        // its pages lost (its header names the expected number and it reaches the end of the
        // file), a header cut short, or a tail of zeros — and no intact record follows
        // (truncating must never lose one). Anything else is damage.
        let bad_is_torn = if rest.len() < HEADER_LEN {
            Some(true) // cut short
        } else {
            let (kind, len) = split_len(u64::from_le_bytes(field(0)) as u32);
            let crc = u64::from_le_bytes(field(4)) as u32;
            let seq = u64::from_le_bytes(field(8));
            let now = i64::from_le_bytes(field(16));
            match HEADER_LEN.checked_add(len).filter(|&e| e <= rest.len()) {
                Some(end) if record_crc(kind, seq, now, &rest[HEADER_LEN..end]) == crc => {
                    if seq != expect {
                        Some(false)
                    } else {
                        if seq > keep_after {
                            p.records.push(RecordAt {
                                seq,
                                now,
                                kind,
                                payload: off + HEADER_LEN..off + end,
                            });
                        }
                        p.count += 1;
                        off += end;
                        None
                    }
                }
                reach => {
                    let torn_write = seq == expect && reach.is_none_or(|end| end == rest.len());
                    let zeros = rest.iter().all(|&b| b == 0);
                    Some((torn_write || zeros) && !intact_record_after(rest, expect))
                }
            }
        };
        match bad_is_torn {
            None => {}
            // In an older segment a torn tail is harmless only when the next segment carries on
            // with the next number (a write that failed and was cut back or rolled past).
            Some(true) if last || next == Some(expect) => {
                p.torn = true;
                break;
            }
            Some(_) => {
                return Err(WalError::Corrupted {
                    segment: path.to_owned(),
                    offset: off as u64,
                })
            }
        }
    }
    p.valid_len = off as u64;
    Ok(p)
}

/// Whether an intact record with a sequence number `>= expect` starts anywhere in `rest[1..]`
/// (cheap checks on the header first, then the CRC).
fn intact_record_after(rest: &[u8], expect: u64) -> bool {
    (1..rest.len().saturating_sub(HEADER_LEN - 1)).any(|at| {
        let h = &rest[at..at + HEADER_LEN];
        let word = |i: usize, n: usize| {
            h[i..i + n]
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        };
        let ((kind, len), crc, seq, now) = (
            split_len(word(0, 4) as u32),
            word(4, 4) as u32,
            word(8, 8),
            word(16, 8) as i64,
        );
        seq >= expect
            && seq - expect < 1 << 32
            && len <= rest.len() - at - HEADER_LEN
            && record_crc(
                kind,
                seq,
                now,
                &rest[at + HEADER_LEN..at + HEADER_LEN + len],
            ) == crc
    })
}

/// The kind and payload length held by a record's `len` field.
fn split_len(field: u32) -> (RecordKind, usize) {
    let kind = if field & NOTE_FLAG != 0 {
        RecordKind::Note
    } else {
        RecordKind::Payload
    };
    (kind, (field & !NOTE_FLAG) as usize)
}

fn read_checkpoint(dir: &Path) -> Result<u64> {
    let path = dir.join(CHECKPOINT);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
    };
    let bad = || WalError::Corrupted {
        segment: path.clone(),
        offset: 0,
    };
    if bytes.len() != 12 {
        return Err(bad());
    }
    let upto = u64::from_le_bytes(bytes[0..8].try_into().map_err(|_| bad())?);
    let crc = u32::from_le_bytes(bytes[8..12].try_into().map_err(|_| bad())?);
    if crc32fast::hash(&bytes[0..8]) != crc {
        return Err(bad());
    }
    Ok(upto)
}

/// Copies a damaged file to `damaged/<name>.<unix time>` in `dir` (fsynced) and returns where.
fn set_aside(dir: &Path, file: &Path) -> Result<PathBuf> {
    let aside_dir = dir.join("damaged");
    fs::create_dir_all(&aside_dir).map_err(io_err(format!("creating {}", aside_dir.display())))?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = file
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let to = aside_dir.join(format!("{name}.{secs}"));
    fs::copy(file, &to).map_err(io_err(format!(
        "copying {} to {}",
        file.display(),
        to.display()
    )))?;
    File::open(&to)
        .and_then(|f| f.sync_all())
        .map_err(io_err(format!("fsync of {}", to.display())))?;
    sync_dir(&aside_dir)?;
    Ok(to)
}

/// The records after the checkpoint, as [`Wal::open_replay`] found them: read again from their
/// segments, one at a time, by [`for_each`](Self::for_each), so replaying a long log holds one
/// segment in memory, not the log. The segments are not written while it is used (the log
/// appends to a fresh segment when there are records to replay) and are deleted only by a
/// checkpoint past them.
#[derive(Debug, Default)]
pub struct ReplayLog {
    segments: Vec<ReplaySegment>,
    records: u64,
}

#[derive(Debug)]
struct ReplaySegment {
    path: PathBuf,
    valid_len: u64,
    first: u64,
    keep_after: u64,
    next: Option<u64>,
    last: bool,
}

impl ReplayLog {
    /// Records to replay (payloads and notes).
    pub fn len(&self) -> u64 {
        self.records
    }

    /// Nothing to replay.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Calls `f` with every record, oldest first, reading one segment at a time. A segment
    /// that no longer reads as it did at open (changed underneath) is [`WalError::Corrupted`].
    pub fn for_each(&self, mut f: impl FnMut(WalRecord)) -> Result<()> {
        for s in &self.segments {
            // Sized up front: `take` hides the file's size from `read_to_end`, which would then
            // grow the buffer by doubling (twice the segment, briefly).
            let mut bytes = Vec::with_capacity(usize::try_from(s.valid_len).unwrap_or(0));
            File::open(&s.path)
                .and_then(|file| file.take(s.valid_len).read_to_end(&mut bytes))
                .map_err(io_err(format!("reading {}", s.path.display())))?;
            if bytes.len() as u64 != s.valid_len {
                return Err(WalError::Corrupted {
                    segment: s.path.clone(),
                    offset: bytes.len() as u64,
                });
            }
            let parsed = parse_segment(&s.path, &bytes, s.last, s.first, s.keep_after, s.next)?;
            // One payload copied at a time: the segment's bytes and one record are held.
            for r in parsed.records {
                f(WalRecord {
                    seq: r.seq,
                    now: r.now,
                    kind: r.kind,
                    payload: bytes[r.payload].to_vec(),
                });
            }
        }
        Ok(())
    }
}

/// What [`Wal::open_with`] skipped or cut away, besides the records it returns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OpenReport {
    /// One line per thing skipped, cut or set aside; the server logs them.
    pub warnings: Vec<String>,
    /// Files a salvage copied aside before cutting them.
    pub set_aside: Vec<PathBuf>,
}

struct Segment {
    first: u64,
    path: PathBuf,
}

struct State {
    /// The segment being appended to (last of `segments`).
    file: Arc<File>,
    /// Its size in bytes.
    file_len: u64,
    /// Every segment on disk, oldest first.
    segments: Vec<Segment>,
    /// Last appended sequence number (0: none yet).
    last_seq: u64,
    /// Every record up to this one is fsynced.
    durable_seq: u64,
    /// A thread is fsyncing outside the lock.
    syncing: bool,
    /// fsyncs of records done so far.
    fsyncs: u64,
    /// When the oldest record not yet fsynced was appended.
    dirty_since: Option<Instant>,
    /// The last write or fsync error, until a write succeeds again ([`Wal::failing`]).
    failing: Option<String>,
    /// The active segment must be replaced before the next write: a failed write could not be
    /// cut back, or an fsync failed (after which its page-cache state is unknown).
    needs_roll: bool,
    /// Records appended since `durable_seq`, encoded (not under `Never`): written again to a
    /// fresh segment when an fsync fails.
    undurable: Undurable,
    /// Length of the active segment up to `durable_seq` (where `undurable` starts in it).
    durable_len: u64,
    shutdown: bool,
}

struct Shared {
    dir: PathBuf,
    cfg: WalConfig,
    state: Mutex<State>,
    cv: Condvar,
    /// Serialises checkpoints; holds the last checkpointed sequence number.
    checkpoint: Mutex<u64>,
}

/// The write-ahead log. All methods take `&self`: share it (e.g. in an `Arc`) between the
/// threads that append and wait. See the [module docs](self).
pub struct Wal {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("cfg", &self.shared.cfg)
            .field("segments", &st.segments.len())
            .field("last_seq", &st.last_seq)
            .field("durable_seq", &st.durable_seq)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fsyncs everything appended up to now (at least up to `seq`), sharing the fsync with
    /// concurrent callers. A failed fsync rolls to a fresh segment holding the records that
    /// were not durable ([`relog`](Self::relog)); the error is returned only if that fails too.
    fn sync_upto<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        seq: u64,
    ) -> Result<MutexGuard<'a, State>> {
        loop {
            if st.durable_seq >= seq {
                return Ok(st);
            }
            if st.syncing {
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if st.needs_roll {
                let r = self.relog(&mut st);
                self.cv.notify_all();
                r?;
                continue;
            }
            st.syncing = true;
            let target = st.last_seq;
            let target_len = st.file_len;
            let file = Arc::clone(&st.file);
            st.dirty_since = None;
            drop(st);
            let r = file.sync_data();
            st = self.lock();
            st.syncing = false;
            match r {
                Ok(()) if Arc::ptr_eq(&file, &st.file) => {
                    st.fsyncs += 1;
                    if target > st.durable_seq {
                        let done = target_len.saturating_sub(st.durable_len) as usize;
                        st.undurable.consume(done);
                        st.durable_seq = target;
                        st.durable_len = target_len;
                    }
                }
                Ok(()) => {} // the segment was replaced meanwhile: its successor says
                Err(e) if Arc::ptr_eq(&file, &st.file) => {
                    st.failing = Some(format!("fsync of {}: {e}", self.active_path(&st).display()));
                    st.needs_roll = true;
                }
                Err(_) => {}
            }
            self.cv.notify_all();
        }
    }

    /// Replaces the active segment after a failed write or fsync: a fresh segment named after
    /// the first record not known durable gets those records again, fsynced (unless `Never`),
    /// and the old segment is cut back to what was durable (best effort: [`Wal::open`] ignores
    /// records of a segment that the next one starts with). On success the log works again.
    fn relog(&self, st: &mut State) -> Result<()> {
        let fsync = self.cfg.fsync != FsyncPolicy::Never;
        // Under `Never` nothing is kept to re-log: the old segment keeps every record (in the
        // page cache) and the new one starts after the last.
        let first = if fsync {
            st.durable_seq + 1
        } else {
            st.last_seq + 1
        };
        let path = self.dir.join(segment_name(first));
        let same = st.segments.last().is_some_and(|s| s.path == path);
        let result = (|| -> Result<File> {
            if !same && fsync {
                // Keep only what is durable in the old segment (its fd may be in an error state).
                let _ = st.file.set_len(st.durable_len);
            }
            let mut file = create_segment(&path)?;
            file.write_all(st.undurable.bytes())
                .map_err(io_err(format!("appending to {}", path.display())))?;
            if fsync {
                file.sync_data()
                    .map_err(io_err(format!("fsync of {}", path.display())))?;
                sync_dir(&self.dir)?;
            }
            Ok(file)
        })();
        match result {
            Ok(file) => {
                if !same {
                    st.segments.push(Segment { first, path });
                }
                st.file = Arc::new(file);
                st.file_len = st.undurable.len() as u64;
                if fsync {
                    st.fsyncs += 1;
                    st.durable_seq = st.last_seq;
                    st.durable_len = st.file_len;
                    st.undurable.clear();
                    st.dirty_since = None;
                } else {
                    st.durable_len = 0;
                }
                st.needs_roll = false;
                st.failing = None;
                Ok(())
            }
            Err(e) => {
                if !same {
                    // Never leave a half-written successor: open would trust it.
                    let _ = fs::remove_file(&path);
                }
                st.failing = Some(e.to_string());
                Err(e)
            }
        }
    }

    fn active_path<'s>(&self, st: &'s State) -> &'s Path {
        st.segments
            .last()
            .map_or(Path::new("?"), |s| s.path.as_path())
    }

    /// Closes the active segment (fsynced unless `Never`) and starts `wal-<last_seq+1>.log`.
    fn rotate(&self, st: &mut State) -> Result<()> {
        let fsync = self.cfg.fsync != FsyncPolicy::Never;
        if fsync {
            // Another thread may be fsyncing the old file outside the lock: harmless.
            if let Err(e) = st.file.sync_data() {
                st.needs_roll = true;
                return Err(io_err(format!(
                    "fsync of {}",
                    self.active_path(st).display()
                ))(e));
            }
            st.durable_seq = st.last_seq;
            st.fsyncs += 1;
            st.dirty_since = None;
            st.undurable.clear();
        }
        let first = st.last_seq + 1;
        let path = self.dir.join(segment_name(first));
        let file = create_segment(&path)?;
        if fsync {
            if let Err(e) = sync_dir(&self.dir) {
                let _ = fs::remove_file(&path);
                return Err(e);
            }
        }
        st.file = Arc::new(file);
        st.file_len = 0;
        st.durable_len = 0;
        st.segments.push(Segment { first, path });
        Ok(())
    }
}

fn create_segment(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .map_err(io_err(format!("creating {}", path.display())))
}

impl Wal {
    /// Opens (creating if needed) the log in `dir` and returns it with the records after the
    /// last checkpoint, oldest first, to replay. A torn tail is truncated; any other bad record
    /// is [`WalError::Corrupted`]. [`open_with`](Self::open_with) says what it skipped.
    pub fn open(dir: impl AsRef<Path>, cfg: WalConfig) -> Result<(Wal, Vec<WalRecord>)> {
        Wal::open_with(dir, cfg, false).map(|(wal, records, _)| (wal, records))
    }

    /// [`open`](Self::open), also returning what was found wrong and skipped (log it):
    /// - a torn tail cut away (with its size);
    /// - damage in a segment wholly behind the checkpoint (its records are stored: skipped);
    /// - an unreadable checkpoint file: every record of the segments present is replayed, and
    ///   the done notes among them keep that exactly once (see [`crate::exactly_once`]).
    ///
    /// With `salvage`, a damaged segment is first copied to `damaged/<name>.<unix time>` in
    /// `dir`, then cut at the damage (its records after it are lost, and said so), and gaps
    /// in the sequence are accepted; without it such damage is [`WalError::Corrupted`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        cfg: WalConfig,
        salvage: bool,
    ) -> Result<(Wal, Vec<WalRecord>, OpenReport)> {
        let (wal, log, report) = Wal::open_replay(dir, cfg, salvage)?;
        let mut records = Vec::new();
        log.for_each(|r| records.push(r))?;
        Ok((wal, records, report))
    }

    /// [`open_with`](Self::open_with), returning the records to replay as a [`ReplayLog`] that
    /// reads them again one segment at a time: memory for one segment, however long the log
    /// grew (a pending future-dated payload holds the checkpoint back while later ones pile
    /// up behind it). What a server uses.
    pub fn open_replay(
        dir: impl AsRef<Path>,
        cfg: WalConfig,
        salvage: bool,
    ) -> Result<(Wal, ReplayLog, OpenReport)> {
        let dir = dir.as_ref().to_owned();
        let mut report = OpenReport::default();
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let _ = fs::remove_file(dir.join(CHECKPOINT_TMP));
        let mut segments = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(format!("listing {}", dir.display())))? {
            let entry = entry.map_err(io_err(format!("listing {}", dir.display())))?;
            if let Some(first) = entry.file_name().to_str().and_then(parse_segment_name) {
                segments.push(Segment {
                    first,
                    path: entry.path(),
                });
            }
        }
        segments.sort_by_key(|s| s.first);
        let checkpointed = match read_checkpoint(&dir) {
            Ok(c) => c,
            Err(e @ WalError::Corrupted { .. }) => {
                // Segments are deleted only once checkpointed: the oldest present bounds it.
                let floor = segments.first().map_or(0, |s| s.first.saturating_sub(1));
                report.warnings.push(format!(
                    "{e}: replaying every record from {} on (done notes skip what is stored)",
                    floor + 1
                ));
                floor
            }
            Err(e) => return Err(e),
        };

        let mut replay = ReplayLog::default();
        let mut last_seq = checkpointed;
        let mut expect: Option<u64> = None;
        let n = segments.len();
        let mut active: Option<(File, u64)> = None;
        for i in 0..n {
            let last = i + 1 == n;
            let next = segments.get(i + 1).map(|s| s.first);
            let seg = &segments[i];
            let mut bytes = Vec::new();
            let mut f = OpenOptions::new()
                .read(true)
                .append(last) // writes go to the end, wherever reading left the cursor
                .write(salvage) // a salvage may cut any segment
                .open(&seg.path)
                .map_err(io_err(format!("opening {}", seg.path.display())))?;
            f.read_to_end(&mut bytes)
                .map_err(io_err(format!("reading {}", seg.path.display())))?;
            // Segments follow each other without gaps; only checkpointed ones may be gone.
            if expect.map_or(seg.first > checkpointed + 1, |e| e != seg.first) {
                let gap = WalError::Corrupted {
                    segment: seg.path.clone(),
                    offset: 0,
                };
                if !salvage {
                    return Err(gap);
                }
                report.warnings.push(format!(
                    "{gap}: records {} to {} are missing (salvage: skipped)",
                    expect.unwrap_or(checkpointed + 1),
                    seg.first.saturating_sub(1)
                ));
            }
            // Wholly behind the checkpoint: every record is stored, damage costs nothing.
            let behind = next.is_some_and(|nx| nx <= checkpointed + 1);
            let parsed = match parse_segment(&seg.path, &bytes, last, seg.first, checkpointed, next)
            {
                Ok(p) => p,
                Err(e) if behind => {
                    report.warnings.push(format!("{e}: the segment is wholly behind the checkpoint (its events are stored); skipped"));
                    expect = next;
                    continue;
                }
                Err(WalError::Corrupted { segment, offset }) if salvage => {
                    let aside = set_aside(&dir, &segment)?;
                    let mut p = parse_segment(
                        &seg.path,
                        &bytes[..offset as usize],
                        last,
                        seg.first,
                        checkpointed,
                        next,
                    )?;
                    report.warnings.push(format!(
                        "wal: corrupted record in {} at byte {offset}: copied to {}; {} bytes after it skipped (salvage)",
                        segment.display(),
                        aside.display(),
                        bytes.len() as u64 - offset
                    ));
                    report.set_aside.push(aside);
                    p.torn = true;
                    p.valid_len = offset;
                    p
                }
                Err(e) => return Err(e),
            };
            let count = parsed.count;
            if parsed.torn && parsed.relogged {
                report.warnings.push(format!(
                    "wal: {} bytes at the end of {} ignored: their records were written again in the next segment",
                    bytes.len() as u64 - parsed.valid_len,
                    seg.path.display()
                ));
            } else if parsed.torn {
                if last || salvage {
                    f.set_len(parsed.valid_len)
                        .map_err(io_err(format!("truncating {}", seg.path.display())))?;
                    f.sync_all()
                        .map_err(io_err(format!("fsync of {}", seg.path.display())))?;
                }
                if bytes.len() as u64 > parsed.valid_len && !salvage {
                    report.warnings.push(format!(
                        "wal: torn tail of {} bytes cut from {} after record {} (a write cut short by a crash; never acknowledged)",
                        bytes.len() as u64 - parsed.valid_len,
                        seg.path.display(),
                        seg.first + count - 1
                    ));
                }
            }
            if count > 0 {
                last_seq = last_seq.max(seg.first + count - 1);
            }
            expect = Some(seg.first + count);
            if !parsed.records.is_empty() {
                // Read again at replay (only this segment's bytes are held meanwhile).
                replay.records += parsed.records.len() as u64;
                replay.segments.push(ReplaySegment {
                    path: seg.path.clone(),
                    valid_len: parsed.valid_len,
                    first: seg.first,
                    keep_after: checkpointed,
                    next,
                    last,
                });
            }
            if last {
                active = Some((f, parsed.valid_len));
            }
        }
        let next = last_seq + 1;
        let (file, file_len) = match active {
            // Append to the last segment, unless it is empty and misnamed, or it holds records
            // to replay: a fresh segment lets the checkpoint after the replay delete them all,
            // so a replay on a nearly full disk frees the log's space.
            Some((f, len))
                if (len > 0 && replay.is_empty())
                    || (len == 0 && segments.last().is_some_and(|s| s.first == next)) =>
            {
                (f, len)
            }
            other => {
                if other.as_ref().is_some_and(|(_, len)| *len == 0) {
                    if let Some(s) = segments.pop() {
                        fs::remove_file(&s.path)
                            .map_err(io_err(format!("removing {}", s.path.display())))?;
                    }
                }
                let path = dir.join(segment_name(next));
                let f = create_segment(&path)?;
                sync_dir(&dir)?;
                segments.push(Segment { first: next, path });
                (f, 0)
            }
        };
        let state = State {
            file: Arc::new(file),
            file_len,
            segments,
            last_seq,
            durable_seq: last_seq,
            syncing: false,
            fsyncs: 0,
            dirty_since: None,
            failing: None,
            needs_roll: false,
            undurable: Undurable::default(),
            durable_len: file_len,
            shutdown: false,
        };
        let shared = Arc::new(Shared {
            dir,
            cfg: cfg.clone(),
            state: Mutex::new(state),
            cv: Condvar::new(),
            checkpoint: Mutex::new(checkpointed),
        });
        let flusher = match cfg.fsync {
            FsyncPolicy::Batch { max_delay } => {
                let shared = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("sluice-wal-sync".into())
                    .spawn(move || flusher(&shared, max_delay.max(Duration::from_millis(1))))
                    .map_err(io_err("starting the wal sync thread"))?;
                Some(spawned)
            }
            _ => None,
        };
        Ok((Wal { shared, flusher }, replay, report))
    }

    /// Appends a record and returns its sequence number. With [`FsyncPolicy::Always`] it is
    /// durable on return; otherwise it is in the OS page cache (use
    /// [`wait_durable`](Self::wait_durable) before acknowledging under `Batch`).
    pub fn append(&self, payload: &[u8], now: i64) -> Result<u64> {
        self.append_kind(RecordKind::Payload, payload, now)
    }

    /// Appends a [`RecordKind::Note`] (durable as [`append`](Self::append) says) and returns its
    /// sequence number. [`Wal::open`] returns notes after the checkpoint like payloads; the
    /// aggregator's done notes use this (see [`crate::exactly_once`]).
    pub fn append_note(&self, note: &[u8], now: i64) -> Result<u64> {
        self.append_kind(RecordKind::Note, note, now)
    }

    fn append_kind(&self, kind: RecordKind, payload: &[u8], now: i64) -> Result<u64> {
        if payload.len() > MAX_RECORD {
            return Err(WalError::TooLarge(payload.len()));
        }
        // Checksummed before the lock: appends of several threads wait only for each other's
        // writes (the record's own checksum combines this one with its sequence number).
        let mut payload_crc = crc32fast::Hasher::new();
        payload_crc.update(payload);
        let sh = &*self.shared;
        let mut st = sh.lock();
        while st.syncing && st.needs_roll {
            st = sh.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.needs_roll {
            sh.relog(&mut st)?;
        }
        if st.file_len >= sh.cfg.segment_size && st.file_len > 0 {
            if let Err(e) = sh.rotate(&mut st) {
                st.failing = Some(e.to_string());
                return Err(e);
            }
        }
        let seq = st.last_seq + 1;
        let header = record_header(kind, seq, now, payload.len(), &payload_crc);
        // Header and payload in one `writev`: the payload is not copied into a record first.
        let written = write_all_vectored(
            &st.file,
            &mut [io::IoSlice::new(&header), io::IoSlice::new(payload)],
        );
        if let Err(e) = written {
            let e = io_err(format!("appending to {}", sh.active_path(&st).display()))(e);
            // Cut the partial record away so the segment stays appendable; if that fails too,
            // the next write starts a fresh segment.
            // (The cursor goes back too: a segment created here is not in append mode.)
            let len = st.file_len;
            if st
                .file
                .set_len(len)
                .and_then(|()| (&*st.file).seek(SeekFrom::Start(len)))
                .is_err()
            {
                st.needs_roll = true;
            }
            st.failing = Some(e.to_string());
            return Err(e);
        }
        st.failing = None;
        st.file_len += (HEADER_LEN + payload.len()) as u64;
        st.last_seq = seq;
        st.dirty_since.get_or_insert_with(Instant::now);
        if sh.cfg.fsync != FsyncPolicy::Never {
            st.undurable.push(&header);
            st.undurable.push(payload);
        }
        if sh.cfg.fsync == FsyncPolicy::Always {
            drop(sh.sync_upto(st, seq)?);
        }
        Ok(seq)
    }

    /// The last write or fsync error while it lasts: `None` once a write succeeded again (the
    /// log has no permanently broken state; see the [module docs](self)).
    pub fn failing(&self) -> Option<String> {
        self.shared.lock().failing.clone()
    }

    /// Returns once record `seq` (and every earlier one) is durable as the policy promises: fsynced
    /// under `Always` and `Batch` (this may do the fsync, shared with concurrent callers);
    /// immediately under `Never`.
    pub fn wait_durable(&self, seq: u64) -> Result<()> {
        let st = self.shared.lock();
        if seq > st.last_seq {
            return Err(WalError::BadSeq {
                seq,
                last: st.last_seq,
            });
        }
        if self.shared.cfg.fsync == FsyncPolicy::Never {
            return Ok(());
        }
        self.shared.sync_upto(st, seq).map(drop)
    }

    /// Fsyncs every record appended so far, whatever the policy, and returns the last sequence
    /// number (0 if none).
    pub fn sync(&self) -> Result<u64> {
        let st = self.shared.lock();
        let last = st.last_seq;
        self.shared.sync_upto(st, last).map(|_| last)
    }

    /// The last appended sequence number (0 if none ever).
    pub fn last_seq(&self) -> u64 {
        self.shared.lock().last_seq
    }

    /// Every record up to this sequence number is fsynced.
    pub fn durable_seq(&self) -> u64 {
        self.shared.lock().durable_seq
    }

    /// The last checkpointed sequence number (0 if none).
    pub fn checkpointed(&self) -> u64 {
        *self
            .shared
            .checkpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// How many fsyncs of records were done (group commit: fewer than appends).
    pub fn fsyncs(&self) -> u64 {
        self.shared.lock().fsyncs
    }

    /// The segment files on disk, oldest first.
    pub fn segments(&self) -> Vec<PathBuf> {
        self.shared
            .lock()
            .segments
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }

    /// Records durably that every record `≤ upto` has been stored (it will not be replayed),
    /// and deletes the segments holding only such records. A number at or below the current
    /// checkpoint does nothing; one beyond [`last_seq`](Self::last_seq) is an error.
    ///
    /// The records must be durable themselves before they are checkpointed away only if the
    /// caller cares about their sequence numbers: the checkpoint file alone keeps numbering
    /// increasing across restarts.
    pub fn checkpoint(&self, upto: u64) -> Result<()> {
        let sh = &*self.shared;
        let mut cp = sh.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        let last = sh.lock().last_seq;
        if upto > last {
            return Err(WalError::BadSeq { seq: upto, last });
        }
        if upto <= *cp {
            return Ok(());
        }
        let tmp = sh.dir.join(CHECKPOINT_TMP);
        let path = sh.dir.join(CHECKPOINT);
        let mut bytes = upto.to_le_bytes().to_vec();
        bytes.extend_from_slice(&crc32fast::hash(&upto.to_le_bytes()).to_le_bytes());
        let mut f = create_segment(&tmp)?;
        f.write_all(&bytes)
            .map_err(io_err(format!("writing {}", tmp.display())))?;
        f.sync_all()
            .map_err(io_err(format!("fsync of {}", tmp.display())))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(io_err(format!(
            "renaming {} to {}",
            tmp.display(),
            path.display()
        )))?;
        sync_dir(&sh.dir)?;
        *cp = upto;
        // Segment i holds [first_i, first_{i+1} - 1]; never delete the active (last) one.
        let doomed: Vec<Segment> = {
            let mut st = sh.lock();
            let keep_from = st
                .segments
                .windows(2)
                .take_while(|w| w[1].first <= upto + 1)
                .count();
            st.segments.drain(..keep_from).collect()
        };
        for s in &doomed {
            match fs::remove_file(&s.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(format!("removing {}", s.path.display()))(e)),
            }
        }
        Ok(())
    }
}

/// Background fsync under [`FsyncPolicy::Batch`]: every `period`, fsyncs what is pending.
fn flusher(shared: &Shared, period: Duration) {
    let mut st = shared.lock();
    loop {
        if st.shutdown {
            return;
        }
        let wait = match st.dirty_since {
            Some(t) => period.saturating_sub(t.elapsed()),
            None => period,
        };
        if st.dirty_since.is_some() && wait.is_zero() && !st.syncing && st.failing.is_none() {
            let last = st.last_seq;
            st = match shared.sync_upto(st, last) {
                Ok(st) => st,
                Err(_) => shared.lock(), // failing: the next append or wait tries again
            };
            continue;
        }
        st = shared
            .cv
            .wait_timeout(st, wait.max(Duration::from_millis(1)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if let Some(h) = self.flusher.take() {
            self.shared.lock().shutdown = true;
            self.shared.cv.notify_all();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum combined from the payload's own CRC is the one earlier versions computed over
    /// the concatenated bytes: logs they wrote still open.
    #[test]
    fn a_combined_checksum_is_the_checksum_of_the_bytes() {
        let (seq, now) = (123_456_789u64, 1_700_000_000i64);
        for payload in [&b""[..], b"{}", &[0xA5u8; 70_000][..]] {
            let mut plain = Vec::new();
            plain.extend_from_slice(&seq.to_le_bytes());
            plain.extend_from_slice(&now.to_le_bytes());
            plain.extend_from_slice(payload);
            assert_eq!(
                record_crc(RecordKind::Payload, seq, now, payload),
                crc32fast::hash(&plain)
            );
            let note = [&b"note"[..], &plain].concat();
            assert_eq!(
                record_crc(RecordKind::Note, seq, now, payload),
                crc32fast::hash(&note)
            );
        }
    }

    /// Trimming moves an offset, compacts once half is consumed, and always leaves exactly the
    /// bytes not yet durable, in order.
    #[test]
    fn undurable_keeps_the_bytes_after_what_was_consumed() {
        let mut u = Undurable::default();
        let mut want: Vec<u8> = Vec::new();
        let mut next = 0u8;
        for step in 0..200usize {
            let chunk: Vec<u8> = (0..(step % 17 + 1))
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect();
            u.push(&chunk);
            want.extend_from_slice(&chunk);
            let n = (step * 7) % (want.len() + 3);
            u.consume(n);
            want.drain(..n.min(want.len()));
            assert_eq!(u.bytes(), &want[..], "step {step}");
            assert_eq!(u.len(), want.len());
            assert!(
                u.head < u.buf.len().max(1),
                "compacted: head {} of {}",
                u.head,
                u.buf.len()
            );
        }
        u.clear();
        assert!(u.bytes().is_empty());
    }
}
