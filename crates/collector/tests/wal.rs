//! The write-ahead log: round trip, rotation, checkpoints, torn tails, corruption, group commit,
//! replay through the ingest/aggregate path, and a real SIGKILL.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sluice_collector::aggregate::{Aggregator, AggregatorConfig};
use sluice_collector::wal::{
    FsyncPolicy, RecordKind, Wal, WalConfig, WalError, WalRecord, HEADER_LEN,
};
use sluice_collector::{IngestConfig, Ingestor};
use sluice_store::{EmbeddedStore, InMemoryStore, Store};

mod common;
#[path = "common/tmpfs.rs"]
mod tmpfs;
use common::{read_back, E0};
use sluice_test_support::{temp_dir, TempDir};
use tmpfs::{fill, is_root, Tmpfs};

fn cfg(fsync: FsyncPolicy, segment_size: u64) -> WalConfig {
    WalConfig {
        fsync,
        segment_size,
    }
}

/// A payload determined by `n`, of varying length (0 to a few hundred bytes).
fn payload(n: u64) -> Vec<u8> {
    if matches!(n % 17, 0) {
        return Vec::new();
    }
    format!(
        "{{\"type\":\"K\",\"n\":{n},\"pad\":\"{}\"}}",
        "x".repeat((n * 37 % 300) as usize)
    )
    .into_bytes()
}

fn append_n(wal: &Wal, from: u64, to: u64) {
    for n in from..=to {
        assert_eq!(wal.append(&payload(n), E0 + n as i64).unwrap(), n);
    }
}

fn check_records(records: &[WalRecord], from: u64, to: u64) {
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (from..=to).collect::<Vec<_>>());
    for r in records {
        assert_eq!(r.payload, payload(r.seq), "seq {}", r.seq);
        assert_eq!(r.now, E0 + r.seq as i64);
    }
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[test]
fn append_and_replay_round_trip() {
    for policy in [
        FsyncPolicy::Always,
        FsyncPolicy::Never,
        FsyncPolicy::Batch {
            max_delay: Duration::from_millis(5),
        },
    ] {
        let dir = temp_dir(&format!("round-trip-{policy:?}").replace([' ', '{', '}', ':'], ""));
        let (wal, replay) = Wal::open(&dir, cfg(policy, 64 << 20)).unwrap();
        assert!(replay.is_empty());
        assert_eq!(wal.last_seq(), 0);
        append_n(&wal, 1, 100);
        wal.wait_durable(100).unwrap();
        assert!(matches!(
            wal.wait_durable(101),
            Err(WalError::BadSeq {
                seq: 101,
                last: 100
            })
        ));
        drop(wal);
        let (wal, replay) = Wal::open(&dir, cfg(policy, 64 << 20)).unwrap();
        check_records(&replay, 1, 100);
        // Numbering continues after a restart.
        append_n(&wal, 101, 110);
        drop(wal);
        let (_wal, replay) = Wal::open(&dir, cfg(policy, 64 << 20)).unwrap();
        check_records(&replay, 1, 110);
    }
}

#[test]
fn rotation_across_segments() {
    let dir = temp_dir("rotation");
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Never, 1000)).unwrap();
    append_n(&wal, 1, 200);
    let segs = wal.segments();
    assert!(segs.len() > 10, "{}", segs.len());
    assert_eq!(files(&dir, "wal-"), segs);
    // Each segment is named after its first record and holds at least segment_size bytes (but
    // the last).
    for s in &segs[..segs.len() - 1] {
        assert!(std::fs::metadata(s).unwrap().len() >= 1000);
    }
    drop(wal);
    let (wal, replay) = Wal::open(&dir, cfg(FsyncPolicy::Always, 1000)).unwrap();
    check_records(&replay, 1, 200);
    // Segments follow each other: each is named after its first record.
    let mut expect_first = 1;
    for s in &segs {
        assert_eq!(
            s.file_name().unwrap().to_str().unwrap(),
            format!("wal-{expect_first:020}.log")
        );
        expect_first += record_offsets(&std::fs::read(s).unwrap()).len() as u64;
    }
    assert_eq!(expect_first, 201);
    append_n(&wal, 201, 210);
    drop(wal);
    check_records(
        &Wal::open(&dir, cfg(FsyncPolicy::Always, 1000)).unwrap().1,
        1,
        210,
    );
}

