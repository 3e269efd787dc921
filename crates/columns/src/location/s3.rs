//! Column files in an S3-compatible bucket (AWS S3, SeaweedFS, MinIO, …), so the history tier can
//! live on shared object storage instead of the local disk.
//!
//! The [`Location`] API is synchronous, the `object_store` client is async: each [`S3Location`]
//! owns a small tokio runtime (one worker thread, which drives the sockets and timers) and every
//! call blocks on its request under a deadline (default [`DEFAULT_TIMEOUT`]), so a dead or
//! unreachable endpoint gives [`LocationError::ObjectStore`] instead of a hang.
//!
//! URL form (query parameters optional unless noted):
//!
//! ```text
//! s3://bucket/prefix?endpoint=http://127.0.0.1:18333&region=us-east-1&allow_http=true
//! ```
//!
//! - `endpoint`: an `http://` or `https://` base URL of an S3-compatible server; requests are then
//!   path-style (`endpoint/bucket/key`). Without it: AWS S3, virtual-hosted style.
//! - `region` (default `us-east-1`), `allow_http` (`true`/`false`, required for `http://`).
//! - `timeout`: the deadline of each call, `30s`, `1500ms` or plain seconds.
//! - `access_key_id`, `secret_access_key`, `session_token`: credentials; otherwise the standard
//!   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) environment variables.
//!   These are secrets: [`Location::describe`] and every error show the URL without them.
//!   Values are percent-decoded (`%2B` for `+`, `%2F` for `/`); a `+` stays a `+`.
//!
//! A put is one `PUT` of the whole object, which S3 makes visible only once complete.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use super::{Listed, Location, LocationError};

/// How long one call (put, get, a whole listing, delete) may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The region used when the URL names none (what S3-compatible servers expect by default).
pub const DEFAULT_REGION: &str = "us-east-1";

/// Query parameters that are secrets: never shown by `describe()` or in errors.
/// S3 error codes and statuses that mean the credentials were refused (not an outage).
const DENIED_CODES: [&str; 6] = [
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "401 Unauthorized",
    "403 Forbidden",
    "no credentials",
];
const SECRET_PARAMS: [&str; 3] = ["access_key_id", "secret_access_key", "session_token"];

/// Every query parameter the URL may carry.
const KNOWN_PARAMS: [&str; 7] = [
    "endpoint",
    "region",
    "allow_http",
    "timeout",
    "access_key_id",
    "secret_access_key",
    "session_token",
];

/// What an `s3://` URL says, validated (see the module docs for the form).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Url {
    /// The bucket name.
    pub bucket: String,
    /// The key prefix every file goes under, without leading or trailing `/` (`""` for none).
    pub prefix: String,
    /// The S3-compatible server's base URL, if not AWS.
    pub endpoint: Option<String>,
    /// The signing region.
    pub region: String,
    /// Whether plain `http://` is allowed.
    pub allow_http: bool,
    /// The deadline of each call.
    pub timeout: Duration,
    /// Credentials given in the URL (they win over the environment).
    pub access_key_id: Option<String>,
    /// The secret matching `access_key_id`.
    pub secret_access_key: Option<String>,
    /// A session token for temporary credentials.
    pub session_token: Option<String>,
    /// The URL as given minus the secret parameters (what users see).
    pub shown: String,
}

impl fmt::Debug for S3Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets are left out on purpose: Debug output ends up in logs.
        f.debug_struct("S3Url")
            .field("shown", &self.shown)
            .field("has_access_key_id", &self.access_key_id.is_some())
            .finish_non_exhaustive()
    }
}

impl S3Url {
    /// Parses and validates `spec`; the error names what is wrong (and never echoes secrets).
    pub fn parse(spec: &str) -> Result<S3Url, LocationError> {
        let shown = without_secrets(spec);
        let bad = |detail: String| LocationError::Url {
            url: shown.clone(),
            detail,
        };
        let rest = spec
            .strip_prefix("s3://")
            .ok_or_else(|| bad("not an s3:// URL".into()))?;
        if rest.contains('#') {
            return Err(bad("a fragment (#…) is not allowed".into()));
        }
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (bucket, prefix) = location.split_once('/').unwrap_or((location, ""));
        check_bucket(bucket).map_err(|d| bad(format!("bucket {bucket:?}: {d}")))?;
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            check_relative(prefix).map_err(|d| bad(format!("prefix {prefix:?}: {d}")))?;
        }

