//! Appending to the log: records written under one lock, fsynced by the policy (shared by the
//! threads that wait, or by the flusher thread), segments rotated, records re-logged to a fresh
//! segment when a write or fsync fails, and checkpoints that delete what is stored.

use super::*;

/// Writes every byte of `parts`, in order, with as few `writev` calls as the kernel allows.
pub(super) fn write_all_vectored(mut file: &File, parts: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    let mut parts = parts;
    while !parts.is_empty() {
        match file.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The records appended since the last fsync (not under `Never`), encoded: written again to a
/// fresh segment when an fsync fails. Trimmed after every fsync by moving a start offset: a
/// `drain` moved the rest of the buffer each time (a record or two, ~1 MB at 1 M events/s, a
/// thousand times a second, under the log's lock); the buffer is compacted only once the
/// trimmed prefix is at least half of it.
#[derive(Debug, Default)]
pub(super) struct Undurable {
    pub(super) buf: Vec<u8>,
    pub(super) head: usize,
}

impl Undurable {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    pub(super) fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Forgets the first `n` bytes (they are durable).
    pub(super) fn consume(&mut self, n: usize) {
        self.head += n.min(self.len());
        if self.head == self.buf.len() {
            self.clear();
        } else if self.head >= self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }

    pub(super) fn clear(&mut self) {
        self.buf.clear();
        self.head = 0;
    }
}

pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("fsync of directory {}", dir.display())))
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fsyncs everything appended up to now (at least up to `seq`), sharing the fsync with
    /// concurrent callers. A failed fsync rolls to a fresh segment holding the records that
    /// were not durable ([`relog`](Self::relog)); the error is returned only if that fails too.
    pub(super) fn sync_upto<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        seq: u64,
    ) -> Result<MutexGuard<'a, State>> {
        loop {
            if st.durable_seq >= seq {
                return Ok(st);
            }
            if st.syncing {
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if st.needs_roll {
                let r = self.relog(&mut st);
                self.cv.notify_all();
                r?;
                continue;
            }
            st.syncing = true;
            let target = st.last_seq;
            let target_len = st.file_len;
            let file = Arc::clone(&st.file);
            st.dirty_since = None;
            drop(st);
            let r = file.sync_data();
            st = self.lock();
            st.syncing = false;
            match r {
                Ok(()) if Arc::ptr_eq(&file, &st.file) => {
                    st.fsyncs += 1;
                    if target > st.durable_seq {
                        let done = target_len.saturating_sub(st.durable_len) as usize;
                        st.undurable.consume(done);
                        st.durable_seq = target;
                        st.durable_len = target_len;
                    }
                }
                Ok(()) => {} // the segment was replaced meanwhile: its successor says
                Err(e) if Arc::ptr_eq(&file, &st.file) => {
                    st.failing = Some(format!("fsync of {}: {e}", self.active_path(&st).display()));
                    st.needs_roll = true;
                }
                Err(_) => {}
            }
            self.cv.notify_all();
        }
    }

    /// Replaces the active segment after a failed write or fsync: a fresh segment named after
    /// the first record not known durable gets those records again, fsynced (unless `Never`),
    /// and the old segment is cut back to what was durable (best effort: [`Wal::open`] ignores
    /// records of a segment that the next one starts with). On success the log works again.
    pub(super) fn relog(&self, st: &mut State) -> Result<()> {
        let fsync = self.cfg.fsync != FsyncPolicy::Never;
        // Under `Never` nothing is kept to re-log: the old segment keeps every record (in the
        // page cache) and the new one starts after the last.
        let first = if fsync {
            st.durable_seq + 1
        } else {
            st.last_seq + 1
        };
        let path = self.dir.join(segment_name(first));
        let same = st.segments.last().is_some_and(|s| s.path == path);
        let result = (|| -> Result<File> {
            if !same && fsync {
                // Keep only what is durable in the old segment (its fd may be in an error state).
                let _ = st.file.set_len(st.durable_len);
            }
            let mut file = create_segment(&path)?;
            file.write_all(st.undurable.bytes())
                .map_err(io_err(format!("appending to {}", path.display())))?;
            if fsync {
                file.sync_data()
                    .map_err(io_err(format!("fsync of {}", path.display())))?;
                sync_dir(&self.dir)?;
            }
            Ok(file)
        })();
        match result {
            Ok(file) => {
                if !same {
                    st.segments.push(Segment { first, path });
                }
                st.file = Arc::new(file);
                st.file_len = st.undurable.len() as u64;
                if fsync {
                    st.fsyncs += 1;
                    st.durable_seq = st.last_seq;
                    st.durable_len = st.file_len;
                    st.undurable.clear();
                    st.dirty_since = None;
                } else {
                    st.durable_len = 0;
                }
                st.needs_roll = false;
                st.failing = None;
                Ok(())
            }
            Err(e) => {
                if !same {
                    // Never leave a half-written successor: open would trust it.
                    let _ = fs::remove_file(&path);
                }
                st.failing = Some(e.to_string());
                Err(e)
            }
        }
    }

    pub(super) fn active_path<'s>(&self, st: &'s State) -> &'s Path {
        st.segments
            .last()
            .map_or(Path::new("?"), |s| s.path.as_path())
    }

    /// Closes the active segment (fsynced unless `Never`) and starts `wal-<last_seq+1>.log`.
    pub(super) fn rotate(&self, st: &mut State) -> Result<()> {
        let fsync = self.cfg.fsync != FsyncPolicy::Never;
        if fsync {
            // Another thread may be fsyncing the old file outside the lock: harmless.
            if let Err(e) = st.file.sync_data() {
                st.needs_roll = true;
                return Err(io_err(format!(
                    "fsync of {}",
                    self.active_path(st).display()
                ))(e));
            }
            st.durable_seq = st.last_seq;
            st.fsyncs += 1;
            st.dirty_since = None;
            st.undurable.clear();
        }
        let first = st.last_seq + 1;
        let path = self.dir.join(segment_name(first));
        let file = create_segment(&path)?;
        if fsync {
            if let Err(e) = sync_dir(&self.dir) {
                let _ = fs::remove_file(&path);
                return Err(e);
            }
        }
        st.file = Arc::new(file);
        st.file_len = 0;
        st.durable_len = 0;
        st.segments.push(Segment { first, path });
        Ok(())
    }
}

