//! The two servers as child processes of the bench: started on free loopback ports with their
//! output in a log file, awaited until they answer, stopped by their own PID (SIGTERM, then
//! SIGKILL after a grace), and killed when dropped so that an error never leaves one running.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{BenchError, Result};
use crate::http::Client;

/// How long a server may take to answer its health check after start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Bytes of a log shown when a server fails.
const LOG_TAIL_BYTES: usize = 2000;

/// A free TCP port on 127.0.0.1 (bound, read, released: another process could take it before
/// the server does, in which case the server fails to start and says so in its log).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| BenchError::io("binding", "127.0.0.1:0", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::io("reading the address of", "127.0.0.1:0", e))?;
    Ok(addr.port())
}

/// A running server.
pub struct Server {
    /// Its name in messages (`VictoriaLogs`, `sluice serve`).
    pub name: &'static str,
    /// Its process id (the one whose /proc/PID/stat is read).
    pub pid: u32,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Starts `program args…` with stdout and stderr into `log`, then waits until
    /// `GET base + health` answers 2xx.
    pub fn start(
        name: &'static str,
        program: &Path,
        args: &[String],
        base: String,
        health: &str,
        log: PathBuf,
        client: &Client,
    ) -> Result<Server> {
        let out = File::create(&log).map_err(|e| BenchError::io("creating", &log, e))?;
        let err = out
            .try_clone()
            .map_err(|e| BenchError::io("opening", &log, e))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| BenchError::Program {
                program: program.display().to_string(),
                detail: format!("could not start: {e}"),
            })?;
        let mut server = Server {
            name,
            pid: child.id(),
            base,
            child: Some(child),
            log,
        };
        server.wait_healthy(health, client)?;
        Ok(server)
    }

    fn wait_healthy(&mut self, health: &str, client: &Client) -> Result<()> {
        let url = format!("{}{health}", self.base);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if client.is_up(&url) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(BenchError::Program {
                        program: self.name.to_owned(),
                        detail: format!("exited at start ({status}); log:\n{}", self.log_tail()),
                    });
                }
            }
            if Instant::now() > deadline {
                return Err(BenchError::Timeout {
                    what: format!("{} to answer {url}; log:\n{}", self.name, self.log_tail()),
                    secs: START_TIMEOUT.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The end of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let from = text.len().saturating_sub(LOG_TAIL_BYTES);
        String::from_utf8_lossy(&text[from..]).into_owned()
    }

    /// SIGTERM, then SIGKILL if it has not exited within the grace.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(100)),
                Err(_) => break,
            }
        }
        eprintln!(
            "bench-history: {} did not stop within {} s: killed",
            self.name,
            STOP_GRACE.as_secs()
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}
