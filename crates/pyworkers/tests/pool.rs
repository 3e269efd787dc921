//! The pool against real Python worker processes (the `sluice` package of this tree, found by
//! `find_python`: `$SLUICE_PYTHON`, `python/.venv`, or `scripts/python-setup.sh`).
//! Nothing here is skipped: without a usable Python these tests fail, saying why.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sereal::Value;
use sluice_blob::{BlobBuilder, Profile};
use sluice_pyworkers::{find_python, BlobContext, Failure, Job, Pool, PoolConfig};

fn python() -> PathBuf {
    find_python().unwrap_or_else(|e| panic!("no Python for the worker tests: {e}"))
}

fn config() -> PoolConfig {
    PoolConfig {
        python: python(),
        workers: 1,
        mean_jobs_per_worker: 1_000_000.0,
        inherit_stderr: true,
        ..PoolConfig::default()
    }
}

fn start(cfg: PoolConfig) -> Pool {
    Pool::start(cfg).unwrap_or_else(|e| panic!("pool did not start: {e}"))
}

/// A directory of transform files, removed at the end of the test.
struct Transforms(tempfile::TempDir);

impl Transforms {
    fn new() -> Transforms {
        Transforms(tempfile::tempdir().expect("temp dir"))
    }
    fn file(&self, name: &str, code: &str) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, code).expect("write transform");
        p
    }
    fn job(&self, name: &str, code: &str) -> Job {
        let file = self.file(&format!("{name}.py"), code);
        Job {
            wall: Duration::from_secs(10),
            cpu: Duration::from_secs(10),
            ..Job::new(name, file, "transform")
        }
    }
}

fn web_events(n: usize) -> Vec<Value> {
    match sluice_gen::events_array(&sluice_gen::GenConfig::web(7, n)) {
        Value::Array(v) => v,
        other => panic!("events_array gave {other:?}"),
    }
}

/// A stored blob (default profile: v5 + zstd + trailer) of `n` WEB events, and the events.
fn blob(n: usize) -> (Vec<u8>, Vec<Value>) {
    let events = web_events(n);
    let mut builder = BlobBuilder::with_profile(Profile::default()).expect("builder");
    let mut blobs = builder.build(&events).expect("build");
    assert_eq!(blobs.len(), 1);
    (blobs.remove(0).into_bytes(), events)
}

fn ctx() -> BlobContext {
    BlobContext {
        epoch: 1_700_000_123,
        dc: "ams1".into(),
        type_: "WEB".into(),
        subtype: "".into(),
        chunk: 3,
    }
}

fn decode(doc: &[u8]) -> Vec<Value> {
    match sereal::from_slice(doc).expect("result decodes") {
        Value::Array(v) => v,
        other => panic!("result is not an array: {other:?}"),
    }
}

const ERRORS_ONLY: &str = r#"
def transform(events, ctx):
    for i, e in enumerate(events):
        if e["status"] >= 400:
            yield {"i": i, "path": e["path"], "status": e["status"],
                   "at": "%s/%s/%d/%d" % (ctx.dc, ctx.type, ctx.epoch, ctx.chunk), "name": ctx.name}
"#;

const HANG: &str = "def transform(events, ctx):\n    while True:\n        pass\n";
const SLEEP: &str = "import time\ndef transform(events, ctx):\n    time.sleep(60)\n";
const COUNT: &str = "def transform(events, ctx):\n    return [{'n': len(events)}]\n";

fn count_of(result: &Result<Vec<u8>, Failure>) -> i64 {
    let doc = result
        .as_ref()
        .unwrap_or_else(|f| panic!("count job failed: {f}"));
    let v = decode(doc);
    v[0].get("n").and_then(Value::as_i64).expect("n")
}

#[test]
fn transform_results_equal_the_same_selection_done_in_rust() {
    let t = Transforms::new();
    let pool = start(config());
    let (bytes, events) = blob(400);
    let job = t.job("errors", ERRORS_ONLY);
    let out = pool.run(&bytes, &ctx(), std::slice::from_ref(&job));
    assert_eq!(out.len(), 1);
    let got = decode(out[0].as_ref().expect("job ok"));

    // The same selection on the blob decoded in Rust, compared through the JSON mapping (the
    // worker writes ASCII strings as Sereal binary strings, as Perl does).
    let decoded = sluice_blob::Blob::parse(&bytes)
        .expect("blob")
        .decode(&sereal::Limits::default())
        .expect("decode");
    assert_eq!(decoded.len(), events.len());
    let mut want = Vec::new();
    for (i, e) in decoded.iter().enumerate() {
        let status = e.get("status").and_then(Value::as_i64).expect("status");
        if status >= 400 {
            want.push(serde_json::json!({
                "i": i, "path": sereal::json::to_json_value(e.get("path").expect("path")),
                "status": status, "at": "ams1/WEB/1700000123/3", "name": "errors",
            }));
        }
    }
    assert!(!want.is_empty(), "the generated blob has errors to select");
    let got: Vec<serde_json::Value> = got.iter().map(sereal::json::to_json_value).collect();
    assert_eq!(got, want);
    // Several jobs, one decode: each gets the full events; order of results = order of jobs.
    let count = t.job("count", COUNT);
    let out = pool.run(&bytes, &ctx(), &[count.clone(), job.clone(), count]);
    assert_eq!(count_of(&out[0]), 400);
    assert_eq!(decode(out[1].as_ref().expect("ok")).len(), want.len());
    assert_eq!(count_of(&out[2]), 400);
    let s = pool.stats();
    assert_eq!((s.jobs_ok, s.jobs_failed, s.crashed), (4, 0, 0));
}

