//! Tokens: who may do what on a Sluice server.
//!
//! - [`Scope`]: `ingest` (send events), `read` (read events, counts, blobs, `/metrics`),
//!   `admin` (substreams, tokens, store operations).
//! - [`Allowed`]: a token's restriction to dc and type patterns (`*` globs), for reading and for
//!   ingest: one team's token cannot read another team's events.
//! - [`Secret`]: `sluice_<id>_<43 base64url characters>` (32 random bytes). Shown once, at
//!   creation; the store keeps its SHA-256 only ([`TokenRecord`], in the catalog under kind
//!   [`CATALOG_KIND`]), and checks compare hashes in constant time.
//! - [`Tokens`]: the records in memory, checked per request ([`Tokens::check`]), created and
//!   revoked through the catalog (effective at once on this server, within
//!   [`REFRESH_EVERY`] on others sharing the store), and the server's per-start *local secret*
//!   (any scope; written to a file only the server's user reads).
//! - [`bearer`]: the one parser of `Authorization: Bearer …`.
//!
//! The routes each scope guards, and the threat model, are in `docs/security.md`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod allowed;
mod error;
mod secret;
mod token;
mod tokens;

pub use allowed::Allowed;
pub use error::{AuthError, SpecError};
pub use secret::{bearer, runtime_secret_path, Secret};
pub use token::{Scope, Scopes, TokenRecord, TokenSpec};
pub use tokens::{Grant, Refusal, Tokens, CATALOG_KIND, REFRESH_EVERY};
