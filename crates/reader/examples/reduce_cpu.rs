//! The CPU a reduce read costs, on the blob path: the reducer fed whole decoded events (what a
//! reduce read did before `Plan::narrow_read`) or fed what the narrowed read hands out (sparse
//! events, or each chunk cut to its top N). One path per run, so that `/usr/bin/time` or
//! `valgrind --tool=callgrind` measures it alone:
//!
//! ```text
//! cargo run --release -p sluice-reader --example reduce_cpu -- DATA_DIR FROM TO full|lazy [REDUCE FLAGS…]
//! # REDUCE FLAGS: count-by=status (default) | group-by=type,status agg=count,avg:timings.total_ms
//! #               window=10s | top=5 by=timings.total_ms | where=status>=500
//! ```
//!
//! Prints the rows' count and a digest (equal for both paths), the events the sink was fed, and
//! the process's CPU seconds (user + system, from /proc/self/stat).

use std::hash::{Hash, Hasher};

use sluice_reader::reduce::PlanArgs;
use sluice_reader::reduce::Sink;
use sluice_reader::{RangeReader, ReadItem, ReadOptions, ReadRequest, Selection};
use sluice_store::EmbeddedStore;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// User + system CPU seconds of this process so far (clock ticks of 1/100 s).
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) and its closing parenthesis.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, from, to, path, flags @ ..] = args.as_slice() else {
        return Err("usage: reduce_cpu DATA_DIR FROM TO full|lazy [count-by=…] [group-by=…] [agg=…] [window=…] [top=N] [by=…] [where=…]".into());
    };
    let (from, to): (i64, i64) = (from.parse()?, to.parse()?);
    let mut plan_args = PlanArgs::default();
    let mut where_ = None;
    for flag in flags {
        let (k, v) = flag.split_once('=').ok_or("flags are key=value")?;
        match k {
            "count-by" => plan_args.count_by.push(v.to_owned()),
            "group-by" => plan_args.group_by.push(v.to_owned()),
            "agg" => plan_args.agg.push(v.to_owned()),
            "window" => plan_args.window = Some(v.to_owned()),
            "top" => plan_args.top = Some(v.parse()?),
            "by" => plan_args.by = Some(v.to_owned()),
            "where" => where_ = Some(v.to_owned()),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if flags.iter().all(|f| f.starts_with("where=")) {
        plan_args.count_by.push("status".into());
    }
    let plan = plan_args.plan(false)?.ok_or("no reduce asked for")?;
    let store = EmbeddedStore::open_read_only(dir)?;
    let selection = Selection::from_texts(None, None, None, &[] as &[String], where_.as_deref())?;
    let mut opts = ReadOptions::default();
    match path.as_str() {
        "full" => {}
        "lazy" => plan.narrow_read(&mut opts),
        other => return Err(format!("path {other:?}: full or lazy").into()),
    }
    let cpu0 = cpu_secs();
    let started = std::time::Instant::now();
    let mut sink = Sink::new(plan)?;
    let mut rows = Vec::new();
    let mut events = 0u64;
    let mut warnings = 0u64;
    let reader = RangeReader::new(&store, ReadRequest::selected(from, to, selection), opts)?;
    for item in reader {
        match item {
            ReadItem::Event(e) => {
                events += e.repeat;
                rows.extend(sink.push_read(&e)?);
            }
            ReadItem::Warning(_) => warnings += 1,
            ReadItem::Notice(_) => {}
        }
    }
    rows.extend(sink.finish().0);
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    for row in &rows {
        sereal::json::to_string(row).hash(&mut digest);
    }
    println!(
        "{path}: {} rows (digest {:016x}), {events} events to the sink, {warnings} warnings, {:.3} s CPU, {:.3} s wall",
        rows.len(),
        digest.finish(),
        cpu_secs() - cpu0,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
