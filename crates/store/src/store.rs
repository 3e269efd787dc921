//! The [`Store`] trait and the small value types it speaks.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::{Result, StoreError};

/// Which family of blobs a key belongs to. Each namespace is its own key space: the same key may
/// exist in `Events` and in `Substream("x")` with different bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespace {
    /// `events`: the full event blobs, keyed `<epoch>:<dc>:<type>:<subtype>:<chunk>`.
    Events,
    /// `substreams/<name>`: the output of a substream, keyed like the event blob it came from.
    Substream(String),
}

impl Namespace {
    /// The namespace's name as stored and as the Riak-style HTTP API shows it: `events` or
    /// `substreams/<name>`.
    pub fn as_str(&self) -> Cow<'_, str> {
        match self {
            Namespace::Events => Cow::Borrowed("events"),
            Namespace::Substream(name) => Cow::Owned(format!("substreams/{name}")),
        }
    }

    /// Parses the form produced by [`as_str`](Namespace::as_str).
    pub fn parse(s: &str) -> Result<Namespace> {
        let ns = if s == "events" {
            Namespace::Events
        } else if let Some(name) = s.strip_prefix("substreams/") {
            Namespace::Substream(name.to_owned())
        } else {
            return Err(StoreError::invalid(format!("unknown namespace {s:?}")));
        };
        ns.validate()?;
        Ok(ns)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Namespace::Substream(name) = self {
            if name.is_empty() {
                return Err(StoreError::invalid("empty substream name"));
            }
            check_text("substream name", name, MAX_SUBSTREAM_NAME_LEN)?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// A blob's address inside a namespace: the epoch (second) it belongs to and its key.
///
/// The epoch is passed explicitly (not parsed out of the key) because it decides where the blob
/// lives: the embedded store's time partition, a Cassandra partition and TTL. A blob's identity is
/// `(namespace, epoch, key)`; a reader must give the same epoch the writer gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobKey<'a> {
    /// The second (UTC Unix time) the blob's events belong to.
    pub epoch: i64,
    /// The key, e.g. `1700000000:ams:WEB::0`; opaque to the store.
    pub key: &'a str,
}

impl<'a> BlobKey<'a> {
    /// A key for `epoch`.
    pub fn new(epoch: i64, key: &'a str) -> Self {
        BlobKey { epoch, key }
    }
}

/// What [`Store::put_blob`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The blob was new and is now stored.
    Written,
    /// A blob with this key and *identical* bytes was already there; nothing was written. (Puts
    /// are idempotent, so a replay from the spool after an unclear failure is harmless.)
    AlreadyPresent,
}

/// Completeness counters of one (epoch, dc, type, subtype). Merged by addition
/// ([`Counts::merge`]), so every collector adds what it saw without reading first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Events stored.
    pub stored: u64,
    /// Of those, events that arrived after their epoch had been flushed (stored as a further
    /// chunk).
    pub late: u64,
    /// Events dropped, per reason (`malformed`, `oversized`, `shed`, ...).
    pub dropped: BTreeMap<String, u64>,
    /// UDP datagrams the kernel dropped before Sluice read them. They cannot be attributed to a
    /// type: collectors record them under an empty type and subtype.
    pub kernel_dropped: u64,
}

impl Counts {
    /// Adds `other` into `self` (saturating).
    pub fn merge(&mut self, other: &Counts) {
        self.stored = self.stored.saturating_add(other.stored);
        self.late = self.late.saturating_add(other.late);
        self.kernel_dropped = self.kernel_dropped.saturating_add(other.kernel_dropped);
        for (reason, n) in &other.dropped {
            let slot = self.dropped.entry(reason.clone()).or_insert(0);
            *slot = slot.saturating_add(*n);
        }
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        self.stored == 0
            && self.late == 0
            && self.kernel_dropped == 0
            && self.dropped.values().all(|n| *n == 0)
    }
}

/// `(type, subtype)`: the key of an epoch's counts.
pub type TypeSubtype = (String, String);

