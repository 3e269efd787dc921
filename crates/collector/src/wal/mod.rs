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
    type Err = BadFsyncPolicy;

    fn from_str(s: &str) -> std::result::Result<FsyncPolicy, BadFsyncPolicy> {
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
                _ => Err(BadFsyncPolicy(other.to_owned())),
            },
        }
    }
}

/// An `fsync` setting that is none of the spellings [`FsyncPolicy`] reads; holds the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fsync {0:?} is not always, batch, batch:<ms> or never")]
pub struct BadFsyncPolicy(pub String);

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

mod format;
mod recovery;
mod writer;

use format::*;
pub use recovery::{OpenReport, ReplayLog};
use writer::*;

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
