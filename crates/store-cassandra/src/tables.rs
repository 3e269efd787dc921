//! [`Tables`]: the store's operations on its CQL tables (blobs, indexes, counts, the partition
//! registries, the catalog), async, run on the store's runtime.
//!
//! Each operation is the rows it reads or writes through [`Connection::exec`] and what it makes
//! of them (CRC checks, the `[applied]` answer of a write-once put, counts summed over writer
//! rows); how a request reaches the cluster and is retried is [`Connection`]'s business, and
//! the argument checks and the sync front are [`CassandraStore`](crate::CassandraStore)'s.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use futures_util::future::join_all;
use scylla::response::query_result::{QueryResult, QueryRowsResult};
use scylla::value::{CqlValue, Row};
use sluice_store::{Counts, ExpireReport, PutOutcome, Result, StoreError, TypeSubtype};

use crate::schema;
use crate::session::{lock, unavailable, Conn, Connection};

/// Most `(epoch, dc)` marks remembered (then forgotten all at once: a mark only saves a write).
const MAX_EPOCH_MARKS: usize = 100_000;
/// The single partition of the `buckets` registry.
const BUCKETS_SHARD: i32 = 0;

/// What the store's runtime tasks share: the connection and the caches that save writes.
pub(crate) struct Tables {
    pub(crate) db: Connection,
    /// Time partitions this store registered in `buckets` (cleared by `expire`).
    known_buckets: Mutex<HashSet<i64>>,
    /// `(epoch, dc)` pairs this store registered in `epochs` (true: also listed), so a second
    /// of many (type, subtype) groups writes its `epochs` row once. Cleared by `expire`.
    epoch_marks: Mutex<HashMap<(i64, String), bool>>,
    /// Unique tokens for plain `add_counts` rows: this process's salt and a counter.
    pub(crate) token_salt: u64,
    pub(crate) token_seq: AtomicU64,
}

/// The rows of `r`, or why it has none (`op` names the operation).
fn rows_of(r: QueryResult, op: &str) -> Result<QueryRowsResult> {
    r.into_rows_result()
        .map_err(|e| unavailable(format!("{op}: unexpected result: {e}")))
}

/// A row that does not have the columns the schema gives it.
fn bad_row(op: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupted {
        key: op.to_owned(),
        reason: format!("unexpected row: {e}"),
    }
}

/// The entries of an index read's rows (`op` names the read in errors).
fn index_entries(r: QueryResult, op: &str) -> Result<BTreeSet<String>> {
    let rows = rows_of(r, op)?;
    let mut out = BTreeSet::new();
    for row in rows.rows::<(String,)>().map_err(|e| bad_row(op, e))? {
        out.insert(row.map_err(|e| bad_row(op, e))?.0);
    }
    Ok(out)
}

/// A count as CQL's `bigint` (saturating: counts never come near).
fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored `bigint` count back (absent or negative: 0).
fn to_u64(n: Option<i64>) -> u64 {
    u64::try_from(n.unwrap_or(0)).unwrap_or(0)
}

/// The checksum stored beside each blob (CQL has no unsigned int).
fn crc32(bytes: &[u8]) -> i32 {
    crc32fast::hash(bytes) as i32
}

impl Tables {
    /// The tables behind `db`, with empty caches; `token_salt` makes this process's plain
    /// `add_counts` tokens unique.
    pub(crate) fn new(db: Connection, token_salt: u64) -> Self {
        Tables {
            db,
            known_buckets: Mutex::new(HashSet::new()),
            epoch_marks: Mutex::new(HashMap::new()),
            token_salt,
            token_seq: AtomicU64::new(0),
        }
    }

    /// Registers the time partition of `epoch` in `buckets` (once per process and partition),
    /// so that `expire` finds it.
    async fn register_bucket(&self, epoch: i64) -> Result<()> {
        let bucket = self.db.retention.partition_of(epoch);
        if lock(&self.known_buckets).contains(&bucket) {
            return Ok(());
        }
        let st = &self.db.conn().await?.st.put_bucket;
        self.db
            .exec(
                st,
                (BUCKETS_SHARD, bucket),
                &|| format!("register partition {bucket}"),
                true,
            )
            .await?;
        lock(&self.known_buckets).insert(bucket);
        Ok(())
    }

