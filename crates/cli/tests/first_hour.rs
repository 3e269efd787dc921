//! What a new user meets in the first hour, with the real binary: hints on stderr for
//! typos and empty ranges (read directly and through a server), the `--where` language's forms
//! and its error caret, output formats and times, `emit --tcp` refusing only the bad lines, and
//! the small answers (`--to` before `--from`, `cat --limit`, `tail` defaulting to ./data, a
//! server address without a scheme, "1 message").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{ams1, assert_success, free_port, now, spawn_serve, stdout_lines, wait_healthy, Proc};

fn temp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A store of 2,000 mixed events (WEB, CRON, LB) from `epoch` on, 400 a second.
fn write_store(dir: &Path, epoch: i64) -> Vec<serde_json::Value> {
    let cfg = sluice_gen::GenConfig {
        epoch_start: epoch,
        events_per_second: 400,
        ..sluice_gen::GenConfig::mixed(4, 2000)
    };
    common::write_store(dir, &cfg, ams1(), epoch + 10)
}

fn sluice_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run sluice")
}

fn run(args: &[&str]) -> Output {
    common::sluice(args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `cat` over `source` (`--data DIR` or `--server URL`) for the store's range plus `extra`.
fn cat(source: &[&str], epoch: i64, extra: &[&str]) -> Output {
    let (from, to) = (epoch.to_string(), (epoch + 60).to_string());
    let mut args = vec!["cat", "--from", &from, "--to", &to];
    args.extend_from_slice(source);
    args.extend_from_slice(extra);
    run(&args)
}

/// The hints a read prints, for each typo, whatever the source.
fn assert_hints(source: &[&str], epoch: i64) {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--where", "stauts >= 500"],
            "field `stauts` never seen in this range; did you mean `status`?",
        ),
        (
            &["--select", "nope"],
            "field `nope` never seen in this range",
        ),
        (
            &["--type", "web"],
            "no events of type `web` in this range; types here: CRON, LB, WEB",
        ),
        (
            &["--type", "WEB", "--where", "status >= \"500\""],
            "`status` holds numbers in this range but is compared with a quoted string",
        ),
    ];
    for (extra, want) in cases {
        let out = cat(source, epoch, extra);
        assert!(
            out.status.success(),
            "{extra:?}: exit 0 with hints: {}",
            stderr(&out)
        );
        let err = stderr(&out);
        assert!(
            err.lines()
                .any(|l| l.starts_with("sluice: hint: ") && l.contains(want)),
            "{source:?} {extra:?}: want {want:?} in:\n{err}"
        );
    }
    assert!(stderr(&cat(source, epoch, &["--type", "web"])).contains("did you mean `WEB`?"));
    let dc = stderr(&cat(source, epoch, &["--dc", "AMS1"]));
    assert!(
        dc.contains("holds no events of dc `AMS1`; dcs here: ams1"),
        "{dc}"
    );
    // A range long gone: said, with the retention.
    let old = run(&[
        &["cat", "--from", "1000000000", "--to", "1000000060"][..],
        source,
    ]
    .concat());
    assert_success(&old);
    assert!(
        stderr(&old).contains("older than the retention of 10 days"),
        "{}",
        stderr(&old)
    );
    // A good read says nothing extra.
    let fine = cat(
        source,
        epoch,
        &["--type", "WEB", "--where", "status >= 500"],
    );
    assert_success(&fine);
    assert!(!stderr(&fine).contains("hint"), "{}", stderr(&fine));
    assert!(!stdout_lines(&fine).is_empty());
}

/// A tail gets the typo hints once it has read its history (and never "no events matched").
fn assert_tail_hints(source: &[&str], epoch: i64) {
    let from = epoch.to_string();
    for (extra, want) in [
        (&["--type", "web"][..], "no events of type `web`"),
        (
            &["--where", "stauts >= 500"][..],
            "field `stauts` never seen in this range; did you mean `status`?",
        ),
    ] {
        let args = [
            &["tail", "--from", &from, "--until", "+3s"][..],
            source,
            extra,
        ]
        .concat();
        let out = run(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let hints: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("sluice: hint: "))
            .collect();
        assert_eq!(hints.len(), 1, "{args:?}: once: {err}");
        assert!(hints[0].contains(want), "{args:?}: {err}");
    }
}

