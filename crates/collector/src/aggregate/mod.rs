//! Per-second aggregation: groups accepted events by (epoch, dc, type, subtype) and, once an
//! epoch's grace period has passed, writes them to a [`Store`] as blobs (data first, then the
//! epoch index, then the completeness counts).
//!
//! Synchronous and deterministic: time is passed in (`now`, UTC Unix seconds), groups are
//! processed in (epoch, dc, type, subtype) order.
//!
//! - [`Aggregator::add`] files events into open groups. An event whose epoch's flush time has
//!   passed (`epoch + grace_secs < now`, or its group was already written) is still accepted and marked *late*: it becomes a further chunk of that epoch and is counted
//!   in [`Counts::late`].
//! - [`Aggregator::flush_due`] closes every group with `epoch + grace_secs < now`, builds its
//!   blob(s) with a [`BlobBuilder`] and writes them; [`Aggregator::flush_all`] closes every group
//!   (shutdown).
//! - Chunk numbers continue per (epoch, dc, type, subtype) across flushes: `n` or
//!   `<collector_id>.n`. The first time a group is written the numbering starts after what the
//!   store's epoch index already lists for this writer, read with
//!   [`Store::get_epoch_index_latest`] (so a restarted collector does not collide with its own
//!   earlier chunks). Hence a key is only ever put with one set of bytes (a blob under a number
//!   no index lists yet is an earlier run's orphan, its events replayed, or this batch's own
//!   earlier try), and blobs go through [`Store::put_owned_blob_lists`]: backends may skip the
//!   write-once check (Cassandra's lightweight transaction). This needs one writer per collector
//!   id (or one without) per (epoch, dc, type, subtype). When the store cannot be read then (it is down), the group
//!   is still closed, as an *unnumbered* batch numbered just before its first write; a spooled
//!   one is numbered when it leaves the spool, its keys recorded there first
//!   ([`Spool::number_front`]) so a replay after a crash writes the same keys.
//! - Write-ahead log bookkeeping: [`Aggregator::add_logged`] tags events with the WAL sequence
//!   number of the payload they came from; [`Aggregator::min_pending_seq`] is the smallest such
//!   number whose events are not all written yet (in an open group or an unfinished batch), so
//!   everything below it may be checkpointed (see [`crate::wal`]).
//! - A store error keeps the work: a closed group becomes a *batch* (its chunks with their keys)
//!   that is retried on the next call from the step that failed (blobs, then index, then counts).
//!   Index entries are written only once every blob of the batch is stored. The batches of one
//!   epoch are written *phased*: all their blobs in one [`Store::put_owned_blob_lists`] call (each
//!   batch's in order, stopping at its first failure; backends overlap the batches), then their
//!   notes, then all index entries ([`Store::add_to_epoch_indexes`]), then all counts
//!   ([`Store::add_counts_once_many`]); a batch enters a phase only if no earlier batch met a
//!   transient error. Its counts go
//!   through [`Store::add_counts_once`] under the token (collector id, epoch-index entry of the
//!   batch's first chunk), so a retry after an unknown outcome never adds them twice.
//! - **Stored-chunk hook**: [`FlushReport::stored`] lists every batch whose blobs and index
//!   entries were both stored by that call, with its chunks' keys and bytes (moved out of the
//!   batch, not copied): the place for write-time work on stored data (substreams).
//! - Spool ([`AggregatorConfig::spool`], off by default): when a store write fails and more than
//!   [`SpoolConfig::memory_batches`] batches are pending, the oldest pending batches are spilled
//!   to a bounded on-disk [`Spool`] (see [`crate::spool`]). Every flush first replays the spool,
//!   oldest first, before any newer batch, so batches reach the store in the order they were
//!   closed (and, within a batch, data before index before counts). A spooled batch leaves the
//!   spool only once the store confirmed it. The spool (fsynced) now holds it durably, so its WAL
//!   sequence numbers are released (the WAL may be checkpointed past it and stays small while the
//!   store is down) and a [`DoneNote`] is recorded for it, as for a stored batch: the caller
//!   writes the notes ([`Aggregator::take_done`]) to the WAL so that a replay after a crash does
//!   not add those events a second time (see [`crate::exactly_once`]). An aggregator opened on a spool
//!   directory left by a crashed one replays what it holds.
//! - **Note log** ([`Aggregator::set_note_log`]): the done note of a stored batch is appended
//!   through it *before* the batch's epoch-index entries are written, with the first entry as
//!   its proof, so that no SIGKILL timing leaves an indexed batch without its note (a restarted
//!   collector numbers its chunks after the index, so a replayed group never collides with its
//!   earlier copy and write-once cannot dedupe it: the note must). See [`crate::exactly_once`].
//! - **Backpressure**: when the spool refuses a batch (full: [`SpoolConfig::max_bytes`]), the
//!   batch stays in memory, and while more than `memory_batches` batches are in memory
//!   ([`Aggregator::is_backpressured`]) `flush_due`/`flush_all` only retry the pending work and
//!   close no new group: due groups stay open (in memory, still accepting events) until the store
//!   takes the backlog. A caller should then shed or stop acknowledging input. Nothing is dropped.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_collector::aggregate::{Aggregator, AggregatorConfig};
//! use sluice_collector::{IngestConfig, Ingestor};
//! use sluice_store::{InMemoryStore, Store};
//!
//! let store = Arc::new(InMemoryStore::new());
//! let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
//! let mut ing = Ingestor::new(IngestConfig { dc: "ams1".into(), ..Default::default() }).unwrap();
//! let now = 1_700_000_000;
//! agg.add(ing.ingest(b"{\"type\":\"WEB\",\"ms\":5}", now).events, now);
//! assert_eq!(agg.flush_due(now + 1).blobs, 0); // still within the grace period
//! let report = agg.flush_due(now + 2);
//! assert!(report.is_ok());
//! assert_eq!((report.blobs, report.events), (1, 1));
//! assert!(store.get_epoch_index(now, "ams1").unwrap().contains("WEB::0"));
//! ```
//!
//! Files: this one holds the configuration, the reports and the aggregator's state; `group`
//! puts events into their second's group and closes the due groups into batches; `phases`
//! numbers chunks and runs the phased writes (blobs, index, counts), with the spool.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::Arc;

