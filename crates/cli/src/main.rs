//! `sluice`: the command-line front end. It parses flags and calls library code; nothing else.

// Decoded events are many small allocations; mimalloc halves the time spent in malloc/free
// compared with glibc (measured in bench/: plain event decode 85 -> 185 MB/s).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod alert_cmd;
mod cat_cmd;
mod columns_cmd;
mod counts_cmd;
mod emit_cmd;
mod export_cmd;
mod funnel_cmd;
mod gen_cmd;
mod output;
mod reduce_args;
mod rollup_cmd;
mod sereal_cmd;
mod serve_cmd;
mod store_arg;
mod store_cmd;
mod substream_cmd;
mod tail_cmd;
mod token_cmd;

use std::io::ErrorKind;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Sluice — collect, store and replay operational events.
#[derive(Parser)]
#[command(name = "sluice", version, about, disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode, encode and inspect Sereal documents.
    #[command(subcommand)]
    Sereal(sereal_cmd::SerealCommand),
    /// Generate a realistic, deterministic stream of WEB / CRON / LB events.
    Gen(gen_cmd::GenArgs),
    /// Print the events of a time range, from a data directory (default ./data) or a server.
    #[command(after_help = CAT_HELP)]
    Cat(cat_cmd::CatArgs),
    /// Run the collector, store and HTTP API in one process.
    Serve(serve_cmd::ServeArgs),
    /// Follow the live stream (history first), resumable from a cursor.
    #[command(after_help = QUERY_HELP)]
    Tail(tail_cmd::TailArgs),
    /// Send NDJSON events from standard input to a collector (UDP, TCP or HTTP).
    Emit(emit_cmd::EmitArgs),
    /// Funnels: how many sessions reach each of a sequence of --where steps, the conversions,
    /// and the median / p90 time between steps (`sluice help funnel`: docs/funnels.md).
    #[command(after_help = FUNNEL_HELP)]
    Funnel(funnel_cmd::FunnelArgs),
    /// The completeness counts of a time range: stored, late, dropped (by reason) per second,
    /// dc, type and subtype.
    Counts(counts_cmd::CountsArgs),
    /// Check a data directory for damage, or repair it.
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// The columnar history tier: what the Parquet files cover, verify them, rebuild hours.
    #[command(subcommand)]
    Columns(columns_cmd::ColumnsCommand),
    /// Write a time range's events (with --where / --select) as Parquet files for an analyst
    /// (`OUT/dc=…/type=…/part-N.parquet`, the history tier's layout).
    Export(export_cmd::ExportArgs),
    /// Rollups: aggregates (counts, sums, quantiles, distinct counts) computed once at write
    /// time per step and group; queried at any multiple of the step.
    #[command(subcommand)]
    Rollup(rollup_cmd::RollupCommand),
    /// Alert rules over rollups: thresholds and anomalies, notified to Alertmanager or
    /// webhooks with sample events, backtested over stored rollups (`sluice help alerts`).
    #[command(subcommand)]
    Alert(alert_cmd::AlertCommand),
    /// Manage substreams: write-time transformations whose small results consumers read
    /// instead of the full stream (`sluice cat --substream NAME`).
    #[command(subcommand)]
    Substream(substream_cmd::SubstreamCommand),
    /// Manage tokens: scoped (ingest, read, admin), limited to dcs/types, expiring; `create`
    /// prints the secret once (docs/security.md).
    #[command(subcommand)]
    Token(token_cmd::TokenCommand),
    /// Print help: `sluice help where` (the --where / --select language), or a command's help.
    Help {
        /// `where` (or `select`, `query`), or a command name.
        topic: Vec<String>,
    },
}

/// The user's guide to `--where` and `--select` (docs/query.md), printed by `sluice help where`.
const QUERY_GUIDE: &str = include_str!("../../../docs/query.md");

/// The user's guide to funnels (docs/funnels.md), printed by `sluice help funnel`.
const FUNNEL_GUIDE: &str = include_str!("../../../docs/funnels.md");

