//! `sluice export --format parquet` with the real binary: a store's range (with `--where`, with
//! `--select`) written as Parquet files, read back with the columns crate's own reader, equals
//! what `sluice cat` prints for the same query — read directly, and through a running server;
//! files split per (dc, type) and per `--rows-per-file`; a non-empty output directory refused.

use std::path::{Path, PathBuf};

mod common;
use common::{ams1, assert_success, now, stdout_lines};
use sluice_columns::convert::from_batch;
use sluice_columns::parquet_file::{FileQuery, ParquetFile};
use sluice_columns::verify::canonical;

fn temp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every `.parquet` file under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                assert_eq!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("parquet"),
                    "{p:?}"
                );
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The events of every file under `dir`, canonical JSON, sorted.
fn exported(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files(dir) {
        let bytes = std::fs::read(&f).expect("read");
        let file = ParquetFile::open(bytes.into()).expect("parquet");
        for batch in file.read(&FileQuery::all()).expect("read") {
            for row in from_batch(&batch.expect("batch")).expect("rows") {
                out.push(canonical(&row.event));
            }
        }
    }
    out.sort();
    out
}

/// What `sluice cat` prints for the same query, canonical JSON, sorted.
fn printed(source: &[&str], range: &[&str], extra: &[&str]) -> Vec<String> {
    let mut args = vec!["cat", "--format", "json"];
    args.extend_from_slice(source);
    args.extend_from_slice(range);
    args.extend_from_slice(extra);
    let out = common::sluice(&args);
    assert_success(&out);
    let mut lines: Vec<String> = stdout_lines(&out)
        .iter()
        .map(|l| canonical(&sereal::json::from_json_slice(l.as_bytes()).expect("json")))
        .collect();
    lines.sort();
    lines
}

fn export(source: &[&str], range: &[&str], extra: &[&str], out: &Path) -> std::process::Output {
    let mut args = vec!["export", "--format", "parquet"];
    args.extend_from_slice(source);
    args.extend_from_slice(range);
    args.extend_from_slice(extra);
    args.push(out.to_str().expect("path"));
    common::sluice(&args)
}

#[test]
fn export_writes_what_cat_prints() {
    let dir = temp("export");
    let store = dir.join("store");
    let epoch = now() - 3600;
    let cfg = sluice_gen::GenConfig {
        epoch_start: epoch,
        events_per_second: 400,
        ..sluice_gen::GenConfig::mixed(5, 2000)
    };
    let events = common::write_store(&store, &cfg, ams1(), epoch + 10);
    let (from, to) = (epoch.to_string(), (epoch + 60).to_string());
    let range = ["--from", from.as_str(), "--to", to.as_str()];
    let data = ["--data", store.to_str().expect("path")];

    // Everything: every event once, a file per (dc, type) and per 300 events.
    let all = dir.join("all");
    let out = export(&data, &range, &["--rows-per-file", "300"], &all);
    assert_success(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2000 events"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = exported(&all);
    assert_eq!(got.len(), events.len());
    assert_eq!(got, printed(&data, &range, &[]));
    let names = files(&all);
    assert!(names.len() >= 2000 / 300, "{names:?}");
    for t in ["WEB", "CRON", "LB"] {
        assert!(
            names.iter().any(|p| p
                .to_string_lossy()
                .contains(&format!("dc=ams1/type={t}/part-"))),
            "{t}: {names:?}"
        );
    }

    // A filter and a select.
    for extra in [
        vec!["--where", "status >= 500"],
        vec![
            "--where",
            "type == \"WEB\"",
            "--select",
            "path,timings.total_ms",
        ],
    ] {
        let out_dir = dir.join(format!("q{}", extra.len()));
        assert_success(&export(&data, &range, &extra, &out_dir));
        let want = printed(&data, &range, &extra);
        assert!(!want.is_empty(), "{extra:?}");
        assert_eq!(exported(&out_dir), want, "{extra:?}");
    }

    // A non-empty output directory is refused, and nothing in it is touched.
    let refused = export(&data, &range, &[], &all);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(exported(&all).len(), events.len());

    // Through a server running on the store: the same events.
    let data_dir = dir.join("data");
    std::fs::create_dir_all(&data_dir).expect("data dir");
    let (mut server, base) =
        common::serve_store_http_only(&format!("embedded:{}", store.display()), &data_dir);
    let via = dir.join("via-server");
    assert_success(&export(&["--server", &base], &range, &[], &via));
    assert_eq!(exported(&via), got);
    server.terminate(std::time::Duration::from_secs(10));
}
