//! Bytes on disk under a directory, as `du` counts them: the sum of the files' lengths
//! (apparent size: what the table reports, the same for both servers) and the blocks allocated
//! (what the file system spends, small files rounded up), both from one walk.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes under a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Sum of file lengths.
    pub apparent: u64,
    /// Sum of allocated blocks × 512.
    pub allocated: u64,
    /// Regular files counted.
    pub files: u64,
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, other: Usage) -> Usage {
        Usage {
            apparent: self.apparent.saturating_sub(other.apparent),
            allocated: self.allocated.saturating_sub(other.allocated),
            files: self.files.saturating_sub(other.files),
        }
    }
}

/// The files under `dir` (symlinks not followed; a missing directory is empty; files that
/// vanish during the walk, as a server renames and deletes, are skipped).
pub fn usage(dir: &Path) -> Usage {
    let mut total = Usage::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return total;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if meta.is_dir() {
            let sub = usage(&entry.path());
            total.apparent += sub.apparent;
            total.allocated += sub.allocated;
            total.files += sub.files;
        } else if meta.is_file() {
            total.apparent += meta.len();
            total.allocated += meta.blocks() * 512;
            total.files += 1;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_sums_nested_files_and_a_missing_dir_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("x"), vec![1u8; 1000]).unwrap();
        std::fs::write(dir.path().join("a/b/y"), vec![2u8; 5000]).unwrap();
        let u = usage(dir.path());
        assert_eq!((u.apparent, u.files), (6000, 2));
        assert!(u.allocated >= 6000, "{u:?}");
        let a = usage(&dir.path().join("a"));
        assert_eq!((u - a).apparent, 1000);
        assert_eq!(usage(&dir.path().join("missing")), Usage::default());
    }
}
