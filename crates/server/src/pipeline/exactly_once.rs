//! The exactly-once bookkeeping of the pipeline, beside its loop: after each flush the WAL and
//! the store are synced in the order `sluice_collector::replay` requires, the done notes of
//! spooled batches are logged, the WAL is checkpointed up to what is stored or spooled; while the
//! WAL fails nothing new is stored (a batch without its done note would be stored again by a
//! replay), and the disk guard says whether ingest is available.

use std::sync::Arc;
use std::time::Instant;

use sluice_collector::aggregate::{FlushReport, NoteLog};
use sluice_collector::wal::Wal;

use super::{now_unix, Pipeline};
use crate::metrics::{as_gauge, SharedMetrics};

/// The aggregator's note log: each done note of a stored batch appended to `wal` before the
/// batch's index entries are written (exactly once across any SIGKILL timing: see
/// `sluice_collector::replay`), counted in `wal_notes` / `wal_errors`.
pub(crate) fn note_log(wal: Arc<Wal>, metrics: SharedMetrics) -> NoteLog {
    Box::new(
        move |note| match wal.append_note(&note.encode(), now_unix()) {
            Ok(_) => {
                metrics.wal_notes.inc();
                Ok(())
            }
            Err(e) => {
                metrics.wal_errors.inc();
                Err(e.to_string())
            }
        },
    )
}