#[test]
fn checkpoint_deletes_old_segments_and_limits_replay() {
    let dir = temp_dir("checkpoint");
    let c = cfg(FsyncPolicy::Always, 1000);
    let (wal, _) = Wal::open(&dir, c.clone()).unwrap();
    append_n(&wal, 1, 200);
    let before = wal.segments();
    assert!(matches!(wal.checkpoint(201), Err(WalError::BadSeq { .. })));
    wal.checkpoint(120).unwrap();
    assert_eq!(wal.checkpointed(), 120);
    let after = wal.segments();
    assert!(after.len() < before.len());
    assert_eq!(files(&dir, "wal-"), after);
    // The first kept segment still holds record 121; every deleted one held only records ≤ 120.
    let first_kept: u64 = after[0].file_name().unwrap().to_str().unwrap()[4..24]
        .parse()
        .unwrap();
    assert!(first_kept <= 121);
    let deleted = before.len() - after.len();
    let next_after_deleted: u64 = before[deleted].file_name().unwrap().to_str().unwrap()[4..24]
        .parse()
        .unwrap();
    assert!(next_after_deleted <= 121);
    // A lower checkpoint later is a no-op.
    wal.checkpoint(50).unwrap();
    assert_eq!(wal.checkpointed(), 120);
    assert_eq!(files(&dir, "checkpoint"), vec![dir.join("checkpoint")]);
    drop(wal);

    let (wal, replay) = Wal::open(&dir, c.clone()).unwrap();
    check_records(&replay, 121, 200);
    assert_eq!(wal.checkpointed(), 120);
    // Checkpoint everything: nothing to replay, numbering continues.
    wal.checkpoint(200).unwrap();
    assert_eq!(wal.segments().len(), 1);
    drop(wal);
    let (wal, replay) = Wal::open(&dir, c.clone()).unwrap();
    assert!(replay.is_empty());
    assert_eq!(wal.append(b"x", E0).unwrap(), 201);
    // Even when every segment file is gone, the checkpoint keeps the numbering.
    drop(wal);
    for f in files(&dir, "wal-") {
        std::fs::remove_file(f).unwrap();
    }
    let (wal, replay) = Wal::open(&dir, c).unwrap();
    assert!(replay.is_empty());
    assert_eq!(wal.append(b"y", E0).unwrap(), 201);
}

/// Offsets of the records in a segment.
/// A fresh WAL in `dir` (one segment, fsync always) holding records `1..=n`; its segment.
fn written_segment(dir: &Path, n: u64) -> PathBuf {
    let (wal, _) = Wal::open(dir, cfg(FsyncPolicy::Always, 1 << 20)).unwrap();
    append_n(&wal, 1, n);
    drop(wal);
    files(dir, "wal-").pop().unwrap()
}

fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    let mut off = 0;
    while off < bytes.len() {
        v.push(off);
        off += HEADER_LEN + u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
    }
    assert_eq!(off, bytes.len());
    v
}

#[test]
fn torn_tail_is_truncated_at_every_offset() {
    let src = temp_dir("torn-src");
    let (wal, _) = Wal::open(&src, cfg(FsyncPolicy::Always, 1 << 20)).unwrap();
    append_n(&wal, 1, 3);
    drop(wal);
    let seg = files(&src, "wal-").pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let offs = record_offsets(&bytes);
    let last_start = offs[2];
    assert!(bytes.len() - last_start > HEADER_LEN + 10);
    let dir = temp_dir("torn");
    for cut in last_start..bytes.len() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(seg.file_name().unwrap()), &bytes[..cut]).unwrap();
        let (wal, replay) = Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20)).unwrap();
        check_records(&replay, 1, 2);
        // The tail is gone from disk and appending continues cleanly.
        assert_eq!(
            std::fs::metadata(dir.join(seg.file_name().unwrap()))
                .unwrap()
                .len(),
            last_start as u64
        );
        assert_eq!(wal.append(&payload(3), E0 + 3).unwrap(), 3);
        drop(wal);
        check_records(
            &Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20))
                .unwrap()
                .1,
            1,
            3,
        );
    }
    // A damaged final record (bad CRC) and a tail of zeros are torn tails too.
    for damage in ["flip-last", "zeros"] {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = bytes.clone();
        match damage {
            "flip-last" => *b.last_mut().unwrap() ^= 0x40,
            _ => b.extend_from_slice(&[0u8; 4096]),
        }
        std::fs::write(dir.join(seg.file_name().unwrap()), &b).unwrap();
        let replay = Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20))
            .unwrap()
            .1;
        check_records(&replay, 1, if damage == "zeros" { 3 } else { 2 });
    }
}

