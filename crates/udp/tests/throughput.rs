//! Throughput print, not asserted. Meaningful with
//! `cargo test --release -p sluice-udp --test throughput -- --nocapture`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use sluice_udp::{blast, UdpConfig, UdpReceiver};

fn run(count: usize, batch: usize) {
    let cfg = UdpConfig {
        batch,
        ..UdpConfig::default()
    };
    let mut rx = UdpReceiver::bind("127.0.0.1:0", cfg).unwrap();
    let target = rx.local_addr().unwrap();
    let payloads: Vec<Vec<u8>> = (0..16).map(|i| vec![b'a' + i as u8; 190 + i]).collect();
    let done = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let sender = {
        let done = done.clone();
        thread::spawn(move || {
            let sent = blast(target, &payloads, count).unwrap();
            let secs = t.elapsed().as_secs_f64();
            done.store(true, Ordering::Release);
            (sent, secs)
        })
    };
    let mut received = 0u64;
    let mut last = t;
    loop {
        let n = rx.recv_batch(|_, _| received += 1).unwrap();
        if n > 0 {
            last = Instant::now();
        } else if done.load(Ordering::Acquire) {
            break;
        }
    }
    let (sent, send_secs) = sender.join().unwrap();
    let secs = (last - t).as_secs_f64();
    let st = rx.stats();
    eprintln!(
        "udp throughput (batch {batch}): sent {sent} x ~200 B in {send_secs:.3} s ({:.0}/s); received {received} = {:.2} % \
         at {:.0} datagrams/s; kernel drops {} (received + drops = {}); {} recvmmsg calls ({:.1}/call); buffer {:?}",
        sent as f64 / send_secs,
        100.0 * received as f64 / sent as f64,
        received as f64 / secs,
        st.kernel_drops,
        received + st.kernel_drops,
        st.recv_calls,
        received as f64 / st.recv_calls.max(1) as f64,
        rx.recv_buffer(),
    );
}

#[test]
fn throughput_one_million_blasted() {
    run(1_000_000, 64);
}

/// Receiver-side cost alone: fill the (forced 64 MiB) queue while not reading, then time the drain.
#[test]
fn drain_rate_of_a_full_queue() {
    let mut rx = UdpReceiver::bind("127.0.0.1:0", UdpConfig::default()).unwrap();
    let target = rx.local_addr().unwrap();
    let payloads = vec![vec![b'x'; 200]];
    let sent = blast(target, &payloads, 50_000).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let t = Instant::now();
    let mut received = 0u64;
    let mut last = t;
    while rx.recv_batch(|_, _| received += 1).unwrap() > 0 {
        last = Instant::now();
    }
    let st = rx.stats();
    eprintln!(
        "udp drain: {received} of {sent} queued datagrams in {:.1} ms = {:.0} datagrams/s ({:.1}/call), kernel drops {}",
        (last - t).as_secs_f64() * 1e3,
        received as f64 / (last - t).as_secs_f64(),
        received as f64 / st.recv_calls.max(1) as f64,
        st.kernel_drops
    );
}
