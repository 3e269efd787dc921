//! Who may use which route: the server's side of `sluice_auth` (the rules in one place; the
//! threat model and the table of routes are in `docs/security.md`).
//!
//! - **Modes.** With `auth` on, every request but `/healthz` needs credentials with its route's
//!   scope (`/metrics` too, unless `metrics_open`). With `auth` off (loopback only: the config
//!   refuses a wider bind without `insecure_no_auth`), ingest and reads are open, but
//!   credentials that are presented are still checked, and their reach applies.
//! - **Admin is never open.** Admin routes (substreams, tokens) need an `admin` token or the
//!   per-start *local secret*, written to `DATA/admin.secret` (mode 0600) for the CLI of the
//!   server's user, as Jupyter and Docker do for local access.
//! - **Cross-site.** A browser sends `Origin`: a state-changing request (anything but GET/HEAD)
//!   from an origin other than the server's own (`Host`) or `allowed_origins` is refused (403),
//!   whatever its credentials. Admin routes also need the `Authorization` header, which a
//!   cross-site page cannot send without a CORS preflight that Sluice never grants.
//! - **Audit.** Every admin request that changes something is logged with its token's name and
//!   counted in `sluice_admin_actions_total{action, token}`; refusals in
//!   `sluice_auth_refused_total{transport, reason}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{header, HeaderMap, Method, StatusCode};
use sluice_auth::{bearer, Grant, Refusal, Scope, Secret, Tokens};

use crate::metrics::SharedMetrics;

/// The file in the data directory holding this start's local secret.
pub const ADMIN_SECRET_FILE: &str = "admin.secret";

/// A refusal as answered: status, message, `/metrics` reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// 401, 403.
    pub status: StatusCode,
    /// The error body's sentence.
    pub message: String,
    /// The `sluice_auth_refused_total` reason.
    pub reason: &'static str,
}

/// The server's authorization state.
pub struct Auth {
    /// The tokens and the local secret.
    pub tokens: Tokens,
    /// `auth` is on.
    pub required: bool,
    /// `/metrics` needs no token.
    pub metrics_open: bool,
    /// Origins besides the server's own allowed to change state.
    pub allowed_origins: Vec<String>,
    metrics: SharedMetrics,
    /// This start's local secret.
    local: Secret,
    /// The runtime copies of it written for the CLI ([`publish_runtime`](Self::publish_runtime)).
    runtime_files: std::sync::Mutex<Vec<PathBuf>>,
}

