//! A batching UDP receiver for the Sluice collector, with kernel drop accounting.
//!
//! [`UdpReceiver`] reads datagrams with one `recvmmsg(2)` call per [`UdpReceiver::recv_batch`],
//! filling up to [`UdpConfig::batch`] buffers that were allocated once at bind time, and tells how
//! complete the stream it saw is:
//!
//! | counter ([`UdpStats`]) | what it counts | where it comes from |
//! |---|---|---|
//! | `datagrams`, `bytes` | datagrams handed to the callback and their payload bytes | this process |
//! | `truncated` | datagrams longer than [`UdpConfig::max_datagram_bytes`]: taken off the socket, flagged `MSG_TRUNC` by the kernel, **not** delivered | per-message `msg_flags` |
//! | `kernel_drops` | datagrams the kernel dropped for this socket before Sluice saw them (receive queue full, …) — cumulative since bind | `SO_RXQ_OVFL` control message, else `/proc/net/udp{,6}` |
//! | `recv_calls` | `recvmmsg` system calls that returned at least one datagram | this process |
//!
//! ## Kernel drops
//! With `SO_RXQ_OVFL` enabled the kernel attaches to every queued datagram the socket's drop
//! counter *as it was when that datagram was queued* (and only once it is non-zero). So the control
//! message alone cannot see drops that happened after the last datagram that was received — e.g. a
//! burst that overflowed the queue and then silence. [`UdpReceiver::kernel_drops`] therefore also
//! reads the `drops` column of this socket's line (matched by inode) in `/proc/net/udp` (or
//! `/proc/net/udp6`) and reports the larger of the two; [`UdpReceiver::kernel_drops_cmsg`] is the
//! control-message value only (free, no syscall). Both sources read the same 32-bit kernel counter;
//! it is widened to `u64` by accumulating wrapping deltas.
//!
//! ## Receive buffer
//! The kernel caps `SO_RCVBUF` at `net.core.rmem_max`; with `CAP_NET_ADMIN` we use
//! `SO_RCVBUFFORCE`, which ignores the cap, and fall back to `SO_RCVBUF` otherwise.
//! [`UdpReceiver::recv_buffer`] reports what was requested and granted (the kernel doubles the
//! value to account for its bookkeeping overhead, and reports the doubled value).
//!
//! ## Allocation
//! Payload buffers, the per-batch metadata and the address storage are allocated once. Because of
//! the shape of `nix`'s `recvmmsg` API, each *call* allocates the small `iovec` array (16 B per
//! slot), and re-creates the `mmsghdr` array when the previous call left a slot's
//! `msg_controllen` shrunk by the kernel (nix does not reset it; see `headers_dirty`). Nothing is
//! allocated per datagram.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    recvmmsg, sendmmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
    MultiHeaders, SockaddrStorage,
};
use socket2::{Domain, Protocol, Socket, Type};

/// Largest UDP payload over IPv4 (65535 − 8 UDP header − 20 IP header).
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// The kernel processes at most this many messages per `recvmmsg`/`sendmmsg` (`UIO_MAXIOV`).
pub const MAX_BATCH: usize = 1024;

/// Receiver configuration.
#[derive(Clone, Debug)]
pub struct UdpConfig {
    /// Requested `SO_RCVBUF` in bytes (default 32 MiB). See [`UdpReceiver::recv_buffer`] for what
    /// the kernel granted.
    pub recv_buffer_bytes: usize,
    /// Datagrams per `recvmmsg` call, 1..=[`MAX_BATCH`] (default 64).
    pub batch: usize,
    /// Size of each receive buffer; longer datagrams are counted as truncated and dropped
    /// (default [`MAX_UDP_PAYLOAD`]).
    pub max_datagram_bytes: usize,
    /// How long one [`UdpReceiver::recv_batch`] waits for the first datagram; `None` blocks
    /// forever (then [`UdpReceiver::run`] cannot notice its stop flag). Default 100 ms.
    pub read_timeout: Option<Duration>,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            recv_buffer_bytes: 32 << 20,
            batch: 64,
            max_datagram_bytes: MAX_UDP_PAYLOAD,
            read_timeout: Some(Duration::from_millis(100)),
        }
    }
}