        let mut url = S3Url {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            endpoint: None,
            region: DEFAULT_REGION.to_owned(),
            allow_http: false,
            timeout: DEFAULT_TIMEOUT,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            shown: shown.clone(),
        };
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, raw) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("query parameter {key:?} has no value", key = pair)))?;
            let Some(known) = KNOWN_PARAMS.iter().find(|k| **k == key) else {
                return Err(bad(format!(
                    "unknown query parameter {key:?} (known: {})",
                    KNOWN_PARAMS.join(", ")
                )));
            };
            if seen.contains(known) {
                return Err(bad(format!("query parameter {key:?} given twice")));
            }
            seen.push(known);
            let value =
                percent_decode(raw).map_err(|d| bad(format!("query parameter {key:?}: {d}")))?;
            if value.is_empty() {
                return Err(bad(format!("query parameter {key:?} is empty")));
            }
            match key {
                "endpoint" => {
                    check_endpoint(&value).map_err(|d| bad(format!("endpoint: {d}")))?;
                    url.endpoint = Some(value.trim_end_matches('/').to_owned());
                }
                "region" => url.region = value,
                "allow_http" => {
                    url.allow_http = match value.as_str() {
                        "true" => true,
                        "false" => false,
                        other => {
                            return Err(bad(format!(
                                "allow_http must be true or false, not {other:?}"
                            )));
                        }
                    }
                }
                "timeout" => {
                    url.timeout =
                        parse_timeout(&value).map_err(|d| bad(format!("timeout: {d}")))?;
                }
                "access_key_id" => url.access_key_id = Some(value),
                "secret_access_key" => url.secret_access_key = Some(value),
                _ => url.session_token = Some(value),
            }
        }
        let plain_http = url
            .endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
        if plain_http && !url.allow_http {
            return Err(bad(
                "endpoint is plain http://: add allow_http=true to allow that".into(),
            ));
        }
        if url.access_key_id.is_some() != url.secret_access_key.is_some() {
            return Err(bad(
                "access_key_id and secret_access_key go together: give both or neither".into(),
            ));
        }
        Ok(url)
    }

    /// The object key of `path` (relative to the prefix).
    fn key(&self, path: &str) -> String {
        if self.prefix.is_empty() {
            path.to_owned()
        } else {
            format!("{}/{path}", self.prefix)
        }
    }
}

/// A bucket and prefix on an S3-compatible server, as a [`Location`].
pub struct S3Location {
    url: S3Url,
    store: Arc<AmazonS3>,
    /// Taken only when dropped (shut down without blocking).
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Location")
            .field("url", &self.url.shown)
            .field("timeout", &self.url.timeout)
            .finish_non_exhaustive()
    }
}

impl S3Location {
    /// Opens the bucket an `s3://` URL names (no request is made: errors show on first use).
    pub fn open(spec: &str) -> Result<S3Location, LocationError> {
        S3Location::from_url(S3Url::parse(spec)?)
    }

