//! Sending NDJSON events to a collector: [`Sender`] over one [`Transport`].
//!
//! - **UDP**: events are packed into datagrams of at most [`SendOptions::max_datagram`] bytes
//!   (one event per line); fire-and-forget: nothing is acknowledged, a full socket buffer or a
//!   closed port is not reported (the collector counts what it receives).
//! - **TCP**: each batch of [`SendOptions::batch`] events goes as one line (a JSON array) and
//!   the sender waits for that line's acknowledgement (`ok <accepted> <dropped>` or `error …`).
//! - **HTTP**: each batch is one `POST /v1/events` (NDJSON body); the JSON answer says how many
//!   were accepted.
//!
//! A refused batch (TCP `error`, an HTTP error status) is counted in [`Sent::refused`] and
//! passed to the refusal report ([`Sender::on_refusal`]); a broken connection is an error.
//! Every socket operation has [`SendOptions::timeout`].

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use crate::{base_url, ClientError, Result};

/// Where to send events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Datagrams to this UDP address (`HOST:PORT`).
    Udp(String),
    /// Acknowledged lines to this TCP address (`HOST:PORT`).
    Tcp(String),
    /// `POST /v1/events` to this server (`http://HOST:PORT` or `HOST:PORT`).
    Http(String),
}

/// Batching and timeouts of a [`Sender`].
#[derive(Debug, Clone, Copy)]
pub struct SendOptions {
    /// Events per HTTP request or TCP line (at least 1; default 500).
    pub batch: usize,
    /// Largest UDP datagram, bytes (64..=65507; default 8192).
    pub max_datagram: usize,
    /// Network timeout: connect, write, acknowledgement (default 10 s; at least 1 s).
    pub timeout: Duration,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            batch: 500,
            max_datagram: 8192,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Counts of what a sender did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Events handed to the transport.
    pub events: u64,
    /// Events the collector acknowledged (TCP/HTTP).
    pub accepted: u64,
    /// Events the collector refused (TCP/HTTP).
    pub refused: u64,
    /// Requests, lines or datagrams sent.
    pub messages: u64,
}

/// A connected transport that takes events one NDJSON line at a time.
pub struct Sender {
    kind: Kind,
    opts: SendOptions,
    pending: Vec<u8>,
    pending_events: usize,
    sent: Sent,
    on_refusal: Box<dyn FnMut(&str) + Send>,
}

enum Kind {
    Udp(UdpSocket),
    Tcp {
        stream: TcpStream,
        reader: BufReader<TcpStream>,
    },
    Http {
        agent: ureq::Agent,
        url: String,
    },
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| ClientError::io(format!("resolving {addr}"), e))?
        .next()
        .ok_or_else(|| ClientError::Config(format!("{addr}: no address")))
}

impl Sender {
    /// Connects to `to` (UDP: binds and connects a socket; TCP: connects; HTTP: nothing yet).
    pub fn connect(to: &Transport, opts: &SendOptions) -> Result<Sender> {
        let timeout = opts.timeout.max(Duration::from_secs(1));
        if !(64..=65_507).contains(&opts.max_datagram) {
            return Err(ClientError::Config(
                "--max-datagram must be 64..=65507".into(),
            ));
        }
        if opts.batch == 0 {
            return Err(ClientError::Config("--batch must be positive".into()));
        }
        let kind = match to {
            Transport::Udp(addr) => {
                let to = resolve(addr)?;
                let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                let sock = UdpSocket::bind(bind)
                    .map_err(|e| ClientError::io("binding a UDP socket", e))?;
                sock.connect(to)
                    .map_err(|e| ClientError::io(format!("udp {addr}"), e))?;
                Kind::Udp(sock)
            }
            Transport::Tcp(addr) => {
                let to = resolve(addr)?;
                let io = |e| ClientError::io(format!("tcp {addr}"), e);
                let stream = TcpStream::connect_timeout(&to, timeout).map_err(io)?;
                stream.set_read_timeout(Some(timeout)).map_err(io)?;
                stream.set_write_timeout(Some(timeout)).map_err(io)?;
                stream.set_nodelay(true).map_err(io)?;
                let reader = BufReader::new(stream.try_clone().map_err(io)?);
                Kind::Tcp { stream, reader }
            }
            Transport::Http(url) => {
                let agent = ureq::AgentBuilder::new().timeout(timeout).build();
                Kind::Http {
                    agent,
                    url: format!("{}/v1/events", base_url(url)?),
                }
            }
        };
        Ok(Sender {
            kind,
            opts: *opts,
            pending: Vec::new(),
            pending_events: 0,
            sent: Sent::default(),
            on_refusal: Box::new(|_| {}),
        })
    }

