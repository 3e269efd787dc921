//! Alert rules over rollups: a small expression language over a rollup's aggregates, threshold
//! and anomaly rules, evaluation with pending / firing / resolved states that survive a
//! restart, backtests over stored rollups, evidence (sample events) and notifications to
//! Alertmanager and webhooks.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod backtest;
pub mod catalog;
pub mod engine;
pub mod evidence;
pub mod expr;
pub mod feed;
pub mod notification;
pub mod notify;
pub mod rule;
pub mod run;
pub mod sliding;
pub mod state;

pub use backtest::{backtest, Backtest};
pub use engine::{Engine, EngineConfig, Sink};
pub use notification::{Notification, Status};
pub use notify::{Notifier, NotifierConfig, NotifierStats, OnDelivered, ReceiverStats};
pub use rule::{Rule, RuleSpec};
