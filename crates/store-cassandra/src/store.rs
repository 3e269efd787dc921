//! [`CassandraStore`]: the [`Store`] trait on a Cassandra / ScyllaDB keyspace.
//!
//! # Contract
//! - Synchronous, like the trait: each call runs on the store's own small tokio runtime (two
//!   worker threads) and the calling thread waits on a channel, so it may be called from any
//!   thread, including a worker of another runtime (it blocks that thread, never panics).
//! - Every request has a client-side timeout ([`CassandraConfig::request_timeout`]); at most
//!   [`CassandraConfig::max_in_flight`] requests are in flight per store (a semaphore); every
//!   write is idempotent and is retried up to [`ATTEMPTS`](crate::ATTEMPTS) times with
//!   exponential backoff (50 ms, 100 ms, 200 ms) on a transient error before the error is
//!   returned. Routing is the driver's token-aware default.
//! - Connecting is lazy: [`CassandraStore::open`] never fails because the cluster is down;
//!   calls return [`StoreError::Unavailable`] until a connection succeeds (retried at most once
//!   a second), so a server starts and spools while the cluster is away.
//! - Blobs are write-once through a lightweight transaction (`INSERT … IF NOT EXISTS`, serial
//!   consistency SERIAL, commit at the write consistency): one winner among concurrent writers of
//!   a key; a second write of identical bytes is [`PutOutcome::AlreadyPresent`]. Except
//!   [`Store::put_owned_blob_lists`] (the collector's chunks, whose keys it owns): a plain,
//!   idempotent insert, one round trip instead of Paxos's four, answered `Written`. The epoch
//!   index the collector numbers from ([`Store::get_epoch_index_latest`]) is read at a level
//!   that overlaps the writes. Every blob is
//!   stored with a CRC-32 that reads check ([`StoreError::Corrupted`] on a mismatch).
//! - The epoch index and the per-namespace index are rows (one per entry): adds are set unions
//!   without reads. Counts are one row per (writer, batch) token that readers add up:
//!   [`Store::add_counts_once`] rewrites the same row on a retry; [`Store::add_counts`] writes
//!   a row under a fresh token, retried with the same token.
//! - Retention: every data table has `default_time_to_live` (retention + one partition), so
//!   the cluster expires data by itself. [`Store::expire`] additionally drops, with partition
//!   deletes, every time partition the `buckets` registry lists that is wholly expired at `now`
//!   (data written under old epochs, tests with a fake clock).
//!
//! The connection and its retry policy are in `session`, the operations on the tables in
//! `tables`; this module is the sync front: argument checks, the runtime bridge, the trait.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::future::join_all;
use sluice_store::checks::{
    check_catalog, check_counts, check_counts_write, check_entries, check_key, check_put,
    check_text,
};
use sluice_store::{
    BlobKey, Counts, CountsAdd, CountsWrite, ExpireReport, Namespace, PutOutcome, Result,
    Retention, Store, StoreError, TypeSubtype,
};
use tokio::runtime::Runtime;

use crate::session::{unavailable, Connection, RECONNECT_EVERY};
use crate::tables::Tables;
use crate::url::{valid_keyspace, CassandraConfig};

/// The writer name of plain [`Store::add_counts`] rows (a NUL cannot appear in a real writer).
const ADD_COUNTS_WRITER: &str = "\0add";

/// The [`Store`] on a Cassandra / ScyllaDB keyspace (see the [module docs](self)).
pub struct CassandraStore {
    rt: Option<Runtime>,
    shared: Arc<Tables>,
}

