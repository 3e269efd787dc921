//! [`Engine`]: live evaluation inside `sluice serve` — every rule at each of its steps, as soon
//! as the step is stored, its transitions notified with evidence, its state kept in the
//! catalog.
//!
//! ```text
//! every tick (200 ms):
//!   ready = the end of the last step whose seconds were flushed: now − grace − settle
//!   per rollup with rules: read its new states [read_to, ready) once → every rule on it
//!   per rule: evaluate each of its steps ≤ ready (RuleRun) → transitions
//!     → Notification (labels, annotations, evidence) → outbox (catalog) → Sink
//!   a delivery (every receiver took it) removes it from the outbox
//! ```
//!
//! | moment of a restart | what happens |
//! |---|---|
//! | pending | the state is in the catalog; evaluation goes on at the current step and fires at `since + for` |
//! | firing, notified | not sent again (Alertmanager's resends go on) |
//! | firing, not yet delivered | the outbox still holds it: sent again at start |
//!
//! The state is written whenever an alert becomes pending, firing, resolved or inactive, and at
//! every delivery, and once when the engine starts evaluating the rule; the last step done of
//! every rule every [`SAVE_EVERY`], in one record for all rules ([`catalog::put_progress`]:
//! one catalog write, not one per rule). As Prometheus does, the steps
//! a server was down for are not evaluated after it comes back: the states it had go on from
//! the current step (a backtest does evaluate them).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sluice_store::Store;
use sluice_substreams::registry::{self, Definition};

use crate::catalog;
use crate::evidence;
use crate::feed::Feed;
use crate::notification::{Notification, Status};
use crate::rule::Rule;
use crate::run::RuleRun;
use crate::state::{fingerprint, Phase, Transition};

/// How often the engine looks for steps to evaluate.
pub const TICK: Duration = Duration::from_millis(200);
/// How soon a failed load of the rules (the store down) is tried again.
pub const RELOAD_RETRY: Duration = Duration::from_secs(5);
/// How often the last step done of every rule is saved (one record for all rules).
pub const SAVE_EVERY: Duration = Duration::from_secs(10);
/// Longest sample-events annotation, bytes (the rest is cut, marked).
pub const MAX_SAMPLES_TEXT: usize = 16 * 1024;

/// Where notifications go (the Notifier, or a test's collector).
pub trait Sink: Send + Sync {
    /// Queues `n` for delivery; false when it could not be queued (counted by the sink).
    fn send(&self, n: Notification) -> bool;

    /// Alerts firing and already delivered before a restart: receivers that resend firing
    /// alerts (Alertmanager) keep doing so; nothing is sent again.
    fn keep_firing(&self, _alerts: Vec<Notification>) {}
}

/// The engine's settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The server's flush grace: a second is stored this long after it ends.
    pub grace: Duration,
    /// Extra wait after the grace before a step is evaluated (the flush and the rollup's run).
    pub settle: Duration,
    /// The server's URL, for links in notifications (`http://127.0.0.1:8180`).
    pub external_url: String,
}

/// Counters and gauges for `/metrics`.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Rule evaluations done.
    pub evaluations: AtomicU64,
    /// Time spent evaluating (reads, merges, expressions, evidence), microseconds.
    pub eval_micros: AtomicU64,
    /// Transitions to firing.
    pub fired: AtomicU64,
    /// Transitions to resolved.
    pub resolved: AtomicU64,
    /// Notifications handed to the sink.
    pub notifications: AtomicU64,
    /// Notifications the sink refused (its queue full) — kept in the outbox, tried again.
    pub sink_refused: AtomicU64,
    /// Notifications not sent because the rule was silenced.
    pub silenced: AtomicU64,
    /// Notifications dropped from a full outbox.
    pub outbox_dropped: AtomicU64,
    /// Errors (reads, catalog writes, rules that do not load), each logged.
    pub errors: AtomicU64,
    /// Alerts firing now.
    pub firing: AtomicU64,
    /// Alerts pending now.
    pub pending: AtomicU64,
    /// Sum of the delays from a window's end to its notification being queued, ms.
    pub notify_delay_ms_sum: AtomicU64,
    /// Notifications those delays were measured on.
    pub notify_delay_count: AtomicU64,
    /// The largest such delay, ms.
    pub notify_delay_ms_max: AtomicU64,
}

