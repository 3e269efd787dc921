//! Retention per type and subtype on the embedded store: a partition is rewritten without the
//! groups past their own retention (blobs, index entries, counts), keeps everything else and
//! every applied counts token, survives a reopen, never loses a write that raced the rewrite,
//! and a crash at any step of the swap leaves either the old or the new partition, whole.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_store::{
    BlobKey, Counts, CountsWrite, EmbeddedOptions, EmbeddedStore, Namespace, Retention, Store,
    TypeRetention,
};

const DAY: i64 = 86_400;
/// A partition start (hour aligned) and a second inside it.
const START: i64 = 1_700_000_000 - 1_700_000_000 % 3600;
const E: i64 = START + 400;
/// The end of that partition.
const END: i64 = START + 3600;
const EV: Namespace = Namespace::Events;

/// Default 10 days, DEBUG 1 day, WEB/error 20 days: partitions live 20 days.
fn options() -> EmbeddedOptions {
    let mut types = TypeRetention::new(10 * DAY);
    types.insert("DEBUG", DAY).unwrap();
    types.insert("WEB/error", 20 * DAY).unwrap();
    EmbeddedOptions {
        retention: Retention::new(types.longest()),
        type_retention: types,
        ..EmbeddedOptions::default()
    }
}

fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open_with(dir, options()).unwrap()
}

fn substreams() -> Namespace {
    Namespace::parse("substreams/errors").unwrap()
}

/// `(type, subtype)` groups written by [`write_groups`].
const GROUPS: [(&str, &str); 4] = [("DEBUG", ""), ("WEB", "error"), ("WEB", "ok"), ("APP", "")];

fn key(epoch: i64, type_: &str, subtype: &str, chunk: u32) -> String {
    format!("{epoch}:ams:{type_}:{subtype}:{chunk}")
}

fn counts(n: u64) -> Counts {
    Counts {
        stored: n,
        ..Counts::default()
    }
}

/// One blob, index entry and counts (with a token) per group, and a substream output.
fn write_groups(s: &EmbeddedStore) {
    for (i, (t, st)) in GROUPS.iter().enumerate() {
        let k = key(E, t, st, 0);
        s.put_blob(&EV, BlobKey::new(E, &k), &vec![i as u8; 5_000])
            .unwrap();
        s.add_to_epoch_index(E, "ams", &[&format!("{t}:{st}:0")])
            .unwrap();
        s.add_counts_once(
            CountsWrite::new("c1", &format!("batch-{t}-{st}")),
            E,
            "ams",
            t,
            st,
            &counts(10 + i as u64),
        )
        .unwrap();
    }
    let ns = substreams();
    s.put_blob(&ns, BlobKey::new(E, "out-0"), b"derived")
        .unwrap();
    s.add_to_namespace_index(&ns, E, "ams", &["out-0"]).unwrap();
    s.flush().unwrap();
}

/// The groups whose blob, index entry and counts are all present; panics when only some are.
fn groups_held(s: &EmbeddedStore) -> BTreeSet<(String, String)> {
    let index = s.get_epoch_index(E, "ams").unwrap();
    let counts = s.get_counts(E, "ams").unwrap();
    let mut held = BTreeSet::new();
    for (i, (t, st)) in GROUPS.iter().enumerate() {
        let blob = s.get_blob(&EV, BlobKey::new(E, &key(E, t, st, 0))).unwrap();
        let entry = index.contains(&format!("{t}:{st}:0"));
        let count = counts
            .get(&(t.to_string(), st.to_string()))
            .map(|c| c.stored);
        match (blob, entry, count) {
            (Some(b), true, Some(n)) => {
                assert_eq!(b, vec![i as u8; 5_000], "{t}/{st}: blob bytes");
                assert_eq!(n, 10 + i as u64, "{t}/{st}: counts");
                held.insert((t.to_string(), st.to_string()));
            }
            (None, false, None) => {}
            other => panic!("{t}/{st} partly held: {other:?}"),
        }
    }
    held
}

