//! TLS on HTTP and TCP ingest (rustls with the `ring` provider).
//!
//! Contracts:
//! - **TLS only.** With TLS on ([`ServerConfig::tls`]), both listeners speak TLS only. A
//!   connection whose first byte is not a TLS handshake record gets one plain-text refusal
//!   (HTTP: a 400 naming `https://`; TCP: `error tls …`) and is closed. A connection closed
//!   before its first byte (a port probe) is not counted; every other failed or timed-out
//!   handshake is counted in `sluice_tls_handshake_errors_total{transport}`.
//! - **Bounded handshakes.** The peek at the first byte and the handshake must finish within
//!   `http_header_timeout_secs` of the acceptance on HTTP (the same clock as the request head
//!   after it, counted as `kind="header"`), within `request_timeout_secs` on TCP
//!   (`kind="read"`). A connection in its handshake is idle: eviction and shutdown close it.
//! - **Reloads.** `tls_cert` / `tls_key` (PEM; a chain; PKCS#8, RSA or SEC1 keys) are read at
//!   start (a bad pair fails the start), then polled every [`RELOAD_POLL`] (modification time,
//!   size, inode). A changed pair is loaded for new connections (`sluice_tls_reloads_total
//!   {outcome="ok"}`, one line on stderr); one that does not load (unreadable, no certificate,
//!   a key that does not match) keeps the current certificate, is logged once and counted
//!   `outcome="error"`, and is tried again when the files change again (so a pair replaced file
//!   by file, key after certificate, settles on the next poll). Connections already open keep
//!   their session.
//! - **Self-signed.** `tls_self_signed` makes an ECDSA P-256 certificate at start for
//!   `localhost`, `127.0.0.1`, `::1` and the bound addresses (unspecified ones aside), writes it
//!   to `DATA/tls/self-signed.pem` (a client's CA file) and prints its SHA-256 fingerprint. Its
//!   key stays in memory; a new start makes a new certificate.
//! - **Client certificates.** With `tls_client_ca`, TCP ingest requires a client certificate
//!   chaining to that CA; HTTP asks for one and verifies it when presented, and serves clients
//!   without one too (tokens decide there). The CA file is read at start only.

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::config::ServerConfig;
use crate::error::{Error, Result};
use crate::limits::Slot;
use crate::metrics::SharedMetrics;

/// How often the certificate and key files are checked for a change.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);
/// Where `tls_self_signed` writes its certificate, under the data directory.
pub const SELF_SIGNED_FILE: &str = "tls/self-signed.pem";
/// The first byte of a TLS handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;
/// How long a plain-text client is kept to read its refusal.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// The server's TLS: an acceptor per listener over one reloadable certificate.
pub struct Tls {
    /// HTTP: client certificates optional (verified when presented, with `tls_client_ca`).
    pub http: TlsAcceptor,
    /// TCP ingest: client certificates required (with `tls_client_ca`).
    pub tcp: TlsAcceptor,
    current: Arc<CurrentCert>,
    /// The (certificate, key) files polled for a change; `None` for a self-signed certificate.
    files: Option<(PathBuf, PathBuf)>,
    provider: Arc<CryptoProvider>,
    metrics: SharedMetrics,
}

/// The certificate handed to new connections (swapped by a reload).
#[derive(Debug)]
struct CurrentCert(RwLock<Arc<CertifiedKey>>);

impl CurrentCert {
    fn get(&self) -> Arc<CertifiedKey> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, key: Arc<CertifiedKey>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = key;
    }
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