/// Who adds a set of counts, so that a retried add is applied once
/// ([`Store::add_counts_once`]).
///
/// `writer` names the writing process or collector (stable across its restarts); `batch` names
/// the unit of work within that writer and `(epoch, dc)`, and must never be reused for other
/// counts. The collector uses its collector id and the epoch-index entry of the batch's first
/// chunk (unique because chunks are write-once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CountsWrite<'a> {
    /// The writer, e.g. a collector id (may be empty for a sole writer).
    pub writer: &'a str,
    /// The batch within the writer and `(epoch, dc)`; not empty.
    pub batch: &'a str,
}

impl<'a> CountsWrite<'a> {
    /// The token of `batch` written by `writer`.
    pub fn new(writer: &'a str, batch: &'a str) -> Self {
        CountsWrite { writer, batch }
    }
}

/// One [`Store::add_counts_once`] call, for [`Store::add_counts_once_many`].
#[derive(Clone, Copy, Debug)]
pub struct CountsAdd<'a> {
    /// The at-most-once token.
    pub write: CountsWrite<'a>,
    /// The second.
    pub epoch: i64,
    /// The datacenter.
    pub dc: &'a str,
    /// The event type.
    pub event_type: &'a str,
    /// The event subtype.
    pub subtype: &'a str,
    /// The counts to add.
    pub counts: &'a Counts,
}

/// How long data is kept and how coarse expiry is.
///
/// Data is grouped in partitions of `partition_secs` seconds of epochs (aligned to multiples of
/// it, UTC). A partition is dropped whole by [`Store::expire`] once *all* of its epochs are older
/// than `period_secs`, so data lives between `period_secs` and `period_secs + partition_secs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// How long data is kept, in seconds. Default: 10 days.
    pub period_secs: i64,
    /// The width of a time partition, in seconds. Default: one hour.
    pub partition_secs: i64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            period_secs: 10 * 86_400,
            partition_secs: 3_600,
        }
    }
}

impl Retention {
    /// A retention of `period_secs` with hourly partitions.
    pub fn new(period_secs: i64) -> Self {
        Retention {
            period_secs,
            ..Retention::default()
        }
    }

    /// The start (first epoch) of the partition holding `epoch`.
    pub fn partition_of(&self, epoch: i64) -> i64 {
        epoch.div_euclid(self.partition_secs) * self.partition_secs
    }

    /// Whether the partition starting at `start` is wholly expired at time `now`.
    pub fn is_expired(&self, start: i64, now: i64) -> bool {
        start.saturating_add(self.partition_secs) <= now.saturating_sub(self.period_secs)
    }

    /// Refuses a retention with `partition_secs <= 0` or `period_secs < 0`.
    pub fn validate(&self) -> Result<()> {
        if self.partition_secs <= 0 || self.period_secs < 0 {
            return Err(StoreError::invalid(format!(
                "retention needs partition_secs > 0 and period_secs >= 0, got {self:?}"
            )));
        }
        Ok(())
    }
}

/// What [`Store::expire`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// Time partitions removed.
    pub partitions_dropped: usize,
    /// Bytes of files removed (0 for backends that do not know, e.g. TTL-based ones).
    pub bytes_freed: u64,
    /// Time partitions rewritten without the groups past their own retention
    /// ([`crate::TypeRetention`]).
    pub partitions_purged: usize,
}

/// What kind of damage a [`Damage`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DamageKind {
    /// Bytes in the middle of a log that hold no valid record: skipped, the records after them
    /// are read. Kept in the file (a repair writes a clean copy).
    Skipped,
    /// An incomplete record at the end of a log (a crash's partial write). A writer cuts it when
    /// it loads the log; a read-only store leaves it and reports it.
    TornTail,
    /// A record whose header is valid but whose value fails its checksum (found by a full check;
    /// a read of that blob gives [`StoreError::Corrupted`]).
    BadValue,
    /// A blob record whose header fails its checksum but whose value proves itself (its own
    /// `=chk` SHA-1 holds) and whose lengths lead to the next valid record or the end of the
    /// log: nothing is lost, the blob is read as stored. The range is the part the failed
    /// checksum covers (header, namespace, key); a repair rewrites it.
    Salvaged,
}

/// A damaged range of stored data: what reads skip, reported instead of silently lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Where: the file (embedded store) or other location holding the range.
    pub location: String,
    /// First damaged byte.
    pub offset: u64,
    /// Damaged bytes.
    pub len: u64,
    /// What kind of damage.
    pub kind: DamageKind,
    /// What was lost, in words.
    pub what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes {}..{} ({} bytes): {}",
            self.location,
            self.offset,
            self.offset.saturating_add(self.len),
            self.len,
            self.what
        )
    }
}

