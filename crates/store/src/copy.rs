//! [`copy_range`]: copies a time range from one store to another (what `sluice store copy`
//! does), on `dyn Store` so that any pair of backends can be copied between.
//!
//! # Contract
//! - Every listed `(epoch, dc)` of `[from, to)` is copied: its blobs (each checked by the
//!   caller's [`CopyPlan::verify`] before it is written, and compared after it is read back
//!   from the target), then its epoch index, then its counts (applied once per
//!   `(epoch, dc, type, subtype)` under a fixed token: a rerun adds nothing).
//! - The catalog kinds of [`CopyPlan::catalog_kinds`] are copied first; the names of
//!   [`CopyPlan::namespace_kind`] are namespaces (`substreams/<name>`) whose blobs and index are
//!   copied with each `(epoch, dc)`, results before their index entries, as writers write them.
//! - A blob that fails verification, is listed without a blob or cannot be read is reported to
//!   the caller ([`SkippedBlob`]) and counted, not copied, and its entry is left out of the
//!   target's index; a blob that reads back different from the source is an error.
//! - The blob format is the caller's business (the store treats values as opaque bytes): the
//!   caller passes the check, so this module does not depend on the codec.

use std::collections::BTreeSet;

use crate::error::StoreError;
use crate::store::{BlobKey, CountsWrite, Namespace, PutOutcome, Store};

/// The writer name the copied counts rows are applied under.
pub const COPY_WRITER: &str = "sluice-store-copy";

/// Why the caller's check refused a blob (its own error, kept for the message).
pub type BlobRejection = Box<dyn std::error::Error + Send + Sync>;

/// What to copy and how to check a blob.
pub struct CopyPlan<'a> {
    /// Start of the time range (Unix seconds, included).
    pub from: i64,
    /// End of the time range (Unix seconds, excluded).
    pub to: i64,
    /// Catalog kinds copied whole, first (they never expire).
    pub catalog_kinds: &'a [&'a str],
    /// The catalog kind whose names are substream namespaces copied with each `(epoch, dc)`.
    pub namespace_kind: Option<&'a str>,
    /// Checks a blob's bytes before they are written (its own checksum); the error says why not.
    pub verify: &'a dyn Fn(&[u8]) -> Result<(), BlobRejection>,
}

/// What a copy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// `(epoch, dc)` pairs copied.
    pub epochs: u64,
    /// Blobs written to the target.
    pub blobs: u64,
    /// Bytes of blobs written or found, all read back and compared.
    pub bytes: u64,
    /// Blobs the target already held with the same bytes.
    pub already: u64,
    /// Blobs skipped (damaged, missing or unreadable in the source).
    pub damaged: u64,
    /// Counts rows applied.
    pub counts: u64,
    /// Substream results copied (also counted in `blobs` / `already`).
    pub results: u64,
    /// Catalog records copied.
    pub catalog: u64,
}

/// A blob of the source that was not copied, and why.
#[derive(Debug)]
pub enum SkippedBlob<'a> {
    /// The blob failed the plan's check.
    Damaged {
        /// Its namespace.
        ns: &'a Namespace,
        /// Its key.
        key: &'a str,
        /// What the check said.
        reason: BlobRejection,
    },
    /// The index lists it but the store has no blob.
    Missing {
        /// Its namespace.
        ns: &'a Namespace,
        /// Its key.
        key: &'a str,
    },
    /// Reading it failed.
    Unreadable {
        /// Its namespace.
        ns: &'a Namespace,
        /// Its key.
        key: &'a str,
        /// The read error.
        error: StoreError,
    },
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store call on one record failed.
    #[error("{context}")]
    Record {
        /// What was being done (`writing events/KEY`).
        context: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A blob read back from the target differs from the source.
    #[error("{ns}/{key} reads back different from the source")]
    Mismatch {
        /// Its namespace.
        ns: String,
        /// Its key.
        key: String,
    },
}

