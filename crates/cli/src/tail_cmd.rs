//! `sluice tail`: follow the live stream (history first, from `--from` or a `--cursor`), one
//! event per line, for as long as it runs. The cursor of what has been printed goes to
//! `--cursor-file` (and to stderr when the tail ends), so a later tail resumes with no gap and no
//! duplicate.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_reader::{parse_time, Cursor, ReadItem, Tail, TailOptions, TailRequest};

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
    filters: crate::filters::Filters,
    /// Follow a running server (e.g. http://127.0.0.1:8180).
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

struct CursorSink {
    file: Option<PathBuf>,
}

impl CursorSink {
    fn record(&self, token: &str) -> Result<()> {
        if let Some(path) = &self.file {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, token).with_context(|| tmp.display().to_string())?;
            std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
        }
        Ok(())
    }
}

/// Run `sluice tail`.
pub fn run(a: TailArgs) -> Result<()> {
    let sink = CursorSink { file: a.cursor_file.clone() };
    if let Some(server) = &a.server {
        return from_server(server, &a, &sink);
    }
    let Some(dir) = &a.data else { bail!("give --server URL or --data DIR") };
    let now = sluice_reader::time::now_unix();
    let start = match (&a.cursor, &a.from) {
        (Some(token), _) => Cursor::from_str(token).map_err(|e| anyhow::anyhow!("--cursor: {e}"))?,
        (None, Some(from)) => Cursor::at(parse_time(from, now).with_context(|| format!("--from {from:?}"))?),
        (None, None) => Cursor::at(now),
    };
    let f = &a.filters;
    let req = TailRequest {
        dc: f.dc.clone(),
        type_: f.type_.clone(),
        subtype: f.subtype.clone(),
        select: f.paths()?,
        filter: f.predicate()?,
    };
    let store = match crate::cat_cmd::open_data_dir(dir)? {
        crate::cat_cmd::DataDir::Store(s) => s,
        crate::cat_cmd::DataDir::Server(url) => return from_server(&url, &a, &sink),
    };
    let mut tail = Tail::new(&store, req, start, TailOptions::default());
    let stdout = std::io::stdout();
    let mut out = std::io::LineWriter::new(stdout.lock());
    let mut printed = 0u64;
    let limit = a.limit.unwrap_or(u64::MAX);
    loop {
        let now = sluice_reader::time::now_unix();
        let items = match tail.poll(now) {
            Ok(items) => items,
            Err(e) => {
                eprintln!("sluice: warning: {e}");
                Vec::new()
            }
        };
        for item in items {
            match item {
                ReadItem::Event(e) => {
                    sereal::json::to_writer(&mut out, &e.value)?;
                    out.write_all(b"\n")?;
                    printed += 1;
                }
                ReadItem::Warning(w) => eprintln!("sluice: warning: {w}"),
            }
        }
        sink.record(&tail.cursor().to_token())?;
        if printed >= limit {
            break;
        }
        if tail.caught_up() {
            std::thread::sleep(tail.options().poll_interval);
        }
    }
    eprintln!("sluice: cursor {}", tail.cursor().to_token());
    Ok(())
}

/// Follow `GET /v1/tail` (Server-Sent Events).
fn from_server(server: &str, a: &TailArgs, sink: &CursorSink) -> Result<()> {
    let url = format!("{}/v1/tail", server.trim_end_matches('/'));
    let agent = ureq::AgentBuilder::new().timeout_connect(std::time::Duration::from_secs(10)).build();
    let mut req = agent.get(&url);
    if let Some(c) = &a.cursor {
        req = req.query("cursor", c);
    }
    if let Some(from) = &a.from {
        req = req.query("from", from);
    }
    let req = a.filters.query(req);
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => bail!("{url}: {code}: {}", r.into_string().unwrap_or_default().trim()),
        Err(e) => bail!("{url}: {e}"),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::LineWriter::new(stdout.lock());
    let mut event = String::new();
    let mut printed = 0u64;
    let mut last_cursor = None;
    let limit = a.limit.unwrap_or(u64::MAX);
    for line in std::io::BufReader::new(resp.into_reader()).lines() {
        let line = line.context("reading the stream")?;
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            match event.as_str() {
                "event" => {
                    out.write_all(data.as_bytes())?;
                    out.write_all(b"\n")?;
                    printed += 1;
                }
                "warning" => eprintln!("sluice: warning: {data}"),
                "cursor" => {
                    sink.record(data)?;
                    last_cursor = Some(data.to_owned());
                    if printed >= limit {
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(c) = last_cursor {
        eprintln!("sluice: cursor {c}");
    }
    Ok(())
}
