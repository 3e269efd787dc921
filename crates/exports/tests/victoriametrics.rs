//! The exports against a real VictoriaMetrics single node (`scripts/victoriametrics.sh`, built
//! from the Go module proxy): rows sent by remote write, by Graphite plaintext and as the
//! Prometheus text format (imported through `/api/v1/import/prometheus`) are read back through
//! `/api/v1/export` with names, labels, values and timestamps exact; the exporter loop against a
//! receiver that is down at first (nothing listening on its port) then up (a plain TCP relay to
//! VictoriaMetrics starts on that port): every row arrives, failures counted; a full queue drops
//! the oldest batches and counts them; a 4xx answer rejects a batch without retrying it.
//!
//! The server is started (`sluice_test_support::victoriametrics`) by the first test that needs it
//! (the script is idempotent; a file lock keeps test binaries from starting it twice) and left
//! running; `make test` stops it at the end. It fails to start → the tests fail, unless
//! `SLUICE_SKIP_VM=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_exports::naming::condition_hash;
use sluice_exports::{
    prometheus_text, Exporter, ExporterConfig, GraphiteSink, RemoteWriteSink, RollupRow, RowSource,
    Sink, SinkConfig,
};
use sluice_test_support::victoriametrics::{victoriametrics as server, VmServer};

/// Labels → samples (timestamp ms → value), duplicates (at-least-once) merged.
type Series = BTreeMap<BTreeMap<String, String>, BTreeMap<i64, f64>>;

/// A rollup name no other test (of any run against the same server) uses.
fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{name}{}x{}x{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A step start about two hours back, on a 10 s boundary.
fn base() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    (now - 7200) / 10 * 10
}

const COND: &str = "status >= 500";

/// (aggregate as written, metric suffix, condition label)
const AGGS: &[(&str, &str, Option<&str>)] = &[
    ("count", "count", None),
    ("p95:duration_ms", "p95_duration_ms", None),
    ("distinct:user.id", "distinct_user_id", None),
    ("count_if:status >= 500", "count_if", Some(COND)),
    ("ratio:status >= 500", "ratio", Some(COND)),
];

/// Two groups over `steps` steps of 10 s; every value distinct; `p95` has no value in the
/// second group's odd steps.
fn sample_rows(rollup: &str, start: i64, steps: i64) -> Vec<RollupRow> {
    let groups = [
        vec![
            ("path".to_owned(), "/book".to_owned()),
            ("status".to_owned(), "200".to_owned()),
        ],
        vec![
            ("path".to_owned(), "/a b".to_owned()),
            ("status".to_owned(), "null".to_owned()),
        ],
    ];
    let mut rows = Vec::new();
    for s in 0..steps {
        for (g, group) in groups.iter().enumerate() {
            let k = (s * 10 + g as i64) as f64;
            let values = AGGS
                .iter()
                .enumerate()
                .map(|(i, (agg, _, _))| {
                    let v = if i == 1 && g == 1 && s % 2 == 1 {
                        None
                    } else {
                        Some(k + i as f64 / 8.0)
                    };
                    (agg.to_string(), v)
                })
                .collect();
            rows.push(RollupRow {
                rollup: rollup.to_owned(),
                start: start + s * 10,
                step: 10,
                group: group.clone(),
                values,
            });
        }
    }
    rows
}

/// What the rows must read back as, built by hand from the naming rules (not with the crate's
/// functions): `sluice_R_SUFFIX{path,status,rollup[,condition]}` at the step's end.
fn expected_prometheus(rows: &[RollupRow]) -> Series {
    let mut out = Series::new();
    for row in rows {
        for ((agg, value), (written, suffix, cond)) in row.values.iter().zip(AGGS) {
            assert_eq!(agg, written);
            let Some(v) = value else { continue };
            let mut labels = BTreeMap::new();
            labels.insert(
                "__name__".to_owned(),
                format!("sluice_{}_{suffix}", row.rollup),
            );
            labels.insert("rollup".to_owned(), row.rollup.clone());
            for (k, val) in &row.group {
                labels.insert(k.clone(), val.clone());
            }
            if let Some(c) = cond {
                labels.insert("condition".to_owned(), c.to_string());
            }
            out.entry(labels)
                .or_default()
                .insert((row.start + row.step) * 1000, *v);
        }
    }
    out
}