use sereal::{ArrayEncoder, Value};
use sluice_blob::{Blob, BlobBuilder, BlobError, BlobOptions, ChunkId, EpochIndex, IndexEntry};
use sluice_store::{
    BlobKey, Counts, CountsAdd, CountsWrite, Namespace, PutOutcome, Store, StoreError,
};

use crate::batch::{BodyRef, EventBatch};
use crate::ingest::ParsedEvent;
use crate::note::DoneNote;
use crate::spares::Spares;
pub use crate::spool::SpoolConfig;
use crate::spool::{Spool, SpoolError, SpooledBatch, SpooledChunk};
use crate::wal::WalError;

/// The drop reason under which events that cannot be encoded into a blob are counted (in
/// [`Counts::dropped`]). Ingest validation makes this practically unreachable.
pub const UNENCODABLE: &str = "unencodable";

/// Settings of an [`Aggregator`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatorConfig {
    /// This collector's id; chunks are then named `<id>.<n>` so that several collectors writing
    /// the same (epoch, dc, type, subtype) never overwrite each other. `None`: plain `<n>` (the
    /// original form, for a sole writer).
    pub collector_id: Option<String>,
    /// Seconds to wait after an epoch ends before flushing it (default 1): epoch `e` is flushed
    /// by `flush_due(now)` once `e + grace_secs < now`.
    pub grace_secs: u64,
    /// How blobs are built (profile, chunk limit).
    pub blob: BlobOptions,
    /// How long (seconds behind the last closed epoch) the next chunk number of a written group
    /// is remembered (default 3600). Older late data re-reads the store's epoch index instead.
    pub forget_after_secs: u64,
    /// Spill pending batches to disk while the store fails (see the [module docs](self)).
    /// `None` (default): pending batches are only kept in memory.
    pub spool: Option<SpoolConfig>,
    /// Bytes the encoders of closed groups bigger than 4 MiB may hold, kept for the next
    /// second's groups (default 128 MiB; see `crate::spares`). Memory beside what
    /// [`Aggregator::pending_bytes`] counts.
    pub max_spare_bytes: u64,
}