impl Pipeline {
    /// Syncs the WAL (the notes of stored batches, logged by the aggregator before their index
    /// entries) then the store after writes, appends the done notes of spooled batches to the
    /// WAL (then syncs it), checkpoints the WAL up to what is stored or spooled, and records a
    /// flush report. See `sluice_collector::replay` for why this order is exactly once.
    pub(super) fn account(&mut self, mut report: FlushReport, start: Instant) {
        let stored = std::mem::take(&mut report.stored);
        let mut sync_error = false;
        self.pending_notes.extend(self.aggregator.take_done());
        let (_, advance) = self.checkpoint_target();
        if report.blobs > 0 || advance || !self.pending_notes.is_empty() {
            // The notes the aggregator logged before writing index entries become durable
            // before those entries do (see sluice_collector::replay).
            if report.blobs > 0 {
                if let Err(e) = self.wal.sync() {
                    eprintln!("sluice-server: WAL sync failed: {e}");
                    self.metrics.wal_errors.inc();
                    sync_error = true;
                }
            }
            if let Err(e) = self.store.flush() {
                // While the disk guard reports the state, it does the logging.
                if self.disk().why().is_none() {
                    eprintln!("sluice-server: store flush failed: {e}");
                }
                sync_error = true;
            }
        }
        // Notes of spooled batches are durable facts already; those of stored batches wait for
        // the store sync above.
        if sync_error {
            self.pending_notes.sort_by_key(|n| !n.spooled);
            let spooled = self.pending_notes.iter().take_while(|n| n.spooled).count();
            if spooled > 0 {
                self.write_notes(spooled);
            }
        } else if !self.pending_notes.is_empty() {
            sync_error = !self.write_notes(self.pending_notes.len());
        }
        // Stored batches are durable now (synced, notes logged): the other shards may
        // checkpoint past this shard's records that left memory.
        if !sync_error {
            self.shards.status[self.shard].min_seq.store(
                self.aggregator.min_pending_seq().unwrap_or(u64::MAX),
                std::sync::atomic::Ordering::SeqCst,
            );
        }
        // Notes appended just now are covered too when nothing is pending.
        let (upto, advance) = self.checkpoint_target();
        if advance && !sync_error {
            match self.wal.checkpoint(upto) {
                Ok(()) => self.metrics.wal_checkpointed_seq.set(as_gauge(upto)),
                Err(e) => {
                    if self.disk().why().is_none() {
                        eprintln!("sluice-server: WAL checkpoint failed: {e}");
                    }
                    self.metrics.wal_errors.inc();
                }
            }
        }
        if self.disk().why().is_none() {
            for e in &report.errors {
                eprintln!("sluice-server: flush error (will retry): {e}");
            }
        }
        self.publish_pending();
        let m = &self.metrics;
        let sh = &self.shards;
        m.spool_batches
            .set(as_gauge(sh.total(|s| &s.spooled_batches)));
        m.spool_bytes.set(as_gauge(sh.total(|s| &s.spooled_bytes)));
        m.spool_events
            .set(as_gauge(sh.total(|s| &s.spooled_events)));
        m.memory_batches
            .set(as_gauge(sh.total(|s| &s.memory_batches)));
        m.spare_encoder_bytes
            .set(as_gauge(sh.total(|s| &s.spare_bytes)));
        m.backpressure.set(i64::from(
            sh.backpressured() || sh.total(|s| &s.pending_bytes) >= self.max_pending_bytes,
        ));
        m.events_flushed.inc_by(report.events);
        m.late_events.inc_by(report.late_events);
        m.dropped_events.inc_by(report.dropped_events);
        m.blobs_written.inc_by(report.blobs as u64);
        m.blob_bytes_written.inc_by(report.bytes);
        m.store_errors
            .inc_by(report.errors.len() as u64 + u64::from(sync_error));
        if report.blobs > 0 {
            m.flushed(start.elapsed().as_secs_f64(), now_unix());
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for batch in stored.iter().filter(|b| b.events > b.late_events) {
            // On-time events only: a late event's wait says how late it came, not how fresh
            // the pipeline is.
            let secs = (now_ms - (batch.epoch + 1) * 1000) as f64 / 1000.0;
            m.freshness_seconds.observe(secs.max(0.0));
        }
        // Write-time work on what is now stored and synced: substreams (queued, never run on
        // this thread; a full queue sheds).
        for batch in stored {
            self.substreams.offer(batch);
        }
    }

    /// How far the WAL may be checkpointed (every record below the oldest one some shard still
    /// needs: see [`super::shards`]; this shard's own oldest pending one too, published or
    /// not), and whether that is beyond the current checkpoint.
    pub(super) fn checkpoint_target(&self) -> (u64, bool) {
        let floor = self
            .shards
            .checkpoint_floor(&self.wal)
            .min(self.aggregator.min_pending_seq().unwrap_or(u64::MAX));
        let upto = floor.saturating_sub(1);
        (upto, upto > self.wal.checkpointed())
    }

    /// Whether the WAL takes writes, so that groups may be stored: a batch stored while its done
    /// note cannot be logged would be stored again by a replay after a crash. While the WAL
    /// fails, pending notes are retried (by [`account`](Self::account)); with none pending an
    /// empty note probes it (replay ignores empty notes).
    pub(super) fn wal_writable(&mut self) -> bool {
        let mut disk = self.disk();
        if self.wal.failing().is_some() {
            disk.wal_failed = true;
        }
        if !disk.wal_failed {
            return true;
        }
        // Recovering: the reserve must be back (else a note may not fit after the store took
        // a batch), the pending notes written (`account` retries them), and a write succeed.
        if !disk.reserve_free() || !self.pending_notes.is_empty() {
            return false;
        }
        if self.wal.append_note(&[], now_unix()).is_err() {
            return false;
        }
        disk.wal_failed = false;
        true
    }

    /// Measures free space again and publishes the disk state to `/metrics` and `/healthz`.
    pub(super) fn refresh_disk(&mut self) {
        let mut disk = self.disk();
        disk.refresh(self.wal.failing());
        self.metrics.set_unavailable(disk.why());
        self.metrics.disk_free_bytes.set(as_gauge(disk.free));
    }

    /// Appends the first `n` pending done notes to the WAL and syncs it. False (notes kept for the next
    /// flush, checkpoint held back) on a WAL error.
    pub(super) fn write_notes(&mut self, n: usize) -> bool {
        let now = now_unix();
        for _ in 0..n {
            let Some(note) = self.pending_notes.first() else {
                break;
            };
            if let Err(e) = self.wal.append_note(&note.encode(), now) {
                if self.disk().why().is_none() {
                    eprintln!("sluice-server: WAL note append failed (retried every tick): {e}");
                }
                self.disk().failed(e.to_string());
                self.metrics.wal_errors.inc();
                return false;
            }
            self.pending_notes.remove(0);
            self.metrics.wal_notes.inc();
        }
        if let Err(e) = self.wal.sync() {
            eprintln!("sluice-server: WAL sync failed: {e}");
            self.metrics.wal_errors.inc();
            return false;
        }
        true
    }
}