    /// Opens a parsed URL.
    pub fn from_url(url: S3Url) -> Result<S3Location, LocationError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let (key_id, secret, token) = match (&url.access_key_id, &url.secret_access_key) {
            (Some(k), Some(s)) => (k.clone(), s.clone(), url.session_token.clone()),
            _ => match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                (Some(k), Some(s)) => (
                    k,
                    s,
                    url.session_token
                        .clone()
                        .or_else(|| env("AWS_SESSION_TOKEN")),
                ),
                _ => {
                    return Err(LocationError::Url {
                        url: url.shown.clone(),
                        detail: "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                                 or access_key_id and secret_access_key in the URL"
                            .into(),
                    });
                }
            },
        };

        // Retries inside the client stop at half the deadline, so a refused connection usually
        // surfaces as its own error before the outer deadline cuts the call short.
        let retry = RetryConfig {
            max_retries: 10,
            retry_timeout: url.timeout / 2,
            ..RetryConfig::default()
        };
        let client = ClientOptions::new()
            .with_timeout(url.timeout)
            .with_connect_timeout(url.timeout.min(Duration::from_secs(5)))
            .with_allow_http(url.allow_http);
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&url.bucket)
            .with_region(&url.region)
            .with_access_key_id(key_id)
            .with_secret_access_key(secret)
            .with_allow_http(url.allow_http)
            .with_retry(retry)
            .with_client_options(client)
            // One object per delete: plain DELETE works on every S3-compatible server, the bulk
            // POST ?delete does not everywhere.
            .with_disable_bulk_delete(true);
        if let Some(token) = token {
            builder = builder.with_token(token);
        }
        builder = match &url.endpoint {
            Some(endpoint) => builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false),
            None => builder.with_virtual_hosted_style_request(true),
        };
        let store = builder.build().map_err(|e| LocationError::Url {
            url: url.shown.clone(),
            detail: error_chain(&e),
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-s3")
            .enable_all()
            .build()
            .map_err(|e| LocationError::ObjectStore {
                url: url.shown.clone(),
                detail: format!("starting the client runtime: {e}"),
            })?;
        Ok(S3Location {
            url,
            store: Arc::new(store),
            runtime: Some(runtime),
        })
    }

    /// The same location with another deadline per call.
    pub fn with_timeout(mut self, timeout: Duration) -> S3Location {
        self.url.timeout = timeout;
        self
    }

    /// The validated URL (secrets included: do not print it; use `describe()`).
    pub fn url(&self) -> &S3Url {
        &self.url
    }

    /// Runs `what` on the runtime under the deadline. Called from a thread of another tokio
    /// runtime (`sluice serve` opens the tier from its async start), where `block_on` panics,
    /// the call blocks a thread of its own instead.
    fn call<T: Send>(
        &self,
        operation: &str,
        what: impl Future<Output = Result<T, object_store::Error>> + Send,
    ) -> Result<T, LocationError> {
        let timeout = self.url.timeout;
        let Some(runtime) = &self.runtime else {
            return Err(LocationError::ObjectStore {
                url: self.url.shown.clone(),
                detail: format!("{operation}: the client runtime is shut down"),
            });
        };
        let run =
            move || runtime.block_on(async move { tokio::time::timeout(timeout, what).await });
        let result = if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(run).join())
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        } else {
            run()
        };
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.store_error(operation, &e)),
            Err(_elapsed) => Err(LocationError::ObjectStore {
                url: self.url.shown.clone(),
                detail: format!("{operation}: no answer within {timeout:?} (timed out)"),
            }),
        }
    }

    fn store_error(&self, operation: &str, e: &object_store::Error) -> LocationError {
        let (url, detail) = (
            self.url.shown.clone(),
            format!("{operation}: {}", error_chain(e)),
        );
        // object_store reports most of S3's refusals as generic errors, the status and S3's
        // error code in the text: those are read there.
        let refused = matches!(
            e,
            object_store::Error::Unauthenticated { .. }
                | object_store::Error::PermissionDenied { .. }
        ) || DENIED_CODES.iter().any(|c| detail.contains(c));
        if refused {
            LocationError::Denied { url, detail }
        } else {
            LocationError::ObjectStore { url, detail }
        }
    }

    fn object_path(&self, path: &str) -> Result<ObjectPath, LocationError> {
        let invalid = |detail: String| LocationError::Url {
            url: path.to_owned(),
            detail,
        };
        check_relative(path).map_err(|d| invalid(format!("not a relative path: {d}")))?;
        ObjectPath::parse(self.url.key(path)).map_err(|e| invalid(error_chain(&e)))
    }
}

