//! Building and starting the pipeline ([`Pipeline::start`]): the aggregators (one per shard,
//! each with its own spool), the WAL replayed into them, the disk guard, the substream runner,
//! the shard threads, the acknowledgement thread and the ticker. The result, [`Running`], is
//! what the listeners hand payloads to and what [`crate::shutdown`] stops.
//!
//! The order matters: the WAL is replayed before any shard runs (so that a replayed record is
//! never checkpointed before its events are stored), and every shard publishes what it holds
//! before the first one starts.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_collector::aggregate::Aggregator;
use sluice_collector::exactly_once::{ExactlyOnce, ReplayReport};
use sluice_collector::wal::{Wal, WalConfig, WalError};
use sluice_collector::Ingestor;
use sluice_store::Store;
use tokio::sync::mpsc;

use super::{shards, AckWaiter, FlushClock, Msg, Pipeline, PipelineTx};
use crate::config::ServerConfig;
use crate::disk::DiskGuard;
use crate::error::{Error, Result};
use crate::live::{LiveHub, LiveSettings};
use crate::metrics::{as_gauge, SharedMetrics};

/// A started pipeline: what handlers send to, and what a shutdown stops.
pub(crate) struct Running {
    /// Sends payloads (and ticks, drains, shutdowns) to the shards.
    pub tx: PipelineTx,
    /// Waits for the WAL before an acknowledgement.
    pub acks: Arc<AckWaiter>,
    /// The substream runner, fed by the shards' flushes.
    pub substreams: Arc<sluice_substreams::Runner>,
    /// Hands acknowledged payloads to attached tails.
    pub live: Arc<LiveHub>,
    /// The shard threads.
    pub threads: Vec<JoinHandle<()>>,
    /// The task that sends every shard a [`Msg::Tick`].
    pub ticker: tokio::task::JoinHandle<()>,
}

/// What every shard of one start shares, for [`Pipeline::new`].
struct Shared<'a> {
    config: &'a ServerConfig,
    shards: Arc<shards::Shards>,
    store: Arc<dyn Store>,
    metrics: SharedMetrics,
    wal: Arc<Wal>,
    clock: FlushClock,
    disk: Arc<Mutex<DiskGuard>>,
    substreams: Arc<sluice_substreams::Runner>,
    live: Arc<LiveHub>,
}