/// `/api/v1/export` of a series selector, parsed.
fn export(vm: &VmServer, selector: &str) -> Series {
    let body = ureq::get(&format!("{}/api/v1/export", vm.http))
        .timeout(Duration::from_secs(10))
        .query("match[]", selector)
        .call()
        .unwrap_or_else(|e| panic!("export {selector}: {e}"))
        .into_string()
        .unwrap();
    let mut out = Series::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let labels: BTreeMap<String, String> = v["metric"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        let values = v["values"].as_array().unwrap();
        let times = v["timestamps"].as_array().unwrap();
        let samples = out.entry(labels).or_default();
        for (t, x) in times.iter().zip(values) {
            let x = x
                .as_f64()
                .unwrap_or_else(|| panic!("a value that is no number: {x}"));
            if let Some(old) = samples.insert(t.as_i64().unwrap(), x) {
                assert_eq!(old, x, "two values at one timestamp in {line}");
            }
        }
    }
    out
}

/// Polls the export until it equals `expected` (VictoriaMetrics makes rows searchable within
/// seconds), at most 30 s; then asserts equality, showing the difference.
fn wait_export(vm: &VmServer, selector: &str, expected: &Series) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = export(vm, selector);
        if got == *expected || Instant::now() > deadline {
            assert_eq!(got, *expected, "what {selector} reads back");
            return;
        }
        thread::sleep(Duration::from_millis(250));
    }
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn timeouts() -> (Duration, Duration) {
    (Duration::from_secs(2), Duration::from_secs(10))
}

#[test]
fn remote_write_rows_read_back_exact() {
    let Some(vm) = server("remote_write_rows_read_back_exact") else {
        return;
    };
    let r = unique("rw");
    let rows = sample_rows(&r, base(), 3);
    let (c, t) = timeouts();
    let mut sink = RemoteWriteSink::new(&format!("{}/api/v1/write", vm.http), c, t, vec![]);
    sink.send(&rows).unwrap();
    let expected = expected_prometheus(&rows);
    assert_eq!(expected.len(), 10, "2 groups x 5 aggregates");
    wait_export(vm, &format!("{{rollup=\"{r}\"}}"), &expected);
}

#[test]
fn graphite_rows_read_back_exact() {
    let Some(vm) = server("graphite_rows_read_back_exact") else {
        return;
    };
    let r = unique("gr");
    let start = base();
    let mut rows = sample_rows(&r, start, 2);
    // Not finite: not sent.
    rows[0].values[4].1 = Some(f64::NAN);
    let (c, t) = timeouts();
    GraphiteSink::new(&vm.graphite, c, t).send(&rows).unwrap();
    // `sluice.R.PATH.STATUS.AGG`, each node escaped; a condition as its fixed hash.
    let hash = condition_hash(COND);
    assert_eq!(
        hash, "fd12e84e",
        "the condition hash of a name never changes"
    );
    let mut expected = Series::new();
    for row in &rows {
        let nodes: Vec<&str> = match row.group[0].1.as_str() {
            "/book" => vec!["_book", "200"],
            _ => vec!["_a_b", "null"],
        };
        for ((_, value), (_, suffix, cond)) in row.values.iter().zip(AGGS) {
            let Some(v) = value.filter(|v| v.is_finite()) else {
                continue;
            };
            let last = match cond {
                Some(_) => format!("{suffix}_{hash}"),
                None => suffix.to_string(),
            };
            let name = format!("sluice.{r}.{}.{}.{last}", nodes[0], nodes[1]);
            expected
                .entry(BTreeMap::from([("__name__".to_owned(), name)]))
                .or_default()
                .insert((row.start + 10) * 1000, v);
        }
    }
    assert_eq!(expected.len(), 10);
    wait_export(
        vm,
        &format!("{{__name__=~\"sluice[.]{r}[.].*\"}}"),
        &expected,
    );
}

#[test]
fn prometheus_text_imports_latest_step() {
    let Some(vm) = server("prometheus_text_imports_latest_step") else {
        return;
    };
    let r = unique("pt");
    let start = base();
    let rows = sample_rows(&r, start, 3);
    let text = prometheus_text(&rows);
    assert!(text.contains(&format!("# TYPE sluice_{r}_count gauge\n")));
    ureq::post(&format!("{}/api/v1/import/prometheus", vm.http))
        .timeout(Duration::from_secs(10))
        .send_string(&text)
        .unwrap();
    // Each series' latest step only: the p95 of the second group last had a value in step 2
    // (step 3 has none), and is exposed with step 2's timestamp.
    let mut expected = expected_prometheus(&rows);
    for samples in expected.values_mut() {
        let last = samples.pop_last().unwrap();
        *samples = BTreeMap::from([last]);
    }
    let p95 = expected
        .iter()
        .find(|(l, _)| l["__name__"].ends_with("p95_duration_ms") && l["path"] == "/a b")
        .unwrap();
    assert_eq!(
        *p95.1.keys().next().unwrap(),
        (start + 30) * 1000,
        "step 2's end"
    );
    wait_export(vm, &format!("{{rollup=\"{r}\"}}"), &expected);
}

