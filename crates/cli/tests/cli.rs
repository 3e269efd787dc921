//! The real `sluice` binary, run as a user would.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::assert_success;

fn sluice(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    // A command that refuses its flags exits without reading: a closed pipe here is expected.
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    child.wait_with_output().expect("wait")
}

fn vectors() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.join("../../testdata/sereal/vectors")
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir.join(name)
}

/// `sluice gen --count count --seed seed` as Sereal (`protocol`, `compress`, `--dedupe`), written
/// to the temp file `name`; its path.
fn gen_sereal_file(name: &str, count: &str, seed: &str, protocol: &str, compress: &str) -> PathBuf {
    let srl = sluice(
        &[
            "gen",
            "--count",
            count,
            "--seed",
            seed,
            "--format",
            "sereal",
            "--protocol",
            protocol,
            "--compress",
            compress,
            "--dedupe",
        ],
        b"",
    );
    let file = tmp(name);
    std::fs::write(&file, &srl.stdout).expect("write");
    file
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn encode_gives_the_reference_bytes() {
    let out = sluice(
        &["sereal", "encode", "--protocol", "3", "-"],
        b"[{\"cpu\":5},{\"cpu\":99}]\n",
    );
    assert!(out.status.success());
    assert_eq!(hex(&out.stdout), "3df3726c030042516363707505512f032063");
    // Defaults: protocol 5, no compression, no dedupe.
    let out = sluice(
        &["sereal", "encode", "-"],
        b"{\"a\":\"xxxx\",\"b\":\"xxxx\"}",
    );
    assert_eq!(
        hex(&out.stdout),
        "3df3726c0500526161647878787861626478787878"
    );
    let out = sluice(
        &["sereal", "encode", "--dedupe", "-"],
        b"{\"a\":\"xxxx\",\"b\":\"xxxx\"}",
    );
    assert_eq!(hex(&out.stdout), "3df3726c0500526161647878787861622f04");
}

#[test]
fn decode_prints_json_and_dump_prints_offsets() {
    let doc = [
        0x3d, 0xf3, 0x72, 0x6c, 0x03, 0x00, 0x42, 0x28, 0x2a, 0x01, 0x63, 0x63, 0x70, 0x75, 0x05,
        0x28, 0x2a, 0x01, 0x2f, 0x05, 0x20, 0x63,
    ];
    let out = sluice(&["sereal", "decode", "-"], &doc);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "[{\"cpu\":5},{\"cpu\":99}]\n"
    );
    let out = sluice(&["sereal", "decode", "--dump", "-"], &doc);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("COPY -> 5"), "{text}");
    assert!(text.contains("VARINT 99"), "{text}");
    let out = sluice(&["sereal", "decode", "--pretty", "-"], &doc);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\n  {\n    \"cpu\": 5\n  }"));
}

#[test]
fn decode_reads_streams_and_headers() {
    // Every shared vector decodes from the command line, including one saved with a final newline.
    for dir in std::fs::read_dir(vectors()).expect("vectors") {
        for f in std::fs::read_dir(dir.expect("dir").path()).expect("subdir") {
            let f = f.expect("file").path();
            if f.extension().is_some_and(|e| e == "srl") {
                let out = sluice(&["sereal", "decode", f.to_str().expect("path")], b"");
                assert!(
                    out.status.success(),
                    "{}: {}",
                    f.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let out = sluice(
        &[
            "sereal",
            "decode",
            vectors()
                .join("ruby_test/example-stream-snappy-i.srl")
                .to_str()
                .expect("path"),
        ],
        b"",
    );
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 100);
}

#[test]
fn bad_input_is_one_line_and_exit_1() {
    for input in [
        &b"not sereal at all"[..],
        b"=\xf3rl\x03\x00\x2b\x05\x01",
        b"=\xf3rl\x03\x00\x36",
        b"",
    ] {
        let out = sluice(&["sereal", "decode", "-"], input);
        assert_eq!(out.status.code(), Some(1), "{input:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("sluice: "), "{err}");
        assert!(out.stdout.is_empty());
    }
    let out = sluice(&["sereal", "encode", "-"], b"{not json");
    assert_eq!(out.status.code(), Some(1));
    let out = sluice(
        &[
            "sereal",
            "encode",
            "--compress",
            "zlib",
            "--level",
            "12",
            "-",
        ],
        b"{}",
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn gen_is_deterministic_and_round_trips() {
    let args = [
        "gen",
        "--count",
        "300",
        "--seed",
        "5",
        "--epoch",
        "1700000000",
    ];
    let a = sluice(&args, b"");
    let b = sluice(&args, b"");
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(String::from_utf8_lossy(&a.stdout).lines().count(), 300);
    // The Sereal form holds the same events.
    let srl = sluice(
        &[
            &args[..],
            &[
                "--format",
                "sereal",
                "--protocol",
                "3",
                "--compress",
                "zlib",
                "--dedupe",
            ],
        ]
        .concat(),
        b"",
    );
    let back = sluice(&["sereal", "decode", "-"], &srl.stdout);
    let events: serde_json::Value = serde_json::from_slice(&back.stdout).expect("json");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&a.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect();
    assert_eq!(events, serde_json::Value::Array(lines));
}

#[test]
fn select_and_split() {
    let file = gen_sereal_file("events.srl", "3000", "9", "3", "zlib");
    let sel = sluice(
        &[
            "sereal",
            "decode",
            "--select",
            "type,timings.total_ms,experiments[*].id",
            file.to_str().expect("path"),
        ],
        b"",
    );
    assert_success(&sel);
    let text = String::from_utf8_lossy(&sel.stdout);
    assert_eq!(text.lines().count(), 3000);
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("line")).expect("json");
    assert!(first["experiments[*].id"].is_array());

    let prefix = tmp("chunk");
    let out = sluice(
        &[
            "sereal",
            "split",
            "--max-bytes",
            "40000",
            "--out",
            prefix.to_str().expect("path"),
            file.to_str().expect("path"),
        ],
        b"",
    );
    assert_success(&out);
    let mut total = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = line.split('\t').next().expect("path");
        let chunk = std::fs::read(path).expect("chunk");
        assert!(chunk.len() <= 40_000);
        let dec = sluice(&["sereal", "decode", path], b"");
        let v: serde_json::Value = serde_json::from_slice(&dec.stdout).expect("json");
        total += v.as_array().expect("array").len();
    }
    assert_eq!(total, 3000);
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["gen", "--count", "500000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = [0u8; 4096];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("read");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn where_filters_like_a_full_decode_would() {
    let file = gen_sereal_file("where.srl", "4000", "3", "5", "zstd");
    let all = sluice(&["sereal", "decode", file.to_str().expect("path")], b"");
    let events: Vec<serde_json::Value> = serde_json::from_slice::<serde_json::Value>(&all.stdout)
        .expect("json")
        .as_array()
        .expect("array")
        .clone();
    let expected: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["status"].as_i64().is_some_and(|s| s >= 500) && e["type"] == "WEB")
        .collect();
    assert!(!expected.is_empty());
    let out = sluice(
        &[
            "sereal",
            "decode",
            "--where",
            "status >= 500 and type == 'WEB'",
            file.to_str().expect("path"),
        ],
        b"",
    );
    assert_success(&out);
    let got: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), expected);
    let bad = sluice(
        &[
            "sereal",
            "decode",
            "--where",
            "status >=",
            file.to_str().expect("path"),
        ],
        b"",
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("column"));
}
