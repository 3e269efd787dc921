//! [`StoreUrl`]: the one parser of `--store` / TOML `store`, shared by the server and the CLI.
//!
//! # Contract
//! - `embedded:DIR` names the embedded store in `DIR` (the default: the data directory).
//! - `cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE?rf=3&write_cl=quorum&read_cl=one` names a
//!   keyspace on a Cassandra / ScyllaDB cluster (`scylla://` is the same). Optional query keys:
//!   `rf` (replication factor when the keyspace is created, default 1), `write_cl` (default
//!   `quorum`), `read_cl` (default `one`), `timeout_ms` (per request, default 5000),
//!   `in_flight` (requests in flight per store, default 64), `connect_timeout_ms` (default 5000).
//!   A port may be left out (9042).
//! - Anything else is refused with an error that says what was wrong; nothing panics.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use scylla::statement::Consistency;

/// Why a store URL was refused (each message says what was wrong).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreUrlError {
    /// `embedded:` without a directory.
    #[error("embedded: needs a directory (embedded:DIR)")]
    NoDirectory,
    /// Neither `embedded:` nor `cassandra://` / `scylla://`.
    #[error("store {url:?}: expected embedded:DIR or cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE[?rf=N&write_cl=CL&read_cl=CL]")]
    UnknownScheme {
        /// The URL.
        url: String,
    },
    /// No `/KEYSPACE` after the hosts.
    #[error("store {url:?}: no /KEYSPACE after the hosts")]
    NoKeyspace {
        /// The URL.
        url: String,
    },
    /// A keyspace name this store does not accept unquoted.
    #[error("store {url:?}: keyspace {keyspace:?} must be a letter then letters, digits or _ (at most 48)")]
    BadKeyspace {
        /// The URL.
        url: String,
        /// The keyspace named.
        keyspace: String,
    },
    /// An empty entry in the host list.
    #[error("store {url:?}: empty host")]
    EmptyHost {
        /// The URL.
        url: String,
    },
    /// A `:PORT` without a host.
    #[error("store {url:?}: empty host in {entry:?}")]
    EmptyHostIn {
        /// The URL.
        url: String,
        /// The host list entry.
        entry: String,
    },
    /// A query pair without `=`.
    #[error("store {url:?}: {pair:?} is not KEY=VALUE")]
    NotKeyValue {
        /// The URL.
        url: String,
        /// The pair.
        pair: String,
    },
    /// A query key this parser does not know.
    #[error("store {url:?}: unknown option {key:?} (rf, write_cl, read_cl, timeout_ms, connect_timeout_ms, in_flight)")]
    UnknownOption {
        /// The URL.
        url: String,
        /// The key.
        key: String,
    },
    /// A number option (or the port) that is not a number.
    #[error("{key}={value:?}: not a number")]
    NotANumber {
        /// The option.
        key: String,
        /// Its value.
        value: String,
    },
    /// A number option out of its range.
    #[error("{key}={value}: must be between {min} and {max}")]
    OutOfRange {
        /// The option.
        key: String,
        /// Its value.
        value: String,
        /// The smallest accepted.
        min: String,
        /// The largest accepted.
        max: String,
    },
    /// A consistency level this store does not use.
    #[error("{key}={value:?}: expected one, two, three, quorum, all, local_quorum, each_quorum or local_one")]
    BadConsistency {
        /// The option.
        key: String,
        /// Its value.
        value: String,
    },
}

/// Where a store lives: what `--store` names.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreUrl {
    /// The embedded store in a data directory (`embedded:DIR`).
    Embedded(PathBuf),
    /// A keyspace on a Cassandra / ScyllaDB cluster (`cassandra://…`).
    Cassandra(CassandraConfig),
}