impl Default for AggregatorConfig {
    fn default() -> AggregatorConfig {
        AggregatorConfig {
            collector_id: None,
            grace_secs: 1,
            blob: BlobOptions::default(),
            forget_after_secs: 3600,
            spool: None,
            max_spare_bytes: 128 << 20,
        }
    }
}

/// What went wrong in the aggregator.
#[derive(Debug)]
#[non_exhaustive]
pub enum AggregateError {
    /// A bad [`AggregatorConfig`] (collector id, blob options).
    Config(String),
    /// A store operation failed; the work is kept and retried on the next flush.
    Store {
        /// What was being done, naming the group or key.
        what: String,
        /// The store's error.
        source: StoreError,
    },
    /// Events could not be encoded or keyed (they are dropped and counted as
    /// [`UNENCODABLE`]).
    Blob {
        /// What was being done, naming the group.
        what: String,
        /// The blob crate's error.
        source: BlobError,
    },
    /// The note log ([`Aggregator::set_note_log`]) failed; the batch is not indexed and stays
    /// pending.
    NoteLog {
        /// The group.
        what: String,
        /// The write-ahead log's error.
        source: WalError,
    },
    /// A spool operation failed or was refused (full); the batch stays in memory.
    Spool {
        /// What was being done.
        what: String,
        /// The spool's error.
        source: SpoolError,
    },
    /// Backpressure: the spool is full and too many batches are in memory, so no new group was
    /// closed by this flush (due groups stay open).
    Backpressure {
        /// Batches held in memory.
        memory_batches: usize,
        /// Bytes in the spool.
        spooled_bytes: u64,
    },
}

impl fmt::Display for AggregateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AggregateError::Config(reason) => write!(f, "aggregator config: {reason}"),
            AggregateError::Store { what, source } => write!(f, "{what}: {source}"),
            AggregateError::Blob { what, source } => write!(f, "{what}: {source}"),
            AggregateError::Spool { what, source } => write!(f, "{what}: {source}"),
            AggregateError::NoteLog { what, source } => write!(f, "logging the done note of {what}: {source}"),
            AggregateError::Backpressure { memory_batches, spooled_bytes } => write!(
                f,
                "backpressure: spool full ({spooled_bytes} bytes) and {memory_batches} batches in memory; no group closed"
            ),
        }
    }
}

impl std::error::Error for AggregateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AggregateError::Config(_) => None,
            AggregateError::Store { source, .. } => Some(source),
            AggregateError::Blob { source, .. } => Some(source),
            AggregateError::Spool { source, .. } => Some(source),
            AggregateError::NoteLog { source, .. } => Some(source),
            AggregateError::Backpressure { .. } => None,
        }
    }
}

impl AggregateError {
    /// Whether this is a store error that retrying later may fix ([`StoreError::is_transient`]:
    /// I/O, unavailable, timeout, unknown outcome; the batch then waits, or goes to the spool).
    pub fn is_transient(&self) -> bool {
        matches!(self, AggregateError::Store { source, .. } if source.is_transient())
    }
}

/// What one [`Aggregator::flush_due`] / [`Aggregator::flush_all`] call did.
#[derive(Debug, Default)]
pub struct FlushReport {
    /// Blobs (chunks) stored by this call.
    pub blobs: usize,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Events made readable by this call (their blobs stored and listed in the epoch index).
    pub events: u64,
    /// Of those, events that arrived late.
    pub late_events: u64,
    /// Events dropped because they could not be encoded (see [`UNENCODABLE`]).
    pub dropped_events: u64,
    /// Errors met. Store errors leave the work pending for the next call; nothing is lost.
    pub errors: Vec<AggregateError>,
    /// The batches whose blobs *and* epoch-index entries were stored by this call (readable
    /// from now on), in the order they were stored. Each batch is listed once, by the call that
    /// indexed it (its counts may still be pending); batches without chunks are not listed.
    pub stored: Vec<StoredBatch>,
}