const FUNNEL_HELP: &str = "The semantics (step order, ties inside a second, --within, the session \
    cap): `sluice help funnel` (docs/funnels.md). Exit status 3 when part of the range could not \
    be read or sessions over --max-sessions were refused (said on stderr).";

/// The user's guide to alert rules (docs/alerts.md), printed by `sluice help alerts`.
const ALERTS_GUIDE: &str = include_str!("../../../docs/alerts.md");

const QUERY_HELP: &str = "--where / --select: see `sluice help where` (docs/query.md). Typos and \
    empty results get hints on stderr (`sluice: hint: …`); hints do not change the exit status.";

const CAT_HELP: &str = "--where / --select: see `sluice help where` (docs/query.md). Typos and \
    empty results get hints on stderr (`sluice: hint: …`, e.g. a field never seen in the range, \
    a type that does not exist); hints do not change the exit status.\n\n\
    Exit status: 0 when the whole range was read (hints or not); 3 when every readable event was \
    printed but part of the range could not be read (damaged store ranges, unreadable chunks: one \
    warning each on stderr); 1 on an error.";

/// `sluice help [TOPIC…]`.
fn help(topic: &[String]) -> anyhow::Result<()> {
    let mut cmd = Cli::command();
    cmd.build();
    match topic.first().map(String::as_str) {
        None => cmd.print_long_help()?,
        Some("where" | "select" | "query" | "filter") => {
            use std::io::Write;
            std::io::stdout().write_all(QUERY_GUIDE.as_bytes())?;
        }
        Some("funnel" | "funnels") if topic.len() == 1 => {
            use std::io::Write;
            std::io::stdout().write_all(FUNNEL_GUIDE.as_bytes())?;
        }
        Some("alerts" | "alert") if topic.len() == 1 => {
            use std::io::Write;
            std::io::stdout().write_all(ALERTS_GUIDE.as_bytes())?;
        }
        Some(_) => {
            let mut sub = &mut cmd;
            for name in topic {
                sub = match sub.find_subcommand_mut(name) {
                    Some(s) => s,
                    None => anyhow::bail!(
                        "no help topic {name:?}: try `sluice help where` or `sluice help <command>`"
                    ),
                };
            }
            sub.print_long_help()?;
        }
    }
    Ok(())
}

/// Exit status of a command that did its work but skipped data it could not read (damaged
/// store ranges, unreadable chunks) or found damage (`store check`): the warnings are on stderr.
pub(crate) const EXIT_PARTIAL: u8 = 3;

/// The error of a command that finished but skipped or found damage: exit status
/// [`EXIT_PARTIAL`].
#[derive(Debug)]
pub(crate) struct PartialRead(pub String);

impl std::fmt::Display for PartialRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartialRead {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sereal(cmd) => sereal_cmd::run(cmd),
        Command::Gen(args) => gen_cmd::run(args),
        Command::Cat(args) => cat_cmd::run(args),
        Command::Emit(args) => emit_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Tail(args) => tail_cmd::run(args),
        Command::Store(cmd) => store_cmd::run(cmd),
        Command::Columns(cmd) => columns_cmd::run(cmd),
        Command::Export(args) => export_cmd::run(args),
        Command::Rollup(cmd) => rollup_cmd::run(cmd),
        Command::Alert(cmd) => alert_cmd::run(cmd),
        Command::Substream(cmd) => substream_cmd::run(cmd),
        Command::Token(cmd) => token_cmd::run(cmd),
        Command::Counts(args) => counts_cmd::run(args),
        Command::Funnel(args) => funnel_cmd::run(args),
        Command::Help { topic } => help(&topic),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (`| head`) is how a reader says it has seen enough: not an error.
            if e.chain().any(is_broken_pipe) {
                return ExitCode::SUCCESS;
            }
            eprintln!("sluice: {e:#}");
            if e.downcast_ref::<PartialRead>().is_some() {
                return ExitCode::from(EXIT_PARTIAL);
            }
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io.kind() == ErrorKind::BrokenPipe;
    }
    if let Some(json) = e.downcast_ref::<serde_json::Error>() {
        return json.io_error_kind() == Some(ErrorKind::BrokenPipe);
    }
    false
}
