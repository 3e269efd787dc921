//! Rollups named in the configuration (`[[rollups]]` in TOML): registered at start, before the
//! substream runner reads its registry, so they run on the first stored blob.
//!
//! A name already registered with the same definition is left as it is (restarts change
//! nothing); with another definition the start is refused: its stored states were made by the
//! old one, and mixing them would be read as one rollup (`sluice rollup rm NAME` first).

use sluice_store::Store;
use sluice_substreams::registry::{self, Error as RegistryError};
use sluice_substreams::Spec;

use crate::error::Error;

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