/// What a flush stored (see [`FlushReport::stored`]); defined with the store, which substreams
/// also read it from.
pub use sluice_store::{StoredBatch, StoredChunk};

impl FlushReport {
    /// Whether the call met no error.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// (epoch, dc, type, subtype)
pub use crate::note::GroupKey;

/// Largest buffer the finished document's scratch space may keep between groups.
const MAX_SCRATCH_BYTES: usize = 4 << 20;

/// What a stream's last closed second held.
#[derive(Debug, Clone, Copy)]
struct LastSecond {
    events: usize,
    /// Its encoder's `memory_bytes()`.
    bytes: usize,
}

/// Streams whose last second [`Aggregator`] remembers (the map is cleared past it: a guess is
/// only a guess).
const MAX_REMEMBERED_STREAMS: usize = 4096;

/// The open groups, found by borrowed tags ([`GroupKeyRef`]).
type OpenGroups = hashbrown::HashMap<GroupKey, Group, rustc_hash::FxBuildHasher>;

/// A [`GroupKey`] borrowed from an event: hashes as the key does (the fields in order, a `&str`
/// as a `String`).
#[derive(Hash)]
struct GroupKeyRef<'a>(i64, &'a str, &'a str, &'a str);

impl GroupKeyRef<'_> {
    fn to_owned(&self) -> GroupKey {
        (
            self.0,
            self.1.to_string(),
            self.2.to_string(),
            self.3.to_string(),
        )
    }
}

impl hashbrown::Equivalent<GroupKey> for GroupKeyRef<'_> {
    fn equivalent(&self, key: &GroupKey) -> bool {
        self.0 == key.0 && self.1 == key.1 && self.2 == key.2 && self.3 == key.3
    }
}

impl From<&GroupKeyRef<'_>> for GroupKey {
    fn from(key: &GroupKeyRef<'_>) -> GroupKey {
        key.to_owned()
    }
}

struct Group {
    /// The events, encoded as they arrive: the body of the group's document grows event by
    /// event (a JSON event's fragment relinked with `push_fragment`, a value encoded with
    /// `push`), so no event is kept as a value tree (nor copied) until the flush. It also
    /// records each encoded event's WAL record (its origin), which the chunks' element index
    /// carries (default profile; see `sluice_blob::Origins`).
    doc: ArrayEncoder,
    /// Events added (encoded or not).
    events: usize,
    /// Of the encoded events, those that arrived late.
    late: u64,
    /// The first error met encoding an event (such events are not in `doc`).
    error: Option<BlobError>,
    /// WAL sequence numbers of the payloads these events came from, ascending without repeats
    /// whatever order they are added in ([`Group::hold`]): a sharded server adds a record routed
    /// from another shard after later records it parsed itself, and a done note names its
    /// records as ascending runs (out of order, a note would name the wrong records).
    seqs: Vec<u64>,
    /// Heap bytes its events added to the encoder (body and tables; counted in
    /// [`Aggregator::pending_bytes`]).
    bytes: u64,
}

impl Group {
    fn new(doc: ArrayEncoder) -> Group {
        Group {
            doc,
            events: 0,
            late: 0,
            error: None,
            seqs: Vec::new(),
            bytes: 0,
        }
    }

    /// Records that some of these events came from WAL record `seq`: true the first time (the
    /// caller then holds `seq` once for this group). Keeps `seqs` ascending: appending is the
    /// usual case, an older record (routed from another shard) is inserted in place.
    fn hold(&mut self, seq: u64) -> bool {
        match self.seqs.last() {
            None => {}
            Some(&last) if last < seq => {}
            Some(&last) if last == seq => return false,
            Some(_) => match self.seqs.binary_search(&seq) {
                Ok(_) => return false,
                Err(at) => {
                    self.seqs.insert(at, seq);
                    return true;
                }
            },
        }
        self.seqs.push(seq);
        true
    }