impl Pipeline {
    /// Builds the pipeline of `config` over `store` (already timed) and starts it: the WAL
    /// replayed, the shard threads running, the ticker ticking.
    pub(crate) async fn start(
        config: &ServerConfig,
        store: Arc<dyn Store>,
        metrics: SharedMetrics,
    ) -> Result<Running> {
        let clock = FlushClock {
            grace_ms: i64::try_from(config.grace().as_millis()).unwrap_or(i64::MAX),
        };
        let (ingestor, aggregators) = aggregators(config, &store)?;

        // Open the WAL and replay it into the aggregators before serving anything (the spools,
        // if an earlier run left some, are replayed by the aggregators' first flush).
        let (ingestor, aggregators, wal, replayed) = {
            let (dir, wal_cfg, salvage) =
                (config.wal_path(), config.wal_config()?, config.salvage_wal);
            tokio::task::spawn_blocking(move || {
                replay_wal(&dir, wal_cfg, salvage, ingestor, aggregators, clock)
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))??
        };
        publish_start(config, &metrics, &aggregators, &wal, &replayed);
        let disk = Arc::new(Mutex::new(disk_guard(config, &metrics, &wal)));

        // Rollups named in the configuration are registered first, so they run on every blob.
        {
            let mut specs = config.rollups.clone();
            if config.statsd.is_some() {
                specs.extend(crate::rollups::statsd_rollups());
            }
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                crate::rollups::register(&*store, &specs, crate::pipeline::now_unix())
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))??;
        }
        // Substreams run on their own threads, fed by the pipeline's flush reports.
        let substreams = Arc::new(sluice_substreams::Runner::start(
            store.clone(),
            config.substream_config(),
        ));

        // Tails fed from memory start after the replayed records (those are in the store's
        // chunks or in the aggregators, flushed there).
        let live = Arc::new(
            LiveHub::start(
                LiveSettings {
                    queue_records: config.tail_live_queue_records,
                    profile: config.profile,
                    collector: config.collector_id.clone(),
                },
                wal.clone(),
                wal.last_seq(),
                metrics.clone(),
            )
            .map_err(|e| Error::Io(format!("starting the live hub: {e}")))?,
        );
        // The shards: their queues (payloads, ticks) and the channels of routed events.
        let shard_count = aggregators.len();
        let (route_txs, route_rxs): (Vec<_>, Vec<_>) =
            (0..shard_count).map(|_| mpsc::unbounded_channel()).unzip();
        let shared = Shared {
            config,
            shards: Arc::new(shards::Shards::new(route_txs)),
            store,
            metrics,
            wal,
            clock,
            disk,
            substreams: substreams.clone(),
            live: live.clone(),
        };
        let mut pipes = Vec::with_capacity(shard_count);
        let mut replay_ingestor = Some(ingestor);
        for (i, aggregator) in aggregators.into_iter().enumerate() {
            let ingestor = match replay_ingestor.take() {
                Some(ingestor) => ingestor,
                None => new_ingestor(config)?,
            };
            let pipe = Pipeline::new(i, &shared, ingestor, aggregator);
            // Published before any shard runs: no checkpoint passes a replayed record.
            pipe.publish_pending();
            pipes.push(pipe);
        }
        let mut txs = Vec::with_capacity(shard_count);
        let mut threads = Vec::with_capacity(shard_count);
        for (pipe, routed) in pipes.into_iter().zip(route_rxs) {
            let (tx, rx) = mpsc::channel(config.queue);
            txs.push(tx);
            let t = std::thread::Builder::new()
                .name(format!("sluice-pipeline-{}", pipe.shard))
                .spawn(move || pipe.run(rx, routed))
                .map_err(|e| Error::Io(format!("starting a pipeline thread: {e}")))?;
            threads.push(t);
        }
        let tx = PipelineTx::new(txs, shared.shards);
        // Acknowledgements wait for the WAL on a thread of their own.
        let acks = Arc::new(
            AckWaiter::start(shared.wal)
                .map_err(|e| Error::Io(format!("starting the acks thread: {e}")))?,
        );
        let ticker = tokio::spawn(tick(tx.clone()));
        Ok(Running {
            tx,
            acks,
            substreams,
            live,
            threads,
            ticker,
        })
    }

    /// Shard `shard`'s state: its ingestor and aggregator (its done notes logged in the WAL
    /// before their index entries), with what every shard shares.
    fn new(
        shard: usize,
        shared: &Shared<'_>,
        ingestor: Ingestor,
        mut aggregator: Aggregator,
    ) -> Pipeline {
        let config = shared.config;
        let exactly_once = ExactlyOnce::new(shared.wal.clone());
        aggregator.set_note_log(super::exactly_once::note_log(
            &exactly_once,
            shared.metrics.clone(),
        ));
        Pipeline {
            shard,
            shards: shared.shards.clone(),
            flush_wanted: false,
            turn_since: None,
            ingestor,
            aggregator,
            store: shared.store.clone(),
            metrics: shared.metrics.clone(),
            expire_every: config.expire_interval_secs as i64,
            expiring: Arc::default(),
            wal: shared.wal.clone(),
            dc: config.dc.clone(),
            pending_drops: Default::default(),
            clock: shared.clock,
            exactly_once,
            max_pending_bytes: config.max_pending_bytes(),
            ingest_counters: Default::default(),
            disk: shared.disk.clone(),
            substreams: shared.substreams.clone(),
            live: shared.live.clone(),
        }
    }
}

fn new_ingestor(config: &ServerConfig) -> Result<Ingestor> {
    Ingestor::new(config.ingest_config()).map_err(|e| Error::Config(e.to_string()))
}

/// The replay's ingestor and one aggregator per pipeline thread, each with its own spool; more
/// threads than asked when an earlier run with more left spooled batches (they are replayed
/// first).
fn aggregators(
    config: &ServerConfig,
    store: &Arc<dyn Store>,
) -> Result<(Ingestor, Vec<Aggregator>)> {
    let spool_base = config.spool_path();
    let threads = config.pipeline_threads();
    let shard_count = threads.max(shards::spooled_shards(&spool_base) + 1);
    if shard_count > threads {
        eprintln!(
            "sluice-server: {shard_count} pipeline threads (not {threads}): spools of an earlier run with more threads are replayed"
        );
    }
    let ingestor = new_ingestor(config)?;
    let mut aggregators = Vec::with_capacity(shard_count);
    for i in 0..shard_count {
        let mut agg_cfg = config.aggregator_config()?;
        if let Some(spool) = &mut agg_cfg.spool {
            spool.dir = shards::spool_dir(&spool_base, i);
            spool.max_bytes = (spool.max_bytes / shard_count as u64).max(1);
        }
        // Kept encoders are memory beside the budget: half of it at most, over all shards.
        agg_cfg.max_spare_bytes = config.spare_bytes_per_shard(shard_count);
        aggregators.push(
            Aggregator::new(agg_cfg, store.clone()).map_err(|e| Error::Config(e.to_string()))?,
        );
    }
    Ok((ingestor, aggregators))
}