    /// Calls `report` with a message for every batch the collector refuses (default: nothing).
    pub fn on_refusal(mut self, report: impl FnMut(&str) + Send + 'static) -> Sender {
        self.on_refusal = Box::new(report);
        self
    }

    /// Whether the transport acknowledges what it is sent (TCP, HTTP).
    pub fn is_acknowledged(&self) -> bool {
        !matches!(self.kind, Kind::Udp(_))
    }

    /// Queues one NDJSON line (one event or an array); sends when a batch is full.
    pub fn send_line(&mut self, line: &[u8]) -> Result<()> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if let Kind::Udp(_) = self.kind {
            if line.len() > self.opts.max_datagram {
                return Err(ClientError::Config(format!(
                    "an event of {} bytes does not fit in a datagram (--max-datagram {})",
                    line.len(),
                    self.opts.max_datagram
                )));
            }
            if self.pending.len() + line.len() + 1 > self.opts.max_datagram {
                self.flush()?;
            }
        }
        self.pending.extend_from_slice(line);
        self.pending.push(b'\n');
        self.pending_events += 1;
        self.sent.events += 1;
        if self.is_acknowledged() && self.pending_events >= self.opts.batch {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends what is queued and, on acknowledged transports, waits for the acknowledgement.
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let n = self.pending_events as u64;
        match &mut self.kind {
            Kind::Udp(sock) => {
                // Fire-and-forget: a full socket buffer or an unreachable port is not an error
                // the caller can act on; the collector counts what it receives.
                let _ = sock.send(&self.pending);
            }
            Kind::Tcp { stream, reader } => {
                // One line carrying the batch as a JSON array keeps one acknowledgement per line.
                let mut line = Vec::with_capacity(self.pending.len() + 2);
                line.push(b'[');
                for (i, ev) in self
                    .pending
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .enumerate()
                {
                    if i > 0 {
                        line.push(b',');
                    }
                    line.extend_from_slice(ev);
                }
                line.extend_from_slice(b"]\n");
                stream
                    .write_all(&line)
                    .map_err(|e| ClientError::io("tcp write", e))?;
                let mut ack = String::new();
                reader
                    .read_line(&mut ack)
                    .map_err(|e| ClientError::io("waiting for the acknowledgement", e))?;
                let mut words = ack.split_whitespace();
                match words.next() {
                    Some("ok") => {
                        let accepted: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(n);
                        self.sent.accepted += accepted;
                        self.sent.refused += n.saturating_sub(accepted);
                    }
                    Some("error") => {
                        self.sent.refused += n;
                        (self.on_refusal)(&format!(
                            "collector refused a batch of {n}: {}",
                            ack.trim()
                        ));
                    }
                    _ if ack.is_empty() => {
                        return Err(ClientError::Protocol(
                            "the collector closed the connection".into(),
                        ))
                    }
                    _ => {
                        return Err(ClientError::Protocol(format!(
                            "unexpected acknowledgement {:?}",
                            ack.trim()
                        )))
                    }
                }
            }
            Kind::Http { agent, url } => {
                let resp = agent
                    .post(url)
                    .set("Content-Type", "application/x-ndjson")
                    .send_bytes(&self.pending);
                match resp {
                    Ok(r) => {
                        let body: serde_json::Value =
                            serde_json::from_reader(r.into_reader()).unwrap_or_default();
                        let accepted = body["accepted"].as_u64().unwrap_or(n);
                        self.sent.accepted += accepted;
                        self.sent.refused += n.saturating_sub(accepted);
                    }
                    Err(ureq::Error::Status(code, r)) => {
                        self.sent.refused += n;
                        let text = r.into_string().unwrap_or_default();
                        (self.on_refusal)(&format!(
                            "collector refused a batch of {n} ({code}): {}",
                            text.trim()
                        ));
                    }
                    Err(e) => {
                        return Err(ClientError::Transport {
                            url: format!("POST {url}"),
                            message: e.to_string(),
                        })
                    }
                }
            }
        }
        self.sent.messages += 1;
        self.pending.clear();
        self.pending_events = 0;
        Ok(())
    }

    /// The counts so far.
    pub fn sent(&self) -> Sent {
        self.sent
    }

    /// Flushes and returns the counts.
    pub fn finish(mut self) -> Result<Sent> {
        self.flush()?;
        Ok(self.sent)
    }
}
