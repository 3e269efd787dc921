//! The UDP ingest listener: a dedicated thread reading datagrams in batches
//! ([`sluice_udp::UdpReceiver`]), one payload per datagram (one event, a JSON array, NDJSON or
//! a Sereal document), fire and forget: nothing is acknowledged or logged in the WAL, bad input
//! is counted per reason (`/metrics`) and dropped.
//!
//! Completeness: once a second the thread adds to the store's counts the events dropped at
//! ingest, as every transport does ([`crate::pipeline::drops`]: under their own tags when
//! ingest could read them), and, for the current epoch and `(dc = the configured dc, type = "",
//! subtype = "")` — the documented convention for what cannot be attributed to a type — the
//! datagrams the kernel dropped (`kernel_dropped`) or truncated (`oversized`) since the last time.
//!
//! Sources: UDP carries no credentials, so each datagram's source address is checked against
//! `udp_allow` ([`AllowList`]) before it is parsed; one from elsewhere is dropped and counted in
//! `sluice_udp_refused_total{reason="source"}` (not in the store's counts: it is not part of the
//! stream). One log line names a refused source at most once a minute ([`RefusalLog`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_collector::{DropCounters, IngestConfig, Ingestor};
use sluice_store::{Counts, Store};
use sluice_udp::{UdpReceiver, UdpStats};

use crate::metrics::{IngestCounters, SharedMetrics};
use crate::pipeline::drops::{self, PendingDrops};
use crate::pipeline::{now_unix, Msg};

/// What the UDP thread needs.
pub(crate) struct UdpContext {
    pub tx: crate::pipeline::PipelineTx,
    pub store: Arc<dyn Store>,
    pub metrics: SharedMetrics,
    pub ingest: IngestConfig,
    pub dc: String,
    pub stop: Arc<AtomicBool>,
    /// The sources taken (`ServerConfig::udp_allow_nets`).
    pub allow: Vec<ipnet::IpNet>,
}

/// The source networks UDP datagrams are taken from. IPv4-mapped IPv6 addresses (a dual-stack
/// socket's view of an IPv4 sender, `::ffff:a.b.c.d`) count as IPv4, in the networks and in the
/// sources alike. A linear scan: the list is a few networks.
#[derive(Clone, Debug)]
pub(crate) struct AllowList(Vec<ipnet::IpNet>);

impl AllowList {
    pub(crate) fn new(nets: &[ipnet::IpNet]) -> AllowList {
        AllowList(nets.iter().map(|n| canonical_net(*n)).collect())
    }

    pub(crate) fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip))
    }
}

/// A network inside `::ffff:0:0/96` as the IPv4 network it maps.
fn canonical_net(net: ipnet::IpNet) -> ipnet::IpNet {
    if let ipnet::IpNet::V6(v6) = net {
        if let (Some(v4), true) = (v6.addr().to_ipv4_mapped(), v6.prefix_len() >= 96) {
            if let Ok(n) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96) {
                return ipnet::IpNet::V4(n.trunc());
            }
        }
    }
    net
}

/// The refusal log line: at most one a minute, naming the first refused source seen since the
/// last line and how many were refused in between.
pub(crate) struct RefusalLog {
    last: Option<Instant>,
    since: u64,
}

impl RefusalLog {
    pub(crate) const EVERY: Duration = Duration::from_secs(60);

    pub(crate) fn new() -> RefusalLog {
        RefusalLog {
            last: None,
            since: 0,
        }
    }

    /// Records a refusal of `from` at `now`; returns the line to log, if it is time for one.
    pub(crate) fn refused(&mut self, from: IpAddr, now: Instant) -> Option<String> {
        self.since += 1;
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Self::EVERY)
        {
            return None;
        }
        let earlier = self.since - 1;
        self.last = Some(now);
        self.since = 0;
        let more = if earlier > 0 {
            format!(" ({earlier} refused since the last such line)")
        } else {
            String::new()
        };
        Some(format!(
            "UDP datagram from {} refused: not in udp_allow{more}; counted in \
             sluice_udp_refused_total{{reason=\"source\"}}, next line in a minute at most",
            from.to_canonical()
        ))
    }
}

