//! Damage in the middle of a log is skipped and reported, never taken for a torn tail; a
//! read-only store changes nothing; lost index records are rebuilt from blob keys; `repair`
//! writes clean copies and keeps the damaged originals.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use sluice_store::{
    BlobKey, Counts, DamageKind, EmbeddedStore, Namespace, PutOutcome, Store, StoreError,
};

const E: i64 = 1_700_000_400;
const EV: Namespace = Namespace::Events;
const DC: &str = "ams";
const BLOB_LEN: usize = 10_000;

fn partition_dir(root: &Path) -> PathBuf {
    root.join(format!("p{}", E - E.rem_euclid(3600)))
}

fn key(i: u32) -> String {
    format!("{E}:{DC}:WEB::{i}")
}

fn entry(i: u32) -> String {
    format!("WEB::{i}")
}

/// Five blobs with real event keys, each listed in the index by its own record, with counts.
fn write_five(dir: &Path) {
    let s = EmbeddedStore::open(dir).expect("open");
    for i in 0..5u32 {
        s.put_blob(&EV, BlobKey::new(E, &key(i)), &vec![i as u8; BLOB_LEN])
            .expect("put");
        s.add_to_epoch_index(E, DC, &[&entry(i)]).expect("index");
        let counts = Counts {
            stored: 10,
            ..Counts::default()
        };
        s.add_counts(E, DC, "WEB", "", &counts).expect("counts");
    }
    s.flush().expect("flush");
}

/// Offset of blob record `i` in blobs.log (records are header + "events" + key + value).
fn blob_record_offset(i: u32) -> usize {
    (0..i)
        .map(|j| 24 + "events".len() + key(j).len() + BLOB_LEN)
        .sum()
}

/// Offsets of the meta records, from their length fields.
fn meta_record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        out.push(pos);
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().expect("4 bytes"));
        pos += 8 + len as usize;
    }
    out
}

fn flip(path: &Path, at: usize, n: usize) {
    let mut bytes = fs::read(path).expect("read");
    for b in &mut bytes[at..at + n] {
        *b ^= 0x5a;
    }
    fs::write(path, &bytes).expect("write");
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), fs::read(&p).expect("read"));
            }
        }
    }
    out
}

fn indexed(s: &EmbeddedStore) -> Vec<String> {
    s.get_epoch_index(E, DC)
        .expect("index")
        .into_iter()
        .collect()
}

#[test]
fn a_damaged_blob_header_in_the_middle_is_skipped_not_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_five(dir.path());
    let log = partition_dir(dir.path()).join("blobs.log");
    let len_before = fs::metadata(&log).expect("meta").len();
    let at = blob_record_offset(1) + 8; // the epoch field of record 1
    flip(&log, at, 4);
    // And a torn tail after the last record: only that is cut.
    let mut bytes = fs::read(&log).expect("read");
    bytes.extend_from_slice(&[3u8; 333]);
    fs::write(&log, bytes).expect("write");

    let s = EmbeddedStore::open(dir.path()).expect("open");
    for i in [0u32, 2, 3, 4] {
        assert_eq!(
            s.get_blob(&EV, BlobKey::new(E, &key(i))).expect("get"),
            Some(vec![i as u8; BLOB_LEN]),
            "blob {i} after the damage is still read"
        );
    }
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, &key(1))).expect("get"),
        None
    );
    assert_eq!(
        fs::metadata(&log).expect("meta").len(),
        len_before,
        "only the torn tail cut"
    );
    let damage = s.damage(E, E + 1).expect("damage");
    assert_eq!(damage.len(), 1, "{damage:?}");
    let d = &damage[0];
    assert_eq!(d.kind, DamageKind::Skipped);
    assert_eq!(d.offset, blob_record_offset(1) as u64);
    assert_eq!(
        d.len,
        (blob_record_offset(2) - blob_record_offset(1)) as u64
    );
    assert!(d.location.ends_with("blobs.log"), "{d}");
    let stats = s.damage_stats();
    assert_eq!((stats.damaged_ranges, stats.damaged_bytes), (1, d.len));
    assert_eq!((stats.torn_tails, stats.torn_tail_bytes), (1, 333));
    assert_eq!(s.recovery_stats().torn_tails, 1);

    // New writes append after the damage, and survive a reopen.
    assert_eq!(
        s.put_blob(&EV, BlobKey::new(E, &key(7)), &[7; 100])
            .expect("put"),
        PutOutcome::Written
    );
    drop(s);
    let s = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, &key(7))).expect("get"),
        Some(vec![7; 100])
    );
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, &key(4))).expect("get"),
        Some(vec![4; BLOB_LEN])
    );
    assert_eq!(
        s.damage(E, E + 1).expect("damage").len(),
        1,
        "still reported"
    );
}

