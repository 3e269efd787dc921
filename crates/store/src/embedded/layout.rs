//! The data directory's layout: one directory per time partition, named by its start, and the
//! `FORMAT` file recording the layout version and the partition width.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The partition directories of `dir`. A writer finishes interrupted expiries (deletes
/// `*.expired`); a reader skips them.
pub(super) fn list_partitions(
    dir: &Path,
    retention: &Retention,
    read_only: bool,
) -> Result<BTreeMap<i64, Arc<Partition>>> {
    let mut partitions = BTreeMap::new();
    if !read_only {
        recover_purges(dir)?;
    }
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if name.ends_with(EXPIRED_SUFFIX) {
            if !read_only {
                // An expiry interrupted by a crash: finish it.
                fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
            }
            continue;
        }
        if let Some(start) = parse_partition_name(name) {
            if retention.partition_of(start) != start {
                return Err(StoreError::corrupted(
                    path.display().to_string(),
                    "partition directory not aligned to the partition width",
                ));
            }
            partitions.insert(start, Arc::new(Partition::new(start, path)));
        }
    }
    Ok(partitions)
}

/// The partition width recorded in `dir/FORMAT` (which must exist and be of this version).
pub(super) fn read_format(dir: &Path) -> Result<i64> {
    let path = dir.join(FORMAT_FILE);
    let found = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StoreError::NotFound {
                what: format!("{} (not a sluice data directory?)", path.display()),
            })
        }
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    let mut lines = found.lines();
    let first = lines.next().unwrap_or("");
    if first != FORMAT_VERSION {
        return Err(StoreError::corrupted(
            path.display().to_string(),
            format!("unknown format {first:?}, expected {FORMAT_VERSION:?}"),
        ));
    }
    lines
        .next()
        .and_then(|l| l.strip_prefix("partition_secs "))
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            StoreError::corrupted(path.display().to_string(), "no valid partition_secs line")
        })
}

pub(super) fn partition_name(start: i64) -> String {
    format!("p{start}")
}

pub(super) fn parse_partition_name(name: &str) -> Option<i64> {
    let n = name.strip_prefix('p')?;
    let v: i64 = n.parse().ok()?;
    // Only the canonical spelling (no "+", no leading zeros) names a partition.
    (partition_name(v) == name).then_some(v)
}

/// Writes the FORMAT file on creation; on reopen checks the version and the partition width.
pub(super) fn check_format(dir: &Path, retention: &Retention) -> Result<()> {
    let path = dir.join(FORMAT_FILE);
    let expected = format!(
        "{FORMAT_VERSION}\npartition_secs {}\n",
        retention.partition_secs
    );
    match fs::read_to_string(&path) {
        Ok(found) => {
            if found != expected {
                let first = found.lines().next().unwrap_or("");
                if first != FORMAT_VERSION {
                    return Err(StoreError::corrupted(
                        path.display().to_string(),
                        format!("unknown format {first:?}, expected {FORMAT_VERSION:?}"),
                    ));
                }
                return Err(StoreError::invalid(format!(
                    "{} was created with another partition width ({}); open it with that width",
                    dir.display(),
                    found.lines().nth(1).unwrap_or("?"),
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Write to a temporary name and rename, so a crash never leaves a half FORMAT file.
            let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
            let mut f = File::create(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
            f.write_all(expected.as_bytes())
                .map_err(|e| StoreError::io(&tmp, e))?;
            f.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
            fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))?;
            sync_dir(dir)
        }
        Err(e) => Err(StoreError::io(&path, e)),
    }
}

pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, e))
}
