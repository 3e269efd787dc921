//! The data directory's lock: exclusive for a writer, shared for readers, so that readers run
//! side by side but never beside a writer.

#[allow(clippy::wildcard_imports)]
use super::*;
use std::time::{Duration, Instant};

/// How long a writer retries a taken lock before the open fails with [`StoreError::Locked`].
///
/// A lock belongs to the open file, not the process: a child forked by another thread of the
/// same process holds a copy of the descriptor until it `exec`s (close-on-exec closes it only
/// then). So a store closed just now can look locked for a moment; a reopen in that window failed
/// a CI run (the WAL test that reopens a store right after a crash). 1 s covers a slow fork on a
/// loaded machine; a real second writer still fails, one second later.
const WRITER_LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long a reader retries: short, because a reader that finds a server's lock goes on to ask
/// that server (`sluice read --data-dir` beside `sluice serve`), and should not wait a second.
const READER_LOCK_WAIT: Duration = Duration::from_millis(100);
/// Pause between two tries while waiting for the lock.
const LOCK_RETRY: Duration = Duration::from_millis(5);

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
    let wait = if shared {
        READER_LOCK_WAIT
    } else {
        WRITER_LOCK_WAIT
    };
    let started = Instant::now();
    loop {
        let taken = if shared {
            lock.try_lock_shared()
        } else {
            lock.try_lock()
        };
        match taken {
            Ok(()) => return Ok(Some(lock)),
            Err(fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                std::thread::sleep(LOCK_RETRY);
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    dir: dir.display().to_string(),
                })
            }
            Err(fs::TryLockError::Error(e)) => return Err(StoreError::io(&lock_path, e)),
        }
    }
}
