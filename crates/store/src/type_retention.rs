//! [`TypeRetention`]: how long each event type (or type and subtype) is kept when it differs from
//! the store's default — the one owner of that rule for both tiers (blobs and column files).
//!
//! | rule | matches | example |
//! |---|---|---|
//! | `TYPE/SUBTYPE` | that subtype of that type | `WEB/error = 90 days` |
//! | `TYPE` | the type's other subtypes | `WEB = 30 days` |
//! | (none) | every other group, and derived data (substream outputs) | the default, 10 days |
//!
//! A store keeps each time partition for the *longest* of these ([`TypeRetention::longest`]);
//! the groups whose own retention ends earlier are removed from a partition once all of that
//! partition lies past their retention (the embedded store rewrites the partition without them:
//! `embedded/purge.rs`; a Cassandra write carries its group's TTL).

use std::collections::BTreeMap;

use crate::error::{Result, StoreError};

/// Retention per `(type, subtype)` group, overriding a default period. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRetention {
    /// Seconds every group without a rule is kept.
    default_secs: i64,
    /// Seconds kept, by `(type, Some(subtype))` or `(type, None)`.
    rules: BTreeMap<(String, Option<String>), i64>,
}

impl Default for TypeRetention {
    /// The default retention of blobs, 10 days, and no rule.
    fn default() -> Self {
        TypeRetention::new(crate::Retention::default().period_secs)
    }
}

impl TypeRetention {
    /// No rule yet: every group keeps `default_secs`.
    pub fn new(default_secs: i64) -> Self {
        TypeRetention {
            default_secs,
            rules: BTreeMap::new(),
        }
    }

    /// Seconds every group without a rule is kept.
    pub fn default_secs(&self) -> i64 {
        self.default_secs
    }

    /// Adds the rule `TYPE` or `TYPE/SUBTYPE` (as written in flags and TOML keys) keeping its
    /// group `secs` seconds (at least one second; a later rule for the same key replaces it).
    pub fn insert(&mut self, key: &str, secs: i64) -> Result<()> {
        let (type_, subtype) = match key.split_once('/') {
            Some((t, s)) => (t.trim(), Some(s.trim())),
            None => (key.trim(), None),
        };
        let bad = |why: &str| {
            StoreError::invalid(format!(
                "retention rule {key:?}: {why}; expected TYPE or TYPE/SUBTYPE"
            ))
        };
        if type_.is_empty() || subtype == Some("") {
            return Err(bad("an empty name"));
        }
        if key.contains([':', '\0']) {
            return Err(bad("a name holds ':' or NUL"));
        }
        if secs <= 0 {
            return Err(bad("a retention must be at least one day"));
        }
        self.rules
            .insert((type_.to_owned(), subtype.map(str::to_owned)), secs);
        Ok(())
    }

    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Seconds the group `(type, subtype)` is kept: its subtype's rule, else its type's, else
    /// the default.
    pub fn keep_secs(&self, type_: &str, subtype: &str) -> i64 {
        // Two lookups without allocating: the map is small and read per group, not per event.
        self.rules
            .iter()
            .find(|((t, s), _)| t == type_ && s.as_deref() == Some(subtype))
            .or_else(|| {
                self.rules
                    .iter()
                    .find(|((t, s), _)| t == type_ && s.is_none())
            })
            .map_or(self.default_secs, |(_, secs)| *secs)
    }

    /// The longest period kept, rules and default together: how long a time partition that
    /// holds every group must live.
    pub fn longest(&self) -> i64 {
        self.rules
            .values()
            .copied()
            .fold(self.default_secs, i64::max)
    }

    /// The shortest period kept, rules and default together: no partition younger than this
    /// holds anything to remove.
    pub fn shortest(&self) -> i64 {
        self.rules
            .values()
            .copied()
            .fold(self.default_secs, i64::min)
    }

    /// The shortest and the longest period any subtype of `type_` is kept (its subtype rules,
    /// and its type rule or the default for the other subtypes).
    pub fn bounds_for_type(&self, type_: &str) -> (i64, i64) {
        let base = self
            .rules
            .get(&(type_.to_owned(), None))
            .copied()
            .unwrap_or(self.default_secs);
        self.rules
            .iter()
            .filter(|((t, s), _)| t == type_ && s.is_some())
            .fold((base, base), |(lo, hi), (_, secs)| {
                (lo.min(*secs), hi.max(*secs))
            })
    }

    /// The rules as `(TYPE or TYPE/SUBTYPE, seconds)`, for display.
    pub fn rules(&self) -> impl Iterator<Item = (String, i64)> + '_ {
        self.rules.iter().map(|((t, s), secs)| match s {
            Some(s) => (format!("{t}/{s}"), *secs),
            None => (t.clone(), *secs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subtype_rule_wins_then_the_type_then_the_default() {
        let mut r = TypeRetention::new(10);
        r.insert("WEB", 30).unwrap();
        r.insert("WEB/error", 90).unwrap();
        r.insert("DEBUG", 1).unwrap();
        assert_eq!(r.keep_secs("WEB", "error"), 90);
        assert_eq!(r.keep_secs("WEB", ""), 30);
        assert_eq!(r.keep_secs("WEB", "ok"), 30);
        assert_eq!(r.keep_secs("DEBUG", "x"), 1);
        assert_eq!(r.keep_secs("APP", "x"), 10);
        assert_eq!(r.longest(), 90);
        assert_eq!(r.bounds_for_type("WEB"), (30, 90));
        assert_eq!(r.bounds_for_type("APP"), (10, 10));
        assert_eq!(r.shortest(), 1);
        assert_eq!(
            r.rules().collect::<Vec<_>>(),
            [
                ("DEBUG".into(), 1),
                ("WEB".into(), 30),
                ("WEB/error".into(), 90)
            ]
        );
    }

    #[test]
    fn bad_rules_are_refused_with_the_rule_named() {
        let mut r = TypeRetention::default();
        for (key, secs) in [("", 5), ("/x", 5), ("WEB/", 5), ("W:B", 5), ("WEB", 0)] {
            let e = r.insert(key, secs).unwrap_err().to_string();
            assert!(e.contains(&format!("{key:?}")), "{e}");
        }
        assert!(r.is_empty());
    }
}
