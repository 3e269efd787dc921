//! Salvaging proven payloads: a blob record whose header fails its CRC, but whose lengths lead
//! to the next valid record (or exactly to the end of the log) and whose value passes its own
//! `=chk` SHA-1, is read as stored, reported as [`DamageKind::Salvaged`] (naming the blob), and
//! kept by a repair with a rewritten header. A record that fails both checks, or whose identity
//! is not proven (epoch, namespace, key), is skipped and reported as before; a garbled header
//! never makes a load, a check or a repair panic.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use sluice_store::{BlobKey, DamageKind, EmbeddedStore, Namespace, Store};

const E: i64 = 1_700_000_400;
const EV: Namespace = Namespace::Events;
const DC: &str = "ams";
const N: u32 = 5;

fn partition_dir(root: &Path) -> PathBuf {
    root.join(format!("p{}", E - E.rem_euclid(3600)))
}

fn blobs_log(root: &Path) -> PathBuf {
    partition_dir(root).join("blobs.log")
}

fn key(i: u32) -> String {
    format!("{E}:{DC}:WEB::{i}")
}

/// A blob as the collector stores them: a body, `=chk` and the body's SHA-1 (the store only
/// needs the trailer; lengths differ per blob).
fn value(i: u32) -> Vec<u8> {
    sluice_blob::with_trailer(&vec![i as u8 + 1; 10_000 + 37 * i as usize])
}

/// Writes blobs `0..n` (`value(i)` under `key(i)`), each listed in the epoch index.
fn write_blobs(dir: &Path, n: u32) {
    let s = EmbeddedStore::open(dir).expect("open");
    for i in 0..n {
        s.put_blob(&EV, BlobKey::new(E, &key(i)), &value(i))
            .expect("put");
        s.add_to_epoch_index(E, DC, &[&format!("WEB::{i}")])
            .expect("index");
    }
    s.flush().expect("flush");
}

/// Offset of record `i` of a log written by [`write_blobs`] (header, "events", key, value).
fn rec_off(i: u32) -> usize {
    (0..i).map(rec_len).sum()
}

fn rec_len(i: u32) -> usize {
    24 + "events".len() + key(i).len() + value(i).len()
}

/// The bytes the header CRC covers: header, namespace, key.
fn names_end(i: u32) -> usize {
    24 + "events".len() + key(i).len()
}

fn flip(path: &Path, at: usize, n: usize) {
    let mut bytes = fs::read(path).expect("read");
    for b in &mut bytes[at..at + n] {
        *b ^= 0x5a;
    }
    fs::write(path, &bytes).expect("write");
}

fn set(path: &Path, at: usize, with: &[u8]) {
    let mut bytes = fs::read(path).expect("read");
    bytes[at..at + with.len()].copy_from_slice(with);
    fs::write(path, &bytes).expect("write");
}