pub(super) fn create_segment(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .map_err(io_err(format!("creating {}", path.display())))
}

impl Wal {
    /// Appends a record and returns its sequence number. With [`FsyncPolicy::Always`] it is
    /// durable on return; otherwise it is in the OS page cache (use
    /// [`wait_durable`](Self::wait_durable) before acknowledging under `Batch`).
    pub fn append(&self, payload: &[u8], now: i64) -> Result<u64> {
        self.append_kind(RecordKind::Payload, payload, now)
    }

    /// Appends a [`RecordKind::Note`] (durable as [`append`](Self::append) says) and returns its
    /// sequence number. [`Wal::open`] returns notes after the checkpoint like payloads; the
    /// aggregator's done notes use this (see [`crate::exactly_once`]).
    pub fn append_note(&self, note: &[u8], now: i64) -> Result<u64> {
        self.append_kind(RecordKind::Note, note, now)
    }

    pub(super) fn append_kind(&self, kind: RecordKind, payload: &[u8], now: i64) -> Result<u64> {
        if payload.len() > MAX_RECORD {
            return Err(WalError::TooLarge(payload.len()));
        }
        // Checksummed before the lock: appends of several threads wait only for each other's
        // writes (the record's own checksum combines this one with its sequence number).
        let mut payload_crc = crc32fast::Hasher::new();
        payload_crc.update(payload);
        let sh = &*self.shared;
        let mut st = sh.lock();
        while st.syncing && st.needs_roll {
            st = sh.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.needs_roll {
            sh.relog(&mut st)?;
        }
        if st.file_len >= sh.cfg.segment_size && st.file_len > 0 {
            if let Err(e) = sh.rotate(&mut st) {
                st.failing = Some(e.to_string());
                return Err(e);
            }
        }
        let seq = st.last_seq + 1;
        let header = record_header(kind, seq, now, payload.len(), &payload_crc);
        // Header and payload in one `writev`: the payload is not copied into a record first.
        let written = write_all_vectored(
            &st.file,
            &mut [io::IoSlice::new(&header), io::IoSlice::new(payload)],
        );
        if let Err(e) = written {
            let e = io_err(format!("appending to {}", sh.active_path(&st).display()))(e);
            // Cut the partial record away so the segment stays appendable; if that fails too,
            // the next write starts a fresh segment.
            // (The cursor goes back too: a segment created here is not in append mode.)
            let len = st.file_len;
            if st
                .file
                .set_len(len)
                .and_then(|()| (&*st.file).seek(SeekFrom::Start(len)))
                .is_err()
            {
                st.needs_roll = true;
            }
            st.failing = Some(e.to_string());
            return Err(e);
        }
        st.failing = None;
        st.file_len += (HEADER_LEN + payload.len()) as u64;
        st.last_seq = seq;
        st.dirty_since.get_or_insert_with(Instant::now);
        if sh.cfg.fsync != FsyncPolicy::Never {
            st.undurable.push(&header);
            st.undurable.push(payload);
        }
        if sh.cfg.fsync == FsyncPolicy::Always {
            drop(sh.sync_upto(st, seq)?);
        }
        Ok(seq)
    }

    /// The last write or fsync error while it lasts: `None` once a write succeeded again (the
    /// log has no permanently broken state; see the [module docs](self)).
    pub fn failing(&self) -> Option<String> {
        self.shared.lock().failing.clone()
    }

    /// Returns once record `seq` (and every earlier one) is durable as the policy promises: fsynced
    /// under `Always` and `Batch` (this may do the fsync, shared with concurrent callers);
    /// immediately under `Never`.
    pub fn wait_durable(&self, seq: u64) -> Result<()> {
        let st = self.shared.lock();
        if seq > st.last_seq {
            return Err(WalError::BadSeq {
                seq,
                last: st.last_seq,
            });
        }
        if self.shared.cfg.fsync == FsyncPolicy::Never {
            return Ok(());
        }
        self.shared.sync_upto(st, seq).map(drop)
    }

    /// Fsyncs every record appended so far, whatever the policy, and returns the last sequence
    /// number (0 if none).
    pub fn sync(&self) -> Result<u64> {
        let st = self.shared.lock();
        let last = st.last_seq;
        self.shared.sync_upto(st, last).map(|_| last)
    }

    /// The last appended sequence number (0 if none ever).
    pub fn last_seq(&self) -> u64 {
        self.shared.lock().last_seq
    }

    /// Every record up to this sequence number is fsynced.
    pub fn durable_seq(&self) -> u64 {
        self.shared.lock().durable_seq
    }

    /// The last checkpointed sequence number (0 if none).
    pub fn checkpointed(&self) -> u64 {
        *self
            .shared
            .checkpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// How many fsyncs of records were done (group commit: fewer than appends).
    pub fn fsyncs(&self) -> u64 {
        self.shared.lock().fsyncs
    }

    /// The segment files on disk, oldest first.
    pub fn segments(&self) -> Vec<PathBuf> {
        self.shared
            .lock()
            .segments
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }

    /// Records durably that every record `≤ upto` has been stored (it will not be replayed),
    /// and deletes the segments holding only such records. A number at or below the current
    /// checkpoint does nothing; one beyond [`last_seq`](Self::last_seq) is an error.
    ///
    /// The records must be durable themselves before they are checkpointed away only if the
    /// caller cares about their sequence numbers: the checkpoint file alone keeps numbering
    /// increasing across restarts.
    pub fn checkpoint(&self, upto: u64) -> Result<()> {
        let sh = &*self.shared;
        let mut cp = sh.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        let last = sh.lock().last_seq;
        if upto > last {
            return Err(WalError::BadSeq { seq: upto, last });
        }
        if upto <= *cp {
            return Ok(());
        }
        let tmp = sh.dir.join(CHECKPOINT_TMP);
        let path = sh.dir.join(CHECKPOINT);
        let mut bytes = upto.to_le_bytes().to_vec();
        bytes.extend_from_slice(&crc32fast::hash(&upto.to_le_bytes()).to_le_bytes());
        let mut f = create_segment(&tmp)?;
        f.write_all(&bytes)
            .map_err(io_err(format!("writing {}", tmp.display())))?;
        f.sync_all()
            .map_err(io_err(format!("fsync of {}", tmp.display())))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(io_err(format!(
            "renaming {} to {}",
            tmp.display(),
            path.display()
        )))?;
        sync_dir(&sh.dir)?;
        *cp = upto;
        // Segment i holds [first_i, first_{i+1} - 1]; never delete the active (last) one.
        let doomed: Vec<Segment> = {
            let mut st = sh.lock();
            let keep_from = st
                .segments
                .windows(2)
                .take_while(|w| w[1].first <= upto + 1)
                .count();
            st.segments.drain(..keep_from).collect()
        };
        for s in &doomed {
            match fs::remove_file(&s.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(format!("removing {}", s.path.display()))(e)),
            }
        }
        Ok(())
    }
}

/// Background fsync under [`FsyncPolicy::Batch`]: every `period`, fsyncs what is pending.
pub(super) fn flusher(shared: &Shared, period: Duration) {
    let mut st = shared.lock();
    loop {
        if st.shutdown {
            return;
        }
        let wait = match st.dirty_since {
            Some(t) => period.saturating_sub(t.elapsed()),
            None => period,
        };
        if st.dirty_since.is_some() && wait.is_zero() && !st.syncing && st.failing.is_none() {
            let last = st.last_seq;
            st = match shared.sync_upto(st, last) {
                Ok(st) => st,
                Err(_) => shared.lock(), // failing: the next append or wait tries again
            };
            continue;
        }
        st = shared
            .cv
            .wait_timeout(st, wait.max(Duration::from_millis(1)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if let Some(h) = self.flusher.take() {
            self.shared.lock().shutdown = true;
            self.shared.cv.notify_all();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimming moves an offset, compacts once half is consumed, and always leaves exactly the
    /// bytes not yet durable, in order.
    #[test]
    fn undurable_keeps_the_bytes_after_what_was_consumed() {
        let mut u = Undurable::default();
        let mut want: Vec<u8> = Vec::new();
        let mut next = 0u8;
        for step in 0..200usize {
            let chunk: Vec<u8> = (0..(step % 17 + 1))
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect();
            u.push(&chunk);
            want.extend_from_slice(&chunk);
            let n = (step * 7) % (want.len() + 3);
            u.consume(n);
            want.drain(..n.min(want.len()));
            assert_eq!(u.bytes(), &want[..], "step {step}");
            assert_eq!(u.len(), want.len());
            assert!(
                u.head < u.buf.len().max(1),
                "compacted: head {} of {}",
                u.head,
                u.buf.len()
            );
        }
        u.clear();
        assert!(u.bytes().is_empty());
    }
}
