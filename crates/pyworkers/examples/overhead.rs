//! What the pool costs: time to spawn a worker, per-run and per-job overhead on an empty
//! transform, and decode-once vs one run per substream on a realistic blob. A measurement, not a
//! test: `cargo run -p sluice-pyworkers --example overhead` (numbers in docs/decisions.md).

use std::time::{Duration, Instant};

use sereal::Value;
use sluice_blob::{BlobBuilder, Profile};
use sluice_pyworkers::{find_python, BlobContext, Job, Pool, PoolConfig};

fn blob(n: usize) -> Vec<u8> {
    let events = match sluice_gen::events_array(&sluice_gen::GenConfig::web(1, n)) {
        Value::Array(v) => v,
        _ => Vec::new(),
    };
    let mut b = BlobBuilder::with_profile(Profile::default()).expect("builder");
    b.build(&events).expect("build").remove(0).into_bytes()
}

fn per(d: Duration, n: usize) -> String {
    let us = d.as_secs_f64() * 1e6 / n as f64;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn main() -> Result<(), String> {
    let python = find_python().map_err(|e| e.to_string())?;
    let cfg = PoolConfig {
        python,
        workers: 1,
        mean_jobs_per_worker: 1e12,
        ..PoolConfig::default()
    };
    // Spawn: `Pool::start` returns when its first worker has imported `sluice` and said so.
    let n = 5;
    let began = Instant::now();
    for _ in 0..n {
        drop(Pool::start(cfg.clone()).map_err(|e| e.to_string())?);
    }
    println!(
        "spawn a worker (start → ready, then kill): {}",
        per(began.elapsed(), n)
    );

    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let write = |name: &str, code: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, code).map(|()| Job::new(name, p, "transform"))
    };
    let empty = write("empty.py", "def transform(events, ctx):\n    return []\n")
        .map_err(|e| e.to_string())?;
    let count = write(
        "count.py",
        "def transform(events, ctx):\n    return [{'n': len(events)}]\n",
    )
    .map_err(|e| e.to_string())?;
    let pool = Pool::start(cfg).map_err(|e| e.to_string())?;
    let ctx = BlobContext::default();
    let tiny = blob(1);
    pool.run(&tiny, &ctx, std::slice::from_ref(&empty));

    let runs = 2000;
    let began = Instant::now();
    for _ in 0..runs {
        pool.run(&tiny, &ctx, std::slice::from_ref(&empty));
    }
    let one = began.elapsed();
    println!("run of 1 empty job on a 1-event blob: {}", per(one, runs));
    let jobs = vec![empty.clone(); 10];
    let runs10 = 500;
    let began = Instant::now();
    for _ in 0..runs10 {
        pool.run(&tiny, &ctx, &jobs);
    }
    let ten = began.elapsed();
    let extra = ten.as_secs_f64() / runs10 as f64 - one.as_secs_f64() / runs as f64;
    println!(
        "each further empty job in the same run: {:.0} µs",
        extra * 1e6 / 9.0
    );

    let web = blob(833);
    println!("833-event WEB blob: {} bytes stored", web.len());
    let reps = 50;
    let jobs = vec![count.clone(); 10];
    let began = Instant::now();
    for _ in 0..reps {
        pool.run(&web, &ctx, &jobs);
    }
    let together = began.elapsed();
    let began = Instant::now();
    for _ in 0..reps {
        for j in &jobs {
            pool.run(&web, &ctx, std::slice::from_ref(j));
        }
    }
    let apart = began.elapsed();
    println!(
        "10 substreams on it: one run (decoded once) {} per blob; ten runs (decoded 10×) {} per blob",
        per(together, reps),
        per(apart, reps)
    );
    println!("{:?}", pool.stats());
    Ok(())
}
