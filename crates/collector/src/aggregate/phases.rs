//! Numbering and the phased writes of closed batches: chunk numbers against the stored epoch
//! index, then blobs, index entries and counts, each phase retried or spooled on its own, and
//! the bookkeeping that releases WAL sequence numbers once a batch is wholly stored.

use super::*;

impl Aggregator {
    /// After the document of a group could not be made into blobs (e.g. one event too big for a
    /// chunk): decode its events and keep those that make blobs on their own. The kept events
    /// keep their origins (read back from `doc`'s element index, so they stay what the stored
    /// events came from); when `doc` has none that check, the blobs carry none either.
    #[cold]
    pub(super) fn isolate(
        &mut self,
        doc: &[u8],
        errors: &mut Vec<AggregateError>,
        what: &dyn Fn() -> String,
    ) -> (Vec<Blob>, u64) {
        let builder = &mut self.builder;
        // Our own document: only recursion needs a bound (the encoder's depth limit and some).
        let huge = usize::MAX / 4;
        let limits = sereal::Limits {
            max_depth: builder.encoder_options().max_depth + 8,
            max_decompressed_bytes: huge,
            max_string_bytes: huge,
            max_elements: huge,
            max_values: huge,
            max_total_string_bytes: huge,
        };
        let mut fail = |source: BlobError| {
            errors.push(AggregateError::Blob {
                what: what(),
                source,
            });
        };
        let events = match sereal::Decoder::with_limits(limits.clone()).decode(doc) {
            Ok(Value::Array(events)) => events,
            Ok(_) => Vec::new(),
            Err(e) => {
                fail(BlobError::from(e));
                Vec::new()
            }
        };
        let mut scratch = Vec::new();
        let origins: Option<Vec<u64>> = sereal::LazyDoc::open(doc, &limits, &mut scratch)
            .ok()
            .and_then(|lazy| sluice_blob::Origins::of(&lazy))
            .filter(|o| o.len() == events.len())
            .map(|o| o.seqs().collect());
        drop(scratch);
        // Events that make a blob alone, each with its seq (when known).
        let good: Vec<(Value, Option<u64>)> = events
            .into_iter()
            .enumerate()
            .filter(|(_, e)| builder.build(std::slice::from_ref(e)).is_ok())
            .map(|(i, e)| (e, origins.as_ref().and_then(|o| o.get(i).copied())))
            .collect();
        if good.is_empty() {
            return (Vec::new(), 0);
        }
        let n = good.len() as u64;
        // What `builder.build(&good)` writes (the array encoder writes the same bytes), with the
        // kept events' origins.
        let mut encoder = match ArrayEncoder::new(builder.encoder_options().clone()) {
            Ok(encoder) => encoder,
            Err(e) => {
                fail(BlobError::from(e));
                return (Vec::new(), 0);
            }
        };
        encoder.expect_len(good.len());
        let mut bytes = Vec::new();
        let built = good
            .iter()
            .try_for_each(|(event, seq)| -> sereal::Result<()> {
                encoder.push(event)?;
                if let Some(seq) = *seq {
                    encoder.push_origin(seq);
                }
                Ok(())
            })
            .and_then(|()| encoder.finish_into(&mut bytes))
            .map_err(BlobError::from)
            .and_then(|()| builder.build_document(&bytes));
        match built {
            Ok(blobs) => (blobs, n),
            Err(err) => {
                fail(err);
                (Vec::new(), 0)
            }
        }
    }

    /// The first unused chunk number of this writer for `key`, from the store's epoch index.
    pub(super) fn first_chunk_from_index(
        &self,
        key: &GroupKey,
        index_cache: &mut HashMap<(i64, String), EpochIndex>,
    ) -> Result<u32, AggregateError> {
        let ek = (key.0, key.1.clone());
        if !index_cache.contains_key(&ek) {
            let index = self.read_index(key.0, &key.1)?;
            index_cache.insert(ek.clone(), index);
        }
        let chunk = index_cache[&ek]
            .next_chunk(&key.2, &key.3, self.cfg.collector_id.as_deref())
            .map_err(|source| AggregateError::Blob {
                what: format!("numbering {}", group_name(key)),
                source,
            })?;
        Ok(chunk.n())
    }

