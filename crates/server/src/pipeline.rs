//! The pipeline: one thread owns the [`Ingestor`] and the [`Aggregator`]. Handlers send it
//! payloads through a bounded channel and get an [`IngestSummary`] back; a ticker sends a
//! [`Msg::Tick`] every 100 ms (flush due epochs, hourly expiry); [`Msg::Shutdown`] flushes every
//! open epoch and ends the thread.
//!
//! The store API is synchronous, so the pipeline is a plain thread (not a tokio task): its
//! store writes never block the async workers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_collector::aggregate::{Aggregator, FlushReport};
use sluice_collector::replay::DoneNote;
use sluice_collector::wal::Wal;
use sluice_collector::{Drop, DropReason, Ingestor, ParsedEvent};
use sluice_store::{Counts, Store};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::{LockMetrics, SharedMetrics};

/// Most distinct event types counted under their own `/metrics` label; the rest count as `_other`.
pub const MAX_TYPE_LABELS: usize = 256;

/// What one payload came to.
#[derive(Debug, Clone, Default)]
pub struct IngestSummary {
    /// Events accepted (handed to the aggregator; durable once `wal_seq` is, see
    /// [`Wal::wait_durable`]).
    pub accepted: u64,
    /// What was dropped, in payload order.
    pub dropped: Vec<Drop>,
    /// The whole payload was refused.
    pub rejected: bool,
    /// The WAL record of the payload (when it had accepted events): acknowledge only after
    /// `wal.wait_durable(seq)`.
    pub wal_seq: Option<u64>,
    /// The payload could not be logged (WAL error): nothing of it was accepted.
    pub error: Option<String>,
}

impl IngestSummary {
    /// Nothing of the payload was accepted, for `why` (not to be acknowledged: resend).
    fn refused(why: String) -> IngestSummary {
        IngestSummary {
            accepted: 0,
            dropped: Vec::new(),
            rejected: true,
            wal_seq: None,
            error: Some(why),
        }
    }
}

/// A message to the pipeline thread.
pub enum Msg {
    /// One payload from `transport` (`http`, …), answered with its summary.
    Ingest {
        /// Where it came from (`/metrics` label).
        transport: &'static str,
        /// The payload as received.
        payload: axum::body::Bytes,
        /// Where the summary goes.
        reply: oneshot::Sender<IngestSummary>,
    },
    /// Events parsed elsewhere (UDP: fire and forget, not logged in the WAL).
    Events {
        /// Parsed events.
        events: Vec<ParsedEvent>,
        /// Their arrival second.
        now: i64,
    },
    /// Flush due epochs; expire partitions when due.
    Tick,
    /// Flush everything and stop; answered once the store is flushed.
    Shutdown(oneshot::Sender<()>),
}

pub(crate) fn now_unix() -> i64 {
    sluice_reader::time::now_unix()
}

/// The aggregator's clock: wall time set back by the grace period, in whole seconds. The
/// aggregator runs with a grace of 0 on this clock, so it stores epoch `e` once `e`'s second
/// ended `grace` ago — which allows a grace below one second (`grace_ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlushClock {
    /// The grace period, milliseconds.
    pub grace_ms: i64,
}

impl FlushClock {
    /// The clock now.
    pub fn now(&self) -> i64 {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        self.at_ms(ms)
    }

    /// The clock at Unix time `ms` (milliseconds).
    pub fn at_ms(&self, ms: i64) -> i64 {
        ms.saturating_sub(self.grace_ms).div_euclid(1000)
    }

    /// The clock at the end of arrival second `now` (for WAL replay, which knows only the
    /// second a payload arrived in).
    pub fn at_end_of(&self, now: i64) -> i64 {
        self.at_ms(now.saturating_mul(1000).saturating_add(999))
    }
}

