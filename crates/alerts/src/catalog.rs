//! Rules and their states in the store's catalog: kind [`RULE_KIND`] (one JSON [`Rule`] per
//! name) and kind [`STATE_KIND`] (one JSON [`RuleState`] per rule name), so both survive a
//! restart and move with `sluice store copy`. The last step each rule evaluated is also kept in
//! one record for all rules ([`PROGRESS_KIND`]): the engine saves it every few seconds, a
//! rule's own state only when its alerts change — one catalog write instead of one per rule
//! (a catalog write rewrites the embedded store's catalog file: 1,000 rules saved one by one
//! every 10 s were most of the engine's cost, bench/alerts).

use std::collections::BTreeMap;

use sluice_store::{ReadStore, Store, StoreError};
use sluice_substreams::registry;

use crate::rule::{Rule, RuleSpec};
use crate::state::RuleState;

/// The catalog kind of rules.
pub const RULE_KIND: &str = "alert";
/// The catalog kind of rule states.
pub const STATE_KIND: &str = "alert-state";
/// The catalog kind of the last step evaluated of every rule: one record,
/// [`PROGRESS_NAME`], JSON `{"rule name": last_eval, …}`.
pub const PROGRESS_KIND: &str = "alert-progress";
/// The name of the one [`PROGRESS_KIND`] record.
pub const PROGRESS_NAME: &str = "last-eval";
/// Most notifications kept undelivered per rule (the oldest go first, counted by the engine).
pub const MAX_OUTBOX: usize = 1_000;

