//! The bad day for the embedded store, with real processes: one flipped blob header in
//! `blobs.log` and one flipped meta record in `meta.log`, then `sluice cat --data`, a restarted
//! `sluice serve` on the same directory (HTTP read, `/metrics`), `sluice store check` and
//! `sluice store check --repair`. Reads leave the files byte for byte as they were; every event
//! outside the damaged blob comes back, exactly once; the damage is reported everywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{ams1, cat_data, free_port, now, sluice, spawn_serve, stdout_lines, wait_healthy};

const EXIT_PARTIAL: i32 = 3;

/// Runs `sluice args`, killing it after `secs` seconds (its output is read meanwhile).
fn sluice_bounded(args: &[&str], secs: u64) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice {args:?} did not finish in {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// One event's identity: its JSON value with sorted keys (the same for the generator's line
/// and for what a reader prints).
fn canonical(v: &serde_json::Value) -> String {
    // Keys sorted: a server reads covered seconds from its column files, which keep values,
    // not key order (docs/history.md).
    fn sort(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                serde_json::Value::Object(
                    keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect(),
                )
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

/// Writes `count` events of the seconds from `epoch` into `dir` through the collector's own
/// pipeline; returns them (canonical JSON).
fn write_store(dir: &Path, epoch: i64, count: usize) -> Vec<String> {
    let cfg = sluice_gen::GenConfig {
        epoch_start: epoch,
        events_per_second: 400,
        ..sluice_gen::GenConfig::mixed(7, count)
    };
    common::write_store(dir, &cfg, ams1(), epoch + 30)
        .iter()
        .map(canonical)
        .collect()
}

/// `(offset, key)` of every record of a blobs.log (24-byte header, namespace, key, value).
fn blob_records(bytes: &[u8]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 24 <= bytes.len() {
        let ns_len = bytes[pos + 5] as usize;
        let key_len = u16::from_le_bytes([bytes[pos + 6], bytes[pos + 7]]) as usize;
        let value_len =
            u32::from_le_bytes(bytes[pos + 16..pos + 20].try_into().expect("4")) as usize;
        let key = &bytes[pos + 24 + ns_len..pos + 24 + ns_len + key_len];
        out.push((pos, String::from_utf8(key.to_vec()).expect("utf-8 key")));
        pos += 24 + ns_len + key_len + value_len;
    }
    out
}

/// `(offset, kind)` of every record of a meta.log (`crc | len | kind, payload`).
fn meta_records(bytes: &[u8]) -> Vec<(usize, u8)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 9 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().expect("4")) as usize;
        out.push((pos, bytes[pos + 8]));
        pos += 8 + len;
    }
    out
}

fn flip(path: &Path, at: usize, n: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    for b in &mut bytes[at..at + n] {
        *b ^= 0xa5;
    }
    std::fs::write(path, bytes).expect("write");
}

/// Every file under `dir` (but the server's own files) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn stdout_events(out: &Output) -> Vec<String> {
    stdout_lines(out)
        .iter()
        .map(|l| canonical(&serde_json::from_str(l).expect("json line")))
        .collect()
}