fn derived_held(s: &EmbeddedStore) -> bool {
    let ns = substreams();
    let blob = s.get_blob(&ns, BlobKey::new(E, "out-0")).unwrap();
    let index = s.get_namespace_index(&ns, E, "ams").unwrap();
    assert_eq!(
        blob.is_some(),
        !index.is_empty(),
        "substream blob and index disagree"
    );
    blob.is_some()
}

fn set(groups: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    groups
        .iter()
        .map(|(t, s)| (t.to_string(), s.to_string()))
        .collect()
}

fn partition_dir(root: &Path) -> PathBuf {
    root.join(format!("p{START}"))
}

#[test]
fn each_group_goes_when_its_own_retention_ends_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    write_groups(&s);
    assert_eq!(groups_held(&s), set(&GROUPS));

    // Less than a day after the partition ended: nothing goes.
    let r = s.expire(END + DAY - 1).unwrap();
    assert_eq!((r.partitions_purged, r.partitions_dropped), (0, 0), "{r:?}");
    assert_eq!(groups_held(&s), set(&GROUPS));

    // A day after: DEBUG goes, with its blob, entry and counts; the bytes are freed.
    let r = s.expire(END + DAY).unwrap();
    assert_eq!((r.partitions_purged, r.partitions_dropped), (1, 0), "{r:?}");
    assert!(r.bytes_freed > 4_000, "{r:?}");
    let after_debug = set(&[("WEB", "error"), ("WEB", "ok"), ("APP", "")]);
    assert_eq!(groups_held(&s), after_debug);
    assert!(derived_held(&s));
    // Nothing more to remove: the next pass leaves the partition alone.
    let r = s.expire(END + DAY + 60).unwrap();
    assert_eq!(r.partitions_purged, 0, "{r:?}");

    // The purged batch's token is kept: a retried counts add is not applied a second time.
    s.add_counts_once(
        CountsWrite::new("c1", "batch-DEBUG-"),
        E,
        "ams",
        "DEBUG",
        "",
        &counts(10),
    )
    .unwrap();
    assert!(!s
        .get_counts(E, "ams")
        .unwrap()
        .contains_key(&("DEBUG".to_string(), String::new())));

    // Late writes of kept groups still land in the purged partition.
    s.put_blob(&EV, BlobKey::new(E, &key(E, "APP", "", 1)), b"late")
        .unwrap();
    s.add_to_epoch_index(E, "ams", &["APP::1"]).unwrap();
    s.flush().unwrap();
    drop(s);

    // Reopened: the same state, read from the rewritten files.
    let s = open(dir.path());
    assert_eq!(groups_held(&s), after_debug);
    assert_eq!(
        s.get_blob(&EV, BlobKey::new(E, &key(E, "APP", "", 1)))
            .unwrap()
            .as_deref(),
        Some(&b"late"[..])
    );

    // Ten days: the default groups and the derived data go, WEB/error stays.
    let r = s.expire(END + 10 * DAY).unwrap();
    assert_eq!((r.partitions_purged, r.partitions_dropped), (1, 0), "{r:?}");
    assert_eq!(groups_held(&s), set(&[("WEB", "error")]));
    assert!(!derived_held(&s));
    assert!(!s.get_epoch_index(E, "ams").unwrap().contains("APP::1"));

    // Twenty days: the partition goes whole.
    let r = s.expire(END + 20 * DAY).unwrap();
    assert_eq!((r.partitions_purged, r.partitions_dropped), (0, 1), "{r:?}");
    assert!(groups_held(&s).is_empty());
    assert!(!partition_dir(dir.path()).exists());
}

