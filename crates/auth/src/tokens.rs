//! The tokens a server checks requests against.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use sluice_store::Store;

use crate::secret::hash_matches;
use crate::{Allowed, AuthError, Scope, Scopes, Secret, TokenRecord, TokenSpec};

/// The catalog kind of token records.
pub const CATALOG_KIND: &str = "tokens";
/// How often a server reads the catalog again (tokens made or revoked by another server that
/// shares the store take effect within this).
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Why a request was refused; `as_str` is the `/metrics` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No credentials where they are needed.
    Missing,
    /// An `Authorization` header that is not `Bearer <secret>`.
    Malformed,
    /// A secret no token has.
    Unknown,
    /// The token expired.
    Expired,
    /// The token was revoked.
    Revoked,
    /// The token lacks the scope.
    Scope,
    /// The token does not reach those dcs or types.
    Types,
}

impl Refusal {
    /// The `/metrics` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::Unknown => "unknown",
            Refusal::Expired => "expired",
            Refusal::Revoked => "revoked",
            Refusal::Scope => "scope",
            Refusal::Types => "types",
        }
    }

    /// Whether the answer is 401 (who are you) rather than 403 (not allowed).
    pub fn unauthenticated(self) -> bool {
        matches!(
            self,
            Refusal::Missing
                | Refusal::Malformed
                | Refusal::Unknown
                | Refusal::Expired
                | Refusal::Revoked
        )
    }

    /// A sentence for the error body.
    pub fn message(self, need: Scope) -> String {
        match self {
            Refusal::Missing => format!(
                "a token with scope {} is needed: Authorization: Bearer <token> (sluice token create)",
                need.as_str()
            ),
            Refusal::Malformed => "Authorization: expected Bearer sluice_<id>_<secret>".into(),
            Refusal::Unknown => "unknown token".into(),
            Refusal::Expired => "token expired".into(),
            Refusal::Revoked => "token revoked".into(),
            Refusal::Scope => format!("this token lacks scope {}", need.as_str()),
            Refusal::Types => "this token does not reach these dcs or types".into(),
        }
    }
}

/// Who a request is, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The token's name (`local` for the per-start secret, `anonymous` without credentials).
    pub name: String,
    /// Its scopes.
    pub scopes: Scopes,
    /// Its reach.
    pub allowed: Allowed,
}

impl Grant {
    /// Whoever the server lets in without credentials (open mode, loopback).
    pub fn anonymous() -> Grant {
        Grant {
            name: "anonymous".into(),
            scopes: Scopes::from(vec![Scope::Ingest, Scope::Read]),
            allowed: Allowed::default(),
        }
    }

    /// Whether it has `scope`.
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.has(scope)
    }
}

/// The tokens of one store, and the server's local secret.
pub struct Tokens {
    store: Arc<dyn Store>,
    records: RwLock<HashMap<String, TokenRecord>>,
    /// The hash of the local secret (hashed once, not per request).
    local: Option<String>,
    refreshed: RwLock<Instant>,
}

impl Tokens {
    /// Reads the tokens of `store`'s catalog; `local` is the per-start secret (any scope). A
    /// store that cannot be read now (a cluster that is down at start) is said on stderr and
    /// read again every [`REFRESH_EVERY`]: meanwhile only the local secret is known, so token
    /// holders are refused (closed, not open).
    pub fn load(store: Arc<dyn Store>, local: Option<Secret>) -> Result<Tokens, AuthError> {
        let t = Tokens {
            store,
            records: RwLock::new(HashMap::new()),
            local: local.map(|s| s.hash_hex()),
            refreshed: RwLock::new(Instant::now()),
        };
        if let Err(e) = t.refresh() {
            eprintln!(
                "sluice-auth: {e}; read again every {} s",
                REFRESH_EVERY.as_secs()
            );
        }
        Ok(t)
    }