#[test]
fn corrupted_middle_record_is_a_typed_error() {
    let dir = temp_dir("corrupt");
    let seg = written_segment(&dir, 5);
    let good = std::fs::read(&seg).unwrap();
    let offs = record_offsets(&good);
    // A flipped payload byte, a flipped length, a flipped sequence number in record 2 (of 5).
    for at in [offs[2] + HEADER_LEN + 3, offs[2] + 8, offs[2] + 1] {
        let mut b = good.clone();
        b[at] ^= 0x01;
        std::fs::write(&seg, &b).unwrap();
        match Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20)) {
            Err(WalError::Corrupted { segment, offset }) => {
                assert_eq!(segment, seg);
                assert_eq!(offset, offs[2] as u64, "byte {at}");
            }
            other => panic!("byte {at}: {:?}", other.map(|(_, r)| r.len())),
        }
        // Nothing was truncated.
        assert_eq!(std::fs::read(&seg).unwrap(), b);
    }
    std::fs::write(&seg, &good).unwrap();
    check_records(
        &Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20))
            .unwrap()
            .1,
        1,
        5,
    );

    // A cut-short segment that is not the last one is corruption, not a torn tail.
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap();
    append_n(&wal, 6, 40);
    drop(wal);
    let segs = files(&dir, "wal-");
    assert!(segs.len() >= 3);
    let mid = &segs[1];
    let len = std::fs::metadata(mid).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(mid)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let err = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap_err();
    assert!(
        matches!(&err, WalError::Corrupted { segment, .. } if segment == mid),
        "{err}"
    );
    // A missing segment (not checkpointed) is reported, not skipped.
    std::fs::remove_file(mid).unwrap();
    let err = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap_err();
    assert!(
        matches!(&err, WalError::Corrupted { segment, offset: 0 } if segment == &segs[2]),
        "{err}"
    );
    std::fs::remove_file(&segs[0]).unwrap();
    let err = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap_err();
    assert!(
        matches!(&err, WalError::Corrupted { segment, offset: 0 } if segment == &segs[2]),
        "{err}"
    );
}

#[test]
fn bad_checkpoint_warns_and_replays_every_record_present() {
    let dir = temp_dir("bad-checkpoint");
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap();
    append_n(&wal, 1, 3);
    wal.checkpoint(2).unwrap();
    drop(wal);
    let mut cp = std::fs::read(dir.join("checkpoint")).unwrap();
    cp[0] ^= 1;
    std::fs::write(dir.join("checkpoint"), cp).unwrap();
    let (wal, records, report) =
        Wal::open_with(&dir, cfg(FsyncPolicy::Always, 300), false).unwrap();
    // The checkpoint is unknown: every record present comes back (done notes among them keep
    // the replay exactly once), and the start says so.
    check_records(&records, 1, 3);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("checkpoint") && w.contains("replaying every record")),
        "{report:?}"
    );
    assert_eq!(wal.append(&payload(4), E0 + 4).unwrap(), 4);
    wal.checkpoint(4).unwrap();
    drop(wal);
    assert!(Wal::open(&dir, cfg(FsyncPolicy::Always, 300))
        .unwrap()
        .1
        .is_empty());
}

#[test]
fn damaged_segment_behind_the_checkpoint_warns_and_opens() {
    let dir = temp_dir("behind");
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap();
    append_n(&wal, 1, 30);
    let segs = wal.segments();
    assert!(segs.len() >= 3);
    drop(wal);
    // Checkpoint past the first two segments but leave them on disk (as a failed delete would).
    let saved: Vec<Vec<u8>> = segs[..2]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let third_first: u64 = segs[2].file_name().unwrap().to_str().unwrap()[4..24]
        .parse()
        .unwrap();
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Always, 300)).unwrap();
    wal.checkpoint(third_first - 1).unwrap();
    drop(wal);
    for (p, b) in segs[..2].iter().zip(&saved) {
        let mut b = b.clone();
        b[HEADER_LEN + 2] ^= 0xff; // garbage in its first record
        std::fs::write(p, b).unwrap();
    }
    let (_wal, records, report) =
        Wal::open_with(&dir, cfg(FsyncPolicy::Always, 300), false).unwrap();
    check_records(&records, third_first, 30);
    assert_eq!(
        report
            .warnings
            .iter()
            .filter(|w| w.contains("wholly behind the checkpoint"))
            .count(),
        2,
        "{report:?}"
    );
}

