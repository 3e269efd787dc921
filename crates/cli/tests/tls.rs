//! TLS on a real `sluice serve`, with certificates made here (rcgen: a CA, server
//! certificates it signs, a client CA and its client certificates) and real clients: `curl
//! --cacert`, Python's `ssl`, the `sluice` CLI (`cat`, `emit` over https:// and tls://) and a
//! rustls client that shows the peer's certificate and presents client certificates.
//!
//! - `https_with_curl_python_and_the_cli`: `/healthz`, a POST then GET of events, the CLI both
//!   ways, TCP ingest over TLS, `DATA/SERVER` says `https://`; plain text and an unknown CA
//!   refused and counted; a client that sends nothing (or a lone handshake byte) is closed by
//!   the header / read timeout.
//! - `client_certificates_required_on_tcp_optional_on_http` (mTLS).
//! - `certificate_reload_keeps_connections`: the pair replaced while a keep-alive HTTP client
//!   and a TCP connection stay connected and keep going; new connections see the new
//!   certificate; a bad pair keeps the current one, is logged once and counted.
//! - `self_signed_prints_its_fingerprint_and_works_as_ca`.
//!
//! Runs the `sluice` binary cargo builds for this package's tests; needs `curl` and `python3`.

mod common;
mod process;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use sha2::{Digest, Sha256};

use common::now;
use sluice_test_support::metrics::try_series;
use sluice_test_support::TempDir;

// ---------------------------------------------------------------- certificates

