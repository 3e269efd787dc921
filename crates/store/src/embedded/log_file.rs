//! [`LogFile`]: an append-only file of a partition (`blobs.log` or `meta.log`), with its
//! length under a writer lock and a dirty flag, so that appends, `flush` and a torn-tail cut
//! share one owner.

#[allow(clippy::wildcard_imports)]
use super::*;

/// An append-only file: a writer lock holding the current length, and a dirty flag for `flush`.
pub(super) struct LogFile {
    pub(super) path: PathBuf,
    /// `None`: a read-only store on a log that does not exist (an empty log).
    pub(super) file: Option<File>,
    pub(super) len: Mutex<u64>,
    pub(super) dirty: AtomicBool,
}

impl LogFile {
    /// Opens the file for reading and appending (creating it), or for reading only (never
    /// creating it: a missing log is an empty one).
    pub(super) fn open(path: &Path, read_only: bool) -> Result<(LogFile, u64)> {
        let file = if read_only {
            match File::open(path) {
                Ok(f) => Some(f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(StoreError::io(path, e)),
            }
        } else {
            let existed = path.exists();
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| StoreError::io(path, e))?;
            if !existed {
                if let Some(parent) = path.parent() {
                    sync_dir(parent)?;
                }
            }
            Some(f)
        };
        let len = match &file {
            Some(f) => f.metadata().map_err(|e| StoreError::io(path, e))?.len(),
            None => 0,
        };
        let log = LogFile {
            path: path.to_path_buf(),
            file,
            len: Mutex::new(0),
            dirty: AtomicBool::new(false),
        };
        Ok((log, len))
    }

    pub(super) fn handle(&self) -> Result<&File> {
        self.file.as_ref().ok_or_else(|| StoreError::NotFound {
            what: self.path.display().to_string(),
        })
    }

    /// Appends `bytes` at `*len` (the caller holds the writer lock). On failure the file is cut
    /// back to `*len`, so a failed write never leaves a partial record before later ones.
    pub(super) fn append(&self, len: &mut MutexGuard<'_, u64>, bytes: &[u8]) -> Result<()> {
        let file = self.handle()?;
        let at = **len;
        if let Err(e) = file.write_all_at(bytes, at) {
            let _ = file.set_len(at);
            return Err(StoreError::io(&self.path, e));
        }
        **len = at + bytes.len() as u64;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    pub(super) fn sync(&self) -> Result<()> {
        self.handle()?
            .sync_data()
            .map_err(|e| StoreError::io(&self.path, e))
    }

    pub(super) fn sync_if_dirty(&self) -> Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.sync() {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Cuts the file at `at` (dropping a torn tail) and makes that durable. Writers only.
    pub(super) fn truncate(&self, at: u64) -> Result<()> {
        self.handle()?
            .set_len(at)
            .map_err(|e| StoreError::io(&self.path, e))?;
        self.sync()
    }
}
