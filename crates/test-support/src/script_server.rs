//! Servers the project's own scripts start for tests (`scripts/seaweedfs.sh`,
//! `scripts/victoriametrics.sh`): `SCRIPT start` run under a file lock shared by the test
//! binaries (so two binaries never start it twice), its `export NAME=value` lines read back. The
//! server is left running for the next test binary; `make test` stops it at the end.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::Command;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A script's state directory: `$env_var` when set, else `target/<name>` in the repository.
pub fn home(env_var: &str, name: &str) -> PathBuf {
    std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target").join(name))
}

/// Runs `scripts/<script> start` under `<home>/lock` and returns what it exported; panics (with
/// the script's output and how to skip, `skip_var=1`) when it fails.
pub fn start(script: &str, home: &std::path::Path, skip_var: &str) -> HashMap<String, String> {
    std::fs::create_dir_all(home).unwrap_or_else(|e| panic!("creating {}: {e}", home.display()));
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(home.join("lock"))
        .unwrap_or_else(|e| panic!("opening {}/lock: {e}", home.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("locking {}/lock: {e}", home.display()));
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join(script))
        .arg("start")
        .output()
        .unwrap_or_else(|e| panic!("running scripts/{script} start: {e}"));
    let _ = lock.unlock();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/{script} start failed (set {skip_var}=1 to skip these tests):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `vars[name]`; panics naming the script when it printed none.
pub fn var(vars: &HashMap<String, String>, script: &str, name: &str) -> String {
    vars.get(name)
        .unwrap_or_else(|| panic!("scripts/{script} start printed no {name}"))
        .clone()
}