    /// Encodes `event` (from WAL record `seq`, 0 without one) into the document; an event that
    /// cannot be encoded is counted but left out, and so are its origin and lateness.
    fn push(&mut self, event: BodyRef<'_>, late: bool, seq: u64) {
        self.events += 1;
        let result = match event {
            // Made by the ingestor from a JSON object: always a hash.
            BodyRef::Fragment(f) => self.doc.push_fragment_ref(f).map_err(BlobError::from),
            BodyRef::Value(event) => match event.resolve() {
                Value::Hash(_) => self.doc.push(event).map_err(BlobError::from),
                _ => Err(BlobError::NotAnEvent {
                    index: self.events - 1,
                    found: kind_name(event),
                }),
            },
        };
        match result {
            Ok(()) => {
                self.late += u64::from(late);
                // Only encoded events have an origin: the runs stay aligned with the elements.
                self.doc.push_origin(seq);
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}

struct Chunk {
    /// The blob key; empty while the batch is unnumbered (see [`Batch::is_numbered`]).
    key: String,
    entry: String,
    bytes: Vec<u8>,
}

impl Chunk {
    /// A chunk whose number is not known yet (the store could not be read when its group
    /// closed): keyed by [`Aggregator::number`] before it is written.
    fn unnumbered(bytes: Vec<u8>) -> Chunk {
        Chunk {
            key: String::new(),
            entry: String::new(),
            bytes,
        }
    }
}

/// A closed group on its way to the store; `stored`, `indexed` and `counted` say how far it got.
struct Batch {
    key: GroupKey,
    chunks: Vec<Chunk>,
    stored: usize,
    indexed: bool,
    counted: bool,
    events: u64,
    counts: Counts,
    /// WAL sequence numbers held until this batch is fully written.
    seqs: Vec<u64>,
    /// Its done note went to the note log (before its index entries).
    noted: bool,
    /// The batch part of its counts token when it has no chunk to name it by (made unique per
    /// aggregator run; see [`counts_batch_id`]).
    counts_id: Option<String>,
}

impl Batch {
    /// Whether its chunks have their numbers (keys). A batch closed while the store could not
    /// be read is numbered just before its first write; a spooled one has its numbers recorded
    /// in the spool first ([`Spool::number_front`]), so a replay reuses them.
    fn is_numbered(&self) -> bool {
        self.chunks.iter().all(|c| !c.key.is_empty())
    }
}

/// Groups events per second and flushes them to a store. See the [module docs](self).
pub struct Aggregator {
    cfg: AggregatorConfig,
    store: Arc<dyn Store>,
    builder: BlobBuilder,
    /// Encoders of closed groups, ready for new ones.
    spare: Spares,
    /// Events and encoder bytes of each (dc, type, subtype)'s last closed second: a new
    /// group's encoder reserves the array header for as many (`ArrayEncoder::expect_len`), and
    /// is the spare that holds as many bytes. Forgotten past [`MAX_REMEMBERED_STREAMS`] streams.
    last_seconds: FxHashMap<(String, String, String), LastSecond>,
    /// The finished (compressed) document of the group being closed, kept between groups so
    /// that a steady flush allocates only each blob's exact bytes, not a growing buffer for
    /// every group (see `close_group`).
    doc_scratch: Vec<u8>,
    /// Open groups, by key: hashed, as every event looks its group up (a `BTreeMap` search
    /// compared strings at each level); flushes sort the groups they close.
    open: OpenGroups,
    open_events: usize,
    /// Sum of the open groups' `bytes`.
    open_bytes: u64,
    outbox: VecDeque<Batch>,
    /// Next chunk number of groups already written (or being written).
    next_chunk: BTreeMap<GroupKey, u32>,
    /// Highest epoch closed by `flush_due`.
    watermark: Option<i64>,
    /// WAL sequence number -> how many groups/batches still hold events of it.
    pending_seqs: BTreeMap<u64, u32>,
    /// The on-disk spool, when configured. Holds batches older than every one in `outbox`.
    spool: Option<Spool>,
    /// The spool's oldest batch, decoded, while it is being written (keeps its progress).
    spool_head: Option<Batch>,
    /// Groups of logged events that left memory (stored or spooled) since the last
    /// [`Aggregator::take_done`].
    done: Vec<DoneNote>,
    /// Where the notes of stored batches go before their index entries are written.
    note_log: Option<NoteLog>,
    /// Makes the counts tokens of chunkless batches unique: this run's start (ns) and a counter.
    run_id: u128,
    chunkless_batches: u64,
}

/// Appends a done note to the write-ahead log (see [`Aggregator::set_note_log`]); `Err` is the
/// log's error.
pub type NoteLog = Box<dyn FnMut(&DoneNote) -> Result<(), WalError> + Send>;

impl fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aggregator")
            .field("cfg", &self.cfg)
            .field("open_groups", &self.open.len())
            .field("open_events", &self.open_events)
            .field("spare_encoders", &self.spare.len())
            .field("spare_big_bytes", &self.spare.big_bytes())
            .field("pending_batches", &self.outbox.len())
            .field("watermark", &self.watermark)
            .field("spool", &self.spool)
            .finish()
    }
}

impl Aggregator {
    /// An aggregator writing to `store`. Errors: an invalid collector id or blob options.
    pub fn new(cfg: AggregatorConfig, store: Arc<dyn Store>) -> Result<Aggregator, AggregateError> {
        if let Some(id) = &cfg.collector_id {
            ChunkId::collector(id, 0).map_err(|e| AggregateError::Config(e.to_string()))?;
        }
        let builder = BlobBuilder::new(cfg.blob.clone())
            .map_err(|e| AggregateError::Config(e.to_string()))?;
        // Checks the options once: groups' encoders are made with the same ones.
        let first = ArrayEncoder::new(builder.encoder_options().clone())
            .map_err(|e| AggregateError::Config(e.to_string()))?;
        let spool = match &cfg.spool {
            Some(sc) => Some(
                Spool::open(&sc.dir, sc.max_bytes)
                    .map_err(|e| AggregateError::Config(format!("opening the spool: {e}")))?,
            ),
            None => None,
        };
        // Batches left in the spool by an earlier run hold no WAL sequence numbers: their done
        // notes keep the WAL replay from adding them again.
        let pending_seqs = BTreeMap::new();
        let mut spare = Spares::new(cfg.max_spare_bytes);
        spare.keep(first);
        Ok(Aggregator {
            cfg,
            store,
            builder,
            spare,
            last_seconds: FxHashMap::default(),
            doc_scratch: Vec::new(),
            open: OpenGroups::default(),
            open_events: 0,
            open_bytes: 0,
            outbox: VecDeque::new(),
            next_chunk: BTreeMap::new(),
            watermark: None,
            pending_seqs,
            spool,
            spool_head: None,
            done: Vec::new(),
            note_log: None,
            run_id: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            chunkless_batches: 0,
        })
    }

