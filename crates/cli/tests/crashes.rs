//! Exactly once across repeated SIGKILLs of a real `sluice serve`:
//! HTTP clients, and a TCP client, send acknowledged batches of events of several (dc, type,
//! subtype) groups, a fifth of each batch dated 2–3 s back (late), and a UDP client fire-and-
//! forget ones, while the server is killed every 0.3–1.5 s (randomised); after a final clean
//! start and flush every acknowledged id is read back exactly once, every other one at most once,
//! and the completeness counts equal what is stored. Run with 1, 2 and 4 pipeline threads: with more
//! than one, a payload's events are routed between shards (where a routed event's replay once stored it twice).
//! The deterministic counterpart, a crash at each step in turn, is `failpoints.rs`.
//!
//! The long run (≥ 500 k acked events) is the same probe, larger:
//! `SLUICE_KILL_THREADS=2 cargo test -p sluice --test crashes -- --ignored --nocapture
//! probe` (4 clients, 15 kills; `SLUICE_KILL_CLIENTS`, `SLUICE_KILL_COUNT` change them).
//!
//! Runs the `sluice` binary cargo builds for this package's tests.

mod common;
mod load;
mod process;

use std::time::{Duration, Instant};

use common::now;
use load::{Clients, Load, Targets, GROUPS};
use process::{Server, XorShift};

/// What one probe does.
struct Probe {
    threads: usize,
    clients: usize,
    kills: u64,
    /// `store = …` of the config (`None`: the embedded store in the data directory).
    store: Option<String>,
}

impl Probe {
    /// From `SLUICE_KILL_*` (for the long run), else the given defaults.
    fn from_env(threads: usize, clients: usize, kills: u64) -> Probe {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Probe {
            threads: var("SLUICE_KILL_THREADS").map_or(threads, |v| v as usize),
            clients: var("SLUICE_KILL_CLIENTS").map_or(clients, |v| v as usize),
            kills: var("SLUICE_KILL_COUNT").unwrap_or(kills),
            store: None,
        }
    }

    fn run(&self, name: &str) {
        let seed = std::env::var("SLUICE_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| now() as u64);
        println!(
            "seed {seed} (SLUICE_KILL_SEED to repeat); {} threads, {} HTTP + 1 TCP + 1 UDP clients, {} groups",
            self.threads,
            self.clients,
            GROUPS.len()
        );
        let mut rng = XorShift::new(seed);
        let dir = sluice_test_support::temp_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("sluice.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\ntcp = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\n{}",
                dir.join("data"),
                self.store
                    .as_ref()
                    .map_or(String::new(), |s| format!("store = {s:?}\n")),
            ),
        )
        .unwrap();
        let threads = self.threads.to_string();
        let flags = ["--pipeline-threads", threads.as_str()];
        let start = now();
        let load = Load::start_mixed(Clients {
            http: self.clients,
            tcp: 1,
            udp: 1,
        });
        let log = dir.join("server.log");
        let deadline = Instant::now() + Duration::from_secs(60 + 6 * self.kills);
        for k in 0..self.kills {
            let mut server = Server::start_with(&config, &dir.join("data"), &flags);
            load.target_all(Some(Targets::of(server.addr, &log)));
            // Counted from the spawn: a kill may land in the first flush of what was replayed.
            let wait = Duration::from_millis(300 + rng.below(1201));
            let started = server.spawned.elapsed();
            std::thread::sleep(wait.saturating_sub(started));
            server.kill();
            println!(
                "kill {k} {wait:?} after the spawn (serving after {started:?}): {} acked so far",
                load.acked()
            );
            assert!(Instant::now() < deadline, "kills took too long");
        }
        // A client may be inside a request to the dead server: it fails fast (refused).
        let sent = load.stop();
        assert!(
            sent.acked.len() > 50,
            "too few acknowledged batches: {}",
            sent.acked.len()
        );

        // A clean start: the WAL is replayed and everything flushed.
        let server = Server::start_with(&config, &dir.join("data"), &flags);
        server.wait_idle(Duration::from_secs(60));
        let (from, to) = (start - 10, now() + 10);
        let events = server.read(from, to);
        let verdict = load::check(&sent, &events);
        println!(
            "{} threads, {} HTTP + 1 TCP + 1 UDP clients, {} kills: {} acked batches, {} unacked: {}",
            self.threads,
            self.clients,
            self.kills,
            sent.acked.len(),
            sent.unacked.len(),
            verdict.summary()
        );
        verdict.assert_exactly_once();
        assert_eq!(
            load::counted(&server, from, to),
            load::read_by_group(&events),
            "completeness counts"
        );
        server.stop();
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        println!(
            "restarts that found a done note without its index entries (a kill inside a flush): {}",
            log.matches("without their index entries").count()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn one_thread_stores_every_acked_event_exactly_once() {
    Probe::from_env(1, 2, 12).run("crashes-1");
}

#[test]
fn two_threads_store_every_acked_event_exactly_once() {
    Probe::from_env(2, 2, 12).run("crashes-2");
}

#[test]
fn four_threads_store_every_acked_event_exactly_once() {
    Probe::from_env(4, 2, 12).run("crashes-4");
}

/// The same on a real Cassandra cluster (`scripts/cassandra.sh`, one node): blobs by
/// lightweight transactions, index and count rows; the protocol is the store's contract.
#[test]
fn two_threads_on_cassandra_store_every_acked_event_exactly_once() {
    let Some(cluster) = sluice_store_cassandra::testing::cluster(1, "crashes on cassandra") else {
        return;
    };
    let keyspace = sluice_store_cassandra::testing::fresh_keyspace("crashes");
    let mut probe = Probe::from_env(2, 2, 8);
    probe.store = Some(format!("cassandra://{}/{keyspace}", cluster.hosts_csv()));
    probe.run("crashes-cassandra");
    let config = sluice_store_cassandra::CassandraConfig::new(
        cluster.hosts_csv().split(',').map(str::to_owned).collect(),
        &keyspace,
    );
    if let Ok(s) = sluice_store_cassandra::CassandraStore::open_read_only(
        config,
        sluice_store::Retention::default(),
    ) {
        let _ = s.drop_keyspace();
    }
}

/// The closing-note run (see the module docs): 4 clients, 15 kills, `SLUICE_KILL_THREADS`.
#[test]
#[ignore]
fn probe() {
    Probe::from_env(2, 4, 15).run("crashes-probe");
}