    /// Reads the catalog again.
    pub fn refresh(&self) -> Result<(), AuthError> {
        let raw = self
            .store
            .get_catalog(CATALOG_KIND)
            .map_err(|source| AuthError::Catalog {
                what: "reading the tokens".into(),
                source,
            })?;
        let mut records = HashMap::with_capacity(raw.len());
        for (id, bytes) in raw {
            match serde_json::from_slice::<TokenRecord>(&bytes) {
                Ok(r) if r.id == id => {
                    records.insert(id, r);
                }
                // A record that does not parse grants nothing; said once per refresh.
                _ => eprintln!("sluice-auth: token record {id:?} does not parse: ignored"),
            }
        }
        *self.records.write().unwrap_or_else(|e| e.into_inner()) = records;
        *self.refreshed.write().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Ok(())
    }

    /// Reads the catalog again if it was read more than [`REFRESH_EVERY`] ago (errors keep the
    /// tokens known). A server refreshes off the request path instead (a store read may wait).
    pub fn refresh_if_due(&self) {
        let due = self
            .refreshed
            .read()
            .map_or(true, |t| t.elapsed() >= REFRESH_EVERY);
        if due {
            if let Err(e) = self.refresh() {
                eprintln!("sluice-auth: {e}");
                *self.refreshed.write().unwrap_or_else(|e| e.into_inner()) = Instant::now();
            }
        }
    }

    /// Whether any token exists (revoked ones aside).
    pub fn any(&self) -> bool {
        self.records
            .read()
            .is_ok_and(|r| r.values().any(|t| t.revoked.is_none()))
    }

    /// Checks `secret` (from [`crate::bearer`]) at Unix time `now`: the grant, or why not. The
    /// local secret grants every scope.
    pub fn check(&self, secret: &Secret, now: i64) -> Result<Grant, Refusal> {
        let presented = secret.hash();
        if let Some(local) = &self.local {
            if hash_matches(&presented, local) {
                return Ok(Grant {
                    name: "local".into(),
                    scopes: Scopes::all(),
                    allowed: Allowed::default(),
                });
            }
        }
        let records = self.records.read().unwrap_or_else(|e| e.into_inner());
        let Some(r) = records.get(secret.id()) else {
            return Err(Refusal::Unknown);
        };
        if !hash_matches(&presented, &r.hash) {
            return Err(Refusal::Unknown);
        }
        if r.revoked.is_some() {
            return Err(Refusal::Revoked);
        }
        if r.spec.expires.is_some_and(|e| now >= e) {
            return Err(Refusal::Expired);
        }
        Ok(Grant {
            name: r.spec.name.clone(),
            scopes: r.spec.scopes.clone(),
            allowed: r.spec.allowed.clone(),
        })
    }

    /// Makes a token: its record goes to the catalog, its secret is returned (shown once).
    pub fn create(&self, spec: TokenSpec, now: i64) -> Result<(Secret, TokenRecord), AuthError> {
        spec.validate()?;
        if self
            .list()
            .iter()
            .any(|r| r.spec.name == spec.name && r.revoked.is_none())
        {
            return Err(AuthError::NameTaken(spec.name));
        }
        let secret = Secret::generate()?;
        let record = TokenRecord {
            id: secret.id().to_string(),
            spec,
            created: now,
            revoked: None,
            hash: secret.hash_hex(),
        };
        self.put(&record)?;
        Ok((secret, record))
    }

    /// Revokes the token named or with the id `which` (at once here).
    pub fn revoke(&self, which: &str, now: i64) -> Result<TokenRecord, AuthError> {
        let mut r = self
            .list()
            .into_iter()
            .find(|r| r.revoked.is_none() && (r.id == which || r.spec.name == which))
            .ok_or_else(|| AuthError::NotFound(which.to_string()))?;
        r.revoked = Some(now);
        self.put(&r)?;
        Ok(r)
    }

    /// Every record, by name.
    pub fn list(&self) -> Vec<TokenRecord> {
        let mut v: Vec<TokenRecord> = self
            .records
            .read()
            .map(|r| r.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| (&a.spec.name, a.created).cmp(&(&b.spec.name, b.created)));
        v
    }