/// Copies `plan`'s range from `src` to `dst` and flushes `dst`; each blob not copied is
/// passed to `on_skipped` as it is met.
pub fn copy_range(
    src: &dyn Store,
    dst: &dyn Store,
    plan: &CopyPlan<'_>,
    on_skipped: &mut dyn FnMut(&SkippedBlob<'_>),
) -> Result<CopyReport, CopyError> {
    let ev = Namespace::Events;
    let mut r = CopyReport::default();
    // The catalog first, so the target knows the namespaces whose results follow.
    let mut namespaces = Vec::new();
    for kind in plan.catalog_kinds {
        for (name, value) in src.get_catalog(kind)? {
            dst.put_catalog(kind, &name, Some(&value))
                .map_err(|source| CopyError::Record {
                    context: format!("copying catalog record {kind}/{name}"),
                    source,
                })?;
            r.catalog += 1;
            if plan.namespace_kind == Some(*kind) {
                namespaces.push(Namespace::Substream(name));
            }
        }
    }
    for (epoch, dc) in src.list_epochs(None, plan.from, plan.to)? {
        let entries = src.get_epoch_index(epoch, &dc)?;
        let slot = Slot { epoch, dc: &dc };
        let copied_entries = copy_blobs(src, dst, &ev, slot, &entries, plan, &mut r, on_skipped)?;
        // Results before their index entries, as the runner writes them.
        for ns in &namespaces {
            let entries = src.get_namespace_index(ns, epoch, &dc)?;
            if entries.is_empty() {
                continue;
            }
            let copied = copy_blobs(src, dst, ns, slot, &entries, plan, &mut r, on_skipped)?;
            dst.add_to_namespace_index(ns, epoch, &dc, &copied)?;
            r.results += copied.len() as u64;
        }
        dst.add_to_epoch_index(epoch, &dc, &copied_entries)?;
        for ((t, st), c) in src.get_counts(epoch, &dc)? {
            let batch = format!("copy:{t}:{st}");
            dst.add_counts_once(
                CountsWrite::new(COPY_WRITER, &batch),
                epoch,
                &dc,
                &t,
                &st,
                &c,
            )?;
            r.counts += 1;
        }
        r.epochs += 1;
    }
    dst.flush()?;
    Ok(r)
}

/// One `(epoch, dc)` of the range.
#[derive(Clone, Copy)]
struct Slot<'a> {
    epoch: i64,
    dc: &'a str,
}

/// Copies the blobs of `slot` listed by `entries` in `ns`, each checked before the write and
/// read back from the target after it; returns the entries copied (the others are passed to
/// `on_skipped` and counted, not copied).
#[allow(clippy::too_many_arguments)] // one call site per namespace kind; a struct would only rename them
fn copy_blobs<'e>(
    src: &dyn Store,
    dst: &dyn Store,
    ns: &Namespace,
    slot: Slot<'_>,
    entries: &'e BTreeSet<String>,
    plan: &CopyPlan<'_>,
    r: &mut CopyReport,
    on_skipped: &mut dyn FnMut(&SkippedBlob<'_>),
) -> Result<Vec<&'e str>, CopyError> {
    let Slot { epoch, dc } = slot;
    // An event's key is its index entry under its (epoch, dc): `EPOCH:DC:ENTRY`.
    let keys: Vec<String> = entries
        .iter()
        .map(|e| format!("{epoch}:{dc}:{e}"))
        .collect();
    let bkeys: Vec<BlobKey<'_>> = keys.iter().map(|k| BlobKey::new(epoch, k)).collect();
    let blobs = src.get_blobs(ns, &bkeys);
    let mut copied_entries = Vec::new();
    let mut items: Vec<(BlobKey<'_>, Vec<u8>)> = Vec::new();
    for ((key, entry), got) in bkeys.iter().zip(entries).zip(blobs) {
        let skipped = match got {
            Ok(Some(bytes)) => match (plan.verify)(&bytes) {
                Ok(()) => {
                    items.push((*key, bytes));
                    copied_entries.push(entry.as_str());
                    continue;
                }
                Err(reason) => SkippedBlob::Damaged {
                    ns,
                    key: key.key,
                    reason,
                },
            },
            Ok(None) => SkippedBlob::Missing { ns, key: key.key },
            Err(error) => SkippedBlob::Unreadable {
                ns,
                key: key.key,
                error,
            },
        };
        on_skipped(&skipped);
        r.damaged += 1;
    }
    let refs: Vec<(BlobKey<'_>, &[u8])> = items.iter().map(|(k, b)| (*k, b.as_slice())).collect();
    for (res, (key, bytes)) in dst.put_blobs(ns, &refs).into_iter().zip(&refs) {
        match res.map_err(|source| CopyError::Record {
            context: format!("writing {ns}/{}", key.key),
            source,
        })? {
            PutOutcome::Written => r.blobs += 1,
            PutOutcome::AlreadyPresent => r.already += 1,
        }
        r.bytes += bytes.len() as u64;
    }
    // Read back and compare: what the target returns is what the source held.
    let back = dst.get_blobs(ns, &refs.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    for ((key, bytes), got) in refs.iter().zip(back) {
        let got = got.map_err(|source| CopyError::Record {
            context: format!("reading back {ns}/{}", key.key),
            source,
        })?;
        if got.as_deref() != Some(*bytes) {
            return Err(CopyError::Mismatch {
                ns: ns.to_string(),
                key: key.key.to_owned(),
            });
        }
    }
    Ok(copied_entries)
}
