//! [`Connection`]: the link from a Cassandra store to its cluster, and the retry policy every
//! request goes through.
//!
//! Kept apart from the table operations because it is the part that deals with an unreliable
//! network rather than with the data: the session is set up lazily and again after a failure
//! (at most once per [`RECONNECT_EVERY`], so a store whose cluster is away fails fast with
//! [`StoreError::Unavailable`] instead of waiting on every call); setting up creates the schema
//! and aligns its TTL when this store owns the schema, then prepares every statement; each
//! request is bounded in flight (a semaphore), timed out on the client side and retried up to
//! [`ATTEMPTS`] times with exponential backoff unless the error is one retrying cannot fix.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{
    DeserializationError, ExecutionError, IntoRowsResultError, NewSessionError, PrepareError,
    RequestAttemptError, RowsError,
};
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use sluice_store::{Result, Retention, StoreError};
use tokio::sync::Semaphore;

use crate::schema;
use crate::url::CassandraConfig;

/// Attempts of one idempotent request (the first try and its retries).
pub const ATTEMPTS: u32 = 4;
/// The backoff before the first retry; doubled for each further one.
const BACKOFF: Duration = Duration::from_millis(50);
/// How often a store that cannot reach the cluster tries to connect again, at most.
pub(crate) const RECONNECT_EVERY: Duration = Duration::from_secs(1);