#[test]
fn garbage_last_segment_is_an_error_and_salvage_sets_it_aside() {
    let dir = temp_dir("garbage-last");
    let seg = written_segment(&dir, 10);
    let good = std::fs::read(&seg).unwrap();
    let offs = record_offsets(&good);
    // Garbage over records 4.. (not a torn write: its header names no expected record).
    let mut bad = good.clone();
    for (i, b) in bad[offs[3]..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(151).wrapping_add(7);
    }
    std::fs::write(&seg, &bad).unwrap();
    match Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20)) {
        Err(WalError::Corrupted { segment, offset }) => {
            assert_eq!((segment, offset), (seg.clone(), offs[3] as u64))
        }
        other => panic!("{:?}", other.map(|(_, r)| r.len())),
    }
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bad,
        "nothing cut without salvage"
    );
    // A whole segment of garbage too.
    let garbage: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&seg, &garbage).unwrap();
    assert!(matches!(
        Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20)),
        Err(WalError::Corrupted { offset: 0, .. })
    ));
    // Salvage: copied aside byte for byte, the valid prefix replayed, the start says what it cut.
    std::fs::write(&seg, &bad).unwrap();
    let (wal, records, report) =
        Wal::open_with(&dir, cfg(FsyncPolicy::Always, 1 << 20), true).unwrap();
    check_records(&records, 1, 3);
    assert_eq!(report.set_aside.len(), 1, "{report:?}");
    assert_eq!(std::fs::read(&report.set_aside[0]).unwrap(), bad);
    assert!(report.set_aside[0].starts_with(dir.join("damaged")));
    assert!(
        report.warnings.iter().any(|w| w.contains("salvage")),
        "{report:?}"
    );
    assert_eq!(wal.append(&payload(4), E0 + 4).unwrap(), 4);
    drop(wal);
    check_records(
        &Wal::open(&dir, cfg(FsyncPolicy::Always, 1 << 20))
            .unwrap()
            .1,
        1,
        4,
    );
}

#[test]
fn torn_tail_is_reported() {
    let dir = temp_dir("torn-report");
    let seg = written_segment(&dir, 3);
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let (_wal, records, report) =
        Wal::open_with(&dir, cfg(FsyncPolicy::Always, 1 << 20), false).unwrap();
    check_records(&records, 1, 2);
    assert!(
        report.warnings.iter().any(|w| w.contains("torn tail")),
        "{report:?}"
    );
}

#[test]
fn full_disk_refuses_appends_then_recovers_without_reopen() {
    if !is_root() {
        println!("SKIPPED: needs root (mounts a tmpfs)");
        return;
    }
    // The tmpfs is unmounted before its mount point is removed (drops in reverse order).
    let mount_point = temp_dir("full");
    let fs = Tmpfs::mount(mount_point.to_path_buf(), 4);
    let dir = fs.0.join("wal");
    for policy in [
        FsyncPolicy::Always,
        FsyncPolicy::Batch {
            max_delay: Duration::from_millis(2),
        },
    ] {
        let _ = std::fs::remove_dir_all(&dir);
        let (wal, _) = Wal::open(&dir, cfg(policy, 64 << 10)).unwrap();
        append_n(&wal, 1, 20);
        let filler = fill(&fs.0, 0);
        // Full: appends fail (each one, not forever), the log says why.
        let mut refused = 0;
        for n in 21..200 {
            match wal.append(&payload(n), E0 + n as i64) {
                Ok(seq) => {
                    assert_eq!(seq, n);
                    wal.wait_durable(seq).unwrap();
                }
                Err(e) => {
                    assert!(e.to_string().contains("No space left"), "{e}");
                    refused += 1;
                    break;
                }
            }
        }
        assert_eq!(refused, 1, "the disk filled up");
        assert!(wal.failing().is_some());
        let next = wal.last_seq() + 1;
        assert!(wal.append(&payload(next), E0 + next as i64).is_err());
        std::fs::remove_file(&filler).unwrap();
        // Space again: the same log takes appends, the numbering carries on. The freed space
        // may take a moment to come back: a child forked by another test thread holds a copy
        // of the filler's descriptor until it execs (this failed a CI run once).
        let last = next + 50;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match wal.append(&payload(next), E0 + next as i64) {
                Ok(seq) => {
                    assert_eq!(seq, next);
                    break;
                }
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "no appends 10 s after space came back: {e}"
                ),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        append_n(&wal, next + 1, last);
        wal.wait_durable(last).unwrap();
        assert!(wal.failing().is_none());
        drop(wal);
        check_records(&Wal::open(&dir, cfg(policy, 64 << 10)).unwrap().1, 1, last);
    }
}