#[test]
fn damaged_store_is_read_around_reported_and_repaired() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-damage-data");
    let _ = std::fs::remove_dir_all(&dir);
    // A whole hour inside the retention, so the restarted server keeps (and never writes) it.
    let now = now();
    let hour = now - now.rem_euclid(3600) - 3600;
    let epoch = hour + 100;
    let written = write_store(&dir, epoch, 4000);
    let part = dir.join(format!("p{hour}"));
    let blobs_log = part.join("blobs.log");
    let meta_log = part.join("meta.log");

    // The blob to damage: one in the middle; its events are the only ones allowed to go.
    let records = blob_records(&std::fs::read(&blobs_log).expect("blobs.log"));
    assert!(records.len() >= 8, "{} blobs", records.len());
    let (victim_at, victim_key) = records[records.len() / 2].clone();
    let lost: Vec<String> = {
        let store = sluice_store::EmbeddedStore::open_read_only(&dir).expect("open");
        let key_epoch: i64 = victim_key
            .split(':')
            .next()
            .and_then(|e| e.parse().ok())
            .expect("epoch");
        let bytes = sluice_store::Store::get_blob(
            &store,
            &sluice_store::Namespace::Events,
            sluice_store::BlobKey::new(key_epoch, &victim_key),
        )
        .expect("get")
        .expect("stored");
        let events = sluice_blob::Blob::parse(&bytes)
            .expect("blob")
            .decode(&sereal::Limits::default())
            .expect("decode");
        events
            .iter()
            .map(|v| canonical(&serde_json::from_str(&sereal::json::to_string(v)).expect("json")))
            .collect()
    };
    assert!(!lost.is_empty());
    let mut expected = written.clone();
    for e in &lost {
        let i = expected
            .iter()
            .position(|x| x == e)
            .expect("lost event was written");
        expected.swap_remove(i);
    }
    let expected = sorted(expected);

    // Four bytes of that blob's header (its epoch), eight bytes of an index record in the middle
    // of meta.log.
    flip(&blobs_log, victim_at + 8, 4);
    // The index record must list another blob (one that is still stored, so it can be rebuilt).
    let meta_bytes = std::fs::read(&meta_log).expect("meta.log");
    let victim_epoch = victim_key.split(':').next().expect("epoch").to_string();
    let index_adds: Vec<usize> = meta_records(&meta_bytes)
        .into_iter()
        .filter(|(at, kind)| {
            let epoch = i64::from_le_bytes(meta_bytes[at + 9..at + 17].try_into().expect("8"));
            *kind == 1 && epoch.to_string() != victim_epoch
        })
        .map(|(at, _)| at)
        .collect();
    assert!(index_adds.len() >= 4);
    flip(&meta_log, index_adds[index_adds.len() / 2] + 2, 8);
    let before = snapshot(&dir);
    let (from, to) = (hour.to_string(), (hour + 3600).to_string());

    // 1. `sluice cat --data`: everything else, the damage on stderr, exit 3, files untouched.
    let out = cat_data(&dir, &from, &to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_PARTIAL), "{stderr}");
    assert_eq!(
        sorted(stdout_events(&out)),
        expected,
        "every event outside the damaged blob, once"
    );
    assert!(
        stderr.contains("blobs.log@") && stderr.contains("meta.log@"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&victim_key) && stderr.contains("missing"),
        "the lost chunk is named: {stderr}"
    );
    assert_eq!(snapshot(&dir), before, "cat --data changed the directory");

    // `sluice tail --data`: the same events; each damaged range reported once, on stderr.
    let limit = expected.len().to_string();
    let dir_arg = dir.to_str().expect("path");
    let args = [
        "tail", "--data", dir_arg, "--from", &from, "--limit", &limit,
    ];
    let out = sluice_bounded(&args, 60);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(sorted(stdout_events(&out)), expected, "{stderr}");
    assert_eq!(stderr.matches("warning: store:").count(), 2, "{stderr}");
    assert_eq!(snapshot(&dir), before, "tail --data changed the directory");

    // 2. A restarted server on the same directory: HTTP read, warnings, metrics.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let server = spawn_serve(&[
        "--data",
        dir.to_str().expect("path"),
        "--http",
        &format!("127.0.0.1:{port}"),
        "--tcp",
        "off",
        "--udp",
        "off",
    ]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let deadline = Instant::now() + Duration::from_secs(20);
    wait_healthy(&agent, &url, deadline, Duration::from_millis(100));
    let body = agent
        .get(&format!("{url}/v1/events"))
        .query("from", &from)
        .query("to", &to)
        .call()
        .expect("GET /v1/events")
        .into_string()
        .expect("body");
    let mut events = Vec::new();
    let mut warnings = Vec::new();
    for line in body.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        match v.get("_sluice") {
            Some(s) => warnings.extend(s["warnings"].as_array().expect("warnings").iter().cloned()),
            None => events.push(canonical(&v)),
        }
    }
    assert_eq!(
        sorted(events),
        expected,
        "the server returns every event outside the damaged blob"
    );
    let keys: Vec<&str> = warnings.iter().filter_map(|w| w["key"].as_str()).collect();
    assert!(
        keys.iter()
            .any(|k| k.starts_with("store:") && k.contains("blobs.log@")),
        "{warnings:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with("store:") && k.contains("meta.log@")),
        "{warnings:?}"
    );
    assert!(keys.contains(&victim_key.as_str()), "{warnings:?}");
    let metrics = agent
        .get(&format!("{url}/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("body");
    let metric = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(metric("sluice_store_damaged_ranges_total "), 2, "{metrics}");
    assert!(metric("sluice_store_damaged_bytes_total ") >= 12);
    assert!(metric("sluice_store_index_entries_rebuilt_total ") >= 1);
    // Through the running server, `cat --data` reports the same and exits 3.
    let out = cat_data(&dir, &from, &to);
    assert_eq!(
        out.status.code(),
        Some(EXIT_PARTIAL),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sorted(stdout_events(&out)), expected);
    // A repair is refused while the server holds the directory.
    let refused = sluice(&["store", "repair", "--data", dir.to_str().expect("path")]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    drop(server);
    let after = snapshot(&dir);
    for log in [&blobs_log, &meta_log] {
        assert_eq!(
            after.get(log),
            before.get(log),
            "the server changed {}",
            log.display()
        );
    }

    // 3. `sluice store check`: one line per damaged range, exit 3, nothing changed.
    let before = snapshot(&dir);
    let out = sluice(&["store", "check", "--data", dir.to_str().expect("path")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(EXIT_PARTIAL),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("damaged: "))
            .count(),
        2,
        "{stdout}"
    );
    assert_eq!(snapshot(&dir), before, "store check changed the directory");

    // 4. `--repair`: clean copies, the originals kept; then the check is clean and the read
    //    returns the same events (the lost chunk is still named as missing: it is lost).
    let out = sluice(&[
        "store",
        "check",
        "--data",
        dir.to_str().expect("path"),
        "--repair",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("repaired: "))
            .count(),
        2,
        "{stdout}"
    );
    for log in [&blobs_log, &meta_log] {
        let name = log.file_name().and_then(|n| n.to_str()).expect("name");
        let kept: Vec<PathBuf> = std::fs::read_dir(&part)
            .expect("ls")
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{name}.damaged-")))
            })
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(
            std::fs::read(&kept[0]).ok().as_ref(),
            before.get(log),
            "original kept as is"
        );
    }
    let out = sluice(&["store", "check", "--data", dir.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = cat_data(&dir, &from, &to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(sorted(stdout_events(&out)), expected);
    assert!(!stderr.contains("store:"), "{stderr}");
    assert_eq!(
        out.status.code(),
        Some(EXIT_PARTIAL),
        "the lost chunk is still reported: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Salvaging proven payloads: a chunk whose record header lost only its CRC is
/// proven by its own `=chk` SHA-1. `sluice cat --data` returns every event (one warning names
/// the chunk as salvaged; nothing is missing), `sluice store check` reports it salvaged, not
/// damaged, `--repair` keeps it with a rewritten header, and afterwards nothing is reported.
#[test]
fn a_chunk_whose_header_crc_alone_is_damaged_is_salvaged() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-salvage-data");
    let _ = std::fs::remove_dir_all(&dir);
    let now = now();
    let hour = now - now.rem_euclid(3600) - 3600;
    let written = sorted(write_store(&dir, hour + 100, 4000));
    let part = dir.join(format!("p{hour}"));
    let blobs_log = part.join("blobs.log");
    let records = blob_records(&std::fs::read(&blobs_log).expect("blobs.log"));
    assert!(records.len() >= 8, "{} blobs", records.len());
    let (victim_at, victim_key) = records[records.len() / 2].clone();
    flip(&blobs_log, victim_at, 4); // the header CRC field, nothing else
    let before = snapshot(&dir);
    let (from, to) = (hour.to_string(), (hour + 3600).to_string());
    let data = dir.to_str().expect("path");

    // 1. A read returns every event, with one warning naming the salvaged chunk.
    let out = cat_data(&dir, &from, &to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(sorted(stdout_events(&out)), written, "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sluice: warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("Salvaged") && warnings[0].contains(&victim_key),
        "the warning names the chunk: {stderr}"
    );
    assert!(!stderr.contains("missing"), "{stderr}");
    assert_eq!(out.status.code(), Some(EXIT_PARTIAL), "{stderr}");
    assert_eq!(snapshot(&dir), before, "cat --data changed the directory");

    // 2. `store check`: salvaged, not damaged; exit 3 (a header to rewrite); nothing changed.
    let out = sluice(&["store", "check", "--data", data]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(EXIT_PARTIAL), "{stdout}");
    let salvaged: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("salvaged: "))
        .collect();
    assert_eq!(salvaged.len(), 1, "{stdout}");
    assert!(salvaged[0].contains(&victim_key), "{stdout}");
    assert!(!stdout.contains("damaged: "), "{stdout}");
    assert!(
        stdout.contains("0 ranges damaged") && stdout.contains("1 blob salvaged"),
        "{stdout}"
    );
    assert_eq!(snapshot(&dir), before, "store check changed the directory");

    // 3. `--repair` keeps the chunk with a valid header; the original is kept aside.
    let out = sluice(&["store", "check", "--data", data, "--repair"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let repaired: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("repaired: "))
        .collect();
    assert_eq!(repaired.len(), 1, "{stdout}");
    assert!(repaired[0].contains("blobs.log"), "{stdout}");
    assert!(stdout.contains("1 salvaged header rewritten"), "{stdout}");
    let after = std::fs::read(&blobs_log).expect("blobs.log");
    let mut want = before.get(&blobs_log).expect("blobs.log").clone();
    flip_bytes(&mut want, victim_at, 4);
    assert_eq!(
        after, want,
        "the header is as written, nothing else changed"
    );

    // 4. Clean afterwards: no warning, exit 0, every event.
    let out = sluice(&["store", "check", "--data", data]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains("salvaged: "), "{stdout}");
    let out = cat_data(&dir, &from, &to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(sorted(stdout_events(&out)), written);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Undoes (or applies) [`flip`] on bytes in memory.
fn flip_bytes(bytes: &mut [u8], at: usize, n: usize) {
    for b in &mut bytes[at..at + n] {
        *b ^= 0xa5;
    }
}