#[test]
fn infinite_loop_is_killed_on_cpu_and_sleep_on_wall_and_pool_keeps_serving() {
    let t = Transforms::new();
    let pool = start(config());
    let (bytes, _) = blob(50);
    let hang = Job {
        wall: Duration::from_secs(20),
        cpu: Duration::from_millis(300),
        ..t.job("hang", HANG)
    };
    let began = Instant::now();
    let out = pool.run(&bytes, &ctx(), &[hang]);
    let took = began.elapsed();
    assert_eq!(out[0], Err(Failure::CpuTime));
    assert!(
        took < Duration::from_secs(15),
        "killed in {took:?}, wall budget 20 s"
    );

    let sleep = Job {
        wall: Duration::from_millis(400),
        cpu: Duration::from_secs(5),
        ..t.job("sleep", SLEEP)
    };
    let began = Instant::now();
    let out = pool.run(&bytes, &ctx(), &[sleep]);
    let took = began.elapsed();
    assert_eq!(out[0], Err(Failure::WallTime));
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");

    // The pool replaced both workers and serves the next blob.
    let out = pool.run(&bytes, &ctx(), &[t.job("count", COUNT)]);
    assert_eq!(count_of(&out[0]), 50);
    let s = pool.stats();
    assert_eq!((s.killed_cpu, s.killed_wall), (1, 1), "{s:?}");
    assert_eq!(out[0].as_ref().map(|_| ()), Ok(()));
}

#[test]
fn unbounded_allocation_is_memory() {
    let t = Transforms::new();
    let pool = start(PoolConfig {
        memory_limit_bytes: 512 << 20,
        ..config()
    });
    let (bytes, _) = blob(20);
    let hog = t.job(
        "hog",
        "def transform(events, ctx):\n    x = []\n    while True:\n        x.append(b'x' * (1 << 20))\n",
    );
    let out = pool.run(&bytes, &ctx(), &[hog, t.job("count", COUNT)]);
    assert_eq!(out[0], Err(Failure::Memory));
    // The job after it ran in a fresh worker.
    assert_eq!(count_of(&out[1]), 20);
    assert_eq!(pool.stats().killed_memory, 1);
}

