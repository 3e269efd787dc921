//! Behaviour of the embedded backend's files: torn tails, corrupted records, format checks.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use sluice_store::{
    BlobKey, Durability, EmbeddedOptions, EmbeddedStore, Namespace, PutOutcome, Retention, Store,
    StoreError,
};

const E: i64 = 1_700_000_400; // inside the partition starting at 1_700_000_000 - 1_700_000_000 % 3600
const EV: Namespace = Namespace::Events;

fn partition_dir(root: &Path) -> PathBuf {
    let start = E - E.rem_euclid(3600);
    root.join(format!("p{start}"))
}

fn write_three(dir: &Path) {
    let s = EmbeddedStore::open(dir).unwrap();
    for i in 0..3u8 {
        s.put_blob(&EV, BlobKey::new(E, &format!("k{i}")), &vec![i; 10_000])
            .unwrap();
        s.add_to_epoch_index(E, "ams", &[&format!("WEB::{i}")])
            .unwrap();
    }
    s.flush().unwrap();
}

#[test]
fn torn_blob_tail_is_dropped_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    write_three(dir.path());
    let log = partition_dir(dir.path()).join("blobs.log");
    let len = fs::metadata(&log).unwrap().len();
    // Cut the last record in the middle of its value, as a crash mid-write would.
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 4000)
        .unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, "k0")).unwrap(),
        Some(vec![0; 10_000])
    );
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, "k1")).unwrap(),
        Some(vec![1; 10_000])
    );
    assert_eq!(s.get_blob(&EV, BlobKey::new(E, "k2")).unwrap(), None);
    let stats = s.recovery_stats();
    assert_eq!(stats.torn_tails, 1);
    assert_eq!(stats.bytes_dropped, 10_000 + 24 + 6 + 2 - 4000);
    // The log is usable: the lost blob can be written again and survives another reopen.
    assert_eq!(
        s.put_blob(&EV, BlobKey::new(E, "k2"), &[2; 10_000])
            .unwrap(),
        PutOutcome::Written
    );
    drop(s);
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, "k2")).unwrap(),
        Some(vec![2; 10_000])
    );
    assert_eq!(s.recovery_stats().torn_tails, 0);
}

#[test]
fn garbage_tail_and_zero_filled_tail_are_dropped() {
    for garbage in [vec![0u8; 5000], b"\x13\x37 not a record at all".repeat(50)] {
        let dir = tempfile::tempdir().unwrap();
        write_three(dir.path());
        let log = partition_dir(dir.path()).join("blobs.log");
        OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(&garbage)
            .unwrap();
        let s = EmbeddedStore::open(dir.path()).unwrap();
        for i in 0..3u8 {
            assert_eq!(
                s.get_blob(&EV, BlobKey::new(E, &format!("k{i}"))).unwrap(),
                Some(vec![i; 10_000])
            );
        }
        assert_eq!(s.recovery_stats().bytes_dropped, garbage.len() as u64);
    }
}

#[test]
fn last_record_with_a_bad_value_is_dropped() {
    // Header complete, value zero-filled (what a power loss after the size was extended leaves).
    let dir = tempfile::tempdir().unwrap();
    write_three(dir.path());
    let log = partition_dir(dir.path()).join("blobs.log");
    let len = fs::metadata(&log).unwrap().len();
    let mut bytes = fs::read(&log).unwrap();
    for b in &mut bytes[(len as usize - 5000)..] {
        *b = 0;
    }
    fs::write(&log, &bytes).unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(s.get_blob(&EV, BlobKey::new(E, "k2")).unwrap(), None);
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, "k1")).unwrap(),
        Some(vec![1; 10_000])
    );
}

#[test]
fn corrupted_value_in_the_middle_is_reported_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    write_three(dir.path());
    let log = partition_dir(dir.path()).join("blobs.log");
    let mut bytes = fs::read(&log).unwrap();
    bytes[24 + 6 + 2 + 500] ^= 0xff; // inside k0's value
    fs::write(&log, &bytes).unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let err = s.get_blob(&EV, BlobKey::new(E, "k0")).unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupted { ref key, .. } if key == "k0"),
        "{err:?}"
    );
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, "k1")).unwrap(),
        Some(vec![1; 10_000])
    );
    // The same through a batch read on the fetch threads (buffers allocated by the caller):
    // the corrupt one is an error in its place, the others and the absent one are answered.
    let keys = ["k1", "k0", "missing", "k2"].map(|k| BlobKey::new(E, k));
    let got = s.get_blobs(&EV, &keys);
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].as_ref().unwrap(), &Some(vec![1; 10_000]));
    assert!(
        matches!(got[1], Err(StoreError::Corrupted { ref key, .. }) if key == "k0"),
        "{:?}",
        got[1]
    );
    assert_eq!(got[2].as_ref().unwrap(), &None);
    assert_eq!(got[3].as_ref().unwrap(), &Some(vec![2; 10_000]));
    // A corrupt stored blob is not silently replaced either.
    assert!(matches!(
        s.put_blob(&EV, BlobKey::new(E, "k0"), &[0; 10_000]),
        Err(StoreError::Corrupted { .. })
    ));
}

