//! The README's "Try it" block, run as a new user would: each command in order, in a bash
//! script, with only the ports, the data directory and the binary moved to the test's own (so it
//! runs beside anything else on this machine). Every command must succeed and what the README
//! promises must show: the live `tail --where` prints matching events while `gen --live` runs,
//! the range read finds events, the codec line prints the bytes its comment names.
//!
//! The block is read from README.md at test time: edit the README and this test runs the edit.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;

/// The command lines of the README's first ```sh block after `## Try it`, and the comment lines.
fn try_it_block(readme: &str) -> Vec<String> {
    let start = readme
        .find("## Try it")
        .expect("README has a Try it section");
    let block = &readme[start..];
    let open = block.find("```sh\n").expect("a ```sh block") + "```sh\n".len();
    let len = block[open..].find("```").expect("the block ends");
    block[open..open + len].lines().map(str::to_owned).collect()
}

/// `line` without its trailing `# comment` (the README's comments follow two or more spaces).
fn strip_comment(line: &str) -> &str {
    match line.find("  #") {
        Some(i) => line[..i].trim_end(),
        None => line.trim_end(),
    }
}

#[test]
fn readme_try_it_commands_work_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let lines = try_it_block(&readme);
    let work = std::env::temp_dir().join(format!("sluice-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("work dir");
    let (http, tcp, udp, statsd) = (free_port(), free_port(), free_port(), free_port());
    let ports = [
        ("8180", http),
        ("8181", tcp),
        ("8182", udp),
        ("8125", statsd),
    ];

    let mut script = String::from("set -u\n");
    script += &format!("cd '{}'\n", work.display());
    let mut expected_hex = None;
    let mut steps = Vec::new();
    for line in &lines {
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix('#') {
            // `#   3df3…   (what Sereal::Encoder writes …)`: the bytes the line above prints.
            if let Some(hex) = comment.split_whitespace().next() {
                if hex.chars().all(|c| c.is_ascii_hexdigit()) && hex.len() > 8 {
                    expected_hex = Some(hex.to_owned());
                }
            }
            continue;
        }
        let mut cmd = strip_comment(line).to_owned();
        if cmd.is_empty() || cmd.starts_with("cargo build") {
            continue;
        }
        if cmd.starts_with("S=") {
            script += &format!("S='{}'\n", env!("CARGO_BIN_EXE_sluice"));
            continue;
        }
        for (from, to) in ports {
            cmd = cmd.replace(&format!("127.0.0.1:{from}"), &format!("127.0.0.1:{to}"));
            // bash's /dev/udp/HOST/PORT (the statsd line).
            cmd = cmd.replace(&format!("127.0.0.1/{from}"), &format!("127.0.0.1/{to}"));
        }
        cmd = cmd.replace("./data", &format!("{}/data", work.display()));
        let n = steps.len();
        if cmd.contains("$S serve") {
            let bg = cmd
                .strip_suffix('&')
                .expect("serve runs in the background")
                .trim_end();
            script += &format!(
                "{bg} --http 127.0.0.1:{http} --tcp 127.0.0.1:{tcp} --udp 127.0.0.1:{udp} 2> serve.err &\n\
                 for _ in $(seq 100); do curl -fsS http://127.0.0.1:{http}/healthz >/dev/null 2>&1 && break; sleep 0.1; done\n"
            );
        } else if cmd.ends_with('&') {
            script += &format!("{cmd}\n");
        } else {
            if cmd.contains("store check") {
                // "(server stopped)": stop what the block started in the background.
                script += "kill -TERM $(jobs -p) 2>/dev/null; wait\n";
            }
            if cmd.contains("$S tail") {
                // A live tail runs until interrupted: give it 10 s of the live stream.
                cmd = format!("timeout -s INT 10 {cmd}");
            }
            script += &format!("( {cmd} ) > out.{n} 2> err.{n}; echo \"{n} $?\" >> status\n");
        }
        steps.push(cmd);
    }
    script += "kill -TERM $(jobs -p) 2>/dev/null; wait\n";

    let out = Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .output()
        .expect("bash");
    let read = |name: String| std::fs::read_to_string(work.join(name)).unwrap_or_default();
    let status: BTreeMap<usize, i32> = read("status".into())
        .lines()
        .filter_map(|l| {
            let (n, code) = l.split_once(' ')?;
            Some((n.parse().ok()?, code.parse().ok()?))
        })
        .collect();
    let report = || {
        let mut r = format!(
            "script:\n{script}\nbash: {:?}\n{}\nserve.err:\n{}\n",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            read("serve.err".into())
        );
        for (n, cmd) in steps.iter().enumerate() {
            r += &format!(
                "--- {n}: {cmd}\nexit {:?}\nstdout:\n{}\nstderr:\n{}\n",
                status.get(&n),
                read(format!("out.{n}")),
                read(format!("err.{n}"))
            );
        }
        r
    };
    for (n, cmd) in steps.iter().enumerate() {
        // Background steps (`… &`) write no status; every other step must have run.
        let Some(code) = status.get(&n) else {
            assert!(
                cmd.ends_with('&'),
                "step {n} never finished (no exit status): {cmd}\n{}",
                report()
            );
            continue;
        };
        // The tail is stopped by `timeout` (SIGINT: it prints its cursor and exits).
        let ok = *code == 0 || (cmd.contains("$S tail") && [124, 130].contains(code));
        assert!(ok, "step {n} failed: {cmd}\n{}", report());
    }
    let output_of = |needle: &str| -> String {
        let n = steps
            .iter()
            .position(|c| c.contains(needle))
            .unwrap_or_else(|| panic!("no README step with {needle}\n{}", report()));
        read(format!("out.{n}"))
    };

    // The live tail with --where printed matching events while gen --live ran.
    let tailed = output_of("$S tail");
    let events: Vec<serde_json::Value> = tailed
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(!events.is_empty(), "the tail printed nothing\n{}", report());
    for e in &events {
        assert!(e["status"].as_i64().unwrap_or(0) >= 500, "{e}");
    }
    // The range read found WEB events (their paths, through jq).
    assert!(
        !output_of("$S cat").trim().is_empty(),
        "cat printed nothing\n{}",
        report()
    );
    assert!(output_of("/metrics").contains("sluice_events_in_total"));
    // The codec line prints what its comment says Sereal::Encoder writes.
    let hex = expected_hex.expect("the README names the bytes of the encode line");
    assert_eq!(output_of("sereal encode").trim(), hex, "{}", report());
    assert_eq!(output_of("--select 'type").lines().count(), 3);
    let _ = std::fs::remove_dir_all(&work);
}
