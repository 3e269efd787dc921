//! Exactly once: the one owner of the rule that every acknowledged event is stored once, across
//! any crash. [`ExactlyOnce`] is what a pipeline shard drives after each flush (the server does,
//! and so do the tests, without a server); [`replay`] is what a start runs.
//!
//! # The protocol
//!
//! What is logged, in which order (each step names its crash point, [`crate::failpoint`]):
//!
//! 1. **Log** (`ingest.parsed`, `ingest.logged`). A payload with accepted events is appended to
//!    the WAL as one record `seq` before any of its events reach an aggregator. It is
//!    acknowledged only once that record is durable ([`Wal::wait_durable`]; `ack.durable`).
//! 2. **Route** (`route.sent`, `route.added`). Each event goes to the aggregator owning its
//!    (dc, type, subtype) ([`Aggregator::add_logged`] with `seq`). The record is *in flight*
//!    until every owner added its events and published its oldest pending record (the server's
//!    `Shards`); a group keeps the records it holds **ascending**, whatever order they arrive
//!    in (a shard adds a record routed from another after later records it parsed itself).
//! 3. **Store** a closed group's batch, phased over a flush's batches: blobs
//!    (`flush.stored`) → its **done note** appended to the WAL (`flush.noted`): "records
//!    `seqs` of group G are stored", with a *proof*, the batch's first epoch-index entry, and the
//!    batch's completeness counts → the index entries (`flush.indexed`) → the counts, added
//!    once per token (the proof entry; `flush.counted`). Or **spool** it while the store fails:
//!    the spool record (fsynced) holds the group and `seqs` (`spool.pushed`), its note (no
//!    proof) follows in step 4.
//! 4. **Settle** ([`ExactlyOnce::settle`]) after each flush: the WAL is synced, then the store
//!    (`settle.synced`), then the notes of spooled batches are appended and synced
//!    (`settle.noted`). Only then may the shard publish its oldest pending record
//!    (`settle.published`).
//! 5. **Checkpoint** ([`ExactlyOnce::checkpoint_upto`], [`ExactlyOnce::checkpoint`]): every
//!    record below the oldest one in flight, the oldest each shard published and this shard's
//!    own oldest pending one (`checkpoint.written`).
//!
//! What a replay honours ([`replay`], at start, before anything is served; `replay.done`):
//! - records after the checkpoint only (all earlier ones are stored or spooled);
//! - a note with a proof only if the store's epoch index of (epoch, dc) lists the proof entry
//!   (a reader sees only indexed chunks); its counts are added again, a no-op when the batch's
//!   counts were written (same token);
//! - a note without a proof (spooled) as it is; a batch in a spool as if it had its note;
//! - every other event of a replayed record goes back to its owner under its old `seq`.
//!
//! # Why each crash point is exactly once
//!
//! | crash after | on disk | the replay |
//! |---|---|---|
//! | `ingest.parsed` | nothing | nothing: the payload was not acknowledged; the sender resends |
//! | `ingest.logged`, `ack.durable` | the record | replays it (at most once for an unacknowledged payload) |
//! | `route.sent`, `route.added` | the record, not checkpointed (in flight) | replays every event of it |
//! | `flush.stored` | blobs, no note, no index entry | replays the events; the new batch gets the next unindexed chunk number: a store that checks write-once skips a number taken by a blob, one that writes owned keys plainly (Cassandra) overwrites the orphan; readers never see the unindexed blobs |
//! | `flush.noted` | note, no index entry | the note is unproven: it skips nothing |
//! | `flush.indexed` | note, index, no counts | skips the batch; adds its counts from the note |
//! | `flush.counted`, `settle.*` | all of the batch | skips it; re-adding its counts adds nothing |
//! | `spool.pushed` | spool record, no note | the spooled batch skips its records' events |
//! | `checkpoint.written` | checkpoint | nothing of what it passed is replayed |
//!
//! A SIGKILL cannot undo a write(2) that returned (the page cache holds it), so for a process
//! crash the order of the writes is the whole argument; the syncs of step 4 make it hold for
//! an OS crash too, except within one flush: see the windows.
//!
//! # What remains (bounded)
//!
//! - **Power loss or an OS crash inside a flush**, before step 4's syncs return (milliseconds;
//!   never a process crash): the store may keep an index entry whose note the WAL lost; that
//!   batch is stored once more. At most one flush's batches per crash.
//! - **A failed fsync whose re-log fails too** (a disk error, under `fsync = batch` or
//!   `always`; see [`crate::wal`]'s *Errors*): the payloads of that group commit — those appended
//!   since the last good fsync — are answered with an error, not acknowledged, yet their events
//!   are already with the aggregators and their records are re-logged by the next write that
//!   succeeds. A sender that resends them has them stored twice: at least once, never lost. At
//!   most one group commit per such disk error (the WAL's records between two fsyncs; under load
//!   the acknowledgement thread fsyncs back to back, so a few milliseconds of payloads).
//! - **A note that does not parse** (a damaged WAL record that passed its CRC): its events are
//!   replayed (at least once) and the replay says so.
//! - **Counts restored at a start while the store is down** fail and are reported
//!   ([`ReplayReport::counts_errors`]): those batches' counts stay missing (their events are
//!   stored once). Only after a crash between an index write and a counts write (microseconds).
//!
//! A caller must not store batches while notes cannot be logged ([`ExactlyOnce::probe`]): a batch
//! stored without its note would be stored again by a replay.

pub mod replay;

pub use replay::{replay, replay_log, replay_log_routed, ReplayReport};

use std::sync::Arc;

use sluice_store::Store;

use crate::aggregate::{Aggregator, NoteLog};
use crate::failpoint;
use crate::note::DoneNote;
use crate::wal::{Wal, WalError};

