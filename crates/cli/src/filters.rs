//! The event filters `sluice cat` and `sluice tail` share, and their forms for a local read and
//! for the server's query string.

use anyhow::{Context, Result};
use clap::Args;
use sluice_reader::Filter;

/// Which events, and which parts of them.
#[derive(Args, Clone)]
pub struct Filters {
    /// Only this data centre.
    #[arg(long)]
    pub dc: Option<String>,
    /// Only this event type.
    #[arg(long = "type")]
    pub type_: Option<String>,
    /// Only this subtype (`--subtype ''` for the empty one).
    #[arg(long)]
    pub subtype: Option<String>,
    /// Print only these paths (comma-separated), read lazily.
    #[arg(long, value_delimiter = ',')]
    pub select: Vec<String>,
    /// Print only events for which this holds, e.g. `status >= 500`.
    #[arg(long = "where")]
    pub filter: Option<String>,
}

impl Filters {
    /// The `--select` paths, parsed.
    pub fn paths(&self) -> Result<Vec<sereal::Path>> {
        self.select.iter().map(|p| sereal::Path::parse(p)).collect::<std::result::Result<_, _>>().context("--select")
    }

    /// The `--where` expression, parsed.
    pub fn predicate(&self) -> Result<Option<Filter>> {
        self.filter.as_deref().map(Filter::parse).transpose().context("--where")
    }

    /// Add the filters to a request to the server (`GET /v1/events`, `GET /v1/tail`).
    pub fn query(&self, mut req: ureq::Request) -> ureq::Request {
        for (k, v) in [("dc", &self.dc), ("type", &self.type_), ("subtype", &self.subtype), ("where", &self.filter)] {
            if let Some(v) = v {
                req = req.query(k, v);
            }
        }
        for p in &self.select {
            req = req.query("select", p);
        }
        req
    }
}