/// What the kernel made of the requested receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvBuffer {
    /// [`UdpConfig::recv_buffer_bytes`].
    pub requested: usize,
    /// `getsockopt(SO_RCVBUF)` after setting it: the kernel's budget for queued datagrams,
    /// including its per-packet overhead (Linux stores and reports twice the value set, and a
    /// datagram costs its payload plus ~700-900 B of `skb` truesize).
    pub granted: usize,
    /// Whether `SO_RCVBUFFORCE` (needs `CAP_NET_ADMIN`) succeeded; if not, `SO_RCVBUF` was used
    /// and the kernel capped the request at `net.core.rmem_max`.
    pub forced: bool,
}

/// Counters since bind. See the crate documentation for where each comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams delivered to the callback.
    pub datagrams: u64,
    /// Payload bytes delivered to the callback.
    pub bytes: u64,
    /// Datagrams longer than the buffer: received, counted, not delivered.
    pub truncated: u64,
    /// Datagrams the kernel dropped for this socket (cumulative since bind).
    pub kernel_drops: u64,
    /// `recvmmsg` calls that returned at least one datagram.
    pub recv_calls: u64,
}

/// Widens the kernel's 32-bit drop counter (`sk_drops`) into a cumulative `u64`.
#[derive(Debug, Default)]
struct DropCounter {
    last_raw: u32,
    total: u64,
}

impl DropCounter {
    fn observe(&mut self, raw: u32) {
        let delta = raw.wrapping_sub(self.last_raw);
        // Values can arrive slightly out of order (two sources); only move forwards.
        if delta != 0 && delta < (1 << 31) {
            self.total += u64::from(delta);
            self.last_raw = raw;
        }
    }
}

/// A bound UDP socket read in batches with `recvmmsg`. See the crate documentation.
#[derive(Debug)]
pub struct UdpReceiver {
    sock: UdpSocket,
    batch: usize,
    max: usize,
    recv_buffer: RecvBuffer,
    /// `batch * max` bytes, slot `i` is `buf[i*max .. (i+1)*max]`.
    buf: Vec<u8>,
    headers: MultiHeaders<SockaddrStorage>,
    /// Set when the last call returned a message without a control message: the kernel then wrote
    /// `msg_controllen = 0` into that slot's header, and nix does not restore it, so the next
    /// `SO_RXQ_OVFL` message in that slot would come back `MSG_CTRUNC`. Rebuild before reuse.
    headers_dirty: bool,
    /// Per-batch results, (length, truncated, source), capacity `batch`.
    meta: Vec<(usize, bool, SocketAddr)>,
    stats: UdpStats,
    drops_cmsg: DropCounter,
    drops: DropCounter,
    inode: Option<u64>,
    ipv6: bool,
}

fn cmsg_headers(batch: usize) -> MultiHeaders<SockaddrStorage> {
    MultiHeaders::preallocate(batch, Some(nix::cmsg_space!(u32)))
}

fn to_std(addr: Option<SockaddrStorage>) -> SocketAddr {
    match addr {
        Some(a) => {
            if let Some(v4) = a.as_sockaddr_in() {
                SocketAddr::V4((*v4).into())
            } else if let Some(v6) = a.as_sockaddr_in6() {
                SocketAddr::V6((*v6).into())
            } else {
                SocketAddr::from(([0, 0, 0, 0], 0))
            }
        }
        None => SocketAddr::from(([0, 0, 0, 0], 0)),
    }
}

