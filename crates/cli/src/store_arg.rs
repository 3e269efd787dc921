//! `--store URL` for the commands that open a store themselves (`cat`, `tail`, `store`): the
//! URL is parsed by [`StoreUrl`] (the one parser, shared with `sluice serve`), and the backend
//! opened behind `Arc<dyn Store>`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use sluice_client::DataDir;
use sluice_store::{Retention, Store};
use sluice_store_cassandra::{OpenMode, StoreUrl};

/// Where a reading command reads from.
pub(crate) enum ReadSource {
    /// A store opened by this process (read-only for the embedded store).
    Store(Arc<dyn Store>),
    /// A running server (`http://ADDR`).
    Server(String),
}

/// Parses `--store`.
pub(crate) fn parse(url: &str) -> Result<StoreUrl> {
    url.parse::<StoreUrl>()
        .map_err(|e| anyhow::anyhow!("--store: {e}"))
}

/// The source of a read: `--store URL` if given, else the data directory `data` (read
/// directly, or through the server that holds it).
pub(crate) fn open_for_read(data: &Path, store: Option<&str>) -> Result<ReadSource> {
    let dir = match store.map(parse).transpose()? {
        None => data.to_path_buf(),
        Some(StoreUrl::Embedded(dir)) => dir,
        Some(url @ StoreUrl::Cassandra(_)) => {
            let s = url
                .open(OpenMode::ReadOnly, Retention::default())
                .with_context(|| format!("opening {}", url.location()))?;
            return Ok(ReadSource::Store(s));
        }
    };
    Ok(match open_data_dir(&dir)? {
        DataDir::Store(s) => ReadSource::Store(Arc::new(*s)),
        DataDir::Server(url) => ReadSource::Server(url),
    })
}

/// Opens `dir` for reading ([`sluice_client::resolve_data_dir`]), saying on stderr when a
/// running server holds it and the read goes through that server.
pub(crate) fn open_data_dir(dir: &Path) -> Result<DataDir> {
    let opened = sluice_client::resolve_data_dir(dir)?;
    if let DataDir::Server(url) = &opened {
        eprintln!(
            "sluice: {} is in use by a running server; reading through {url}",
            dir.display()
        );
    }
    Ok(opened)
}

/// Opens `url` for writing (`store init`, `store copy --to`): the embedded store in its
/// directory (created if missing), or a Cassandra keyspace (schema created, cluster required).
pub(crate) fn open_for_write(url: &StoreUrl, retention: Retention) -> Result<Arc<dyn Store>> {
    url.open(OpenMode::Create, retention)
        .with_context(|| format!("opening {}", url.location()))
}
