//! Workers never outlive their pool: dropping the pool kills them, and so does SIGKILL of the
//! process that owns the pool (this test binary re-run as a child), even mid-job.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_pyworkers::{find_python, BlobContext, Job, Pool, PoolConfig};
use sluice_test_support::wait_for;

const CHILD_ENV: &str = "SLUICE_PYWORKERS_LIFECYCLE_CHILD";

/// Pids of the live (not zombie) `sluice._worker` processes whose parent is `parent`.
fn workers_of(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(parent)
            && state != Some("Z")
            && String::from_utf8_lossy(&cmdline).contains("sluice._worker")
        {
            pids.push(pid);
        }
    }
    pids
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s
                .rfind(')')
                .and_then(|i| s[i + 1..].split_ascii_whitespace().next());
            state != Some("Z")
        })
        .unwrap_or(false)
}

fn config() -> PoolConfig {
    PoolConfig {
        python: find_python().unwrap_or_else(|e| panic!("no Python for the worker tests: {e}")),
        workers: 2,
        ..PoolConfig::default()
    }
}

#[test]
fn dropping_the_pool_kills_its_workers() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let pool = Pool::start(config()).expect("pool");
    let me = std::process::id();
    wait_for(Duration::from_secs(30), "two workers", || {
        workers_of(me).len() == 2
    });
    let pids = workers_of(me);
    drop(pool);
    for pid in pids {
        assert!(!alive(pid), "worker {pid} outlived its pool");
    }
}

#[test]
fn sigkill_of_the_owner_kills_its_workers_mid_job() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: a pool whose worker loops forever in a job, then wait to be killed.
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("hang.py");
        std::fs::write(
            &file,
            "def transform(events, ctx):\n    while True:\n        pass\n",
        )
        .expect("write");
        let pool = Pool::start(config()).expect("pool");
        let events = sluice_blob::with_trailer(&[
            0x3d, 0xf3, 0x72, 0x6c, 0x05, 0x00, 0x40, // `=srl` v5, empty array
        ]);
        std::thread::scope(|s| {
            s.spawn(|| {
                let job = Job {
                    wall: Duration::from_secs(600),
                    cpu: Duration::from_secs(600),
                    ..Job::new("hang", &file, "transform")
                };
                pool.run(&events, &BlobContext::default(), &[job]);
            });
            let me = std::process::id();
            wait_for(Duration::from_secs(30), "two workers", || {
                workers_of(me).len() == 2
            });
            println!("READY");
            std::thread::sleep(Duration::from_secs(600));
        });
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "sigkill_of_the_owner_kills_its_workers_mid_job",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("READY") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("child pool did not get ready");
    }
    let pids = workers_of(child.id());
    assert_eq!(pids.len(), 2, "{pids:?}");
    child.kill().expect("SIGKILL the owner");
    child.wait().expect("reap the owner");
    wait_for(Duration::from_secs(10), "orphaned workers to die", || {
        pids.iter().all(|&p| !alive(p))
    });
}