impl UdpReceiver {
    /// Binds a UDP socket to `addr`, sizes its receive buffer, enables `SO_RXQ_OVFL` and
    /// preallocates `batch` buffers of `max_datagram_bytes`.
    pub fn bind(addr: impl ToSocketAddrs, config: UdpConfig) -> io::Result<UdpReceiver> {
        if config.batch == 0 || config.batch > MAX_BATCH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("batch must be 1..={MAX_BATCH}, got {}", config.batch),
            ));
        }
        if config.max_datagram_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "max_datagram_bytes must be > 0",
            ));
        }
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;

        // SO_RCVBUFFORCE takes an int; clamp so the kernel's doubling cannot overflow.
        let want = config.recv_buffer_bytes.min(i32::MAX as usize / 2);
        let forced = setsockopt(&sock, sockopt::RcvBufForce, &want).is_ok();
        if !forced {
            sock.set_recv_buffer_size(want)?;
        }
        let granted = sock.recv_buffer_size()?;
        setsockopt(&sock, sockopt::RxqOvfl, &1)?;
        sock.set_read_timeout(config.read_timeout)?;
        sock.bind(&addr.into())?;
        let sock: UdpSocket = sock.into();
        let inode = socket_inode(&sock);

        Ok(UdpReceiver {
            batch: config.batch,
            max: config.max_datagram_bytes,
            recv_buffer: RecvBuffer {
                requested: config.recv_buffer_bytes,
                granted,
                forced,
            },
            buf: vec![0; config.batch * config.max_datagram_bytes],
            headers: cmsg_headers(config.batch),
            headers_dirty: false,
            meta: Vec::with_capacity(config.batch),
            stats: UdpStats::default(),
            drops_cmsg: DropCounter::default(),
            drops: DropCounter::default(),
            inode,
            ipv6: addr.is_ipv6(),
            sock,
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// What the kernel granted for the receive buffer.
    pub fn recv_buffer(&self) -> RecvBuffer {
        self.recv_buffer
    }

    /// The underlying socket (e.g. to register it with a poller).
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// One `recvmmsg` call: waits up to the read timeout for the first datagram, then takes
    /// whatever else is already queued, up to `batch` datagrams (`MSG_WAITFORONE`). Calls `f`
    /// for each datagram that fit its buffer, in arrival order, and returns how many it delivered.
    ///
    /// Returns `Ok(0)` on timeout or `EINTR` (so a loop can check a shutdown flag) — and also when
    /// every datagram of the batch was truncated (see [`UdpStats::truncated`]).
    pub fn recv_batch(&mut self, mut f: impl FnMut(&[u8], SocketAddr)) -> io::Result<usize> {
        if self.headers_dirty {
            self.headers = cmsg_headers(self.batch);
            self.headers_dirty = false;
        }
        let fd = self.sock.as_raw_fd();
        let max = self.max;
        self.meta.clear();
        let mut saw_no_cmsg = false;
        {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
                .buf
                .chunks_exact_mut(max)
                .map(|slot| [IoSliceMut::new(slot)])
                .collect();
            let res = recvmmsg(
                fd,
                &mut self.headers,
                iovs.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            );
            let msgs = match res {
                Ok(msgs) => msgs,
                Err(Errno::EAGAIN | Errno::EINTR) => return Ok(0),
                Err(e) => return Err(e.into()),
            };
            for msg in msgs {
                let mut had_cmsg = false;
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::RxqOvfl(n) = c {
                            self.drops_cmsg.observe(n);
                            self.drops.observe(n);
                            had_cmsg = true;
                        }
                    }
                }
                saw_no_cmsg |= !had_cmsg;
                let truncated = msg.flags.contains(MsgFlags::MSG_TRUNC);
                self.meta
                    .push((msg.bytes.min(max), truncated, to_std(msg.address)));
            }
        }
        self.headers_dirty = saw_no_cmsg;
        if self.meta.is_empty() {
            return Ok(0);
        }
        self.stats.recv_calls += 1;
        let mut delivered = 0;
        for (i, &(len, truncated, from)) in self.meta.iter().enumerate() {
            if truncated {
                self.stats.truncated += 1;
                continue;
            }
            let start = i * max;
            f(&self.buf[start..start + len], from);
            self.stats.datagrams += 1;
            self.stats.bytes += len as u64;
            delivered += 1;
        }
        Ok(delivered)
    }

    /// Calls [`recv_batch`](Self::recv_batch) until `stop` is set (checked at least every read
    /// timeout). Returns the stats at the end, or the first error other than timeout/`EINTR`.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        mut f: impl FnMut(&[u8], SocketAddr),
    ) -> io::Result<UdpStats> {
        while !stop.load(Ordering::Relaxed) {
            self.recv_batch(&mut f)?;
        }
        Ok(self.stats())
    }

    /// Drops seen in `SO_RXQ_OVFL` control messages only: up to date as of the last received
    /// datagram, no system call.
    pub fn kernel_drops_cmsg(&self) -> u64 {
        self.drops_cmsg.total
    }

    /// Datagrams the kernel dropped for this socket since bind: the larger of the `SO_RXQ_OVFL`
    /// value and the `drops` column of `/proc/net/udp` (`udp6` for IPv6) for this socket's inode.
    /// The latter covers drops after the last datagram received; it costs reading that file
    /// (one line per UDP socket in the network namespace), so call it about once a second, not
    /// per batch. If `/proc` is unavailable only the control-message value is used.
    pub fn kernel_drops(&mut self) -> u64 {
        if let Some(raw) = self.proc_drops() {
            self.drops.observe(raw);
        }
        self.drops.total
    }

    /// Counters since bind; `kernel_drops` as [`kernel_drops`](Self::kernel_drops) (reads `/proc`).
    pub fn stats(&mut self) -> UdpStats {
        let kernel_drops = self.kernel_drops();
        UdpStats {
            kernel_drops,
            ..self.stats
        }
    }

    fn proc_drops(&self) -> Option<u32> {
        let inode = self.inode?;
        let path = if self.ipv6 {
            "/proc/net/udp6"
        } else {
            "/proc/net/udp"
        };
        let text = std::fs::read_to_string(path).ok()?;
        proc_udp_drops(&text, inode)
    }
}