/// A certificate authority made for a test.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("key");
        Ca {
            issuer: CertifiedIssuer::self_signed(p, key).expect("CA"),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate signed by this CA for `names` (server) or a client certificate.
    fn issue(&self, cn: &str, names: &[&str], client: bool) -> Leaf {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("params");
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("sign");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// A certificate and its key.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Leaf {
    /// Writes `cert.pem`-like files `stem.pem` and `stem.key` in `dir`; returns their paths.
    fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let (c, k) = (
            dir.join(format!("{stem}.pem")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&c, &self.cert_pem).expect("write cert");
        std::fs::write(&k, &self.key_pem).expect("write key");
        (c, k)
    }
}

/// Replaces `path` with `text` atomically (a temporary file renamed over it).
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

fn sha256_fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ---------------------------------------------------------------- the server

/// A running `sluice serve` with TLS; SIGKILLed when dropped.
struct Serve {
    child: Child,
    http: SocketAddr,
    tcp: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    /// The CA file clients trust.
    ca: PathBuf,
}

impl Serve {
    /// `sluice serve` on `dir/data` with a 2 s header timeout and a 5 s request timeout,
    /// `extra` flags; waits until `DATA/SERVER` names an https:// address.
    fn start(dir: &Path, ca: &Path, extra: &[&str]) -> Serve {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).expect("data dir");
        let config = dir.join("sluice.toml");
        std::fs::write(
            &config,
            "http_header_timeout_secs = 2\nrequest_timeout_secs = 5\n",
        )
        .expect("config");
        let log = dir.join("server.log");
        let log_file = std::fs::File::create(&log).expect("log");
        let server_file = data.join("SERVER");
        let _ = std::fs::remove_file(&server_file);
        let mut child = Command::new(process::sluice_bin())
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--data")
            .arg(&data)
            .args([
                "--http",
                "127.0.0.1:0",
                "--tcp",
                "127.0.0.1:0",
                "--udp",
                "off",
            ])
            .args(["--grace", "0.2", "--pipeline-threads", "1"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn sluice serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        let http = loop {
            let text = std::fs::read_to_string(&server_file).unwrap_or_default();
            if let Some(a) = text.trim().strip_prefix("https://") {
                break a.parse::<SocketAddr>().expect("SERVER address");
            }
            assert!(
                !text.trim().starts_with("http://"),
                "DATA/SERVER says {text:?} with TLS on"
            );
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "sluice serve exited before serving ({status}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "sluice serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        // DATA/SERVER may be written a moment before the "serving from" line is logged.
        let tcp = loop {
            let text = std::fs::read_to_string(&log).expect("log");
            let found = text.lines().find_map(|l| {
                let rest = l.split_once("serving from")?.1;
                let t = rest.split_once("tcp ")?.1;
                t.split([',', ')'])
                    .next()?
                    .trim()
                    .parse::<SocketAddr>()
                    .ok()
            });
            match found {
                Some(tcp) => break tcp,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                None => panic!("no tcp address in the log:\n{text}"),
            }
        };
        Serve {
            child,
            http,
            tcp,
            data,
            log,
            ca: ca.to_path_buf(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.http)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        let (ok, out, err) = curl(&[
            "--cacert",
            path_str(&self.ca),
            "--fail",
            &self.url("/metrics"),
        ]);
        assert!(ok, "GET /metrics: {err}");
        out
    }

    /// A metric's value; fails when the server does not show it.
    fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        try_series(&text, name).unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    }

    /// A metric's value, `None` before its first sample (a counter family with labels).
    fn try_metric(&self, name: &str) -> Option<f64> {
        try_series(&self.metrics(), name)
    }

    /// A counter's value as a baseline, 0 before its first sample (a counter family with labels
    /// appears once it has counted). Only for a baseline that a later [`Serve::wait_counter`]
    /// must exceed: that wait fails while the counter is absent.
    fn counter(&self, name: &str) -> f64 {
        self.try_metric(name).unwrap_or(0.0)
    }

    /// Waits (10 s at most) until `name` is at least `at_least`.
    fn wait_counter(&self, name: &str, at_least: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.counter(name);
            if v >= at_least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} = {v}, expected at least {at_least}:\n{}",
                self.metrics()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The ids of the `type=TLS` events stored around `epoch`, read with curl.
    fn stored_ids(&self, epoch: i64) -> Vec<String> {
        let (ok, out, err) = curl(&[
            "--cacert",
            path_str(&self.ca),
            "--fail",
            &self.url(&format!(
                "/v1/events?from={}&to={}&type=TLS",
                epoch - 1,
                epoch + 2
            )),
        ]);
        assert!(ok, "GET /v1/events: {err}");
        let mut ids: Vec<String> = process::lines(&out)
            .iter()
            .filter_map(|v| v["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    }

    /// Waits (20 s at most) until exactly `want` (sorted) are stored around `epoch`.
    fn wait_stored(&self, epoch: i64, want: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.stored_ids(epoch);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "stored {got:?}, expected {want:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn event(epoch: i64, id: &str) -> String {
    format!("{{\"epoch\":{epoch},\"type\":\"TLS\",\"id\":\"{id}\"}}")
}

fn test_dir(name: &str) -> TempDir {
    sluice_test_support::temp_dir(&format!("tls-{name}"))
}

// ---------------------------------------------------------------- clients

/// `curl -sS ARGS`: (exit status 0, stdout, stderr).
fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `sluice ARGS` with `stdin`: (exit status 0, stdout, stderr).
fn sluice(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(process::sluice_bin())
        .args(args)
        .env_remove("SLUICE_TOKEN")
        .env_remove("SLUICE_CA")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("sluice");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A rustls client configuration trusting `ca` (PEM file), presenting `client` if given.
fn client_config(ca: &Path, client: Option<&Leaf>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    let pem = std::fs::read(ca).expect("read CA");
    for c in CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.expect("CA PEM")).expect("add CA");
    }
    let b = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    Arc::new(match client {
        None => b.with_no_client_auth(),
        Some(leaf) => {
            let chain = vec![CertificateDer::from(leaf.der.clone())];
            let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key PEM");
            b.with_client_auth_cert(chain, key).expect("client cert")
        }
    })
}

type Tls = BufReader<StreamOwned<ClientConnection, TcpStream>>;

/// A TLS connection to `addr` (verified as its IP address), handshake done.
fn tls_connect(addr: SocketAddr, config: Arc<ClientConfig>) -> Result<Tls, String> {
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(addr.ip().into());
    let mut conn = ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(BufReader::new(StreamOwned::new(conn, sock)))
}

/// The end-entity certificate the server presented.
fn peer_cert(c: &Tls) -> Vec<u8> {
    c.get_ref()
        .conn
        .peer_certificates()
        .and_then(|cs| cs.first())
        .map(|c| c.to_vec())
        .expect("a peer certificate")
}

/// One keep-alive request on `c`: (status, body). Reads a content-length or chunked body.
fn http_request(
    c: &mut Tls,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: sluice\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let s = c.get_mut();
    s.write_all(req.as_bytes())
        .and_then(|()| s.flush())
        .map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    c.read_line(&mut line).map_err(|e| format!("status: {e}"))?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("status line {line:?}"))?;
    let (mut len, mut chunked) = (0usize, false);
    loop {
        let mut h = String::new();
        c.read_line(&mut h).map_err(|e| format!("header: {e}"))?;
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.strip_prefix("content-length:") {
            len = v.trim().parse().map_err(|e| format!("{h}: {e}"))?;
        }
        chunked |= h.starts_with("transfer-encoding:") && h.contains("chunked");
    }
    let mut out = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            c.read_line(&mut size).map_err(|e| format!("chunk: {e}"))?;
            let n = usize::from_str_radix(size.trim(), 16).map_err(|e| format!("{size:?}: {e}"))?;
            let mut chunk = vec![0u8; n + 2];
            c.read_exact(&mut chunk)
                .map_err(|e| format!("chunk: {e}"))?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
    } else {
        out.resize(len, 0);
        c.read_exact(&mut out).map_err(|e| format!("body: {e}"))?;
    }
    Ok((status, String::from_utf8_lossy(&out).into_owned()))
}

/// Sends one line on a TCP ingest connection and reads its reply line.
fn tcp_line(c: &mut Tls, line: &str) -> Result<String, String> {
    let s = c.get_mut();
    s.write_all(format!("{line}\n").as_bytes())
        .and_then(|()| s.flush())
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = String::new();
    let n = c.read_line(&mut reply).map_err(|e| format!("read: {e}"))?;
    if n == 0 {
        return Err("closed".into());
    }
    Ok(reply.trim_end().to_owned())
}

/// How long the server takes to close a connection that sends `first` (maybe nothing) and then
/// nothing more; fails after `limit`.
fn closed_after(addr: SocketAddr, first: &[u8], limit: Duration) -> Duration {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(limit)).expect("timeout");
    s.write_all(first).expect("write");
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) if start.elapsed() < limit => return start.elapsed(),
            Ok(n) if n > 0 => continue, // an alert, say: wait for the close
            _ => panic!("the connection stayed open for {limit:?}"),
        }
    }
}