/// Why setting up a connection failed (kept as its message for the rate-limited error that
/// calls get until the next try).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The driver could not open a session on any contact point.
    #[error("{0}")]
    Session(#[source] NewSessionError),
    /// A `CREATE … IF NOT EXISTS` of the schema failed.
    #[error("creating the schema: {0}")]
    CreateSchema(#[source] ExecutionError),
    /// The query of `system_schema.tables` (for the TTL check) failed.
    #[error("reading the schema: {0}")]
    ReadSchema(#[source] ExecutionError),
    /// The answer of `system_schema.tables` was not rows.
    #[error("{0}")]
    SchemaNotRows(#[source] IntoRowsResultError),
    /// The rows of `system_schema.tables` were not of the expected columns.
    #[error("{0}")]
    SchemaColumns(#[source] RowsError),
    /// A row of `system_schema.tables` could not be read.
    #[error("{0}")]
    SchemaRow(#[source] DeserializationError),
    /// The `ALTER TABLE` that sets a table's TTL to this store's retention failed.
    #[error("setting the TTL of {table}: {source}")]
    SetTtl {
        /// The table altered.
        table: String,
        /// The driver's error.
        #[source]
        source: ExecutionError,
    },
    /// A statement could not be prepared.
    #[error("preparing {cql}: {source}")]
    Prepare {
        /// The statement's CQL.
        cql: String,
        /// The driver's error.
        #[source]
        source: PrepareError,
    },
}

/// The prepared statements, prepared once per connection.
pub(crate) struct Statements {
    pub(crate) put_blob: PreparedStatement,
    /// A plain insert of a blob whose key the caller owns (no lightweight transaction).
    pub(crate) put_owned_blob: PreparedStatement,
    pub(crate) get_blob: PreparedStatement,
    pub(crate) put_blob_key: PreparedStatement,
    pub(crate) put_bucket: PreparedStatement,
    pub(crate) put_epoch: PreparedStatement,
    pub(crate) touch_epoch: PreparedStatement,
    pub(crate) put_index: PreparedStatement,
    pub(crate) get_index: PreparedStatement,
    /// The epoch index at [`latest_read_consistency`].
    pub(crate) get_index_latest: PreparedStatement,
    pub(crate) put_ns_index: PreparedStatement,
    pub(crate) get_ns_index: PreparedStatement,
    pub(crate) put_counts: PreparedStatement,
    pub(crate) get_counts: PreparedStatement,
    pub(crate) list_buckets: PreparedStatement,
    pub(crate) list_epochs: PreparedStatement,
    pub(crate) put_catalog: PreparedStatement,
    pub(crate) del_catalog: PreparedStatement,
    pub(crate) get_catalog: PreparedStatement,
}

/// A live session and the statements prepared on it.
pub(crate) struct Conn {
    pub(crate) session: Session,
    pub(crate) st: Statements,
}

/// The store's link to its cluster: the config, the session once there is one, and the
/// in-flight bound every request takes a permit of.
pub(crate) struct Connection {
    pub(crate) config: CassandraConfig,
    pub(crate) retention: Retention,
    /// Creates the schema and aligns its TTL on connect (false for readers: a reader never
    /// changes the keyspace).
    owns_schema: bool,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// When a connection was last tried and why it failed (for the rate limit and the error).
    last_failure: Mutex<Option<(Instant, String)>>,
    in_flight: Semaphore,
}

/// The error of a store that cannot serve a call now (retrying later may succeed).
pub(crate) fn unavailable(reason: impl Into<String>) -> StoreError {
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

/// The consistency of a read that sees every write acknowledged at `write`: `read` when it
/// already overlaps `write` on any replication factor, else the weakest level that does
/// (R + W > RF). What a writer numbers chunks from: a stale epoch index would let it reuse a
/// listed number, and owned blobs are written without a write-once check.
pub(crate) fn latest_read_consistency(write: Consistency, read: Consistency) -> Consistency {
    use Consistency::{All, EachQuorum, LocalQuorum, Quorum};
    match write {
        // Every replica has it: any read sees it.
        All => read,
        Quorum | EachQuorum if matches!(read, Quorum | All) => read,
        Quorum => Quorum,
        // A (local) quorum in the writer's data centre: a local quorum there overlaps it
        // (readers of a data centre's own index are its collectors).
        LocalQuorum | EachQuorum if matches!(read, LocalQuorum | Quorum | All) => read,
        LocalQuorum | EachQuorum => LocalQuorum,
        // ONE, TWO, THREE, LOCAL_ONE, ANY: only reading every replica is sure to overlap.
        _ => All,
    }
}

/// Locks `m`, ignoring poisoning: the guarded values are caches and a failure note, valid
/// whatever a panicking holder left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    /// A link to `config`'s cluster, not connected yet (the first request connects).
    pub(crate) fn new(config: CassandraConfig, retention: Retention, owns_schema: bool) -> Self {
        Connection {
            in_flight: Semaphore::new(config.max_in_flight.max(1)),
            config,
            retention,
            owns_schema,
            conn: tokio::sync::Mutex::new(None),
            last_failure: Mutex::new(None),
        }
    }

    /// The connection, connecting (and creating the schema) if there is none yet.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>> {
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
                let why = why.to_string();
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

    /// Opens a session, creates the schema and aligns its TTL (when this store owns the
    /// schema), and prepares the statements.
    async fn connect(&self) -> std::result::Result<Conn, ConnectError> {
        let c = &self.config;
        let session = SessionBuilder::new()
            .known_nodes(&c.hosts)
            .connection_timeout(c.connect_timeout)
            .schema_agreement_timeout(Duration::from_secs(30))
            .build()
            .await
            .map_err(ConnectError::Session)?;
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
                .map_err(ConnectError::CreateSchema)?;
        }
        if self.owns_schema {
            self.align_ttl(&session).await?;
        }
        let st = self.prepare_all(&session).await?;
        Ok(Conn { session, st })
    }

    /// ALTERs the data tables whose TTL is not this store's (the keyspace was created with
    /// another retention).
    async fn align_ttl(&self, session: &Session) -> std::result::Result<(), ConnectError> {
        let want = i32::try_from(schema::ttl_secs(self.retention)).unwrap_or(i32::MAX);
        let r = session
            .query_unpaged(
                "SELECT table_name, default_time_to_live FROM system_schema.tables WHERE keyspace_name = ?",
                (&self.config.keyspace,),
            )
            .await
            .map_err(ConnectError::ReadSchema)?;
        let rows = r.into_rows_result().map_err(ConnectError::SchemaNotRows)?;
        for row in rows
            .rows::<(String, Option<i32>)>()
            .map_err(ConnectError::SchemaColumns)?
        {
            let (table, ttl) = row.map_err(ConnectError::SchemaRow)?;
            if schema::TTL_TABLES.contains(&table.as_str()) && ttl.unwrap_or(0) != want {
                let cql = format!(
                    "ALTER TABLE {}.{table} WITH default_time_to_live = {want}",
                    self.config.keyspace
                );
                session
                    .query_unpaged(cql, ())
                    .await
                    .map_err(|source| ConnectError::SetTtl { table, source })?;
            }
        }
        Ok(())
    }

    /// Prepares every statement of the store, each with its consistency, timeout and
    /// idempotence.
    async fn prepare_all(
        &self,
        session: &Session,
    ) -> std::result::Result<Statements, ConnectError> {
        let c = &self.config;
        let k = &c.keyspace;
        let prep = |cql: String, write: bool, idempotent: bool| async move {
            let mut p = session
                .prepare(cql.clone())
                .await
                .map_err(|source| ConnectError::Prepare { cql, source })?;
            p.set_request_timeout(Some(c.request_timeout));
            p.set_is_idempotent(idempotent);
            p.set_consistency(if write {
                c.write_consistency
            } else {
                c.read_consistency
            });
            Ok::<_, ConnectError>(p)
        };
        let mut put_blob = prep(
            format!("INSERT INTO {k}.blobs (ns, epoch, key, bytes, crc) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"),
            true,
            false,
        )
        .await?;
        put_blob.set_serial_consistency(Some(SerialConsistency::Serial));
        let mut get_index_latest = prep(
            format!("SELECT entry FROM {k}.epoch_index WHERE epoch = ? AND dc = ?"),
            false,
            true,
        )
        .await?;
        get_index_latest.set_consistency(latest_read_consistency(
            c.write_consistency,
            c.read_consistency,
        ));
        Ok(Statements {
            put_blob,
            put_owned_blob: prep(
                format!("INSERT INTO {k}.blobs (ns, epoch, key, bytes, crc) VALUES (?, ?, ?, ?, ?)"),
                true,
                true,
            )
            .await?,
            get_index_latest,
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

    /// Runs `st` with `values`: bounded in flight, timed out, retried with backoff
    /// (every statement of this store is idempotent, the LWT included: its retry reads the row
    /// it may have written). `op` names the operation in errors; a `write` that still fails is
    /// [`StoreError::UnknownOutcome`] (it may have been applied), a read [`StoreError::Unavailable`].
    pub(crate) async fn exec(
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

    /// A simple statement with this store's timeout, run with retries (for `expire`'s deletes
    /// and reads, which are rare and take table names).
    pub(crate) async fn simple(
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
}

#[cfg(test)]
mod tests {
    use super::latest_read_consistency as latest;
    use scylla::statement::Consistency::*;

    #[test]
    fn the_latest_read_overlaps_the_write_level() {
        // The defaults (write QUORUM, read ONE): numbering reads at QUORUM.
        assert_eq!(latest(Quorum, One), Quorum);
        assert_eq!(latest(Quorum, LocalQuorum), Quorum);
        assert_eq!(latest(Quorum, All), All);
        // Writes on every replica: the configured read is enough.
        assert_eq!(latest(All, One), One);
        assert_eq!(latest(LocalQuorum, One), LocalQuorum);
        assert_eq!(latest(LocalQuorum, Quorum), Quorum);
        assert_eq!(latest(EachQuorum, One), LocalQuorum);
        assert_eq!(latest(EachQuorum, Quorum), Quorum);
        // Weak writes: only ALL is sure to see them.
        for w in [One, Two, Three, LocalOne] {
            assert_eq!(latest(w, One), All, "{w:?}");
            assert_eq!(latest(w, Quorum), All, "{w:?}");
        }
    }
}