/// Why a change to the rules did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The request is invalid (HTTP 400): nothing changed.
    #[error("{0}")]
    Invalid(String),
    /// No such rule (HTTP 404).
    #[error("no alert rule named {0:?}")]
    NotFound(String),
    /// The name is taken (HTTP 409).
    #[error("an alert rule named {0:?} exists already (rm it first to change it)")]
    Exists(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// The rules as read: by name, and the records that did not parse (name, why).
pub type Loaded = (BTreeMap<String, Rule>, Vec<(String, String)>);

/// Every rule in `store`.
pub fn load_rules<S: ReadStore + ?Sized>(store: &S) -> Result<Loaded, StoreError> {
    let mut rules = BTreeMap::new();
    let mut bad = Vec::new();
    for (name, bytes) in store.get_catalog(RULE_KIND)? {
        match serde_json::from_slice::<Rule>(&bytes) {
            Ok(r) if r.name == name => {
                rules.insert(name, r);
            }
            Ok(r) => bad.push((name, format!("record names {:?}", r.name))),
            Err(e) => bad.push((name, e.to_string())),
        }
    }
    Ok((rules, bad))
}

/// The rule named `name`.
pub fn get_rule<S: ReadStore + ?Sized>(store: &S, name: &str) -> Result<Rule, CatalogError> {
    load_rules(store)?
        .0
        .remove(name)
        .ok_or_else(|| CatalogError::NotFound(name.to_owned()))
}

/// Checks `spec` against its rollup and stores it (an existing name is refused unless
/// `replace`, which keeps nothing of the old rule's state).
pub fn add(store: &dyn Store, spec: &RuleSpec, replace: bool) -> Result<Rule, CatalogError> {
    let def = registry::get(store, &spec.rollup).map_err(|e| match e {
        registry::Error::NotFound(n) => {
            CatalogError::Invalid(format!("alert rule {:?}: no rollup named {n:?}", spec.name))
        }
        other => CatalogError::Invalid(other.to_string()),
    })?;
    let (rule, _) = spec
        .check(&def)
        .map_err(|e| CatalogError::Invalid(e.to_string()))?;
    if load_rules(store)?.0.contains_key(&rule.name) {
        if !replace {
            return Err(CatalogError::Exists(rule.name));
        }
        store.put_catalog(STATE_KIND, &rule.name, None)?;
    }
    put_rule(store, &rule)?;
    Ok(rule)
}

/// Stores `rule` as it is.
pub fn put_rule(store: &dyn Store, rule: &Rule) -> Result<(), CatalogError> {
    let bytes = serde_json::to_vec(rule).map_err(|e| CatalogError::Invalid(e.to_string()))?;
    store.put_catalog(RULE_KIND, &rule.name, Some(&bytes))?;
    store.flush()?;
    Ok(())
}

/// Removes the rule `name` and its state.
pub fn remove(store: &dyn Store, name: &str) -> Result<(), CatalogError> {
    if !load_rules(store)?.0.contains_key(name) {
        return Err(CatalogError::NotFound(name.to_owned()));
    }
    store.put_catalog(RULE_KIND, name, None)?;
    store.put_catalog(STATE_KIND, name, None)?;
    store.flush()?;
    Ok(())
}

/// Silences (or, with `until` 0, unsilences) the rule `name`.
pub fn silence(store: &dyn Store, name: &str, until: i64) -> Result<Rule, CatalogError> {
    let mut rule = get_rule(store, name)?;
    rule.silenced_until = until;
    put_rule(store, &rule)?;
    Ok(rule)
}

/// The stored state of rule `name` (a fresh one when none, or when it does not parse: the
/// alerts then start over, which re-sends at most what was firing), its last step evaluated
/// the later of its own and the progress record's ([`put_progress`]).
pub fn load_state<S: ReadStore + ?Sized>(store: &S, name: &str) -> Result<RuleState, StoreError> {
    let Some(mut state) = store
        .get_catalog(STATE_KIND)?
        .get(name)
        .and_then(|b| serde_json::from_slice::<RuleState>(b).ok())
    else {
        // No state: a new rule, or one whose state was reset (a changed rule). The progress
        // record may still hold the old rule's last step until the engine writes it again.
        return Ok(RuleState::default());
    };
    if let Some(t) = load_progress(store)?.get(name) {
        state.last_eval = state.last_eval.max(*t);
    }
    Ok(state)
}

/// The last step evaluated of every rule, as the engine last saved them (empty when none, or
/// when the record does not parse: each rule's state then has its own, older).
pub fn load_progress<S: ReadStore + ?Sized>(
    store: &S,
) -> Result<BTreeMap<String, i64>, StoreError> {
    Ok(store
        .get_catalog(PROGRESS_KIND)?
        .get(PROGRESS_NAME)
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default())
}

/// Stores the last step evaluated of every rule in one record (read back by [`load_state`]).
pub fn put_progress(
    store: &dyn Store,
    last_evals: &BTreeMap<String, i64>,
) -> Result<(), CatalogError> {
    let bytes = serde_json::to_vec(last_evals)
        .map_err(|e| CatalogError::Invalid(format!("alert progress: {e}")))?;
    store.put_catalog(PROGRESS_KIND, PROGRESS_NAME, Some(&bytes))?;
    store.flush()?;
    Ok(())
}

/// Stores the state of rule `name` (the outbox cut to [`MAX_OUTBOX`], oldest first out; the
/// number cut is returned).
pub fn put_state(
    store: &dyn Store,
    name: &str,
    state: &mut RuleState,
) -> Result<usize, CatalogError> {
    let cut = state.outbox.len().saturating_sub(MAX_OUTBOX);
    state.outbox.drain(..cut);
    let bytes = serde_json::to_vec(state)
        .map_err(|e| CatalogError::Invalid(format!("alert state of {name:?}: {e}")))?;
    store.put_catalog(STATE_KIND, name, Some(&bytes))?;
    store.flush()?;
    Ok(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_store::EmbeddedStore;

    fn state(last_eval: i64) -> RuleState {
        RuleState {
            last_eval,
            ..RuleState::default()
        }
    }

    #[test]
    fn the_progress_record_moves_a_stored_state_forward_only() {
        let dir = tempfile::tempdir().expect("dir");
        let store = EmbeddedStore::open(dir.path()).expect("store");
        put_state(&store, "a", &mut state(100)).expect("put a");
        put_state(&store, "b", &mut state(500)).expect("put b");
        let progress: BTreeMap<String, i64> =
            [("a".into(), 160), ("b".into(), 400), ("c".into(), 90)].into();
        put_progress(&store, &progress).expect("progress");
        assert_eq!(load_progress(&store).expect("load"), progress);
        assert_eq!(load_state(&store, "a").expect("a").last_eval, 160);
        assert_eq!(
            load_state(&store, "b").expect("b").last_eval,
            500,
            "an older progress does not move a state back"
        );
        assert_eq!(
            load_state(&store, "c").expect("c"),
            RuleState::default(),
            "no state (a new or reset rule): the progress of an old one does not apply"
        );
    }
}
