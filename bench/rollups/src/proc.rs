//! The server under measurement: `sluice serve` as a child process on a free loopback port
//! (stopped by its own PID: SIGTERM, then SIGKILL after a grace; killed when dropped so that an
//! error never leaves one running), its CPU from `/proc/PID/stat` (utime + stime of every
//! thread, in milliseconds), and the one HTTP client every request goes through.

use std::fs::File;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{sysconf, Pid, SysconfVar};

/// How long a server may take to answer `/healthz` after start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Milliseconds per clock tick (10 at the usual 100 Hz): the resolution of every CPU number.
pub fn ms_per_tick() -> Result<f64> {
    let ticks = sysconf(SysconfVar::CLK_TCK)
        .context("sysconf(CLK_TCK)")?
        .filter(|t| *t > 0)
        .ok_or_else(|| anyhow!("sysconf(CLK_TCK): no value"))?;
    Ok(1000.0 / ticks as f64)
}

/// utime + stime (fields 14 and 15 of `/proc/PID/stat`), in clock ticks. The command name
/// (field 2) may hold spaces and parentheses, so the fields are counted from the last `)`.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A blocking HTTP/1.1 client (keep-alive) for the loopback server.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Client {
    /// Connect within 5 s, a whole request within 10 min.
    pub fn new() -> Client {
        Client {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(5))
                .timeout(Duration::from_secs(600))
                .build(),
        }
    }

    /// `GET url?params`, the whole body (an error status is an error, with its body).
    pub fn get(&self, url: &str, params: &[(&str, &str)]) -> Result<Vec<u8>> {
        let mut req = self.agent.get(url);
        for (k, v) in params {
            req = req.query(k, v);
        }
        body(url, req.call())
    }

    /// `POST url` with an NDJSON body, the whole answer.
    pub fn post_ndjson(&self, url: &str, data: &[u8]) -> Result<Vec<u8>> {
        let req = self
            .agent
            .post(url)
            .set("Content-Type", "application/x-ndjson");
        body(url, req.send_bytes(data))
    }
}

fn body(url: &str, answer: Result<ureq::Response, ureq::Error>) -> Result<Vec<u8>> {
    match answer {
        Ok(resp) => {
            let mut out = Vec::new();
            resp.into_reader()
                .read_to_end(&mut out)
                .with_context(|| format!("{url}: reading the answer"))?;
            Ok(out)
        }
        Err(ureq::Error::Status(code, resp)) => {
            let text: String = resp
                .into_string()
                .unwrap_or_default()
                .chars()
                .take(500)
                .collect();
            bail!("{url}: status {code}: {}", text.trim_end())
        }
        Err(e) => bail!("{url}: {e}"),
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr().context("local address")?.port())
}

/// A running `sluice serve`.
pub struct Server {
    /// Its process id (the one whose /proc/PID/stat is read).
    pub pid: u32,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    child: Option<Child>,
    log: PathBuf,
    ms_per_tick: f64,
}

impl Server {
    /// `sluice serve --data DATA --http 127.0.0.1:PORT --tcp off --udp off EXTRA…`, output to
    /// `DATA.log`, awaited until `/healthz` answers.
    pub fn start(sluice: &Path, data: &Path, extra: &[&str], client: &Client) -> Result<Server> {
        let port = free_port()?;
        let log = data.with_extension("log");
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("log file")?;
        let child = Command::new(sluice)
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--http", &format!("127.0.0.1:{port}")])
            .args(["--tcp", "off", "--udp", "off"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {} serve", sluice.display()))?;
        let mut server = Server {
            pid: child.id(),
            base: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            log,
            ms_per_tick: ms_per_tick()?,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if client.get(&format!("{}/healthz", server.base), &[]).is_ok() {
                return Ok(server);
            }
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                server.child = None;
                bail!(
                    "sluice serve exited at start ({status}): {}",
                    server.log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!("sluice serve did not answer in 60 s: {}", server.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// CPU milliseconds (utime + stime) of the server, all its threads.
    pub fn cpu_ms(&self) -> Result<f64> {
        let path = format!("/proc/{}/stat", self.pid);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let ticks = stat_ticks(&text).ok_or_else(|| anyhow!("{path}: no utime/stime"))?;
        Ok(ticks as f64 * self.ms_per_tick)
    }

    /// The end of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let from = text.len().saturating_sub(2000);
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
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => break,
            }
        }
        eprintln!("bench-rollups: sluice serve did not stop in 30 s: killed");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_counts_fields_after_the_last_parenthesis() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 9 0";
        assert_eq!(stat_ticks(stat), Some(1290));
        assert_eq!(stat_ticks("4242 (sluice) S 1 4242"), None);
    }
}
