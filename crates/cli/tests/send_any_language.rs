//! The README's "Send from any language" snippets, run as written against a real `sluice serve`
//! (only the address moved to the test's server): curl, Node `fetch`, Go `net/http` and Python
//! `requests`. Each must exit 0 and print its acknowledgement of 2 events, and the 8 events must
//! read back.
//!
//! Tools: `curl`; Node >= 18 (`$SLUICE_NODE`, else `scripts/node20.sh`, which prints one);
//! Go (`$SLUICE_GO`, else `go` on PATH, `/usr/local/go/bin/go`, `/usr/lib/go/bin/go`); Python
//! with `requests` (`$SLUICE_PYTHON`, which `make test` sets to the package's venv, else
//! `python3`). The block is read from README.md at test time.

mod process;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use process::Server;

/// The fenced blocks of the README section `## Send from any language`: (language, text).
fn snippets(readme: &str) -> Vec<(String, String)> {
    let start = readme
        .find("## Send from any language")
        .expect("README has the section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut out = Vec::new();
    let mut rest = section;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let Some(nl) = after.find('\n') else { break };
        let lang = after[..nl].trim().to_string();
        let body = &after[nl + 1..];
        let end = body.find("```").expect("the block ends");
        out.push((lang, body[..end].to_string()));
        rest = &body[end + 3..];
    }
    out
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool from `env`, else the first of `candidates` that runs `--version` / `version`.
fn tool(env: &str, candidates: &[&str], version_arg: &str) -> Option<String> {
    if let Ok(t) = std::env::var(env) {
        return Some(t);
    }
    candidates
        .iter()
        .find(|c| {
            Command::new(c)
                .arg(version_arg)
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|c| c.to_string())
}

fn node() -> String {
    tool("SLUICE_NODE", &[], "--version").unwrap_or_else(|| {
        let out = Command::new(repo().join("scripts/node20.sh"))
            .output()
            .expect("scripts/node20.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("a node path")
            .trim()
            .to_string()
    })
}

/// Runs `program args` in `dir` (at most 120 s): its stdout, or a panic with what it said.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, String)]) -> String {
    let out = Command::new("timeout")
        .arg("120")
        .arg(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} {args:?}: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn every_snippet_sends_and_is_acknowledged() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let blocks = snippets(&readme);
    let langs: Vec<&str> = blocks.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(langs, ["sh", "js", "go", "python"], "the section's blocks");

    let dir = sluice_test_support::temp_dir("send-any-language");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!("data_dir = {data:?}\nudp = \"off\"\ngrace_ms = 100\n"),
    )
    .unwrap();
    let server = Server::start(&config, &data);
    let from = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let home = std::env::var("HOME").unwrap_or_else(|_| dir.display().to_string());

    for (lang, text) in &blocks {
        let text = text.replace("127.0.0.1:8180", &server.addr.to_string());
        let out = match lang.as_str() {
            "sh" => {
                std::fs::write(dir.join("send.sh"), &text).unwrap();
                run(&dir, "bash", &["-e", "-o", "pipefail", "send.sh"], &[])
            }
            "js" => {
                std::fs::write(dir.join("send.mjs"), &text).unwrap();
                run(&dir, &node(), &["send.mjs"], &[])
            }
            "go" => {
                let go = tool(
                    "SLUICE_GO",
                    &["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"],
                    "version",
                )
                .expect("Go: set SLUICE_GO or install it (apt-get install golang)");
                let godir = dir.join("go");
                std::fs::create_dir_all(&godir).unwrap();
                std::fs::write(godir.join("main.go"), &text).unwrap();
                let env = [
                    ("GOTOOLCHAIN", "local".to_string()),
                    ("GOFLAGS", "-mod=mod".to_string()),
                    ("HOME", home.clone()),
                ];
                run(&godir, &go, &["run", "main.go"], &env)
            }
            "python" => {
                let py = tool("SLUICE_PYTHON", &["python3"], "--version").unwrap();
                std::fs::write(dir.join("send.py"), &text).unwrap();
                run(&dir, &py, &["send.py"], &[])
            }
            other => panic!("a block in {other}"),
        };
        // `{"accepted":2,…}`, `{ accepted: 2, … }`, `200 accepted 2`, `200 {'accepted': 2, …}`.
        let flat: String = out
            .chars()
            .filter(|c| !matches!(c, '"' | '\'' | ' ' | ':'))
            .collect();
        assert!(flat.contains("accepted2"), "{lang}: {out}");
    }

    // Every snippet's two events are stored, once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    loop {
        let events = server.read(from - 1, now() + 1);
        let paths: Vec<&str> = events.iter().filter_map(|e| e["path"].as_str()).collect();
        if events.len() == 8 {
            assert_eq!(
                paths.iter().filter(|p| **p == "/a").count(),
                4,
                "{events:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline && events.len() < 8,
            "{} events: {events:?}",
            events.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.stop();
}