/// Rows kept in memory: one rollup, served by step start.
struct Rows {
    rollup: String,
    rows: Vec<RollupRow>,
}

impl RowSource for Rows {
    fn rollups(&self) -> Vec<(String, i64)> {
        vec![(self.rollup.clone(), 10), ("other".to_owned(), 10)]
    }
    fn rows(&self, rollup: &str, from: i64, to: i64) -> Result<Vec<RollupRow>, String> {
        assert_eq!(rollup, self.rollup, "only the configured rollups are read");
        Ok(self
            .rows
            .iter()
            .filter(|r| r.start >= from && r.start < to)
            .cloned()
            .collect())
    }
}

/// A port with nothing listening (bound once, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain TCP relay from `port` to VictoriaMetrics' HTTP port: the receiver "coming up" on the
/// exporter's address. Runs until the test process ends.
fn relay(port: u16, vm: &VmServer) {
    let target = vm.http.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("binding the relay port");
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(upstream) = TcpStream::connect(&target) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if to.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            };
            pipe(client.try_clone().unwrap(), upstream.try_clone().unwrap());
            pipe(upstream, client);
        }
    });
}

fn loop_config(port: u16, start: i64) -> ExporterConfig {
    let mut config = ExporterConfig::new(
        SinkConfig::RemoteWrite {
            url: format!("http://127.0.0.1:{port}/api/v1/write"),
            headers: vec![],
        },
        start,
    );
    config.delay = Duration::ZERO;
    config.poll_interval = Duration::from_millis(50);
    config.backoff_initial = Duration::from_millis(50);
    config.backoff_max = Duration::from_millis(400);
    config.connect_timeout = Duration::from_millis(500);
    config.timeout = Duration::from_secs(5);
    config
}

#[test]
fn exporter_sink_down_then_up_delivers_every_row() {
    let Some(vm) = server("exporter_sink_down_then_up_delivers_every_row") else {
        return;
    };
    let r = unique("loop");
    let start = base();
    let rows = sample_rows(&r, start, 6);
    let port = free_port();
    let mut config = loop_config(port, start);
    config.rollups = Some(vec![r.clone()]);
    config.batch_rows = 4; // 2 steps a batch: 3 batches
    let exporter = Exporter::start(
        config,
        Arc::new(Rows {
            rollup: r.clone(),
            rows: rows.clone(),
        }),
    )
    .unwrap();
    wait_until("3 failed attempts", Duration::from_secs(20), || {
        exporter.stats().failed_attempts >= 3
    });
    let down = exporter.stats();
    assert_eq!(down.sent_rows, 0);
    assert_eq!(down.queue_len, 3, "{down:?}");
    assert!(
        down.last_error
            .as_deref()
            .unwrap_or("")
            .contains("remote write"),
        "{down:?}"
    );
    let progress = exporter.progress();
    assert!(
        progress.len() == 1 && progress[0].0 == r && progress[0].1 >= start + 60,
        "every step queued once: {progress:?}"
    );

    relay(port, vm);
    assert!(
        exporter.flush(Duration::from_secs(30)),
        "{:?}",
        exporter.stats()
    );
    let up = exporter.stats();
    assert!(up.sent_rows >= 12, "{up:?}");
    assert_eq!(up.sent_batches, up.sent_rows / 4);
    assert!(up.failed_attempts >= 3);
    assert_eq!(
        (up.dropped_batches, up.rejected_batches, up.queue_len),
        (0, 0, 0)
    );
    wait_export(
        vm,
        &format!("{{rollup=\"{r}\"}}"),
        &expected_prometheus(&rows),
    );
    exporter.stop();
}