impl Tls {
    /// The TLS of `config` (`None` when TLS is off): the certificate read (or made, for
    /// `tls_self_signed`, naming `bound` addresses), the client CA read. Says what it serves on
    /// stderr. The reload poller starts with [`Tls::watch`].
    pub fn start(
        config: &ServerConfig,
        bound: &[IpAddr],
        metrics: SharedMetrics,
    ) -> Result<Option<Arc<Tls>>> {
        if !config.tls() {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (key, files) = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => {
                let k = load_pair(cert, key, &provider).map_err(Error::Config)?;
                eprintln!(
                    "sluice-server: TLS certificate {} (SHA-256 fingerprint {}), reloaded when it changes",
                    cert.display(),
                    fingerprint(&k.cert[0])
                );
                (k, Some((cert.clone(), key.clone())))
            }
            _ => {
                let (k, pem) = self_signed(bound, &provider).map_err(Error::Config)?;
                let path = config.data_dir.join(SELF_SIGNED_FILE);
                write_pem(&path, &pem).map_err(Error::Io)?;
                eprintln!(
                    "sluice-server: TLS self-signed certificate {}, SHA-256 fingerprint {}",
                    path.display(),
                    fingerprint(&k.cert[0])
                );
                (k, None)
            }
        };
        let current = Arc::new(CurrentCert(RwLock::new(Arc::new(key))));
        let (http_verifier, tcp_verifier) = match &config.tls_client_ca {
            None => (None, None),
            Some(ca) => {
                let roots = Arc::new(load_roots(ca).map_err(Error::Config)?);
                let build = |optional: bool| {
                    let b = WebPkiClientVerifier::builder_with_provider(
                        roots.clone(),
                        provider.clone(),
                    );
                    let b = if optional {
                        b.allow_unauthenticated()
                    } else {
                        b
                    };
                    b.build()
                        .map_err(|e| Error::Config(format!("tls_client_ca {}: {e}", ca.display())))
                };
                eprintln!(
                    "sluice-server: TLS client certificates of {}: required on TCP ingest, verified when presented on HTTP",
                    ca.display()
                );
                (Some(build(true)?), Some(build(false)?))
            }
        };
        let server_config =
            |verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
             alpn: &[&[u8]]|
             -> Result<TlsAcceptor> {
                let b = rustls::ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| Error::Config(format!("TLS: {e}")))?;
                let b = match verifier {
                    Some(v) => b.with_client_cert_verifier(v),
                    None => b.with_no_client_auth(),
                };
                let mut c = b.with_cert_resolver(current.clone());
                c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
                Ok(TlsAcceptor::from(Arc::new(c)))
            };
        Ok(Some(Arc::new(Tls {
            http: server_config(http_verifier, &[b"http/1.1"])?,
            tcp: server_config(tcp_verifier, &[])?,
            current,
            files,
            provider,
            metrics,
        })))
    }

    /// The end-entity certificate new connections get now.
    pub fn current_certificate(&self) -> CertificateDer<'static> {
        self.current.get().cert[0].clone()
    }

    /// Polls the certificate and key files every [`RELOAD_POLL`] until `stop`, loading a changed
    /// pair (see the [module docs](self)). Nothing to do for a self-signed certificate.
    pub fn watch(self: &Arc<Self>, stop: watch::Receiver<bool>) {
        let Some((cert, key)) = self.files.clone() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let mut seen = (file_stamp(&cert), file_stamp(&key));
            let mut iv = tokio::time::interval(RELOAD_POLL);
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            iv.tick().await;
            loop {
                tokio::select! {
                    _ = iv.tick() => {}
                    _ = crate::limits::wait_stop(stop.clone()) => return,
                }
                let now = (file_stamp(&cert), file_stamp(&key));
                if now == seen {
                    continue;
                }
                seen = now;
                let (c, k, p) = (cert.clone(), key.clone(), me.provider.clone());
                let loaded = tokio::task::spawn_blocking(move || load_pair(&c, &k, &p))
                    .await
                    .unwrap_or_else(|e| Err(format!("loading the certificate: {e}")));
                match loaded {
                    Ok(k) => {
                        let print = fingerprint(&k.cert[0]);
                        me.current.set(Arc::new(k));
                        me.metrics.tls_reloads.with_label_values(&["ok"]).inc();
                        eprintln!(
                            "sluice-server: TLS certificate reloaded from {} (SHA-256 fingerprint {print})",
                            cert.display()
                        );
                    }
                    Err(e) => {
                        me.metrics.tls_reloads.with_label_values(&["error"]).inc();
                        eprintln!(
                            "sluice-server: TLS certificate reload failed, the current one stays: {e}"
                        );
                    }
                }
            }
        });
    }
}