    pub(super) fn read_index(&self, epoch: i64, dc: &str) -> Result<EpochIndex, AggregateError> {
        let entries = self.stored_index(epoch, dc)?;
        let mut index = EpochIndex::new();
        // Entries this crate cannot parse belong to some other writer: skip them.
        for e in entries.iter().filter_map(|e| IndexEntry::parse(e).ok()) {
            index.insert(e);
        }
        Ok(index)
    }

    /// Writes the queued batches, phased across the batches of one epoch (see
    /// [`write_batches`](Self::write_batches)), epoch runs in order. A transient store error
    /// stops the batches after the one that met it (the store is down: the rest would fail
    /// too); other errors only hold back their own batch.
    pub(super) fn drain_outbox(&mut self, report: &mut FlushReport) {
        if !self.drain_spool(report) {
            return;
        }
        let mut batches: Vec<Batch> = self.outbox.drain(..).collect();
        // Phased per run of batches of one epoch (a flush closes one second's groups): the
        // store sees epochs in the order they were closed, as with one batch at a time.
        let mut errors = Vec::with_capacity(batches.len());
        let (mut start, mut stopped) = (0, false);
        while start < batches.len() {
            let epoch = batches[start].key.0;
            let end = start
                + batches[start..]
                    .iter()
                    .take_while(|b| b.key.0 == epoch)
                    .count();
            if stopped {
                errors.extend((start..end).map(|_| None));
            } else {
                let run = self.write_batches(&mut batches[start..end], report);
                stopped = run
                    .iter()
                    .any(|e| e.as_ref().is_some_and(AggregateError::is_transient));
                errors.extend(run);
            }
            start = end;
        }
        let mut kept = VecDeque::new();
        for (mut batch, error) in batches.into_iter().zip(errors) {
            if let Some(e) = error {
                report.errors.push(e);
            }
            if batch.counted {
                self.batch_done(&mut batch, false);
            } else {
                kept.push_back(batch);
            }
        }
        kept.append(&mut self.outbox);
        self.outbox = kept;
    }

    /// Writes the spooled batches, oldest first. Returns false if it had to stop (transient store
    /// error, spool I/O error): newer batches must then wait too.
    pub(super) fn drain_spool(&mut self, report: &mut FlushReport) -> bool {
        loop {
            let Some(spool) = self.spool.as_mut() else {
                return true;
            };
            let mut batch = match self.spool_head.take() {
                Some(b) => b,
                None => match spool.front() {
                    Ok(Some(sb)) => batch_from_spooled(sb),
                    Ok(None) => return true,
                    Err(source) => {
                        report.errors.push(AggregateError::Spool {
                            what: "reading the spool".into(),
                            source,
                        });
                        return false;
                    }
                },
            };
            if !batch.is_numbered() {
                // Numbered now, and the numbers recorded in the spool before any blob is
                // written: a crash after a put replays the same keys (write-once dedupes them).
                let mut cache = HashMap::new();
                if let Err(e) = self.number(&mut batch, &mut cache) {
                    let transient = e.is_transient();
                    report.errors.push(e);
                    if transient {
                        self.spool_head = Some(batch);
                        return false;
                    }
                } else {
                    let keys: Vec<(String, String)> = batch
                        .chunks
                        .iter()
                        .map(|c| (c.key.clone(), c.entry.clone()))
                        .collect();
                    let spool = self.spool.as_mut().expect("spool");
                    if let Err(source) = spool.number_front(&keys) {
                        report.errors.push(AggregateError::Spool {
                            what: format!("numbering {} in the spool", group_name(&batch.key)),
                            source,
                        });
                        // Not written under numbers the spool does not hold: numbered again.
                        for c in &mut batch.chunks {
                            c.key.clear();
                            c.entry.clear();
                        }
                        self.spool_head = Some(batch);
                        return false;
                    }
                }
            }
            let result = self.write_batch(&mut batch, report);
            let transient = result
                .as_ref()
                .err()
                .is_some_and(AggregateError::is_transient);
            if let Err(e) = result {
                report.errors.push(e);
                if transient {
                    self.spool_head = Some(batch);
                    return false;
                }
            }
            // Stored, or failed for good (then it moves to memory, at the front, and holds back
            // only itself, as for batches never spooled).
            let spool = self.spool.as_mut().expect("spool");
            if let Err(source) = spool.pop_front() {
                report.errors.push(AggregateError::Spool {
                    what: "removing a stored batch from the spool".into(),
                    source,
                });
                self.spool_head = Some(batch);
                return false;
            }
            if batch.counted {
                self.batch_done(&mut batch, false);
            } else {
                self.outbox.push_front(batch);
            }
        }
    }

