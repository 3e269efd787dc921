//! Finding the Python interpreter that has the `sluice` package, and checking a transform file.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::worker;

/// How long `check` may take to import a file.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `scripts/python-setup.sh` may take (a first run builds the extension).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long probing an interpreter (`import sluice._worker`) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `cmd` to the end (killing it after `timeout`); `(success, stdout, stderr)`.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<(bool, String, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    // Drain both pipes on threads: a chatty child must not block on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = worker::wait_timeout(&mut child, timeout);
    if status.is_none() {
        let _ = child.kill();
        let _ = worker::wait_timeout(&mut child, Duration::from_secs(5));
    }
    // The pipes close when the child (and anything it started that kept them) is gone.
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    match status {
        None => Err(format!("timed out after {timeout:?}")),
        Some(s) => Ok((s.success(), out, err)),
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn can_import_worker(python: &Path) -> bool {
    let mut cmd = Command::new(python);
    cmd.args(["-c", "import sluice._worker"]);
    matches!(run_bounded(cmd, PROBE_TIMEOUT), Ok((true, _, _)))
}

/// The Python interpreter to run workers with: `$SLUICE_PYTHON` if set; else the venv that
/// `scripts/python-setup.sh` creates in this source tree (`python/.venv`), if it can
/// `import sluice._worker`; else the result of running that script (in a source tree); else an
/// error saying what to do. Cached for the process.
pub fn find_python() -> Result<PathBuf, crate::NoPython> {
    static FOUND: OnceLock<Result<PathBuf, crate::NoPython>> = OnceLock::new();
    FOUND
        .get_or_init(|| find_python_uncached().map_err(crate::NoPython))
        .clone()
}

fn find_python_uncached() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SLUICE_PYTHON").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !can_import_worker(&p) {
            return Err(format!(
                "SLUICE_PYTHON={} cannot `import sluice._worker` (run scripts/python-setup.sh and point SLUICE_PYTHON at the python it prints)",
                p.display()
            ));
        }
        return Ok(p);
    }
    let root = repo_root();
    let venv = root.join("python/.venv/bin/python");
    if venv.exists() && can_import_worker(&venv) {
        return Ok(venv);
    }
    let setup = root.join("scripts/python-setup.sh");
    if setup.exists() {
        let (ok, out, err) = run_bounded(Command::new(&setup), SETUP_TIMEOUT)
            .map_err(|e| format!("{}: {e}", setup.display()))?;
        let last = out.lines().last().unwrap_or("").trim();
        if ok && !last.is_empty() && can_import_worker(Path::new(last)) {
            return Ok(PathBuf::from(last));
        }
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!(
            "{} failed to provide a Python with the sluice package: {}",
            setup.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Err("no Python with the `sluice` package: set SLUICE_PYTHON to an interpreter that can `import sluice` (scripts/python-setup.sh creates one in python/.venv)".into())
}

/// See [`crate::Pool::check`].
pub fn check(python: &Path, file: &Path, func: &str) -> Result<(), crate::CheckError> {
    check_message(python, file, func).map_err(crate::CheckError)
}

fn check_message(python: &Path, file: &Path, func: &str) -> Result<(), String> {
    if !file.is_file() {
        return Err(format!("{}: no such file", file.display()));
    }
    let mut cmd = worker::command(python, crate::PoolConfig::default().memory_limit_bytes);
    cmd.arg("--check").arg(file).arg(func);
    match run_bounded(cmd, CHECK_TIMEOUT) {
        Err(e) => Err(format!(
            "checking {}:{func} with {}: {e}",
            file.display(),
            python.display()
        )),
        Ok((true, _, _)) => Ok(()),
        Ok((false, out, err)) => {
            // The worker prints one line on its (real) stdout; anything else went to stderr.
            let msg = out.trim();
            if msg.is_empty() {
                let last = err.lines().last().unwrap_or("no message").trim();
                Err(format!(
                    "{}: cannot check with {}: {last}",
                    file.display(),
                    python.display()
                ))
            } else {
                Err(msg.to_string())
            }
        }
    }
}