#[test]
fn typos_and_empty_ranges_get_hints_from_a_store_and_from_a_server() {
    let dir = temp("fh-hints");
    let epoch = now() - 120;
    write_store(&dir, epoch);
    assert_hints(&["--data", dir.to_str().expect("path")], epoch);

    assert_tail_hints(&["--data", dir.to_str().expect("path")], epoch);

    let port = free_port();
    let server = serve(&dir, port);
    // No scheme in the address: `cat --server HOST:PORT` works as `http://HOST:PORT`.
    assert_hints(&["--server", &format!("127.0.0.1:{port}")], epoch);
    assert_tail_hints(&["--server", &format!("127.0.0.1:{port}")], epoch);
    // The HTTP API says hints only to clients that ask (`hints=1`): other consumers of the
    // NDJSON never see an extra line.
    let get = |extra: &str| {
        let url = format!(
            "http://127.0.0.1:{port}/v1/events?from={epoch}&to={}&type=web{extra}",
            epoch + 60
        );
        ureq::get(&url)
            .call()
            .expect("GET")
            .into_string()
            .expect("body")
    };
    assert_eq!(get(""), "", "no trailer without hints=1");
    let hinted = get("&hints=1");
    let trailer: serde_json::Value = serde_json::from_str(hinted.trim()).expect("trailer");
    assert!(
        trailer["_sluice"]["hints"][0]
            .as_str()
            .is_some_and(|h| h.contains("no events of type `web`")),
        "{hinted}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn serve(dir: &Path, port: u16) -> Proc {
    serve_tcp(dir, port, None)
}

fn serve_tcp(dir: &Path, port: u16, tcp: Option<u16>) -> Proc {
    let http = format!("127.0.0.1:{port}");
    let tcp = tcp.map_or("off".to_owned(), |p| format!("127.0.0.1:{p}"));
    let server = spawn_serve(&[
        "--data",
        dir.to_str().expect("path"),
        "--http",
        &http,
        "--tcp",
        &tcp,
        "--udp",
        "off",
        "--grace",
        "0.2",
    ]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(2))
        .build();
    wait_healthy(
        &agent,
        &format!("http://{http}"),
        Instant::now() + Duration::from_secs(20),
        Duration::from_millis(50),
    );
    server
}

#[test]
fn where_language_forms_errors_and_help() {
    let dir = temp("fh-where");
    let epoch = now() - 120;
    write_store(&dir, epoch);
    let data = ["--data", dir.to_str().expect("path")];
    let same = |a: &str, b: &str| {
        let (x, y) = (
            cat(&data, epoch, &["--where", a]),
            cat(&data, epoch, &["--where", b]),
        );
        assert_success(&x);
        assert_success(&y);
        assert!(!stdout_lines(&x).is_empty(), "{a} matched nothing");
        assert!(stdout_lines(&x) == stdout_lines(&y), "{a} vs {b}");
    };
    same(
        "status >= 500 AND NOT method == 'GET'",
        "status >= 500 and not method == 'GET'",
    );
    same("status in (500, 503)", "status in [500, 503]");
    same("path contains '/api/v1/'", "path ~ '/api/v1/'");
    same("path CONTAINS '.html?'", "path ~ '[.]html[?]'");

    let bad = cat(&data, epoch, &["--where", "status >= 500 & path ~ 'x'"]);
    assert_eq!(bad.status.code(), Some(1));
    let err = stderr(&bad);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].contains("--where") && lines[0].contains("column 15"),
        "{err}"
    );
    assert_eq!(lines[1], "  status >= 500 & path ~ 'x'", "{err}");
    assert_eq!(lines[2], "                ^", "{err}");
    assert!(err.contains("hint: use `and`"), "{err}");
    assert!(err.contains("sluice help where"), "{err}");

    let help = run(&["help", "where"]);
    assert_success(&help);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.starts_with("# Choosing events: `--where` and `--select`"),
        "{text}"
    );
    assert!(text.contains("contains") && text.contains("in (500, 502, 503)"));
    for cmd in ["cat", "tail"] {
        let h = run(&[cmd, "--help"]);
        assert!(
            String::from_utf8_lossy(&h.stdout).contains("sluice help where"),
            "{cmd} --help links the query guide"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn output_formats_and_times() {
    let dir = temp("fh-format");
    // 2026-11-24T09:30:00Z
    let epoch = 1_795_512_600;
    let written = write_store(&dir, epoch);
    let data = ["--data", dir.to_str().expect("path")];
    // Not a terminal: json by default, byte for byte the stored events.
    let json = cat(&data, epoch, &["--limit", "3"]);
    assert_success(&json);
    let got: Vec<serde_json::Value> = stdout_lines(&json)
        .iter()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(got.len(), 3, "--limit 3");
    assert!(got
        .iter()
        .all(|e| e["epoch"] == epoch && e.get("time").is_none()));
    assert!(written.len() > 3);

    let pretty = cat(&data, epoch, &["--format", "pretty", "--limit", "1"]);
    let line = stdout_lines(&pretty).remove(0);
    assert!(line.starts_with("2026-11-24T09:30:00Z "), "{line}");
    assert!(
        !line.contains('\x1b'),
        "no color when not a terminal: {line:?}"
    );
    let paris = cat(
        &data,
        epoch,
        &["--format", "logfmt", "--tz", "Europe/Paris", "--limit", "1"],
    );
    let line = stdout_lines(&paris).remove(0);
    assert!(
        line.starts_with("time=2026-11-24T10:30:00+01:00 type="),
        "{line}"
    );
    let table = cat(
        &data,
        epoch,
        &[
            "--format",
            "table",
            "--type",
            "WEB",
            "--select",
            "status,path",
            "--limit",
            "5",
        ],
    );
    let rows = stdout_lines(&table);
    assert_eq!(rows.len(), 6, "a header and 5 rows: {rows:?}");
    assert!(
        rows[0].starts_with("STATUS") && rows[0].contains("PATH"),
        "{rows:?}"
    );

    // Time input: local date-times (UTC or --tz), milliseconds, weeks.
    let all = cat(&data, epoch, &[]).stdout;
    for (from, to, tz) in [
        ("2026-11-24T09:30", "2026-11-24T09:31", "UTC"),
        ("2026-11-24T09:30:00", "2026-11-24T09:31:00", "UTC"),
        ("2026-11-24T10:30", "2026-11-24T10:31", "+01:00"),
        ("1795512600000", "1795512660000", "UTC"),
    ] {
        let out = run(&[
            "cat", "--data", data[1], "--from", from, "--to", to, "--tz", tz,
        ]);
        assert_success(&out);
        assert_eq!(out.stdout, all, "{from}..{to} in {tz}");
    }
    let weeks = run(&["cat", "--data", data[1], "--from", "-1w", "--limit", "1"]);
    assert_success(&weeks);

    // On a terminal (a pty from util-linux `script`): pretty and colored by default; NO_COLOR
    // turns the color off.
    let on_tty = |no_color: bool| -> Option<String> {
        let cmd = format!(
            "{} cat --data {} --from {epoch} --to {} --limit 1",
            env!("CARGO_BIN_EXE_sluice"),
            data[1],
            epoch + 60
        );
        let mut c = Command::new("script");
        c.args(["-qc", &cmd, "/dev/null"]).env_remove("NO_COLOR");
        if no_color {
            c.env("NO_COLOR", "1");
        }
        let out = c.output().ok().filter(|o| o.status.success())?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    match (on_tty(false), on_tty(true)) {
        (Some(color), Some(plain)) => {
            assert!(
                color.contains("\x1b[2m2026-11-24T09:30:00Z\x1b[0m"),
                "{color:?}"
            );
            assert!(plain.starts_with("2026-11-24T09:30:00Z "), "{plain:?}");
            assert!(!plain.contains('\x1b'), "{plain:?}");
        }
        _ => println!("SKIPPED: the terminal check needs `script` (util-linux)"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn small_answers_to_range_tail_limit_and_plurals() {
    let dir = temp("fh-small");
    let epoch = now() - 120;
    write_store(&dir, epoch);
    let data = ["--data", dir.to_str().expect("path")];

    // --to before --from: one clear line, from the CLI and through a server.
    let port = free_port();
    let tcp_port = free_port();
    let server = serve_tcp(&dir, port, Some(tcp_port));
    let addr = format!("127.0.0.1:{port}");
    for source in [&data[..], &["--server", &addr][..]] {
        let out = run(&[&["cat", "--from", "-1h", "--to", "-2h"][..], source].concat());
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains("--to (") && err.contains("is before --from"),
            "{err}"
        );
        assert!(!err.contains('{'), "no raw JSON: {err}");
    }
    // The server's own 400 is a readable message too (shown without its JSON wrapping).
    let raw = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "cat", "--server", &addr, "--from", "-1h", "--where", "status >",
        ])
        .output()
        .expect("run");
    assert_eq!(raw.status.code(), Some(1));
    assert!(!stderr(&raw).contains("{\""), "{}", stderr(&raw));

    // cat --limit over a server too.
    let limited = run(&[
        &["cat", "--from", &epoch.to_string(), "--limit", "7"][..],
        &["--server", &addr],
    ]
    .concat());
    assert_success(&limited);
    assert_eq!(stdout_lines(&limited).len(), 7);

    // emit: one line, one message; plurals right.
    let mut emit = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["emit", "--http", &addr])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("emit");
    emit.stdin
        .take()
        .expect("stdin")
        .write_all(format!("{{\"type\":\"ONE\",\"epoch\":{}}}\n", now()).as_bytes())
        .expect("write");
    let out = emit.wait_with_output().expect("emit");
    assert_success(&out);
    assert!(
        stderr(&out).contains("sent 1 event in 1 message,"),
        "{}",
        stderr(&out)
    );
    drop(server);

    // tail without --data or --server reads ./data, as cat does.
    let cwd = temp("fh-small-cwd");
    std::fs::create_dir_all(&cwd).expect("mkdir");
    std::fs::rename(&dir, cwd.join("data")).expect("move");
    let from = epoch.to_string();
    let tail = sluice_in(&cwd, &["tail", "--from", &from, "--limit", "5"]);
    assert_success(&tail);
    assert!(stdout_lines(&tail).len() >= 5, "{}", stderr(&tail));
    let cat_here = sluice_in(&cwd, &["cat", "--from", &from, "--limit", "5"]);
    assert_success(&cat_here);
    let nowhere = sluice_in(
        &cwd.join("data"),
        &["tail", "--from", &from, "--limit", "5"],
    );
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(
        stderr(&nowhere).contains("--data DIR, --store URL or --server URL"),
        "{}",
        stderr(&nowhere)
    );

    let ignore = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.gitignore"))
        .expect(".gitignore");
    assert!(ignore
        .lines()
        .any(|l| l.trim() == "/data/" || l.trim() == "data/"));
    let _ = std::fs::remove_dir_all(&cwd);
}

#[test]
fn emit_tcp_refuses_only_the_bad_lines_with_their_numbers_and_reasons() {
    let dir = temp("fh-emit");
    let (port, tcp_port) = (free_port(), free_port());
    let server = serve_tcp(&dir, port, Some(tcp_port));
    let t = now();
    let input = format!(
        "{{\"type\":\"EMIT\",\"epoch\":{t},\"id\":1}}\n{{bad\n\n{{\"epoch\":{t},\"id\":4}}\n{{\"type\":\"EMIT\",\"epoch\":{t},\"id\":5}}\n"
    );
    for (flag, addr) in [
        ("--tcp", format!("127.0.0.1:{tcp_port}")),
        ("--http", format!("127.0.0.1:{port}")),
    ] {
        let mut emit = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["emit", flag, &addr])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("emit");
        emit.stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write");
        let out = emit.wait_with_output().expect("emit");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag}: refusals exit 1: {err}");
        assert!(err.contains("2 accepted, 2 refused"), "{flag}: {err}");
        assert!(err.contains("line 2: refused:"), "{flag}: {err}");
        assert!(
            err.contains("line 4: refused: missing_type no \"type\" field"),
            "{flag}: {err}"
        );
    }
    // Both good lines of both runs are stored, once per run.
    std::thread::sleep(Duration::from_millis(1500));
    let out = run(&[
        "cat",
        "--server",
        &format!("127.0.0.1:{port}"),
        "--from",
        &(t - 1).to_string(),
        "--type",
        "EMIT",
    ]);
    let mut ids: Vec<i64> = stdout_lines(&out)
        .iter()
        .map(|l| common::id_of(l))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 1, 5, 5], "{}", stderr(&out));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
