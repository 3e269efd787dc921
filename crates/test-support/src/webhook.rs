//! A real HTTP receiver on a loopback port for notification tests: it records each POST (path,
//! headers, body, and the status it answered) and can be told to answer an error status (503)
//! or to be down — its port closed, connections refused — then up again on the same port.
//!
//! Every answer has `Connection: close` (one request a connection), so a client's pooled
//! connection never outlives a switch to down.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 200 to every POST.
    Up,
    /// This status (e.g. 503) to every POST; the request is still recorded.
    Status(u16),
    /// The port is closed: connections are refused.
    Down,
}

/// One POST the receiver read.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request target (path and query).
    pub path: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
    /// The status the receiver answered.
    pub status: u16,
}

impl Received {
    /// The body as JSON; panics with the text when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Answered 2xx: the sender saw it delivered.
    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

struct Shared {
    mode: Mutex<Mode>,
    /// Signalled when the mode changes or the receiver stops (the accept thread waits on it
    /// while down).
    changed: Condvar,
    received: Mutex<Vec<Received>>,
    stop: AtomicBool,
}

impl Shared {
    /// Wakes the accept thread: the condvar while it is down, a connection while it blocks in
    /// `accept` (it drops that connection when it sees why it woke).
    fn wake(&self, addr: SocketAddr) {
        self.changed.notify_all();
        let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    }
}

/// A running receiver; stopped on drop.
pub struct WebhookReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WebhookReceiver {
    /// Listens on a free port of 127.0.0.1, up (answering 200).
    pub fn start() -> WebhookReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let addr = listener.local_addr().expect("the listener's address");
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Up),
            changed: Condvar::new(),
            received: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("webhook-receiver".into())
                .spawn(move || accept_loop(Some(listener), addr, &shared))
                .expect("spawning the receiver thread")
        };
        WebhookReceiver {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How it answers from now on. Switching to [`Mode::Down`] closes the port within a few
    /// milliseconds; leaving it reopens the same port.
    pub fn set_mode(&self, mode: Mode) {
        *lock(&self.shared.mode) = mode;
        self.shared.wake(self.addr);
        // Wait until the port is as asked, so the caller's next step sees it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let open = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok();
            if open == (mode != Mode::Down) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "webhook receiver on {}: port still {} after 10 s",
                self.addr,
                if open { "open" } else { "closed" }
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every POST read so far, in the order they were read.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.received).clone()
    }

    /// The POSTs answered 2xx.
    pub fn accepted(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(Received::accepted)
            .collect()
    }

    /// Waits until `n` POSTs were answered 2xx and returns them all; panics after `timeout`
    /// with what arrived.
    pub fn wait_accepted(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.accepted();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "webhook receiver: {} of {n} POSTs accepted after {timeout:?}: {:?}",
                got.len(),
                got.iter()
                    .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts until stopped (a blocking `accept`, woken by [`Shared::wake`]); closes the listener
/// while the mode is down, rebinds the same address when it is not.
fn accept_loop(mut listener: Option<TcpListener>, addr: SocketAddr, shared: &Arc<Shared>) {
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    let down = || *lock(&shared.mode) == Mode::Down;
    while !shared.stop.load(Ordering::Relaxed) {
        if down() {
            listener = None;
            let mode = lock(&shared.mode);
            let _ = shared
                .changed
                .wait_timeout(mode, Duration::from_millis(100))
                .map_err(|e| e.into_inner());
            continue;
        }
        let Some(l) = &listener else {
            // The port was ours a moment ago; SO_REUSEADDR (std sets it) lets us have it back.
            listener = TcpListener::bind(addr).ok();
            if listener.is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
            continue;
        };
        match l.accept() {
            Ok((stream, _)) => {
                if shared.stop.load(Ordering::Relaxed) || down() {
                    // A wake-up (or a client that came as the port closes: refused, as down).
                    continue;
                }
                let shared = shared.clone();
                handlers.push(std::thread::spawn(move || {
                    let _ = serve(stream, &shared);
                }));
                handlers.retain(|h| !h.is_finished());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    drop(listener);
    for h in handlers {
        let _ = h.join();
    }
}

/// Reads one request, records it, answers per the mode, closes.
fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(());
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let body = if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(&mut reader)?
    } else {
        let len: usize = get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    let status = match *lock(&shared.mode) {
        Mode::Status(code) => code,
        Mode::Up | Mode::Down => 200,
    };
    if method == "POST" {
        lock(&shared.received).push(Received {
            path,
            headers,
            body,
            status,
        });
    }
    let text = if status == 200 {
        "ok"
    } else {
        "not now (test)"
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    out.flush()
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}