/// The inode of a socket, from the `/proc/self/fd/N` link (`socket:[12345]`).
fn socket_inode(sock: &UdpSocket) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", sock.as_fd().as_raw_fd())).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// Finds the `drops` column (the last one) of the line whose `inode` column (the 10th) matches.
fn proc_udp_drops(text: &str, inode: u64) -> Option<u32> {
    text.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 13 && cols[9].parse::<u64>().ok()? == inode {
            cols[cols.len() - 1].parse().ok()
        } else {
            None
        }
    })
}

/// Sends `count` datagrams to `target` as fast as one thread can, cycling through `payloads`
/// (datagram `i` is `payloads[i % payloads.len()]`), with `sendmmsg` in batches of 256. A test and
/// bench helper: it does no pacing, and on loopback it overruns a receiver on purpose. Returns the
/// number of datagrams the kernel accepted (always `count` unless an error occurs).
pub fn blast<P: AsRef<[u8]>>(
    target: SocketAddr,
    payloads: &[P],
    count: usize,
) -> io::Result<usize> {
    const BATCH: usize = 256;
    if payloads.is_empty() || count == 0 {
        return Ok(0);
    }
    let any: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(any)?;
    // Precompute a window of slices so any batch start `s` uses slices[s % n .. s % n + BATCH].
    let n = payloads.len();
    let slices: Vec<[IoSlice<'_>; 1]> = (0..n + BATCH)
        .map(|k| [IoSlice::new(payloads[k % n].as_ref())])
        .collect();
    let addrs = vec![Some(SockaddrStorage::from(target)); BATCH];
    let mut headers: MultiHeaders<SockaddrStorage> = MultiHeaders::preallocate(BATCH, None);
    let no_cmsgs: &[ControlMessage<'_>] = &[];
    let mut sent = 0;
    while sent < count {
        let want = (count - sent).min(BATCH);
        let start = sent % n;
        match sendmmsg(
            sock.as_raw_fd(),
            &mut headers,
            &slices[start..start + want],
            &addrs[..want],
            no_cmsgs,
            MsgFlags::empty(),
        ) {
            Ok(res) => sent += res.count(),
            Err(Errno::EINTR | Errno::EAGAIN | Errno::ENOBUFS) => std::thread::yield_now(),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_udp() {
        let text = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
         1234: 0100007F:9C40 00000000:0000 07 00000000:00001200 00:00000000 00000000     0        0 424242 2 0000000000000000 4711\n\
          999: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 17 2 0000000000000000 0\n";
        assert_eq!(proc_udp_drops(text, 424242), Some(4711));
        assert_eq!(proc_udp_drops(text, 17), Some(0));
        assert_eq!(proc_udp_drops(text, 5), None);
    }

    #[test]
    fn drop_counter_widens_and_ignores_regressions() {
        let mut d = DropCounter::default();
        d.observe(10);
        d.observe(5);
        assert_eq!(d.total, 10);
        d.observe(0x7000_0000);
        d.observe(0xE000_0000);
        d.observe(3); // wrapped
        assert_eq!(d.total, (1u64 << 32) + 3);
    }
}