/// Python's `ssl` (default context with `cafile`) reading `url`: its status.
fn python_get(url: &str, cafile: &Path) -> Result<String, String> {
    let script = "import ssl, sys, urllib.request\n\
        ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
        r = urllib.request.urlopen(sys.argv[1], context=ctx, timeout=20)\n\
        print(r.status, r.read().decode().strip())\n";
    let out = Command::new("python3")
        .args(["-c", script, url, path_str(cafile)])
        .output()
        .expect("python3");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn https_with_curl_python_and_the_cli() {
    let dir = test_dir("clients");
    let ca = Ca::new("sluice test CA");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("ca");
    let (cert, key) = ca
        .issue("sluice test server", &["localhost", "127.0.0.1"], false)
        .write(&dir, "server");
    let srv = Serve::start(
        &dir,
        &ca_file,
        &["--tls-cert", path_str(&cert), "--tls-key", path_str(&key)],
    );
    let cacert = path_str(&ca_file);

    // DATA/SERVER names the https:// address (Serve::start waited for it).
    let server_file = std::fs::read_to_string(srv.data.join("SERVER")).expect("SERVER");
    assert_eq!(server_file.trim(), format!("https://{}", srv.http));

    // curl: /healthz by IP and by name.
    let (ok, out, err) = curl(&["--cacert", cacert, "--fail", &srv.url("/healthz")]);
    assert!(ok, "curl /healthz: {err}");
    assert!(out.contains("ok"), "{out}");
    let by_name = format!("https://localhost:{}/healthz", srv.http.port());
    let (ok, _, err) = curl(&["--cacert", cacert, "--fail", &by_name]);
    assert!(ok, "curl {by_name}: {err}");

    // Python's ssl.
    let got = python_get(&srv.url("/healthz"), &ca_file).expect("python https");
    assert!(got.starts_with("200"), "{got}");

    // A POST then a GET of events with curl.
    let epoch = now() - 5;
    let body = [event(epoch, "curl-1"), event(epoch, "curl-2")].join("\n");
    let (ok, out, err) = curl(&[
        "--cacert",
        cacert,
        "--fail",
        "-H",
        "content-type: application/x-ndjson",
        "--data-binary",
        &body,
        &srv.url("/v1/events"),
    ]);
    assert!(ok, "curl POST: {err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("POST answer");
    assert_eq!(answer["accepted"], 2, "{out}");
    srv.wait_stored(epoch, &["curl-1", "curl-2"]);

    // The CLI: emit over https:// and tls://, cat over https:// (and through DATA/SERVER).
    let input = format!("{}\n", event(epoch, "cli-http"));
    let (ok, _, err) = sluice(&["emit", "--http", &srv.url(""), "--ca", cacert], &input);
    assert!(ok, "sluice emit --http https://: {err}");
    assert!(err.contains("1 accepted"), "{err}");
    let tcp_target = format!("tls://{}", srv.tcp);
    let input = format!("{}\n", event(epoch, "cli-tcp"));
    let (ok, _, err) = sluice(&["emit", "--tcp", &tcp_target, "--ca", cacert], &input);
    assert!(ok, "sluice emit --tcp tls://: {err}");
    assert!(err.contains("1 accepted"), "{err}");
    srv.wait_stored(epoch, &["cli-http", "cli-tcp", "curl-1", "curl-2"]);
    let from = (epoch - 1).to_string();
    let to = (epoch + 2).to_string();
    let (ok, out, err) = sluice(
        &[
            "cat",
            "--server",
            &srv.url(""),
            "--ca",
            cacert,
            "--from",
            &from,
            "--to",
            &to,
            "--type",
            "TLS",
        ],
        "",
    );
    assert!(ok, "sluice cat --server https://: {err}");
    assert_eq!(process::lines(&out).len(), 4, "{out}");
    let (ok, out, err) = sluice(
        &[
            "cat",
            "--data",
            path_str(&srv.data),
            "--ca",
            cacert,
            "--from",
            &from,
            "--to",
            &to,
            "--type",
            "TLS",
        ],
        "",
    );
    assert!(ok, "sluice cat --data (through https://): {err}");
    assert_eq!(process::lines(&out).len(), 4, "{out}");
    // Without the CA the CLI refuses the server's certificate and says how to trust it.
    let (ok, _, err) = sluice(
        &[
            "cat",
            "--server",
            &srv.url(""),
            "--from",
            &from,
            "--to",
            &to,
        ],
        "",
    );
    assert!(!ok, "an unknown CA must be refused");
    assert!(err.contains("--ca"), "{err}");
    let (ok, _, err) = sluice(&["emit", "--tcp", &tcp_target], &input);
    assert!(!ok, "an unknown CA must be refused on tls://");
    assert!(err.contains("--ca"), "{err}");

    // Failed handshakes are counted: plain text, a client that does not trust the server.
    let http_errors = srv.counter("sluice_tls_handshake_errors_total{transport=\"http\"}");
    let (_, out, _) = curl(&[&format!("http://{}/healthz", srv.http)]);
    assert!(
        out.contains("https://"),
        "plain HTTP on the TLS port: {out:?}"
    );
    assert!(!out.contains("\"ok\""), "{out}");
    let other = Ca::new("another CA");
    let other_file = dir.join("other-ca.pem");
    std::fs::write(&other_file, other.pem()).expect("other CA");
    let (ok, _, err) = curl(&["--cacert", path_str(&other_file), &srv.url("/healthz")]);
    assert!(!ok, "a server certificate of another CA must fail: {err}");
    srv.wait_counter(
        "sluice_tls_handshake_errors_total{transport=\"http\"}",
        http_errors + 2.0,
    );
    // Plain text on the TCP port: one refusal line, counted.
    let tcp_errors = srv.counter("sluice_tls_handshake_errors_total{transport=\"tcp\"}");
    let mut plain = TcpStream::connect(srv.tcp).expect("connect tcp");
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    plain
        .write_all(format!("{}\n", event(epoch, "plain")).as_bytes())
        .expect("write");
    let mut reply = String::new();
    BufReader::new(&plain).read_line(&mut reply).expect("reply");
    assert!(reply.starts_with("error tls"), "{reply:?}");
    srv.wait_counter(
        "sluice_tls_handshake_errors_total{transport=\"tcp\"}",
        tcp_errors + 1.0,
    );

    // A client that sends nothing, or stops inside its handshake, does not hold a slot: the
    // header timeout (2 s) on HTTP, the request timeout (5 s) on TCP.
    let header_timeouts =
        srv.counter("sluice_connection_timeouts_total{transport=\"http\",kind=\"header\"}");
    let silent = closed_after(srv.http, b"", Duration::from_secs(8));
    assert!(silent >= Duration::from_millis(1500), "{silent:?}");
    let stalled = closed_after(srv.http, &[0x16, 0x03], Duration::from_secs(8));
    assert!(stalled >= Duration::from_millis(1500), "{stalled:?}");
    srv.wait_counter(
        "sluice_connection_timeouts_total{transport=\"http\",kind=\"header\"}",
        header_timeouts + 2.0,
    );
    let read_timeouts =
        srv.counter("sluice_connection_timeouts_total{transport=\"tcp\",kind=\"read\"}");
    let stalled = closed_after(srv.tcp, &[0x16], Duration::from_secs(12));
    assert!(stalled >= Duration::from_millis(4000), "{stalled:?}");
    srv.wait_counter(
        "sluice_connection_timeouts_total{transport=\"tcp\",kind=\"read\"}",
        read_timeouts + 1.0,
    );
    // Nothing of that was stored.
    assert_eq!(
        srv.stored_ids(epoch),
        vec!["cli-http", "cli-tcp", "curl-1", "curl-2"]
    );
    // The server still serves.
    let (ok, _, err) = curl(&["--cacert", cacert, "--fail", &srv.url("/healthz")]);
    assert!(ok, "{err}");
}

#[test]
fn client_certificates_required_on_tcp_optional_on_http() {
    let dir = test_dir("mtls");
    let ca = Ca::new("sluice server CA");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("ca");
    let (cert, key) = ca
        .issue("sluice server", &["localhost", "127.0.0.1"], false)
        .write(&dir, "server");
    let clients = Ca::new("sluice client CA");
    let clients_file = dir.join("clients.pem");
    std::fs::write(&clients_file, clients.pem()).expect("client CA");
    let good = clients.issue("sender-a", &[], true);
    let (good_cert, good_key) = good.write(&dir, "sender-a");
    let stranger = Ca::new("someone else").issue("sender-x", &[], true);
    let (bad_cert, bad_key) = stranger.write(&dir, "sender-x");
    let srv = Serve::start(
        &dir,
        &ca_file,
        &[
            "--tls-cert",
            path_str(&cert),
            "--tls-key",
            path_str(&key),
            "--tls-client-ca",
            path_str(&clients_file),
        ],
    );
    let epoch = now() - 5;

    // TCP with a certificate of the client CA: accepted.
    let mut c = tls_connect(srv.tcp, client_config(&ca_file, Some(&good))).expect("mTLS connect");
    assert_eq!(
        tcp_line(&mut c, &event(epoch, "mtls-1")).as_deref(),
        Ok("ok 1 0")
    );
    drop(c);
    // The CLI with --client-cert / --client-key.
    let target = format!("tls://{}", srv.tcp);
    let input = format!("{}\n", event(epoch, "mtls-cli"));
    let (ok, _, err) = sluice(
        &[
            "emit",
            "--tcp",
            &target,
            "--ca",
            path_str(&ca_file),
            "--client-cert",
            path_str(&good_cert),
            "--client-key",
            path_str(&good_key),
        ],
        &input,
    );
    assert!(ok, "sluice emit with a client certificate: {err}");

    // TCP without a certificate, or with one of another CA: the handshake fails (TLS 1.3: the
    // client learns it at its first read), nothing is stored, each is counted.
    let before = srv.counter("sluice_tls_handshake_errors_total{transport=\"tcp\"}");
    for (who, config) in [
        ("no certificate", client_config(&ca_file, None)),
        (
            "another CA's certificate",
            client_config(&ca_file, Some(&stranger)),
        ),
    ] {
        let refused = tls_connect(srv.tcp, config)
            .and_then(|mut c| tcp_line(&mut c, &event(epoch, "refused")));
        assert!(refused.is_err(), "{who}: {refused:?}");
    }
    let (ok, _, err) = sluice(
        &["emit", "--tcp", &target, "--ca", path_str(&ca_file)],
        &format!("{}\n", event(epoch, "refused-cli")),
    );
    assert!(!ok, "sluice emit without a client certificate must fail");
    let _ = err;
    srv.wait_counter(
        "sluice_tls_handshake_errors_total{transport=\"tcp\"}",
        before + 3.0,
    );

    // HTTP: no certificate is fine, a good one too; one of another CA is refused.
    let (ok, _, err) = curl(&[
        "--cacert",
        path_str(&ca_file),
        "--fail",
        &srv.url("/healthz"),
    ]);
    assert!(ok, "HTTP without a client certificate: {err}");
    let (ok, _, err) = curl(&[
        "--cacert",
        path_str(&ca_file),
        "--cert",
        path_str(&good_cert),
        "--key",
        path_str(&good_key),
        "--fail",
        &srv.url("/healthz"),
    ]);
    assert!(ok, "HTTP with a client certificate: {err}");
    let (ok, _, _) = curl(&[
        "--cacert",
        path_str(&ca_file),
        "--cert",
        path_str(&bad_cert),
        "--key",
        path_str(&bad_key),
        "--fail",
        &srv.url("/healthz"),
    ]);
    assert!(
        !ok,
        "HTTP with a client certificate of another CA must fail"
    );
    let mut keep = tls_connect(srv.http, client_config(&ca_file, Some(&good))).expect("https");
    let (status, _) = http_request(&mut keep, "GET", "/healthz", "").expect("GET");
    assert_eq!(status, 200);

    srv.wait_stored(epoch, &["mtls-1", "mtls-cli"]);
}

#[test]
fn certificate_reload_keeps_connections() {
    let dir = test_dir("reload");
    let ca = Ca::new("sluice reload CA");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("ca");
    let a = ca.issue("sluice server A", &["localhost", "127.0.0.1"], false);
    let (cert, key) = a.write(&dir, "server");
    let srv = Serve::start(
        &dir,
        &ca_file,
        &["--tls-cert", path_str(&cert), "--tls-key", path_str(&key)],
    );
    let config = client_config(&ca_file, None);
    let epoch = now() - 5;

    // A keep-alive HTTP client and a TCP connection, both on certificate A.
    let mut keep = tls_connect(srv.http, config.clone()).expect("https");
    assert_eq!(peer_cert(&keep), a.der);
    assert_eq!(
        http_request(&mut keep, "GET", "/healthz", "").map(|r| r.0),
        Ok(200)
    );
    let mut tcp = tls_connect(srv.tcp, config.clone()).expect("tls tcp");
    assert_eq!(peer_cert(&tcp), a.der);
    assert_eq!(
        tcp_line(&mut tcp, &event(epoch, "before")).as_deref(),
        Ok("ok 1 0")
    );
    // No reload yet: the labelled counter has no sample.
    assert_eq!(
        srv.try_metric("sluice_tls_reloads_total{outcome=\"ok\"}"),
        None
    );

    // Pair B replaces the files: new connections get B (within a poll or two).
    let b = ca.issue("sluice server B", &["localhost", "127.0.0.1"], false);
    replace(&key, &b.key_pem);
    replace(&cert, &b.cert_pem);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = tls_connect(srv.http, config.clone()).expect("https after the reload");
        if peer_cert(&fresh) == b.der {
            break;
        }
        assert_eq!(peer_cert(&fresh), a.der, "neither A nor B");
        assert!(Instant::now() < deadline, "certificate B never served");
        std::thread::sleep(Duration::from_millis(200));
    }
    srv.wait_counter("sluice_tls_reloads_total{outcome=\"ok\"}", 1.0);
    let tcp_fresh = tls_connect(srv.tcp, config.clone()).expect("tls tcp after the reload");
    assert_eq!(peer_cert(&tcp_fresh), b.der);
    assert!(
        srv.log().contains("TLS certificate reloaded from"),
        "{}",
        srv.log()
    );

    // The connections opened before keep going on their session.
    assert_eq!(peer_cert(&keep), a.der);
    let (status, body) = http_request(&mut keep, "GET", "/healthz", "").expect("keep-alive GET");
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_request(&mut keep, "POST", "/v1/events", &event(epoch, "keep"))
        .expect("keep-alive POST");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        tcp_line(&mut tcp, &event(epoch, "after")).as_deref(),
        Ok("ok 1 0")
    );

    // A bad pair (a certificate without its key) keeps B, is counted and logged once.
    let errors = srv.counter("sluice_tls_reloads_total{outcome=\"error\"}");
    let failed_lines = |s: &Serve| s.log().matches("TLS certificate reload failed").count();
    let logged = failed_lines(&srv);
    let c = ca.issue("sluice server C", &["localhost", "127.0.0.1"], false);
    replace(&cert, &c.cert_pem);
    srv.wait_counter("sluice_tls_reloads_total{outcome=\"error\"}", errors + 1.0);
    std::thread::sleep(Duration::from_secs(5)); // two more polls of unchanged files
    assert_eq!(
        srv.metric("sluice_tls_reloads_total{outcome=\"error\"}"),
        errors + 1.0
    );
    assert_eq!(failed_lines(&srv), logged + 1, "{}", srv.log());
    let fresh = tls_connect(srv.http, config.clone()).expect("https after a bad pair");
    assert_eq!(
        peer_cert(&fresh),
        b.der,
        "a bad pair must keep the current certificate"
    );
    // Its key arrives: C is served.
    replace(&key, &c.key_pem);
    let deadline = Instant::now() + Duration::from_secs(10);
    while peer_cert(&tls_connect(srv.http, config.clone()).expect("https")) != c.der {
        assert!(Instant::now() < deadline, "certificate C never served");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(srv.metric("sluice_tls_reloads_total{outcome=\"ok\"}") >= 2.0);

    // Still the same two connections.
    assert_eq!(
        http_request(&mut keep, "GET", "/healthz", "").map(|r| r.0),
        Ok(200)
    );
    assert_eq!(
        tcp_line(&mut tcp, &event(epoch, "last")).as_deref(),
        Ok("ok 1 0")
    );
    srv.wait_stored(epoch, &["after", "before", "keep", "last"]);
}

#[test]
fn self_signed_prints_its_fingerprint_and_works_as_ca() {
    let dir = test_dir("self-signed");
    let pem = dir.join("data").join("tls").join("self-signed.pem");
    let srv = Serve::start(&dir, &pem, &["--tls-self-signed"]);
    let log = srv.log();
    let line = log
        .lines()
        .find(|l| l.contains("TLS self-signed certificate"))
        .unwrap_or_else(|| panic!("no self-signed line:\n{log}"));
    let want_prefix = format!(
        "sluice-server: TLS self-signed certificate {}, SHA-256 fingerprint ",
        pem.display()
    );
    let printed = line
        .strip_prefix(&want_prefix)
        .unwrap_or_else(|| panic!("{line:?} does not start with {want_prefix:?}"));
    let der = CertificateDer::from_pem_file(&pem).expect("the written PEM");
    assert_eq!(printed, sha256_fingerprint(der.as_ref()));
    // The certificate served is the one written.
    let c = tls_connect(srv.http, client_config(&pem, None)).expect("rustls with the PEM as CA");
    assert_eq!(peer_cert(&c), der.to_vec());
    let c = tls_connect(srv.tcp, client_config(&pem, None)).expect("TCP with the PEM as CA");
    assert_eq!(peer_cert(&c), der.to_vec());

    // curl, Python and the CLI trust it as a CA file.
    for url in [
        srv.url("/healthz"),
        format!("https://localhost:{}/healthz", srv.http.port()),
    ] {
        let (ok, out, err) = curl(&["--cacert", path_str(&pem), "--fail", &url]);
        assert!(ok, "curl --cacert self-signed.pem {url}: {err}");
        assert!(out.contains("ok"), "{out}");
    }
    let got = python_get(&srv.url("/healthz"), &pem).expect("python with the self-signed CA");
    assert!(got.starts_with("200"), "{got}");
    let epoch = now() - 5;
    let input = format!("{}\n", event(epoch, "self-1"));
    let (ok, _, err) = sluice(
        &["emit", "--http", &srv.url(""), "--ca", path_str(&pem)],
        &input,
    );
    assert!(ok, "sluice emit: {err}");
    srv.wait_stored(epoch, &["self-1"]);
    // Through the data directory, the CLI trusts the directory's own self-signed certificate.
    let (from, to) = ((epoch - 1).to_string(), (epoch + 2).to_string());
    let (ok, out, err) = sluice(
        &[
            "cat",
            "--data",
            path_str(&srv.data),
            "--from",
            &from,
            "--to",
            &to,
            "--type",
            "TLS",
        ],
        "",
    );
    assert!(ok, "sluice cat --data on a self-signed server: {err}");
    assert_eq!(process::lines(&out).len(), 1, "{out}");
    // Without it: refused.
    let (ok, _, _) = curl(&["--fail", &srv.url("/healthz")]);
    assert!(
        !ok,
        "curl without --cacert must refuse a self-signed certificate"
    );
}

#[test]
fn tokens_over_tls_from_the_cli() {
    let dir = test_dir("tokens");
    let ca = Ca::new("sluice token CA");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("ca");
    let (cert, key) = ca
        .issue("sluice server", &["localhost", "127.0.0.1"], false)
        .write(&dir, "server");
    let srv = Serve::start(
        &dir,
        &ca_file,
        &[
            "--tls-cert",
            path_str(&cert),
            "--tls-key",
            path_str(&key),
            "--auth",
        ],
    );
    let cacert = path_str(&ca_file);
    let data = path_str(&srv.data);
    // The local secret over https:// (the server found through DATA/SERVER).
    let (ok, out, err) = sluice(
        &[
            "token",
            "create",
            "--data",
            data,
            "--ca",
            cacert,
            "--name",
            "tls-test",
            "--scope",
            "ingest,read",
        ],
        "",
    );
    assert!(ok, "sluice token create over https://: {err}");
    let token = out.trim().to_owned();
    assert!(token.starts_with("sluice_"), "{out}");

    let epoch = now() - 5;
    let tcp = format!("tls://{}", srv.tcp);
    let base = srv.url("");
    // With the token: TCP (the `auth` line) and HTTP (`Authorization`) are accepted.
    let (ok, _, err) = sluice(
        &["emit", "--tcp", &tcp, "--ca", cacert, "--token", &token],
        &format!("{}\n", event(epoch, "tok-tcp")),
    );
    assert!(ok, "emit tls:// with a token: {err}");
    let (ok, _, err) = sluice(
        &["emit", "--http", &base, "--ca", cacert, "--token", &token],
        &format!("{}\n", event(epoch, "tok-http")),
    );
    assert!(ok, "emit https:// with a token: {err}");
    // Without it: refused on both.
    let (ok, _, err) = sluice(
        &["emit", "--tcp", &tcp, "--ca", cacert],
        &format!("{}\n", event(epoch, "anon-tcp")),
    );
    assert!(!ok && err.contains("unauthorized"), "{err}");
    let (ok, _, err) = sluice(
        &["emit", "--http", &base, "--ca", cacert],
        &format!("{}\n", event(epoch, "anon-http")),
    );
    assert!(!ok && err.contains("401"), "{err}");
    // A wrong token on TCP fails the connect with the server's line.
    let (ok, _, err) = sluice(
        &[
            "emit",
            "--tcp",
            &tcp,
            "--ca",
            cacert,
            "--token",
            "sluice_nope_nope",
        ],
        &format!("{}\n", event(epoch, "bad-tcp")),
    );
    assert!(!ok && err.contains("error unauthorized"), "{err}");

    // Reading back needs the token too.
    let (from, to) = ((epoch - 1).to_string(), (epoch + 2).to_string());
    let cat = |token: Option<&str>| {
        let mut args = vec![
            "cat", "--server", &base, "--ca", cacert, "--from", &from, "--to", &to, "--type", "TLS",
        ];
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        sluice(&args, "")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, out, err) = cat(Some(&token));
        assert!(ok, "cat with the token: {err}");
        let mut ids: Vec<String> = process::lines(&out)
            .iter()
            .filter_map(|v| v["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        if ids == ["tok-http", "tok-tcp"] {
            break;
        }
        assert!(Instant::now() < deadline, "stored {ids:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, _, err) = cat(None);
    assert!(!ok && err.contains("401"), "cat without a token: {err}");
}