fn get(s: &EmbeddedStore, k: &str) -> Option<Vec<u8>> {
    s.get_blob(&EV, BlobKey::new(E, k)).expect("get")
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

#[test]
fn a_blob_whose_header_crc_alone_is_damaged_is_salvaged_checked_and_repaired() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    let clean = fs::read(&log).expect("read");
    flip(&log, rec_off(2), 4); // the header CRC field of record 2, nothing else
    let damaged = fs::read(&log).expect("read");
    let before = snapshot(dir.path());

    // A reader: every blob byte for byte, the salvaged one named, nothing changed on disk.
    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    for i in 0..N {
        assert!(get(&s, &key(i)) == Some(value(i)), "blob {i}");
    }
    let damage = s.damage(E, E + 1).expect("damage");
    assert_eq!(damage.len(), 1, "{damage:#?}");
    let d = &damage[0];
    assert_eq!(d.kind, DamageKind::Salvaged, "{d}");
    assert_eq!((d.offset, d.len), (rec_off(2) as u64, names_end(2) as u64));
    assert!(d.location.ends_with("blobs.log"), "{d}");
    assert!(d.what.contains(&key(2)), "the warning names the blob: {d}");
    assert!(d.what.contains("SHA-1"), "{d}");
    let stats = s.damage_stats();
    assert_eq!(stats.salvaged_records, 1, "{stats:?}");
    assert_eq!(
        (stats.damaged_ranges, stats.torn_tails),
        (0, 0),
        "{stats:?}"
    );
    let report = s.check().expect("check");
    assert_eq!(report.blobs, u64::from(N), "nothing lost");
    let kinds: Vec<DamageKind> = report.damage.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, vec![DamageKind::Salvaged], "{:#?}", report.damage);
    drop(s);
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a reader changed the directory"
    );

    // A writer reads it too, cuts nothing, and appends after it.
    let s = EmbeddedStore::open(dir.path()).expect("open");
    assert!(get(&s, &key(2)) == Some(value(2)));
    assert_eq!(
        fs::read(&log).expect("read"),
        damaged,
        "the writer changed blobs.log"
    );
    assert_eq!(s.recovery_stats().torn_tails, 0);
    s.put_blob(&EV, BlobKey::new(E, &key(9)), &value(9))
        .expect("put");
    drop(s);
    let s = EmbeddedStore::open(dir.path()).expect("reopen");
    assert!(get(&s, &key(2)) == Some(value(2)));
    assert!(get(&s, &key(9)) == Some(value(9)));
    assert_eq!(
        s.damage(E, E + 1).expect("damage").len(),
        1,
        "still reported"
    );
    drop(s);
    let damaged = fs::read(&log).expect("read");

    // The repair keeps it with a valid header: the log is the clean one again.
    let repaired = EmbeddedStore::repair(dir.path()).expect("repair");
    assert_eq!(repaired.replaced.len(), 1, "{repaired:?}");
    assert_eq!(repaired.headers_rewritten, 1, "{repaired:?}");
    assert_eq!(repaired.blobs_kept, u64::from(N) + 1, "{repaired:?}");
    assert_eq!(
        (repaired.bad_values_dropped, repaired.bytes_left_out),
        (0, 0),
        "{repaired:?}"
    );
    let (_, aside) = &repaired.replaced[0];
    assert_eq!(fs::read(aside).expect("kept"), damaged, "original kept");
    let mut want = clean.clone();
    want.extend_from_slice(&damaged[clean.len()..]);
    assert_eq!(
        fs::read(&log).expect("read"),
        want,
        "header rewritten, nothing else"
    );

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
    assert!(s.damage(E, E + 1).expect("damage").is_empty(), "no warning");
    assert_eq!(s.damage_stats(), Default::default());
    let report = s.check().expect("check");
    assert!(report.damage.is_empty(), "{:#?}", report.damage);
    assert_eq!(report.blobs, u64::from(N) + 1);
    for i in 0..N {
        assert!(get(&s, &key(i)) == Some(value(i)), "blob {i}");
    }
    drop(s);
    let again = EmbeddedStore::repair(dir.path()).expect("repair");
    assert!(again.replaced.is_empty(), "{again:?}");
}

#[test]
fn a_salvaged_last_record_is_not_taken_for_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    flip(&log, rec_off(N - 1) + 1, 2); // inside the CRC field of the last record
    let len = fs::metadata(&log).expect("meta").len();

    let s = EmbeddedStore::open(dir.path()).expect("open");
    assert!(get(&s, &key(N - 1)) == Some(value(N - 1)));
    assert_eq!(fs::metadata(&log).expect("meta").len(), len, "nothing cut");
    assert_eq!(s.recovery_stats().torn_tails, 0);
    let damage = s.damage(E, E + 1).expect("damage");
    let kinds: Vec<DamageKind> = damage.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, vec![DamageKind::Salvaged], "{damage:#?}");
    assert!(damage[0].what.contains(&key(N - 1)), "{}", damage[0]);
}

#[test]
fn a_record_whose_header_crc_and_value_are_both_damaged_is_skipped_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    flip(&log, rec_off(2), 4); // header CRC of record 2
                               // And a byte of its value.
    flip(&log, rec_off(2) + names_end(2) + 500, 1);
    // The last record too: with nothing valid after it, it is the torn tail (as before).
    flip(&log, rec_off(N - 1), 4);
    flip(&log, rec_off(N - 1) + names_end(N - 1) + 7, 1);
    let before = snapshot(dir.path());

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    for i in [0u32, 1, 3] {
        assert!(get(&s, &key(i)) == Some(value(i)), "blob {i}");
    }
    assert_eq!(get(&s, &key(2)), None, "lost");
    assert_eq!(get(&s, &key(N - 1)), None, "lost");
    let damage = s.damage(E, E + 1).expect("damage");
    let found: Vec<(DamageKind, u64, u64)> =
        damage.iter().map(|d| (d.kind, d.offset, d.len)).collect();
    assert_eq!(
        found,
        vec![
            (DamageKind::Skipped, rec_off(2) as u64, rec_len(2) as u64),
            (
                DamageKind::TornTail,
                rec_off(N - 1) as u64,
                rec_len(N - 1) as u64
            ),
        ],
        "{damage:#?}"
    );
    assert!(damage[0].what.contains("lost"), "{}", damage[0]);
    assert_eq!(s.damage_stats().salvaged_records, 0);
    assert_eq!(s.damage_stats().damaged_ranges, 1);
    let report = s.check().expect("check");
    assert_eq!(report.blobs, 3);
    assert!(
        report.damage.iter().all(|d| d.kind != DamageKind::Salvaged),
        "{:#?}",
        report.damage
    );
    drop(s);
    assert_eq!(snapshot(dir.path()), before);

    let repaired = EmbeddedStore::repair(dir.path()).expect("repair");
    assert_eq!((repaired.blobs_kept, repaired.headers_rewritten), (3, 0));
    let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
    assert!(s.damage(E, E + 1).expect("damage").is_empty());
    assert_eq!(get(&s, &key(2)), None);
    assert!(get(&s, &key(3)) == Some(value(3)));
}