impl Auth {
    /// The authorization state of a start: a fresh local secret written to
    /// `data_dir/admin.secret` (0600), the tokens of `store`.
    pub fn start(
        store: Arc<dyn sluice_store::Store>,
        data_dir: &Path,
        config: &crate::ServerConfig,
        metrics: SharedMetrics,
    ) -> crate::Result<Auth> {
        let local = Secret::generate().map_err(|e| crate::Error::Io(e.to_string()))?;
        write_secret(&data_dir.join(ADMIN_SECRET_FILE), &local).map_err(crate::Error::Io)?;
        let tokens = Tokens::load(store, Some(local.clone()))
            .map_err(|e| crate::Error::Io(e.to_string()))?;
        Ok(Auth {
            tokens,
            required: config.auth,
            metrics_open: config.metrics_open,
            allowed_origins: config.allowed_origins.clone(),
            metrics,
            local,
            runtime_files: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// [`Auth::start`], shared, with the tokens made or revoked by another server sharing the
    /// store read every [`sluice_auth::REFRESH_EVERY`] (off the request path: a store read may
    /// wait out a timeout); warns on stderr when it serves beyond loopback without auth.
    pub(crate) fn start_refreshing(
        store: Arc<dyn sluice_store::Store>,
        config: &crate::ServerConfig,
        metrics: SharedMetrics,
    ) -> crate::Result<Arc<Auth>> {
        let auth = Arc::new(Auth::start(store, &config.data_dir, config, metrics)?);
        let refreshed = auth.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sluice_auth::REFRESH_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let a = refreshed.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(e) = a.tokens.refresh() {
                        eprintln!("sluice-server: {e} (the tokens known stay in force)");
                    }
                })
                .await;
            }
        });
        if config.insecure_no_auth && config.public_listener().is_some() && !config.auth {
            eprintln!(
                "sluice-server: WARNING: --insecure-no-auth: serving beyond loopback without auth; anyone who reaches {} can read every event and send any",
                config.public_listener().map_or_else(String::new, |a| a.to_string())
            );
        }
        Ok(auth)
    }

    /// Leaves the local secret where the CLI of this user finds it by the server's address
    /// ([`sluice_auth::runtime_secret_path`]; an unspecified bind also under 127.0.0.1), so that
    /// `--server URL` works as the server's user does with `--data`. Best effort: a failure is
    /// logged, `DATA/admin.secret` still works.
    pub fn publish_runtime(&self, http: std::net::SocketAddr) {
        let mut addrs = vec![http];
        if http.ip().is_unspecified() {
            addrs.push(std::net::SocketAddr::from(([127, 0, 0, 1], http.port())));
        }
        for a in addrs {
            let Some(path) = sluice_auth::runtime_secret_path(&a.to_string()) else {
                continue;
            };
            let made = path.parent().map_or(Ok(()), |d| {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(d)
            });
            match made
                .map_err(|e| e.to_string())
                .and_then(|()| write_secret(&path, &self.local))
            {
                Ok(()) => self
                    .runtime_files
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(path),
                Err(e) => eprintln!(
                    "sluice-server: the local secret for the CLI at {}: {e}",
                    path.display()
                ),
            }
        }
    }

    /// Removes the runtime copies of the local secret (a clean stop).
    pub fn unpublish_runtime(&self) {
        for p in self
            .runtime_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The scope `method path` needs (`path`: the matched route), `None`: open to anyone.
    pub fn need(&self, method: &Method, route: &str) -> Option<Scope> {
        match route {
            "/healthz" => None,
            "/metrics" if self.metrics_open => None,
            "/metrics" => Some(Scope::Read),
            "/v1/events" if method == Method::POST => Some(Scope::Ingest),
            "/v1/logs" => Some(Scope::Ingest),
            "/v1/drops" => Some(Scope::Ingest),
            r if r.starts_with("/v1/substreams") || r.starts_with("/v1/tokens") => {
                Some(Scope::Admin)
            }
            r if r.starts_with("/v1/rollups") && method != Method::GET => Some(Scope::Admin),
            r if r.starts_with("/v1/alerts") && method != Method::GET => Some(Scope::Admin),
            _ => Some(Scope::Read),
        }
    }

    /// Checks a request's headers for `need` over `transport`: its grant, or why not (counted).
    pub fn check_http(
        &self,
        transport: &str,
        method: &Method,
        headers: &HeaderMap,
        need: Option<Scope>,
    ) -> Result<Grant, Denied> {
        let r = self.decide(method, headers, need);
        if let Err(d) = &r {
            self.metrics
                .auth_refused
                .with_label_values(&[transport, d.reason])
                .inc();
        }
        r
    }

    fn decide(
        &self,
        method: &Method,
        headers: &HeaderMap,
        need: Option<Scope>,
    ) -> Result<Grant, Denied> {
        if *method != Method::GET && *method != Method::HEAD {
            if let Some(origin) = headers.get(header::ORIGIN) {
                if !self.same_site(origin.as_bytes(), headers.get(header::HOST)) {
                    return Err(Denied {
                        status: StatusCode::FORBIDDEN,
                        message: "cross-site request refused (Origin is not this server)".into(),
                        reason: "cross_site",
                    });
                }
            }
        }
        let Some(need) = need else {
            return Ok(Grant::anonymous());
        };
        let presented = headers.get(header::AUTHORIZATION);
        let grant = match presented {
            None if !self.required && need != Scope::Admin => return Ok(Grant::anonymous()),
            None => return Err(refused(Refusal::Missing, need)),
            Some(v) => match bearer(v.as_bytes()) {
                None => return Err(refused(Refusal::Malformed, need)),
                Some(secret) => self
                    .tokens
                    .check(&secret, sluice_reader::time::now_unix())
                    .map_err(|r| refused(r, need))?,
            },
        };
        if !grant.has(need) {
            return Err(refused(Refusal::Scope, need));
        }
        Ok(grant)
    }

    /// Checks the `auth <secret>` line of a TCP connection (or its absence: `None`) for ingest.
    pub fn check_tcp(&self, line: Option<&str>) -> Result<Grant, Denied> {
        let r = match line {
            None if !self.required => Ok(Grant::anonymous()),
            None => Err(refused(Refusal::Missing, Scope::Ingest)),
            Some(secret) => match Secret::parse(secret.trim()) {
                None => Err(refused(Refusal::Malformed, Scope::Ingest)),
                Some(s) => self
                    .tokens
                    .check(&s, sluice_reader::time::now_unix())
                    .map_err(|r| refused(r, Scope::Ingest))
                    .and_then(|g| {
                        if g.has(Scope::Ingest) {
                            Ok(g)
                        } else {
                            Err(refused(Refusal::Scope, Scope::Ingest))
                        }
                    }),
            },
        };
        if let Err(d) = &r {
            self.metrics
                .auth_refused
                .with_label_values(&["tcp", d.reason])
                .inc();
        }
        r
    }

    /// Records an admin action (`action`, e.g. `POST /v1/substreams`) by `grant`: one log line
    /// and `sluice_admin_actions_total`.
    pub fn audit(&self, grant: &Grant, action: &str, detail: &str) {
        eprintln!(
            "sluice-server: admin: {action} {detail} by token {:?}",
            grant.name
        );
        self.metrics
            .admin_actions
            .with_label_values(&[action, &grant.name])
            .inc();
    }

    /// Counts a refusal found after the route's check (e.g. events beyond a token's reach).
    pub fn count_refusal(&self, transport: &str, reason: &'static str) {
        self.metrics
            .auth_refused
            .with_label_values(&[transport, reason])
            .inc();
    }

    /// Whether `origin` is this server (scheme aside, its host:port is `Host`) or allowed.
    fn same_site(&self, origin: &[u8], host: Option<&axum::http::HeaderValue>) -> bool {
        let Ok(origin) = std::str::from_utf8(origin) else {
            return false;
        };
        if self.allowed_origins.iter().any(|o| o == origin) {
            return true;
        }
        let Some(authority) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false; // `null` (sandboxed, file:) and anything else
        };
        host.and_then(|h| h.to_str().ok())
            .is_some_and(|h| h.eq_ignore_ascii_case(authority))
    }
}

/// A refusal's answer.
fn refused(r: Refusal, need: Scope) -> Denied {
    Denied {
        status: if r.unauthenticated() {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::FORBIDDEN
        },
        message: r.message(need),
        reason: r.as_str(),
    }
}

/// Writes `secret` to `path`, readable by the server's user only (replaced atomically).
fn write_secret(path: &Path, secret: &Secret) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp: PathBuf = path.with_extension("secret.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    f.write_all(format!("{}\n", secret.expose()).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("writing {}: {e}", path.display()))
}
