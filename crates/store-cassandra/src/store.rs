//! [`CassandraStore`]: the [`Store`] trait on a Cassandra / ScyllaDB keyspace.
//!
//! # Contract
//! - Synchronous, like the trait: each call runs on the store's own small tokio runtime (two
//!   worker threads) and the calling thread waits on a channel, so it may be called from any
//!   thread, including a worker of another runtime (it blocks that thread, never panics).
//! - Every request has a client-side timeout ([`CassandraConfig::request_timeout`]); at most
//!   [`CassandraConfig::max_in_flight`] requests are in flight per store (a semaphore); every
//!   write is idempotent and is retried up to [`ATTEMPTS`] times with exponential backoff
//!   (50 ms, 100 ms, 200 ms) on a transient error before the error is returned. Routing is the
//!   driver's token-aware default.
//! - Connecting is lazy: [`CassandraStore::open`] never fails because the cluster is down;
//!   calls return [`StoreError::Unavailable`] until a connection succeeds (retried at most once
//!   a second), so a server starts and spools while the cluster is away.
//! - Blobs are write-once through a lightweight transaction (`INSERT … IF NOT EXISTS`, serial
//!   consistency SERIAL, commit at the write consistency): one winner among concurrent writers of
//!   a key; a second write of identical bytes is [`PutOutcome::AlreadyPresent`]. Every blob is
//!   stored with a CRC-32 that reads check ([`StoreError::Corrupted`] on a mismatch).
//! - The epoch index and the per-namespace index are rows (one per entry): adds are set unions
//!   without reads. Counts are one row per (writer, batch) token that readers add up:
//!   [`Store::add_counts_once`] rewrites the same row on a retry; [`Store::add_counts`] writes
//!   a row under a fresh token, retried with the same token.
//! - Retention: every data table has `default_time_to_live` (retention + one partition), so
//!   the cluster expires data by itself. [`Store::expire`] additionally drops, with partition
//!   deletes, every time partition the `buckets` registry lists that is wholly expired at `now`
//!   (data written under old epochs, tests with a fake clock).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{ExecutionError, RequestAttemptError};
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::SerialConsistency;
use scylla::value::{CqlValue, Row};
use sluice_store::checks::{
    check_catalog, check_counts, check_counts_write, check_entries, check_key, check_put,
    check_text,
};
use sluice_store::{
    BlobKey, Counts, CountsAdd, CountsWrite, ExpireReport, Namespace, PutOutcome, Result,
    Retention, Store, StoreError, TypeSubtype,
};
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

use crate::schema;
use crate::url::{valid_keyspace, CassandraConfig};

/// Attempts of one idempotent request (the first try and its retries).
pub const ATTEMPTS: u32 = 4;
/// The backoff before the first retry; doubled for each further one.
const BACKOFF: Duration = Duration::from_millis(50);
/// How often a store that cannot reach the cluster tries to connect again, at most.
const RECONNECT_EVERY: Duration = Duration::from_secs(1);
/// The writer name of plain [`Store::add_counts`] rows (a NUL cannot appear in a real writer).
const ADD_COUNTS_WRITER: &str = "\0add";
/// Most `(epoch, dc)` marks remembered (then forgotten all at once: a mark only saves a write).
const MAX_EPOCH_MARKS: usize = 100_000;
/// The single partition of the `buckets` registry.
const BUCKETS_SHARD: i32 = 0;

/// The prepared statements, prepared once per connection.
struct Statements {
    put_blob: PreparedStatement,
    get_blob: PreparedStatement,
    put_blob_key: PreparedStatement,
    put_bucket: PreparedStatement,
    put_epoch: PreparedStatement,
    touch_epoch: PreparedStatement,
    put_index: PreparedStatement,
    get_index: PreparedStatement,
    put_ns_index: PreparedStatement,
    get_ns_index: PreparedStatement,
    put_counts: PreparedStatement,
    get_counts: PreparedStatement,
    list_buckets: PreparedStatement,
    list_epochs: PreparedStatement,
    put_catalog: PreparedStatement,
    del_catalog: PreparedStatement,
    get_catalog: PreparedStatement,
}

struct Conn {
    session: Session,
    st: Statements,
}