/// Damage found since a store was opened (for metrics). Counted when a partition is loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DamageStats {
    /// Damaged ranges skipped in the middle of logs.
    pub damaged_ranges: u64,
    /// Bytes in those ranges.
    pub damaged_bytes: u64,
    /// Torn tails found (cut by a writer, ignored by a read-only store).
    pub torn_tails: u64,
    /// Bytes in those tails.
    pub torn_tail_bytes: u64,
    /// Epoch index entries rebuilt from blob keys after index records were lost.
    pub index_entries_rebuilt: u64,
    /// Blob records whose damaged header was salvaged (value proven by its SHA-1; not lost).
    pub salvaged_records: u64,
}

/// How much a store holds (for metrics), as far as the backend can tell cheaply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreUsage {
    /// Bytes of the stored data on disk (logs, catalog).
    pub bytes: u64,
    /// Time partitions held.
    pub partitions: u64,
    /// First second of the oldest partition held (`None`: none).
    pub oldest_epoch: Option<i64>,
}

/// The storage interface of Sluice: namespaced, write-once blobs; per-epoch metadata that merges;
/// range listing by epoch; expiry by time.
///
/// Object-safe (`Box<dyn Store>` / `Arc<dyn Store>`) and synchronous: callers run it from blocking
/// threads. Implementations are internally synchronised; every method may be called concurrently.
///
/// # Contract (the suite in [`testkit`](crate::testkit), feature `testkit`, checks it for every
/// backend: a backend crate calls `sluice_store::store_contract_tests!` in one of its tests)
/// - Blobs are write-once: a second `put_blob` of the same `(namespace, epoch, key)` with identical
///   bytes returns [`PutOutcome::AlreadyPresent`], with different bytes [`StoreError::Exists`]. A
///   stored blob is never changed until it expires. [`put_blobs`](Store::put_blobs) is the same
///   per item, in order, up to the first item that fails (no all-or-nothing, no later item
///   stored after a failed one).
/// - The epoch index of `(epoch, dc)` is a *set* of entry strings (`type:subtype:chunk`);
///   [`add_to_epoch_index`](Store::add_to_epoch_index) is a set union, so concurrent writers never
///   lose each other's entries. The pipe-separated form is built by the caller.
/// - Counts are merged by addition. [`add_counts_once`](Store::add_counts_once) adds the counts
///   of one [`CountsWrite`] token at most once per `(epoch, dc)`, however often it is retried
///   (and across reopens), so a write with an unknown outcome can be retried.
/// - Every write is idempotent under retry, so [`StoreError::Timeout`] and
///   [`StoreError::UnknownOutcome`] are settled by retrying the same call.
/// - Durability: when a write method returns `Ok`, the write survives a crash of the calling
///   process. Whether it also survives a power loss before [`flush`](Store::flush) depends on the
///   backend's configuration (see [`EmbeddedStore`](crate::EmbeddedStore)'s `Durability`).
///   Callers write data before the metadata that lists it.
pub trait Store: Send + Sync {
    /// Stores `bytes` under `key` in `ns`. Never overwrites: see the contract above.
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome>;