#[test]
fn writes_racing_purges_are_all_kept() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(open(dir.path()));
    write_groups(&s);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut chunk = 1u32;
            while !stop.load(Ordering::Relaxed) || chunk < 200 {
                // A kept group and a purged one, each time, so every pass has work.
                for t in ["APP", "DEBUG"] {
                    let k = key(E, t, "", chunk);
                    s.put_blobs(&EV, &[(BlobKey::new(E, &k), &[chunk as u8; 300][..])])
                        .into_iter()
                        .for_each(|r| {
                            r.unwrap();
                        });
                    s.add_to_epoch_index(E, "ams", &[&format!("{t}::{chunk}")])
                        .unwrap();
                    if t == "APP" {
                        acked.push(chunk);
                    }
                }
                chunk += 1;
            }
            acked
        })
    };
    // Purges while the writer runs, until enough of them raced it (each finds new DEBUG data).
    let mut purged = 0;
    for i in 0..200_000 {
        purged += s.expire(END + DAY + i).unwrap().partitions_purged;
        if purged >= 20 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let acked = writer.join().unwrap();
    assert!(purged >= 20, "the race was not exercised: {purged} purges");
    s.flush().unwrap();
    let check = |s: &EmbeddedStore| {
        let index = s.get_epoch_index(E, "ams").unwrap();
        for c in &acked {
            let k = key(E, "APP", "", *c);
            assert_eq!(
                s.get_blob(&EV, BlobKey::new(E, &k)).unwrap(),
                Some(vec![*c as u8; 300]),
                "acked blob {k} lost"
            );
            assert!(
                index.contains(&format!("APP::{c}")),
                "index entry of {k} lost"
            );
        }
    };
    check(&s);
    drop(s);
    check(&open(dir.path()));
}

/// Builds the purged copy of the partition in a scratch directory (a real purge), so a test
/// can lay out any crash state of the swap by hand.
fn purged_copy(dir: &Path) -> tempfile::TempDir {
    let scratch = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let to = scratch.path().join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            fs::create_dir(&to).unwrap();
            for f in fs::read_dir(entry.path()).unwrap() {
                let f = f.unwrap();
                fs::copy(f.path(), to.join(f.file_name())).unwrap();
            }
        } else if entry.file_name() != "LOCK" {
            fs::copy(entry.path(), &to).unwrap();
        }
    }
    let s = open(scratch.path());
    assert_eq!(s.expire(END + DAY).unwrap().partitions_purged, 1);
    drop(s);
    scratch
}

fn copy_partition(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    for f in fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), to.join(f.file_name())).unwrap();
    }
}

#[test]
fn a_crash_at_each_step_of_the_swap_leaves_one_whole_partition() {
    let without_debug = set(&[("WEB", "error"), ("WEB", "ok"), ("APP", "")]);
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        write_groups(&open(dir.path()));
        dir
    };
    let name = |suffix: &str| format!("p{START}{suffix}");

    // Step 1: a partial copy beside the live partition: deleted, the old state kept.
    let dir = fresh();
    let partial = dir.path().join(name(".purge"));
    fs::create_dir(&partial).unwrap();
    fs::write(partial.join("blobs.log"), b"half a rec").unwrap();
    let s = open(dir.path());
    assert!(!partial.exists());
    assert_eq!(groups_held(&s), set(&GROUPS));
    drop(s);

    // Step 2: a complete copy beside the old partition: swapped in.
    let dir = fresh();
    let copy = purged_copy(dir.path());
    copy_partition(
        &partition_dir(copy.path()),
        &dir.path().join(name(".purged")),
    );
    let s = open(dir.path());
    assert_eq!(groups_held(&s), without_debug);
    drop(s);

    // Step 3, between the renames: the old one renamed away, the copy not yet in place.
    let dir = fresh();
    let copy = purged_copy(dir.path());
    fs::rename(
        partition_dir(dir.path()),
        dir.path().join(name(".0.expired")),
    )
    .unwrap();
    copy_partition(
        &partition_dir(copy.path()),
        &dir.path().join(name(".purged")),
    );
    let s = open(dir.path());
    assert_eq!(groups_held(&s), without_debug);
    let left: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('p'))
        .collect();
    assert_eq!(left, [name("")], "leftovers: {left:?}");
    drop(s);

    // A reader never finishes a swap: it reads the old partition and changes nothing.
    let dir = fresh();
    let copy = purged_copy(dir.path());
    let done = dir.path().join(name(".purged"));
    copy_partition(&partition_dir(copy.path()), &done);
    let r = EmbeddedStore::open_read_only(dir.path()).unwrap();
    assert_eq!(groups_held(&r), set(&GROUPS));
    assert!(done.exists());
}

