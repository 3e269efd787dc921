//! `bench-metrics-send TARGET COUNT RATE PAYLOAD`: sends COUNT copies of PAYLOAD (one datagram
//! each) to TARGET at RATE datagrams per second (sendmmsg batches of 256 from one thread, paced
//! against the clock; RATE 0 = as fast as possible), then prints the achieved rate.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: bench-metrics-send TARGET COUNT RATE PAYLOAD");
        std::process::exit(2);
    }
    let target: SocketAddr = args[1].parse().expect("TARGET: IP:PORT");
    let count: usize = args[2].parse().expect("COUNT");
    let rate: f64 = args[3].parse().expect("RATE");
    let payload = [args[4].as_bytes()];
    const CHUNK: usize = 256;
    let start = Instant::now();
    let mut sent = 0usize;
    while sent < count {
        let k = (count - sent).min(CHUNK);
        sent += sluice_udp::blast(target, &payload, k).expect("send");
        if rate > 0.0 {
            let due = start + Duration::from_secs_f64(sent as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{sent} {secs:.3} {:.0}", sent as f64 / secs);
}