impl Drop for CassandraStore {
    fn drop(&mut self) {
        // Dropping a runtime inside another runtime's context panics: shut it down detached.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
/// `HOST` or `HOST:PORT` (an IP address: the driver knows nodes by address) → (ip, port).
fn parse_node(node: &str) -> Result<(std::net::IpAddr, Option<u16>)> {
    if let Ok(sa) = node.parse::<std::net::SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    node.parse::<std::net::IpAddr>()
        .map(|ip| (ip, None))
        .map_err(|_| StoreError::InvalidArgument {
            reason: format!("local node {node:?} is not IP or IP:PORT"),
        })
}

impl CassandraStore {
    /// A store on `config`'s keyspace with `retention`. Does not fail when the cluster is down
    /// (see the [module docs](self)): it tries to connect once, then again on use.
    pub fn open(config: CassandraConfig, retention: Retention) -> Result<CassandraStore> {
        CassandraStore::open_with(config, retention, true)
    }

    /// A reader's store: connects now (fails if the cluster or the keyspace is not there) and
    /// never creates or alters the schema. `retention` must have the writers' partition width
    /// (its period is not used).
    pub fn open_read_only(config: CassandraConfig, retention: Retention) -> Result<CassandraStore> {
        let store = CassandraStore::open_with(config, retention, false)?;
        store.run(|s| async move { s.db.conn().await.map(|_| ()) })?;
        Ok(store)
    }

    fn open_with(
        config: CassandraConfig,
        retention: Retention,
        owns_schema: bool,
    ) -> Result<CassandraStore> {
        retention.validate()?;
        if !valid_keyspace(&config.keyspace) {
            return Err(StoreError::InvalidArgument {
                reason: format!("bad keyspace name {:?}", config.keyspace),
            });
        }
        if config.hosts.is_empty() {
            return Err(StoreError::InvalidArgument {
                reason: "no Cassandra hosts".into(),
            });
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sluice-cassandra")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Io {
                location: "the Cassandra store's runtime".into(),
                source: e,
            })?;
        let salt = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            h.write_u32(std::process::id());
            h.finish()
        };
        let shared = Arc::new(Tables::new(
            Connection::new(config, retention, owns_schema),
            salt,
        ));
        let store = CassandraStore {
            rt: Some(rt),
            shared,
        };
        if owns_schema {
            // One try now, so that a reachable cluster is ready (its schema created) at once.
            let _ = store.run(|s| async move { s.db.conn().await.map(|_| ()) });
        }
        Ok(store)
    }

    /// Like [`open`](Self::open), but fails unless the cluster answers and the schema is in
    /// place (for `sluice store init` and tests).
    pub fn connect(config: CassandraConfig, retention: Retention) -> Result<CassandraStore> {
        let store = CassandraStore::open(config, retention)?;
        // The first try inside `open` may have failed just now: wait out the rate limit once.
        match store.run(|s| async move { s.db.conn().await.map(|_| ()) }) {
            Ok(()) => Ok(store),
            Err(_) => {
                std::thread::sleep(RECONNECT_EVERY);
                store.run(|s| async move { s.db.conn().await.map(|_| ()) })?;
                Ok(store)
            }
        }
    }

    /// The config this store was opened with.
    pub fn config(&self) -> &CassandraConfig {
        &self.shared.db.config
    }

    /// Runs `f` on the store's runtime and waits for it.
    fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Tables>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let Some(rt) = self.rt.as_ref() else {
            return Err(unavailable("store closed"));
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = f(self.shared.clone());
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .map_err(|_| unavailable("the store's runtime stopped"))?
    }

