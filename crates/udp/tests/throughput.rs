//! A full-speed blast on loopback (`blast`, sendmmsg) into a receiver that reads it in batches:
//! every datagram sent is either delivered intact or counted as a kernel drop, never lost
//! silently, and the batches are as large as the queue allows.
//!
//! Throughput itself is measured in `bench/pipeline` (row 3, `make bench-pipeline`: the bare
//! receiver beside `recv_batch` alone and with the ingestor, and the drain of a full queue).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_udp::{blast, UdpConfig, UdpReceiver, UdpStats};

/// Payload `i` is 190 + i bytes of `b'a' + i`: its length tells which payload a datagram is.
fn payloads() -> Vec<Vec<u8>> {
    (0..16).map(|i| vec![b'a' + i as u8; 190 + i]).collect()
}

/// Checks that `d` is one of [`payloads`], intact.
fn check_intact(d: &[u8], payloads: &[Vec<u8>]) {
    let i = d.len().checked_sub(190).filter(|&i| i < payloads.len());
    let i = i.unwrap_or_else(|| panic!("a datagram of {} bytes was never sent", d.len()));
    assert_eq!(d, &payloads[i][..], "datagram of payload {i} altered");
}

/// Blasts `SENT` datagrams at a receiver with `recv_buffer_bytes` that reads them meanwhile,
/// until the sender is done and the queue is empty; checks the accounting. Returns the stats.
fn blast_while_reading(recv_buffer_bytes: usize) -> UdpStats {
    const SENT: usize = 200_000;
    const BATCH: usize = 64;
    let cfg = UdpConfig {
        batch: BATCH,
        recv_buffer_bytes,
        ..UdpConfig::default()
    };
    let mut rx = UdpReceiver::bind("127.0.0.1:0", cfg).unwrap();
    let target = rx.local_addr().unwrap();
    let payloads = payloads();
    let done = Arc::new(AtomicBool::new(false));
    let sender = {
        let (done, payloads) = (done.clone(), payloads.clone());
        thread::spawn(move || {
            let sent = blast(target, &payloads, SENT);
            done.store(true, Ordering::Release);
            sent
        })
    };
    let mut received = 0u64;
    let mut bytes = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let n = rx
            .recv_batch(|d, _| {
                check_intact(d, &payloads);
                received += 1;
                bytes += d.len() as u64;
            })
            .unwrap();
        // After the sender is done, one empty read (a 100 ms timeout) means the queue is empty.
        if n == 0 && done.load(Ordering::Acquire) {
            break;
        }
        assert!(Instant::now() < deadline, "the blast never ended");
    }
    let sent = sender.join().unwrap().unwrap();
    assert_eq!(sent, SENT, "blast reports what the kernel accepted");
    let st = rx.stats();
    eprintln!(
        "sent {sent}, received {received}, kernel drops {} ({} recvmmsg calls, buffer {:?})",
        st.kernel_drops,
        st.recv_calls,
        rx.recv_buffer()
    );
    assert!(received > 0, "nothing received: {st:?}");
    assert_eq!(
        received + st.kernel_drops,
        SENT as u64,
        "every datagram is received or counted as a kernel drop: {st:?}"
    );
    assert_eq!(st.datagrams, received, "{st:?}");
    assert_eq!(st.bytes, bytes, "{st:?}");
    assert_eq!(st.truncated, 0, "{st:?}");
    // Each call returns between one datagram and a batch.
    assert!(
        st.recv_calls >= received.div_ceil(BATCH as u64) && st.recv_calls <= received,
        "{st:?}"
    );
    // The control messages only see drops before the last datagram received; /proc sees all.
    assert!(rx.kernel_drops_cmsg() <= st.kernel_drops, "{st:?}");
    st
}

#[test]
fn every_blasted_datagram_is_received_or_counted_as_a_kernel_drop() {
    blast_while_reading(UdpConfig::default().recv_buffer_bytes);
}

/// A queue of a few datagrams overflows while it is read: drops and deliveries interleave.
#[test]
fn with_a_tiny_buffer_drops_and_deliveries_add_up_to_what_was_sent() {
    let st = blast_while_reading(4096);
    assert!(
        st.kernel_drops > 0,
        "a 4 KiB queue never overflowed: {st:?}"
    );
}

/// A full queue read without a pause: every `recvmmsg` returns a whole batch but the last, and
/// what the queue could not hold is counted as kernel drops.
#[test]
fn a_full_queue_drains_in_whole_batches() {
    const SENT: usize = 50_000;
    const BATCH: usize = 64;
    let cfg = UdpConfig {
        batch: BATCH,
        ..UdpConfig::default()
    };
    let mut rx = UdpReceiver::bind("127.0.0.1:0", cfg).unwrap();
    let target = rx.local_addr().unwrap();
    let payloads = vec![vec![b'x'; 200]];
    assert_eq!(blast(target, &payloads, SENT).unwrap(), SENT);
    thread::sleep(Duration::from_millis(50));
    let mut received = 0u64;
    while rx
        .recv_batch(|d, _| {
            assert_eq!(d, &payloads[0][..]);
            received += 1;
        })
        .unwrap()
        > 0
    {}
    let st = rx.stats();
    eprintln!(
        "{received} of {SENT} queued datagrams in {} calls, kernel drops {} (buffer {:?})",
        st.recv_calls,
        st.kernel_drops,
        rx.recv_buffer()
    );
    assert!(received > 0, "{st:?}");
    assert_eq!(received + st.kernel_drops, SENT as u64, "{st:?}");
    assert_eq!(
        st.recv_calls,
        received.div_ceil(BATCH as u64),
        "batches not full: {st:?}"
    );
}
