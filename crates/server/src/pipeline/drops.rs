//! Ingest drops in the completeness counts, one path for every transport: each dropped event is
//! counted under the tags ingest read of it ([`sluice_collector::DropTags`]), else under the
//! documented fallback (arrival second, configured dc, `""`, `""`), and written to the store
//! with each tick ([`PendingDrops`]).

use std::collections::BTreeMap;

use sluice_collector::{Drop, DropReason};
use sluice_store::{Counts, Store};

use super::Pipeline;
use crate::metrics::SharedMetrics;

/// Drop counts not yet added to the store's counts, per (epoch, dc, type, subtype) and reason.
pub(crate) type PendingDrops = BTreeMap<(i64, String, String, String), BTreeMap<String, u64>>;

/// Adds one ingest drop to `pending`, under the dropped event's own tags when ingest could read
/// them (its `epoch` and `dc` when valid), else under `(now, dc, "", "")`.
pub(crate) fn note_drop(pending: &mut PendingDrops, d: &Drop, now: i64, dc: &str) {
    if d.count == 0 {
        return;
    }
    let key = match &d.tags {
        Some(t) => (
            t.epoch.unwrap_or(now),
            t.dc.clone().unwrap_or_else(|| dc.to_owned()),
            t.type_.clone(),
            t.subtype.clone(),
        ),
        None => (now, dc.to_owned(), String::new(), String::new()),
    };
    add(pending, key, d.reason, d.count);
}

/// Adds `n` drops of `reason` under `key` (epoch, dc, type, subtype).
pub(crate) fn add(
    pending: &mut PendingDrops,
    key: (i64, String, String, String),
    reason: DropReason,
    n: u64,
) {
    *pending
        .entry(key)
        .or_default()
        .entry(reason.as_str().to_string())
        .or_default() += n;
}

/// Adds `n` drops of the reason named `reason` (client reports: `client:<reason>`) under `key`.
pub(crate) fn add_named(
    pending: &mut PendingDrops,
    key: (i64, String, String, String),
    reason: &str,
    n: u64,
) {
    let slot = pending
        .entry(key)
        .or_default()
        .entry(reason.to_owned())
        .or_default();
    *slot = slot.saturating_add(n);
}

/// Adds the pending drops to the store's counts (one `add_counts` per (epoch, dc, type,
/// subtype)); what fails stays pending for the next call. `who` names the caller in the log.
pub(crate) fn write_drop_counts(
    pending: &mut PendingDrops,
    store: &dyn Store,
    metrics: &SharedMetrics,
    who: &str,
) {
    if pending.is_empty() {
        return;
    }
    let mut errors = 0;
    for (key, dropped) in std::mem::take(pending) {
        let counts = Counts {
            dropped,
            ..Counts::default()
        };
        if let Err(e) = store.add_counts(key.0, &key.1, &key.2, &key.3, &counts) {
            errors += 1;
            if errors == 1 {
                eprintln!("sluice-server: recording {who} drops (will retry): {e}");
            }
            pending.insert(key, counts.dropped);
        }
    }
    if errors > 0 {
        metrics.store_errors.inc_by(errors);
    }
}

impl Pipeline {
    /// Adds one ingest drop to the pending counts (see [`note_drop`]).
    pub(super) fn note_drop(&mut self, d: &Drop, now: i64) {
        note_drop(&mut self.pending_drops, d, now, &self.dc);
    }

    /// Adds drops reported by clients (`POST /v1/drops`) to the pending counts (the caller
    /// writes them at once; what fails is retried each tick like ingest drops).
    pub(super) fn add_client_drops(&mut self, drops: PendingDrops) {
        for (key, reasons) in drops {
            for (reason, n) in reasons {
                add_named(&mut self.pending_drops, key.clone(), &reason, n);
            }
        }
    }

    /// Adds the pending ingest drops to the store's counts; what fails stays pending for the
    /// next tick.
    pub(super) fn write_drop_counts(&mut self) {
        write_drop_counts(
            &mut self.pending_drops,
            self.store.as_ref(),
            &self.metrics,
            "ingest",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_collector::{IngestConfig, Ingestor};

    #[test]
    fn drops_counted_under_their_tags_or_the_fallback() {
        let mut ingestor = Ingestor::new(IngestConfig {
            dc: "ams1".into(),
            max_event_bytes: 60,
            ..Default::default()
        })
        .unwrap();
        let now = 1_700_000_000;
        let payload = format!(
            r#"[{{"epoch":{now},"dc":"x","type":"t","subtype":"s","big":[1,2,3,4,5,6,7,8,9]}}, 42, {{"type":"u","epoch":"soon"}}]"#
        );
        let out = ingestor.ingest(payload.as_bytes(), now);
        let mut pending = PendingDrops::new();
        for d in &out.dropped {
            note_drop(&mut pending, d, now, "ams1");
        }
        let got: Vec<_> = pending.into_iter().collect();
        let one = |r: &str| BTreeMap::from([(r.to_string(), 1)]);
        assert_eq!(
            got,
            vec![
                (
                    (now, "ams1".into(), String::new(), String::new()),
                    one("not_a_map")
                ),
                (
                    (now, "ams1".into(), "u".into(), String::new()),
                    one("bad_epoch")
                ),
                ((now, "x".into(), "t".into(), "s".into()), one("oversized")),
            ]
        );
    }
}
