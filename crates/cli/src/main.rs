//! `sluice`: the command-line front end. It parses flags and calls library code; nothing else.

// Decoded events are many small allocations; mimalloc halves the time spent in malloc/free
// compared with glibc (measured in bench/: plain event decode 85 -> 185 MB/s).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cat_cmd;
mod emit_cmd;
mod gen_cmd;
mod reduce_args;
mod sereal_cmd;
mod serve_cmd;
mod store_cmd;
mod substream_cmd;
mod tail_cmd;

use std::io::ErrorKind;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Sluice — collect, store and replay operational events.
#[derive(Parser)]
#[command(name = "sluice", version, about)]
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
    /// Print the events of a time range from a data directory.
    #[command(after_help = PARTIAL_EXIT_HELP)]
    Cat(cat_cmd::CatArgs),
    /// Run the collector, store and HTTP API in one process.
    Serve(serve_cmd::ServeArgs),
    /// Follow the live stream (history first), resumable from a cursor.
    Tail(tail_cmd::TailArgs),
    /// Send NDJSON events from standard input to a collector (UDP, TCP or HTTP).
    Emit(emit_cmd::EmitArgs),
    /// Check a data directory for damage, or repair it.
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// Manage substreams: write-time transformations whose small results consumers read
    /// instead of the full stream (`sluice cat --substream NAME`).
    #[command(subcommand)]
    Substream(substream_cmd::SubstreamCommand),
}

/// Exit status of a command that did its work but skipped data it could not read (damaged
/// store ranges, unreadable chunks) or found damage (`store check`): the warnings are on stderr.
pub(crate) const EXIT_PARTIAL: u8 = 3;

const PARTIAL_EXIT_HELP: &str = "Exit status: 0 when the whole range was read; 3 when every \
    readable event was printed but part of the range could not be read (damaged store ranges, \
    unreadable chunks: one warning each on stderr); 1 on an error.";

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
        Command::Substream(cmd) => substream_cmd::run(cmd),
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