/// Sets the gauges the replay decided (what it replayed, skipped and left spooled or pending).
fn publish_start(
    config: &ServerConfig,
    m: &SharedMetrics,
    aggregators: &[Aggregator],
    wal: &Wal,
    replayed: &ReplayReport,
) {
    let sum = |f: &dyn Fn(&Aggregator) -> u64| aggregators.iter().map(f).sum::<u64>();
    m.wal_replayed_records.set(as_gauge(replayed.records));
    m.wal_replay_skipped_events.set(as_gauge(replayed.skipped));
    m.spool_max_bytes.set(as_gauge(config.spool_max_bytes));
    m.spool_batches
        .set(as_gauge(sum(&|a| a.spooled_batches() as u64)));
    m.spool_bytes.set(as_gauge(sum(&|a| a.spooled_bytes())));
    m.spool_events.set(as_gauge(sum(&|a| a.spooled_events())));
    m.pending_events.set(as_gauge(sum(&|a| a.pending_events())));
    m.pending_bytes.set(as_gauge(sum(&|a| a.pending_bytes())));
    m.max_pending_bytes
        .set(as_gauge(config.max_pending_bytes()));
    m.wal_checkpointed_seq.set(as_gauge(wal.checkpointed()));
}

/// The disk guard over the data, WAL and spool directories, measured once (said on stderr and
/// in `/metrics`).
fn disk_guard(config: &ServerConfig, metrics: &SharedMetrics, wal: &Wal) -> DiskGuard {
    let mut watched = vec![
        config.data_dir.clone(),
        config.wal_path(),
        config.spool_path(),
    ];
    watched.dedup();
    let mut disk = DiskGuard::new(watched, config.min_free_bytes);
    eprintln!("sluice-server: {}", disk.reserve_line());
    disk.refresh(wal.failing());
    metrics.set_unavailable(disk.why());
    metrics.disk_free_bytes.set(as_gauge(disk.free));
    metrics.min_free_bytes.set(as_gauge(disk.reserve));
    disk
}

/// Asks every shard to flush due epochs, every 100 ms, until the shards are gone: a second is
/// stored within a tenth of a second of its grace period ending (a tick with nothing due costs
/// a map lookup).
async fn tick(tx: PipelineTx) {
    let mut iv = tokio::time::interval(Duration::from_millis(100));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        iv.tick().await;
        if !tx.broadcast(|| Msg::Tick).await {
            return;
        }
    }
}

/// Opens the WAL in `dir` and replays it into `ingestor` and `aggregators` (blocking), saying
/// on stderr what it skipped or could not prove. A damaged record stops the start unless
/// `salvage`.
fn replay_wal(
    dir: &Path,
    wal_cfg: WalConfig,
    salvage: bool,
    mut ingestor: Ingestor,
    mut aggregators: Vec<Aggregator>,
    clock: FlushClock,
) -> Result<(Ingestor, Vec<Aggregator>, Arc<Wal>, ReplayReport)> {
    // The records are read again segment by segment as they are replayed: a long log
    // (a future-dated payload holds the checkpoint back) never sits in memory whole.
    let (wal, records, opened) = Wal::open_replay(dir, wal_cfg, salvage).map_err(|e| match e {
        WalError::Corrupted { .. } => Error::Io(format!(
            "{e}\nThe server does not start past damaged WAL records. To start anyway, run with \
             --salvage-wal (TOML: salvage_wal = true): each damaged WAL file is first copied to \
             {}/damaged/, then the records after the damage in it are skipped (logged).",
            dir.display()
        )),
        e => Error::Io(e.to_string()),
    })?;
    for w in &opened.warnings {
        eprintln!("sluice-server: WAL open: {w}");
    }
    let n = aggregators.len();
    let report = sluice_collector::exactly_once::replay_log_routed(
        &records,
        &mut ingestor,
        &mut aggregators,
        |e| shards::shard_of(&e.dc, &e.type_, &e.subtype, n),
        |now| clock.at_end_of(now),
    )
    .map_err(|e| Error::Io(format!("WAL replay: {e}")))?;
    for bad in &report.bad_notes {
        eprintln!("sluice-server: WAL replay: {bad} (its events are replayed: at least once)");
    }
    for e in &report.counts_errors {
        eprintln!(
            "sluice-server: WAL replay: {e} (that batch's completeness counts may be missing)"
        );
    }
    sluice_collector::failpoint::hit("replay.done");
    if report.unproven > 0 {
        eprintln!(
            "sluice-server: WAL replay: {} done notes without their index entries (a crash before indexing): their events are replayed",
            report.unproven
        );
    }
    Ok((ingestor, aggregators, Arc::new(wal), report))
}