#[test]
fn a_read_only_store_changes_nothing_and_reports_torn_tails() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_five(dir.path());
    let p = partition_dir(dir.path());
    flip(&p.join("blobs.log"), blob_record_offset(2) + 2, 4);
    let meta = fs::read(p.join("meta.log")).expect("meta");
    let offsets = meta_record_offsets(&meta);
    // Eight bytes across the end of blob 1's index add and the start of its counts add.
    flip(&p.join("meta.log"), offsets[3] - 4, 8);
    // And a torn tail on both logs.
    for (f, garbage) in [("blobs.log", vec![1u8; 700]), ("meta.log", vec![2u8; 5])] {
        let mut b = fs::read(p.join(f)).expect("read");
        b.extend_from_slice(&garbage);
        fs::write(p.join(f), b).expect("write");
    }
    let before = snapshot(dir.path());

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    assert!(s.is_read_only());
    assert_eq!(
        indexed(&s),
        (0..5).map(entry).collect::<Vec<_>>(),
        "index rebuilt"
    );
    for i in [0u32, 1, 3, 4] {
        assert_eq!(
            s.get_blob(&EV, BlobKey::new(E, &key(i))).expect("get"),
            Some(vec![i as u8; BLOB_LEN])
        );
    }
    let damage = s.damage(E - 400, E + 3000).expect("damage");
    let kinds: Vec<(DamageKind, bool)> = damage
        .iter()
        .map(|d| (d.kind, d.location.ends_with("blobs.log")))
        .collect();
    assert_eq!(kinds.len(), 4, "{damage:#?}");
    for k in [
        (DamageKind::Skipped, true),
        (DamageKind::TornTail, true),
        (DamageKind::Skipped, false),
        (DamageKind::TornTail, false),
    ] {
        assert!(kinds.contains(&k), "{k:?} missing in {damage:#?}");
    }
    assert!(
        damage.iter().any(|d| d.what.contains("counts")),
        "lost counts reported"
    );
    // The lost counts record: 4 of 5 adds remain.
    let counts = s.get_counts(E, DC).expect("counts");
    assert_eq!(counts[&("WEB".to_string(), String::new())].stored, 40);
    assert!(matches!(
        s.put_blob(&EV, BlobKey::new(E, "x"), b"x"),
        Err(StoreError::InvalidArgument { .. })
    ));
    assert!(s.expire(i64::MAX).is_err());
    let report = s.check().expect("check");
    assert_eq!(report.blobs, 4);
    drop(s);
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a reader changed the directory"
    );

    // Readers share the directory; a writer does not open beside one.
    let r1 = EmbeddedStore::open_read_only(dir.path()).expect("reader 1");
    let r2 = EmbeddedStore::open_read_only(dir.path()).expect("reader 2");
    assert!(matches!(
        EmbeddedStore::open(dir.path()),
        Err(StoreError::Locked { .. })
    ));
    drop((r1, r2));
    let w = EmbeddedStore::open(dir.path()).expect("writer");
    assert!(matches!(
        EmbeddedStore::open_read_only(dir.path()),
        Err(StoreError::Locked { .. })
    ));
    drop(w);
}

