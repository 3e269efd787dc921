//! A real S3-compatible server for the tests of S3 column locations: SeaweedFS, started by
//! `scripts/seaweedfs.sh start` (idempotent; a file lock keeps test binaries from starting it
//! twice) and left running for the next test binary (`make test` stops it at the end).
//!
//! It fails to start → the test fails, unless `SLUICE_SKIP_S3=1` ([`seaweedfs`] then says
//! SKIPPED and returns `None`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that skips the S3 tests.
pub const SKIP_VAR: &str = "SLUICE_SKIP_S3";

/// What `scripts/seaweedfs.sh start` says about the running server.
#[derive(Debug, Clone)]
pub struct S3Server {
    /// The S3 gateway's base URL (`http://127.0.0.1:PORT`).
    pub endpoint: String,
    /// The bucket the script made.
    pub bucket: String,
    /// The signing region.
    pub region: String,
    /// The one identity's access key id.
    pub access_key_id: String,
    /// Its secret (tests only; never print it).
    pub secret_access_key: String,
}

impl S3Server {
    /// `s3://BUCKET/PREFIX?endpoint=…&region=…&allow_http=true` with the server's keys in the
    /// URL, then `extra` (`&timeout=10s`, …).
    pub fn url(&self, prefix: &str, extra: &str) -> String {
        format!(
            "{}&access_key_id={}&secret_access_key={}{extra}",
            self.url_without_keys(prefix),
            encode(&self.access_key_id),
            encode(&self.secret_access_key),
        )
    }

    /// [`S3Server::url`] without credentials (then they come from `AWS_ACCESS_KEY_ID` /
    /// `AWS_SECRET_ACCESS_KEY`).
    pub fn url_without_keys(&self, prefix: &str) -> String {
        format!(
            "s3://{}/{prefix}?endpoint={}&region={}&allow_http=true",
            self.bucket,
            encode(&self.endpoint),
            self.region,
        )
    }
}

/// Starts the server if it is not up (under a lock shared by test binaries); panics when it
/// cannot.
fn start() -> S3Server {
    const SCRIPT: &str = "seaweedfs.sh";
    let home = crate::script_server::home("SLUICE_SEAWEEDFS_HOME", "seaweedfs");
    let vars = crate::script_server::start(SCRIPT, &home, SKIP_VAR);
    let var = |name: &str| crate::script_server::var(&vars, SCRIPT, name);
    S3Server {
        endpoint: var("SLUICE_S3_ENDPOINT"),
        bucket: var("SLUICE_S3_BUCKET"),
        region: var("SLUICE_S3_REGION"),
        access_key_id: var("SLUICE_S3_ACCESS_KEY_ID"),
        secret_access_key: var("SLUICE_S3_SECRET_ACCESS_KEY"),
    }
}

/// The running server (started once per process), or `None` after printing SKIPPED when
/// `SLUICE_SKIP_S3=1`.
pub fn seaweedfs(test: &str) -> Option<&'static S3Server> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {test}: {SKIP_VAR}=1 (S3 tests opted out)");
        return None;
    }
    static SERVER: OnceLock<S3Server> = OnceLock::new();
    Some(SERVER.get_or_init(start))
}

/// Percent-encodes a URL query value (secrets may hold `/`, `+`, `=`).
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A key prefix no other test (of any process) uses: `tests/NAME-PID-N`.
pub fn fresh_prefix(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "tests/{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_what_a_query_value_cannot_hold() {
        assert_eq!(encode("a+b/c=d"), "a%2Bb%2Fc%3Dd");
        assert_eq!(encode("http://127.0.0.1:1"), "http%3A%2F%2F127.0.0.1%3A1");
        assert_eq!(encode("Az09-_.~"), "Az09-_.~");
    }

    #[test]
    fn urls_with_and_without_keys() {
        let s = S3Server {
            endpoint: "http://127.0.0.1:18333".into(),
            bucket: "b".into(),
            region: "us-east-1".into(),
            access_key_id: "k".into(),
            secret_access_key: "s/+".into(),
        };
        assert_eq!(
            s.url_without_keys("p/q"),
            "s3://b/p/q?endpoint=http%3A%2F%2F127.0.0.1%3A18333&region=us-east-1&allow_http=true"
        );
        assert_eq!(
            s.url("p", "&timeout=5s"),
            "s3://b/p?endpoint=http%3A%2F%2F127.0.0.1%3A18333&region=us-east-1&allow_http=true\
             &access_key_id=k&secret_access_key=s%2F%2B&timeout=5s"
        );
        assert_ne!(fresh_prefix("x"), fresh_prefix("x"));
    }
}
