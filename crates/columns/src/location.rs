//! Where the column files live: a local directory (the default, under the data directory) or an
//! S3-compatible bucket (`s3://bucket/prefix?endpoint=…`, see [`s3`]).
//!
//! Files are written once and made visible whole: [`Location::put`] never leaves a partial file
//! under its final name (local: a temporary name, fsync, rename, fsync of the directory; S3: a
//! single PUT, which is atomic). A crash in the middle leaves at most a temporary file, which
//! [`Location::list`] never returns and [`LocalDir::open`] removes.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub mod s3;

/// Why a location could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocationError {
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// What the OS said.
        source: io::Error,
    },
    /// The object store failed or timed out.
    #[error("object store {url}: {detail}")]
    ObjectStore {
        /// The location's URL.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The object store refused the credentials (401, 403): a configuration to fix, not an
    /// outage to wait out.
    #[error("object store {url}: {detail} (check the keys)")]
    Denied {
        /// The location's URL.
        url: String,
        /// What it said.
        detail: String,
    },
    /// The location's URL is not valid.
    #[error("columns location {url:?}: {detail}")]
    Url {
        /// What was given.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
}

fn io_err(path: &Path, source: io::Error) -> LocationError {
    LocationError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// One listed file: its path relative to the location's root (`/`-separated) and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The path under the root, e.g. `date=2026-11-28/hour=18/dc=ams1/type=WEB/hour-c1.parquet`.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A place files are put whole, read, listed and deleted. Paths are relative, `/`-separated.
pub trait Location: Send + Sync {
    /// Stores `bytes` under `path`, replacing any file there; visible only once complete.
    fn put(&self, path: &str, bytes: &[u8]) -> Result<(), LocationError>;
    /// The whole file, or `None` when there is none.
    fn get(&self, path: &str) -> Result<Option<bytes::Bytes>, LocationError>;
    /// Every file whose path starts with `prefix` (`""` for all), sorted by path.
    fn list(&self, prefix: &str) -> Result<Vec<Listed>, LocationError>;
    /// Removes `path`; no error when it is already gone.
    fn delete(&self, path: &str) -> Result<(), LocationError>;
    /// How the location is shown to a user (a directory or a URL without secrets).
    fn describe(&self) -> String;
}

/// Opens the location named by `spec`: an `s3://` URL, or a local directory path.
pub fn open_location(spec: &str) -> Result<Box<dyn Location>, LocationError> {
    if spec.starts_with("s3://") {
        Ok(Box::new(s3::S3Location::open(spec)?))
    } else {
        Ok(Box::new(LocalDir::open(Path::new(spec))?))
    }
}

/// Files under a local directory.
#[derive(Debug, Clone)]
pub struct LocalDir {
    root: PathBuf,
}

/// The prefix of a file being written; never listed, removed on open.
const TEMP_PREFIX: &str = ".tmp-";

impl LocalDir {
    /// Opens (creating) `root`, removing temporary files a crash left.
    pub fn open(root: &Path) -> Result<LocalDir, LocationError> {
        fs::create_dir_all(root).map_err(|e| io_err(root, e))?;
        let dir = LocalDir {
            root: root.to_path_buf(),
        };
        dir.remove_temporaries(root)?;
        Ok(dir)
    }

    /// Opens `root` for reading only: nothing is created or removed (readers never modify data;
    /// a temporary file a crash left is skipped by [`Location::list`]).
    pub fn open_read_only(root: &Path) -> Result<LocalDir, LocationError> {
        if !root.is_dir() {
            return Err(io_err(
                root,
                io::Error::new(io::ErrorKind::NotFound, "no such directory"),
            ));
        }
        Ok(LocalDir {
            root: root.to_path_buf(),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn remove_temporaries(&self, dir: &Path) -> Result<(), LocationError> {
        for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let path = entry.path();
            let name = entry.file_name();
            if entry.file_type().map_err(|e| io_err(&path, e))?.is_dir() {
                self.remove_temporaries(&path)?;
            } else if name.to_string_lossy().starts_with(TEMP_PREFIX) {
                fs::remove_file(&path).map_err(|e| io_err(&path, e))?;
            }
        }
        Ok(())
    }

    fn full(&self, path: &str) -> Result<PathBuf, LocationError> {
        let bad = path.is_empty()
            || path.starts_with('/')
            || path
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..");
        if bad {
            return Err(LocationError::Url {
                url: path.to_string(),
                detail: "not a relative path".into(),
            });
        }
        Ok(self.root.join(path))
    }

    fn walk(&self, dir: &Path, rel: &str, out: &mut Vec<Listed>) -> Result<(), LocationError> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let path = entry.path();
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let meta = match entry.metadata() {
                Ok(m) => m,
                // Deleted between the listing and now (a merge or expiry): not there.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, e)),
            };
            if meta.is_dir() {
                self.walk(&path, &child, out)?;
            } else {
                out.push(Listed {
                    path: child,
                    size: meta.len(),
                });
            }
        }
        Ok(())
    }
}

impl Location for LocalDir {
    fn put(&self, path: &str, bytes: &[u8]) -> Result<(), LocationError> {
        let full = self.full(path)?;
        let dir = full.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let name = full
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!("{TEMP_PREFIX}{name}"));
        let mut file = fs::File::create(&temp).map_err(|e| io_err(&temp, e))?;
        file.write_all(bytes).map_err(|e| io_err(&temp, e))?;
        file.sync_all().map_err(|e| io_err(&temp, e))?;
        drop(file);
        fs::rename(&temp, &full).map_err(|e| io_err(&full, e))?;
        fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(&dir, e))
    }

    fn get(&self, path: &str) -> Result<Option<bytes::Bytes>, LocationError> {
        let full = self.full(path)?;
        match fs::read(&full) {
            Ok(b) => Ok(Some(bytes::Bytes::from(b))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&full, e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Listed>, LocationError> {
        // Walk only the deepest directory the prefix names, then filter by the full prefix.
        let dir_part = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        let start = if dir_part.is_empty() {
            self.root.clone()
        } else {
            self.full(dir_part)?
        };
        let mut out = Vec::new();
        self.walk(&start, dir_part, &mut out)?;
        out.retain(|l| l.path.starts_with(prefix));
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn delete(&self, path: &str) -> Result<(), LocationError> {
        let full = self.full(path)?;
        match fs::remove_file(&full) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&full, e)),
        }
        // Empty directories left behind (an expired hour) go too; a non-empty one stays.
        let mut dir = full.parent().map(Path::to_path_buf);
        while let Some(d) = dir {
            if d == self.root || fs::remove_dir(&d).is_err() {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_list_get_delete_round_trip() {
        let dir = sluice_test_support::temp::temp_dir("location");
        let loc = LocalDir::open(&dir).unwrap();
        loc.put("date=2026-11-28/hour=18/a.parquet", b"one")
            .unwrap();
        loc.put("date=2026-11-28/hour=19/b.parquet", b"two!")
            .unwrap();
        std::fs::write(dir.join("date=2026-11-28/hour=18/.tmp-c.parquet"), b"x").unwrap();
        let all = loc.list("").unwrap();
        assert_eq!(
            all,
            vec![
                Listed {
                    path: "date=2026-11-28/hour=18/a.parquet".into(),
                    size: 3
                },
                Listed {
                    path: "date=2026-11-28/hour=19/b.parquet".into(),
                    size: 4
                },
            ]
        );
        assert_eq!(loc.list("date=2026-11-28/hour=19").unwrap().len(), 1);
        assert_eq!(
            &loc.get("date=2026-11-28/hour=19/b.parquet")
                .unwrap()
                .unwrap()[..],
            b"two!"
        );
        assert!(loc.get("nope.parquet").unwrap().is_none());
        loc.delete("date=2026-11-28/hour=19/b.parquet").unwrap();
        assert!(
            !dir.join("date=2026-11-28/hour=19").exists(),
            "empty hour removed"
        );
        assert!(loc.put("../escape", b"x").is_err());
        // Reopening removes the temporary a crash left.
        LocalDir::open(&dir).unwrap();
        assert!(!dir.join("date=2026-11-28/hour=18/.tmp-c.parquet").exists());
    }
}
