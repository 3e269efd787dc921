//! Load for the crash tests (`crashes.rs`, `failpoints.rs`): clients sending batches of events
//! over several (dc, type, subtype) groups, a fifth of each batch dated 2–3 s back (late), to
//! whichever server is running — HTTP POSTs and TCP messages (acknowledged) and UDP datagrams
//! (fire and forget); then the check that every acknowledged id was stored exactly once, no
//! other id more than once, and nothing that was not sent.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use super::common::now;
use super::process::try_request;

/// Events per batch: four fifths current, one fifth late.
pub const BATCH: u64 = 50;

/// The (type, subtype) groups events are spread over (all in dc `local`); with 2 or 4 pipeline
/// threads they belong to different shards, so a payload's events are routed between shards.
pub const GROUPS: [(&str, &str); 4] = [("KILL", "a"), ("KILL", "b"), ("WEB", "a"), ("LB", "x")];

/// One batch: ids `batch * BATCH + n`, over every group; the last fifth dated 2–3 s before now.
pub fn batch_body(batch: u64, now: i64) -> String {
    (0..BATCH)
        .map(|n| {
            let epoch = if is_late(n) { now - 2 - (n % 2) as i64 } else { now };
            let (type_, subtype) = GROUPS[((batch + n) % GROUPS.len() as u64) as usize];
            json!({"type": type_, "subtype": subtype, "epoch": epoch, "dc": "local", "id": batch * BATCH + n})
                .to_string()
                + "\n"
        })
        .collect()
}

/// Whether event `id` (or its index in a batch) is one of the late ones.
pub fn is_late(id: u64) -> bool {
    id % BATCH >= BATCH * 4 / 5
}

/// What the clients sent.
#[derive(Default, Debug)]
pub struct Sent {
    /// Batches acknowledged (HTTP 200, TCP `ok`): every event of them must be stored once.
    pub acked: Vec<u64>,
    /// Batches sent but not acknowledged, or sent by UDP: at most once.
    pub unacked: Vec<u64>,
}

/// How many clients of each transport.
#[derive(Debug, Clone, Copy)]
pub struct Clients {
    pub http: usize,
    pub tcp: usize,
    pub udp: usize,
}

/// Where a running server listens.
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    pub http: SocketAddr,
    pub tcp: Option<SocketAddr>,
    pub udp: Option<SocketAddr>,
}

