//! What every client carries besides an address: a token and the TLS trust ([`ClientOptions`]),
//! and where a local server leaves its credentials ([`local_admin_secret`], [`self_signed_ca`]).
//!
//! - **Token.** Every HTTP request carries `Authorization: Bearer <token>` (unless the request
//!   sets its own); a TCP connection sends `auth <token>` first and expects `ok auth <name>`.
//!   UDP carries no credentials.
//! - **TLS.** `https://` servers and `tls://HOST:PORT` TCP targets are verified against the
//!   built-in web roots (Mozilla's, `webpki-roots`) plus the CA certificates of
//!   [`ClientOptions::ca`] (PEM, one or more: a private CA, or a server's self-signed
//!   certificate). [`ClientOptions::cert`] / [`ClientOptions::key`] present a client certificate
//!   (mutual TLS: required by a server with `tls_client_ca` on TCP ingest).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

use crate::{ClientError, Result};

/// Credentials and trust, shared by every client of this crate (readers, tails, senders,
/// admin).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// The token: `Authorization: Bearer` on HTTP, the `auth` first line on TCP.
    pub token: Option<String>,
    /// CA certificates (PEM) trusted besides the built-in roots.
    pub ca: Option<PathBuf>,
    /// A client certificate chain (PEM), with [`key`](Self::key).
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of [`cert`](Self::cert).
    pub key: Option<PathBuf>,
}

/// The environment variable of the token.
pub const TOKEN_ENV: &str = "SLUICE_TOKEN";
/// The environment variable of the CA file.
pub const CA_ENV: &str = "SLUICE_CA";

impl ClientOptions {
    /// The options of the environment: [`TOKEN_ENV`] and [`CA_ENV`] (empty values ignored).
    pub fn from_env() -> ClientOptions {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        ClientOptions {
            token: var(TOKEN_ENV).map(|t| t.trim().to_owned()),
            ca: var(CA_ENV).map(PathBuf::from),
            ..ClientOptions::default()
        }
    }

    /// The same options with `token` when none is set.
    pub fn or_token(mut self, token: Option<String>) -> ClientOptions {
        if self.token.is_none() {
            self.token = token;
        }
        self
    }

    /// The same options trusting `ca` when no CA is set.
    pub fn or_ca(mut self, ca: Option<PathBuf>) -> ClientOptions {
        if self.ca.is_none() {
            self.ca = ca;
        }
        self
    }

    /// Whether TLS needs a configuration of ours (a CA or a client certificate); otherwise
    /// `https://` uses the HTTP library's default (the built-in roots).
    pub(crate) fn custom_tls(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }

    /// The `Authorization` header value, if a token is set.
    pub(crate) fn bearer(&self) -> Option<String> {
        self.token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| format!("Bearer {t}"))
    }

    /// The rustls client configuration: the built-in roots plus [`ca`](Self::ca), the client
    /// certificate if any. An unreadable or empty file is an error naming it.
    pub fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(ca) = &self.ca {
            let certs = read_certs(ca, "--ca")?;
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| ClientError::Config(format!("--ca {}: {e}", ca.display())))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let config = match (&self.cert, &self.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "--client-cert")?;
                let pem = std::fs::read(key).map_err(|e| {
                    ClientError::Config(format!("--client-key {}: {e}", key.display()))
                })?;
                let private = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
                    ClientError::Config(format!(
                        "--client-key {}: no PEM private key: {e}",
                        key.display()
                    ))
                })?;
                builder.with_client_auth_cert(chain, private).map_err(|e| {
                    ClientError::Config(format!(
                        "--client-cert {} / --client-key {}: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?
            }
            _ => {
                return Err(ClientError::Config(
                    "--client-cert and --client-key go together".into(),
                ))
            }
        };
        Ok(Arc::new(config))
    }
}

/// The certificates of a PEM file (at least one).
fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path)
        .map_err(|e| ClientError::Config(format!("{flag} {}: {e}", path.display())))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| ClientError::Config(format!("{flag} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ClientError::Config(format!(
            "{flag} {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// The per-start local secret a server wrote to `<data_dir>/admin.secret` (one line, trimmed);
/// `None` when it is absent, unreadable or empty.
pub fn local_admin_secret(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join("admin.secret")).ok()?;
    let s = text.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// The certificate a server started with `--tls-self-signed` on `data_dir` wrote
/// (`<data_dir>/tls/self-signed.pem`), if there is one: the CA of a client reading that data
/// directory through its server.
pub fn self_signed_ca(data_dir: &Path) -> Option<PathBuf> {
    let p = data_dir.join("tls").join("self-signed.pem");
    p.is_file().then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_and_fallbacks() {
        let o = ClientOptions {
            token: Some(" sluice_a_b \n".into()),
            ..ClientOptions::default()
        };
        assert_eq!(o.bearer().as_deref(), Some("Bearer sluice_a_b"));
        assert_eq!(ClientOptions::default().bearer(), None);
        let blank = ClientOptions {
            token: Some("  ".into()),
            ..ClientOptions::default()
        };
        assert_eq!(blank.bearer(), None);
        let kept = o.clone().or_token(Some("other".into()));
        assert_eq!(kept.token, o.token);
        let filled = ClientOptions::default().or_token(Some("t".into()));
        assert_eq!(filled.token.as_deref(), Some("t"));
        assert!(!filled.custom_tls());
        assert!(filled.or_ca(Some("ca.pem".into())).custom_tls());
    }

    #[test]
    fn files_that_do_not_load() {
        let dir = std::env::temp_dir().join(format!("sluice-client-opts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "nothing here\n").unwrap();
        let e = ClientOptions {
            ca: Some(junk.clone()),
            ..ClientOptions::default()
        }
        .tls_config()
        .unwrap_err();
        assert!(e.to_string().contains("--ca"), "{e}");
        let missing = ClientOptions {
            ca: Some(dir.join("nope.pem")),
            ..ClientOptions::default()
        }
        .tls_config()
        .unwrap_err();
        assert!(missing.to_string().contains("nope.pem"), "{missing}");
        let half = ClientOptions {
            cert: Some(junk.clone()),
            ..ClientOptions::default()
        }
        .tls_config()
        .unwrap_err();
        assert!(half.to_string().contains("go together"), "{half}");
        assert!(ClientOptions::default().tls_config().is_ok());
        // The local secret: trimmed, absent or empty is None.
        assert_eq!(local_admin_secret(&dir), None);
        std::fs::write(dir.join("admin.secret"), "sluice_x_y\n").unwrap();
        assert_eq!(local_admin_secret(&dir).as_deref(), Some("sluice_x_y"));
        std::fs::write(dir.join("admin.secret"), "\n").unwrap();
        assert_eq!(local_admin_secret(&dir), None);
        assert_eq!(self_signed_ca(&dir), None);
        std::fs::create_dir_all(dir.join("tls")).unwrap();
        std::fs::write(dir.join("tls/self-signed.pem"), "x").unwrap();
        assert_eq!(self_signed_ca(&dir), Some(dir.join("tls/self-signed.pem")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