/// One alert as `GET /v1/alerts` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AlertView {
    /// The group's labels.
    pub labels: BTreeMap<String, String>,
    /// `pending` or `firing`.
    pub state: &'static str,
    /// When the condition started holding.
    pub active_since: i64,
    /// The last value.
    pub value: Option<f64>,
}

/// One rule as `GET /v1/alerts` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RuleView {
    /// The rule.
    #[serde(flatten)]
    pub rule: Rule,
    /// `threshold`, `zscore` or `stddev`.
    pub kind: &'static str,
    /// `inactive`, `pending` or `firing`.
    pub state: &'static str,
    /// The last step evaluated (end of its window).
    pub last_eval: i64,
    /// Pending and firing alerts.
    pub alerts: Vec<AlertView>,
    /// Notifications not yet taken by every receiver (kept in the outbox, retried).
    pub undelivered: usize,
    /// Why it does not run, if it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The live engine (a thread). Dropping it stops the thread.
pub struct Engine {
    stop: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    views: Arc<RwLock<Vec<RuleView>>>,
    /// Counters for `/metrics`.
    pub stats: Arc<EngineStats>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Engine {
    /// Starts evaluating the rules in `store`'s catalog; `delivered` gives the ids of
    /// notifications every receiver took.
    pub fn start(
        store: Arc<dyn Store>,
        cfg: EngineConfig,
        sink: Arc<dyn Sink>,
        delivered: Receiver<String>,
    ) -> Engine {
        let stop = Arc::new(AtomicBool::new(false));
        let reload = Arc::new(AtomicBool::new(true));
        let views = Arc::new(RwLock::new(Vec::new()));
        let stats = Arc::new(EngineStats::default());
        let mut worker = Worker {
            store,
            cfg,
            sink,
            stats: stats.clone(),
            runs: BTreeMap::new(),
            errors: BTreeMap::new(),
            defs: BTreeMap::new(),
            feeds: HashMap::new(),
            last_save: HashMap::new(),
            progress_saved: (Instant::now(), BTreeMap::new()),
        };
        let (s, r, v) = (stop.clone(), reload.clone(), views.clone());
        let thread = std::thread::Builder::new()
            .name("sluice-alerts".into())
            .spawn(move || worker.run(&s, &r, &v, &delivered))
            .ok();
        Engine {
            stop,
            reload,
            views,
            stats,
            thread: std::sync::Mutex::new(thread),
        }
    }

    /// Re-reads the rules at the next tick (after a change to the catalog).
    pub fn reload(&self) {
        self.reload.store(true, Ordering::Release);
    }

    /// The rules and their alerts as of the last tick.
    pub fn views(&self) -> Vec<RuleView> {
        self.views.read().map(|v| v.clone()).unwrap_or_default()
    }

    /// Stops the thread, saving every rule's last step done (later calls do nothing).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.lock().map(|mut t| t.take()).unwrap_or(None);
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Worker {
    store: Arc<dyn Store>,
    cfg: EngineConfig,
    sink: Arc<dyn Sink>,
    stats: Arc<EngineStats>,
    runs: BTreeMap<String, Run>,
    errors: BTreeMap<String, (Rule, String)>,
    defs: BTreeMap<String, Definition>,
    /// Per rollup: its states, shared by its rules.
    feeds: HashMap<String, RollupFeed>,
    last_save: HashMap<String, Instant>,
    /// When the last steps done were last saved, and what was saved.
    progress_saved: (Instant, BTreeMap<String, i64>),
}

struct Run {
    run: RuleRun,
    /// The next evaluation time.
    next: i64,
}

/// A rollup's feed and how much of the rollup it holds.
struct RollupFeed {
    feed: Feed,
    /// States are read from here (step start, included)…
    from: i64,
    /// …up to here (excluded).
    to: i64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Worker {
    fn run(
        &mut self,
        stop: &AtomicBool,
        reload: &AtomicBool,
        views: &RwLock<Vec<RuleView>>,
        delivered: &Receiver<String>,
    ) {
        // A load that failed (the store down) is tried again every RELOAD_RETRY.
        let mut retry_at: Option<Instant> = None;
        while !stop.load(Ordering::Acquire) {
            let retry_due = retry_at.is_some_and(|t| Instant::now() >= t);
            if reload.swap(false, Ordering::AcqRel) || retry_due {
                retry_at = (!self.load()).then(|| Instant::now() + RELOAD_RETRY);
            }
            let started = Instant::now();
            self.tick();
            if self.progress_saved.0.elapsed() >= SAVE_EVERY {
                self.save_progress();
            }
            self.stats
                .eval_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            self.publish(views);
            let deadline = Instant::now() + TICK;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match delivered.recv_timeout(left) {
                    Ok(id) => self.delivered(&id),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(left);
                        break;
                    }
                }
            }
        }
        self.save_progress();
    }

    /// Saves the last step done of every rule (one catalog record) if it changed; when that
    /// fails, each rule's state instead.
    fn save_progress(&mut self) {
        let last_evals: BTreeMap<String, i64> = self
            .runs
            .iter()
            .filter(|(_, r)| r.run.state.last_eval > 0)
            .map(|(name, r)| (name.clone(), r.run.state.last_eval))
            .collect();
        if last_evals == self.progress_saved.1 {
            self.progress_saved.0 = Instant::now();
            return;
        }
        match catalog::put_progress(&*self.store, &last_evals) {
            Ok(()) => self.progress_saved = (Instant::now(), last_evals),
            Err(e) => {
                self.progress_saved.0 = Instant::now();
                self.error(&format!("saving the rules' last steps done: {e}"));
                let names: Vec<String> = self.runs.keys().cloned().collect();
                for name in names {
                    self.save(&name);
                }
            }
        }
    }

    /// (Re)reads rules and rollups; keeps the runs of unchanged rules. False when the store
    /// could not be read (nothing changed; tried again after [`RELOAD_RETRY`]).
    fn load(&mut self) -> bool {
        let rules = match catalog::load_rules(&*self.store) {
            Ok((rules, bad)) => {
                for (name, why) in bad {
                    self.error(&format!("alert rule {name:?} does not load: {why}"));
                }
                rules
            }
            Err(e) => {
                self.error(&format!("alert rules: {e}"));
                return false;
            }
        };
        self.defs = match registry::load(&*self.store) {
            Ok(d) => d.0,
            Err(e) => {
                self.error(&format!("rollups of the alert rules: {e}"));
                return false;
            }
        };
        self.runs
            .retain(|name, r| rules.get(name) == Some(&r.run.rule));
        // A new run of a changed rule saves its state once (its first evaluation).
        let runs = &self.runs;
        self.last_save.retain(|name, _| runs.contains_key(name));
        self.errors.clear();
        for (name, rule) in rules {
            if self.runs.contains_key(&name) {
                continue;
            }
            match self.start_run(&rule) {
                Ok(run) => {
                    self.runs.insert(name, run);
                }
                Err(e) => {
                    self.error(&e);
                    self.errors.insert(name, (rule, e));
                }
            }
        }
        true
    }

    /// A run of `rule`: its state from the catalog, its windows filled from stored states,
    /// the outbox sent again.
    fn start_run(&mut self, rule: &Rule) -> Result<Run, String> {
        let def = self
            .defs
            .get(&rule.rollup)
            .ok_or_else(|| {
                format!(
                    "alert rule {:?}: no rollup named {:?}",
                    rule.name, rule.rollup
                )
            })?
            .clone();
        let state = catalog::load_state(&*self.store, &rule.name).map_err(|e| e.to_string())?;
        let mut run = RuleRun::new(rule.clone(), &def, state).map_err(|e| e.to_string())?;
        let step = run.eval_step as i64;
        let ready = self.ready(&def);
        // The first step still to evaluate: the one after the last done, unless the server was
        // down since (then the current one: steps it missed are not evaluated late).
        let next = (ready - ready.rem_euclid(step)).max(run.state.last_eval + step);
        // The rollup's feed holds what the rule's first evaluation reads.
        let need_from = next - run.reads_back() - step;
        let rf = self
            .feeds
            .entry(def.name.clone())
            .or_insert_with(|| RollupFeed {
                feed: Feed::new(def.clone()),
                from: need_from,
                to: need_from,
            });
        if rf.to < ready {
            let mut states = Vec::new();
            sluice_rollups::read_states(&*self.store, &def, rf.to, ready, |s| states.push(s))
                .map_err(|e| e.to_string())?;
            states.into_iter().for_each(|s| rf.feed.push(s));
            rf.to = ready;
        }
        if need_from < rf.from {
            let mut states = Vec::new();
            sluice_rollups::read_states(&*self.store, &def, need_from, rf.from, |s| states.push(s))
                .map_err(|e| e.to_string())?;
            states.into_iter().for_each(|s| rf.feed.push(s));
            rf.from = need_from;
        }
        // An anomaly rule's points of the baseline, from a feed of its own.
        if rule.anomaly.is_some() {
            let warm_from = next - step - rule.lookback_secs() as i64;
            let mut warm_feed = Feed::new(def.clone());
            let mut states = Vec::new();
            sluice_rollups::read_states(&*self.store, &def, warm_from - step, next, |s| {
                states.push(s)
            })
            .map_err(|e| e.to_string())?;
            let mut warm = warm_from;
            for s in states {
                let w = sluice_rollups::states::state_step(&s).unwrap_or(i64::MIN);
                while warm + step <= w && warm + step < next {
                    warm += step;
                    warm_feed.clear_cache();
                    run.evaluate(warm, false, &mut warm_feed);
                    warm_feed.trim(warm + step - run.reads_back());
                }
                warm_feed.push(s);
            }
            while warm + step < next {
                warm += step;
                warm_feed.clear_cache();
                run.evaluate(warm, false, &mut warm_feed);
            }
        }
        // Alerts firing and notified before the restart: Alertmanager keeps hearing of them
        // (its resends), nobody is told again.
        let firing: Vec<Notification> = run
            .state
            .instances
            .values()
            .filter(|i| i.phase == Phase::Firing)
            .filter(|i| {
                let fp = fingerprint(&rule.name, &i.labels);
                !run.state.outbox.iter().any(|n| n.fingerprint == fp)
            })
            .map(|i| {
                let tr = Transition {
                    t: i.firing_since.unwrap_or(i.active_since),
                    labels: i.labels.clone(),
                    status: Status::Firing,
                    value: i.value,
                    firing_since: i.firing_since.unwrap_or(i.active_since),
                };
                self.notification(&run, &def, &tr, false)
            })
            .collect();
        if rule.silenced_until <= now_ms() / 1000 {
            self.sink.keep_firing(firing);
        }
        // What was not delivered before the restart goes again (a silenced rule's is let go).
        if rule.silenced_until > now_ms() / 1000 {
            let n = run.state.outbox.len() as u64;
            self.stats.silenced.fetch_add(n, Ordering::Relaxed);
            run.state.outbox.clear();
        }
        for n in run.state.outbox.clone() {
            self.stats.notifications.fetch_add(1, Ordering::Relaxed);
            if !self.sink.send(n) {
                self.stats.sink_refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Run { run, next })
    }

    /// The end of the last step of `def` whose seconds are all stored.
    fn ready(&self, def: &Definition) -> i64 {
        let step = sluice_rollups::query::rollup_step(def).unwrap_or(1) as i64;
        let at =
            (now_ms() - (self.cfg.grace + self.cfg.settle).as_millis() as i64).div_euclid(1000);
        at - at.rem_euclid(step)
    }

    fn tick(&mut self) {
        let rollups: std::collections::BTreeSet<String> = self
            .runs
            .values()
            .map(|r| r.run.rule.rollup.clone())
            .collect();
        self.feeds.retain(|name, _| rollups.contains(name));
        for rollup in rollups {
            let Some(def) = self.defs.get(&rollup).cloned() else {
                continue;
            };
            let ready = self.ready(&def);
            let Some(rf) = self.feeds.get_mut(&rollup) else {
                continue;
            };
            if ready > rf.to {
                let mut states = Vec::new();
                match sluice_rollups::read_states(&*self.store, &def, rf.to, ready, |s| {
                    states.push(s)
                }) {
                    Ok(_) => {
                        states.into_iter().for_each(|s| rf.feed.push(s));
                        rf.to = ready;
                    }
                    Err(e) => {
                        self.error(&format!("rollup {rollup:?}: {e}"));
                        continue;
                    }
                }
            }
            let Some(mut rf) = self.feeds.remove(&rollup) else {
                continue;
            };
            rf.feed.clear_cache();
            let names: Vec<String> = self
                .runs
                .iter()
                .filter(|(_, r)| r.run.rule.rollup == rollup)
                .map(|(n, _)| n.clone())
                .collect();
            for name in &names {
                self.evaluate_rule(name, &def, ready, &mut rf.feed);
            }
            // Keep what the next evaluations read.
            let keep = names
                .iter()
                .filter_map(|n| self.runs.get(n))
                .map(|r| r.next - r.run.reads_back() - r.run.eval_step as i64)
                .min()
                .unwrap_or(ready);
            rf.feed.trim(keep);
            rf.from = rf.from.max(keep);
            rf.feed.clear_cache();
            self.feeds.insert(rollup, rf);
        }
    }

    fn evaluate_rule(&mut self, name: &str, def: &Definition, ready: i64, feed: &mut Feed) {
        let mut changed = false;
        loop {
            let Some(r) = self.runs.get_mut(name) else {
                return;
            };
            if r.next > ready {
                break;
            }
            let t = r.next;
            r.next += r.run.eval_step as i64;
            let (_, transitions) = r.run.evaluate(t, true, feed);
            changed |= std::mem::take(&mut r.run.state.changed);
            self.stats.evaluations.fetch_add(1, Ordering::Relaxed);
            for tr in transitions {
                changed = true;
                let Some(r) = self.runs.get(name) else { return };
                let n = self.notification(&r.run, def, &tr, true);
                let Some(r) = self.runs.get_mut(name) else {
                    return;
                };
                r.run.state.outbox.push(n.clone());
                let silenced = r.run.rule.silenced_until;
                match tr.status {
                    Status::Firing => self.stats.fired.fetch_add(1, Ordering::Relaxed),
                    Status::Resolved => self.stats.resolved.fetch_add(1, Ordering::Relaxed),
                };
                // Saved before it is sent: a crash between the two sends it again, never
                // loses it.
                self.save(name);
                self.deliver(&silenced, n);
                let delay = (now_ms() - tr.t * 1000).max(0) as u64;
                self.stats
                    .notify_delay_ms_sum
                    .fetch_add(delay, Ordering::Relaxed);
                self.stats
                    .notify_delay_count
                    .fetch_add(1, Ordering::Relaxed);
                self.stats
                    .notify_delay_ms_max
                    .fetch_max(delay, Ordering::Relaxed);
            }
        }
        // Saved when its alerts changed, and once when the run starts (so the state is in the
        // catalog and the progress record applies to it); the last step done is saved with
        // every rule's ([`Worker::save_progress`]).
        if changed || !self.last_save.contains_key(name) {
            self.save(name);
        }
    }

    /// Hands `n` to the sink unless the rule is silenced (then it leaves the outbox).
    fn deliver(&mut self, silenced_until: &i64, n: Notification) {
        if *silenced_until > now_ms() / 1000 {
            self.stats.silenced.fetch_add(1, Ordering::Relaxed);
            self.delivered(&n.id);
            return;
        }
        self.stats.notifications.fetch_add(1, Ordering::Relaxed);
        if !self.sink.send(n) {
            self.stats.sink_refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every receiver took notification `id`: out of its rule's outbox.
    fn delivered(&mut self, id: &str) {
        let name = self
            .runs
            .iter_mut()
            .find(|(_, r)| r.run.state.outbox.iter().any(|n| n.id == id))
            .map(|(name, r)| {
                r.run.state.outbox.retain(|n| n.id != id);
                name.clone()
            });
        if let Some(name) = name {
            self.save(&name);
        }
    }

    fn save(&mut self, name: &str) {
        let Some(r) = self.runs.get_mut(name) else {
            return;
        };
        match catalog::put_state(&*self.store, name, &mut r.run.state) {
            Ok(cut) => {
                self.stats
                    .outbox_dropped
                    .fetch_add(cut as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("sluice: alerts: saving the state of {name:?}: {e}");
            }
        }
        self.last_save.insert(name.to_owned(), Instant::now());
    }

    fn error(&self, what: &str) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        eprintln!("sluice: alerts: {what}");
    }

    /// The notification of transition `tr` of rule `name`: labels, annotations, evidence.
    fn notification(
        &self,
        run: &RuleRun,
        def: &Definition,
        tr: &Transition,
        with_evidence: bool,
    ) -> Notification {
        let rule = &run.rule;
        let name = rule.name.as_str();
        let mut labels = BTreeMap::new();
        labels.insert("alertname".to_owned(), rule.name.clone());
        labels.insert("rollup".to_owned(), rule.rollup.clone());
        for (k, v) in rule.labels.iter().chain(&tr.labels) {
            labels.insert(k.clone(), v.clone());
        }
        let mut annotations = rule.annotations.clone();
        annotations.insert(
            "value".into(),
            tr.value
                .map_or_else(|| "none".to_owned(), |v| format!("{v}")),
        );
        annotations.insert("expr".into(), rule.expr.clone());
        if tr.status == Status::Firing && with_evidence {
            let to = tr.t;
            let from = to - rule.window_secs as i64;
            match evidence::gather(&*self.store, rule, run.expr(), def, &tr.labels, from, to) {
                Ok(ev) => {
                    let mut text = serde_json::to_string(&ev.samples).unwrap_or_default();
                    if text.len() > MAX_SAMPLES_TEXT {
                        let mut cut = MAX_SAMPLES_TEXT;
                        while !text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        text.truncate(cut);
                        text.push_str("…(cut)");
                    }
                    if rule.samples > 0 {
                        annotations.insert("sample_events".into(), text);
                    }
                    annotations.insert("events_count".into(), ev.count.to_string());
                    annotations.insert("events_where".into(), ev.where_);
                    annotations.insert("sluice_cat".into(), ev.command);
                    annotations.insert(
                        "events_url".into(),
                        format!("{}{}", self.cfg.external_url, ev.url),
                    );
                }
                Err(e) => {
                    self.error(&format!("evidence of {name:?}: {e}"));
                    annotations.insert("evidence_error".into(), e);
                }
            }
        }
        let fp = fingerprint(name, &tr.labels);
        Notification {
            status: tr.status,
            id: format!(
                "{fp}-{}-{}",
                tr.firing_since,
                if tr.status == Status::Firing {
                    "firing"
                } else {
                    "resolved"
                }
            ),
            labels,
            annotations,
            starts_at_ms: tr.firing_since * 1000,
            ends_at_ms: (tr.status == Status::Resolved).then_some(tr.t * 1000),
            generator_url: format!("{}/v1/alerts/{name}", self.cfg.external_url),
            fingerprint: fp,
        }
    }

    fn publish(&self, views: &RwLock<Vec<RuleView>>) {
        let (mut firing, mut pending) = (0, 0);
        let mut out = Vec::new();
        for r in self.runs.values() {
            let s = &r.run.state;
            let alerts = s
                .instances
                .values()
                .map(|i| {
                    match i.phase {
                        Phase::Firing => firing += 1,
                        Phase::Pending => pending += 1,
                    }
                    AlertView {
                        labels: i.labels.clone(),
                        state: if i.phase == Phase::Firing {
                            "firing"
                        } else {
                            "pending"
                        },
                        active_since: i.active_since,
                        value: i.value,
                    }
                })
                .collect();
            out.push(RuleView {
                kind: r.run.rule.kind(),
                rule: r.run.rule.clone(),
                state: s.overall(),
                last_eval: s.last_eval,
                alerts,
                undelivered: s.outbox.len(),
                error: None,
            });
        }
        for (rule, e) in self.errors.values() {
            out.push(RuleView {
                kind: rule.kind(),
                rule: rule.clone(),
                state: "inactive",
                last_eval: 0,
                alerts: Vec::new(),
                undelivered: 0,
                error: Some(e.clone()),
            });
        }
        out.sort_by(|a, b| a.rule.name.cmp(&b.rule.name));
        self.stats.firing.store(firing, Ordering::Relaxed);
        self.stats.pending.store(pending, Ordering::Relaxed);
        if let Ok(mut v) = views.write() {
            *v = out;
        }
    }
}