    /// Stores many blobs of `ns`, in order, each as [`put_blob`](Store::put_blob) would, and
    /// **stops at the first item that fails**: the result holds one entry per item attempted,
    /// the last one being the error (if any); the items after it were not attempted. (A writer
    /// numbers chunks in order and renumbers the unstored ones after a conflict: a later chunk
    /// stored past a failed one would be left orphaned under its old number.) Backends may
    /// batch the writes (the embedded store appends a partition's blobs under one lock); the
    /// default puts one after another.
    fn put_blobs(&self, ns: &Namespace, items: &[(BlobKey<'_>, &[u8])]) -> Vec<Result<PutOutcome>> {
        let mut out = Vec::with_capacity(items.len());
        for (key, bytes) in items {
            let r = self.put_blob(ns, *key, bytes);
            let failed = r.is_err();
            out.push(r);
            if failed {
                break;
            }
        }
        out
    }

    /// Stores several *independent* lists of blobs of `ns` (e.g. the batches of one collector
    /// flush): each list as [`put_blobs`](Store::put_blobs) (in order, stopping at its first
    /// failure), the lists in any order or concurrently; one result list per input list, in
    /// input order. A failure in one list does not stop the others. Backends with a network
    /// round trip per write overlap the lists (Cassandra, bounded by its in-flight limit); the
    /// default runs them one after another.
    fn put_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        lists.iter().map(|l| self.put_blobs(ns, l)).collect()
    }

    /// [`put_blob_lists`](Store::put_blob_lists) for blobs whose keys the caller *owns*: it
    /// vouches that no bytes other than these are ever put under any of the keys, by anyone.
    /// The collector can (see `sluice_collector::aggregate`): it numbers a batch's chunks after
    /// what [`get_epoch_index_latest`](Store::get_epoch_index_latest) lists for its collector id
    /// and its own counter, writes the blobs before it lists them, and retries a put whose
    /// outcome is unknown with the same key and bytes (kept in memory or in the spool). So the
    /// write-once check may be skipped: a backend where it costs a round trip (Cassandra's
    /// lightweight transaction) writes plainly, and then cannot tell a first write from a
    /// rewrite: it answers [`PutOutcome::Written`] for both. Results have the shape of
    /// `put_blob_lists` (per list, up to its first failure). A caller that breaks the promise
    /// (two writers under one collector id) may overwrite a blob. Default: `put_blob_lists`,
    /// which checks.
    fn put_owned_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        self.put_blob_lists(ns, lists)
    }

