//! Opening the log after a stop or a crash: the checkpoint read, every segment parsed, a torn
//! tail cut, damage set aside (with salvage) or refused, and the records after the checkpoint
//! handed back to replay one segment at a time ([`ReplayLog`]).

use super::*;

pub(super) fn read_checkpoint(dir: &Path) -> Result<u64> {
    let path = dir.join(CHECKPOINT);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
    };
    let bad = || WalError::Corrupted {
        segment: path.clone(),
        offset: 0,
    };
    if bytes.len() != 12 {
        return Err(bad());
    }
    let upto = u64::from_le_bytes(bytes[0..8].try_into().map_err(|_| bad())?);
    let crc = u32::from_le_bytes(bytes[8..12].try_into().map_err(|_| bad())?);
    if crc32fast::hash(&bytes[0..8]) != crc {
        return Err(bad());
    }
    Ok(upto)
}

/// Copies a damaged file to `damaged/<name>.<unix time>` in `dir` (fsynced) and returns where.
pub(super) fn set_aside(dir: &Path, file: &Path) -> Result<PathBuf> {
    let aside_dir = dir.join("damaged");
    fs::create_dir_all(&aside_dir).map_err(io_err(format!("creating {}", aside_dir.display())))?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = file
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let to = aside_dir.join(format!("{name}.{secs}"));
    fs::copy(file, &to).map_err(io_err(format!(
        "copying {} to {}",
        file.display(),
        to.display()
    )))?;
    File::open(&to)
        .and_then(|f| f.sync_all())
        .map_err(io_err(format!("fsync of {}", to.display())))?;
    sync_dir(&aside_dir)?;
    Ok(to)
}

/// The records after the checkpoint, as [`Wal::open_replay`] found them: read again from their
/// segments, one at a time, by [`for_each`](Self::for_each), so replaying a long log holds one
/// segment in memory, not the log. The segments are not written while it is used (the log
/// appends to a fresh segment when there are records to replay) and are deleted only by a
/// checkpoint past them.
#[derive(Debug, Default)]
pub struct ReplayLog {
    segments: Vec<ReplaySegment>,
    records: u64,
}

#[derive(Debug)]
pub(super) struct ReplaySegment {
    path: PathBuf,
    valid_len: u64,
    first: u64,
    keep_after: u64,
    next: Option<u64>,
    last: bool,
}

impl ReplayLog {
    /// Records to replay (payloads and notes).
    pub fn len(&self) -> u64 {
        self.records
    }

    /// Nothing to replay.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Calls `f` with every record, oldest first, reading one segment at a time. A segment
    /// that no longer reads as it did at open (changed underneath) is [`WalError::Corrupted`].
    pub fn for_each(&self, mut f: impl FnMut(WalRecord)) -> Result<()> {
        for s in &self.segments {
            // Sized up front: `take` hides the file's size from `read_to_end`, which would then
            // grow the buffer by doubling (twice the segment, briefly).
            let mut bytes = Vec::with_capacity(usize::try_from(s.valid_len).unwrap_or(0));
            File::open(&s.path)
                .and_then(|file| file.take(s.valid_len).read_to_end(&mut bytes))
                .map_err(io_err(format!("reading {}", s.path.display())))?;
            if bytes.len() as u64 != s.valid_len {
                return Err(WalError::Corrupted {
                    segment: s.path.clone(),
                    offset: bytes.len() as u64,
                });
            }
            let parsed = parse_segment(&s.path, &bytes, s.last, s.first, s.keep_after, s.next)?;
            // One payload copied at a time: the segment's bytes and one record are held.
            for r in parsed.records {
                f(WalRecord {
                    seq: r.seq,
                    now: r.now,
                    kind: r.kind,
                    payload: bytes[r.payload].to_vec(),
                });
            }
        }
        Ok(())
    }
}

/// What [`Wal::open_with`] skipped or cut away, besides the records it returns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OpenReport {
    /// One line per thing skipped, cut or set aside; the server logs them.
    pub warnings: Vec<String>,
    /// Files a salvage copied aside before cutting them.
    pub set_aside: Vec<PathBuf>,
}