/// The state the pipeline thread owns.
pub(crate) struct Pipeline {
    pub ingestor: Ingestor,
    pub aggregator: Aggregator,
    pub store: Arc<dyn Store>,
    pub metrics: SharedMetrics,
    pub expire_every: i64,
    pub wal: Arc<Wal>,
    /// The configured dc (drops whose tags are unknown are counted under it).
    pub dc: String,
    /// The ingest epoch window (`now - max_past_secs ..= now + max_future_secs`): a dropped
    /// event's own `epoch` is used for its count only inside it.
    pub max_past_secs: i64,
    pub max_future_secs: i64,
    /// Ingest drops (HTTP, TCP) not yet added to the store's counts, per
    /// (epoch, dc, type, subtype) and reason; written once a second (on each tick).
    pub pending_drops: BTreeMap<(i64, String, String, String), BTreeMap<String, u64>>,
    /// The aggregator's clock (wall time set back by the grace period).
    pub clock: FlushClock,
    /// Done notes waiting for a store sync before they go to the WAL (see
    /// [`sluice_collector::replay`]).
    pub pending_notes: Vec<DoneNote>,
    /// The memory budget for pending events (`max_pending_bytes`).
    pub max_pending_bytes: u64,
    /// Free space and WAL health: whether ingest is available (see [`crate::disk`]).
    pub disk: crate::disk::DiskGuard,
}

