//! `sluice tail`: follow the live stream (history first, from `--from` or a `--cursor`), one
//! event per line, for as long as it runs. The cursor of what has been printed goes to
//! `--cursor-file` (and to stderr when the tail ends, however it ends: `--limit`, `--until`, SIGINT /
//! SIGTERM, an error), so a later tail resumes with no gap and no duplicate.
//!
//! With `--server`, the tail reconnects from its last cursor when the connection drops or the
//! server stops, restarts or is killed (`sluice_client::TailClient`: backoff 0.2 s doubling to
//! 5 s), saying so on stderr; for ever, or until `--retry-for` seconds pass without a
//! connection (then it exits 1, its cursor printed to resume with). Events are printed a whole
//! server batch at a time (in `--format`: `sluice_reader::output`), with the cursor recorded after each
//! batch under the same lock the signal handler takes, so the cursor printed on SIGINT /
//! SIGTERM matches standard output exactly. Interrupted, it exits 0. Typo hints (a type or
//! field never seen) are printed once on stderr, after the history is read.

use std::io::{BufWriter, Stdout};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{Context, Result};
use clap::Args;
use sluice_client::{
    Backoff, ClientArgs, HttpOptions, SelectionArgs, TailClient, TailItem, TailStart,
};
use sluice_reader::{parse_time_in, Cursor, EventWriter, ReadItem, Selection, Tail, TailOptions};

use crate::output::OutputArgs;

/// Flags of `sluice tail`.
#[derive(Args)]
pub struct TailArgs {
    /// Start here (a time: Unix seconds or ms, RFC 3339, `2026-11-24T09:30` in --tz, `-5m`,
    /// `now`); default `now`.
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
    #[command(flatten)]
    output: OutputArgs,
    /// Follow a running server (e.g. http://127.0.0.1:8180, https://HOST:PORT or
    /// 127.0.0.1:8180); reconnects from the last cursor when the server restarts.
    #[arg(long, conflicts_with = "data")]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Follow a data directory directly (or, while `sluice serve` runs on it, through that
    /// server: its address is in DIR/SERVER). Default ./data, as for `sluice cat`.
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// Follow a store directly: `embedded:DIR` or `cassandra://HOST:PORT[,…]/KEYSPACE?read_cl=one`.
    #[arg(long, conflicts_with = "server")]
    store: Option<String>,
    /// Stop once at least this many events are printed, at the end of a batch so the cursor
    /// stays exact (default: run until interrupted).
    #[arg(long)]
    limit: Option<u64>,
    /// With --server: give up after this many seconds without reaching the server (exit 1,
    /// the cursor printed to resume with); default: retry until interrupted.
    #[arg(long)]
    retry_for: Option<u64>,
    /// Stop at this wall-clock time (Unix seconds, RFC 3339, `+10m`…), between batches so the
    /// cursor stays exact.
    #[arg(long, allow_hyphen_values = true)]
    until: Option<String>,
}

/// Standard output and the cursor after what it holds, shared with the signal watcher.
struct Output {
    out: EventWriter<BufWriter<Stdout>>,
    cursor: String,
    file: Option<PathBuf>,
    /// Set once the cursor is printed (by the signal watcher or the end of `run`: not both).
    finished: bool,
}

impl Output {
    /// Prints a batch and records the cursor after it (file first written atomically).
    fn batch<'a>(
        &mut self,
        events: impl IntoIterator<Item = &'a [u8]>,
        cursor: String,
    ) -> Result<u64> {
        let mut n = 0;
        for e in events {
            self.out.json_line(e)?;
            n += 1;
        }
        self.out.end_batch()?;
        if let Some(path) = &self.file {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, &cursor).with_context(|| tmp.display().to_string())?;
            std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
        }
        self.cursor = cursor;
        Ok(n)
    }

    fn finish(&mut self) {
        let _ = self.out.finish();
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

/// On SIGINT, SIGTERM or at `until` (Unix seconds): waits for the batch being printed, prints
/// the cursor, exits 0. (The deadline is kept here, not between batches: an idle stream may
/// send nothing for a minute.)
fn watch_signals(shared: Shared, until: i64) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("signal runtime")?;
    let mut term = rt
        .block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        })
        .context("SIGTERM handler")?;
    let left = u64::try_from(until.saturating_sub(sluice_reader::time::now_unix())).unwrap_or(0);
    std::thread::spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = tokio::time::sleep(std::time::Duration::from_secs(left)) => {}
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
    let zone = a.output.zone()?;
    let start = match (&a.cursor, &a.from) {
        (Some(token), _) => {
            Cursor::from_str(token).map_err(|e| anyhow::anyhow!("--cursor: {e}"))?
        }
        (None, Some(from)) => {
            Cursor::at(parse_time_in(from, now, &zone).with_context(|| format!("--from {from:?}"))?)
        }
        (None, None) => Cursor::at(now),
    };
    // The flag's name, as the user typed it: `--where: …`.
    let selection = a
        .filters
        .selection()
        .map_err(|e| anyhow::anyhow!("--{e}"))?;
    use crate::store_arg::{open_for_read, ReadSource};
    let mut http = HttpOptions::tail().with_client(a.client.options());
    let source = match &a.server {
        Some(server) => ReadSource::Server(sluice_client::base_url(server)?),
        None => open_for_read(&a.data, a.store.as_deref())
            .with_context(|| "give --data DIR, --store URL or --server URL".to_string())?,
    };
    if a.server.is_none() {
        // A server on the data directory with a self-signed certificate: trust it.
        http.client = http.client.or_ca(sluice_client::self_signed_ca(&a.data));
    }
    let output = Output {
        out: a.output.printer(BufWriter::new(std::io::stdout()), false)?,
        cursor: start.to_token(),
        file: a.cursor_file.clone(),
        finished: false,
    };
    let until = match &a.until {
        Some(t) => parse_time_in(t, now, &zone).with_context(|| format!("--until {t:?}"))?,
        None => i64::MAX,
    };
    let shared = Arc::new(Mutex::new(output));
    watch_signals(shared.clone(), until)?;
    let stop = Stop {
        limit: a.limit.unwrap_or(u64::MAX),
        until,
    };
    let result = match source {
        ReadSource::Server(url) => {
            from_server(&url, &http, &selection, start, stop, a.retry_for, &shared)
        }
        ReadSource::Store(store) => from_store(&*store, selection, start, stop, &shared),
    };
    lock(&shared).finish();
    result
}