impl Drop for S3Location {
    /// Shuts the runtime down without waiting for its worker: dropping a runtime blocks, which
    /// tokio forbids (a panic) where the last reference goes away inside async code (the
    /// server's HTTP state at shutdown).
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Location for S3Location {
    fn put(&self, path: &str, bytes: &[u8]) -> Result<(), LocationError> {
        let key = self.object_path(path)?;
        let payload = PutPayload::from(bytes::Bytes::copy_from_slice(bytes));
        let store = &self.store;
        self.call(&format!("put {path}"), async move {
            store.put(&key, payload).await.map(|_| ())
        })
    }

    fn get(&self, path: &str) -> Result<Option<bytes::Bytes>, LocationError> {
        let key = self.object_path(path)?;
        let store = &self.store;
        self.call(&format!("get {path}"), async move {
            match store.get(&key).await {
                Ok(found) => found.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<Listed>, LocationError> {
        // S3 lists by key prefix, object_store by whole path segments: list the deepest
        // directory the prefix names, then keep the paths that start with the prefix (as
        // LocalDir does). The client pages through the listing (1000 keys a page).
        let dir = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        let under = if dir.is_empty() {
            (!self.url.prefix.is_empty()).then(|| self.url.prefix.clone())
        } else {
            Some(self.object_path(dir)?.to_string())
        };
        let root = if self.url.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.url.prefix)
        };
        let under = under.map(ObjectPath::from);
        let store = &self.store;
        let root_for_walk = root.clone();
        let mut out = self.call(&format!("list {prefix:?}"), async move {
            let mut stream = store.list(under.as_ref());
            let mut out = Vec::new();
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                let key = meta.location.to_string();
                if let Some(rel) = key.strip_prefix(&root_for_walk) {
                    out.push(Listed {
                        path: rel.to_owned(),
                        size: meta.size,
                    });
                }
            }
            Ok(out)
        })?;
        out.retain(|l| l.path.starts_with(prefix));
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn delete(&self, path: &str) -> Result<(), LocationError> {
        let key = self.object_path(path)?;
        let store = &self.store;
        self.call(&format!("delete {path}"), async move {
            match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }

    fn describe(&self) -> String {
        self.url.shown.clone()
    }
}

/// `spec` with the secret query parameters left out (everything else as given).
fn without_secrets(spec: &str) -> String {
    let Some((base, query)) = spec.split_once('?') else {
        return spec.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
            !SECRET_PARAMS.contains(&key)
        })
        .collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// S3 bucket naming rules: 3–63 of `a-z 0-9 . -`, starting and ending with a letter or digit.
fn check_bucket(bucket: &str) -> Result<(), String> {
    if bucket.is_empty() {
        return Err("no bucket name (s3://BUCKET/prefix)".into());
    }
    if !(3..=63).contains(&bucket.len()) {
        return Err("must be 3 to 63 characters".into());
    }
    if !bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return Err("only lowercase letters, digits, '.' and '-' are allowed".into());
    }
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !edge_ok(bucket.bytes().next()) || !edge_ok(bucket.bytes().last()) {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

/// A relative `/`-separated path: no empty, `.` or `..` segment, no leading `/`.
fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty".into());
    }
    if path
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err("empty, '.' or '..' segment".into());
    }
    Ok(())
}

fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(|| format!("{endpoint:?} is not an http:// or https:// URL"))?;
    let host_port = rest.split('/').next().unwrap_or_default();
    if host_port.is_empty() {
        return Err(format!("{endpoint:?} has no host"));
    }
    if rest.contains('?') || rest.contains('#') {
        return Err(format!("{endpoint:?} must not carry a query or fragment"));
    }
    if let Some((_, port)) = host_port.rsplit_once(':') {
        if !host_port.ends_with(']') && port.parse::<u16>().is_err() {
            return Err(format!("{endpoint:?}: port {port:?} is not a number"));
        }
    }
    Ok(())
}

/// `30s`, `1500ms` or `30` (seconds); more than zero.
fn parse_timeout(value: &str) -> Result<Duration, String> {
    let parsed = if let Some(ms) = value.strip_suffix("ms") {
        ms.parse::<u64>().map(Duration::from_millis)
    } else {
        value
            .strip_suffix('s')
            .unwrap_or(value)
            .parse::<u64>()
            .map(Duration::from_secs)
    };
    match parsed {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be more than zero".into()),
        Err(_) => Err(format!("{value:?} is not a duration (30s, 1500ms)")),
    }
}

/// Decodes `%XX` escapes (UTF-8 result); `+` is left as is.
fn percent_decode(raw: &str) -> Result<String, String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a '%' not followed by two hex digits")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded".into())
}

