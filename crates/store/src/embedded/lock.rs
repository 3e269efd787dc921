//! The data directory's lock: exclusive for a writer, shared for readers, so that readers run
//! side by side but never beside a writer.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Takes the lock of `dir`: exclusive for a writer (creating `LOCK`), shared for a reader (never
/// creating it; `None` when there is none).
pub(super) fn lock_dir(dir: &Path, shared: bool) -> Result<Option<File>> {
    let lock_path = dir.join(LOCK_FILE);
    let lock = if shared {
        match File::open(&lock_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&lock_path, e)),
        }
    } else {
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, e))?
    };
    let taken = if shared {
        lock.try_lock_shared()
    } else {
        lock.try_lock()
    };
    match taken {
        Ok(()) => Ok(Some(lock)),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.display().to_string(),
        }),
        Err(fs::TryLockError::Error(e)) => Err(StoreError::io(&lock_path, e)),
    }
}
