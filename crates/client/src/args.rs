//! The command-line spelling of a [`Selection`]: `--dc`, `--type`, `--subtype`, `--select`,
//! `--where`, `--substream`, `--no-fallback` (shared by `sluice cat` and `sluice tail`).
//!
//! `--select` takes comma-separated paths (and may be repeated), so a path whose quoted key
//! holds a comma cannot be given on the command line (use the query string or the Rust type).

use clap::Args;
use sluice_reader::{Selection, SelectionError};

/// Which events, and which parts of them (flags).
#[derive(Args, Clone, Debug, Default)]
pub struct SelectionArgs {
    /// Only this data centre.
    #[arg(long)]
    pub dc: Option<String>,
    /// Only this event type (case-sensitive: a hint lists the types of the range when none match).
    #[arg(long = "type")]
    pub type_: Option<String>,
    /// Only this subtype (`--subtype ''` for the empty one).
    #[arg(long)]
    pub subtype: Option<String>,
    /// Print only these paths (comma-separated), read lazily; see `sluice help where`.
    #[arg(long, value_delimiter = ',')]
    pub select: Vec<String>,
    /// Print only events for which this holds, e.g. `status >= 500 and path ~ "^/api"`; the
    /// language: `sluice help where` (docs/query.md).
    #[arg(long = "where")]
    pub filter: Option<String>,
    /// Read this substream's results instead of the events (a missing result is computed here
    /// from the full blob, said on stderr).
    #[arg(long)]
    pub substream: Option<String>,
    /// With --substream: report chunks without a stored result as gaps (exit status 3) instead
    /// of computing them.
    #[arg(long, requires = "substream")]
    pub no_fallback: bool,
}

impl SelectionArgs {
    /// The selection (paths and expression parsed); an error names the parameter (`where`).
    pub fn selection(&self) -> Result<Selection, SelectionError> {
        Selection::from_texts(
            self.dc.clone(),
            self.type_.clone(),
            self.subtype.clone(),
            &self.select,
            self.filter.as_deref(),
        )
        .map(|s| s.with_substream(self.substream.clone(), self.no_fallback))
    }
}
