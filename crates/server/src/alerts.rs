//! Alerts in `sluice serve`: the rules of `[[alerts]]` registered at start, the live
//! [`Engine`] evaluating every rule in the catalog, and the [`Notifier`] sending what fires
//! and resolves to `--alertmanager` and `--alert-webhook` receivers (docs/alerts.md).
//!
//! Without a receiver the rules still run (their states show in `GET /v1/alerts` and in
//! `/metrics`); their notifications are then done at once.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_alerts::catalog;
use sluice_alerts::notify::{Notifier, NotifierConfig};
use sluice_alerts::{Engine, EngineConfig, Notification, RuleSpec, Sink};
use sluice_store::Store;

use crate::config::ServerConfig;
use crate::error::{Error, Result};

/// How long a stopping server lets the notifier deliver what is queued.
const NOTIFIER_DRAIN: Duration = Duration::from_secs(3);

/// The running alert engine and notifier.
pub struct Alerts {
    /// The engine (the HTTP API reads its views and asks it to reload).
    pub engine: Arc<Engine>,
    /// The notifier, when receivers are configured.
    pub notifier: Option<Arc<Notifier>>,
}

/// The notifier as the engine's sink; without receivers every notification is done at once.
struct NotifierSink {
    notifier: Option<Arc<Notifier>>,
    done: Mutex<Sender<String>>,
}

impl Sink for NotifierSink {
    fn keep_firing(&self, alerts: Vec<Notification>) {
        if let Some(n) = &self.notifier {
            n.keep_firing(alerts);
        }
    }

    fn send(&self, n: Notification) -> bool {
        match &self.notifier {
            Some(notifier) => notifier.send(n),
            None => {
                if let Ok(tx) = self.done.lock() {
                    let _ = tx.send(n.id);
                }
                true
            }
        }
    }
}

impl Alerts {
    /// Registers the configured rules and starts the engine (and the notifier when receivers
    /// are configured).
    pub fn start(
        config: &ServerConfig,
        store: Arc<dyn Store>,
        http: Option<String>,
    ) -> Result<Alerts> {
        register(&*store, &config.alerts)?;
        let external_url = config.external_url.clone().or(http).unwrap_or_default();
        let (tx, rx) = mpsc::channel::<String>();
        let notifier = if config.alertmanager.is_empty() && config.alert_webhook.is_empty() {
            None
        } else {
            let cfg = NotifierConfig {
                alertmanagers: config.alertmanager.clone(),
                webhooks: config.alert_webhook.clone(),
                bearer_token: config.alert_bearer_token.clone(),
                external_url: external_url.clone(),
                ..NotifierConfig::default()
            };
            let done = Mutex::new(tx.clone());
            let on_delivered = Arc::new(move |n: &Notification| {
                if let Ok(tx) = done.lock() {
                    let _ = tx.send(n.id.clone());
                }
            });
            Some(Arc::new(
                Notifier::start(cfg, on_delivered).map_err(|e| Error::Config(e.to_string()))?,
            ))
        };
        let sink = Arc::new(NotifierSink {
            notifier: notifier.clone(),
            done: Mutex::new(tx),
        });
        let engine = Engine::start(
            store,
            EngineConfig {
                grace: config.grace(),
                settle: Duration::from_millis(config.alert_settle_ms),
                external_url,
            },
            sink,
            rx,
        );
        Ok(Alerts {
            engine: Arc::new(engine),
            notifier,
        })
    }

    /// Stops evaluating (states saved), then gives the notifier a moment to deliver.
    pub fn stop(self) {
        self.engine.shutdown();
        if let Some(n) = self.notifier {
            match Arc::try_unwrap(n) {
                Ok(n) => {
                    n.shutdown(NOTIFIER_DRAIN);
                }
                Err(n) => drop(n),
            }
        }
    }
}

/// Registers `specs` (`[[alerts]]`): a rule stored with the same definition is left as it is
/// (its state and silence kept); one that differs is replaced.
pub fn register(store: &dyn Store, specs: &[RuleSpec]) -> Result<usize> {
    // Nothing to register reads nothing: a store that is down at start (Cassandra) must not
    // keep the server from starting; the engine loads the rules once it answers.
    if specs.is_empty() {
        return Ok(0);
    }
    let (stored, _) = catalog::load_rules(store).map_err(Error::Store)?;
    let mut changed = 0;
    for spec in specs {
        let def = sluice_substreams::registry::get(store, &spec.rollup).map_err(|e| {
            Error::Config(format!(
                "[[alerts]] {:?}: rollup {:?}: {e}",
                spec.name, spec.rollup
            ))
        })?;
        let (mut rule, _) = spec
            .check(&def)
            .map_err(|e| Error::Config(format!("[[alerts]]: {e}")))?;
        if let Some(old) = stored.get(&rule.name) {
            rule.silenced_until = old.silenced_until;
            if *old == rule {
                continue;
            }
        }
        catalog::add(store, spec, true).map_err(|e| Error::Config(format!("[[alerts]]: {e}")))?;
        changed += 1;
    }
    Ok(changed)
}