#[test]
fn exception_reports_type_message_and_place() {
    let t = Transforms::new();
    let pool = start(config());
    let (bytes, _) = blob(10);
    let raise = t.job(
        "raise",
        "def transform(events, ctx):\n    raise ValueError('boom: %d events\\nsecond line' % len(events))\n",
    );
    let not_dicts = t.job("ints", "def transform(events, ctx):\n    return [1, 2]\n");
    let exit = t.job(
        "exit",
        "import sys\ndef transform(events, ctx):\n    sys.exit(3)\n",
    );
    let out = pool.run(
        &bytes,
        &ctx(),
        &[raise, not_dicts, exit, t.job("count", COUNT)],
    );
    assert_eq!(
        out[0],
        Err(Failure::Exception(
            "ValueError: boom: 10 events (raise.py:2)".into()
        ))
    );
    match &out[1] {
        Err(Failure::Exception(m)) => assert!(
            m.starts_with("TypeError: transform result 0 is a int"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    match &out[2] {
        Err(Failure::Exception(m)) => assert!(m.starts_with("SystemExit: 3"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(count_of(&out[3]), 10);
    // An exception does not cost the worker.
    let s = pool.stats();
    assert_eq!((s.spawned, s.crashed), (1, 0), "{s:?}");
}

#[test]
fn a_worker_that_kills_itself_is_crashed_and_later_jobs_still_run() {
    let t = Transforms::new();
    let pool = start(config());
    let (bytes, _) = blob(10);
    let kill = t.job(
        "kill",
        "import os\ndef transform(events, ctx):\n    os.kill(os.getpid(), 9)\n",
    );
    let exit = t.job(
        "exit",
        "import os\ndef transform(events, ctx):\n    os._exit(7)\n",
    );
    let count = t.job("count", COUNT);
    let out = pool.run(
        &bytes,
        &ctx(),
        &[count.clone(), kill, count.clone(), exit, count],
    );
    assert_eq!(count_of(&out[0]), 10);
    match &out[1] {
        Err(Failure::Crashed(m)) => assert!(m.contains("signal 9"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(count_of(&out[2]), 10);
    match &out[3] {
        Err(Failure::Crashed(m)) => assert!(m.contains("status 7"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(count_of(&out[4]), 10);
    assert_eq!(pool.stats().crashed, 2);
}

#[test]
fn second_job_gets_its_result_when_the_first_hangs() {
    let t = Transforms::new();
    let pool = start(config());
    let (bytes, _) = blob(30);
    let hang = Job {
        wall: Duration::from_millis(500),
        ..t.job("sleep", SLEEP)
    };
    let out = pool.run(&bytes, &ctx(), &[hang, t.job("count", COUNT)]);
    assert_eq!(out[0], Err(Failure::WallTime));
    assert_eq!(count_of(&out[1]), 30);
}

#[test]
fn results_over_budget_bad_blobs_and_prints_are_handled() {
    let t = Transforms::new();
    let pool = start(config());
    let (bytes, _) = blob(30);
    let big = Job {
        max_result_bytes: 100,
        ..t.job(
            "big",
            "def transform(events, ctx):\n    return [{'x': 'y' * 1000}]\n",
        )
    };
    let chatty = t.job(
        "chatty",
        "import sys\ndef transform(events, ctx):\n    print('a transform printed this on stdout')\n    sys.stdout.flush()\n    return [{'ok': 1}]\n",
    );
    let out = pool.run(&bytes, &ctx(), &[big, chatty]);
    match &out[0] {
        Err(Failure::ResultTooLarge { bytes }) => assert!(*bytes > 1000, "{bytes}"),
        other => panic!("{other:?}"),
    }
    let v = decode(
        out[1]
            .as_ref()
            .expect("a print does not break the protocol"),
    );
    assert_eq!(v[0].get("ok").and_then(Value::as_i64), Some(1));

    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0xff;
    let out = pool.run(&damaged, &ctx(), &[t.job("count", COUNT)]);
    match &out[0] {
        Err(f @ Failure::BadBlob(_)) => assert_eq!(f.reason(), "bad_blob"),
        other => panic!("{other:?}"),
    }
    // A blob whose trailer is right but whose document is not an array of events.
    let not_array = sluice_blob::with_trailer(
        &sereal::to_vec(&Value::Int(5), &sereal::EncoderOptions::default()).expect("encode"),
    );
    let out = pool.run(&not_array, &ctx(), &[t.job("count", COUNT)]);
    assert!(
        matches!(&out[0], Err(Failure::BadBlob(m)) if m.contains("not an array")),
        "{out:?}"
    );
    assert!(pool.run(&bytes, &ctx(), &[]).is_empty());
}

#[test]
fn recycling_is_probabilistic_around_the_mean() {
    let t = Transforms::new();
    let mean = 5.0;
    let pool = start(PoolConfig {
        workers: 2,
        mean_jobs_per_worker: mean,
        max_respawns_per_sec: 1000.0,
        respawn_burst: 1000,
        ..config()
    });
    let (bytes, _) = blob(5);
    let count = t.job("count", COUNT);
    let runs = 60;
    for _ in 0..runs {
        let out = pool.run(&bytes, &ctx(), &[count.clone(), count.clone()]);
        assert_eq!(count_of(&out[0]), 5);
        assert_eq!(count_of(&out[1]), 5);
    }
    let s = pool.stats();
    // 120 jobs: a run of two jobs retires its worker with p = 1 - (1 - 1/5)² = 0.36, so about
    // 21.6 recycles (σ ≈ 3.7); the bounds are loose (about ±3σ) and can still catch a pool
    // that never recycles or recycles after every run.
    assert!((10..=35).contains(&s.recycled), "{s:?}");
    assert_eq!(s.crashed, 0);
    // Every recycled worker was replaced (the replacement of the last ones may still be
    // starting).
    assert!(s.spawned >= 2 + s.recycled - 2, "{s:?}");
}

#[test]
fn respawns_are_capped_and_run_answers_unavailable_when_throttled() {
    let t = Transforms::new();
    let pool = start(PoolConfig {
        workers: 1,
        mean_jobs_per_worker: 1.0, // every run retires its worker
        max_respawns_per_sec: 0.05,
        respawn_burst: 1,
        acquire_timeout: Duration::from_secs(4),
        ..config()
    });
    let (bytes, _) = blob(5);
    let count = t.job("count", COUNT);
    // The initial worker, then the one burst token: two runs succeed.
    assert_eq!(
        count_of(&pool.run(&bytes, &ctx(), std::slice::from_ref(&count))[0]),
        5
    );
    assert_eq!(
        count_of(&pool.run(&bytes, &ctx(), std::slice::from_ref(&count))[0]),
        5
    );
    // The next token is 20 s away: the run waits its 4 s and gives up.
    let out = pool.run(&bytes, &ctx(), std::slice::from_ref(&count));
    match &out[0] {
        Err(f @ Failure::Unavailable(m)) => {
            assert!(m.contains("respawns throttled"), "{m}");
            assert_eq!(f.reason(), "unavailable");
        }
        other => panic!("{other:?}"),
    }
    let s = pool.stats();
    assert_eq!((s.spawned, s.recycled, s.unavailable), (2, 2, 1), "{s:?}");
    assert!(s.respawn_throttled >= 1, "{s:?}");
}

#[test]
fn check_explains_what_is_wrong() {
    let t = Transforms::new();
    let py = python();
    let ok = t.file("ok.py", ERRORS_ONLY);
    assert_eq!(Pool::check(&py, &ok, "transform"), Ok(()));

    let missing = Pool::check(&py, &ok, "nope")
        .expect_err("missing function")
        .to_string();
    assert!(missing.contains("defines no 'nope'"), "{missing}");

    let syntax = t.file("syntax.py", "def transform(events, ctx)\n    return []\n");
    let e = Pool::check(&py, &syntax, "transform")
        .expect_err("syntax error")
        .to_string();
    assert!(
        e.contains("SyntaxError") && e.contains("syntax.py:1"),
        "{e}"
    );

    let import = t.file("import.py", "import no_such_module_here\n");
    let e = Pool::check(&py, &import, "transform")
        .expect_err("import error")
        .to_string();
    assert!(
        e.contains("ModuleNotFoundError") && e.contains("no_such_module_here"),
        "{e}"
    );

    let arity = t.file("arity.py", "def transform(events):\n    return []\n");
    let e = Pool::check(&py, &arity, "transform")
        .expect_err("wrong arity")
        .to_string();
    assert!(
        e.contains("cannot be called as transform(events, ctx)"),
        "{e}"
    );

    let not_callable = t.file("value.py", "transform = 5\n");
    let e = Pool::check(&py, &not_callable, "transform")
        .expect_err("not callable")
        .to_string();
    assert!(e.contains("not a function"), "{e}");

    let e = Pool::check(&py, Path::new("/no/such/file.py"), "transform")
        .expect_err("no file")
        .to_string();
    assert!(e.contains("no such file"), "{e}");
}

#[test]
fn a_python_without_the_package_fails_start_with_a_clear_error() {
    let e = Pool::start(PoolConfig {
        python: PathBuf::from("/no/such/python3"),
        ..config()
    })
    .expect_err("no python");
    assert!(e.to_string().contains("/no/such/python3"), "{e}");
}

#[test]
fn memory_pressure_raises_the_recycling_rate() {
    let t = Transforms::new();
    let pool = start(PoolConfig {
        memory_limit_bytes: 512 << 20,
        // Without pressure a worker would live a million jobs on average.
        mean_jobs_per_worker: 1_000_000.0,
        max_respawns_per_sec: 100.0,
        respawn_burst: 100,
        ..config()
    });
    let (bytes, _) = blob(5);
    let count = t.job("count", COUNT);
    let jobs = vec![count.clone(); 4];
    for _ in 0..10 {
        for r in pool.run(&bytes, &ctx(), &jobs) {
            assert_eq!(count_of(&r), 5);
        }
    }
    assert_eq!(pool.stats().recycled, 0, "no pressure, no recycling");

    // A module that keeps ~330 MB resident: RSS ≈ 70 % of the limit, so s ≈ 0.38 and
    // p ≈ s² ≈ 0.15 per job (the address space, ~160 MB more than RSS here, stays under 512 MB).
    let hog = t.job(
        "hog",
        "_keep = b'x' * (330 << 20)\ndef transform(events, ctx):\n    return [{'n': len(events)}]\n",
    );
    let jobs = vec![hog; 8];
    for _ in 0..10 {
        for r in pool.run(&bytes, &ctx(), &jobs) {
            assert_eq!(count_of(&r), 5);
        }
    }
    // P(no recycle in 80 jobs at p ≈ 0.15) ≈ 3e-6.
    let s = pool.stats();
    assert!(s.recycled >= 1, "{s:?}");
    assert_eq!((s.crashed, s.killed_memory), (0, 0), "{s:?}");
}
