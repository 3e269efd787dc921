//! One worker process: spawning it (limits set between `fork` and `exec`), writing a request and
//! reading frames with deadlines (non-blocking pipes + `poll`), killing and reaping it.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::prctl::set_pdeathsig;
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::Signal;
use nix::unistd::{setpgid, Pid};

use crate::proto;

/// How a read of one frame ended.
#[derive(Debug)]
pub enum Read1 {
    /// A whole frame (`kind | body`).
    Frame(Vec<u8>),
    /// The deadline passed first (a partial frame is kept for the next call).
    Timeout,
    /// The worker closed its stdout (it died, or is dying).
    Eof,
    /// The frame announced is longer than allowed: not read.
    TooLong(usize),
    /// A read error other than the above.
    Io(io::Error),
}

/// A running worker.
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    buf: Vec<u8>,
    /// Jobs this worker has run.
    pub jobs_run: u64,
}

fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let fd = fd.as_fd();
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Waits until `fd` is ready for `events` or `timeout` passes; `Ok(false)` on timeout.
fn poll_fd(fd: BorrowedFd<'_>, events: PollFlags, timeout: Duration) -> io::Result<bool> {
    let mut pfd = [PollFd::new(fd, events)];
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // A sub-millisecond remainder still waits 1 ms rather than spinning.
    let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
    let ms = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    match poll(&mut pfd, ms) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Waits at most `timeout` for `child` to exit.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// "killed by signal 9 (SIGKILL)" / "exited with status 3".
pub fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        None => "did not exit".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => {
                let name = match Signal::try_from(sig) {
                    Ok(
                        s @ (Signal::SIGKILL
                        | Signal::SIGSEGV
                        | Signal::SIGABRT
                        | Signal::SIGTERM
                        | Signal::SIGXCPU
                        | Signal::SIGBUS),
                    ) => format!(" ({})", s.as_str()),
                    _ => String::new(),
                };
                format!("killed by signal {sig}{name}")
            }
            (None, None) => "ended".into(),
        },
    }
}

/// The command that starts a worker (or runs `--check`), with the limits applied in the child.
pub fn command(python: &Path, memory_limit_bytes: u64) -> Command {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "sluice._worker"]);
    // SAFETY: only async-signal-safe calls (setpgid, prctl, setrlimit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Its own process group: a Ctrl-C meant for the server's terminal is not delivered to
            // the workers in the middle of a job (the parent stops them).
            let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
            // Die with the thread that spawned us (the pool's spawner thread) if the parent is
            // killed outright, rather than run an endless transform as an orphan.
            let _ = set_pdeathsig(Signal::SIGKILL);
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
            if memory_limit_bytes > 0 {
                setrlimit(Resource::RLIMIT_AS, memory_limit_bytes, memory_limit_bytes)?;
            }
            Ok(())
        });
    }
    cmd
}

impl Worker {
    /// Starts a worker and waits (at most `timeout`) for its `R` frame.
    pub fn spawn(
        python: &Path,
        memory_limit_bytes: u64,
        inherit_stderr: bool,
        timeout: Duration,
    ) -> Result<Worker, String> {
        let mut cmd = command(python, memory_limit_bytes);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if inherit_stderr {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = wait_timeout(&mut child, Duration::from_secs(2));
            return Err("no pipes to the worker".into());
        };
        let mut worker = Worker {
            child,
            stdin,
            stdout,
            buf: Vec::new(),
            jobs_run: 0,
        };
        if let Err(e) =
            set_nonblocking(&worker.stdin).and_then(|()| set_nonblocking(&worker.stdout))
        {
            worker.kill();
            return Err(format!("pipes: {e}"));
        }
        let deadline = Instant::now() + timeout;
        let outcome = worker.read_frame(deadline, proto::MAX_CONTROL_FRAME);
        match outcome {
            Read1::Frame(f) if f.first() == Some(&b'R') && &f[1..] == proto::VERSION => Ok(worker),
            Read1::Frame(f) => {
                worker.kill();
                Err(format!(
                    "unexpected first frame {:?} (is `sluice` from this tree installed?)",
                    String::from_utf8_lossy(&f)
                ))
            }
            Read1::Timeout => {
                worker.kill();
                Err(format!("not ready within {timeout:?}"))
            }
            Read1::Eof => {
                let status = worker.reap(Duration::from_secs(2));
                Err(format!(
                    "`{} -m sluice._worker` {} before it was ready (can it `import sluice`? set SLUICE_PYTHON; PoolConfig::inherit_stderr shows its error)",
                    python.display(),
                    describe_status(status)
                ))
            }
            Read1::TooLong(n) => {
                worker.kill();
                Err(format!("first frame of {n} bytes"))
            }
            Read1::Io(e) => {
                worker.kill();
                Err(format!("reading from the worker: {e}"))
            }
        }
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (a dead idle worker is discarded before use).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Writes all of `data` before `deadline`.
    pub fn write_all(&mut self, data: &[u8], deadline: Instant) -> io::Result<()> {
        let mut at = 0;
        while at < data.len() {
            match self.stdin.write(&data[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    poll_fd(self.stdin.as_fd(), PollFlags::POLLOUT, deadline - now)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads one frame, waiting at most until `deadline`; a frame longer than `max_len` is
    /// refused unread.
    pub fn read_frame(&mut self, deadline: Instant, max_len: usize) -> Read1 {
        loop {
            if self.buf.len() >= 4 {
                let mut head = [0u8; 4];
                head.copy_from_slice(&self.buf[..4]);
                let len = proto::frame_len(head);
                if len > max_len {
                    return Read1::TooLong(len);
                }
                if self.buf.len() >= 4 + len {
                    let rest = self.buf.split_off(4 + len);
                    let mut frame = std::mem::replace(&mut self.buf, rest);
                    frame.drain(..4);
                    return Read1::Frame(frame);
                }
                // Read straight into the buffer, sized for the whole frame.
                self.buf.reserve(4 + len - self.buf.len());
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stdout.read(&mut chunk) {
                Ok(0) => return Read1::Eof,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Read1::Timeout;
                    }
                    if let Err(e) = poll_fd(self.stdout.as_fd(), PollFlags::POLLIN, deadline - now)
                    {
                        return Read1::Io(e);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Read1::Io(e),
            }
        }
    }

    /// Kills the worker (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = wait_timeout(&mut self.child, Duration::from_secs(5));
    }

    /// Reaps a worker that is exiting on its own (killing it after `timeout`); its status.
    pub fn reap(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(status) = wait_timeout(&mut self.child, timeout) {
            return Some(status);
        }
        self.kill();
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}
