//! Ingest drops in the completeness counts: each dropped event counted under its own tags when
//! they can be read ([`drop_tags`]), else under the documented fallback, and written to the store
//! with each tick.

use sluice_collector::{Drop, DropReason};
use sluice_store::Counts;

use super::Pipeline;

impl Pipeline {
    /// Adds one ingest drop to the pending counts, under the dropped event's own tags when they
    /// can be read (see [`drop_tags`]), else under `(now, configured dc, "", "")`.
    pub(super) fn note_drop(&mut self, payload: &[u8], d: &Drop, now: i64) {
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
    pub(super) fn write_drop_counts(&mut self) {
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
            self.metrics.store_errors.inc_by(errors);
        }
    }
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
            Some(serde_json::Value::Number(n)) if name == "dc" && (n.is_i64() || n.is_u64()) => {
                n.to_string()
            }
            _ => return None,
        };
        sluice_blob::key::check_tag(name, &s, allow_empty)
            .ok()
            .map(|()| s)
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
        assert_eq!(
            (t.epoch, t.dc.as_deref(), t.type_.as_str()),
            (Some(999), Some("7"), "u")
        );
        // A type ingest refuses (over 64 bytes) is not counted under that type.
        let long = format!(r#"[{{"type":"{}","x":1}}]"#, "t".repeat(100));
        let long = long.as_bytes();
        assert_eq!(
            drop_tags(long, &drop_at(long, "{", DropReason::BadTag), &w),
            None
        );
        let mut whole = drop_at(p, "[", DropReason::Oversized);
        whole.whole_payload = true;
        assert_eq!(drop_tags(p, &whole, &w), None);
    }
}