/// The exactly-once bookkeeping of one aggregator over a (possibly shared) WAL: see the
/// [module docs](self) for the protocol it keeps.
pub struct ExactlyOnce {
    wal: Arc<Wal>,
    /// Done notes recorded by the aggregator (spooled batches) not yet in the WAL.
    pending_notes: Vec<DoneNote>,
}

/// What one [`ExactlyOnce::settle`] did.
#[derive(Debug, Default)]
pub struct Settled {
    /// The WAL and the store were synced and every pending note logged: the batches stored so
    /// far are durable, the aggregator's oldest pending record may be published.
    pub durable: bool,
    /// Notes appended to the WAL.
    pub notes: u64,
    /// A WAL sync failed (why).
    pub wal_sync_error: Option<String>,
    /// A WAL note append failed (why): notes are kept and retried; the WAL is failing.
    pub note_error: Option<String>,
    /// The store's sync failed (why).
    pub store_error: Option<String>,
}

impl ExactlyOnce {
    /// The bookkeeping over `wal`.
    pub fn new(wal: Arc<Wal>) -> ExactlyOnce {
        ExactlyOnce {
            wal,
            pending_notes: Vec::new(),
        }
    }

    /// The WAL.
    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    /// Done notes waiting to be logged (spooled batches, or notes whose append failed).
    pub fn pending_notes(&self) -> usize {
        self.pending_notes.len()
    }

    /// The note log to give the aggregator ([`Aggregator::set_note_log`]): each stored batch's
    /// note appended to the WAL before its index entries (step 3); `appended` hears of each
    /// append's outcome (for counters).
    pub fn note_log(&self, appended: impl Fn(Result<(), &WalError>) + Send + 'static) -> NoteLog {
        let wal = self.wal.clone();
        Box::new(
            move |note| match wal.append_note(&note.encode(), now_unix()) {
                Ok(_) => {
                    appended(Ok(()));
                    Ok(())
                }
                Err(e) => {
                    appended(Err(&e));
                    Err(e)
                }
            },
        )
    }

    /// Step 4, after a flush of `aggregator` that stored blobs (`stored_blobs`) or after which a
    /// checkpoint is due (`checkpoint_due`): syncs the WAL (when blobs were stored) then the
    /// store, then appends and syncs the pending notes — only the spooled batches' when a sync
    /// failed (those are durable facts already; a stored batch's note waits for its store).
    pub fn settle(
        &mut self,
        aggregator: &mut Aggregator,
        store: &dyn Store,
        stored_blobs: bool,
        checkpoint_due: bool,
    ) -> Settled {
        let mut s = Settled::default();
        self.pending_notes.extend(aggregator.take_done());
        let mut synced = true;
        if stored_blobs || checkpoint_due || !self.pending_notes.is_empty() {
            if stored_blobs {
                if let Err(e) = self.wal.sync() {
                    s.wal_sync_error = Some(e.to_string());
                    synced = false;
                }
            }
            if let Err(e) = store.flush() {
                s.store_error = Some(e.to_string());
                synced = false;
            }
        }
        failpoint::hit("settle.synced");
        if !synced {
            self.pending_notes.sort_by_key(|n| !n.spooled);
            let spooled = self.pending_notes.iter().take_while(|n| n.spooled).count();
            if spooled > 0 {
                self.write_notes(spooled, &mut s);
            }
        } else if !self.pending_notes.is_empty() {
            synced = self.write_notes(self.pending_notes.len(), &mut s);
        }
        if s.notes > 0 {
            failpoint::hit("settle.noted");
        }
        s.durable = synced;
        s
    }

    /// Appends the first `n` pending notes and syncs the WAL; false on an error (the notes not
    /// written are kept for the next settle).
    fn write_notes(&mut self, n: usize, s: &mut Settled) -> bool {
        let now = now_unix();
        let mut written = 0;
        for note in self.pending_notes.iter().take(n) {
            if let Err(e) = self.wal.append_note(&note.encode(), now) {
                s.note_error = Some(e.to_string());
                break;
            }
            written += 1;
        }
        self.pending_notes.drain(..written);
        s.notes += written as u64;
        if s.note_error.is_some() {
            return false;
        }
        if let Err(e) = self.wal.sync() {
            s.wal_sync_error = Some(e.to_string());
            return false;
        }
        true
    }

    /// Step 5: how far the WAL may be checkpointed given `floor`, the oldest record some other
    /// part still needs (the oldest in flight or published by a shard; `u64::MAX`: none), and
    /// `aggregator`'s own oldest pending record. `None`: no further than now.
    pub fn checkpoint_upto(&self, aggregator: &Aggregator, floor: u64) -> Option<u64> {
        let floor = floor
            .min(self.wal.last_seq().saturating_add(1))
            .min(aggregator.min_pending_seq().unwrap_or(u64::MAX));
        let upto = floor.saturating_sub(1);
        (upto > self.wal.checkpointed()).then_some(upto)
    }

    /// Checkpoints the WAL up to `upto` (from [`checkpoint_upto`](Self::checkpoint_upto), after
    /// a durable [`settle`](Self::settle)).
    pub fn checkpoint(&self, upto: u64) -> Result<(), WalError> {
        self.wal.checkpoint(upto)?;
        failpoint::hit("checkpoint.written");
        Ok(())
    }

    /// While the WAL fails: whether it takes a write again (an empty note, which a replay
    /// ignores), with every pending note written first. Until then no batch may be stored.
    pub fn probe(&mut self) -> bool {
        if !self.pending_notes.is_empty() {
            return false;
        }
        self.wal.append_note(&[], now_unix()).is_ok()
    }
}

/// Unix seconds now (the `now` of notes: replay ignores it).
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
