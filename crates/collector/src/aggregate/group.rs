//! Grouping: accepted events into the open group of their (epoch, dc, type, subtype) second,
//! and closing the groups that are due into chunks and batches for the write phases
//! ([`super::phases`]).

use sluice_blob::EventKey;

use super::*;
use crate::batch::EventRef;

impl Aggregator {
    pub(super) fn add_inner<'a>(
        &mut self,
        events: impl Iterator<Item = EventRef<'a>>,
        now: i64,
        wal_seq: Option<u64>,
    ) {
        let due = now
            .saturating_sub(i64::try_from(self.cfg.grace_secs).unwrap_or(i64::MAX))
            .saturating_sub(1);
        let closed = self.watermark.map_or(due, |w| w.max(due));
        for e in events {
            let key = GroupKeyRef(e.epoch, e.dc, e.type_, e.subtype);
            // `next_chunk` is ordered by epoch: an event newer than every written group (the
            // usual case) needs no search among its strings.
            let late = key.0 <= closed
                || (self
                    .next_chunk
                    .last_key_value()
                    .is_some_and(|(last, _)| last.0 >= key.0)
                    && self.next_chunk.contains_key(&key.to_owned()));
            let (spare, builder, last_seconds) =
                (&mut self.spare, &self.builder, &self.last_seconds);
            // Looked up by the borrowed tags: they are copied only for a new group.
            let group = self.open.entry_ref(&key).or_insert_with(|| {
                // A stream's seconds are alike: its encoder comes back with the capacity it
                // needs, and past 16,383 events a right guess spares moving the whole document
                // at its flush.
                let tags = (e.dc.to_string(), e.type_.to_string(), e.subtype.to_string());
                let last = last_seconds.get(&tags);
                let mut doc = match spare.take(last.map(|l| l.bytes)) {
                    Some(doc) => doc,
                    // These options were accepted by `ArrayEncoder::new` in `Aggregator::new`.
                    None => ArrayEncoder::new(builder.encoder_options().clone())
                        .expect("options checked in new"),
                };
                if let Some(l) = last {
                    doc.expect_len(l.events);
                }
                Group::new(doc)
            });
            let before = group.doc.memory_bytes();
            group.push(e.body, late, wal_seq.unwrap_or(0));
            let added = group.doc.memory_bytes().saturating_sub(before) as u64;
            group.bytes += added;
            self.open_bytes += added;
            self.open_events += 1;
            if let Some(seq) = wal_seq {
                if group.hold(seq) {
                    *self.pending_seqs.entry(seq).or_insert(0) += 1;
                }
            }
        }
    }

    /// Flushes every group whose grace period has passed (`epoch + grace_secs < now`), and
    /// retries batches left by earlier store errors.
    pub fn flush_due(&mut self, now: i64) -> FlushReport {
        self.spare.expire();
        let grace = i64::try_from(self.cfg.grace_secs).unwrap_or(i64::MAX);
        let cutoff = now.saturating_sub(grace).saturating_sub(1);
        self.watermark = Some(self.watermark.map_or(cutoff, |w| w.max(cutoff)));
        let closed: BTreeMap<GroupKey, Group> = match cutoff.checked_add(1) {
            Some(first_open) => self.open.extract_if(|key, _| key.0 < first_open).collect(),
            None => std::mem::take(&mut self.open).into_iter().collect(),
        };
        self.flush_groups(closed)
    }

    /// Flushes every group regardless of the grace period (for shutdown), and retries pending
    /// batches. Events added afterwards for the same groups count as late.
    pub fn flush_all(&mut self, now: i64) -> FlushReport {
        let _ = now;
        let closed = std::mem::take(&mut self.open).into_iter().collect();
        self.flush_groups(closed)
    }

    pub(super) fn flush_groups(&mut self, closed: BTreeMap<GroupKey, Group>) -> FlushReport {
        let mut report = FlushReport::default();
        if self.is_backpressured() {
            self.drain_outbox(&mut report);
            self.spill_excess(&mut report);
            if self.is_backpressured() {
                // Keep the due groups open until the backlog moves.
                self.open.extend(closed);
                report.errors.push(AggregateError::Backpressure {
                    memory_batches: self.outbox.len(),
                    spooled_bytes: self.spooled_bytes(),
                });
                return report;
            }
        }
        let mut index_cache: HashMap<(i64, String), EpochIndex> = HashMap::new();
        // Set by the first index read that fails transiently: the store is down, and asking
        // again for each group would cost every group a store timeout (30 groups × 2 s held a
        // flush for a minute while nothing reached the spool).
        let mut store_down = false;
        for (key, group) in closed {
            self.open_events -= group.events;
            self.open_bytes -= group.bytes;
            self.close_group(key, group, &mut index_cache, &mut store_down, &mut report);
        }
        self.drain_outbox(&mut report);
        self.spill_excess(&mut report);
        self.forget_old();
        report
    }

    /// Builds the batch of a closed group and queues it (unnumbered if its first chunk number
    /// cannot be determined now: store read error).
    pub(super) fn close_group(
        &mut self,
        key: GroupKey,
        group: Group,
        index_cache: &mut HashMap<(i64, String), EpochIndex>,
        store_down: &mut bool,
        report: &mut FlushReport,
    ) {
        // `None`: the store cannot tell where numbering starts (it is down). The batch is built
        // unnumbered and numbered when it is written (it may go to the spool meanwhile).
        let start = match self.next_chunk.get(&key) {
            Some(&n) => Some(n),
            None if *store_down => None,
            None => match self.first_chunk_from_index(&key, index_cache) {
                Ok(n) => Some(n),
                Err(e) => {
                    *store_down |= e.is_transient();
                    None
                }
            },
        };
        let Group {
            mut doc,
            events,
            late,
            error,
            seqs,
            bytes: _,
        } = group;
        let total = events as u64;
        if self.last_seconds.len() >= MAX_REMEMBERED_STREAMS {
            self.last_seconds.clear();
        }
        self.last_seconds.insert(
            (key.1.clone(), key.2.clone(), key.3.clone()),
            LastSecond {
                events: doc.len(),
                bytes: doc.memory_bytes(),
            },
        );
        let what = || format!("building {}", group_name(&key));
        if let Some(err) = error {
            report.errors.push(AggregateError::Blob {
                what: what(),
                source: err,
            });
        }
        let encoded = doc.len() as u64;
        let (blobs, mut stored_events) = if doc.is_empty() {
            (Vec::new(), 0)
        } else {
            // Cleared first: nothing of the previous group's document may reach this one's blob
            // (`build_document` copies exactly the bytes `finish_into` wrote).
            let mut bytes = std::mem::take(&mut self.doc_scratch);
            bytes.clear();
            let built = doc
                .finish_into(&mut bytes)
                .map_err(BlobError::from)
                .and_then(|()| self.builder.build_document(&bytes));
            let result = match built {
                Ok(blobs) => (blobs, encoded),
                Err(err) => {
                    report.errors.push(AggregateError::Blob {
                        what: what(),
                        source: err,
                    });
                    self.isolate(&bytes, &mut report.errors, &what)
                }
            };
            // A burst's huge document is not kept for the quiet seconds after it.
            if bytes.capacity() <= MAX_SCRATCH_BYTES {
                self.doc_scratch = bytes;
            }
            result
        };
        // Late events that were not stored are not tracked one by one: assume the late ones
        // were kept.
        let late_stored = late.min(stored_events);
        doc.clear();
        self.spare.keep(doc);
        let mut chunks = Vec::with_capacity(blobs.len());
        let mut n = start.unwrap_or(0);
        for blob in blobs {
            let made = match start {
                Some(_) => make_chunk(&key, self.cfg.collector_id.as_deref(), n, blob.into_bytes()),
                None => Ok(Chunk::unnumbered(blob.into_bytes())),
            };
            match made {
                Ok(c) => chunks.push(c),
                Err(e) => {
                    // Tags are validated at ingest; a group that cannot be keyed cannot be stored.
                    report.errors.push(e);
                    chunks.clear();
                    stored_events = 0;
                    break;
                }
            }
            n = n.saturating_add(1);
        }
        let dropped = total - stored_events;
        report.dropped_events += dropped;
        let mut counts = Counts {
            stored: stored_events,
            late: if stored_events > 0 { late_stored } else { 0 },
            ..Counts::default()
        };
        if dropped > 0 {
            counts.dropped.insert(UNENCODABLE.to_owned(), dropped);
        }
        if let Some(start) = start {
            self.next_chunk.insert(key.clone(), n.max(start));
        }
        let counts_id = chunks.is_empty().then(|| self.chunkless_id());
        self.outbox.push_back(Batch {
            key,
            chunks,
            stored: 0,
            indexed: false,
            counted: false,
            events: stored_events,
            counts,
            seqs,
            noted: false,
            counts_id,
        });
    }

    /// A counts batch id for a batch without chunks, unique across this writer's runs.
    pub(super) fn chunkless_id(&mut self) -> String {
        self.chunkless_batches += 1;
        format!("nochunk.{}.{}", self.run_id, self.chunkless_batches)
    }
}

pub(super) fn make_chunk(
    key: &GroupKey,
    collector: Option<&str>,
    n: u32,
    bytes: Vec<u8>,
) -> Result<Chunk, AggregateError> {
    let blob_err = |source| AggregateError::Blob {
        what: format!("keying {}", group_name(key)),
        source,
    };
    let id = match collector {
        Some(c) => ChunkId::collector(c, n).map_err(blob_err)?,
        None => ChunkId::plain(n),
    };
    let ek = EventKey::new(key.0, &key.1, &key.2, &key.3, id).map_err(blob_err)?;
    Ok(Chunk {
        key: ek.to_string(),
        entry: ek.index_entry().to_string(),
        bytes,
    })
}
