//! The Perl Sereal reference (`Sereal::Encoder`/`Sereal::Decoder`): the codec's tests check
//! against it, and fail loudly (never skip) when it is not installed.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Panics unless `perl` runs with Sereal::Encoder, Sereal::Decoder, JSON::XS and Digest::SHA
/// (`make deps` installs them).
pub fn require_perl_sereal() {
    let ok = Command::new("perl")
        .args([
            "-MSereal::Encoder",
            "-MSereal::Decoder",
            "-MJSON::XS",
            "-MDigest::SHA",
            "-e",
            "1",
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "the Perl Sereal reference is not installed: run `make deps` (apt-get install libsereal-encoder-perl libsereal-decoder-perl libjson-xs-perl)"
    );
}

/// Runs `perl [-I lib] -e script args…` with `stdin` as its input; panics with its stderr when
/// it fails; its stdout.
pub fn run_perl(lib: Option<&Path>, script: &str, args: &[&OsStr], stdin: &[u8]) -> Vec<u8> {
    let mut cmd = Command::new("perl");
    if let Some(lib) = lib {
        cmd.arg("-I").arg(lib);
    }
    let mut child = cmd
        .arg("-e")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run perl: {e}"));
    let mut input = child.stdin.take().expect("perl stdin");
    let data = stdin.to_vec();
    // A writer thread: perl may fill its stdout pipe before it has read all of its input.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait for perl");
    writer.join().expect("perl stdin writer");
    assert!(
        out.status.success(),
        "perl failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
