//! Rollups named in the configuration (`[[rollups]]` in TOML), and with `--statsd` one per
//! statsd metric type ([`statsd_rollups`]): registered at start, before the substream runner
//! reads its registry, so they run on the first stored blob.
//!
//! A name already registered with the same definition is left as it is (restarts change
//! nothing); with another definition the start is refused: its stored states were made by the
//! old one, and mixing them would be read as one rollup (`sluice rollup rm NAME` first).

use sluice_store::Store;
use sluice_substreams::registry::{self, Error as RegistryError};
use sluice_substreams::Spec;

use crate::error::Error;

/// The statsd step: statsd's own flush interval (10 s).
pub const STATSD_STEP: &str = "10s";

/// The rollups every statsd metric lands in: one per type, grouped by metric name and tags
/// (the events `sluice-statsd` makes: `type = "statsd"`, `subtype` the metric type, `value`).
///
/// | rollup | subtype | aggregates per 10 s and (name, tags) |
/// |---|---|---|
/// | `statsd_counter` | `counter` | `count` (lines), `sum:value` (the count, sample rates applied) |
/// | `statsd_gauge` | `gauge` | `count`, `min:value`, `max:value`, `avg:value` of the values set (`+`/`-` changes left out: `not exists delta`) |
/// | `statsd_timer`, `statsd_histogram`, `statsd_distribution` | `timer`, `histogram`, `distribution` | `count`, `sum:value`, `min:value`, `max:value`, `p50:value`, `p95:value`, `p99:value` |
/// | `statsd_set` | `set` | `count`, `distinct:value` (unique members, HyperLogLog) |
pub fn statsd_rollups() -> Vec<Spec> {
    let timing = [
        "count",
        "sum:value",
        "min:value",
        "max:value",
        "p50:value",
        "p95:value",
        "p99:value",
    ];
    let kinds: [(&str, &[&str], Option<&str>); 6] = [
        ("counter", &["count", "sum:value"], None),
        (
            "gauge",
            &["count", "min:value", "max:value", "avg:value"],
            Some("not exists delta"),
        ),
        ("timer", &timing, None),
        ("histogram", &timing, None),
        ("distribution", &timing, None),
        ("set", &["count", "distinct:value"], None),
    ];
    kinds
        .iter()
        .map(|(subtype, aggs, filter)| Spec {
            name: format!("statsd_{subtype}"),
            type_: Some("statsd".into()),
            subtype: Some((*subtype).into()),
            where_: filter.map(str::to_owned),
            group_by: vec!["name".into(), "tags".into()],
            agg: aggs.iter().map(|a| (*a).to_owned()).collect(),
            step: Some(STATSD_STEP.into()),
            ..Spec::default()
        })
        .collect()
}

/// Registers each of `specs` that is not registered yet (see the module docs).
pub fn register(store: &dyn Store, specs: &[Spec], now: i64) -> Result<usize, Error> {
    let mut added = 0;
    for spec in specs {
        let bad = |e: RegistryError| Error::Config(format!("rollup {:?}: {e}", spec.name));
        if spec.agg.is_empty() {
            return Err(Error::Config(format!(
                "rollup {:?}: needs agg = [\"count\", …]",
                spec.name
            )));
        }
        let want = registry::validate(spec, now, None).map_err(bad)?;
        match registry::get(store, &spec.name) {
            Ok(have) => {
                let same = have.transform == want.transform
                    && (&have.dc, &have.type_, &have.subtype)
                        == (&want.dc, &want.type_, &want.subtype);
                if !same {
                    return Err(Error::Config(format!(
                        "rollup {:?} in the configuration differs from the one registered \
                         (its stored states were made by that one): `sluice rollup rm {}` first",
                        spec.name, spec.name
                    )));
                }
            }
            Err(RegistryError::NotFound(_)) => {
                registry::add(store, spec, now, None).map_err(bad)?;
                added += 1;
            }
            Err(e) => return Err(bad(e)),
        }
    }
    Ok(added)
}