#[test]
fn batch_policy_group_commits() {
    let dir = temp_dir("batch");
    // A long max_delay: only explicit waits fsync here.
    let (wal, _) = Wal::open(
        &dir,
        cfg(
            FsyncPolicy::Batch {
                max_delay: Duration::from_secs(3600),
            },
            1 << 20,
        ),
    )
    .unwrap();
    let wal = Arc::new(wal);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let seq = wal
                        .append(
                            format!("{{\"type\":\"T\",\"t\":{t},\"i\":{i}}}").as_bytes(),
                            E0,
                        )
                        .unwrap();
                    wal.wait_durable(seq).unwrap();
                    assert!(wal.durable_seq() >= seq);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(wal.last_seq(), 400);
    assert_eq!(wal.durable_seq(), 400);
    assert!(wal.fsyncs() <= 400, "{}", wal.fsyncs());
    eprintln!("batch: 400 appends, {} fsyncs", wal.fsyncs());
    // Appends alone are not fsynced under a long max_delay; sync() does it.
    let seq = wal.append(b"x", E0).unwrap();
    assert_eq!(wal.durable_seq(), 400);
    assert_eq!(wal.sync().unwrap(), seq);
    assert_eq!(wal.durable_seq(), seq);
    drop(wal);

    // The background thread fsyncs within about max_delay.
    let (wal, replay) = Wal::open(
        &dir,
        cfg(
            FsyncPolicy::Batch {
                max_delay: Duration::from_millis(20),
            },
            1 << 20,
        ),
    )
    .unwrap();
    assert_eq!(replay.len(), 401);
    let seq = wal.append(b"y", E0).unwrap();
    let start = std::time::Instant::now();
    while wal.durable_seq() < seq {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "background fsync never came"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(wal);
    // Never: wait_durable returns at once, sync() still fsyncs.
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Never, 1 << 20)).unwrap();
    let seq = wal.append(b"z", E0).unwrap();
    wal.wait_durable(seq).unwrap();
    assert!(wal.durable_seq() < seq);
    wal.sync().unwrap();
    assert_eq!(wal.durable_seq(), seq);
    drop(wal);
}

/// Payloads of second `t`: several NDJSON payloads, each with events of that epoch only.
fn second_payloads(t: i64) -> Vec<Vec<u8>> {
    (0..5)
        .map(|p| {
            (0..4)
                .map(|i| format!("{{\"epoch\":{t},\"type\":\"T{}\",\"subtype\":\"s{}\",\"p\":{p},\"i\":{i}}}\n", i % 3, p % 2))
                .collect::<String>()
                .into_bytes()
        })
        .collect()
}

/// The collector loop for seconds `[from, to)`: ingest, log, aggregate, flush, checkpoint.
fn run_seconds(
    wal: &Wal,
    ing: &mut Ingestor,
    agg: &mut Aggregator,
    from: i64,
    to: i64,
    expected: &mut BTreeMap<String, usize>,
) {
    for t in from..to {
        for p in second_payloads(t) {
            let out = ing.ingest(&p, t);
            assert!(out.is_clean());
            for e in &out.events {
                *expected
                    .entry(sereal::json::to_json_value(&e.event.to_value().unwrap()).to_string())
                    .or_insert(0) += 1;
            }
            let seq = wal.append(&p, t).unwrap();
            agg.add_logged(out.events, t, seq);
        }
        let r = agg.flush_due(t);
        assert!(r.is_ok(), "{:?}", r.errors);
        wal.checkpoint(agg.min_pending_seq().map_or(wal.last_seq(), |s| s - 1))
            .unwrap();
    }
}

fn replay(records: &[WalRecord], ing: &mut Ingestor, agg: &mut Aggregator) {
    for r in records {
        agg.add_logged(ing.ingest(&r.payload, r.now).events, r.now, r.seq);
    }
}