impl UdpContext {
    /// Receives until `stop` is set.
    pub(crate) fn run(self, mut receiver: UdpReceiver) {
        let mut ingestor = match Ingestor::new(self.ingest.clone()) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("sluice-server: UDP ingest config: {e}");
                return;
            }
        };
        let mut prev = UdpStats::default();
        let mut counters = IngestCounters::new("udp", self.metrics.clone());
        let mut pending_drops = PendingDrops::new();
        let mut last_report = Instant::now();
        let allow = AllowList::new(&self.allow);
        let refused_source = self.metrics.udp_refused.with_label_values(&["source"]);
        let mut refusal_log = RefusalLog::new();
        while !self.stop.load(Ordering::Relaxed) {
            let now = now_unix();
            let mut events = Vec::new();
            let mut drops = DropCounters::new();
            let mut refused = 0;
            let res = receiver.recv_batch(|payload, from| {
                if !allow.allows(from.ip()) {
                    refused += 1;
                    if let Some(line) = refusal_log.refused(from.ip(), Instant::now()) {
                        eprintln!("sluice-server: {line}");
                    }
                    return;
                }
                let out = ingestor.ingest(payload, now);
                drops.add(&out);
                for d in &out.dropped {
                    drops::note_drop(&mut pending_drops, d, now, &self.dc);
                }
                events.extend(out.events);
            });
            if refused > 0 {
                refused_source.inc_by(refused);
            }
            if let Err(e) = res {
                eprintln!("sluice-server: UDP receive: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            if drops.payloads > 0 {
                counters.add_drops(&drops);
                for e in &events {
                    counters.add_events(&e.type_, 1);
                }
            }
            if !events.is_empty() && self.tx.blocking_send(Msg::Events { events, now }).is_err() {
                break; // the pipeline is gone
            }
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                prev = self.report(&mut receiver, prev, &mut pending_drops, now);
            }
        }
        self.report(&mut receiver, prev, &mut pending_drops, now_unix());
    }

    /// Publishes the receiver's counters and adds the second's drops to the store's counts.
    fn report(
        &self,
        receiver: &mut UdpReceiver,
        prev: UdpStats,
        pending_drops: &mut PendingDrops,
        now: i64,
    ) -> UdpStats {
        let stats = receiver.stats();
        let m = &self.metrics;
        m.udp_datagrams
            .inc_by(stats.datagrams.saturating_sub(prev.datagrams));
        m.udp_bytes.inc_by(stats.bytes.saturating_sub(prev.bytes));
        m.udp_truncated
            .inc_by(stats.truncated.saturating_sub(prev.truncated));
        m.udp_kernel_drops
            .inc_by(stats.kernel_drops.saturating_sub(prev.kernel_drops));
        let mut dropped = BTreeMap::new();
        let truncated = stats.truncated.saturating_sub(prev.truncated);
        if truncated > 0 {
            *dropped.entry("oversized".into()).or_default() += truncated;
        }
        let counts = Counts {
            kernel_dropped: stats.kernel_drops.saturating_sub(prev.kernel_drops),
            dropped,
            ..Counts::default()
        };
        drops::write_drop_counts(pending_drops, self.store.as_ref(), m, "UDP");
        if !counts.is_zero() {
            if let Err(e) = self.store.add_counts(now, &self.dc, "", "", &counts) {
                eprintln!("sluice-server: recording UDP drops: {e}");
                self.metrics.store_errors.inc();
            }
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(s: &[&str]) -> AllowList {
        AllowList::new(&s.iter().map(|n| n.parse().unwrap()).collect::<Vec<_>>())
    }

    #[test]
    fn allow_list_matches_v4_v6_and_mapped() {
        let a = nets(&["127.0.0.1/32", "10.0.0.0/8", "fd00::/8"]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(a.allows(ip("127.0.0.1")));
        assert!(!a.allows(ip("127.0.0.2")));
        assert!(a.allows(ip("10.200.0.1")));
        assert!(a.allows(ip("::ffff:127.0.0.1")));
        assert!(a.allows(ip("::ffff:10.1.2.3")));
        assert!(!a.allows(ip("::ffff:127.0.0.2")));
        assert!(a.allows(ip("fd12::1")));
        assert!(!a.allows(ip("::1")));
        // A mapped network counts as the IPv4 one.
        let m = nets(&["::ffff:192.168.0.0/112"]);
        assert!(m.allows(ip("192.168.3.4")));
        assert!(m.allows(ip("::ffff:192.168.3.4")));
        assert!(!m.allows(ip("192.169.0.1")));
        // Empty: nothing.
        assert!(!nets(&[]).allows(ip("127.0.0.1")));
        // The defaults.
        let d = nets(&["127.0.0.0/8", "::1/128"]);
        assert!(
            d.allows(ip("127.9.9.9")) && d.allows(ip("::1")) && d.allows(ip("::ffff:127.0.0.5"))
        );
        assert!(!d.allows(ip("192.0.2.2")) && !d.allows(ip("fd00::2")));
    }

    #[test]
    fn refusal_log_once_a_minute() {
        let mut l = RefusalLog::new();
        let t0 = Instant::now();
        let ip: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let first = l.refused(ip, t0).expect("the first refusal is logged");
        assert!(
            first.contains("127.0.0.2 refused") && !first.contains("::ffff"),
            "{first}"
        );
        for s in 1..60 {
            assert_eq!(l.refused(ip, t0 + Duration::from_secs(s)), None);
        }
        let next = l
            .refused(ip, t0 + Duration::from_secs(60))
            .expect("a minute later");
        assert!(next.contains("59 refused since"), "{next}");
        assert_eq!(l.refused(ip, t0 + Duration::from_secs(61)), None);
    }
}
