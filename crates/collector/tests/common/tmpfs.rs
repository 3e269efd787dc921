//! A small tmpfs for full-disk tests (shared with the server tests, which include this file):
//! mounting needs root, so a test checks [`is_root`] first and prints `SKIPPED: needs root`
//! without it. A [`Tmpfs`] is unmounted and its directory removed on drop.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this process may mount a tmpfs.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A tmpfs of `mb` MiB mounted on a fresh directory, unmounted (and removed) on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `mb` MiB on `dir` (created; it should be fresh).
    pub fn mount(dir: PathBuf, mb: u32) -> Tmpfs {
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mount a tmpfs on {}", dir.display());
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a file until the disk is full, then gives back `leave` bytes; returns its path.
pub fn fill(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0x5au8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let mut small = vec![0x5au8; 4096];
    while !small.is_empty() {
        if f.write_all(&small).is_err() {
            small.truncate(small.len() / 2);
        }
    }
    if leave > 0 {
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(leave)).unwrap();
    }
    path
}