/// An error and its sources, each once (object_store nests the useful part, e.g. "Connection
/// refused", several levels down), on one line (a server's XML error body has newlines).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_error(spec: &str) -> String {
        match S3Url::parse(spec) {
            Err(LocationError::Url { url, detail }) => {
                assert!(!url.contains("TOPSECRET"), "secret shown in {url}");
                assert!(!detail.contains("TOPSECRET"), "secret shown in {detail}");
                detail
            }
            other => panic!("{spec}: expected a URL error, got {other:?}"),
        }
    }

    #[test]
    fn parses_the_full_form() {
        let url = S3Url::parse(
            "s3://sluice-history/dc1/columns/?endpoint=http://127.0.0.1:18333/&region=eu-west-1\
             &allow_http=true&timeout=1500ms&access_key_id=AKID&secret_access_key=TOPSECRET%2Fab+c",
        )
        .unwrap();
        assert_eq!(url.bucket, "sluice-history");
        assert_eq!(url.prefix, "dc1/columns");
        assert_eq!(url.endpoint.as_deref(), Some("http://127.0.0.1:18333"));
        assert_eq!(url.region, "eu-west-1");
        assert!(url.allow_http);
        assert_eq!(url.timeout, Duration::from_millis(1500));
        assert_eq!(url.access_key_id.as_deref(), Some("AKID"));
        assert_eq!(url.secret_access_key.as_deref(), Some("TOPSECRET/ab+c"));
        assert_eq!(
            url.shown,
            "s3://sluice-history/dc1/columns/?endpoint=http://127.0.0.1:18333/&region=eu-west-1\
             &allow_http=true&timeout=1500ms"
        );
        assert_eq!(url.key("a/b.parquet"), "dc1/columns/a/b.parquet");
        assert!(!format!("{url:?}").contains("TOPSECRET"));
    }

    #[test]
    fn defaults_without_query() {
        let url = S3Url::parse("s3://bucket").unwrap();
        assert_eq!(url.prefix, "");
        assert_eq!(url.endpoint, None);
        assert_eq!(url.region, DEFAULT_REGION);
        assert!(!url.allow_http);
        assert_eq!(url.timeout, DEFAULT_TIMEOUT);
        assert_eq!(url.key("x.parquet"), "x.parquet");
        assert_eq!(S3Url::parse("s3://bucket/").unwrap().prefix, "");
        assert_eq!(
            S3Url::parse("s3://b-1.x?timeout=7").unwrap().timeout,
            Duration::from_secs(7)
        );
        assert_eq!(
            S3Url::parse("s3://b-1.x?timeout=7s").unwrap().timeout,
            Duration::from_secs(7)
        );
    }

    #[test]
    fn describe_never_shows_secrets() {
        let url = S3Url::parse(
            "s3://bkt/p?secret_access_key=TOPSECRET&access_key_id=TOPSECRET2&session_token=TOPSECRET3",
        )
        .unwrap();
        assert_eq!(url.shown, "s3://bkt/p");
        let location = S3Location::from_url(url).unwrap();
        assert_eq!(location.describe(), "s3://bkt/p");
        assert!(!format!("{location:?}").contains("TOPSECRET"));
    }

    #[test]
    fn rejects_bad_urls_clearly() {
        assert!(url_error("s3:/bucket").contains("not an s3:// URL"));
        assert!(url_error("s3://").contains("no bucket name"));
        assert!(url_error("s3://ab").contains("3 to 63"));
        assert!(url_error("s3://My_Bucket").contains("lowercase"));
        assert!(url_error("s3://-bucket").contains("start and end"));
        assert!(url_error("s3://bucket/a//b").contains("prefix"));
        assert!(url_error("s3://bucket/a/../b").contains("prefix"));
        assert!(url_error("s3://bucket?endpoint=ftp://x").contains("http:// or https://"));
        assert!(url_error("s3://bucket?endpoint=http://").contains("no host"));
        assert!(url_error("s3://bucket?endpoint=http://h:port").contains("not a number"));
        assert!(url_error("s3://bucket?endpoint=http://h:1").contains("allow_http=true"));
        assert!(url_error("s3://bucket?allow_http=yes").contains("true or false"));
        assert!(url_error("s3://bucket?timeout=soon").contains("not a duration"));
        assert!(url_error("s3://bucket?timeout=0s").contains("more than zero"));
        assert!(url_error("s3://bucket?colour=blue").contains("unknown query parameter"));
        assert!(url_error("s3://bucket?region=a&region=b").contains("twice"));
        assert!(url_error("s3://bucket?region").contains("no value"));
        assert!(url_error("s3://bucket?region=").contains("empty"));
        assert!(url_error("s3://bucket?region=%zz").contains("hex"));
        assert!(url_error("s3://bucket#frag").contains("fragment"));
        assert!(url_error("s3://bucket?access_key_id=AKID").contains("go together"));
        let detail = url_error("s3://bucket?secret_access_key=TOPSECRET");
        assert!(detail.contains("go together"), "{detail}");
    }

    #[test]
    fn rejects_paths_that_are_not_relative() {
        let location = S3Location::open(
            "s3://bucket/p?endpoint=http://127.0.0.1:9&allow_http=true&access_key_id=a&secret_access_key=b",
        )
        .unwrap();
        for path in ["", "/abs", "a//b", "../up", "a/./b"] {
            match location.put(path, b"x") {
                Err(LocationError::Url { .. }) => {}
                other => panic!("{path:?}: expected a URL error, got {other:?}"),
            }
        }
    }
}