impl Wal {
    /// Opens (creating if needed) the log in `dir` and returns it with the records after the
    /// last checkpoint, oldest first, to replay. A torn tail is truncated; any other bad record
    /// is [`WalError::Corrupted`]. [`open_with`](Self::open_with) says what it skipped.
    pub fn open(dir: impl AsRef<Path>, cfg: WalConfig) -> Result<(Wal, Vec<WalRecord>)> {
        Wal::open_with(dir, cfg, false).map(|(wal, records, _)| (wal, records))
    }

    /// [`open`](Self::open), also returning what was found wrong and skipped (log it):
    /// - a torn tail cut away (with its size);
    /// - damage in a segment wholly behind the checkpoint (its records are stored: skipped);
    /// - an unreadable checkpoint file: every record of the segments present is replayed, and
    ///   the done notes among them keep that exactly once (see [`crate::exactly_once`]).
    ///
    /// With `salvage`, a damaged segment is first copied to `damaged/<name>.<unix time>` in
    /// `dir`, then cut at the damage (its records after it are lost, and said so), and gaps
    /// in the sequence are accepted; without it such damage is [`WalError::Corrupted`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        cfg: WalConfig,
        salvage: bool,
    ) -> Result<(Wal, Vec<WalRecord>, OpenReport)> {
        let (wal, log, report) = Wal::open_replay(dir, cfg, salvage)?;
        let mut records = Vec::new();
        log.for_each(|r| records.push(r))?;
        Ok((wal, records, report))
    }

    /// [`open_with`](Self::open_with), returning the records to replay as a [`ReplayLog`] that
    /// reads them again one segment at a time: memory for one segment, however long the log
    /// grew (a pending future-dated payload holds the checkpoint back while later ones pile
    /// up behind it). What a server uses.
    pub fn open_replay(
        dir: impl AsRef<Path>,
        cfg: WalConfig,
        salvage: bool,
    ) -> Result<(Wal, ReplayLog, OpenReport)> {
        let dir = dir.as_ref().to_owned();
        let mut report = OpenReport::default();
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let _ = fs::remove_file(dir.join(CHECKPOINT_TMP));
        let mut segments = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(format!("listing {}", dir.display())))? {
            let entry = entry.map_err(io_err(format!("listing {}", dir.display())))?;
            if let Some(first) = entry.file_name().to_str().and_then(parse_segment_name) {
                segments.push(Segment {
                    first,
                    path: entry.path(),
                });
            }
        }
        segments.sort_by_key(|s| s.first);
        let checkpointed = match read_checkpoint(&dir) {
            Ok(c) => c,
            Err(e @ WalError::Corrupted { .. }) => {
                // Segments are deleted only once checkpointed: the oldest present bounds it.
                let floor = segments.first().map_or(0, |s| s.first.saturating_sub(1));
                report.warnings.push(format!(
                    "{e}: replaying every record from {} on (done notes skip what is stored)",
                    floor + 1
                ));
                floor
            }
            Err(e) => return Err(e),
        };

        let mut replay = ReplayLog::default();
        let mut last_seq = checkpointed;
        let mut expect: Option<u64> = None;
        let n = segments.len();
        let mut active: Option<(File, u64)> = None;
        for i in 0..n {
            let last = i + 1 == n;
            let next = segments.get(i + 1).map(|s| s.first);
            let seg = &segments[i];
            let mut bytes = Vec::new();
            let mut f = OpenOptions::new()
                .read(true)
                .append(last) // writes go to the end, wherever reading left the cursor
                .write(salvage) // a salvage may cut any segment
                .open(&seg.path)
                .map_err(io_err(format!("opening {}", seg.path.display())))?;
            f.read_to_end(&mut bytes)
                .map_err(io_err(format!("reading {}", seg.path.display())))?;
            // Segments follow each other without gaps; only checkpointed ones may be gone.
            if expect.map_or(seg.first > checkpointed + 1, |e| e != seg.first) {
                let gap = WalError::Corrupted {
                    segment: seg.path.clone(),
                    offset: 0,
                };
                if !salvage {
                    return Err(gap);
                }
                report.warnings.push(format!(
                    "{gap}: records {} to {} are missing (salvage: skipped)",
                    expect.unwrap_or(checkpointed + 1),
                    seg.first.saturating_sub(1)
                ));
            }
            // Wholly behind the checkpoint: every record is stored, damage costs nothing.
            let behind = next.is_some_and(|nx| nx <= checkpointed + 1);
            let parsed = match parse_segment(&seg.path, &bytes, last, seg.first, checkpointed, next)
            {
                Ok(p) => p,
                Err(e) if behind => {
                    report.warnings.push(format!("{e}: the segment is wholly behind the checkpoint (its events are stored); skipped"));
                    expect = next;
                    continue;
                }
                Err(WalError::Corrupted { segment, offset }) if salvage => {
                    let aside = set_aside(&dir, &segment)?;
                    let mut p = parse_segment(
                        &seg.path,
                        &bytes[..offset as usize],
                        last,
                        seg.first,
                        checkpointed,
                        next,
                    )?;
                    report.warnings.push(format!(
                        "wal: corrupted record in {} at byte {offset}: copied to {}; {} bytes after it skipped (salvage)",
                        segment.display(),
                        aside.display(),
                        bytes.len() as u64 - offset
                    ));
                    report.set_aside.push(aside);
                    p.torn = true;
                    p.valid_len = offset;
                    p
                }
                Err(e) => return Err(e),
            };
            let count = parsed.count;
            if parsed.torn && parsed.relogged {
                report.warnings.push(format!(
                    "wal: {} bytes at the end of {} ignored: their records were written again in the next segment",
                    bytes.len() as u64 - parsed.valid_len,
                    seg.path.display()
                ));
            } else if parsed.torn {
                if last || salvage {
                    f.set_len(parsed.valid_len)
                        .map_err(io_err(format!("truncating {}", seg.path.display())))?;
                    f.sync_all()
                        .map_err(io_err(format!("fsync of {}", seg.path.display())))?;
                }
                if bytes.len() as u64 > parsed.valid_len && !salvage {
                    report.warnings.push(format!(
                        "wal: torn tail of {} bytes cut from {} after record {} (a write cut short by a crash; never acknowledged)",
                        bytes.len() as u64 - parsed.valid_len,
                        seg.path.display(),
                        seg.first + count - 1
                    ));
                }
            }
            if count > 0 {
                last_seq = last_seq.max(seg.first + count - 1);
            }
            expect = Some(seg.first + count);
            if !parsed.records.is_empty() {
                // Read again at replay (only this segment's bytes are held meanwhile).
                replay.records += parsed.records.len() as u64;
                replay.segments.push(ReplaySegment {
                    path: seg.path.clone(),
                    valid_len: parsed.valid_len,
                    first: seg.first,
                    keep_after: checkpointed,
                    next,
                    last,
                });
            }
            if last {
                active = Some((f, parsed.valid_len));
            }
        }
        let next = last_seq + 1;
        let (file, file_len) = match active {
            // Append to the last segment, unless it is empty and misnamed, or it holds records
            // to replay: a fresh segment lets the checkpoint after the replay delete them all,
            // so a replay on a nearly full disk frees the log's space.
            Some((f, len))
                if (len > 0 && replay.is_empty())
                    || (len == 0 && segments.last().is_some_and(|s| s.first == next)) =>
            {
                (f, len)
            }
            other => {
                if other.as_ref().is_some_and(|(_, len)| *len == 0) {
                    if let Some(s) = segments.pop() {
                        fs::remove_file(&s.path)
                            .map_err(io_err(format!("removing {}", s.path.display())))?;
                    }
                }
                let path = dir.join(segment_name(next));
                let f = create_segment(&path)?;
                sync_dir(&dir)?;
                segments.push(Segment { first: next, path });
                (f, 0)
            }
        };
        let state = State {
            file: Arc::new(file),
            file_len,
            segments,
            last_seq,
            durable_seq: last_seq,
            syncing: false,
            fsyncs: 0,
            dirty_since: None,
            failing: None,
            needs_roll: false,
            undurable: Undurable::default(),
            durable_len: file_len,
            shutdown: false,
        };
        let shared = Arc::new(Shared {
            dir,
            cfg: cfg.clone(),
            state: Mutex::new(state),
            cv: Condvar::new(),
            checkpoint: Mutex::new(checkpointed),
        });
        let flusher = match cfg.fsync {
            FsyncPolicy::Batch { max_delay } => {
                let shared = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("sluice-wal-sync".into())
                    .spawn(move || flusher(&shared, max_delay.max(Duration::from_millis(1))))
                    .map_err(io_err("starting the wal sync thread"))?;
                Some(spawned)
            }
            _ => None,
        };
        Ok((Wal { shared, flusher }, replay, report))
    }
}