#[test]
fn a_damaged_header_whose_identity_is_not_proven_is_not_salvaged() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    // Record 1: its epoch field (the key says another second). Record 3: its namespace.
    flip(&log, rec_off(1) + 8, 4);
    flip(&log, rec_off(3) + 24, 1);

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(get(&s, &key(1)), None);
    assert_eq!(get(&s, &key(3)), None);
    for i in [0u32, 2, 4] {
        assert!(get(&s, &key(i)) == Some(value(i)), "blob {i}");
    }
    let damage = s.damage(E, E + 1).expect("damage");
    let found: Vec<(DamageKind, u64)> = damage.iter().map(|d| (d.kind, d.offset)).collect();
    assert_eq!(
        found,
        vec![
            (DamageKind::Skipped, rec_off(1) as u64),
            (DamageKind::Skipped, rec_off(3) as u64)
        ],
        "{damage:#?}"
    );
}

/// A salvaged record never takes the place of a valid record of the same key (write-once: a
/// second record of a key can only be damage, e.g. a flipped digit in a key).
#[test]
fn a_salvaged_record_never_shadows_a_valid_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), 3);
    let other = tempfile::tempdir().expect("tempdir");
    {
        let s = EmbeddedStore::open(other.path()).expect("open");
        let alt = sluice_blob::with_trailer(b"another blob under the key of blob 1");
        s.put_blob(&EV, BlobKey::new(E, &key(1)), &alt)
            .expect("put");
        s.put_blob(&EV, BlobKey::new(E, &key(8)), &value(8))
            .expect("put");
    }
    let log = blobs_log(dir.path());
    let mut bytes = fs::read(&log).expect("read");
    let dup_at = bytes.len();
    bytes.extend_from_slice(&fs::read(blobs_log(other.path())).expect("read"));
    fs::write(&log, &bytes).expect("write");
    flip(&log, dup_at, 4); // the duplicate is proven by its SHA-1, but key(1) is held

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    assert!(get(&s, &key(1)) == Some(value(1)), "the valid record wins");
    assert!(get(&s, &key(8)) == Some(value(8)));
    let damage = s.damage(E, E + 1).expect("damage");
    let found: Vec<(DamageKind, u64)> = damage.iter().map(|d| (d.kind, d.offset)).collect();
    assert_eq!(
        found,
        vec![(DamageKind::Skipped, dup_at as u64)],
        "{damage:#?}"
    );
    drop(s);
    let repaired = EmbeddedStore::repair(dir.path()).expect("repair");
    assert_eq!((repaired.blobs_kept, repaired.headers_rewritten), (4, 0));
    let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
    assert!(get(&s, &key(1)) == Some(value(1)));
    assert!(get(&s, &key(8)) == Some(value(8)));
}

#[test]
fn a_salvageable_record_after_other_damage_is_found_by_the_resynchronisation() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    flip(&log, rec_off(1) + 4, 4); // kind and lengths of record 1: lost
    flip(&log, rec_off(2), 4); // only the CRC of record 2, right after it

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    assert_eq!(get(&s, &key(1)), None);
    for i in [0u32, 2, 3, 4] {
        assert!(get(&s, &key(i)) == Some(value(i)), "blob {i}");
    }
    let damage = s.damage(E, E + 1).expect("damage");
    let found: Vec<(DamageKind, u64, u64)> =
        damage.iter().map(|d| (d.kind, d.offset, d.len)).collect();
    assert_eq!(
        found,
        vec![
            (DamageKind::Skipped, rec_off(1) as u64, rec_len(1) as u64),
            (DamageKind::Salvaged, rec_off(2) as u64, names_end(2) as u64),
        ],
        "{damage:#?}"
    );
}