    /// After store errors: moves the oldest in-memory batches to the spool until at most
    /// `memory_batches` remain in memory, or the spool refuses (full: backpressure).
    pub(super) fn spill_excess(&mut self, report: &mut FlushReport) {
        let Some(limit) = self.cfg.spool.as_ref().map(|sc| sc.memory_batches) else {
            return;
        };
        while self.outbox.len() > limit {
            let Some(spool) = self.spool.as_mut() else {
                return;
            };
            let b = self.outbox.front().expect("non-empty");
            match spool.push(&spooled_from_batch(b)) {
                Ok(()) => {
                    // Spooled (fsynced), its note not yet recorded.
                    crate::failpoint::hit("spool.pushed");
                    if let Some(mut b) = self.outbox.pop_front() {
                        self.batch_done(&mut b, true);
                    }
                }
                Err(source) => {
                    report.errors.push(AggregateError::Spool {
                        what: format!("spilling {} to the spool", group_name(&b.key)),
                        source,
                    });
                    break;
                }
            }
        }
    }

    /// Gives an unnumbered batch its chunk numbers: after our counter for its group, or after
    /// what the store's epoch index lists for this writer (`cache`: indexes read by this call's
    /// caller).
    pub(super) fn number(
        &mut self,
        b: &mut Batch,
        cache: &mut HashMap<(i64, String), EpochIndex>,
    ) -> Result<(), AggregateError> {
        let mut n = match self.next_chunk.get(&b.key) {
            Some(&n) => n,
            None => self.first_chunk_from_index(&b.key, cache)?,
        };
        let collector = self.cfg.collector_id.clone();
        for c in &mut b.chunks {
            let bytes = std::mem::take(&mut c.bytes);
            *c = make_chunk(&b.key, collector.as_deref(), n, bytes)?;
            n = n.saturating_add(1);
        }
        self.next_chunk.insert(b.key.clone(), n);
        Ok(())
    }

