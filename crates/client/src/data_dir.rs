//! `DIR/SERVER`: reading a data directory that a running server may hold.
//!
//! The embedded store takes an exclusive lock on its directory. A reader opens it read-only
//! (it never changes the files: damage is skipped and reported, a torn tail left to the
//! writer); if a `sluice serve` holds the lock, the reader goes through that server instead,
//! whose address the server wrote to [`SERVER_FILE`] in the directory.

use std::path::{Path, PathBuf};

use sluice_store::{EmbeddedStore, StoreError, SERVER_FILE};

use crate::{base_url, ClientError, Result};

/// A data directory opened for reading.
pub enum DataDir {
    /// No server runs on it: its store, opened read-only.
    Store(Box<EmbeddedStore>),
    /// A server holds its lock: read through that server (`http://ADDR`, or `https://ADDR`
    /// when it serves TLS: with `--tls-self-signed` its certificate is [`crate::self_signed_ca`]
    /// of the directory).
    Server(String),
}

/// Opens `dir` read-only, or finds the server that holds it (see the [module docs](self)).
pub fn resolve_data_dir(dir: &Path) -> Result<DataDir> {
    if !dir.is_dir() {
        return Err(ClientError::Config(format!(
            "{}: no such data directory",
            dir.display()
        )));
    }
    match EmbeddedStore::open_read_only(dir) {
        Ok(s) => Ok(DataDir::Store(Box::new(s))),
        Err(StoreError::Locked { .. }) => {
            let file: PathBuf = dir.join(SERVER_FILE);
            let text = std::fs::read_to_string(&file).ok();
            match text
                .as_deref()
                .map(str::trim)
                .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
                .map(base_url)
            {
                Some(Ok(url)) => Ok(DataDir::Server(url)),
                _ => Err(ClientError::Config(format!(
                    "{}: in use by another process (no HTTP address in {}); use --server URL",
                    dir.display(),
                    file.display()
                ))),
            }
        }
        Err(e) => Err(ClientError::Config(format!("{}: {e}", dir.display()))),
    }
}