#[test]
fn crash_and_replay_stores_every_event_exactly_once() {
    let dir = temp_dir("e2e");
    let (wal_dir, store_dir) = (dir.join("wal"), dir.join("store"));
    let wcfg = cfg(FsyncPolicy::Always, 2000);
    let mut expected = BTreeMap::new();
    {
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&store_dir).unwrap());
        let (wal, replayed) = Wal::open(&wal_dir, wcfg.clone()).unwrap();
        assert!(replayed.is_empty());
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let mut agg = Aggregator::new(AggregatorConfig::default(), store).unwrap();
        run_seconds(&wal, &mut ing, &mut agg, E0, E0 + 8, &mut expected);
        // Seconds E0+6 and E0+7 are still in their grace period: 10 payloads pending.
        assert_eq!(agg.min_pending_seq(), Some(31));
        assert_eq!(wal.checkpointed(), 30);
        assert!(agg.pending_events() > 0);
        // Crash: everything dropped without flush_all.
    }
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&store_dir).unwrap());
    let (wal, records) = Wal::open(&wal_dir, wcfg.clone()).unwrap();
    assert_eq!(records.first().map(|r| r.seq), Some(31));
    assert_eq!(records.len(), 10);
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
    replay(&records, &mut ing, &mut agg);
    run_seconds(&wal, &mut ing, &mut agg, E0 + 8, E0 + 12, &mut expected);
    let r = agg.flush_all(E0 + 12);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(agg.min_pending_seq(), None);
    wal.checkpoint(agg.min_pending_seq().map_or(wal.last_seq(), |s| s - 1))
        .unwrap();
    assert_eq!(expected.len(), 12 * 5 * 4);
    assert_eq!(read_back(&*store, E0, E0 + 20), expected);
    drop(wal);
    assert!(Wal::open(&wal_dir, wcfg).unwrap().1.is_empty());
}

/// The pipeline's protocol after a flush: done notes into the WAL, sync, then checkpoint.
fn note_and_checkpoint(wal: &Wal, agg: &mut Aggregator, now: i64) {
    for note in agg.take_done() {
        wal.append_note(&note.encode(), now).unwrap();
    }
    wal.sync().unwrap();
    wal.checkpoint(agg.min_pending_seq().map_or(wal.last_seq(), |s| s - 1))
        .unwrap();
}

/// One payload with events of epochs E0 and E0+5, logged; E0 is flushed, then a crash; then a
/// new run replays the WAL. Returns the events read back (JSON -> multiplicity).
fn span_crash_replay(name: &str, with_notes: bool) -> BTreeMap<String, usize> {
    let dir = temp_dir(name);
    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let wcfg = cfg(FsyncPolicy::Always, 1 << 20);
    let payload = format!(
        "{{\"epoch\":{E0},\"type\":\"A\"}}\n{{\"epoch\":{},\"type\":\"B\"}}\n",
        E0 + 5
    )
    .into_bytes();
    {
        let (wal, _) = Wal::open(&dir, wcfg.clone()).unwrap();
        let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
        let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
        let seq = wal.append(&payload, E0).unwrap();
        agg.add_logged(ing.ingest(&payload, E0).events, E0, seq);
        assert!(agg.flush_due(E0 + 2).is_ok()); // epoch E0 stored, E0+5 not
        assert_eq!(agg.min_pending_seq(), Some(seq));
        if with_notes {
            note_and_checkpoint(&wal, &mut agg, E0 + 2);
        } else {
            wal.checkpoint(agg.min_pending_seq().map_or(wal.last_seq(), |s| s - 1))
                .unwrap();
        }
        assert_eq!(
            wal.checkpointed(),
            0,
            "the payload is still needed for epoch E0+5"
        );
    }
    let (_wal, records) = Wal::open(&dir, wcfg).unwrap();
    assert_eq!(records.len(), if with_notes { 2 } else { 1 });
    let mut ing = Ingestor::new(IngestConfig::default()).unwrap();
    let mut agg = Aggregator::new(AggregatorConfig::default(), store.clone()).unwrap();
    let report = sluice_collector::exactly_once::replay(&records, &mut ing, &mut agg, |now| now);
    assert_eq!((report.records, report.skipped), (1, u64::from(with_notes)));
    assert!(report.bad_notes.is_empty());
    assert!(agg.flush_all(E0 + 10).is_ok());
    read_back(&*store, E0, E0 + 10)
}

#[test]
fn payload_spanning_epochs_is_replayed_exactly_once_with_done_notes() {
    let got = span_crash_replay("span-notes", true);
    assert_eq!(
        got.values().copied().collect::<Vec<_>>(),
        vec![1, 1],
        "{got:?}"
    );
}

