//! Helpers shared by the tests of every Sluice crate, one idea a module, so that a fix (a temp
//! dir that cleans up, a missing metric that fails) reaches every test at once.
//!
//! - [`temp`]: temp dirs removed on drop ([`temp::temp_dir`]), kept on request for debugging.
//! - [`metrics`]: a metric's value from Prometheus text; a missing metric panics, never reads 0.
//! - [`wait`]: [`wait::wait_for`], a bounded poll that panics naming what it waited for.
//! - [`bin`]: the built `sluice` binary the CLI tests spawn ([`sluice_bin!`]).
//! - [`perl`]: the Perl Sereal reference: is it installed, run a script.
//! - [`http`]: a minimal HTTP/1.1 client on a `TcpStream`, with bounds on every step.
//! - [`s3`]: a real S3 server (SeaweedFS, `scripts/seaweedfs.sh`) started once, its URLs.
//! - [`victoriametrics`]: a real VictoriaMetrics (`scripts/victoriametrics.sh`) started once.
//! - [`alertmanager`]: a real Alertmanager (`scripts/alertmanager.sh`) for one test, routing to
//!   its webhook.
//! - [`webhook`]: a real HTTP receiver that records POSTs and can answer 503 or be down.
//! - `browser` (feature `browser`): headless Chromium over chromedriver, a session a page.
//!
//! Dev-only: no crate depends on this one outside `[dev-dependencies]`, and it depends on no
//! Sluice crate (so any of them, the codec included, can use it without a cycle).

#![deny(missing_docs)]

pub mod alertmanager;
pub mod bin;
#[cfg(feature = "browser")]
pub mod browser;
pub mod http;
pub mod metrics;
pub mod perl;
pub mod rng;
pub mod s3;
pub mod script_server;
pub mod temp;
pub mod victoriametrics;
pub mod wait;
pub mod webhook;

pub use metrics::metric;
pub use temp::{temp_dir, TempDir};
pub use wait::wait_for;
