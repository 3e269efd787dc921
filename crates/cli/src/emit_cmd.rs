//! `sluice emit`: NDJSON events from standard input to a collector, over UDP (fire-and-forget,
//! many events per datagram), TCP (one line per event batch, acknowledged) or HTTP (POST batches,
//! acknowledged). Also the transport behind `sluice gen --udp/--tcp/--http`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

/// Where to send events.
#[derive(Args, Clone)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// Send datagrams to this UDP address (fire-and-forget).
    #[arg(long)]
    pub udp: Option<String>,
    /// Send NDJSON lines to this TCP address and wait for each line's acknowledgement.
    #[arg(long)]
    pub tcp: Option<String>,
    /// POST NDJSON batches to this base URL (e.g. http://127.0.0.1:8180).
    #[arg(long)]
    pub http: Option<String>,
}

/// Flags of `sluice emit`.
#[derive(Args)]
pub struct EmitArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    tuning: Tuning,
}

/// Batching and timeouts.
#[derive(Args, Clone)]
pub struct Tuning {
    /// Events per HTTP request or TCP line.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Largest UDP datagram to send, in bytes (events are packed into datagrams up to this).
    #[arg(long, default_value_t = 8192)]
    max_datagram: usize,
    /// Network timeout in seconds (connect, write, acknowledgement).
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// Counts of what a sender did.
#[derive(Debug, Default, Clone, Copy)]
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
    tuning: Tuning,
    pending: Vec<u8>,
    pending_events: usize,
    sent: Sent,
}

enum Kind {
    Udp(UdpSocket),
    Tcp { stream: TcpStream, reader: BufReader<TcpStream> },
    Http { agent: ureq::Agent, url: String },
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .with_context(|| format!("{addr}: no address"))
}

impl Sender {
    /// Connect to the target.
    pub fn connect(target: &Target, tuning: &Tuning) -> Result<Sender> {
        let timeout = Duration::from_secs(tuning.timeout.max(1));
        if tuning.max_datagram < 64 || tuning.max_datagram > 65_507 {
            bail!("--max-datagram must be 64..=65507");
        }
        if tuning.batch == 0 {
            bail!("--batch must be positive");
        }
        let kind = if let Some(addr) = &target.udp {
            let to = resolve(addr)?;
            let bind: SocketAddr = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse()?;
            let sock = UdpSocket::bind(bind).context("binding a UDP socket")?;
            sock.connect(to).with_context(|| format!("udp {addr}"))?;
            Kind::Udp(sock)
        } else if let Some(addr) = &target.tcp {
            let to = resolve(addr)?;
            let stream = TcpStream::connect_timeout(&to, timeout).with_context(|| format!("tcp {addr}"))?;
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            stream.set_nodelay(true)?;
            let reader = BufReader::new(stream.try_clone()?);
            Kind::Tcp { stream, reader }
        } else if let Some(url) = &target.http {
            let agent = ureq::AgentBuilder::new().timeout(timeout).build();
            Kind::Http { agent, url: format!("{}/v1/events", url.trim_end_matches('/')) }
        } else {
            bail!("give one of --udp, --tcp, --http");
        };
        Ok(Sender { kind, tuning: tuning.clone(), pending: Vec::new(), pending_events: 0, sent: Sent::default() })
    }

    /// Queue one NDJSON line (one event or an array); sends when a batch is full.
    pub fn send_line(&mut self, line: &[u8]) -> Result<()> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if let Kind::Udp(_) = self.kind {
            if line.len() > self.tuning.max_datagram {
                bail!("an event of {} bytes does not fit in a datagram (--max-datagram {})", line.len(), self.tuning.max_datagram);
            }
            if self.pending.len() + line.len() + 1 > self.tuning.max_datagram {
                self.flush()?;
            }
        }
        self.pending.extend_from_slice(line);
        self.pending.push(b'\n');
        self.pending_events += 1;
        self.sent.events += 1;
        if !matches!(self.kind, Kind::Udp(_)) && self.pending_events >= self.tuning.batch {
            self.flush()?;
        }
        Ok(())
    }

    /// Send what is queued and, on acknowledged transports, wait for the acknowledgement.
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
                for (i, ev) in self.pending.split(|b| *b == b'\n').filter(|l| !l.is_empty()).enumerate() {
                    if i > 0 {
                        line.push(b',');
                    }
                    line.extend_from_slice(ev);
                }
                line.extend_from_slice(b"]\n");
                stream.write_all(&line).context("tcp write")?;
                let mut ack = String::new();
                reader.read_line(&mut ack).context("waiting for the acknowledgement")?;
                let mut words = ack.split_whitespace();
                match words.next() {
                    Some("ok") => {
                        let accepted: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(n);
                        self.sent.accepted += accepted;
                        self.sent.refused += n.saturating_sub(accepted);
                    }
                    Some("error") => {
                        self.sent.refused += n;
                        eprintln!("sluice: collector refused a batch of {n}: {}", ack.trim());
                    }
                    _ if ack.is_empty() => bail!("the collector closed the connection"),
                    _ => bail!("unexpected acknowledgement {:?}", ack.trim()),
                }
            }
            Kind::Http { agent, url } => {
                let resp = agent.post(url).set("Content-Type", "application/x-ndjson").send_bytes(&self.pending);
                match resp {
                    Ok(r) => {
                        let body: serde_json::Value = serde_json::from_reader(r.into_reader()).unwrap_or_default();
                        let accepted = body["accepted"].as_u64().unwrap_or(n);
                        self.sent.accepted += accepted;
                        self.sent.refused += n.saturating_sub(accepted);
                    }
                    Err(ureq::Error::Status(code, r)) => {
                        self.sent.refused += n;
                        let text = r.into_string().unwrap_or_default();
                        eprintln!("sluice: collector refused a batch of {n} ({code}): {}", text.trim());
                    }
                    Err(e) => return Err(anyhow::anyhow!("POST {url}: {e}")),
                }
            }
        }
        self.sent.messages += 1;
        self.pending.clear();
        self.pending_events = 0;
        Ok(())
    }

    /// Flush and return the counts.
    pub fn finish(mut self) -> Result<Sent> {
        self.flush()?;
        Ok(self.sent)
    }
}

/// Run `sluice emit`.
pub fn run(a: EmitArgs) -> Result<()> {
    let mut sender = Sender::connect(&a.target, &a.tuning)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).context("reading standard input")? == 0 {
            break;
        }
        sender.send_line(&line)?;
    }
    let sent = sender.finish()?;
    eprintln!(
        "sluice: sent {} events in {} messages{}",
        sent.events,
        sent.messages,
        if a.target.udp.is_some() { String::new() } else { format!(", {} accepted, {} refused", sent.accepted, sent.refused) }
    );
    if sent.refused > 0 {
        bail!("{} events were refused", sent.refused);
    }
    Ok(())
}