#[test]
fn payload_spanning_epochs_without_notes_is_at_least_once() {
    // Why the notes exist: without them the stored half of the payload comes back twice.
    let got = span_crash_replay("span-plain", false);
    let mut counts: Vec<usize> = got.values().copied().collect();
    counts.sort();
    assert_eq!(counts, vec![1, 2], "{got:?}");
}

#[test]
fn notes_share_the_sequence_and_survive_reopen() {
    let dir = temp_dir("notes");
    let wcfg = cfg(FsyncPolicy::Always, 1 << 20);
    let (wal, _) = Wal::open(&dir, wcfg.clone()).unwrap();
    assert_eq!(wal.append(b"p1", E0).unwrap(), 1);
    assert_eq!(wal.append_note(b"n2", E0).unwrap(), 2);
    assert_eq!(wal.append(b"p3", E0).unwrap(), 3);
    drop(wal);
    let (wal, records) = Wal::open(&dir, wcfg.clone()).unwrap();
    let kinds: Vec<(u64, RecordKind, &[u8])> = records
        .iter()
        .map(|r| (r.seq, r.kind, &r.payload[..]))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, RecordKind::Payload, &b"p1"[..]),
            (2, RecordKind::Note, &b"n2"[..]),
            (3, RecordKind::Payload, &b"p3"[..])
        ]
    );
    drop(wal);
    // A flipped kind bit is caught by the checksum, not read as the other kind.
    let seg = files(&dir, "wal-")[0].clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    let second = HEADER_LEN + 2; // the note record starts after p1
    bytes[second + 3] ^= 0x80;
    std::fs::write(&seg, &bytes).unwrap();
    assert!(matches!(
        Wal::open(&dir, wcfg),
        Err(WalError::Corrupted { .. })
    ));
}

const CHILD_ENV: &str = "SLUICE_WAL_SIGKILL_DIR";

/// The child half of `sigkill_loses_no_acknowledged_record`: appends with `Always` and prints
/// each sequence number once `append` returned. Does nothing in a normal test run.
#[test]
fn sigkill_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (wal, _) = Wal::open(&dir, cfg(FsyncPolicy::Always, 4096)).unwrap();
    let mut out = std::io::stdout().lock();
    for _ in 0..1_000_000 {
        let n = wal.last_seq() + 1;
        let seq = wal.append(&payload(n), E0 + n as i64).unwrap();
        assert_eq!(seq, n);
        writeln!(out, "SEQ {seq}").unwrap();
        out.flush().unwrap();
    }
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn sigkill_loses_no_acknowledged_record() {
    let dir = temp_dir("sigkill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = Vec::new();
    while acked.len() < 300 {
        let line = lines.next().expect("child ended early").unwrap();
        // libtest's "test sigkill_child ... " may precede the first one on its line.
        if let Some((_, s)) = line.split_once("SEQ ") {
            acked.push(s.parse::<u64>().unwrap());
        }
    }
    child.kill().unwrap(); // SIGKILL, mid-stream
    let status = child.wait().unwrap();
    assert!(!status.success());
    // What the child printed before it died was acknowledged too.
    for line in lines {
        if let Some((_, s)) = line.unwrap().split_once("SEQ ") {
            acked.push(s.parse().unwrap());
        }
    }
    let (_wal, records) = Wal::open(&dir, cfg(FsyncPolicy::Always, 4096)).unwrap();
    assert!(files(&dir, "wal-").len() > 1, "rotation happened");
    let last = *acked.last().unwrap();
    assert_eq!(acked, (1..=last).collect::<Vec<_>>());
    assert!(
        records.len() as u64 >= last,
        "{} records, {last} acknowledged",
        records.len()
    );
    check_records(&records, 1, records.len() as u64);
    eprintln!("sigkill: {last} acknowledged, {} in the log", records.len());
}

/// An ext4 file system (no journal) on a loop device whose image lives on a small tmpfs: when
/// the tmpfs is full, writes to the page cache still succeed but writeback fails, so `fsync`
/// returns an error — and, as Linux does, the next `fsync` returns success with the data lost.
/// Torn down (unmounted, detached) on drop.
struct FailingFsync {
    backing: Tmpfs,
    loopdev: String,
    mnt: TempDir,
    /// The backing tmpfs's mount point: last, so that it is removed after the unmount.
    _backing_dir: TempDir,
}

impl FailingFsync {
    fn new(name: &str) -> Option<FailingFsync> {
        let backing_dir = temp_dir(&format!("{name}-backing"));
        let backing = Tmpfs::mount(backing_dir.to_path_buf(), 12);
        let img = backing.0.join("img");
        let mnt = temp_dir(&format!("{name}-mnt"));
        std::fs::create_dir_all(&mnt).unwrap();
        let run = |cmd: &mut Command| cmd.output().ok().filter(|o| o.status.success());
        run(Command::new("truncate").args(["-s", "64M"]).arg(&img))?;
        run(Command::new("mkfs.ext4")
            .args(["-q", "-b", "4096", "-O", "^has_journal"])
            .arg(&img))?;
        let out = run(Command::new("losetup").args(["-f", "--show"]).arg(&img))?;
        let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let fs = FailingFsync {
            backing,
            loopdev,
            mnt,
            _backing_dir: backing_dir,
        };
        fs.mount()?;
        Some(fs)
    }

    fn mount(&self) -> Option<()> {
        let ok = Command::new("mount")
            .args(["-o", "errors=continue", &self.loopdev])
            .arg(&self.mnt)
            .status()
            .ok()?;
        ok.success().then_some(())
    }

    /// Unmounts and mounts again: what is read afterwards comes from the device, not the cache.
    fn remount(&self) {
        assert!(Command::new("umount")
            .arg(&self.mnt)
            .status()
            .unwrap()
            .success());
        self.mount().expect("mount again");
    }
}

impl Drop for FailingFsync {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.loopdev]).status();
    }
}

