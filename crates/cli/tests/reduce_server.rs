//! `sluice cat --server … --count-by/--group-by/--top`: the reduce asks the server only for the
//! fields it reads (a `select` of its sparse shape and `epoch`) and rebuilds the sparse events
//! here; its rows equal those of the same reduce over the data directory (read lazily in
//! process), for every spec of a corpus, with and without a `--where`.

use std::path::Path;

mod common;
use common::{ams1, assert_success, serve_store_http_only_with};

fn rows(out: &std::process::Output) -> Vec<String> {
    assert_success(out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn server_reduce_rows_equal_the_data_dir_rows() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reduce-server-data");
    let _ = std::fs::remove_dir_all(&dir);
    // Recent seconds: the server's retention would hide old ones.
    let now = common::now();
    let epoch = now - 600 - now.rem_euclid(10);
    let cfg = sluice_gen::GenConfig {
        epoch_start: epoch,
        events_per_second: 300,
        ..sluice_gen::GenConfig::mixed(5, 1200)
    };
    let written = common::write_store(&dir, &cfg, ams1(), now);
    assert_eq!(written.len(), 1200);
    let range = [
        "--from".to_owned(),
        epoch.to_string(),
        "--to".to_owned(),
        (epoch + 10).to_string(),
    ];
    let specs: &[&[&str]] = &[
        &["--count-by", "status"],
        &["--count-by", "type,search", "--top", "4"],
        &[
            "--group-by",
            "type,status",
            "--agg",
            "count,avg:timings.total_ms,max:timings.total_ms,sum:bytes",
            "--window",
            "2s",
        ],
        &[
            "--group-by",
            "experiments[*].id",
            "--agg",
            "count,sum:experiments[*].variant,min:queries[*].ms",
        ],
        &["--group-by", "timings", "--agg", "count"],
        &["--agg", "count", "--window", "1s"],
        // Sketches and conditional counts (a condition reads whole events from a server).
        &[
            "--group-by",
            "type",
            "--agg",
            "count,p95:timings.total_ms,distinct:ip,count_if:status >= 500,ratio:exists search",
            "--window",
            "5s",
        ],
        // A path that needs whole events, and top events (whole).
        &["--group-by", "type", "--agg", "sum:[*]"],
        &["--top", "5", "--by", "timings.total_ms"],
    ];
    let wheres: &[Option<&str>] = &[None, Some("status >= 500"), Some("not exists search")];
    let data = dir.to_str().expect("path");

    // The data directory's own rows, before a server holds it.
    let mut local = Vec::new();
    for spec in specs {
        for w in wheres {
            let mut args: Vec<&str> = vec!["cat", "--data", data];
            args.extend(range.iter().map(String::as_str));
            args.extend_from_slice(spec);
            if let Some(w) = w {
                args.extend_from_slice(&["--where", w]);
            }
            let got = rows(&common::sluice(&args));
            assert!(!got.is_empty(), "{args:?}: no rows");
            local.push(got);
        }
    }

    let store = format!("embedded:{data}");
    // Blobs only: the column files' whole events order their keys otherwise (a top-N prints
    // whole events), and when they cover a second depends on the clock.
    let (mut server, base) = serve_store_http_only_with(&store, &dir, &["--columns", "off"]);
    let mut n = 0;
    for spec in specs {
        for w in wheres {
            let mut args: Vec<&str> = vec!["cat", "--server", &base];
            args.extend(range.iter().map(String::as_str));
            args.extend_from_slice(spec);
            if let Some(w) = w {
                args.extend_from_slice(&["--where", w]);
            }
            let got = rows(&common::sluice(&args));
            assert_eq!(got, local[n], "{args:?}");
            n += 1;
        }
    }
    assert_eq!(n, specs.len() * wheres.len());
    server.terminate(std::time::Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}
