//! Temp dirs that clean up on drop: a test that passes or fails leaves nothing behind, unless
//! `SLUICE_KEEP_TEMP=1` (or [`TempDir::keep`]) keeps the dir for a look afterwards.

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// The environment variable that keeps every temp dir (its path printed on stderr).
pub const KEEP_ENV: &str = "SLUICE_KEEP_TEMP";

/// A fresh, empty directory, removed with its contents on drop (unless kept).
///
/// Derefs to [`Path`], so `dir.join(..)` and `&dir` as `&Path` work as with a `PathBuf`.
#[derive(Debug)]
pub struct TempDir {
    inner: Option<tempfile::TempDir>,
    path: PathBuf,
}

/// A new empty dir under the system temp dir, named after `name` (and made unique), so that
/// tests running at once never share one.
pub fn temp_dir(name: &str) -> TempDir {
    let inner = tempfile::Builder::new()
        .prefix(&format!("sluice-{name}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("temp dir for {name}: {e}"));
    let path = inner.path().to_path_buf();
    TempDir {
        inner: Some(inner),
        path,
    }
}

impl TempDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory after the test (prints its path on stderr) and returns it: for
    /// looking at what a failing test left.
    pub fn keep(mut self) -> PathBuf {
        self.keep_inner();
        self.path.clone()
    }

    fn keep_inner(&mut self) {
        if let Some(inner) = self.inner.take() {
            let path = inner.keep();
            eprintln!("kept temp dir {}", path.display());
        }
    }
}

impl Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<OsStr> for TempDir {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_ENV).is_some_and(|v| v == "1") {
            self.keep_inner();
        }
        // Otherwise `inner` drops here and removes the directory.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop_and_kept_on_request() {
        let dir = temp_dir("temp-test");
        std::fs::write(dir.join("f"), b"x").unwrap();
        let path = dir.to_path_buf();
        drop(dir);
        assert!(!path.exists(), "{} not removed", path.display());

        let kept = temp_dir("temp-test").keep();
        assert!(kept.is_dir());
        std::fs::remove_dir_all(&kept).unwrap();
    }
}