    /// `put_blob_lists` (`owned` false: each put a lightweight transaction) or
    /// `put_owned_blob_lists` (`owned`: plain inserts): the lists concurrently, bounded by the
    /// in-flight semaphore ([`CassandraConfig::max_in_flight`]), each list in order up to its
    /// first failure, as `put_blobs`.
    fn put_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
        owned: bool,
    ) -> Vec<Vec<Result<PutOutcome>>> {
        let n = ns.as_str().into_owned();
        // Per item: its argument check, epoch, key, bytes.
        type Item = (Result<()>, i64, String, Vec<u8>);
        let items: Vec<Vec<Item>> = lists
            .iter()
            .map(|l| {
                l.iter()
                    .map(|(k, b)| (check_put(ns, *k, b), k.epoch, k.key.to_owned(), b.to_vec()))
                    .collect()
            })
            .collect();
        let sizes: Vec<usize> = lists.iter().map(Vec::len).collect();
        let done = self.run(|s| async move {
            let lists = items.into_iter().map(|list| {
                let (s, n) = (s.clone(), n.clone());
                async move {
                    let mut out = Vec::with_capacity(list.len());
                    for (checked, epoch, key, bytes) in list {
                        let r = match checked {
                            Ok(()) if owned => s.put_owned_blob(n.clone(), epoch, key, bytes).await,
                            Ok(()) => s.put_blob(n.clone(), epoch, key, bytes).await,
                            Err(e) => Err(e),
                        };
                        let failed = r.is_err();
                        out.push(r);
                        if failed {
                            break;
                        }
                    }
                    out
                }
            });
            Ok(join_all(lists).await)
        });
        match done {
            Ok(v) => v,
            // Nothing ran: each non-empty list failed at its first item.
            Err(e) => sizes
                .iter()
                .map(|&len| {
                    if len == 0 {
                        Vec::new()
                    } else {
                        vec![Err(unavailable(e.to_string()))]
                    }
                })
                .collect(),
        }
    }

    /// Drops the keyspace (tests; irreversible).
    pub fn drop_keyspace(&self) -> Result<()> {
        let k = self.shared.db.config.keyspace.clone();
        self.run(|s| async move {
            s.db.simple(format!("DROP KEYSPACE IF EXISTS {k}"), (), true)
                .await
                .map(|_| ())
        })
    }
}

impl Store for CassandraStore {
    fn put_blob(&self, ns: &Namespace, key: BlobKey<'_>, bytes: &[u8]) -> Result<PutOutcome> {
        check_put(ns, key, bytes)?;
        let (n, k, b) = (ns.as_str().into_owned(), key.key.to_owned(), bytes.to_vec());
        let epoch = key.epoch;
        self.run(|s| async move { s.put_blob(n, epoch, k, b).await })
    }