#[test]
fn exporter_full_queue_drops_oldest_and_counts() {
    let Some(vm) = server("exporter_full_queue_drops_oldest_and_counts") else {
        return;
    };
    let r = unique("full");
    let start = base();
    let mut rows = sample_rows(&r, start, 10);
    rows.retain(|row| row.group[0].1 == "/book"); // one row a step
    let port = free_port();
    let mut config = loop_config(port, start);
    config.rollups = Some(vec![r.clone()]);
    config.batch_rows = 1; // a batch a step: 10 batches
    config.queue_capacity = 3;
    let exporter = Exporter::start(
        config,
        Arc::new(Rows {
            rollup: r.clone(),
            rows: rows.clone(),
        }),
    )
    .unwrap();
    wait_until(
        "every step queued and a failed attempt",
        Duration::from_secs(20),
        || {
            exporter
                .progress()
                .first()
                .is_some_and(|p| p.1 >= start + 100)
                && exporter.stats().failed_attempts >= 1
        },
    );
    let full = exporter.stats();
    assert_eq!(
        (
            full.dropped_batches,
            full.dropped_rows,
            full.queue_len,
            full.sent_rows
        ),
        (7, 7, 3, 0),
        "{full:?}"
    );

    relay(port, vm);
    assert!(
        exporter.flush(Duration::from_secs(30)),
        "{:?}",
        exporter.stats()
    );
    let up = exporter.stats();
    assert_eq!(
        (up.sent_batches, up.dropped_batches, up.queue_len),
        (3, 7, 0),
        "{up:?}"
    );
    // What arrived: the newest two steps, and a third (the one being sent when the queue
    // filled, or the next newest).
    let deadline = Instant::now() + Duration::from_secs(30);
    let steps = loop {
        let got = export(vm, &format!("sluice_{r}_count"));
        let steps: BTreeSet<i64> = got
            .values()
            .flat_map(|s| s.keys().map(|t| (t / 1000 - 10 - start) / 10))
            .collect();
        if steps.len() >= 3 || Instant::now() > deadline {
            break steps;
        }
        thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(steps.contains(&8) && steps.contains(&9), "{steps:?}");
    assert!(steps.contains(&0) || steps.contains(&7), "{steps:?}");
    exporter.stop();
}

#[test]
fn exporter_graphite_sink_and_rejected_batches() {
    let Some(vm) = server("exporter_graphite_sink_and_rejected_batches") else {
        return;
    };
    // Graphite through the loop.
    let r = unique("gloop");
    let start = base();
    let rows = sample_rows(&r, start, 3);
    let mut config = loop_config(0, start);
    config.sink = SinkConfig::Graphite {
        addr: vm.graphite.clone(),
    };
    config.rollups = Some(vec![r.clone()]);
    let exporter = Exporter::start(
        config,
        Arc::new(Rows {
            rollup: r.clone(),
            rows: rows.clone(),
        }),
    )
    .unwrap();
    wait_until("6 rows sent", Duration::from_secs(20), || {
        exporter.stats().sent_rows == 6
    });
    exporter.stop();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = export(vm, &format!("{{__name__=~\"sluice[.]{r}[.].*\"}}"));
        let samples: usize = got.values().map(|s| s.len()).sum();
        // 6 rows x 5 aggregates, less p95's missing value in step 2 of the second group.
        if samples == 29 {
            break;
        }
        assert!(Instant::now() < deadline, "{samples} samples: {got:?}");
        thread::sleep(Duration::from_millis(250));
    }

    // A 4xx (here: a path VictoriaMetrics does not serve) is rejected once, never retried.
    let r = unique("rej");
    let mut config = loop_config(0, start);
    config.sink = SinkConfig::RemoteWrite {
        url: format!("{}/api/v1/no-such-path", vm.http),
        headers: vec![],
    };
    config.rollups = Some(vec![r.clone()]);
    let exporter = Exporter::start(
        config,
        Arc::new(Rows {
            rollup: r.clone(),
            rows: sample_rows(&r, start, 1),
        }),
    )
    .unwrap();
    wait_until("the batch rejected", Duration::from_secs(20), || {
        exporter.stats().rejected_batches == 1
    });
    thread::sleep(Duration::from_millis(300));
    let s = exporter.stats();
    assert_eq!(
        (
            s.rejected_batches,
            s.rejected_rows,
            s.failed_attempts,
            s.sent_rows,
            s.queue_len
        ),
        (1, 2, 0, 0, 0),
        "{s:?}"
    );
    assert!(s.last_error.unwrap().contains("HTTP 4"));
}