impl Pipeline {
    /// Runs until [`Msg::Shutdown`] or until every sender is gone (then flushes too).
    pub fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut next_expire = now_unix();
        while let Some(msg) = rx.blocking_recv() {
            match msg {
                Msg::Ingest {
                    transport,
                    payload,
                    reply,
                } => {
                    let summary = self.ingest(transport, &payload);
                    let _ = reply.send(summary);
                }
                Msg::Events { events, .. } => {
                    if self.refusal().is_some() || self.disk.why().is_some() {
                        self.shed(events);
                    } else {
                        self.aggregator.add(events, self.clock.now());
                    }
                    self.metrics.locked().pending_events = self.aggregator.pending_events();
                }
                Msg::Tick => {
                    let now = now_unix();
                    let start = Instant::now();
                    let report = if self.wal_writable() {
                        self.aggregator.flush_due(self.clock.now())
                    } else {
                        FlushReport::default() // only the pending notes are retried
                    };
                    self.account(report, start);
                    self.write_drop_counts();
                    self.refresh_disk();
                    if now >= next_expire {
                        next_expire = now + self.expire_every;
                        match self.store.expire(now) {
                            Ok(r) => {
                                self.metrics.locked().partitions_expired +=
                                    r.partitions_dropped as u64
                            }
                            Err(e) => {
                                eprintln!("sluice-server: expiry failed: {e}");
                                self.metrics.locked().store_errors += 1;
                            }
                        }
                    }
                }
                Msg::Shutdown(done) => {
                    self.shutdown();
                    let _ = done.send(());
                    return;
                }
            }
        }
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let start = Instant::now();
        if !self.wal_writable() {
            // Stored now, these events would have no done note: the next start replays them
            // from the WAL instead (exactly once).
            eprintln!(
                "sluice-server: shutdown with the WAL failing: {} events left to the WAL replay at the next start",
                self.aggregator.pending_events()
            );
            return;
        }
        let report = self.aggregator.flush_all(now_unix());
        self.account(report, start);
        self.write_drop_counts();
        if !self.pending_drops.is_empty() {
            eprintln!(
                "sluice-server: shutdown with ingest drop counts not recorded (store errors)"
            );
        }
        if self.aggregator.pending_events() > 0 || self.aggregator.pending_batches() > 0 {
            eprintln!(
                "sluice-server: shutdown with {} events not written (store errors)",
                self.aggregator.pending_events()
            );
        }
    }

    /// Under backpressure, UDP events are dropped: counted per reason `shed` in `/metrics` and
    /// in their second's completeness counts.
    fn shed(&mut self, events: Vec<sluice_collector::ParsedEvent>) {
        self.metrics
            .locked()
            .drops
            .record(DropReason::Shed, events.len() as u64);
        for e in events {
            *self
                .pending_drops
                .entry((e.epoch, e.dc, e.type_, e.subtype))
                .or_default()
                .entry(DropReason::Shed.as_str().to_string())
                .or_default() += 1;
        }
    }

    fn ingest(&mut self, transport: &'static str, payload: &[u8]) -> IngestSummary {
        let now = now_unix();
        if let Some(why) = self.refusal() {
            // Refused before parsing: the sender gets an error (503 / TCP `error`) and keeps the
            // payload to retry; nothing of it is logged or counted as stored.
            let mut m = self.metrics.locked();
            m.payloads_shed += 1;
            m.backpressure = true;
            return IngestSummary::refused(why);
        }
        if let Some(why) = self.disk.refuse() {
            // Refused before parsing, as under backpressure: nothing of it is logged or counted.
            self.metrics.locked().payloads_refused_unavailable += 1;
            return IngestSummary::refused(format!("unavailable: {why}; retry later"));
        }
        let out = self.ingestor.ingest(payload, now);
        // Log only payloads with accepted events (a wholly rejected one has none); replay
        // reproduces the same events from (payload, now).
        let mut wal_seq = None;
        if !out.events.is_empty() {
            match self.wal.append(payload, now) {
                Ok(seq) => wal_seq = Some(seq),
                Err(e) => {
                    // Logged by the disk guard (once, not per payload).
                    self.disk.failed(e.to_string());
                    self.metrics.locked().wal_errors += 1;
                    return IngestSummary::refused(format!("unavailable: {e}; retry later"));
                }
            }
        }
        {
            let mut m = self.metrics.locked();
            m.drops.add(&out);
            for e in &out.events {
                let known = m.events_in.len() < MAX_TYPE_LABELS
                    || m.events_in
                        .contains_key(&(transport.to_string(), e.type_.clone()));
                let t = if known {
                    e.type_.clone()
                } else {
                    "_other".to_string()
                };
                *m.events_in.entry((transport.to_string(), t)).or_default() += 1;
            }
        }
        for d in &out.dropped {
            self.note_drop(payload, d, now);
        }
        let summary = IngestSummary {
            accepted: out.events.len() as u64,
            rejected: out.payload_rejected().is_some(),
            dropped: out.dropped,
            wal_seq,
            error: None,
        };
        if let Some(seq) = wal_seq {
            self.metrics.locked().wal_appends += 1;
            self.aggregator
                .add_logged(out.events, self.clock.now(), seq);
        }
        let mut m = self.metrics.locked();
        m.pending_events = self.aggregator.pending_events();
        m.pending_bytes = self.aggregator.pending_bytes();
        summary
    }

    /// Why input is refused now (backpressure), if it is: the spool is full while the store
    /// fails, or the pending events exceed the memory budget (`max_pending_bytes`).
    fn refusal(&self) -> Option<String> {
        if self.aggregator.is_backpressured() {
            return Some(format!(
                "backpressure: the store is failing and the spool is full ({} bytes); retry later",
                self.aggregator.spooled_bytes()
            ));
        }
        let pending = self.aggregator.pending_bytes();
        (pending >= self.max_pending_bytes).then(|| {
            format!(
                "backpressure: {pending} bytes of events pending in memory (max_pending_bytes {}); retry later",
                self.max_pending_bytes
            )
        })
    }

    /// Adds one ingest drop to the pending counts, under the dropped event's own tags when they
    /// can be read (see [`drop_tags`]), else under `(now, configured dc, "", "")`.
    fn note_drop(&mut self, payload: &[u8], d: &Drop, now: i64) {
        if d.count == 0 {
            return;
        }
        let window = (now - self.max_past_secs)..=(now + self.max_future_secs);
        let key = drop_tags(payload, d, &window).map_or_else(
            || (now, self.dc.clone(), String::new(), String::new()),
            |t| {
                (
                    t.epoch.unwrap_or(now),
                    t.dc.unwrap_or_else(|| self.dc.clone()),
                    t.type_,
                    t.subtype,
                )
            },
        );
        *self
            .pending_drops
            .entry(key)
            .or_default()
            .entry(d.reason.as_str().to_string())
            .or_default() += d.count;
    }

    /// Adds the pending ingest drops to the store's counts (one `add_counts` per
    /// (epoch, dc, type, subtype)); what fails stays pending for the next tick.
    fn write_drop_counts(&mut self) {
        if self.pending_drops.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending_drops);
        let mut errors = 0;
        for (key, dropped) in pending {
            let counts = Counts {
                dropped,
                ..Counts::default()
            };
            if let Err(e) = self
                .store
                .add_counts(key.0, &key.1, &key.2, &key.3, &counts)
            {
                errors += 1;
                if errors == 1 {
                    eprintln!("sluice-server: recording ingest drops (will retry): {e}");
                }
                self.pending_drops.insert(key, counts.dropped);
            }
        }
        if errors > 0 {
            self.metrics.locked().store_errors += errors;
        }
    }

    /// Syncs the WAL (the notes of stored batches, logged by the aggregator before their index
    /// entries) then the store after writes, appends the done notes of spooled batches to the
    /// WAL (then syncs it), checkpoints the WAL up to what is stored or spooled, and records a
    /// flush report. See `sluice_collector::replay` for why this order is exactly once.
    fn account(&mut self, report: FlushReport, start: Instant) {
        let mut sync_error = false;
        self.pending_notes.extend(self.aggregator.take_done());
        let (_, advance) = self.checkpoint_target();
        if report.blobs > 0 || advance || !self.pending_notes.is_empty() {
            // The notes the aggregator logged before writing index entries become durable
            // before those entries do (see sluice_collector::replay).
            if report.blobs > 0 {
                if let Err(e) = self.wal.sync() {
                    eprintln!("sluice-server: WAL sync failed: {e}");
                    self.metrics.locked().wal_errors += 1;
                    sync_error = true;
                }
            }
            if let Err(e) = self.store.flush() {
                // While the disk guard reports the state, it does the logging.
                if self.disk.why().is_none() {
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
        // Notes appended just now are covered too when nothing is pending.
        let (upto, advance) = self.checkpoint_target();
        if advance && !sync_error {
            match self.wal.checkpoint(upto) {
                Ok(()) => self.metrics.locked().wal_checkpointed_seq = upto,
                Err(e) => {
                    if self.disk.why().is_none() {
                        eprintln!("sluice-server: WAL checkpoint failed: {e}");
                    }
                    self.metrics.locked().wal_errors += 1;
                }
            }
        }
        if self.disk.why().is_none() {
            for e in &report.errors {
                eprintln!("sluice-server: flush error (will retry): {e}");
            }
        }
        let mut m = self.metrics.locked();
        m.spool_batches = self.aggregator.spooled_batches() as u64;
        m.spool_bytes = self.aggregator.spooled_bytes();
        m.spool_events = self.aggregator.spooled_events();
        m.memory_batches = self.aggregator.memory_batches() as u64;
        m.backpressure = self.aggregator.is_backpressured()
            || self.aggregator.pending_bytes() >= self.max_pending_bytes;
        m.pending_bytes = self.aggregator.pending_bytes();
        m.events_flushed += report.events;
        m.late_events += report.late_events;
        m.dropped_events += report.dropped_events;
        m.blobs_written += report.blobs as u64;
        m.blob_bytes_written += report.bytes;
        m.store_errors += report.errors.len() as u64 + u64::from(sync_error);
        m.pending_events = self.aggregator.pending_events();
        m.last_flush_seconds = start.elapsed().as_secs_f64();
        if report.blobs > 0 {
            m.last_write_unix = now_unix();
        }
    }
}

impl Pipeline {
    /// How far the WAL may be checkpointed (every record below the aggregator's oldest pending
    /// one), and whether that is beyond the current checkpoint.
    fn checkpoint_target(&self) -> (u64, bool) {
        let upto = self
            .aggregator
            .min_pending_seq()
            .map_or(self.wal.last_seq(), |s| s - 1);
        (upto, upto > self.wal.checkpointed())
    }

    /// Whether the WAL takes writes, so that groups may be stored: a batch stored while its done
    /// note cannot be logged would be stored again by a replay after a crash. While the WAL
    /// fails, pending notes are retried (by [`account`](Self::account)); with none pending an
    /// empty note probes it (replay ignores empty notes).
    fn wal_writable(&mut self) -> bool {
        if self.wal.failing().is_some() {
            self.disk.wal_failed = true;
        }
        if !self.disk.wal_failed {
            return true;
        }
        // Recovering: the reserve must be back (else a note may not fit after the store took
        // a batch), the pending notes written (`account` retries them), and a write succeed.
        if !self.disk.reserve_free() || !self.pending_notes.is_empty() {
            return false;
        }
        if self.wal.append_note(&[], now_unix()).is_err() {
            return false;
        }
        self.disk.wal_failed = false;
        true
    }

    /// Measures free space again and publishes the disk state to `/metrics` and `/healthz`.
    fn refresh_disk(&mut self) {
        self.disk.refresh(self.wal.failing());
        let mut m = self.metrics.locked();
        m.disk_unavailable = self.disk.why().map(str::to_owned);
        m.disk_free_bytes = self.disk.free;
    }

    /// Appends the first `n` pending done notes to the WAL and syncs it. False (notes kept for the next
    /// flush, checkpoint held back) on a WAL error.
    fn write_notes(&mut self, n: usize) -> bool {
        let now = now_unix();
        for _ in 0..n {
            let Some(note) = self.pending_notes.first() else { break };
            if let Err(e) = self.wal.append_note(&note.encode(), now) {
                if self.disk.why().is_none() {
                    eprintln!("sluice-server: WAL note append failed (retried every tick): {e}");
                }
                self.disk.failed(e.to_string());
                self.metrics.locked().wal_errors += 1;
                return false;
            }
            self.pending_notes.remove(0);
            self.metrics.locked().wal_notes += 1;
        }
        if let Err(e) = self.wal.sync() {
            eprintln!("sluice-server: WAL sync failed: {e}");
            self.metrics.locked().wal_errors += 1;
            return false;
        }
        true
    }
}

/// Hands `payload` to the pipeline; the receiver gets its summary (not yet durable).
pub(crate) async fn submit(
    tx: &mpsc::Sender<Msg>,
    transport: &'static str,
    payload: axum::body::Bytes,
) -> Result<oneshot::Receiver<IngestSummary>, String> {
    let (reply, rx) = oneshot::channel();
    tx.send(Msg::Ingest {
        transport,
        payload,
        reply,
    })
    .await
    .map_err(|_| "pipeline is shutting down".to_string())?;
    Ok(rx)
}

/// Waits for the summary of a [`submit`]ted payload, then for its WAL record to be durable:
/// once this returns `Ok` the payload may be acknowledged. `Err`: nothing may be acknowledged
/// (pipeline stopping, WAL error).
pub(crate) async fn durable(
    rx: oneshot::Receiver<IngestSummary>,
    wal: &Arc<Wal>,
) -> Result<IngestSummary, String> {
    let summary = rx
        .await
        .map_err(|_| "pipeline is shutting down".to_string())?;
    if let Some(e) = &summary.error {
        return Err(e.clone());
    }
    if let Some(seq) = summary.wal_seq {
        if wal.durable_seq() < seq {
            let wal = wal.clone();
            tokio::task::spawn_blocking(move || wal.wait_durable(seq))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(summary)
}

/// The tags of a dropped event, as far as they could be read.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct DropTags {
    /// Its `epoch`, when an integer inside the ingest window.
    pub epoch: Option<i64>,
    /// Its `dc`, when a valid tag.
    pub dc: Option<String>,
    /// Its `type` (valid, non-empty).
    pub type_: String,
    /// Its `subtype` (valid, or `""`).
    pub subtype: String,
}

/// Reads the tags of the event a [`Drop`] stands for, when that is possible: a single event
/// (not a whole payload, not `too_many`, not `bad_utf8`) of a JSON payload (array element or
/// NDJSON line) that is a map with a valid `type`. Only the tag fields are decoded; the rest is
/// skipped. `None` when the event is not a map, is not JSON (Sereal payloads), does not parse,
/// or has no valid `type` — its drop is then counted under the documented fallback.
pub(crate) fn drop_tags(
    payload: &[u8],
    d: &Drop,
    window: &std::ops::RangeInclusive<i64>,
) -> Option<DropTags> {
    if d.whole_payload
        || matches!(
            d.reason,
            DropReason::TooMany | DropReason::BadUtf8 | DropReason::PayloadError
        )
    {
        return None;
    }
    if payload.starts_with(b"=srl") || payload.starts_with(b"=\xF3rl") {
        return None;
    }
    let rest = payload.get(d.offset..)?;
    let first = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if rest[first] != b'{' {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Raw {
        epoch: Option<serde_json::Value>,
        dc: Option<serde_json::Value>,
        #[serde(rename = "type")]
        type_: Option<serde_json::Value>,
        subtype: Option<serde_json::Value>,
    }
    let raw: Raw = serde_json::Deserializer::from_slice(&rest[first..])
        .into_iter::<Raw>()
        .next()?
        .ok()?;
    // The tag rule of keys (`check_tag`), so a drop is never counted under a tag that ingest
    // refuses; an integer `dc` is named by its decimal form, as ingest does.
    fn tag(v: &Option<serde_json::Value>, name: &str, allow_empty: bool) -> Option<String> {
        let s = match v {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) if name == "dc" && (n.is_i64() || n.is_u64()) => n.to_string(),
            _ => return None,
        };
        sluice_blob::key::check_tag(name, &s, allow_empty).ok().map(|()| s)
    }
    let type_ = tag(&raw.type_, "type", false)?;
    Some(DropTags {
        epoch: raw
            .epoch
            .as_ref()
            .and_then(serde_json::Value::as_i64)
            .filter(|e| window.contains(e)),
        dc: tag(&raw.dc, "dc", false),
        type_,
        subtype: tag(&raw.subtype, "subtype", true).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_at(payload: &[u8], needle: &str, reason: DropReason) -> Drop {
        let offset = payload
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .unwrap();
        Drop {
            index: 0,
            offset,
            reason,
            detail: String::new(),
            count: 1,
            whole_payload: false,
        }
    }

    #[test]
    fn tags_of_dropped_events() {
        let w = 900..=1100;
        let p = br#"[{"epoch":1000,"dc":"x","type":"t","subtype":"s","big":[1,2]}, 42, {"epoch":5,"type":"a:b"}, {"epoch":999,"type":"u","dc":7}]"#;
        let t = drop_tags(
            p,
            &drop_at(p, r#"{"epoch":1000"#, DropReason::Oversized),
            &w,
        )
        .unwrap();
        assert_eq!(
            t,
            DropTags {
                epoch: Some(1000),
                dc: Some("x".into()),
                type_: "t".into(),
                subtype: "s".into()
            }
        );
        assert_eq!(
            drop_tags(p, &drop_at(p, "42", DropReason::NotAMap), &w),
            None
        );
        assert_eq!(
            drop_tags(p, &drop_at(p, r#"{"epoch":5"#, DropReason::BadTag), &w),
            None
        );
        let t = drop_tags(p, &drop_at(p, r#"{"epoch":999"#, DropReason::BadTag), &w).unwrap();
        // An integer dc is named as ingest names it.
        assert_eq!((t.epoch, t.dc.as_deref(), t.type_.as_str()), (Some(999), Some("7"), "u"));
        // A type ingest refuses (over 64 bytes) is not counted under that type.
        let long = format!(r#"[{{"type":"{}","x":1}}]"#, "t".repeat(100));
        let long = long.as_bytes();
        assert_eq!(drop_tags(long, &drop_at(long, "{", DropReason::BadTag), &w), None);
        let mut whole = drop_at(p, "[", DropReason::Oversized);
        whole.whole_payload = true;
        assert_eq!(drop_tags(p, &whole, &w), None);
    }
}
