//! `sluice tail`: follow the live stream (history first, from `--from` or a `--cursor`), one
//! event per line, for as long as it runs. The cursor of what has been printed goes to
//! `--cursor-file` (and to stderr when the tail ends, however it ends: `--limit`, SIGINT /
//! SIGTERM, an error), so a later tail resumes with no gap and no duplicate.
//!
//! With `--server`, the tail reconnects from its last cursor when the connection drops or the
//! server stops or restarts (`sluice_client::TailClient`: backoff 0.2 s doubling to 5 s, for
//! ever), saying so on stderr. Events are printed a whole server batch at a time, with the
//! cursor recorded after each batch under the same lock the signal handler takes, so the cursor
//! printed on SIGINT / SIGTERM matches standard output exactly. Interrupted, it exits 0.

use std::io::{BufWriter, Stdout, Write};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_client::{Backoff, DataDir, HttpOptions, SelectionArgs, TailClient, TailItem, TailStart};
use sluice_reader::{parse_time, Cursor, ReadItem, Selection, Tail, TailOptions};

/// Flags of `sluice tail`.
#[derive(Args)]
pub struct TailArgs {
    /// Start here (a time: Unix seconds, RFC 3339, `-5m`, `now`); default `now`.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "cursor")]
    from: Option<String>,
    /// Resume after what an earlier tail printed (its cursor token).
    #[arg(long)]
    cursor: Option<String>,
    /// Write the cursor of what has been printed to this file as the tail goes.
    #[arg(long)]
    cursor_file: Option<PathBuf>,
    #[command(flatten)]
    filters: SelectionArgs,
    /// Follow a running server (e.g. http://127.0.0.1:8180 or 127.0.0.1:8180); reconnects from
    /// the last cursor when the server restarts.
    #[arg(long, conflicts_with = "data")]
    server: Option<String>,
    /// Follow a data directory directly (or, while `sluice serve` runs on it, through that
    /// server: its address is in DIR/SERVER).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Stop once at least this many events are printed, at the end of a batch so the cursor
    /// stays exact (default: run until interrupted).
    #[arg(long)]
    limit: Option<u64>,
}

/// Standard output and the cursor after what it holds, shared with the signal watcher.
struct Output {
    out: BufWriter<Stdout>,
    cursor: String,
    file: Option<PathBuf>,
    /// Set once the cursor is printed (by the signal watcher or the end of `run`: not both).
    finished: bool,
}

impl Output {
    /// Prints a batch and records the cursor after it (file first written atomically).
    fn batch<'a>(&mut self, events: impl IntoIterator<Item = &'a [u8]>, cursor: String) -> Result<u64> {
        let mut n = 0;
        for e in events {
            self.out.write_all(e)?;
            self.out.write_all(b"\n")?;
            n += 1;
        }
        self.out.flush()?;
        if let Some(path) = &self.file {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, &cursor).with_context(|| tmp.display().to_string())?;
            std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
        }
        self.cursor = cursor;
        Ok(n)
    }

    fn finish(&mut self) {
        let _ = self.out.flush();
        if !std::mem::replace(&mut self.finished, true) {
            eprintln!("sluice: cursor {}", self.cursor);
        }
    }
}

type Shared = Arc<Mutex<Output>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Output> {
    // A panic while printing leaves the output as it was: still the right cursor to print.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// On SIGINT or SIGTERM: waits for the batch being printed, prints the cursor, exits 0.
fn watch_signals(shared: Shared) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("signal runtime")?;
    let mut term = rt
        .block_on(async { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) })
        .context("SIGTERM handler")?;
    std::thread::spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        lock(&shared).finish();
        std::process::exit(0);
    });
    Ok(())
}

/// Run `sluice tail`.
pub fn run(a: TailArgs) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    let start = match (&a.cursor, &a.from) {
        (Some(token), _) => Cursor::from_str(token).map_err(|e| anyhow::anyhow!("--cursor: {e}"))?,
        (None, Some(from)) => Cursor::at(parse_time(from, now).with_context(|| format!("--from {from:?}"))?),
        (None, None) => Cursor::at(now),
    };
    let selection = a.filters.selection()?;
    let source = match (&a.server, &a.data) {
        (Some(server), _) => DataDir::Server(sluice_client::base_url(server)?),
        (None, Some(dir)) => crate::cat_cmd::open_data_dir(dir)?,
        (None, None) => bail!("give --server URL or --data DIR"),
    };
    let output = Output {
        out: BufWriter::new(std::io::stdout()),
        cursor: start.to_token(),
        file: a.cursor_file.clone(),
        finished: false,
    };
    let shared = Arc::new(Mutex::new(output));
    watch_signals(shared.clone())?;
    let limit = a.limit.unwrap_or(u64::MAX);
    let result = match source {
        DataDir::Server(url) => from_server(&url, &selection, start, limit, &shared),
        DataDir::Store(store) => from_store(&store, selection, start, limit, &shared),
    };
    lock(&shared).finish();
    result
}

/// Follows the store directly, one poll at a time.
fn from_store(
    store: &sluice_store::EmbeddedStore,
    selection: Selection,
    start: Cursor,
    limit: u64,
    shared: &Shared,
) -> Result<()> {
    let mut tail = Tail::new(store, selection, start, TailOptions::default());
    let mut printed = 0u64;
    loop {
        let now = sluice_reader::time::now_unix();
        let items = match tail.poll(now) {
            Ok(items) => items,
            Err(e) => {
                eprintln!("sluice: warning: {e}");
                Vec::new()
            }
        };
        let mut lines = Vec::new();
        for item in items {
            match item {
                ReadItem::Event(e) => {
                    let mut line = Vec::new();
                    sereal::json::to_writer(&mut line, &e.value)?;
                    lines.push(line);
                }
                ReadItem::Warning(w) => eprintln!("sluice: warning: {w}"),
            }
        }
        printed += lock(shared).batch(lines.iter().map(Vec::as_slice), tail.cursor().to_token())?;
        if printed >= limit {
            return Ok(());
        }
        if tail.caught_up() {
            std::thread::sleep(tail.options().poll_interval);
        }
    }
}

/// Follows `GET /v1/tail` (Server-Sent Events), reconnecting from the last cursor.
fn from_server(url: &str, selection: &Selection, start: Cursor, limit: u64, shared: &Shared) -> Result<()> {
    let start = TailStart::Cursor(start.to_token());
    let mut client = TailClient::new(url, selection, start, &HttpOptions::default(), Backoff::default())?;
    let mut printed = 0u64;
    let mut reconnecting = false;
    loop {
        match client.next_item()? {
            TailItem::Batch(batch) => {
                for w in &batch.warnings {
                    eprintln!("sluice: warning: {w}");
                }
                printed += lock(shared).batch(batch.events.iter().map(|e| e.as_bytes()), batch.cursor)?;
                if printed >= limit {
                    return Ok(());
                }
            }
            TailItem::Connected { .. } if reconnecting => {
                eprintln!("sluice: reconnected to {url}; resuming from the cursor");
                reconnecting = false;
            }
            TailItem::Connected { .. } => {}
            TailItem::Reconnecting { reason, after } => {
                eprintln!("sluice: {reason}; reconnecting to {url} in {:.1} s", after.as_secs_f64());
                reconnecting = true;
            }
        }
    }
}