/// Headers whose CRC fails and whose lengths are garbage, in the middle and at the end: loads,
/// checks and repairs return (no panic, no huge allocation), the other blobs are read.
#[test]
fn garbage_header_lengths_never_panic() {
    let write_len = |v: u32| -> Vec<u8> { v.to_le_bytes().to_vec() };
    let cases: Vec<(&str, usize, Vec<u8>)> = vec![
        ("value_len u32::MAX", 16, write_len(u32::MAX)),
        ("value_len 256 MiB", 16, write_len(256 << 20)),
        ("value_len 256 MiB + 1", 16, write_len((256 << 20) + 1)),
        ("value_len 0", 16, write_len(0)),
        ("value_len 19 (< trailer)", 16, write_len(19)),
        ("value_len into the next record", 16, write_len(10_100)),
        ("ns_len 255, key_len 65535", 5, vec![255, 255, 255]),
        ("ns_len 0, key_len 0", 5, vec![0, 0, 0]),
        ("key_len 1024", 6, 1024u16.to_le_bytes().to_vec()),
        ("all ones", 0, vec![0xff; 24]),
        ("all zeros", 0, vec![0; 24]),
    ];
    for (what, field, bytes) in cases {
        for victim in [2, N - 1] {
            let dir = tempfile::tempdir().expect("tempdir");
            write_blobs(dir.path(), N);
            let log = blobs_log(dir.path());
            set(&log, rec_off(victim) + field, &bytes);
            flip(&log, rec_off(victim), 1); // the CRC fails whatever the bytes set
            let ctx = format!("{what}, record {victim}");
            {
                let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
                for i in (0..N).filter(|i| *i != victim) {
                    assert!(get(&s, &key(i)) == Some(value(i)), "{ctx}: blob {i}");
                }
                assert_eq!(get(&s, &key(victim)), None, "{ctx}");
                assert!(!s.damage(E, E + 1).expect("damage").is_empty(), "{ctx}");
                assert_eq!(s.check().expect("check").blobs, u64::from(N - 1), "{ctx}");
            }
            {
                let s = EmbeddedStore::open(dir.path()).expect("open");
                assert!(get(&s, &key(0)) == Some(value(0)), "{ctx}");
            }
            let repaired = EmbeddedStore::repair(dir.path()).expect("repair");
            assert_eq!(repaired.headers_rewritten, 0, "{ctx}");
            let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
            assert!(get(&s, &key(0)) == Some(value(0)), "{ctx}");
        }
    }
}

/// The value-CRC field is covered by the header CRC too: damage there alone is salvaged (the
/// SHA-1 proves the value), and reads check the CRC-32 computed from the proven value.
#[test]
fn a_damaged_value_crc_field_alone_is_salvaged() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    flip(&log, rec_off(3) + 20, 4);

    let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
    for i in 0..N {
        assert!(get(&s, &key(i)) == Some(value(i)), "blob {i}");
    }
    let kinds: Vec<DamageKind> = s
        .damage(E, E + 1)
        .expect("damage")
        .iter()
        .map(|d| d.kind)
        .collect();
    assert_eq!(kinds, vec![DamageKind::Salvaged]);
    assert!(s
        .check()
        .expect("check")
        .damage
        .iter()
        .all(|d| d.kind == DamageKind::Salvaged));
    drop(s);
    assert_eq!(
        EmbeddedStore::repair(dir.path())
            .expect("repair")
            .headers_rewritten,
        1
    );
    let s = EmbeddedStore::open_read_only(dir.path()).expect("open");
    assert!(s.check().expect("check").damage.is_empty());
    assert!(get(&s, &key(3)) == Some(value(3)));
}

/// A torn write after a salvageable last record: the record's lengths lead to the end of the
/// durable data (only the torn tail follows), so it is salvaged and only the tail is cut.
#[test]
fn a_salvaged_record_before_a_torn_tail_is_kept_and_only_the_tail_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_blobs(dir.path(), N);
    let log = blobs_log(dir.path());
    flip(&log, rec_off(N - 1), 4);
    let durable = fs::metadata(&log).expect("meta").len();
    // Half of another record, as a crash mid-append leaves it.
    let mut bytes = fs::read(&log).expect("read");
    let half = bytes[rec_off(1)..rec_off(1) + rec_len(1) / 2].to_vec();
    bytes.extend_from_slice(&half);
    fs::write(&log, &bytes).expect("write");

    {
        let s = EmbeddedStore::open_read_only(dir.path()).expect("open read-only");
        assert!(get(&s, &key(N - 1)) == Some(value(N - 1)));
        let damage = s.damage(E, E + 1).expect("damage");
        let found: Vec<(DamageKind, u64)> = damage.iter().map(|d| (d.kind, d.offset)).collect();
        assert_eq!(
            found,
            vec![
                (DamageKind::Salvaged, rec_off(N - 1) as u64),
                (DamageKind::TornTail, durable)
            ],
            "{damage:#?}"
        );
    }
    let s = EmbeddedStore::open(dir.path()).expect("open");
    assert!(get(&s, &key(N - 1)) == Some(value(N - 1)));
    assert_eq!(
        fs::metadata(&log).expect("meta").len(),
        durable,
        "only the tail cut"
    );
    assert_eq!(s.recovery_stats().torn_tails, 1);
    let kinds: Vec<DamageKind> = s
        .damage(E, E + 1)
        .expect("damage")
        .iter()
        .map(|d| d.kind)
        .collect();
    assert_eq!(kinds, vec![DamageKind::Salvaged]);
}
