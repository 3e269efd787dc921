//! The pipeline's side of exactly once (the protocol and its rules are
//! [`sluice_collector::exactly_once`]): after each flush a shard settles through its
//! [`ExactlyOnce`], counts and logs what happened, publishes its oldest pending record for the
//! other shards once its batches are durable, and checkpoints the shared WAL to the floor over
//! all shards; while the WAL fails nothing new is stored, and the disk guard says whether ingest
//! is available.

use std::time::Instant;

use sluice_collector::aggregate::{FlushReport, NoteLog};
use sluice_collector::exactly_once::ExactlyOnce;

use super::{now_unix, Pipeline};
use crate::metrics::{as_gauge, SharedMetrics};

/// The aggregator's note log over `exactly_once`'s WAL, counted in `wal_notes` / `wal_errors`.
pub(crate) fn note_log(exactly_once: &ExactlyOnce, metrics: SharedMetrics) -> NoteLog {
    exactly_once.note_log(move |r| match r {
        Ok(()) => metrics.wal_notes.inc(),
        Err(_) => metrics.wal_errors.inc(),
    })
}

impl Pipeline {
    /// Settles a flush (step 4 of the protocol: syncs, notes of spooled batches), publishes this
    /// shard's oldest pending record once its batches are durable, checkpoints the WAL (step 5)
    /// and records a flush report.
    pub(super) fn account(&mut self, mut report: FlushReport, start: Instant) {
        let stored = std::mem::take(&mut report.stored);
        let due = self.checkpoint_upto().is_some();
        let settled =
            self.exactly_once
                .settle(&mut self.aggregator, &*self.store, report.blobs > 0, due);
        let m = &self.metrics;
        m.wal_notes.inc_by(settled.notes);
        if let Some(e) = &settled.wal_sync_error {
            eprintln!("sluice-server: WAL sync failed: {e}");
            m.wal_errors.inc();
        }
        if let Some(e) = &settled.store_error {
            // While the disk guard reports the state, it does the logging.
            if self.disk().why().is_none() {
                eprintln!("sluice-server: store flush failed: {e}");
            }
        }
        if let Some(e) = &settled.note_error {
            if self.disk().why().is_none() {
                eprintln!("sluice-server: WAL note append failed (retried every tick): {e}");
            }
            self.disk().failed(e.clone());
            m.wal_errors.inc();
        }
        let sync_error = !settled.durable;
        // Stored batches are durable now (synced, notes logged): the other shards may
        // checkpoint past this shard's records that left memory.
        if settled.durable {
            self.shards.status[self.shard].min_seq.store(
                self.aggregator.min_pending_seq().unwrap_or(u64::MAX),
                std::sync::atomic::Ordering::SeqCst,
            );
            sluice_collector::failpoint::hit("settle.published");
            // Notes appended just now are covered too when nothing is pending.
            if let Some(upto) = self.checkpoint_upto() {
                match self.exactly_once.checkpoint(upto) {
                    Ok(()) => self.metrics.wal_checkpointed_seq.set(as_gauge(upto)),
                    Err(e) => {
                        if self.disk().why().is_none() {
                            eprintln!("sluice-server: WAL checkpoint failed: {e}");
                        }
                        self.metrics.wal_errors.inc();
                    }
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

    /// How far the WAL may be checkpointed now: below the oldest record some shard still
    /// needs (see [`super::shards`]) and this shard's own oldest pending one, published or not.
    pub(super) fn checkpoint_upto(&self) -> Option<u64> {
        let floor = self.shards.checkpoint_floor(&self.wal);
        self.exactly_once.checkpoint_upto(&self.aggregator, floor)
    }

    /// Whether the WAL takes writes, so that groups may be stored: a batch stored while its done
    /// note cannot be logged would be stored again by a replay after a crash. While the WAL
    /// fails, pending notes are retried (by [`account`](Self::account)); with none pending an
    /// empty note probes it (replay ignores empty notes).
    pub(super) fn wal_writable(&mut self) -> bool {
        // The guard is held across the probe, which borrows this shard mutably.
        let guard = self.disk.clone();
        let mut disk = guard.lock().unwrap_or_else(|e| e.into_inner());
        if self.wal.failing().is_some() {
            disk.wal_failed = true;
        }
        if !disk.wal_failed {
            return true;
        }
        // Recovering: the reserve must be back (else a note may not fit after the store took
        // a batch), the pending notes written (`account` retries them), and a write succeed.
        if !disk.reserve_free() || !self.exactly_once.probe() {
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
}