#[test]
fn read_only_open_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nothing-here");
    assert!(matches!(
        EmbeddedStore::open_read_only(&missing),
        Err(StoreError::NotFound { .. })
    ));
    assert!(!missing.exists());
    // An empty directory is not a data directory (no FORMAT), and gets no LOCK either.
    assert!(EmbeddedStore::open_read_only(dir.path()).is_err());
    assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 0);
}

#[test]
fn lost_index_records_are_rebuilt_from_blob_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_five(dir.path());
    let meta = partition_dir(dir.path()).join("meta.log");
    let offsets = meta_record_offsets(&fs::read(&meta).expect("read"));
    // Records alternate index, counts: damage the index add of blob 1 and of blob 3.
    flip(&meta, offsets[2] + 1, 8);
    flip(&meta, offsets[6], 8);
    let len_before = fs::metadata(&meta).expect("meta").len();

    let s = EmbeddedStore::open(dir.path()).expect("open");
    assert_eq!(indexed(&s), (0..5).map(entry).collect::<Vec<_>>());
    assert_eq!(s.damage_stats().index_entries_rebuilt, 2);
    assert_eq!(s.damage_stats().damaged_ranges, 2);
    assert_eq!(
        s.list_epochs(None, E, E + 1).expect("list"),
        vec![(E, DC.to_string())]
    );
    // Mid-log damage stays (and is reported); the writer does not touch the file for it.
    assert_eq!(fs::metadata(&meta).expect("meta").len(), len_before);
    // An add of a rebuilt entry is a no-op, and the next load rebuilds it again.
    s.add_to_epoch_index(E, DC, &[&entry(1), &entry(9)])
        .expect("add");
    drop(s);
    let s = EmbeddedStore::open(dir.path()).expect("reopen");
    let mut want: Vec<String> = (0..5).map(entry).collect();
    want.push(entry(9));
    assert_eq!(indexed(&s), want);
}

#[test]
fn a_writer_that_cuts_a_torn_meta_tail_logs_the_rebuilt_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_five(dir.path());
    let meta = partition_dir(dir.path()).join("meta.log");
    let offsets = meta_record_offsets(&fs::read(&meta).expect("read"));
    // Cut inside the index add of blob 4 (the 9th record): its entry is lost with the tail.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&meta)
        .expect("open");
    f.set_len(offsets[8] as u64 + 5).expect("cut");
    drop(f);
    let s = EmbeddedStore::open(dir.path()).expect("open");
    assert_eq!(indexed(&s), (0..5).map(entry).collect::<Vec<_>>());
    assert_eq!(s.recovery_stats().torn_tails, 1);
    assert!(
        s.damage(E, E + 1).expect("damage").is_empty(),
        "a cut tail is gone"
    );
    drop(s);
    let s = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(
        s.damage_stats(),
        Default::default(),
        "nothing left to rebuild"
    );
    assert_eq!(indexed(&s), (0..5).map(entry).collect::<Vec<_>>());
}