/// The SIGKILL loop's child: writes a kept group (printing each chunk once its blob and index
/// entry returned) and a purged one, while the main thread purges the partition over and over.
/// Does nothing unless started by the test below.
#[test]
fn purge_crash_child() {
    let Ok(dir) = std::env::var(CRASH_CHILD) else {
        return;
    };
    let start: u32 = std::env::var(CRASH_START)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("child: start");
    let s = Arc::new(open(Path::new(&dir)));
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            for chunk in start.. {
                for t in ["DEBUG", "APP"] {
                    let k = key(E, t, "", chunk);
                    s.put_blob(&EV, BlobKey::new(E, &k), &[chunk as u8; 700])
                        .expect("child: put");
                    s.add_to_epoch_index(E, "ams", &[&format!("{t}::{chunk}")])
                        .expect("child: index");
                }
                // println! locks and line-flushes stdout: the line is out once this returns.
                println!("PUT {chunk}");
            }
        })
    };
    for i in 0.. {
        s.expire(END + DAY + i).expect("child: expire");
        if writer.is_finished() {
            break;
        }
    }
}

const CRASH_CHILD: &str = "SLUICE_PURGE_CRASH_CHILD";
const CRASH_START: &str = "SLUICE_PURGE_CRASH_START";

#[test]
fn sigkill_during_purges_keeps_every_returned_write() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    if std::env::var(CRASH_CHILD).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_groups(&open(dir.path()));
    let mut acked: Vec<u32> = Vec::new();
    let mut next = 1u32;
    for round in 0..6u32 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "purge_crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD, dir.path())
            .env(CRASH_START, next.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let want = 30 + round as usize * 37;
        let mut seen = 0;
        for line in out.lines() {
            if let Some(n) = line.expect("child stdout").strip_prefix("PUT ") {
                acked.push(n.parse().expect("chunk"));
                seen += 1;
                if seen >= want {
                    child.kill().expect("SIGKILL");
                    break;
                }
            }
        }
        child.wait().expect("reap");
        assert!(seen > 0, "round {round}: the child wrote nothing");
        // Reopened (finishing any interrupted swap): every acked chunk is there, whole.
        let s = open(dir.path());
        let index = s.get_epoch_index(E, "ams").unwrap();
        for c in &acked {
            let k = key(E, "APP", "", *c);
            assert_eq!(
                s.get_blob(&EV, BlobKey::new(E, &k)).unwrap(),
                Some(vec![*c as u8; 700]),
                "round {round}: acked {k} lost"
            );
            assert!(
                index.contains(&format!("APP::{c}")),
                "round {round}: entry of {k} lost"
            );
        }
        let stray: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".purge") || n.ends_with(".expired"))
            .collect();
        assert!(stray.is_empty(), "round {round}: left over: {stray:?}");
        next = acked.iter().max().copied().unwrap_or(0) + 2;
    }
    // A last purge removes every DEBUG chunk; the kept ones stay.
    let s = open(dir.path());
    s.expire(END + DAY).unwrap();
    let index = s.get_epoch_index(E, "ams").unwrap();
    assert!(index.iter().all(|e| !e.starts_with("DEBUG:")), "{index:?}");
    assert!(acked.iter().all(|c| index.contains(&format!("APP::{c}"))));
}