    /// Appends the done note of every stored batch of logged events through `log` just before
    /// the batch's epoch-index entries are written (and no longer returns it from
    /// [`take_done`](Self::take_done)). When `log` fails, the batch is not indexed and stays
    /// pending (retried on the next flush). Notes of spooled batches still come from
    /// `take_done`. See [`crate::exactly_once`].
    pub fn set_note_log(&mut self, log: NoteLog) {
        self.note_log = Some(log);
    }

    /// The entries of the store's epoch index of (epoch, dc), as stored (for
    /// [`crate::exactly_once`], which checks notes' proofs against them).
    pub fn epoch_index_entries(&self, epoch: i64, dc: &str) -> Result<Vec<String>, AggregateError> {
        Ok(self.stored_index(epoch, dc)?.into_iter().collect())
    }

    /// The store's epoch index of (epoch, dc), its errors named for this aggregator.
    fn stored_index(
        &self,
        epoch: i64,
        dc: &str,
    ) -> Result<std::collections::BTreeSet<String>, AggregateError> {
        self.store
            .get_epoch_index_latest(epoch, dc)
            .map_err(|source| AggregateError::Store {
                what: format!("reading the epoch index of {epoch}-{dc}"),
                source,
            })
    }

    /// The done notes recorded since the last call (see [`crate::exactly_once`]): append them to the
    /// WAL once the store writes they stand for are synced.
    pub fn take_done(&mut self) -> Vec<DoneNote> {
        std::mem::take(&mut self.done)
    }