    fn put_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        self.put_lists(ns, lists, false)
    }

    /// Plain inserts instead of lightweight transactions (the caller owns the keys: see the
    /// trait); otherwise as `put_blob_lists`.
    fn put_owned_blob_lists(
        &self,
        ns: &Namespace,
        lists: &[Vec<(BlobKey<'_>, &[u8])>],
    ) -> Vec<Vec<Result<PutOutcome>>> {
        self.put_lists(ns, lists, true)
    }

    fn keys_on_node(&self, node: &str, ns: &Namespace, keys: &[BlobKey<'_>]) -> Result<Vec<bool>> {
        // From the driver's token ring (refreshed by the driver from the cluster's metadata):
        // the blob's partition key (ns, epoch, key) → its replicas.
        let want = parse_node(node)?;
        let n = ns.as_str().into_owned();
        let owned: Vec<(i64, String)> = keys.iter().map(|k| (k.epoch, k.key.to_owned())).collect();
        self.run(|s| async move {
            let conn = s.db.conn().await?;
            let ks = s.db.config.keyspace.clone();
            // The driver's metadata may not know a keyspace created moments ago (or the ring
            // yet): then a key has no replicas in it. Refresh once; still unknown is an error
            // (the caller then takes every key: computed twice at worst, never skipped).
            for attempt in 0..2 {
                if attempt > 0 {
                    conn.session.refresh_metadata().await.map_err(|e| {
                        unavailable(format!("refreshing the cluster metadata: {e}"))
                    })?;
                }
                let state = conn.session.get_cluster_state();
                if state.get_keyspace(&ks).is_none() {
                    continue;
                }
                let mut out = Vec::with_capacity(owned.len());
                let mut complete = true;
                for (epoch, key) in &owned {
                    let replicas = state
                        .get_endpoints(&ks, "blobs", &(&n, *epoch, key))
                        .map_err(|e| unavailable(format!("replicas of {key}: {e}")))?;
                    complete &= !replicas.is_empty();
                    out.push(replicas.iter().any(|(node, _)| {
                        node.address.ip() == want.0
                            && want.1.is_none_or(|p| p == node.address.port())
                    }));
                }
                if complete {
                    return Ok(out);
                }
            }
            Err(unavailable(format!(
                "the cluster metadata does not place the keys of keyspace {ks} on nodes yet"
            )))
        })
    }

    fn add_to_epoch_indexes(&self, items: &[(i64, &str, Vec<&str>)]) -> Vec<Result<()>> {
        let owned: Vec<(Result<()>, i64, String, Vec<String>)> = items
            .iter()
            .map(|(epoch, dc, entries)| {
                (
                    check_entries(dc, entries),
                    *epoch,
                    dc.to_string(),
                    entries.iter().map(|e| e.to_string()).collect(),
                )
            })
            .collect();
        let count = items.len();
        let done = self.run(|s| async move {
            let adds = owned.into_iter().map(|(checked, epoch, dc, entries)| {
                let s = s.clone();
                async move {
                    checked?;
                    if entries.is_empty() {
                        return Ok(());
                    }
                    s.add_index(None, epoch, dc, entries).await
                }
            });
            Ok(join_all(adds).await)
        });
        match done {
            Ok(v) => v,
            Err(e) => (0..count)
                .map(|_| Err(unavailable(e.to_string())))
                .collect(),
        }
    }

    fn add_counts_once_many(&self, items: &[CountsAdd<'_>]) -> Vec<Result<()>> {
        type Owned = (
            Result<()>,
            String,
            String,
            i64,
            String,
            String,
            String,
            Counts,
        );
        let owned: Vec<Owned> = items
            .iter()
            .map(|a| {
                (
                    check_counts_write(a.write)
                        .and_then(|()| check_counts(a.dc, a.event_type, a.subtype, a.counts)),
                    a.write.writer.to_owned(),
                    a.write.batch.to_owned(),
                    a.epoch,
                    a.dc.to_owned(),
                    a.event_type.to_owned(),
                    a.subtype.to_owned(),
                    a.counts.clone(),
                )
            })
            .collect();
        let count = items.len();
        let done = self.run(|s| async move {
            let adds = owned
                .into_iter()
                .map(|(checked, w, b, epoch, dc, t, st, c)| {
                    let s = s.clone();
                    async move {
                        checked?;
                        s.add_counts(w, b, epoch, dc, t, st, c).await
                    }
                });
            Ok(join_all(adds).await)
        });
        match done {
            Ok(v) => v,
            Err(e) => (0..count)
                .map(|_| Err(unavailable(e.to_string())))
                .collect(),
        }
    }

    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> Result<Option<Vec<u8>>> {
        check_key(ns, key)?;
        let (n, k) = (ns.as_str().into_owned(), key.key.to_owned());
        let epoch = key.epoch;
        self.run(|s| async move { s.get_blob(n, epoch, k).await })
    }

    /// Yes: every blob row carries the CRC-32 of its bytes, checked on each read.
    fn checks_each_read(&self) -> bool {
        true
    }

    fn get_blobs(&self, ns: &Namespace, keys: &[BlobKey<'_>]) -> Vec<Result<Option<Vec<u8>>>> {
        // In parallel (bounded by the in-flight semaphore), answers in the order of `keys`.
        let n = ns.as_str().into_owned();
        let mut checked: Vec<Result<(i64, String)>> = Vec::with_capacity(keys.len());
        for k in keys {
            checked.push(check_key(ns, *k).map(|()| (k.epoch, k.key.to_owned())));
        }
        let fetched = self.run(|s| async move {
            let gets = checked.into_iter().map(|k| {
                let s = s.clone();
                let n = n.clone();
                async move {
                    let (epoch, key) = k?;
                    s.get_blob(n, epoch, key).await
                }
            });
            Ok(join_all(gets).await)
        });
        match fetched {
            Ok(v) => v,
            Err(e) => keys
                .iter()
                .map(|_| Err(unavailable(e.to_string())))
                .collect(),
        }
    }

    fn add_to_epoch_index(&self, epoch: i64, dc: &str, entries: &[&str]) -> Result<()> {
        check_entries(dc, entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let dc = dc.to_owned();
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        self.run(|s| async move { s.add_index(None, epoch, dc, entries).await })
    }

    fn add_to_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
        entries: &[&str],
    ) -> Result<()> {
        check_key(ns, BlobKey::new(epoch, "-"))?;
        if *ns == Namespace::Events {
            return self.add_to_epoch_index(epoch, dc, entries);
        }
        check_entries(dc, entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let (ns, dc) = (ns.as_str().into_owned(), dc.to_owned());
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        self.run(|s| async move { s.add_index(Some(ns), epoch, dc, entries).await })
    }

    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> Result<BTreeSet<String>> {
        check_key(ns, BlobKey::new(epoch, "-"))?;
        if *ns == Namespace::Events {
            return self.get_epoch_index(epoch, dc);
        }
        check_text("dc", dc, 255)?;
        let (ns, dc) = (ns.as_str().into_owned(), dc.to_owned());
        self.run(|s| async move { s.get_index(Some(ns), epoch, dc).await })
    }

    fn put_catalog(&self, kind: &str, name: &str, value: Option<&[u8]>) -> Result<()> {
        check_catalog(kind, name, value)?;
        let (kind, name, value) = (kind.to_owned(), name.to_owned(), value.map(<[u8]>::to_vec));
        self.run(|s| async move { s.put_catalog(kind, name, value).await })
    }

    fn get_catalog(&self, kind: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        check_text("catalog kind", kind, 255)?;
        let kind = kind.to_owned();
        self.run(|s| async move { s.get_catalog(kind).await })
    }

    fn get_epoch_index(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        check_text("dc", dc, 255)?;
        let dc = dc.to_owned();
        self.run(|s| async move { s.get_index(None, epoch, dc).await })
    }

    /// At [`latest_read_consistency`](crate::session::latest_read_consistency) (QUORUM under the
    /// default `write_cl=quorum&read_cl=one`), not `read_cl`.
    fn get_epoch_index_latest(&self, epoch: i64, dc: &str) -> Result<BTreeSet<String>> {
        check_text("dc", dc, 255)?;
        let dc = dc.to_owned();
        self.run(|s| async move { s.get_epoch_index_latest(epoch, dc).await })
    }

    fn add_counts(
        &self,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        check_counts(dc, event_type, subtype, counts)?;
        // A fresh token per call; the retries inside reuse it, so they add once.
        let seq = self.shared.token_seq.fetch_add(1, Ordering::Relaxed);
        let batch = format!("{:016x}.{seq}", self.shared.token_salt);
        let args = (
            dc.to_owned(),
            event_type.to_owned(),
            subtype.to_owned(),
            counts.clone(),
        );
        self.run(|s| async move {
            s.add_counts(
                ADD_COUNTS_WRITER.to_owned(),
                batch,
                epoch,
                args.0,
                args.1,
                args.2,
                args.3,
            )
            .await
        })
    }

    fn add_counts_once(
        &self,
        write: CountsWrite<'_>,
        epoch: i64,
        dc: &str,
        event_type: &str,
        subtype: &str,
        counts: &Counts,
    ) -> Result<()> {
        check_counts_write(write)?;
        check_counts(dc, event_type, subtype, counts)?;
        let args = (
            write.writer.to_owned(),
            write.batch.to_owned(),
            dc.to_owned(),
            event_type.to_owned(),
            subtype.to_owned(),
            counts.clone(),
        );
        self.run(|s| async move {
            s.add_counts(args.0, args.1, epoch, args.2, args.3, args.4, args.5)
                .await
        })
    }

    fn get_counts(&self, epoch: i64, dc: &str) -> Result<BTreeMap<TypeSubtype, Counts>> {
        check_text("dc", dc, 255)?;
        let dc = dc.to_owned();
        self.run(|s| async move { s.get_counts(epoch, dc).await })
    }

    fn list_epochs(&self, dc: Option<&str>, from: i64, to: i64) -> Result<Vec<(i64, String)>> {
        let dc = dc.map(str::to_owned);
        self.run(|s| async move { s.list_epochs(dc, from, to).await })
    }

    fn expire(&self, now: i64) -> Result<ExpireReport> {
        self.run(|s| async move { s.expire(now).await })
    }

    fn flush(&self) -> Result<()> {
        // Writes are acknowledged by `write_cl` replicas (commit log), nothing is buffered here.
        Ok(())
    }

    fn retention(&self) -> Retention {
        self.shared.db.retention
    }
}