#[test]
fn torn_meta_tail_keeps_earlier_records() {
    let dir = tempfile::tempdir().unwrap();
    write_three(dir.path());
    let log = partition_dir(dir.path()).join("meta.log");
    let len = fs::metadata(&log).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let idx = s.get_epoch_index(E, "ams").unwrap();
    assert_eq!(
        idx.into_iter().collect::<Vec<_>>(),
        vec!["WEB::0", "WEB::1"]
    );
    assert_eq!(s.recovery_stats().torn_tails, 1);
    s.add_to_epoch_index(E, "ams", &["WEB::2"]).unwrap();
    drop(s);
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(s.get_epoch_index(E, "ams").unwrap().len(), 3);
}

#[test]
fn partition_width_is_fixed_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    write_three(dir.path());
    let opts = EmbeddedOptions {
        retention: Retention {
            period_secs: 86_400,
            partition_secs: 86_400,
        },
        ..EmbeddedOptions::default()
    };
    let err = EmbeddedStore::open_with(dir.path(), opts)
        .err()
        .expect("width mismatch refused");
    assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err:?}");
    // The retention period itself may change freely.
    let opts = EmbeddedOptions {
        retention: Retention::new(3600),
        ..EmbeddedOptions::default()
    };
    assert!(EmbeddedStore::open_with(dir.path(), opts).is_ok());
}

#[test]
fn interrupted_expiry_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    write_three(dir.path());
    let p = partition_dir(dir.path());
    let renamed = p.with_file_name(format!(
        "{}.0.expired",
        p.file_name().unwrap().to_str().unwrap()
    ));
    fs::rename(&p, &renamed).unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert!(!renamed.exists());
    assert_eq!(s.get_blob(&EV, BlobKey::new(E, "k0")).unwrap(), None);
}

#[test]
fn immediate_durability_and_bytes_freed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EmbeddedOptions {
        durability: Durability::Immediate,
        retention: Retention::new(0),
        ..EmbeddedOptions::default()
    };
    let s = EmbeddedStore::open_with(dir.path(), opts).unwrap();
    s.put_blob(&EV, BlobKey::new(E, "k"), &[7; 1000]).unwrap();
    s.add_to_epoch_index(E, "ams", &["WEB::0"]).unwrap();
    let r = s.expire(E + 3600).unwrap();
    assert_eq!(r.partitions_dropped, 1);
    assert!(r.bytes_freed > 1000, "{r:?}");
    assert!(!partition_dir(dir.path()).exists());
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = sluice_store::EmbeddedStore::open(dir.path()).expect("first open");
    match sluice_store::EmbeddedStore::open(dir.path()) {
        Err(sluice_store::StoreError::Locked { .. }) => {}
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("second open succeeded"),
    }
    drop(first);
    sluice_store::EmbeddedStore::open(dir.path()).expect("open after the first is closed");
}

/// A flipped byte in `CATALOG` is reported (reads and writes fail with `Corrupted`), never
/// read as an empty or partial registry, and the file is left as it was.
#[test]
fn damaged_catalog_is_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.put_catalog("substream", "errors", Some(b"{\"v\":1}"))
        .unwrap();
    drop(s);
    let path = dir.path().join("CATALOG");
    let mut bytes = fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert!(matches!(
        s.get_catalog("substream"),
        Err(StoreError::Corrupted { .. })
    ));
    assert!(s.put_catalog("substream", "other", Some(b"x")).is_err());
    assert_eq!(fs::read(&path).unwrap(), bytes);
    // A read-only open sees the writer's later changes without reopening.
    fs::remove_file(&path).unwrap();
    s.put_catalog("substream", "fresh", Some(b"y")).unwrap();
    drop(s);
    let ro = EmbeddedStore::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.get_catalog("substream").unwrap().len(), 1);
    assert!(ro.put_catalog("substream", "x", Some(b"z")).is_err());
}

/// Substream index records (kind 4) survive a torn meta tail and a reopen beside the events
/// index.
#[test]
fn namespace_index_survives_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let sub = Namespace::Substream("errors".into());
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.add_to_namespace_index(&sub, E, "ams", &["WEB::0"])
        .unwrap();
    s.add_to_epoch_index(E, "ams", &["WEB::0"]).unwrap();
    s.add_to_namespace_index(&sub, E, "ams", &["WEB::1"])
        .unwrap();
    drop(s);
    let log = partition_dir(dir.path()).join("meta.log");
    let len = fs::metadata(&log).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 2)
        .unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let got: Vec<String> = s
        .get_namespace_index(&sub, E, "ams")
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(got, vec!["WEB::0"]);
    assert_eq!(s.get_epoch_index(E, "ams").unwrap().len(), 1);
}