    /// For data locality: which of `keys` (blobs of `ns`) have a replica on `node` (`HOST` or
    /// `HOST:PORT` as the backend addresses its nodes), one answer per key, from the backend's
    /// own view of placement (no request per key). A worker started beside a node takes only
    /// its keys. Default: every key (a backend on one machine holds every key locally).
    fn keys_on_node(&self, node: &str, ns: &Namespace, keys: &[BlobKey<'_>]) -> Result<Vec<bool>> {
        let _ = (node, ns);
        Ok(vec![true; keys.len()])
    }

    /// Reads a blob; `Ok(None)` if there is none. A blob whose stored checksum fails gives
    /// [`StoreError::Corrupted`], never wrong bytes.
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>>;

    /// Whether every blob this store returns was checked against a checksum it computed from
    /// the same bytes at write time (a damaged value is an error, never returned): a reader may
    /// then skip the blob's own SHA-1 (see `sluice_reader::ReadOptions::verify_sha1`). Default: no.
    fn checks_each_read(&self) -> bool {
        false
    }

    /// Reads many blobs, results in the order of `keys`. Backends may fetch in parallel; the
    /// default fetches one after another.
    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get_blob(ns, *k)).collect()
    }

    /// Adds `entries` (each `type:subtype:chunk`, without `|`) to the index of `(epoch, dc)`.
    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()>;

    /// The entries of `(epoch, dc)`, sorted; empty if there are none.
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>>;

    /// [`get_epoch_index`](Store::get_epoch_index) that sees every add that returned `Ok`, from
    /// any process: what a writer numbers chunks from (and checks proofs against). A replicated
    /// backend whose plain reads may answer from a replica that missed a write reads here at a
    /// level that overlaps its writes (Cassandra: `read_cl` raised to overlap `write_cl`).
    /// Default: `get_epoch_index` (one copy of the data: always the latest).
    fn get_epoch_index_latest(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        self.get_epoch_index(epoch, dc)
    }

    /// Several independent [`add_to_epoch_index`](Store::add_to_epoch_index) calls, each item
    /// `(epoch, dc, entries)`; one result per item, in order. Backends may run them
    /// concurrently; the default runs them one after another.
    fn add_to_epoch_indexes(&self, items: &[(i64, &str, Vec<&str>)]) -> Vec<Result<()>> {
        items
            .iter()
            .map(|(epoch, dc, entries)| self.add_to_epoch_index(*epoch, dc, entries))
            .collect()
    }

    /// Adds `entries` to the index of `(epoch, dc)` in `ns`: for [`Namespace::Events`] the epoch
    /// index itself; for a substream, the list of its results (keyed like the event blobs they
    /// came from). Same set-union contract as [`add_to_epoch_index`](Store::add_to_epoch_index).
    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()>;

    /// The entries of `(epoch, dc)` in `ns`'s index, sorted; empty if there are none.
    fn get_namespace_index(&self, ns: &Namespace, epoch: i64, dc: &str)
        -> Result<BTreeSet<String>>;

    /// Sets (`Some`) or deletes (`None`) the small named record `name` of `kind` (the substream
    /// registry lives here): visible to every process on the store, kept across restarts and
    /// never expired. Last write wins; deleting a missing record is `Ok`.
    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()>;

    /// Every record of `kind`, by name.
    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>>;

    /// Adds `counts` to the counters of `(epoch, dc, event_type, subtype)`.
    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()>;

    /// [`add_counts`](Store::add_counts), applied at most once per `write` token and
    /// `(epoch, dc)`: a retry of the same token (after an error, an unknown outcome, a reopen)
    /// returns `Ok` and adds nothing. The token is recorded atomically with the counts.
    ///
    /// The default refuses ([`StoreError::InvalidArgument`]): a backend must implement it (the
    /// contract suite checks it); falling back to a plain add would silently count twice.
    fn add_counts_once(
        &self,
        write: CountsWrite<'_>,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        let _ = (write, epoch, dc, event_type, subtype, counts);
        Err(StoreError::invalid(
            "this store does not implement add_counts_once",
        ))
    }

    /// Several independent [`add_counts_once`](Store::add_counts_once) calls; one result per
    /// item, in order. Backends may run them concurrently; the default runs them one after
    /// another.
    fn add_counts_once_many(&self, items: &[CountsAdd<'_>]) -> Vec<Result<()>> {
        items
            .iter()
            .map(|a| {
                self.add_counts_once(a.write, a.epoch, a.dc, a.event_type, a.subtype, a.counts)
            })
            .collect()
    }

    /// All counters of `(epoch, dc)`, by `(type, subtype)`; empty if there are none.
    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>>;

    /// The `(epoch, dc)` pairs with a non-empty epoch index and `from <= epoch < to`, optionally
    /// only those of one dc, ordered by epoch then dc.
    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>>;

    /// Drops every time partition that is wholly older than the retention period at `now`
    /// (Unix seconds, passed in so tests can use a fake clock). See [`Retention`].
    fn expire(&self, now: i64) -> Result<ExpireReport>;

    /// Makes every write that returned before this call durable against power loss.
    fn flush(&self) -> Result<()>;

    /// The retention this store applies.
    fn retention(&self) -> Retention;

    /// The damage in the stored data of the time partitions that overlap `from <= epoch < to`
    /// (loading them if needed): ranges reads skip. Default: none (a backend that cannot tell).
    fn damage(&self, _from: i64, _to: i64) -> Result<Vec<Damage>> {
        Ok(Vec::new())
    }

    /// Damage found since open, for metrics. Default: none.
    fn damage_stats(&self) -> DamageStats {
        DamageStats::default()
    }

    /// How much the store holds, for metrics; `None` when the backend cannot tell cheaply
    /// (the default). Reads only file sizes or similar metadata, never the data.
    fn usage(&self) -> Option<StoreUsage> {
        None
    }
}

/// Longest substream name, dc, or event type/subtype accepted.
pub(crate) const MAX_NAME_LEN: usize = 255;
/// Longest substream name accepted (`substreams/<name>` must fit in 255 bytes).
pub(crate) const MAX_SUBSTREAM_NAME_LEN: usize = 200;
/// Longest blob key or index entry accepted.
pub(crate) const MAX_KEY_LEN: usize = 1024;
/// Largest blob accepted (chunks are ~500 KB; this only guards the record format).
pub const MAX_BLOB_LEN: usize = 256 << 20;

/// Refuses `s` if longer than `max` bytes or holding a NUL byte (`what` names it in the error).
pub fn check_text(what: &str, s: &str, max: usize) -> Result<()> {
    if s.len() > max {
        return Err(StoreError::invalid(format!(
            "{what} longer than {max} bytes"
        )));
    }
    if s.as_bytes().contains(&0) {
        return Err(StoreError::invalid(format!("{what} contains a NUL byte")));
    }
    Ok(())
}