/// When a tail ends by itself (`--limit`, `--until`).
#[derive(Clone, Copy)]
struct Stop {
    limit: u64,
    until: i64,
}

impl Stop {
    fn reached(&self, printed: u64) -> bool {
        printed >= self.limit || sluice_reader::time::now_unix() >= self.until
    }
}

/// Follows the store directly, one poll at a time.
fn from_store(
    store: &dyn sluice_store::Store,
    selection: Selection,
    start: Cursor,
    stop: Stop,
    shared: &Shared,
) -> Result<()> {
    let opts = TailOptions {
        read: sluice_substreams::view::read_options(store, &selection)?,
        ..TailOptions::default()
    };
    let mut tail = Tail::new(store, selection, start, opts);
    let mut printed = 0u64;
    let mut hinted = false;
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
                ReadItem::Warning(w) => crate::output::print_warning(&w, false),
                ReadItem::Notice(w) => crate::output::print_warning(&w, true),
            }
        }
        printed += lock(shared).batch(lines.iter().map(Vec::as_slice), tail.cursor().to_token())?;
        if !hinted {
            if let Some(hints) = tail.hints(now) {
                hinted = true;
                hints.iter().for_each(|h| eprintln!("sluice: hint: {h}"));
            }
        }
        if stop.reached(printed) {
            return Ok(());
        }
        if tail.caught_up() {
            std::thread::sleep(tail.options().poll_interval);
        }
    }
}

/// Follows `GET /v1/tail` (Server-Sent Events), reconnecting from the last cursor.
fn from_server(
    url: &str,
    http: &HttpOptions,
    selection: &Selection,
    start: Cursor,
    stop: Stop,
    retry_for: Option<u64>,
    shared: &Shared,
) -> Result<()> {
    let start = TailStart::Cursor(start.to_token());
    let mut down_since: Option<std::time::Instant> = None;
    let mut client = TailClient::new(url, selection, start, http, Backoff::default())?;
    let mut printed = 0u64;
    let mut reconnecting = false;
    loop {
        match client.next_item()? {
            TailItem::Batch(batch) => {
                for w in &batch.warnings {
                    eprintln!("sluice: warning: {w}");
                }
                for n in &batch.notices {
                    eprintln!("sluice: note: {n}");
                }
                printed +=
                    lock(shared).batch(batch.events.iter().map(|e| e.as_bytes()), batch.cursor)?;
            }
            TailItem::Connected { .. } if reconnecting => {
                eprintln!("sluice: reconnected to {url}; resuming from the cursor");
                reconnecting = false;
                down_since = None;
            }
            TailItem::Connected { .. } => down_since = None,
            TailItem::Reconnecting { reason, after } => {
                let since = *down_since.get_or_insert_with(std::time::Instant::now);
                if let Some(limit) = retry_for {
                    if since.elapsed() >= std::time::Duration::from_secs(limit) {
                        anyhow::bail!(
                            "gave up on {url} after {limit} s without a connection ({reason}); \
                             resume with --cursor and the cursor printed above"
                        );
                    }
                }
                eprintln!(
                    "sluice: {reason}; reconnecting to {url} in {:.1} s",
                    after.as_secs_f64()
                );
                reconnecting = true;
            }
        }
        for h in client.take_hints() {
            eprintln!("sluice: hint: {h}");
        }
        if stop.reached(printed) {
            return Ok(());
        }
    }
}
