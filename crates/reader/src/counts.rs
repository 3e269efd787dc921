//! Completeness counts of a time range ([`read_counts`]): for each `(epoch, dc, type, subtype)`,
//! the events stored, stored late, dropped per reason and lost by the kernel — what
//! `GET /v1/counts` and `sluice counts` answer (see the server README, "Completeness counts").
//!
//! Contracts: the `(epoch, dc)` pairs come from the store's epoch index; for ranges up to
//! [`MAX_COUNTS_PROBE_SECS`] every second of `probe_dc` is also asked for counts, so seconds
//! whose events were all dropped (no blob, no index entry) are listed too. Rows come in epoch
//! order, then dc, type, subtype. Reads only.

use std::collections::{BTreeMap, BTreeSet};

use sluice_store::{Counts, ReadStore, StoreError};

/// Widest `to - from` for which every second of the probed dc is asked for counts without an
/// epoch index (seconds whose events were all dropped).
pub const MAX_COUNTS_PROBE_SECS: i64 = 3600;

/// The counts of one `(epoch, dc, type, subtype)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountsRow {
    /// The second.
    pub epoch: i64,
    /// The datacenter.
    pub dc: String,
    /// The event type (`""`: what could not be attributed to a type).
    pub type_: String,
    /// The subtype.
    pub subtype: String,
    /// The counts.
    pub counts: Counts,
}

impl CountsRow {
    /// The row as one JSON object, the `/v1/counts` line:
    /// `{"epoch","dc","type","subtype","stored","late","dropped":{reason: n},"kernel_dropped"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "epoch": self.epoch,
            "dc": self.dc,
            "type": self.type_,
            "subtype": self.subtype,
            "stored": self.counts.stored,
            "late": self.counts.late,
            "dropped": self.counts.dropped,
            "kernel_dropped": self.counts.kernel_dropped,
        })
    }
}

impl CountsRow {
    /// Parses a line made by [`to_json`](CountsRow::to_json) (as `GET /v1/counts` sends it).
    pub fn from_json(v: &serde_json::Value) -> Option<CountsRow> {
        let text = |k: &str| v[k].as_str().map(str::to_owned);
        let dropped = v["dropped"]
            .as_object()?
            .iter()
            .map(|(reason, n)| Some((reason.clone(), n.as_u64()?)))
            .collect::<Option<BTreeMap<String, u64>>>()?;
        Some(CountsRow {
            epoch: v["epoch"].as_i64()?,
            dc: text("dc")?,
            type_: text("type")?,
            subtype: text("subtype")?,
            counts: Counts {
                stored: v["stored"].as_u64()?,
                late: v["late"].as_u64()?,
                dropped,
                kernel_dropped: v["kernel_dropped"].as_u64()?,
            },
        })
    }
}

/// The counts of `from <= epoch < to`, of one `dc` or all; `probe_dc` is the dc whose every
/// second is probed (for ranges up to [`MAX_COUNTS_PROBE_SECS`]).
pub fn read_counts<S: ReadStore + ?Sized>(
    store: &S,
    from: i64,
    to: i64,
    dc: Option<&str>,
    probe_dc: Option<&str>,
) -> Result<Vec<CountsRow>, StoreError> {
    let mut pairs: BTreeSet<(i64, String)> = store.list_epochs(dc, from, to)?.into_iter().collect();
    let mut fetched = BTreeMap::new();
    if let Some(probe) = probe_dc.filter(|_| to > from && to - from <= MAX_COUNTS_PROBE_SECS) {
        for epoch in from..to {
            let pair = (epoch, probe.to_owned());
            if pairs.contains(&pair) {
                continue;
            }
            let c = store.get_counts(epoch, probe)?;
            if !c.is_empty() {
                pairs.insert(pair.clone());
                fetched.insert(pair, c);
            }
        }
    }
    let mut rows = Vec::new();
    for pair in pairs {
        let counts = match fetched.remove(&pair) {
            Some(c) => c,
            None => store.get_counts(pair.0, &pair.1)?,
        };
        for ((type_, subtype), counts) in counts {
            rows.push(CountsRow {
                epoch: pair.0,
                dc: pair.1.clone(),
                type_,
                subtype,
                counts,
            });
        }
    }
    Ok(rows)
}

/// The rows summed over their epochs, one per `(dc, type, subtype)`: how complete the range is.
pub fn totals(rows: &[CountsRow]) -> Vec<CountsRow> {
    let mut sums: BTreeMap<(String, String, String), (i64, Counts)> = BTreeMap::new();
    for r in rows {
        let slot = sums
            .entry((r.dc.clone(), r.type_.clone(), r.subtype.clone()))
            .or_insert_with(|| (r.epoch, Counts::default()));
        slot.0 = slot.0.min(r.epoch);
        slot.1.merge(&r.counts);
    }
    sums.into_iter()
        .map(|((dc, type_, subtype), (epoch, counts))| CountsRow {
            epoch,
            dc,
            type_,
            subtype,
            counts,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_store::{InMemoryStore, Store};

    #[test]
    fn indexed_epochs_and_probed_seconds_in_order() {
        let s = InMemoryStore::new();
        let c = |stored| Counts {
            stored,
            ..Counts::default()
        };
        s.add_to_epoch_index(100, "ams", &["WEB::0"]).unwrap();
        s.add_counts(100, "ams", "WEB", "", &c(5)).unwrap();
        s.add_counts(101, "lhr", "CRON", "", &c(1)).unwrap(); // no index: only a probe finds it
        s.add_counts(102, "ams", "WEB", "", &c(2)).unwrap();
        s.add_to_epoch_index(102, "ams", &["WEB::0"]).unwrap();
        let rows = read_counts(&s, 100, 103, None, Some("lhr")).unwrap();
        let got: Vec<(i64, &str, u64)> = rows
            .iter()
            .map(|r| (r.epoch, r.dc.as_str(), r.counts.stored))
            .collect();
        assert_eq!(got, vec![(100, "ams", 5), (101, "lhr", 1), (102, "ams", 2)]);
        assert_eq!(read_counts(&s, 100, 103, None, None).unwrap().len(), 2);
        let t = totals(&rows);
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].dc.as_str(), t[0].counts.stored, t[0].epoch),
            ("ams", 7, 100)
        );
        assert_eq!(rows[0].to_json()["stored"], 5);
        assert_eq!(
            CountsRow::from_json(&rows[1].to_json()).as_ref(),
            Some(&rows[1])
        );
    }
}