/// Largest value of one catalog record: registry entries are small; this guards the formats.
pub(crate) const MAX_CATALOG_VALUE: usize = 1 << 20;

/// The rule for a [`Store::put_catalog`] call, shared by every backend.
/// The argument checks of [`Store::put_catalog`] (kind, name, value size).
pub fn check_catalog(kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
    if kind.is_empty() || name.is_empty() {
        return Err(StoreError::invalid("empty catalog kind or name"));
    }
    check_text("catalog kind", kind, MAX_NAME_LEN)?;
    check_text("catalog name", name, MAX_NAME_LEN)?;
    match value {
        Some(v) if v.len() > MAX_CATALOG_VALUE => Err(StoreError::invalid(format!(
            "catalog value of {} bytes, more than {MAX_CATALOG_VALUE}",
            v.len()
        ))),
        _ => Ok(()),
    }
}

/// The argument checks of [`Store::put_blob`] every backend applies (key, namespace, size).
pub fn check_put(ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<()> {
    check_key(ns, key)?;
    if bytes.len() > MAX_BLOB_LEN {
        return Err(StoreError::invalid(format!(
            "blob {} is {} bytes, more than {MAX_BLOB_LEN}",
            key.key,
            bytes.len()
        )));
    }
    Ok(())
}

/// The argument checks of a blob key and its namespace.
pub fn check_key(ns: &Namespace, key: BlobKey<'_>) -> Result<()> {
    ns.validate()?;
    if key.key.is_empty() {
        return Err(StoreError::invalid("empty blob key"));
    }
    check_text("blob key", key.key, MAX_KEY_LEN)
}

/// The argument checks of [`Store::add_to_epoch_index`] (dc, entries without `|`).
pub fn check_entries(dc: &str, entries: &[&str]) -> Result<()> {
    check_text("dc", dc, MAX_NAME_LEN)?;
    for e in entries {
        if e.is_empty() || e.contains('|') {
            return Err(StoreError::invalid(format!(
                "epoch index entry {e:?} is empty or has a '|'"
            )));
        }
        check_text("epoch index entry", e, MAX_KEY_LEN)?;
    }
    Ok(())
}

/// The argument checks of a [`CountsWrite`] token.
pub fn check_counts_write(write: CountsWrite<'_>) -> Result<()> {
    check_text("counts writer", write.writer, MAX_NAME_LEN)?;
    if write.batch.is_empty() {
        return Err(StoreError::invalid("empty counts batch id"));
    }
    check_text("counts batch id", write.batch, MAX_KEY_LEN)
}

/// The argument checks of [`Store::add_counts`] (dc, type, subtype, drop reasons).
pub fn check_counts(dc: &str, event_type: &str, subtype: &str, counts: &Counts) -> Result<()> {
    check_text("dc", dc, MAX_NAME_LEN)?;
    check_text("type", event_type, MAX_NAME_LEN)?;
    check_text("subtype", subtype, MAX_NAME_LEN)?;
    for reason in counts.dropped.keys() {
        check_text("drop reason", reason, MAX_NAME_LEN)?;
    }
    Ok(())
}

/// A shared store is a store (so `Arc<dyn Store>` and `Arc<EmbeddedStore>` can be wrapped and
/// passed where a `Store` is expected).
impl<S: Store + ?Sized> Store for Arc<S> {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        (**self).put_blob(ns, key, bytes)
    }
    fn put_blobs(&self, ns: &Namespace, items: &[(BlobKey<'_>, &[u8])]) -> Vec<Result<PutOutcome>> {
        (**self).put_blobs(ns, items)
    }
    fn put_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        (**self).put_blob_lists(ns, lists)
    }
    fn put_owned_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        (**self).put_owned_blob_lists(ns, lists)
    }
    fn add_to_epoch_indexes(&self, items: &[(i64, &str, Vec<&str>)]) -> Vec<Result<()>> {
        (**self).add_to_epoch_indexes(items)
    }
    fn keys_on_node(&self, node: &str, ns: &Namespace, keys: &[BlobKey<'_>]) -> Result<Vec<bool>> {
        (**self).keys_on_node(node, ns, keys)
    }
    fn add_counts_once_many(&self, items: &[CountsAdd<'_>]) -> Vec<Result<()>> {
        (**self).add_counts_once_many(items)
    }
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        (**self).get_blob(ns, key)
    }
    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        (**self).get_blobs(ns, keys)
    }
    fn checks_each_read(&self) -> bool {
        (**self).checks_each_read()
    }
    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        (**self).add_to_epoch_index(epoch, dc, entries)
    }
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        (**self).get_epoch_index(epoch, dc)
    }
    fn get_epoch_index_latest(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        (**self).get_epoch_index_latest(epoch, dc)
    }
    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        (**self).add_to_namespace_index(ns, epoch, dc, entries)
    }
    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        (**self).get_namespace_index(ns, epoch, dc)
    }
    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        (**self).put_catalog(kind, name, value)
    }
    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        (**self).get_catalog(kind)
    }
    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        (**self).add_counts(epoch, dc, event_type, subtype, counts)
    }
    fn add_counts_once(
        &self,
        write: CountsWrite<'_>,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        (**self).add_counts_once(write, epoch, dc, event_type, subtype, counts)
    }
    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        (**self).get_counts(epoch, dc)
    }
    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        (**self).list_epochs(dc, from, to)
    }
    fn expire(&self, now: i64) -> Result<ExpireReport> {
        (**self).expire(now)
    }
    fn flush(&self) -> Result<()> {
        (**self).flush()
    }
    fn retention(&self) -> Retention {
        (**self).retention()
    }
    fn damage(&self, from: i64, to: i64) -> Result<Vec<Damage>> {
        (**self).damage(from, to)
    }
    fn damage_stats(&self) -> DamageStats {
        (**self).damage_stats()
    }
    fn usage(&self) -> Option<StoreUsage> {
        (**self).usage()
    }
}