    /// Writes a blob once (a lightweight transaction) and registers it in its slot for `expire`.
    pub(crate) async fn put_blob(
        &self,
        ns: String,
        epoch: i64,
        key: String,
        bytes: Vec<u8>,
    ) -> Result<PutOutcome> {
        self.register_bucket(epoch).await?;
        let conn = self.db.conn().await?;
        let slot = self.slot_of(epoch);
        let op = || format!("put_blob {ns} {key}");
        let crc = crc32(&bytes);
        // The slot registry (for expire) and the blob at once: a blob whose registry row
        // failed still expires by its TTL.
        let (registered, r) = futures_util::join!(
            self.db
                .exec(&conn.st.put_blob_key, (slot, &ns, epoch, &key), &op, true),
            self.db.exec(
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

    /// Writes a blob whose key the caller owns (see `Store::put_owned_blob_lists`) with a plain,
    /// idempotent insert, and registers it in its slot for `expire`. A rewrite writes the same
    /// bytes again, so the answer is always [`PutOutcome::Written`].
    pub(crate) async fn put_owned_blob(
        &self,
        ns: String,
        epoch: i64,
        key: String,
        bytes: Vec<u8>,
    ) -> Result<PutOutcome> {
        self.register_bucket(epoch).await?;
        let conn = self.db.conn().await?;
        let slot = self.slot_of(epoch);
        let op = || format!("put_blob (owned) {ns} {key}");
        let crc = crc32(&bytes);
        let (registered, written) = futures_util::join!(
            self.db
                .exec(&conn.st.put_blob_key, (slot, &ns, epoch, &key), &op, true),
            self.db.exec(
                &conn.st.put_owned_blob,
                (&ns, epoch, &key, &bytes, crc),
                &op,
                true
            )
        );
        registered?;
        written?;
        Ok(PutOutcome::Written)
    }

    /// The first second of the `blob_keys` slot of `epoch`.
    fn slot_of(&self, epoch: i64) -> i64 {
        let secs = schema::slot_secs(self.db.retention);
        epoch.div_euclid(secs) * secs
    }

    /// A blob's bytes, checked against their stored CRC-32.
    pub(crate) async fn get_blob(
        &self,
        ns: String,
        epoch: i64,
        key: String,
    ) -> Result<Option<Vec<u8>>> {
        let conn = self.db.conn().await?;
        let op = || format!("get_blob {ns} {key}");
        let r = self
            .db
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

    /// Adds `entries` to the epoch index (`ns` None) or a namespace's index, then lists or
    /// registers `(epoch, dc)`.
    pub(crate) async fn add_index(
        &self,
        ns: Option<String>,
        epoch: i64,
        dc: String,
        entries: Vec<String>,
    ) -> Result<()> {
        self.register_bucket(epoch).await?;
        let conn = self.db.conn().await?;
        let op = || format!("index {epoch}-{dc}");
        let (ns_ref, dc_ref, conn_ref, op_ref) = (&ns, &dc, &conn, &op);
        let writes = entries.iter().map(|e| async move {
            let (ns, dc, conn, op) = (ns_ref, dc_ref, conn_ref, op_ref);
            match &ns {
                None => {
                    self.db
                        .exec(&conn.st.put_index, (epoch, dc, e), op, true)
                        .await
                }
                Some(ns) => {
                    self.db
                        .exec(&conn.st.put_ns_index, (epoch, dc, ns, e), op, true)
                        .await
                }
            }
        });
        for r in join_all(writes).await {
            r?;
        }
        // Listed only after its entries are readable (and for namespaces: not listed at all,
        // only registered, so expire finds it).
        let bucket = self.db.retention.partition_of(epoch);
        let listed = ns.is_none().then_some(true);
        match listed {
            Some(l) => {
                let mark = (epoch, dc.clone());
                if lock(&self.epoch_marks).get(&mark) != Some(&true) {
                    self.db
                        .exec(&conn.st.put_epoch, (l, bucket, epoch, &dc), &op, true)
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
        self.db
            .exec(&conn.st.touch_epoch, (bucket, epoch, dc), &op, true)
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

    /// The entries of the epoch index (`ns` None) or a namespace's index.
    pub(crate) async fn get_index(
        &self,
        ns: Option<String>,
        epoch: i64,
        dc: String,
    ) -> Result<BTreeSet<String>> {
        let conn = self.db.conn().await?;
        let op = || format!("get index {epoch}-{dc}");
        let r = match &ns {
            None => {
                self.db
                    .exec(&conn.st.get_index, (epoch, &dc), &op, false)
                    .await?
            }
            Some(ns) => {
                self.db
                    .exec(&conn.st.get_ns_index, (epoch, &dc, ns), &op, false)
                    .await?
            }
        };
        index_entries(r, &op())
    }

    /// The epoch index of `(epoch, dc)` read at the level that overlaps the writes
    /// ([`latest_read_consistency`](crate::session::latest_read_consistency)): every entry whose
    /// add returned `Ok` is in it.
    pub(crate) async fn get_epoch_index_latest(
        &self,
        epoch: i64,
        dc: String,
    ) -> Result<BTreeSet<String>> {
        let conn = self.db.conn().await?;
        let op = || format!("get index {epoch}-{dc} (latest)");
        let r = self
            .db
            .exec(&conn.st.get_index_latest, (epoch, &dc), &op, false)
            .await?;
        index_entries(r, &op())
    }

    /// Writes the counts row of `(writer, batch)` (a retry rewrites the same row).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn add_counts(
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
        let conn = self.db.conn().await?;
        let dropped: BTreeMap<&str, i64> = counts
            .dropped
            .iter()
            .map(|(k, v)| (k.as_str(), to_i64(*v)))
            .collect();
        let op = || format!("add_counts {epoch}-{dc} {event_type}:{subtype}");
        let touch = self.touch_epoch(&conn, self.db.retention.partition_of(epoch), epoch, &dc);
        let put = self.db.exec(
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

    /// The counts of `(epoch, dc)`: every writer's rows summed per (type, subtype).
    pub(crate) async fn get_counts(
        &self,
        epoch: i64,
        dc: String,
    ) -> Result<BTreeMap<TypeSubtype, Counts>> {
        let conn = self.db.conn().await?;
        let op = || format!("get_counts {epoch}-{dc}");
        let r = self
            .db
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

    /// The registered time partitions starting in `[from, to)`.
    async fn buckets(&self, from: i64, to: i64) -> Result<Vec<i64>> {
        let conn = self.db.conn().await?;
        let op = || "list partitions".to_string();
        let r = self
            .db
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
        let conn = self.db.conn().await?;
        let op = || format!("list epochs of partition {bucket}");
        let r = self
            .db
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

    /// The listed `(epoch, dc)` pairs in `[from, to)` (of `dc` only if given), sorted.
    pub(crate) async fn list_epochs(
        &self,
        dc: Option<String>,
        from: i64,
        to: i64,
    ) -> Result<Vec<(i64, String)>> {
        if from >= to {
            return Ok(Vec::new());
        }
        let buckets = self
            .buckets(self.db.retention.partition_of(from), to)
            .await?;
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

    /// Drops every registered time partition wholly expired at `now`.
    pub(crate) async fn expire(&self, now: i64) -> Result<ExpireReport> {
        let k = self.db.config.keyspace.clone();
        let mut report = ExpireReport::default();
        for bucket in self.buckets(i64::MIN, i64::MAX).await? {
            if !self.db.retention.is_expired(bucket, now) {
                continue;
            }
            // Blobs first (through the slot registry), then metadata, then the registries:
            // an interrupted expire is finished by the next one.
            let slot = schema::slot_secs(self.db.retention);
            let mut s = bucket;
            while s < bucket.saturating_add(self.db.retention.partition_secs) {
                let r = self
                    .db
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
                    self.db.simple(
                        format!("DELETE FROM {k}.blobs WHERE ns = ? AND epoch = ? AND key = ?"),
                        (ns, *e, key),
                        true,
                    )
                });
                for r in join_all(deletes).await {
                    r?;
                }
                if !keys.is_empty() {
                    self.db
                        .simple(
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
                    self.db
                        .simple(
                            format!("DELETE FROM {k}.{table} WHERE epoch = ? AND dc = ?"),
                            (*e, dc),
                            true,
                        )
                        .await?;
                }
            }
            self.db
                .simple(
                    format!("DELETE FROM {k}.epochs WHERE bucket = ?"),
                    (bucket,),
                    true,
                )
                .await?;
            self.db
                .simple(
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

    /// Writes (or with `None` deletes) a catalog record.
    pub(crate) async fn put_catalog(
        &self,
        kind: String,
        name: String,
        value: Option<Vec<u8>>,
    ) -> Result<()> {
        let conn = self.db.conn().await?;
        let op = || format!("put_catalog {kind}/{name}");
        match value {
            Some(v) => {
                self.db
                    .exec(&conn.st.put_catalog, (&kind, &name, v), &op, true)
                    .await?
            }
            None => {
                self.db
                    .exec(&conn.st.del_catalog, (&kind, &name), &op, true)
                    .await?
            }
        };
        Ok(())
    }

    /// The catalog records of `kind`.
    pub(crate) async fn get_catalog(&self, kind: String) -> Result<BTreeMap<String, Vec<u8>>> {
        let conn = self.db.conn().await?;
        let op = || format!("get_catalog {kind}");
        let r = self
            .db
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