#[test]
fn failed_fsync_relogs_to_a_fresh_segment_and_loses_no_acknowledged_record() {
    if !is_root() {
        println!("SKIPPED: needs root (tmpfs, loop device, ext4)");
        return;
    }
    let Some(fs) = FailingFsync::new("fsync") else {
        println!("SKIPPED: no loop device / mkfs.ext4 here");
        return;
    };
    let dir = fs.mnt.join("wal");
    // Records of 20 KB, 20 per segment: the records written once the backing store is full
    // start in a fresh segment, on blocks never written. (A write that begins in a block the
    // backing store already holds is cut short there, and the loop driver reports a short
    // write as success: that fsync would lie, which no log can survive.)
    let big = |n: u64| format!("{n:>20000}").into_bytes();
    let wcfg = cfg(FsyncPolicy::Always, 20 * (HEADER_LEN as u64 + 20000));
    let (wal, _) = Wal::open(&dir, wcfg.clone()).unwrap();
    for n in 1..=20 {
        assert_eq!(wal.append(&big(n), E0).unwrap(), n);
    }
    let mut acked: Vec<u64> = (1..=20).collect();
    let filler = fill(&fs.backing.0, 0);
    // The device cannot take writes: appends reach the page cache, their fsync fails, the
    // re-log to a fresh segment fails too, so they are not acknowledged.
    let mut failed = 0;
    for _ in 0..5 {
        let next = wal.last_seq() + 1;
        match wal.append(&big(next), E0) {
            Ok(seq) => acked.push(seq),
            Err(e) => {
                failed += 1;
                assert!(wal.failing().is_some(), "{e}");
            }
        }
    }
    assert!(failed > 0, "fsync never failed");
    println!(
        "after failures: last_seq {} failing {:?} segments {:?}",
        wal.last_seq(),
        wal.failing(),
        wal.segments()
    );
    std::fs::remove_file(&filler).unwrap();
    // The device takes writes again: the next append first re-logs what was not durable.
    let last = wal.last_seq() + 10;
    for n in wal.last_seq() + 1..=last {
        assert_eq!(wal.append(&big(n), E0).unwrap(), n);
        acked.push(n);
    }
    assert!(wal.failing().is_none());
    assert!(wal.segments().len() >= 2, "rolled to a fresh segment");
    drop(wal);
    // Read from the device: every acknowledged record is there, intact, the numbering has no
    // gap (records whose fsync failed come back too: written again in the fresh segment).
    fs.remount();
    let (_wal, records, report) = Wal::open_with(&dir, wcfg, false).unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>());
    for r in &records {
        assert_eq!(r.payload, big(r.seq), "record {}", r.seq);
    }
    assert!(acked.iter().all(|s| seqs.contains(s)));
    println!(
        "{failed} appends refused while fsync failed; open: {:?}",
        report.warnings
    );
}