    /// Writes one batch (data, note, index, counts) from where it stopped.
    pub(super) fn write_batch(
        &mut self,
        b: &mut Batch,
        report: &mut FlushReport,
    ) -> Result<(), AggregateError> {
        let errors = self.write_batches(std::slice::from_mut(b), report);
        match errors.into_iter().next().flatten() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes `batches` (oldest first) from where each stopped, *phased across batches*: every
    /// unnumbered batch is numbered, then all their blobs go in one
    /// [`Store::put_owned_blob_lists`] call (backends overlap the batches; the keys are ours:
    /// see the [module docs](super)), then the done notes are logged one by one, then all
    /// index entries go in one [`Store::add_to_epoch_indexes`] call, then all counts in one
    /// [`Store::add_counts_once_many`] call. Each batch still goes data → note → index → counts,
    /// and a batch enters a phase only if no *earlier* batch met a transient error in an
    /// earlier phase (so batches become readable in the order they were closed when the store
    /// fails). Returns each batch's error (`None`: no error; done when `counted`).
    pub(super) fn write_batches(
        &mut self,
        batches: &mut [Batch],
        report: &mut FlushReport,
    ) -> Vec<Option<AggregateError>> {
        let mut errors: Vec<Option<AggregateError>> = batches.iter().map(|_| None).collect();
        // Batches [0, live) may enter the next phase.
        let mut live = batches.len();
        let stop_at_transient = |errors: &[Option<AggregateError>], live: usize| {
            errors[..live]
                .iter()
                .position(|e| e.as_ref().is_some_and(AggregateError::is_transient))
                .map_or(live, |i| i + 1)
        };

        // Numbers.
        let mut cache = HashMap::new();
        for i in 0..live {
            if !batches[i].is_numbered() {
                if let Err(e) = self.number(&mut batches[i], &mut cache) {
                    // The store is down: the later batches would wait out a timeout each.
                    let transient = e.is_transient();
                    errors[i] = Some(e);
                    if transient {
                        break;
                    }
                }
            }
        }
        live = stop_at_transient(&errors, live);

        // Data.
        let want: Vec<usize> = (0..live)
            .filter(|&i| errors[i].is_none() && batches[i].stored < batches[i].chunks.len())
            .collect();
        if !want.is_empty() {
            let lists: Vec<Vec<(BlobKey<'_>, &[u8])>> = want
                .iter()
                .map(|&i| {
                    let b = &batches[i];
                    b.chunks[b.stored..]
                        .iter()
                        .map(|c| (BlobKey::new(b.key.0, &c.key), c.bytes.as_slice()))
                        .collect()
                })
                .collect();
            let results = self.store.put_owned_blob_lists(&Namespace::Events, &lists);
            drop(lists);
            let mut results = results.into_iter();
            for &i in &want {
                let b = &mut batches[i];
                let rs = results.next().unwrap_or_default();
                let mut conflict = false;
                if rs.is_empty() {
                    // A store that attempted nothing (against the contract): fail rather than spin.
                    errors[i] = Some(AggregateError::Store {
                        what: format!("storing {}", b.chunks[b.stored].key),
                        source: StoreError::Unavailable {
                            reason: "put_blobs attempted no item".into(),
                        },
                    });
                    continue;
                }
                for r in rs {
                    let c = &b.chunks[b.stored];
                    match r {
                        Ok(PutOutcome::Written | PutOutcome::AlreadyPresent) => {
                            report.blobs += 1;
                            report.bytes += c.bytes.len() as u64;
                            b.stored += 1;
                        }
                        Err(StoreError::Exists { .. }) => conflict = true,
                        Err(source) => {
                            errors[i] = Some(AggregateError::Store {
                                what: format!("storing {}", c.key),
                                source,
                            });
                        }
                    }
                }
                if conflict {
                    // Rare (another writer or an earlier run owns a number): this batch alone,
                    // renumbered, one put after another.
                    if let Err(e) = self.put_chunks(b, report) {
                        errors[i] = Some(e);
                    }
                }
            }
            live = stop_at_transient(&errors, live);
            crate::failpoint::hit("flush.stored");
        }

        // Notes, before the index: an indexed batch must never lack its note (see
        // crate::exactly_once).
        let mut noted = false;
        for i in 0..live {
            let b = &mut batches[i];
            if errors[i].is_some() || b.indexed || b.noted || b.seqs.is_empty() {
                continue;
            }
            if let Some(log) = self.note_log.as_mut() {
                match log(&done_note(b, false)) {
                    Ok(()) => {
                        b.noted = true;
                        noted = true;
                    }
                    Err(source) => {
                        errors[i] = Some(AggregateError::NoteLog {
                            what: group_name(&b.key),
                            source,
                        })
                    }
                }
            }
        }

        if noted {
            crate::failpoint::hit("flush.noted");
        }

        // Index.
        let want: Vec<usize> = (0..live)
            .filter(|&i| errors[i].is_none() && !batches[i].indexed)
            .collect();
        if !want.is_empty() {
            let items: Vec<(i64, &str, Vec<&str>)> = want
                .iter()
                .map(|&i| {
                    let b = &batches[i];
                    let entries = b.chunks.iter().map(|c| c.entry.as_str()).collect();
                    (b.key.0, b.key.1.as_str(), entries)
                })
                .collect();
            let results = self.store.add_to_epoch_indexes(&items);
            drop(items);
            let mut results = results.into_iter();
            for &i in &want {
                let b = &mut batches[i];
                match results.next().unwrap_or(Ok(())) {
                    Ok(()) => Self::indexed(b, report),
                    Err(source) => {
                        let entries: Vec<&str> =
                            b.chunks.iter().map(|c| c.entry.as_str()).collect();
                        errors[i] = Some(AggregateError::Store {
                            what: format!(
                                "indexing {} in {}-{}",
                                entries.join("|"),
                                b.key.0,
                                b.key.1
                            ),
                            source,
                        });
                    }
                }
            }
            live = stop_at_transient(&errors, live);
            crate::failpoint::hit("flush.indexed");
        }

        // Counts.
        for i in 0..live {
            let b = &mut batches[i];
            if errors[i].is_none() && !b.counted && b.counts.is_zero() {
                b.counted = true;
            }
            if errors[i].is_none() && !b.counted && b.chunks.is_empty() && b.counts_id.is_none() {
                b.counts_id = Some(self.chunkless_id());
            }
        }
        let want: Vec<usize> = (0..live)
            .filter(|&i| errors[i].is_none() && !batches[i].counted)
            .collect();
        if !want.is_empty() {
            let writer = self.cfg.collector_id.as_deref().unwrap_or("");
            let items: Vec<CountsAdd<'_>> = want
                .iter()
                .map(|&i| {
                    let b = &batches[i];
                    CountsAdd {
                        write: CountsWrite::new(writer, counts_batch_id(b)),
                        epoch: b.key.0,
                        dc: &b.key.1,
                        event_type: &b.key.2,
                        subtype: &b.key.3,
                        counts: &b.counts,
                    }
                })
                .collect();
            let results = self.store.add_counts_once_many(&items);
            drop(items);
            let mut results = results.into_iter();
            for &i in &want {
                let b = &mut batches[i];
                match results.next().unwrap_or(Ok(())) {
                    Ok(()) => b.counted = true,
                    Err(source) => {
                        errors[i] = Some(AggregateError::Store {
                            what: format!("adding the counts of {}", group_name(&b.key)),
                            source,
                        })
                    }
                }
            }
            crate::failpoint::hit("flush.counted");
        }
        errors
    }

    /// Puts the unstored chunks of `b` one call at a time, renumbering them once on a conflict.
    pub(super) fn put_chunks(
        &mut self,
        b: &mut Batch,
        report: &mut FlushReport,
    ) -> Result<(), AggregateError> {
        let epoch = b.key.0;
        let mut renumbered = false;
        while b.stored < b.chunks.len() {
            let items: Vec<(BlobKey<'_>, &[u8])> = b.chunks[b.stored..]
                .iter()
                .map(|c| (BlobKey::new(epoch, &c.key), c.bytes.as_slice()))
                .collect();
            let results = self.store.put_blobs(&Namespace::Events, &items);
            drop(items);
            if results.is_empty() {
                // A store that attempted nothing (against the contract): fail rather than spin.
                return Err(AggregateError::Store {
                    what: format!("storing {}", b.chunks[b.stored].key),
                    source: StoreError::Unavailable {
                        reason: "put_blobs attempted no item".into(),
                    },
                });
            }
            for r in results {
                let c = &b.chunks[b.stored];
                match r {
                    Ok(PutOutcome::Written | PutOutcome::AlreadyPresent) => {
                        report.blobs += 1;
                        report.bytes += c.bytes.len() as u64;
                        b.stored += 1;
                    }
                    Err(StoreError::Exists { key }) if !renumbered => {
                        // Another writer (or an earlier run) owns this number: move the chunks not
                        // yet stored past everything listed, and say so. (`put_blobs` stopped here:
                        // no later chunk was stored under its old number.)
                        renumbered = true;
                        report.errors.push(AggregateError::Store {
                            what: format!("storing {key} (chunks renumbered)"),
                            source: StoreError::Exists { key: key.clone() },
                        });
                        self.renumber(b)?;
                        break;
                    }
                    Err(source) => {
                        return Err(AggregateError::Store {
                            what: format!("storing {}", c.key),
                            source,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// A batch's index entries are stored: it is readable; lists it in the stored-chunk hook.
    pub(super) fn indexed(b: &mut Batch, report: &mut FlushReport) {
        b.indexed = true;
        report.events += b.events;
        report.late_events += b.counts.late;
        // The stored-chunk hook. Every put is done, so the bytes are not needed again (a
        // retry of the counts, or spooling, skips the stored chunks).
        if !b.chunks.is_empty() {
            let chunks = b
                .chunks
                .iter_mut()
                .map(|c| StoredChunk {
                    key: c.key.clone(),
                    entry: c.entry.clone(),
                    data: std::mem::take(&mut c.bytes),
                })
                .collect();
            report.stored.push(StoredBatch {
                namespace: Namespace::Events,
                epoch: b.key.0,
                dc: b.key.1.clone(),
                type_: b.key.2.clone(),
                subtype: b.key.3.clone(),
                events: b.events,
                late_events: b.counts.late,
                chunks,
            });
        }
    }

    /// A batch left memory for good (stored, or spooled): releases its WAL sequence numbers and
    /// records its done note.
    pub(super) fn batch_done(&mut self, b: &mut Batch, spooled: bool) {
        if !b.seqs.is_empty() {
            if spooled || !b.noted {
                self.done.push(done_note(b, spooled));
            }
            let seqs = std::mem::take(&mut b.seqs);
            self.release_seqs(&seqs);
        }
    }

    /// Drops one hold on each of `seqs` (their events in one batch are now written).
    pub(super) fn release_seqs(&mut self, seqs: &[u64]) {
        for s in seqs {
            if let Some(n) = self.pending_seqs.get_mut(s) {
                *n -= 1;
                if *n == 0 {
                    self.pending_seqs.remove(s);
                }
            }
        }
    }

    /// Gives the unstored chunks of `b` numbers after both our counter and the store's index.
    pub(super) fn renumber(&mut self, b: &mut Batch) -> Result<(), AggregateError> {
        let mut cache = HashMap::new();
        let from_index = self.first_chunk_from_index(&b.key, &mut cache)?;
        let ours = self.next_chunk.get(&b.key).copied().unwrap_or(0);
        let mut n = from_index.max(ours);
        let collector = self.cfg.collector_id.clone();
        for c in &mut b.chunks[b.stored..] {
            let bytes = std::mem::take(&mut c.bytes);
            *c = make_chunk(&b.key, collector.as_deref(), n, bytes)?;
            n = n.saturating_add(1);
        }
        self.next_chunk.insert(b.key.clone(), n);
        Ok(())
    }

    /// Forgets the chunk counters of epochs long closed (and not waiting in the outbox).
    pub(super) fn forget_old(&mut self) {
        let Some(w) = self.watermark else { return };
        let horizon =
            w.saturating_sub(i64::try_from(self.cfg.forget_after_secs).unwrap_or(i64::MAX));
        if self
            .next_chunk
            .first_key_value()
            .is_some_and(|(k, _)| k.0 < horizon)
        {
            let keep =
                self.next_chunk
                    .split_off(&(horizon, String::new(), String::new(), String::new()));
            let old = std::mem::replace(&mut self.next_chunk, keep);
            for (k, n) in old {
                if self.outbox.iter().any(|b| b.key == k) {
                    self.next_chunk.insert(k, n);
                }
            }
        }
    }
}

/// The batch part of a batch's counts token: the epoch-index entry of its first chunk (unique to
/// this writer within (epoch, dc): chunks are write-once, and their numbers are final before the
/// counts are written), or for a batch without chunks its run-unique id.
pub(super) fn counts_batch_id(b: &Batch) -> &str {
    match (b.chunks.first(), &b.counts_id) {
        (Some(c), _) => &c.entry,
        (None, Some(id)) => id,
        // Set by `write_batch` before the counts are written; an empty id would be refused.
        (None, None) => "",
    }
}

/// The done note of a batch: a stored one is proved by its first index entry, which is also the
/// token its counts are added under, and carries those counts (a replay adds them once more,
/// once per token: see [`crate::exactly_once`]).
pub(super) fn done_note(b: &Batch, spooled: bool) -> DoneNote {
    let proof = if spooled {
        None
    } else {
        b.chunks.first().map(|c| c.entry.clone())
    };
    DoneNote {
        group: b.key.clone(),
        seqs: b.seqs.clone(),
        spooled,
        counts: proof.as_ref().map(|_| b.counts.clone()),
        proof,
    }
}

pub(super) fn spooled_from_batch(b: &Batch) -> SpooledBatch {
    SpooledBatch {
        epoch: b.key.0,
        dc: b.key.1.clone(),
        type_: b.key.2.clone(),
        subtype: b.key.3.clone(),
        chunks: b
            .chunks
            .iter()
            .map(|c| SpooledChunk {
                key: c.key.clone(),
                entry: c.entry.clone(),
                bytes: c.bytes.clone(),
            })
            .collect(),
        stored: b.stored,
        indexed: b.indexed,
        events: b.events,
        counts: b.counts.clone(),
        seqs: b.seqs.clone(),
    }
}

pub(super) fn batch_from_spooled(sb: SpooledBatch) -> Batch {
    Batch {
        key: (sb.epoch, sb.dc, sb.type_, sb.subtype),
        stored: sb.stored.min(sb.chunks.len()),
        chunks: sb
            .chunks
            .into_iter()
            .map(|c| Chunk {
                key: c.key,
                entry: c.entry,
                bytes: c.bytes,
            })
            .collect(),
        indexed: sb.indexed,
        counted: false,
        events: sb.events,
        counts: sb.counts,
        // Released when it was spooled (its done note covers it).
        seqs: Vec::new(),
        noted: false,
        // A chunkless batch gets a new id when its counts are written (see `counts_batch_id`).
        counts_id: None,
    }
}