struct Shared {
    config: CassandraConfig,
    retention: Retention,
    /// Creates the schema and aligns its TTL on connect (false for readers: a reader never
    /// changes the keyspace).
    owns_schema: bool,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// When a connection was last tried and why it failed (for the rate limit and the error).
    last_failure: Mutex<Option<(Instant, String)>>,
    in_flight: Semaphore,
    /// Time partitions this store registered in `buckets` (cleared by `expire`).
    known_buckets: Mutex<HashSet<i64>>,
    /// `(epoch, dc)` pairs this store registered in `epochs` (true: also listed), so a second
    /// of many (type, subtype) groups writes its `epochs` row once. Cleared by `expire`.
    epoch_marks: Mutex<HashMap<(i64, String), bool>>,
    /// Unique tokens for plain `add_counts` rows: this process's salt and a counter.
    token_salt: u64,
    token_seq: AtomicU64,
}

/// The [`Store`] on a Cassandra / ScyllaDB keyspace (see the [module docs](self)).
pub struct CassandraStore {
    rt: Option<Runtime>,
    shared: Arc<Shared>,
}

impl Drop for CassandraStore {
    fn drop(&mut self) {
        // Dropping a runtime inside another runtime's context panics: shut it down detached.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn unavailable(reason: impl Into<String>) -> StoreError {
    StoreError::Unavailable {
        reason: reason.into(),
    }
}

/// Errors that retrying cannot fix (the request itself is wrong).
fn is_permanent(e: &ExecutionError) -> bool {
    use scylla::errors::DbError;
    match e {
        ExecutionError::BadQuery(_) | ExecutionError::PrepareError(_) => true,
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, _)) => matches!(
            db,
            DbError::SyntaxError
                | DbError::Invalid
                | DbError::Unauthorized
                | DbError::ConfigError
                | DbError::AlreadyExists { .. }
                | DbError::AuthenticationError
        ),
        _ => false,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn rows_of(r: QueryResult, op: &str) -> Result<scylla::response::query_result::QueryRowsResult> {
    r.into_rows_result()
        .map_err(|e| unavailable(format!("{op}: unexpected result: {e}")))
}

fn bad_row(op: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupted {
        key: op.to_owned(),
        reason: format!("unexpected row: {e}"),
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: Option<i64>) -> u64 {
    u64::try_from(n.unwrap_or(0)).unwrap_or(0)
}

impl Shared {
    /// The connection, connecting (and creating the schema) if there is none yet.
    async fn conn(&self) -> Result<Arc<Conn>> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        if let Some((at, why)) = lock(&self.last_failure).as_ref() {
            if at.elapsed() < RECONNECT_EVERY {
                return Err(unavailable(format!(
                    "cannot reach {}: {why}",
                    self.config.hosts.join(",")
                )));
            }
        }
        let budget = self.config.connect_timeout + self.config.request_timeout * 12;
        match tokio::time::timeout(budget, self.connect()).await {
            Ok(Ok(c)) => {
                let c = Arc::new(c);
                *guard = Some(c.clone());
                *lock(&self.last_failure) = None;
                Ok(c)
            }
            Ok(Err(why)) => {
                *lock(&self.last_failure) = Some((Instant::now(), why.clone()));
                Err(unavailable(format!(
                    "cannot reach {}: {why}",
                    self.config.hosts.join(",")
                )))
            }
            Err(_) => {
                let why = format!("connecting took more than {budget:?}");
                *lock(&self.last_failure) = Some((Instant::now(), why.clone()));
                Err(unavailable(why))
            }
        }
    }

    async fn connect(&self) -> std::result::Result<Conn, String> {
        let c = &self.config;
        let session = SessionBuilder::new()
            .known_nodes(&c.hosts)
            .connection_timeout(c.connect_timeout)
            .schema_agreement_timeout(Duration::from_secs(30))
            .build()
            .await
            .map_err(|e| e.to_string())?;
        let create = if self.owns_schema {
            schema::statements(&c.keyspace, c.replication_factor, self.retention)
        } else {
            Vec::new()
        };
        for cql in create {
            let mut st = scylla::statement::unprepared::Statement::new(cql);
            st.set_request_timeout(Some(c.request_timeout.max(Duration::from_secs(30))));
            session
                .query_unpaged(st, ())
                .await
                .map_err(|e| format!("creating the schema: {e}"))?;
        }
        if self.owns_schema {
            self.align_ttl(&session).await?;
        }
        let st = self.prepare_all(&session).await?;
        Ok(Conn { session, st })
    }

    /// ALTERs the data tables whose TTL is not this store's (the keyspace was created with
    /// another retention).
    async fn align_ttl(&self, session: &Session) -> std::result::Result<(), String> {
        let want = i32::try_from(schema::ttl_secs(self.retention)).unwrap_or(i32::MAX);
        let r = session
            .query_unpaged(
                "SELECT table_name, default_time_to_live FROM system_schema.tables WHERE keyspace_name = ?",
                (&self.config.keyspace,),
            )
            .await
            .map_err(|e| format!("reading the schema: {e}"))?;
        let rows = r.into_rows_result().map_err(|e| e.to_string())?;
        for row in rows
            .rows::<(String, Option<i32>)>()
            .map_err(|e| e.to_string())?
        {
            let (table, ttl) = row.map_err(|e| e.to_string())?;
            if schema::TTL_TABLES.contains(&table.as_str()) && ttl.unwrap_or(0) != want {
                let cql = format!(
                    "ALTER TABLE {}.{table} WITH default_time_to_live = {want}",
                    self.config.keyspace
                );
                session
                    .query_unpaged(cql, ())
                    .await
                    .map_err(|e| format!("setting the TTL of {table}: {e}"))?;
            }
        }
        Ok(())
    }

    async fn prepare_all(&self, session: &Session) -> std::result::Result<Statements, String> {
        let c = &self.config;
        let k = &c.keyspace;
        let prep = |cql: String, write: bool, idempotent: bool| async move {
            let mut p = session
                .prepare(cql.clone())
                .await
                .map_err(|e| format!("preparing {cql}: {e}"))?;
            p.set_request_timeout(Some(c.request_timeout));
            p.set_is_idempotent(idempotent);
            p.set_consistency(if write {
                c.write_consistency
            } else {
                c.read_consistency
            });
            Ok::<_, String>(p)
        };
        let mut put_blob = prep(
            format!("INSERT INTO {k}.blobs (ns, epoch, key, bytes, crc) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"),
            true,
            false,
        )
        .await?;
        put_blob.set_serial_consistency(Some(SerialConsistency::Serial));
        Ok(Statements {
            put_blob,
            get_blob: prep(
                format!("SELECT bytes, crc FROM {k}.blobs WHERE ns = ? AND epoch = ? AND key = ?"),
                false,
                true,
            )
            .await?,
            put_blob_key: prep(
                format!("INSERT INTO {k}.blob_keys (slot, ns, epoch, key) VALUES (?, ?, ?, ?)"),
                true,
                true,
            )
            .await?,
            put_bucket: prep(
                format!("INSERT INTO {k}.buckets (shard, bucket) VALUES (?, ?)"),
                true,
                true,
            )
            .await?,
            put_epoch: prep(
                format!("UPDATE {k}.epochs SET listed = ? WHERE bucket = ? AND epoch = ? AND dc = ?"),
                true,
                true,
            )
            .await?,
            touch_epoch: prep(
                format!("INSERT INTO {k}.epochs (bucket, epoch, dc) VALUES (?, ?, ?)"),
                true,
                true,
            )
            .await?,
            put_index: prep(
                format!("INSERT INTO {k}.epoch_index (epoch, dc, entry) VALUES (?, ?, ?)"),
                true,
                true,
            )
            .await?,
            get_index: prep(
                format!("SELECT entry FROM {k}.epoch_index WHERE epoch = ? AND dc = ?"),
                false,
                true,
            )
            .await?,
            put_ns_index: prep(
                format!("INSERT INTO {k}.namespace_index (epoch, dc, ns, entry) VALUES (?, ?, ?, ?)"),
                true,
                true,
            )
            .await?,
            get_ns_index: prep(
                format!("SELECT entry FROM {k}.namespace_index WHERE epoch = ? AND dc = ? AND ns = ?"),
                false,
                true,
            )
            .await?,
            put_counts: prep(
                format!(
                    "INSERT INTO {k}.counts (epoch, dc, type, subtype, writer, batch_id, stored, late, kernel_dropped, dropped) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                true,
                true,
            )
            .await?,
            get_counts: prep(
                format!(
                    "SELECT type, subtype, stored, late, kernel_dropped, dropped FROM {k}.counts WHERE epoch = ? AND dc = ?"
                ),
                false,
                true,
            )
            .await?,
            list_buckets: prep(
                format!("SELECT bucket FROM {k}.buckets WHERE shard = ? AND bucket >= ? AND bucket < ?"),
                false,
                true,
            )
            .await?,
            list_epochs: prep(
                format!(
                    "SELECT epoch, dc, listed FROM {k}.epochs WHERE bucket = ? AND epoch >= ? AND epoch < ?"
                ),
                false,
                true,
            )
            .await?,
            put_catalog: prep(
                format!("INSERT INTO {k}.catalog (kind, name, value) VALUES (?, ?, ?)"),
                true,
                true,
            )
            .await?,
            del_catalog: prep(
                format!("DELETE FROM {k}.catalog WHERE kind = ? AND name = ?"),
                true,
                true,
            )
            .await?,
            get_catalog: prep(
                format!("SELECT name, value FROM {k}.catalog WHERE kind = ?"),
                false,
                true,
            )
            .await?,
        })
    }

    /// Runs `st` with `values`: bounded in flight, timed out, retried with backoff when
    /// `retry` (every statement of this store is idempotent, the LWT included: its retry reads
    /// the row it may have written). `op` names the operation in errors.
    async fn exec(
        &self,
        st: &PreparedStatement,
        values: impl SerializeRow,
        op: &(dyn Fn() -> String + Sync),
        write: bool,
    ) -> Result<QueryResult> {
        let conn = self.conn().await?;
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(BACKOFF * 2u32.pow(attempt - 1)).await;
            }
            let _permit = self
                .in_flight
                .acquire()
                .await
                .map_err(|_| unavailable("store closed"))?;
            // The driver has its own timeout per statement; this one also covers waiting for
            // a connection from the pool.
            let limit = self.config.request_timeout + Duration::from_millis(500);
            match tokio::time::timeout(limit, conn.session.execute_unpaged(st, &values)).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) if is_permanent(&e) => {
                    return Err(StoreError::InvalidArgument {
                        reason: format!("{}: {e}", op()),
                    })
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("no answer in {limit:?}"),
            }
        }
        Err(if write {
            StoreError::UnknownOutcome {
                op: format!("{} (after {ATTEMPTS} attempts: {last})", op()),
            }
        } else {
            unavailable(format!("{} (after {ATTEMPTS} attempts: {last})", op()))
        })
    }

    async fn register_bucket(&self, epoch: i64) -> Result<()> {
        let bucket = self.retention.partition_of(epoch);
        if lock(&self.known_buckets).contains(&bucket) {
            return Ok(());
        }
        let st = &self.conn().await?.st.put_bucket;
        self.exec(
            st,
            (BUCKETS_SHARD, bucket),
            &|| format!("register partition {bucket}"),
            true,
        )
        .await?;
        lock(&self.known_buckets).insert(bucket);
        Ok(())
    }

    async fn put_blob(
        &self,
        ns: String,
        epoch: i64,
        key: String,
        bytes: Vec<u8>,
    ) -> Result<PutOutcome> {
        self.register_bucket(epoch).await?;
        let conn = self.conn().await?;
        let slot =
            epoch.div_euclid(schema::slot_secs(self.retention)) * schema::slot_secs(self.retention);
        let op = || format!("put_blob {ns} {key}");
        let crc = crc32(&bytes);
        // The slot registry (for expire) and the blob at once: a blob whose registry row
        // failed still expires by its TTL.
        let (registered, r) = futures_util::join!(
            self.exec(&conn.st.put_blob_key, (slot, &ns, epoch, &key), &op, true),
            self.exec(
                &conn.st.put_blob,
                (&ns, epoch, &key, &bytes, crc),
                &op,
                true
            )
        );
        registered?;
        let r = r?;
        let rows = rows_of(r, &op())?;
        let bytes_col = rows.column_specs().get_by_name("bytes").map(|(i, _)| i);
        let row: Row = rows.first_row().map_err(|e| bad_row(&op(), e))?;
        match row.columns.first() {
            Some(Some(CqlValue::Boolean(true))) => Ok(PutOutcome::Written),
            Some(Some(CqlValue::Boolean(false))) => {
                let existing = bytes_col
                    .and_then(|i| row.columns.get(i))
                    .and_then(|v| match v {
                        Some(CqlValue::Blob(b)) => Some(b.as_slice()),
                        None => Some(&[][..]),
                        _ => None,
                    });
                match existing {
                    Some(b) if b == bytes.as_slice() => Ok(PutOutcome::AlreadyPresent),
                    Some(_) => Err(StoreError::Exists { key }),
                    None => Err(bad_row(&op(), "no bytes in a not-applied answer")),
                }
            }
            other => Err(bad_row(&op(), format!("[applied] is {other:?}"))),
        }
    }

    async fn get_blob(&self, ns: String, epoch: i64, key: String) -> Result<Option<Vec<u8>>> {
        let conn = self.conn().await?;
        let op = || format!("get_blob {ns} {key}");
        let r = self
            .exec(&conn.st.get_blob, (&ns, epoch, &key), &op, false)
            .await?;
        let rows = rows_of(r, &op())?;
        let row = rows
            .maybe_first_row::<(Option<Vec<u8>>, Option<i32>)>()
            .map_err(|e| bad_row(&op(), e))?;
        let Some((bytes, crc)) = row else {
            return Ok(None);
        };
        let bytes = bytes.unwrap_or_default();
        if crc != Some(crc32(&bytes)) {
            return Err(StoreError::Corrupted {
                key,
                reason: format!("CRC-32 {:?} stored, {} computed", crc, crc32(&bytes)),
            });
        }
        Ok(Some(bytes))
    }

    async fn add_index(
        &self,
        ns: Option<String>,
        epoch: i64,
        dc: String,
        entries: Vec<String>,
    ) -> Result<()> {
        self.register_bucket(epoch).await?;
        let conn = self.conn().await?;
        let op = || format!("index {epoch}-{dc}");
        let (ns_ref, dc_ref, conn_ref, op_ref) = (&ns, &dc, &conn, &op);
        let writes = entries.iter().map(|e| async move {
            let (ns, dc, conn, op) = (ns_ref, dc_ref, conn_ref, op_ref);
            match &ns {
                None => {
                    self.exec(&conn.st.put_index, (epoch, dc, e), op, true)
                        .await
                }
                Some(ns) => {
                    self.exec(&conn.st.put_ns_index, (epoch, dc, ns, e), op, true)
                        .await
                }
            }
        });
        for r in join_all(writes).await {
            r?;
        }
        // Listed only after its entries are readable (and for namespaces: not listed at all,
        // only registered, so expire finds it).
        let bucket = self.retention.partition_of(epoch);
        let listed = ns.is_none().then_some(true);
        match listed {
            Some(l) => {
                let mark = (epoch, dc.clone());
                if lock(&self.epoch_marks).get(&mark) != Some(&true) {
                    self.exec(&conn.st.put_epoch, (l, bucket, epoch, &dc), &op, true)
                        .await?;
                    self.mark_epoch(mark, true);
                }
            }
            None => self.touch_epoch(&conn, bucket, epoch, &dc).await?,
        }
        Ok(())
    }

    /// Registers `(epoch, dc)` in `epochs` without listing it (counts, namespace indexes), so
    /// that `expire` finds its rows. Once per (epoch, dc) and process (see `epoch_marks`).
    async fn touch_epoch(&self, conn: &Conn, bucket: i64, epoch: i64, dc: &str) -> Result<()> {
        let mark = (epoch, dc.to_owned());
        if lock(&self.epoch_marks).contains_key(&mark) {
            return Ok(());
        }
        let op = || format!("register {epoch}-{dc}");
        self.exec(&conn.st.touch_epoch, (bucket, epoch, dc), &op, true)
            .await?;
        self.mark_epoch(mark, false);
        Ok(())
    }

    /// Remembers that `(epoch, dc)` is registered (`listed`: and listed), bounded in size.
    fn mark_epoch(&self, mark: (i64, String), listed: bool) {
        let mut marks = lock(&self.epoch_marks);
        if marks.len() >= MAX_EPOCH_MARKS {
            marks.clear();
        }
        let slot = marks.entry(mark).or_insert(listed);
        *slot |= listed;
    }

    async fn get_index(
        &self,
        ns: Option<String>,
        epoch: i64,
        dc: String,
    ) -> Result<BTreeSet<String>> {
        let conn = self.conn().await?;
        let op = || format!("get index {epoch}-{dc}");
        let r = match &ns {
            None => {
                self.exec(&conn.st.get_index, (epoch, &dc), &op, false)
                    .await?
            }
            Some(ns) => {
                self.exec(&conn.st.get_ns_index, (epoch, &dc, ns), &op, false)
                    .await?
            }
        };
        let rows = rows_of(r, &op())?;
        let mut out = BTreeSet::new();
        for row in rows.rows::<(String,)>().map_err(|e| bad_row(&op(), e))? {
            out.insert(row.map_err(|e| bad_row(&op(), e))?.0);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    async fn add_counts(
        &self,
        writer: String,
        batch: String,
        epoch: i64,
        dc: String,
        event_type: String,
        subtype: String,
        counts: Counts,
    ) -> Result<()> {
        self.register_bucket(epoch).await?;
        let conn = self.conn().await?;
        let dropped: BTreeMap<&str, i64> = counts
            .dropped
            .iter()
            .map(|(k, v)| (k.as_str(), to_i64(*v)))
            .collect();
        let op = || format!("add_counts {epoch}-{dc} {event_type}:{subtype}");
        let touch = self.touch_epoch(&conn, self.retention.partition_of(epoch), epoch, &dc);
        let put = self.exec(
            &conn.st.put_counts,
            (
                epoch,
                &dc,
                &event_type,
                &subtype,
                &writer,
                &batch,
                to_i64(counts.stored),
                to_i64(counts.late),
                to_i64(counts.kernel_dropped),
                dropped,
            ),
            &op,
            true,
        );
        let (touched, put) = futures_util::join!(touch, put);
        touched?;
        put?;
        Ok(())
    }

    async fn get_counts(&self, epoch: i64, dc: String) -> Result<BTreeMap<TypeSubtype, Counts>> {
        let conn = self.conn().await?;
        let op = || format!("get_counts {epoch}-{dc}");
        let r = self
            .exec(&conn.st.get_counts, (epoch, &dc), &op, false)
            .await?;
        let rows = rows_of(r, &op())?;
        let mut out: BTreeMap<TypeSubtype, Counts> = BTreeMap::new();
        type CountsRow = (
            String,
            String,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<BTreeMap<String, i64>>,
        );
        for row in rows.rows::<CountsRow>().map_err(|e| bad_row(&op(), e))? {
            let (t, s, stored, late, kd, dropped) = row.map_err(|e| bad_row(&op(), e))?;
            let c = Counts {
                stored: to_u64(stored),
                late: to_u64(late),
                kernel_dropped: to_u64(kd),
                dropped: dropped
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, to_u64(Some(v))))
                    .collect(),
            };
            out.entry((t, s)).or_default().merge(&c);
        }
        Ok(out)
    }

    async fn buckets(&self, from: i64, to: i64) -> Result<Vec<i64>> {
        let conn = self.conn().await?;
        let op = || "list partitions".to_string();
        let r = self
            .exec(&conn.st.list_buckets, (BUCKETS_SHARD, from, to), &op, false)
            .await?;
        let rows = rows_of(r, &op())?;
        let mut out = Vec::new();
        for row in rows.rows::<(i64,)>().map_err(|e| bad_row(&op(), e))? {
            out.push(row.map_err(|e| bad_row(&op(), e))?.0);
        }
        Ok(out)
    }

    /// `(epoch, dc, listed)` of the partition starting at `bucket`, within `[from, to)`.
    async fn epochs_of(&self, bucket: i64, from: i64, to: i64) -> Result<Vec<(i64, String, bool)>> {
        let conn = self.conn().await?;
        let op = || format!("list epochs of partition {bucket}");
        let r = self
            .exec(&conn.st.list_epochs, (bucket, from, to), &op, false)
            .await?;
        let rows = rows_of(r, &op())?;
        let mut out = Vec::new();
        for row in rows
            .rows::<(i64, String, Option<bool>)>()
            .map_err(|e| bad_row(&op(), e))?
        {
            let (e, dc, listed) = row.map_err(|e| bad_row(&op(), e))?;
            out.push((e, dc, listed == Some(true)));
        }
        Ok(out)
    }

    async fn list_epochs(
        &self,
        dc: Option<String>,
        from: i64,
        to: i64,
    ) -> Result<Vec<(i64, String)>> {
        if from >= to {
            return Ok(Vec::new());
        }
        let buckets = self.buckets(self.retention.partition_of(from), to).await?;
        let lists = join_all(buckets.iter().map(|b| self.epochs_of(*b, from, to))).await;
        let mut out = Vec::new();
        for l in lists {
            for (e, d, listed) in l? {
                if listed && dc.as_deref().is_none_or(|want| want == d) {
                    out.push((e, d));
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// A simple statement with this store's timeout, run with retries (for `expire`'s deletes
    /// and reads, which are rare and take table names).
    async fn simple(
        &self,
        cql: String,
        values: impl SerializeRow,
        write: bool,
    ) -> Result<QueryResult> {
        let conn = self.conn().await?;
        let mut st = scylla::statement::unprepared::Statement::new(cql.clone());
        st.set_request_timeout(Some(self.config.request_timeout));
        st.set_consistency(if write {
            self.config.write_consistency
        } else {
            self.config.read_consistency
        });
        st.set_is_idempotent(true);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(BACKOFF * 2u32.pow(attempt - 1)).await;
            }
            let _permit = self
                .in_flight
                .acquire()
                .await
                .map_err(|_| unavailable("store closed"))?;
            let limit = self.config.request_timeout + Duration::from_millis(500);
            match tokio::time::timeout(limit, conn.session.query_unpaged(st.clone(), &values)).await
            {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("no answer in {limit:?}"),
            }
        }
        Err(StoreError::UnknownOutcome {
            op: format!("{cql} ({last})"),
        })
    }

    async fn expire(&self, now: i64) -> Result<ExpireReport> {
        let k = self.config.keyspace.clone();
        let mut report = ExpireReport::default();
        for bucket in self.buckets(i64::MIN, i64::MAX).await? {
            if !self.retention.is_expired(bucket, now) {
                continue;
            }
            // Blobs first (through the slot registry), then metadata, then the registries:
            // an interrupted expire is finished by the next one.
            let slot = schema::slot_secs(self.retention);
            let mut s = bucket;
            while s < bucket.saturating_add(self.retention.partition_secs) {
                let r = self
                    .simple(
                        format!("SELECT ns, epoch, key FROM {k}.blob_keys WHERE slot = ?"),
                        (s,),
                        false,
                    )
                    .await?;
                let rows = rows_of(r, "expire")?;
                let keys: Vec<(String, i64, String)> = rows
                    .rows::<(String, i64, String)>()
                    .map_err(|e| bad_row("expire", e))?
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| bad_row("expire", e))?;
                let deletes = keys.iter().map(|(ns, e, key)| {
                    self.simple(
                        format!("DELETE FROM {k}.blobs WHERE ns = ? AND epoch = ? AND key = ?"),
                        (ns, *e, key),
                        true,
                    )
                });
                for r in join_all(deletes).await {
                    r?;
                }
                if !keys.is_empty() {
                    self.simple(
                        format!("DELETE FROM {k}.blob_keys WHERE slot = ?"),
                        (s,),
                        true,
                    )
                    .await?;
                }
                s = s.saturating_add(slot);
            }
            let epochs = self.epochs_of(bucket, i64::MIN, i64::MAX).await?;
            for (e, dc, _) in &epochs {
                for table in ["epoch_index", "namespace_index", "counts"] {
                    self.simple(
                        format!("DELETE FROM {k}.{table} WHERE epoch = ? AND dc = ?"),
                        (*e, dc),
                        true,
                    )
                    .await?;
                }
            }
            self.simple(
                format!("DELETE FROM {k}.epochs WHERE bucket = ?"),
                (bucket,),
                true,
            )
            .await?;
            self.simple(
                format!("DELETE FROM {k}.buckets WHERE shard = ? AND bucket = ?"),
                (BUCKETS_SHARD, bucket),
                true,
            )
            .await?;
            lock(&self.known_buckets).remove(&bucket);
            lock(&self.epoch_marks).clear();
            report.partitions_dropped += 1;
        }
        Ok(report)
    }

    async fn put_catalog(&self, kind: String, name: String, value: Option<Vec<u8>>) -> Result<()> {
        let conn = self.conn().await?;
        let op = || format!("put_catalog {kind}/{name}");
        match value {
            Some(v) => {
                self.exec(&conn.st.put_catalog, (&kind, &name, v), &op, true)
                    .await?
            }
            None => {
                self.exec(&conn.st.del_catalog, (&kind, &name), &op, true)
                    .await?
            }
        };
        Ok(())
    }

    async fn get_catalog(&self, kind: String) -> Result<BTreeMap<String, Vec<u8>>> {
        let conn = self.conn().await?;
        let op = || format!("get_catalog {kind}");
        let r = self
            .exec(&conn.st.get_catalog, (&kind,), &op, false)
            .await?;
        let rows = rows_of(r, &op())?;
        let mut out = BTreeMap::new();
        for row in rows
            .rows::<(String, Option<Vec<u8>>)>()
            .map_err(|e| bad_row(&op(), e))?
        {
            let (name, v) = row.map_err(|e| bad_row(&op(), e))?;
            out.insert(name, v.unwrap_or_default());
        }
        Ok(out)
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

fn crc32(bytes: &[u8]) -> i32 {
    crc32fast::hash(bytes) as i32
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
        store.run(|s| async move { s.conn().await.map(|_| ()) })?;
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
        let shared = Arc::new(Shared {
            in_flight: Semaphore::new(config.max_in_flight.max(1)),
            config,
            retention,
            owns_schema,
            conn: tokio::sync::Mutex::new(None),
            last_failure: Mutex::new(None),
            known_buckets: Mutex::new(HashSet::new()),
            epoch_marks: Mutex::new(HashMap::new()),
            token_salt: salt,
            token_seq: AtomicU64::new(0),
        });
        let store = CassandraStore {
            rt: Some(rt),
            shared,
        };
        if owns_schema {
            // One try now, so that a reachable cluster is ready (its schema created) at once.
            let _ = store.run(|s| async move { s.conn().await.map(|_| ()) });
        }
        Ok(store)
    }

    /// Like [`open`](Self::open), but fails unless the cluster answers and the schema is in
    /// place (for `sluice store init` and tests).
    pub fn connect(config: CassandraConfig, retention: Retention) -> Result<CassandraStore> {
        let store = CassandraStore::open(config, retention)?;
        // The first try inside `open` may have failed just now: wait out the rate limit once.
        match store.run(|s| async move { s.conn().await.map(|_| ()) }) {
            Ok(()) => Ok(store),
            Err(_) => {
                std::thread::sleep(RECONNECT_EVERY);
                store.run(|s| async move { s.conn().await.map(|_| ()) })?;
                Ok(store)
            }
        }
    }

    /// The config this store was opened with.
    pub fn config(&self) -> &CassandraConfig {
        &self.shared.config
    }

    /// Runs `f` on the store's runtime and waits for it.
    fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Shared>) -> Fut,
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

    /// Drops the keyspace (tests; irreversible).
    pub fn drop_keyspace(&self) -> Result<()> {
        let k = self.shared.config.keyspace.clone();
        self.run(|s| async move {
            s.simple(format!("DROP KEYSPACE IF EXISTS {k}"), (), true)
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
        // The lists concurrently (bounded by the in-flight semaphore), each list in order up to
        // its first failure, as `put_blobs`.
        let n = ns.as_str().into_owned();
        // Per item: its argument check, epoch, key, bytes.
        type Item = (Result<()>, i64, String, Vec<u8>);
        let owned: Vec<Vec<Item>> = lists
            .iter()
            .map(|l| {
                l.iter()
                    .map(|(k, b)| (check_put(ns, *k, b), k.epoch, k.key.to_owned(), b.to_vec()))
                    .collect()
            })
            .collect();
        let sizes: Vec<usize> = lists.iter().map(Vec::len).collect();
        let done = self.run(|s| async move {
            let lists = owned.into_iter().map(|list| {
                let (s, n) = (s.clone(), n.clone());
                async move {
                    let mut out = Vec::with_capacity(list.len());
                    for (checked, epoch, key, bytes) in list {
                        let r = match checked {
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

    fn keys_on_node(&self, node: &str, ns: &Namespace, keys: &[BlobKey<'_>]) -> Result<Vec<bool>> {
        // From the driver's token ring (refreshed by the driver from the cluster's metadata):
        // the blob's partition key (ns, epoch, key) → its replicas.
        let want = parse_node(node)?;
        let n = ns.as_str().into_owned();
        let owned: Vec<(i64, String)> = keys.iter().map(|k| (k.epoch, k.key.to_owned())).collect();
        self.run(|s| async move {
            let conn = s.conn().await?;
            let ks = s.config.keyspace.clone();
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
        self.shared.retention
    }
}