/// What identifies a file's version: modification time, size, inode (`None`: unreadable).
fn file_stamp(path: &Path) -> Option<(SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// Reads a certificate chain (PEM, end entity first) and its private key (PEM: PKCS#8, RSA or
/// SEC1), checking that they belong together.
pub(crate) fn load_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, String> {
    let cert_pem = std::fs::read(cert).map_err(|e| format!("tls_cert {}: {e}", cert.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("tls_cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "tls_cert {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
            cert.display()
        ));
    }
    let key_pem = std::fs::read(key).map_err(|e| format!("tls_key {}: {e}", key.display()))?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("tls_key {}: no PEM private key: {e}", key.display()))?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| {
        format!(
            "tls_cert {} / tls_key {}: {e}",
            cert.display(),
            key.display()
        )
    })
}

/// The CA certificates of a PEM file (client certificates are verified against them).
fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let pem = std::fs::read(path).map_err(|e| format!("tls_client_ca {}: {e}", path.display()))?;
    let mut roots = RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(&pem) {
        let der = der.map_err(|e| format!("tls_client_ca {}: {e}", path.display()))?;
        roots
            .add(der)
            .map_err(|e| format!("tls_client_ca {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "tls_client_ca {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(roots)
}

/// A self-signed certificate for `localhost`, `127.0.0.1`, `::1` and `bound` (valid from the
/// start of this year for two years), and its PEM.
fn self_signed(
    bound: &[IpAddr],
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, String), String> {
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for ip in bound {
        if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
            names.push(ip.to_string());
        }
    }
    let fail = |e: rcgen::Error| format!("tls_self_signed: {e}");
    let signing = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(names).map_err(fail)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sluice self-signed");
    let year = 1970
        + SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(year, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + 2, 1, 1);
    let cert = params.self_signed(&signing).map_err(fail)?;
    let key = PrivateKeyDer::Pkcs8(signing.serialize_der().into());
    let certified = CertifiedKey::from_der(vec![cert.der().clone()], key, provider)
        .map_err(|e| format!("tls_self_signed: {e}"))?;
    Ok((certified, cert.pem()))
}

/// Writes `pem` to `path` (its directory created), replacing it atomically.
fn write_pem(path: &Path, pem: &str) -> Result<(), String> {
    let fail = |e: io::Error| format!("writing {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let tmp = path.with_extension("pem.tmp");
    std::fs::write(&tmp, pem).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

/// The SHA-256 fingerprint of a certificate, as browsers and `openssl x509 -fingerprint` show
/// it: `AB:CD:…`.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    Sha256::digest(cert.as_ref())
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// How a handshake is accepted on one listener.
pub(crate) struct Handshake<'a> {
    /// The listener's acceptor.
    pub acceptor: &'a TlsAcceptor,
    /// `http` or `tcp` (the metrics label).
    pub transport: &'static str,
    /// The first byte and the handshake must be in by then.
    pub deadline: Instant,
    /// The `sluice_connection_timeouts_total` kind of a handshake past `deadline`.
    pub timeout_kind: &'static str,
    /// Written to a client whose first byte is not TLS.
    pub plain_refusal: &'a [u8],
    /// Where the handshake errors are counted.
    pub metrics: &'a SharedMetrics,
}

/// Why waiting on a connection stopped.
enum Interrupted {
    TimedOut,
    Evicted,
    Stopped,
}

/// `fut` until `deadline`, the connection's eviction or shutdown.
async fn guarded<T>(
    fut: impl std::future::Future<Output = T>,
    deadline: Instant,
    slot: &Slot,
    stop: &watch::Receiver<bool>,
) -> std::result::Result<T, Interrupted> {
    tokio::pin!(fut);
    loop {
        tokio::select! {
            r = &mut fut => return Ok(r),
            _ = tokio::time::sleep_until(deadline) => return Err(Interrupted::TimedOut),
            _ = slot.state.evict.notified() => {
                if slot.state.accept_eviction() {
                    return Err(Interrupted::Evicted);
                }
            }
            _ = crate::limits::wait_stop(stop.clone()) => return Err(Interrupted::Stopped),
        }
    }
}

impl Handshake<'_> {
    fn failed(&self) {
        self.metrics
            .tls_handshake_errors
            .with_label_values(&[self.transport])
            .inc();
    }

    fn interrupted(&self, why: Interrupted, slot: &Slot) {
        match why {
            Interrupted::TimedOut => {
                slot.count_timeout(self.timeout_kind);
                self.failed();
            }
            Interrupted::Evicted => slot.count_evicted(),
            Interrupted::Stopped => {}
        }
    }

    /// The TLS session of a freshly accepted `sock` (`wrap`ped first, e.g. to watch its bytes),
    /// or `None` when the connection is to be closed: see the [module docs](self).
    pub(crate) async fn accept<S, F>(
        &self,
        sock: TcpStream,
        wrap: F,
        slot: &Slot,
        stop: &watch::Receiver<bool>,
    ) -> Option<tokio_rustls::server::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        F: FnOnce(TcpStream) -> S,
    {
        let mut first = [0u8; 1];
        match guarded(sock.peek(&mut first), self.deadline, slot, stop).await {
            Err(why) => {
                self.interrupted(why, slot);
                return None;
            }
            // Closed (or reset) before a byte: a port probe, not a failed handshake.
            Ok(Ok(0) | Err(_)) => return None,
            Ok(Ok(_)) if first[0] != HANDSHAKE_RECORD => {
                self.failed();
                refuse_plain(sock, self.plain_refusal).await;
                return None;
            }
            Ok(Ok(_)) => {}
        }
        match guarded(self.acceptor.accept(wrap(sock)), self.deadline, slot, stop).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(_)) => {
                self.failed();
                None
            }
            Err(why) => {
                self.interrupted(why, slot);
                None
            }
        }
    }
}