/// The read half of a [`Store`]: what a reader (range reads, the tail) needs, and all a read-only
/// view has to implement (it has no write methods to refuse).
///
/// Every [`Store`] is a `ReadStore` (blanket impl forwarding to the store's own methods, same
/// contract). A type that only reads implements this trait instead of faking a store; generic
/// readers take `T: ReadStore + ?Sized` and so accept `EmbeddedStore`, `dyn Store`,
/// `Arc<dyn Store>` and such views alike.
pub trait ReadStore: Send + Sync {
    /// See [`Store::get_blob`].
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>>;

    /// See [`Store::get_blobs`]. The default fetches one after another.
    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get_blob(ns, *k)).collect()
    }

    /// See [`Store::checks_each_read`]. Default: no.
    fn checks_each_read(&self) -> bool {
        false
    }

    /// See [`Store::get_epoch_index`].
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>>;

    /// See [`Store::get_namespace_index`].
    fn get_namespace_index(&self, ns: &Namespace, epoch: i64, dc: &str)
        -> Result<BTreeSet<String>>;

    /// See [`Store::get_catalog`].
    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>>;

    /// See [`Store::get_counts`].
    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>>;

    /// See [`Store::list_epochs`].
    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>>;

    /// See [`Store::retention`].
    fn retention(&self) -> Retention;

    /// See [`Store::damage`]. Default: none.
    fn damage(&self, _from: i64, _to: i64) -> Result<Vec<Damage>> {
        Ok(Vec::new())
    }

    /// See [`Store::damage_stats`]. Default: none.
    fn damage_stats(&self) -> DamageStats {
        DamageStats::default()
    }
}

impl<S: Store + ?Sized> ReadStore for S {
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        Store::get_blob(self, ns, key)
    }
    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        Store::get_blobs(self, ns, keys)
    }
    fn checks_each_read(&self) -> bool {
        Store::checks_each_read(self)
    }
    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        Store::get_epoch_index(self, epoch, dc)
    }
    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        Store::get_namespace_index(self, ns, epoch, dc)
    }
    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        Store::get_catalog(self, kind)
    }
    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        Store::get_counts(self, epoch, dc)
    }
    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        Store::list_epochs(self, dc, from, to)
    }
    fn retention(&self) -> Retention {
        Store::retention(self)
    }
    fn damage(&self, from: i64, to: i64) -> Result<Vec<Damage>> {
        Store::damage(self, from, to)
    }
    fn damage_stats(&self) -> DamageStats {
        Store::damage_stats(self)
    }
}
