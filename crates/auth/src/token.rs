//! What a token is: its scopes, its reach, its life; and how its record is kept.

use serde::{Deserialize, Serialize};

use crate::{Allowed, SpecError};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Send events (HTTP `POST /v1/events`, TCP).
    Ingest,
    /// Read events, tails, counts, blobs, substream results and `/metrics`.
    Read,
    /// Register substreams (Python code included), manage tokens, run store operations.
    Admin,
}

impl Scope {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ingest => "ingest",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Scope, SpecError> {
        match s.trim() {
            "ingest" => Ok(Scope::Ingest),
            "read" => Ok(Scope::Read),
            "admin" => Ok(Scope::Admin),
            other => Err(SpecError(format!(
                "unknown scope {other:?}: ingest, read or admin"
            ))),
        }
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    /// From a comma-separated list (`"ingest,read"`); at least one.
    pub fn parse(text: &str) -> Result<Scopes, SpecError> {
        let mut v: Vec<Scope> = text
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        v.sort();
        v.dedup();
        if v.is_empty() {
            return Err(SpecError(
                "at least one scope: ingest, read or admin".into(),
            ));
        }
        Ok(Scopes(v))
    }

    /// Every scope.
    pub fn all() -> Scopes {
        Scopes::from(vec![Scope::Ingest, Scope::Read, Scope::Admin])
    }
}

impl From<Vec<Scope>> for Scopes {
    /// These scopes (sorted, without repeats).
    fn from(mut v: Vec<Scope>) -> Scopes {
        v.sort();
        v.dedup();
        Scopes(v)
    }
}

impl Scopes {
    /// Whether `scope` is among them.
    pub fn has(&self, scope: Scope) -> bool {
        self.0.contains(&scope)
    }

    /// `"ingest,read"`.
    pub fn to_text(&self) -> String {
        self.0
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What `sluice token create` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSpec {
    /// A name for people and the audit log (`[A-Za-z0-9._-]`, at most 64).
    pub name: String,
    /// Its scopes.
    pub scopes: Scopes,
    /// Its reach (every dc and type when empty).
    #[serde(default)]
    pub allowed: Allowed,
    /// Unix seconds after which it no longer works (`None`: never expires).
    #[serde(default)]
    pub expires: Option<i64>,
}

impl TokenSpec {
    /// Checks the name.
    pub fn validate(&self) -> Result<(), SpecError> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 64
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(SpecError(format!(
                "token name {n:?}: 1 to 64 characters of A-Z a-z 0-9 . _ -"
            )));
        }
        Ok(())
    }
}

/// A token as the catalog keeps it (JSON): never the secret, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The public id (the secret's `sluice_<id>_…` part; the catalog name).
    pub id: String,
    /// Name, scopes, reach, expiry.
    #[serde(flatten)]
    pub spec: TokenSpec,
    /// Unix seconds it was made.
    pub created: i64,
    /// Unix seconds it was revoked (kept, so a revoked token is refused as such).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<i64>,
    /// SHA-256 of the secret, hex.
    pub hash: String,
}

impl TokenRecord {
    /// The record without its hash, for listings.
    pub fn public(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "name": self.spec.name,
            "scopes": self.spec.scopes.to_text(),
            "dcs": self.spec.allowed.dcs,
            "types": self.spec.allowed.types,
            "created": self.created,
            "expires": self.spec.expires,
            "revoked": self.revoked,
        })
    }
}