    /// The settings in force.
    pub fn config(&self) -> &AggregatorConfig {
        &self.cfg
    }

    /// Events held in memory: in open groups plus in batches not yet fully written.
    pub fn pending_events(&self) -> u64 {
        self.open_events as u64
            + self
                .outbox
                .iter()
                .filter(|b| !b.indexed)
                .map(|b| b.events)
                .sum::<u64>()
    }

    /// Bytes held by kept encoders bigger than 4 MiB, waiting for the next second's groups
    /// (memory beside [`pending_bytes`](Self::pending_bytes), at most `max_spare_bytes`).
    pub fn spare_bytes(&self) -> u64 {
        self.spare.big_bytes()
    }

    /// Bytes held in memory for pending events: what open groups' events added to their
    /// encoders (body and de-duplication tables, by capacity) plus the blobs of batches not yet
    /// fully written. A caller bounds memory by
    /// refusing input while this exceeds its budget (the server's `max_pending_bytes`).
    pub fn pending_bytes(&self) -> u64 {
        self.open_bytes
            + self
                .outbox
                .iter()
                .filter(|b| !b.indexed)
                .flat_map(|b| &b.chunks[b.stored..])
                .map(|c| c.bytes.len() as u64)
                .sum::<u64>()
    }

    /// Closed groups whose writing is not finished (after store errors): in memory plus spooled.
    pub fn pending_batches(&self) -> usize {
        self.outbox.len() + self.spooled_batches()
    }

    /// Pending batches held in memory (not counting the spool).
    pub fn memory_batches(&self) -> usize {
        self.outbox.len()
    }

    /// Batches waiting in the spool (0 without a spool).
    pub fn spooled_batches(&self) -> usize {
        self.spool.as_ref().map_or(0, Spool::batches)
    }

    /// Bytes of the batches waiting in the spool (0 without a spool).
    pub fn spooled_bytes(&self) -> u64 {
        self.spool.as_ref().map_or(0, Spool::bytes)
    }

    /// Events in the batches waiting in the spool (0 without a spool).
    pub fn spooled_events(&self) -> u64 {
        self.spool.as_ref().map_or(0, Spool::events)
    }

    /// The group and WAL records of every batch in the spool (see [`Spool::groups`]): a WAL
    /// replay skips those records' events of those groups.
    pub fn spooled_groups(&self) -> Vec<(GroupKey, Vec<u64>)> {
        self.spool.as_ref().map_or_else(Vec::new, |sp| {
            sp.groups()
                .map(|(g, seqs)| (g.clone(), seqs.to_vec()))
                .collect()
        })
    }

    /// Adds, at most once per token, the completeness counts that stored batches' done notes
    /// carry (`(group, token, counts)`, the token being the note's proof entry): after a crash
    /// between a batch's index write and its counts write, a replay adds the counts the batch
    /// never got, and adds nothing for the batches that got them. One result per item.
    pub fn restore_counts(
        &self,
        items: &[(&GroupKey, &str, &Counts)],
    ) -> Vec<Result<(), AggregateError>> {
        let writer = self.cfg.collector_id.as_deref().unwrap_or("");
        let adds: Vec<CountsAdd<'_>> = items
            .iter()
            .map(|(g, token, counts)| CountsAdd {
                write: CountsWrite::new(writer, token),
                epoch: g.0,
                dc: &g.1,
                event_type: &g.2,
                subtype: &g.3,
                counts,
            })
            .collect();
        let mut results = self.store.add_counts_once_many(&adds).into_iter();
        items
            .iter()
            .map(|(g, _, _)| match results.next() {
                Some(Ok(())) => Ok(()),
                Some(Err(source)) => Err(AggregateError::Store {
                    what: format!("restoring the counts of {}", group_name(g)),
                    source,
                }),
                None => Err(AggregateError::Store {
                    what: format!("restoring the counts of {}", group_name(g)),
                    source: StoreError::Unavailable {
                        reason: "add_counts_once_many answered fewer items".into(),
                    },
                }),
            })
            .collect()
    }