/// How to reach and use a Cassandra keyspace (parsed from a `cassandra://` URL).
#[derive(Clone, Debug, PartialEq)]
pub struct CassandraConfig {
    /// Contact points, `host:port`.
    pub hosts: Vec<String>,
    /// The keyspace (created with [`replication_factor`](Self::replication_factor) if missing).
    pub keyspace: String,
    /// Replication factor of a keyspace this store creates (`SimpleStrategy`).
    pub replication_factor: u32,
    /// Consistency of writes (the original wrote with w=3 or a quorum).
    pub write_consistency: Consistency,
    /// Consistency of reads (the original read with r=1).
    pub read_consistency: Consistency,
    /// Client-side timeout of every request.
    pub request_timeout: Duration,
    /// Timeout of opening a connection to a node.
    pub connect_timeout: Duration,
    /// Requests in flight at most, per store (writes and reads together).
    pub max_in_flight: usize,
}

impl CassandraConfig {
    /// A config for `hosts` and `keyspace` with the defaults of the URL form.
    pub fn new(hosts: Vec<String>, keyspace: &str) -> Self {
        CassandraConfig {
            hosts,
            keyspace: keyspace.to_owned(),
            replication_factor: 1,
            write_consistency: Consistency::Quorum,
            read_consistency: Consistency::One,
            request_timeout: Duration::from_millis(5000),
            connect_timeout: Duration::from_millis(5000),
            max_in_flight: 64,
        }
    }

    /// The URL form of this config (parses back to the same config).
    pub fn to_url(&self) -> String {
        format!(
            "cassandra://{}/{}?rf={}&write_cl={}&read_cl={}&timeout_ms={}&connect_timeout_ms={}&in_flight={}",
            self.hosts.join(","),
            self.keyspace,
            self.replication_factor,
            cl_name(self.write_consistency),
            cl_name(self.read_consistency),
            self.request_timeout.as_millis(),
            self.connect_timeout.as_millis(),
            self.max_in_flight
        )
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Embedded(dir) => write!(f, "embedded:{}", dir.display()),
            StoreUrl::Cassandra(c) => f.write_str(&c.to_url()),
        }
    }
}

fn cl_name(c: Consistency) -> &'static str {
    match c {
        Consistency::Any => "any",
        Consistency::One => "one",
        Consistency::Two => "two",
        Consistency::Three => "three",
        Consistency::Quorum => "quorum",
        Consistency::All => "all",
        Consistency::LocalQuorum => "local_quorum",
        Consistency::EachQuorum => "each_quorum",
        Consistency::LocalOne => "local_one",
        Consistency::Serial => "serial",
        Consistency::LocalSerial => "local_serial",
    }
}

fn parse_cl(key: &str, v: &str) -> Result<Consistency, StoreUrlError> {
    Ok(match v.to_ascii_lowercase().as_str() {
        "one" => Consistency::One,
        "two" => Consistency::Two,
        "three" => Consistency::Three,
        "quorum" => Consistency::Quorum,
        "all" => Consistency::All,
        "local_quorum" => Consistency::LocalQuorum,
        "each_quorum" => Consistency::EachQuorum,
        "local_one" => Consistency::LocalOne,
        _ => {
            return Err(StoreUrlError::BadConsistency {
                key: key.to_owned(),
                value: v.to_owned(),
            })
        }
    })
}

fn parse_num<T>(key: &str, v: &str, min: T, max: T) -> Result<T, StoreUrlError>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let n: T = v.parse().map_err(|_| StoreUrlError::NotANumber {
        key: key.to_owned(),
        value: v.to_owned(),
    })?;
    if n < min || n > max {
        return Err(StoreUrlError::OutOfRange {
            key: key.to_owned(),
            value: v.to_owned(),
            min: min.to_string(),
            max: max.to_string(),
        });
    }
    Ok(n)
}

/// A CQL identifier this store accepts unquoted: a letter, then letters, digits, `_` (≤ 48).
pub(crate) fn valid_keyspace(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 48
}

impl FromStr for StoreUrl {
    type Err = StoreUrlError;

