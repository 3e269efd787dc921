//! The CQL schema of the Cassandra backend (reasons in docs/decisions.md, "Cassandra /
//! ScyllaDB store").
//!
//! # Contract
//! - [`statements`] creates everything with `IF NOT EXISTS`: running it again, or from several
//!   processes at once, is harmless.
//! - Data tables expire by `default_time_to_live` = retention period + one partition (so data
//!   lives at least the retention period counted from its write), and compact by time window
//!   (TWCS, one window per time partition). The catalog never expires.
//! - Blobs are stored without table compression (they are compressed already).

use sluice_store::Retention;

/// The tables, for `DROP`/checks and docs: name → what it holds.
pub const TABLES: &[(&str, &str)] = &[
    (
        "blobs",
        "one partition per blob: ((ns, epoch, key)) → bytes, crc",
    ),
    (
        "blob_keys",
        "per time slot, which blobs exist (for expire): ((slot), ns, epoch, key)",
    ),
    (
        "epoch_index",
        "set-union rows: ((epoch, dc), entry)",
    ),
    (
        "namespace_index",
        "per-namespace epoch index: ((epoch, dc), ns, entry)",
    ),
    (
        "counts",
        "per-writer, per-batch rows summed by readers: ((epoch, dc), type, subtype, writer, batch_id)",
    ),
    (
        "epochs",
        "the (epoch, dc) pairs of each time partition: ((bucket), epoch, dc) → listed",
    ),
    ("buckets", "the time partitions that hold data: ((shard), bucket)"),
    ("catalog", "small named records, no TTL: ((kind), name) → value"),
];

/// The TTL of data tables for `retention`, in seconds (0 = none).
pub fn ttl_secs(retention: Retention) -> i64 {
    if retention.period_secs == 0 {
        0
    } else {
        retention
            .period_secs
            .saturating_add(retention.partition_secs)
            .min(630_720_000) // Cassandra's maximum TTL (20 years)
    }
}

fn twcs(retention: Retention) -> String {
    let p = retention.partition_secs.max(60);
    let (unit, size) = if p % 3600 == 0 {
        ("HOURS", p / 3600)
    } else {
        ("MINUTES", (p / 60).max(1))
    };
    format!(
        "{{'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': '{unit}', 'compaction_window_size': {size}}}"
    )
}

/// The statements that create the keyspace and its tables.
pub fn statements(keyspace: &str, rf: u32, retention: Retention) -> Vec<String> {
    let ttl = ttl_secs(retention);
    let data = format!(
        "default_time_to_live = {ttl} AND compaction = {} AND gc_grace_seconds = 10800",
        twcs(retention)
    );
    let k = keyspace;
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {k} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.blobs (ns text, epoch bigint, key text, bytes blob, crc int, \
             PRIMARY KEY ((ns, epoch, key))) WITH {data} AND compression = {{'enabled': 'false'}}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.blob_keys (slot bigint, ns text, epoch bigint, key text, \
             PRIMARY KEY ((slot), ns, epoch, key)) WITH {data}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.epoch_index (epoch bigint, dc text, entry text, \
             PRIMARY KEY ((epoch, dc), entry)) WITH {data}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.namespace_index (epoch bigint, dc text, ns text, entry text, \
             PRIMARY KEY ((epoch, dc), ns, entry)) WITH {data}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.counts (epoch bigint, dc text, type text, subtype text, \
             writer text, batch_id text, stored bigint, late bigint, kernel_dropped bigint, \
             dropped map<text, bigint>, PRIMARY KEY ((epoch, dc), type, subtype, writer, batch_id)) WITH {data}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.epochs (bucket bigint, epoch bigint, dc text, listed boolean, \
             PRIMARY KEY ((bucket), epoch, dc)) WITH {data}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.buckets (shard int, bucket bigint, \
             PRIMARY KEY ((shard), bucket)) WITH default_time_to_live = {ttl}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {k}.catalog (kind text, name text, value blob, \
             PRIMARY KEY ((kind), name))"
        ),
    ]
}

/// The data tables whose `default_time_to_live` follows the retention (ALTERed on open when
/// the keyspace was created with another retention).
pub const TTL_TABLES: &[&str] = &[
    "blobs",
    "blob_keys",
    "epoch_index",
    "namespace_index",
    "counts",
    "epochs",
    "buckets",
];

/// The width of a `blob_keys` slot: a minute when it divides the partition, else the partition.
pub fn slot_secs(retention: Retention) -> i64 {
    if retention.partition_secs % 60 == 0 {
        60
    } else {
        retention.partition_secs
    }
}