    fn put(&self, r: &TokenRecord) -> Result<(), AuthError> {
        let bytes = serde_json::to_vec(r)?;
        self.store
            .put_catalog(CATALOG_KIND, &r.id, Some(&bytes))
            .map_err(|source| AuthError::Catalog {
                what: format!("storing token {}", r.spec.name),
                source,
            })?;
        self.records
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(r.id.clone(), r.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_store::InMemoryStore;

    fn spec(name: &str, scopes: &str, types: &str, expires: Option<i64>) -> TokenSpec {
        TokenSpec {
            name: name.into(),
            scopes: Scopes::parse(scopes).unwrap(),
            allowed: Allowed::parse("", types).unwrap(),
            expires,
        }
    }

    #[test]
    fn create_check_expire_revoke_and_reload() {
        let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
        let local = Secret::generate().unwrap();
        let t = Tokens::load(store.clone(), Some(local.clone())).unwrap();
        assert!(!t.any());
        let (s, _) = t
            .create(spec("web", "read", "WEB", Some(1000)), 10)
            .unwrap();
        assert!(t.any());
        let g = t.check(&s, 999).unwrap();
        assert_eq!(g.name, "web");
        assert!(g.has(Scope::Read) && !g.has(Scope::Ingest));
        assert!(g.allowed.allows("x", "WEB") && !g.allowed.allows("x", "LB"));
        assert_eq!(t.check(&s, 1000), Err(Refusal::Expired));
        assert_eq!(
            t.check(&Secret::generate().unwrap(), 0),
            Err(Refusal::Unknown)
        );
        assert!(
            t.create(spec("web", "read", "", None), 11).is_err(),
            "names are unique"
        );
        // Another server sharing the store sees it after a refresh; a revoke is at once here.
        let other = Tokens::load(store.clone(), None).unwrap();
        assert_eq!(other.check(&s, 20).unwrap().name, "web");
        t.revoke("web", 30).unwrap();
        assert_eq!(t.check(&s, 31), Err(Refusal::Revoked));
        other.refresh().unwrap();
        assert_eq!(other.check(&s, 31), Err(Refusal::Revoked));
        assert_eq!(t.check(&local, 0).unwrap().name, "local");
        assert_eq!(other.check(&local, 0), Err(Refusal::Unknown));
        // The catalog keeps no secret.
        let raw = store.get_catalog(CATALOG_KIND).unwrap();
        assert!(raw
            .values()
            .all(|v| !String::from_utf8_lossy(v).contains(s.expose())));
    }

    /// A store that is down at start (Cassandra) does not stop the start; tokens are refused
    /// until the catalog can be read, then work.
    #[test]
    fn a_store_down_at_start_is_read_again_later() {
        let (store, faults) = sluice_store::FaultyStore::new(InMemoryStore::new());
        let store: Arc<dyn Store> = Arc::new(store);
        let (s, _) = Tokens::load(store.clone(), None)
            .unwrap()
            .create(spec("t", "read", "", None), 1)
            .unwrap();
        faults.fail_reads(true);
        let t = Tokens::load(store, None).unwrap();
        assert_eq!(t.check(&s, 2), Err(Refusal::Unknown));
        faults.fail_reads(false);
        t.refresh().unwrap();
        assert_eq!(t.check(&s, 2).unwrap().name, "t");
    }

    #[test]
    fn a_secret_with_a_known_id_but_another_hash_is_unknown() {
        let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
        let t = Tokens::load(store, None).unwrap();
        let (s, _) = t.create(spec("a", "ingest", "", None), 1).unwrap();
        let forged = format!("{}{}", &s.expose()[..16], "A".repeat(43));
        let forged = Secret::parse(&forged).unwrap();
        assert_eq!(forged.id(), s.id());
        assert_eq!(t.check(&forged, 2), Err(Refusal::Unknown));
    }
}