    fn from_str(s: &str) -> Result<StoreUrl, StoreUrlError> {
        let url = || s.to_owned();
        if let Some(dir) = s.strip_prefix("embedded:") {
            if dir.is_empty() {
                return Err(StoreUrlError::NoDirectory);
            }
            return Ok(StoreUrl::Embedded(PathBuf::from(dir)));
        }
        let rest = s
            .strip_prefix("cassandra://")
            .or_else(|| s.strip_prefix("scylla://"))
            .ok_or_else(|| StoreUrlError::UnknownScheme { url: url() })?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, keyspace) = path
            .split_once('/')
            .ok_or_else(|| StoreUrlError::NoKeyspace { url: url() })?;
        if !valid_keyspace(keyspace) {
            return Err(StoreUrlError::BadKeyspace {
                url: url(),
                keyspace: keyspace.to_owned(),
            });
        }
        let mut list = Vec::new();
        for h in hosts.split(',') {
            if h.is_empty() {
                return Err(StoreUrlError::EmptyHost { url: url() });
            }
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(':') => (host, port),
                _ => (h, "9042"),
            };
            if host.is_empty() {
                return Err(StoreUrlError::EmptyHostIn {
                    url: url(),
                    entry: h.to_owned(),
                });
            }
            let port: u16 = parse_num("port", port, 1, u16::MAX)?;
            list.push(format!("{host}:{port}"));
        }
        let mut c = CassandraConfig::new(list, keyspace);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| StoreUrlError::NotKeyValue {
                    url: url(),
                    pair: pair.to_owned(),
                })?;
            match k {
                "rf" => c.replication_factor = parse_num(k, v, 1, 32)?,
                "write_cl" => c.write_consistency = parse_cl(k, v)?,
                "read_cl" => c.read_consistency = parse_cl(k, v)?,
                "timeout_ms" => {
                    c.request_timeout = Duration::from_millis(parse_num(k, v, 1, 600_000)?)
                }
                "connect_timeout_ms" => {
                    c.connect_timeout = Duration::from_millis(parse_num(k, v, 1, 600_000)?)
                }
                "in_flight" => c.max_in_flight = parse_num(k, v, 1, 4096)?,
                _ => {
                    return Err(StoreUrlError::UnknownOption {
                        url: url(),
                        key: k.to_owned(),
                    })
                }
            }
        }
        Ok(StoreUrl::Cassandra(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms_and_refuses_the_rest() {
        assert_eq!(
            "embedded:/tmp/x".parse::<StoreUrl>().unwrap(),
            StoreUrl::Embedded("/tmp/x".into())
        );
        let StoreUrl::Cassandra(c) =
            "cassandra://127.0.0.1:9042,127.0.0.2/ks_1?rf=3&write_cl=all&read_cl=quorum"
                .parse::<StoreUrl>()
                .unwrap()
        else {
            panic!("not cassandra")
        };
        assert_eq!(c.hosts, ["127.0.0.1:9042", "127.0.0.2:9042"]);
        assert_eq!(c.keyspace, "ks_1");
        assert_eq!(c.replication_factor, 3);
        assert_eq!(c.write_consistency, Consistency::All);
        assert_eq!(c.read_consistency, Consistency::Quorum);
        let again: StoreUrl = c.to_url().parse().unwrap();
        assert_eq!(again, StoreUrl::Cassandra(c));
        for bad in [
            "",
            "embedded:",
            "riak://x/y",
            "cassandra://h",
            "cassandra://h/1ks",
            "cassandra://h/ks;drop",
            "cassandra://h:99999/ks",
            "cassandra://,h/ks",
            "cassandra://h/ks?rf=0",
            "cassandra://h/ks?write_cl=most",
            "cassandra://h/ks?colour=red",
            "cassandra://h/ks?rf",
        ] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad:?} was accepted");
        }
    }
}