#[test]
fn check_finds_bad_values_and_repair_writes_clean_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_five(dir.path());
    let p = partition_dir(dir.path());
    flip(&p.join("blobs.log"), blob_record_offset(1) + 3, 4); // header of blob 1
    flip(
        &p.join("blobs.log"),
        blob_record_offset(3) + 24 + 6 + key(3).len() + 100,
        1,
    ); // value of blob 3
    let offsets = meta_record_offsets(&fs::read(p.join("meta.log")).expect("read"));
    flip(&p.join("meta.log"), offsets[4] + 2, 8); // index add of blob 2

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
    let report = s.check().expect("check");
    let kinds: Vec<DamageKind> = report.damage.iter().map(|d| d.kind).collect();
    assert_eq!(report.damage.len(), 3, "{:#?}", report.damage);
    assert!(kinds.contains(&DamageKind::BadValue));
    assert_eq!(
        kinds.iter().filter(|k| **k == DamageKind::Skipped).count(),
        2
    );
    assert_eq!(report.blobs, 4);

    // Refused while the directory is open.
    assert!(matches!(
        EmbeddedStore::repair(dir.path()),
        Err(StoreError::Locked { .. })
    ));
    drop(s);
    let blobs_before = fs::read(p.join("blobs.log")).expect("read");
    let repaired = EmbeddedStore::repair(dir.path()).expect("repair");
    assert_eq!(repaired.replaced.len(), 2, "{repaired:?}");
    assert_eq!(repaired.bad_values_dropped, 1);
    assert_eq!(repaired.blobs_kept, 3);
    assert_eq!(repaired.index_entries_rebuilt, 1);
    let (_, aside) = repaired
        .replaced
        .iter()
        .find(|(log, _)| log.ends_with("blobs.log"))
        .expect("blobs.log replaced");
    assert_eq!(
        fs::read(aside).expect("kept"),
        blobs_before,
        "original kept"
    );
    assert!(aside.to_string_lossy().contains("blobs.log.damaged-"));

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
    let report = s.check().expect("check");
    assert!(report.damage.is_empty(), "{:#?}", report.damage);
    assert_eq!(report.blobs, 3);
    for i in [0u32, 2, 4] {
        assert_eq!(
            s.get_blob(&EV, BlobKey::new(E, &key(i))).expect("get"),
            Some(vec![i as u8; BLOB_LEN])
        );
    }
    assert_eq!(indexed(&s), (0..5).map(entry).collect::<Vec<_>>());
    drop(s);
    // Nothing left to repair.
    let again = EmbeddedStore::repair(dir.path()).expect("repair");
    assert!(again.replaced.is_empty(), "{again:?}");
}

/// Counts added once (meta.log kind 3 records) after a damaged record: the load resynchronises
/// on them, their tokens still refuse a retry, and a repair keeps them; kind 2 records beside
/// them (a log written before kind 3 existed) load as before.
#[test]
fn counts_once_records_survive_damage_and_repair() {
    use sluice_store::CountsWrite;
    let dir = tempfile::tempdir().expect("tempdir");
    write_five(dir.path()); // kind 1 and kind 2 records only: 5 x 10 stored
    let once = Counts {
        stored: 7,
        ..Counts::default()
    };
    {
        let s = EmbeddedStore::open(dir.path()).expect("open");
        for b in ["WEB::c.0", "WEB::c.1"] {
            s.add_counts_once(CountsWrite::new("c", b), E, DC, "WEB", "", &once)
                .expect("counts once");
        }
        s.flush().expect("flush");
    }
    let p = partition_dir(dir.path());
    let offsets = meta_record_offsets(&fs::read(p.join("meta.log")).expect("read"));
    assert_eq!(offsets.len(), 12);
    // Damage the last kind 2 record (counts of blob 4): 10 stored lost, reported.
    flip(&p.join("meta.log"), offsets[9] + 2, 8);
    let web = ("WEB".to_string(), String::new());
    {
        let s = EmbeddedStore::open(dir.path()).expect("open");
        assert_eq!(s.get_counts(E, DC).expect("counts")[&web].stored, 40 + 14);
        assert_eq!(s.damage(E, E + 1).expect("damage").len(), 1);
        s.add_counts_once(CountsWrite::new("c", "WEB::c.1"), E, DC, "WEB", "", &once)
            .expect("retry");
        assert_eq!(s.get_counts(E, DC).expect("counts")[&web].stored, 40 + 14);
    }
    let repaired = EmbeddedStore::repair(dir.path()).expect("repair");
    assert_eq!(repaired.replaced.len(), 1, "{repaired:?}");
    let s = EmbeddedStore::open(dir.path()).expect("open");
    assert!(s.damage(E, E + 1).expect("damage").is_empty());
    s.add_counts_once(CountsWrite::new("c", "WEB::c.0"), E, DC, "WEB", "", &once)
        .expect("retry");
    assert_eq!(s.get_counts(E, DC).expect("counts")[&web].stored, 40 + 14);
}
