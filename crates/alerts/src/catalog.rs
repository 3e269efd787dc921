//! Rules and their states in the store's catalog: kind [`RULE_KIND`] (one JSON [`Rule`] per
//! name) and kind [`STATE_KIND`] (one JSON [`RuleState`] per rule name), so both survive a
//! restart and move with `sluice store copy`.

use std::collections::BTreeMap;

use sluice_store::{ReadStore, Store, StoreError};
use sluice_substreams::registry;

use crate::rule::{Rule, RuleSpec};
use crate::state::RuleState;

/// The catalog kind of rules.
pub const RULE_KIND: &str = "alert";
/// The catalog kind of rule states.
pub const STATE_KIND: &str = "alert-state";
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
/// alerts then start over, which re-sends at most what was firing).
pub fn load_state<S: ReadStore + ?Sized>(store: &S, name: &str) -> Result<RuleState, StoreError> {
    Ok(store
        .get_catalog(STATE_KIND)?
        .get(name)
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default())
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
