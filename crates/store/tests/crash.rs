//! Crash safety with a real process: a child writes blobs and prints each key once `put_blob`
//! (and the index add after it) returned; the parent kills it with SIGKILL mid-stream, reopens the
//! store and checks that every printed key reads back intact and that nothing reads back corrupt.
//!
//! The child is this same test binary, re-run with `SLUICE_STORE_CRASH_CHILD=<dir>` and filtered
//! to the `crash_child` test, so no extra binary needs building.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_store::{BlobKey, Durability, EmbeddedOptions, EmbeddedStore, Namespace, Store};

const CHILD_ENV: &str = "SLUICE_STORE_CRASH_CHILD";
const E: i64 = 1_700_000_000;

fn key(i: u64) -> (i64, String) {
    // ~20 blobs per second-epoch, and partitions change every 3600 epochs: use a step that
    // crosses partitions quickly so recovery covers several files.
    let epoch = E + (i as i64) * 97;
    (epoch, format!("{epoch}:ams:WEB::{i}"))
}

/// 1 KB .. ~600 KB, deterministic from `i`, so the parent can check contents.
fn value(i: u64) -> Vec<u8> {
    let len = 1024 + (i.wrapping_mul(2_654_435_761) % (600 << 10)) as usize;
    let mut x = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn options(durability: Durability) -> EmbeddedOptions {
    EmbeddedOptions {
        durability,
        ..EmbeddedOptions::default()
    }
}

/// The writer. Does nothing unless started by `crash_with_sigkill` below.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let durability = if std::env::var("SLUICE_STORE_CRASH_SYNC").is_ok() {
        Durability::Immediate
    } else {
        Durability::OnFlush
    };
    let store = EmbeddedStore::open_with(&dir, options(durability)).expect("child: open");
    let start: u64 = std::env::var("SLUICE_STORE_CRASH_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for i in start.. {
        let (epoch, k) = key(i);
        store
            .put_blob(&Namespace::Events, BlobKey::new(epoch, &k), &value(i))
            .expect("child: put");
        store
            .add_to_epoch_index(epoch, "ams", &[&format!("WEB::{i}")])
            .expect("child: index");
        // println! locks and line-flushes stdout: the line is out once this returns.
        println!("PUT {i}");
    }
}

/// Starts the child, lets it print `min_lines` keys, kills it with SIGKILL; returns the keys it
/// reported as written.
fn run_and_kill(dir: &Path, start: u64, min_lines: usize, sync: bool) -> Vec<u64> {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env("SLUICE_STORE_CRASH_START", start.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if sync {
        cmd.env("SLUICE_STORE_CRASH_SYNC", "1");
    }
    let mut child = cmd.spawn().expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut reported = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child stdout");
        if let Some(i) = line.strip_prefix("PUT ") {
            reported.push(i.parse::<u64>().expect("key number"));
            if reported.len() >= min_lines || Instant::now() > deadline {
                // Child::kill sends SIGKILL on Unix: no destructor, no flush runs in the child.
                child.kill().expect("SIGKILL the child");
                break;
            }
        }
    }
    child.wait().expect("reap child");
    assert!(reported.len() >= min_lines.min(1), "child printed nothing");
    reported
}

fn check(dir: &Path, reported: &[u64], upto: u64) {
    let store = EmbeddedStore::open(dir).expect("reopen after SIGKILL");
    let ev = Namespace::Events;
    for &i in reported {
        let (epoch, k) = key(i);
        let got = store
            .get_blob(&ev, BlobKey::new(epoch, &k))
            .expect("reported key must read back");
        assert_eq!(
            got.as_deref(),
            Some(&value(i)[..]),
            "reported key {i} lost or changed"
        );
        assert!(
            store
                .get_epoch_index(epoch, "ams")
                .expect("index")
                .contains(&format!("WEB::{i}")),
            "index entry of reported key {i} lost"
        );
    }
    eprintln!(
        "after SIGKILL: {} keys reported, recovery {:?}",
        reported.len(),
        store.recovery_stats()
    );
    // Keys written but not reported (the one in flight) may be absent, never corrupt.
    let keys: Vec<(i64, String)> = (0..upto + 4).map(key).collect();
    let refs: Vec<BlobKey<'_>> = keys.iter().map(|(e, k)| BlobKey::new(*e, k)).collect();
    for (i, r) in store.get_blobs(&ev, &refs).into_iter().enumerate() {
        match r {
            Ok(None) => {}
            Ok(Some(v)) => assert_eq!(v, value(i as u64), "key {i} read back different bytes"),
            Err(e) => panic!("key {i}: {e}"),
        }
    }
}

fn crash_cycles(sync: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut next = 0u64;
    let mut all = Vec::new();
    // Three kill/reopen cycles on the same directory: recovery must also leave a log that
    // later writes can append to.
    for round in 0..3 {
        let reported = run_and_kill(dir.path(), next, 40 + round * 15, sync);
        let last = *reported.iter().max().expect("some keys");
        all.extend(reported);
        check(dir.path(), &all, last);
        // Continue after the in-flight key, which may or may not have made it.
        next = last + 2;
    }
}

#[test]
fn crash_with_sigkill_keeps_every_returned_put() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    crash_cycles(false);
}

#[test]
fn crash_with_sigkill_immediate_durability() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    crash_cycles(true);
}
