//! Alert rules over rollups: a small expression language over a rollup's aggregates, threshold
//! and anomaly rules, evaluation with pending / firing / resolved states that survive a
//! restart, backtests over stored rollups, evidence (sample events) and notifications to
//! Alertmanager and webhooks.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod notification;

pub use notification::{Notification, Status};