    /// Whether flushes close no new group because the spool is full and more than
    /// `memory_batches` batches are in memory (see the [module docs](self)). Never true without a
    /// spool.
    pub fn is_backpressured(&self) -> bool {
        self.cfg
            .spool
            .as_ref()
            .is_some_and(|sc| self.outbox.len() > sc.memory_batches)
    }

    /// Files `events` into their (epoch, dc, type, subtype) groups. An event is accepted and
    /// marked late when its epoch's flush time has passed: `epoch + grace_secs < now`, or its
    /// epoch was closed by an earlier `flush_due`, or its group was already written (e.g. by
    /// `flush_all`).
    pub fn add(&mut self, events: Vec<ParsedEvent>, now: i64) {
        self.add_inner(events.iter().map(ParsedEvent::as_event_ref), now, None);
    }

    /// [`add`](Self::add) for events of a payload logged in the write-ahead log under `wal_seq`:
    /// the sequence number is then held (see [`min_pending_seq`](Self::min_pending_seq)) until
    /// every one of these events has been written to the store.
    pub fn add_logged(&mut self, events: Vec<ParsedEvent>, now: i64, wal_seq: u64) {
        self.add_inner(
            events.iter().map(ParsedEvent::as_event_ref),
            now,
            Some(wal_seq),
        );
    }

    /// [`add`](Self::add) or, with `wal_seq`, [`add_logged`](Self::add_logged) of a batch's
    /// events (handed over by another thread; see [`crate::batch`]).
    pub fn add_batch(&mut self, batch: &EventBatch, now: i64, wal_seq: Option<u64>) {
        self.add_inner(batch.iter(), now, wal_seq);
    }

    /// The smallest WAL sequence number (given to [`add_logged`](Self::add_logged)) some of whose
    /// events are not yet fully written to the store (blobs, index and counts), or `None`. Every
    /// logged payload with a smaller number is stored, so a caller may checkpoint the log up to
    /// `min_pending_seq() - 1` (or up to its last sequence number when `None`).
    pub fn min_pending_seq(&self) -> Option<u64> {
        self.pending_seqs.first_key_value().map(|(&s, _)| s)
    }
}

mod group;
mod phases;

use group::make_chunk;

/// A word for the kind of a value, for error messages (as the blob builder words it).
fn kind_name(v: &Value) -> &'static str {
    match v.resolve() {
        Value::Undef => "undef",
        Value::Bool(_) => "a boolean",
        Value::Int(_) | Value::UInt(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Binary(_) | Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Hash(_) => "a map",
        Value::Ref(_) => "a reference",
        Value::Object(_) => "an object",
        Value::Regexp(_) => "a regexp",
        Value::Shared(_) => "a shared value",
    }
}

fn group_name(key: &GroupKey) -> String {
    format!("{}:{}:{}:{}", key.0, key.1, key.2, key.3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn a_borrowed_group_key_hashes_as_the_key() {
        let hasher = rustc_hash::FxBuildHasher;
        for (e, d, t, s) in [
            (0, "", "", ""),
            (17, "ams1", "WEB", "www"),
            (-3, "a", "bc", ""),
        ] {
            let owned: GroupKey = (e, d.into(), t.into(), s.into());
            let borrowed = GroupKeyRef(e, d, t, s);
            assert_eq!(hasher.hash_one(&owned), hasher.hash_one(&borrowed));
            assert!(hashbrown::Equivalent::equivalent(&borrowed, &owned));
            assert_eq!(GroupKey::from(&borrowed), owned);
        }
        // Tags that concatenate the same stay apart.
        let owned: GroupKey = (1, "ab".into(), "c".into(), String::new());
        assert_ne!(
            hasher.hash_one(&owned),
            hasher.hash_one(GroupKeyRef(1, "a", "bc", ""))
        );
    }
}