impl Targets {
    /// The listeners of the server whose HTTP address is `http` (from `DATA/SERVER`), read from
    /// the `serving from … (http A, tcp B, udp C)` line of its log `log` (waits 10 s at most).
    pub fn of(http: SocketAddr, log: &std::path::Path) -> Targets {
        let want = format!("(http {http}, ");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if let Some(line) = text.lines().rev().find(|l| l.contains(&want)) {
                let field = |name: &str| -> Option<SocketAddr> {
                    let rest = line.split(&format!(" {name} ")).nth(1)?;
                    rest.split([',', ')']).next()?.parse().ok()
                };
                return Targets {
                    http,
                    tcp: field("tcp"),
                    udp: field("udp"),
                };
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no serving line for {http} in {}",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Clients sending batches to the server at `targets` (none while it is `None`).
pub struct Load {
    targets: Arc<Mutex<Option<Targets>>>,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Sent>>,
    clients: Vec<JoinHandle<()>>,
}

/// The transport of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    Tcp,
    Udp,
}

impl Load {
    /// Starts `clients` HTTP clients.
    pub fn start(clients: usize) -> Load {
        Load::start_mixed(Clients {
            http: clients,
            tcp: 0,
            udp: 0,
        })
    }

    /// Starts clients of every transport.
    pub fn start_mixed(clients: Clients) -> Load {
        let targets: Arc<Mutex<Option<Targets>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Sent::default()));
        let next_batch = Arc::new(AtomicU64::new(0));
        let kinds = std::iter::repeat_n(Transport::Http, clients.http)
            .chain(std::iter::repeat_n(Transport::Tcp, clients.tcp))
            .chain(std::iter::repeat_n(Transport::Udp, clients.udp));
        let clients = kinds
            .map(|kind| {
                let (targets, stop, sent, next_batch) = (
                    targets.clone(),
                    stop.clone(),
                    sent.clone(),
                    next_batch.clone(),
                );
                std::thread::spawn(move || {
                    let mut client = Client::new(kind);
                    while !stop.load(Ordering::Relaxed) {
                        let Some(t) = *targets.lock().unwrap() else {
                            client.tcp = None;
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        };
                        let batch = next_batch.fetch_add(1, Ordering::Relaxed);
                        let acked = client.send(&t, batch);
                        let mut s = sent.lock().unwrap();
                        if acked {
                            s.acked.push(batch);
                        } else {
                            s.unacked.push(batch);
                            drop(s);
                            if kind != Transport::Udp {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            targets,
            stop,
            sent,
            clients,
        }
    }

    /// Points the clients at the HTTP address `addr` only (`None`: they wait).
    pub fn target(&self, addr: Option<SocketAddr>) {
        self.target_all(addr.map(|http| Targets {
            http,
            tcp: None,
            udp: None,
        }));
    }

    /// Points the clients at `targets` (`None`: they wait). TCP and UDP clients send nothing to
    /// a server without those listeners.
    pub fn target_all(&self, targets: Option<Targets>) {
        *self.targets.lock().unwrap() = targets;
    }

    /// Batches acknowledged so far.
    pub fn acked(&self) -> usize {
        self.sent.lock().unwrap().acked.len()
    }

    /// Stops the clients and returns what they sent.
    pub fn stop(self) -> Sent {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.join().unwrap();
        }
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

/// One client's connection state.
struct Client {
    kind: Transport,
    /// The TCP connection and the address it goes to.
    tcp: Option<(SocketAddr, BufReader<TcpStream>)>,
    udp: Option<UdpSocket>,
}

impl Client {
    fn new(kind: Transport) -> Client {
        Client {
            kind,
            tcp: None,
            udp: None,
        }
    }

    /// Sends batch `batch`; whether it was acknowledged (UDP never is).
    fn send(&mut self, t: &Targets, batch: u64) -> bool {
        let body = batch_body(batch, now());
        match self.kind {
            Transport::Http => match try_request(t.http, "POST", "/v1/events", body.as_bytes()) {
                Ok(r) if r.status == 200 => true,
                // Refused (backpressure, unavailable): not acknowledged.
                Ok(r) if r.status == 503 => false,
                Ok(r) => panic!("batch {batch}: {} {}", r.status, r.text()),
                Err(_) => false,
            },
            Transport::Tcp => {
                let Some(addr) = t.tcp else { return false };
                // One message: the batch as a JSON array on one line.
                let line = format!("[{}]\n", body.trim_end().replace('\n', ","));
                match self.tcp_send(addr, line.as_bytes()) {
                    Ok(reply) if reply.starts_with("ok ") => {
                        assert_eq!(reply.trim(), format!("ok {BATCH} 0"), "batch {batch}");
                        true
                    }
                    Ok(reply) if reply.starts_with("error unavailable") => false,
                    Ok(reply) => panic!("batch {batch}: TCP reply {reply:?}"),
                    Err(_) => {
                        self.tcp = None;
                        false
                    }
                }
            }
            Transport::Udp => {
                let Some(addr) = t.udp else { return false };
                let socket = self
                    .udp
                    .get_or_insert_with(|| UdpSocket::bind("127.0.0.1:0").expect("udp socket"));
                let _ = socket.send_to(body.as_bytes(), addr);
                // Paced like the others (a reply's round trip).
                std::thread::sleep(Duration::from_millis(2));
                false
            }
        }
    }

    /// One message on the (re)connected TCP connection to `addr`, and its reply line.
    fn tcp_send(&mut self, addr: SocketAddr, message: &[u8]) -> std::io::Result<String> {
        if self.tcp.as_ref().is_none_or(|(a, _)| *a != addr) {
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            s.set_write_timeout(Some(Duration::from_secs(30)))?;
            self.tcp = Some((addr, BufReader::new(s)));
        }
        let (_, conn) = self.tcp.as_mut().expect("connected above");
        conn.get_mut().write_all(message)?;
        let mut reply = String::new();
        if conn.read_line(&mut reply)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(reply)
    }
}

/// What a check found.
#[derive(Debug)]
pub struct Verdict {
    pub acked_events: u64,
    pub read: usize,
    pub lost: Vec<u64>,
    pub twice: Vec<(u64, u32)>,
    pub unknown: Vec<u64>,
}

impl Verdict {
    /// One line for the test output.
    pub fn summary(&self) -> String {
        let late_lost = self.lost.iter().filter(|id| is_late(**id)).count();
        let late_twice = self.twice.iter().filter(|(id, _)| is_late(*id)).count();
        format!(
            "{} acked events, {} read, {} lost ({late_lost} late), {} twice ({late_twice} late)",
            self.acked_events,
            self.read,
            self.lost.len(),
            self.twice.len()
        )
    }

    /// Panics unless every acknowledged id was read once and nothing unknown was.
    pub fn assert_exactly_once(&self) {
        assert!(
            self.lost.is_empty(),
            "acknowledged events lost: {:?} ({})",
            &self.lost[..self.lost.len().min(20)],
            self.summary()
        );
        assert!(
            self.twice.is_empty(),
            "events stored twice: {:?} ({})",
            &self.twice[..self.twice.len().min(20)],
            self.summary()
        );
        assert!(
            self.unknown.is_empty(),
            "events nobody sent: {:?}",
            &self.unknown[..self.unknown.len().min(20)]
        );
    }
}

/// Checks `events` (as read back) against `sent`.
pub fn check(sent: &Sent, events: &[Value]) -> Verdict {
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for e in events {
        let id = e["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("an event without an id: {e}"));
        *seen.entry(id).or_default() += 1;
    }
    let ids = |b: &u64| (b * BATCH)..((b + 1) * BATCH);
    let lost = sent
        .acked
        .iter()
        .flat_map(ids)
        .filter(|id| !seen.contains_key(id))
        .collect();
    let twice = seen
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(&id, &c)| (id, c))
        .collect();
    let known: BTreeSet<u64> = sent.acked.iter().chain(&sent.unacked).copied().collect();
    let unknown = seen
        .keys()
        .filter(|id| !known.contains(&(*id / BATCH)))
        .copied()
        .collect();
    Verdict {
        acked_events: sent.acked.len() as u64 * BATCH,
        read: events.len(),
        lost,
        twice,
        unknown,
    }
}

/// The completeness counts' `stored` summed over `from..to` (`GET /v1/counts`), per (type,
/// subtype), from the server at `server`.
pub fn counted(server: &super::process::Server, from: i64, to: i64) -> BTreeMap<String, u64> {
    let r = server.get(&format!("/v1/counts?from={from}&to={to}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut by_group = BTreeMap::new();
    for l in super::process::lines(&r.text()) {
        let (Some(t), Some(s)) = (l["type"].as_str(), l["subtype"].as_str()) else {
            continue; // the trailer
        };
        let stored = l["stored"]
            .as_u64()
            .unwrap_or_else(|| panic!("a counts line without stored: {l}"));
        *by_group.entry(format!("{t}:{s}")).or_insert(0) += stored;
    }
    by_group
}

/// The events read, per (type, subtype), as [`counted`] keys them.
pub fn read_by_group(events: &[Value]) -> BTreeMap<String, u64> {
    let mut by_group = BTreeMap::new();
    for e in events {
        let key = format!(
            "{}:{}",
            e["type"].as_str().unwrap_or_default(),
            e["subtype"].as_str().unwrap_or_default()
        );
        *by_group.entry(key).or_insert(0) += 1;
    }
    by_group
}