/// Answers a plain-text client of a TLS port with `reply`, then reads what it sent until it
/// closes (at most [`REFUSAL_LINGER`]), so that the close does not reset the reply away.
async fn refuse_plain(mut sock: TcpStream, reply: &[u8]) {
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        if sock.write_all(reply).await.is_err() || sock.shutdown().await.is_err() {
            return;
        }
        let mut sink = [0u8; 4096];
        while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// A connection's stream: plain, or TLS over it.
pub(crate) enum MaybeTls<S> {
    /// TLS is off.
    Plain(S),
    /// TLS is on: the session over the socket.
    Tls(Box<tokio_rustls::server::TlsStream<S>>),
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> CryptoProvider {
        rustls::crypto::ring::default_provider()
    }

    #[test]
    fn self_signed_names_and_fingerprint() {
        let ips: Vec<IpAddr> = vec!["0.0.0.0".parse().unwrap(), "10.1.2.3".parse().unwrap()];
        let (k, pem) = self_signed(&ips, &provider()).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let f = fingerprint(&k.cert[0]);
        assert_eq!(f.len(), 32 * 3 - 1, "{f}");
        assert!(f.chars().all(|c| c == ':' || c.is_ascii_hexdigit()));
        // The PEM written is the certificate served.
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(der, k.cert[0]);
    }

    #[test]
    fn pairs_that_do_not_load() {
        let dir = std::env::temp_dir().join(format!("sluice-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".to_string()]).unwrap();
        let (cert, key, other_key, junk) = (
            dir.join("c.pem"),
            dir.join("k.pem"),
            dir.join("k2.pem"),
            dir.join("junk.pem"),
        );
        std::fs::write(&cert, a.cert.pem()).unwrap();
        std::fs::write(&key, a.signing_key.serialize_pem()).unwrap();
        std::fs::write(&other_key, b.signing_key.serialize_pem()).unwrap();
        std::fs::write(&junk, "not a pem\n").unwrap();
        assert!(load_pair(&cert, &key, &provider()).is_ok());
        let mismatch = load_pair(&cert, &other_key, &provider()).unwrap_err();
        assert!(mismatch.contains("tls_key"), "{mismatch}");
        let none = load_pair(&junk, &key, &provider()).unwrap_err();
        assert!(none.contains("no PEM certificate"), "{none}");
        let nokey = load_pair(&cert, &junk, &provider()).unwrap_err();
        assert!(nokey.contains("no PEM private key"), "{nokey}");
        let missing = load_pair(&dir.join("nope.pem"), &key, &provider()).unwrap_err();
        assert!(missing.contains("nope.pem"), "{missing}");
        assert!(load_roots(&junk).is_err());
        assert!(load_roots(&cert).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
