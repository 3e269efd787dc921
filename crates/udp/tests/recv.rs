//! Real sockets on 127.0.0.1.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_udp::{blast, UdpConfig, UdpReceiver, MAX_UDP_PAYLOAD};

fn payload(sender: usize, seq: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (sender * 31 + seq * 7 + j) as u8)
        .collect()
}

const SIZES: [usize; 10] = [
    1,
    2,
    100,
    1400,
    1500,
    9000,
    32_768,
    60_000,
    61_440,
    MAX_UDP_PAYLOAD,
];

#[test]
fn receives_everything_in_order_per_sender() {
    const SENDERS: usize = 3;
    const PER_SENDER: usize = 200;
    let mut rx = UdpReceiver::bind("127.0.0.1:0", UdpConfig::default()).unwrap();
    eprintln!("recv buffer: {:?}", rx.recv_buffer());
    let target = rx.local_addr().unwrap();

    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let from = sock.local_addr().unwrap();
            let h = thread::spawn(move || {
                for seq in 0..PER_SENDER {
                    sock.send_to(&payload(s, seq, SIZES[seq % SIZES.len()]), target)
                        .unwrap();
                    if seq % 20 == 19 {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            });
            (from, h)
        })
        .collect();
    let ids: HashMap<SocketAddr, usize> = senders
        .iter()
        .enumerate()
        .map(|(i, (a, _))| (*a, i))
        .collect();

    let mut next = [0usize; SENDERS];
    let mut expected_bytes = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while next.iter().sum::<usize>() < SENDERS * PER_SENDER && Instant::now() < deadline {
        rx.recv_batch(|data, from| {
            let s = ids[&from];
            let seq = next[s];
            assert_eq!(
                data,
                &payload(s, seq, SIZES[seq % SIZES.len()])[..],
                "sender {s} seq {seq}"
            );
            expected_bytes += data.len() as u64;
            next[s] += 1;
        })
        .unwrap();
    }
    for (_, h) in senders {
        h.join().unwrap();
    }
    assert_eq!(next, [PER_SENDER; SENDERS]);
    let st = rx.stats();
    assert_eq!(st.datagrams, (SENDERS * PER_SENDER) as u64);
    assert_eq!(st.bytes, expected_bytes);
    assert_eq!(st.truncated, 0);
    assert_eq!(st.kernel_drops, 0);
    assert!(
        st.recv_calls >= 1 && st.recv_calls <= st.datagrams,
        "{st:?}"
    );
}

#[test]
fn oversized_datagrams_are_counted_truncated_not_delivered() {
    let cfg = UdpConfig {
        max_datagram_bytes: 1000,
        ..UdpConfig::default()
    };
    let mut rx = UdpReceiver::bind("127.0.0.1:0", cfg).unwrap();
    let target = rx.local_addr().unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for len in [1000, 1001, 5000, 10, 60_000] {
        tx.send_to(&payload(0, len, len), target).unwrap();
    }
    let mut got = Vec::new();
    while rx.stats().datagrams + rx.stats().truncated < 5 {
        rx.recv_batch(|d, _| got.push(d.to_vec())).unwrap();
    }
    assert_eq!(got, vec![payload(0, 1000, 1000), payload(0, 10, 10)]);
    let st = rx.stats();
    assert_eq!((st.datagrams, st.truncated, st.bytes), (2, 3, 1010));
}

#[test]
fn kernel_drops_are_counted() {
    const SENT: usize = 50_000;
    let cfg = UdpConfig {
        recv_buffer_bytes: 4096,
        read_timeout: Some(Duration::from_millis(200)),
        ..UdpConfig::default()
    };
    let mut rx = UdpReceiver::bind("127.0.0.1:0", cfg).unwrap();
    eprintln!("tiny recv buffer: {:?}", rx.recv_buffer());
    let target = rx.local_addr().unwrap();
    let payloads: Vec<Vec<u8>> = (0..7).map(|i| payload(1, i, 32 + i)).collect();
    let t = Instant::now();
    assert_eq!(blast(target, &payloads, SENT).unwrap(), SENT);
    eprintln!(
        "blast of {SENT} into a full queue: {:.0} datagrams/s",
        SENT as f64 / t.elapsed().as_secs_f64()
    );
    thread::sleep(Duration::from_millis(100));

    let mut received = 0usize;
    while rx.recv_batch(|_, _| received += 1).unwrap() > 0 {}
    let drops = rx.kernel_drops();
    eprintln!(
        "sent {SENT}, received {received}, kernel drops {drops} (cmsg-only so far {})",
        rx.kernel_drops_cmsg()
    );
    assert!(drops > 0);
    assert_eq!(received as u64 + drops, SENT as u64);
    // The queued datagrams were queued before the drops, so their control message said 0; the
    // next datagram carries the full count in SO_RXQ_OVFL (this also checks that header slots
    // whose msg_controllen the kernel zeroed are restored before reuse).
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"after", target)
        .unwrap();
    while rx.recv_batch(|d, _| assert_eq!(d, b"after")).unwrap() == 0 {}
    assert_eq!(rx.kernel_drops_cmsg(), drops);
    assert_eq!(rx.stats().kernel_drops, drops);
}

#[test]
fn timeout_returns_zero_and_run_stops() {
    let cfg = UdpConfig {
        read_timeout: Some(Duration::from_millis(150)),
        ..UdpConfig::default()
    };
    let mut rx = UdpReceiver::bind("127.0.0.1:0", cfg).unwrap();
    let t = Instant::now();
    assert_eq!(rx.recv_batch(|_, _| panic!("nothing was sent")).unwrap(), 0);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(120) && waited < Duration::from_secs(2),
        "{waited:?}"
    );

    let target = rx.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = {
        let stop = stop.clone();
        thread::spawn(move || {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            for i in 0..10u8 {
                tx.send_to(&[i], target).unwrap();
            }
            thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let t = Instant::now();
    let mut seen = Vec::new();
    let st = rx.run(&stop, |d, _| seen.push(d[0])).unwrap();
    assert!(t.elapsed() < Duration::from_secs(3));
    stopper.join().unwrap();
    assert_eq!(seen, (0..10).collect::<Vec<u8>>());
    assert_eq!(st.datagrams, 10);
}
