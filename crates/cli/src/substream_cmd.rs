//! `sluice substream add|list|show|enable|disable|rm|backfill`: the substream registry, through
//! a running server (`--server URL`, or `--data DIR` while a server holds DIR) or directly in a
//! data directory no server holds.
//!
//! Through a server, a change applies at once (the server re-reads its registry); written
//! directly, a server started later reads it, and a server on the same store (another machine
//! of a shared backend) picks it up within its poll interval.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use sluice_client::{DataDir, HttpOptions, SubstreamAdmin};
use sluice_store::{EmbeddedStore, Store};
use sluice_substreams::{registry, Spec};

/// Where the registry is.
#[derive(Args, Clone)]
pub(crate) struct Target {
    /// A running server (e.g. http://127.0.0.1:8180).
    #[arg(long, conflicts_with = "data")]
    pub(crate) server: Option<String>,
    /// A data directory: written directly, or through the server that holds it.
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    #[command(flatten)]
    client: sluice_client::ClientArgs,
}

/// `sluice substream …`
#[derive(Subcommand)]
pub enum SubstreamCommand {
    /// Register a substream: declarative (--select [--where]) or Python (--python FILE[:FUNC]).
    Add(AddArgs),
    /// List the registered substreams.
    List(TargetArgs),
    /// One substream: its definition, results stored, misses by reason, the last miss.
    Show(NameArgs),
    /// Run it on blobs stored from now on.
    Enable(NameArgs),
    /// Stop running it on new blobs (readers still fall back for them).
    Disable(NameArgs),
    /// Remove it from the registry (stored results stay until they expire).
    Rm(NameArgs),
    /// Compute it for blobs of a time range that have no result yet.
    Backfill(BackfillArgs),
}

/// Flags of `sluice substream add`.
#[derive(Args)]
pub struct AddArgs {
    /// The name (letters, digits, `_`, `.`, `-`): results live in substreams/NAME.
    name: String,
    /// Only blobs of this data centre.
    #[arg(long)]
    dc: Option<String>,
    /// Only blobs of this event type.
    #[arg(long = "type")]
    type_: Option<String>,
    /// Only blobs of this subtype (`''` for the empty one).
    #[arg(long)]
    subtype: Option<String>,
    /// Paths to keep (comma-separated, repeatable), as `sluice cat --select`.
    #[arg(long, value_delimiter = ',', conflicts_with = "python")]
    select: Vec<String>,
    /// Keep only events for which this holds, as `sluice cat --where`.
    #[arg(long = "where", requires = "select")]
    filter: Option<String>,
    /// A Python file and function (default `transform`): `func(events, ctx)` returns an
    /// iterable of dicts. The file's source is copied into the registry now.
    #[arg(long, value_name = "FILE[:FUNC]")]
    python: Option<String>,
    /// Wall and CPU budget per blob, milliseconds (default 1000).
    #[arg(long)]
    budget_ms: Option<u64>,
    /// Largest result blob, bytes (default 4 MiB).
    #[arg(long)]
    max_result_bytes: Option<u64>,
    #[command(flatten)]
    target: Target,
}

/// Flags of commands that take only a target.
#[derive(Args)]
pub struct TargetArgs {
    #[command(flatten)]
    pub(crate) target: Target,
}

/// Flags of commands on one substream (or rollup: `sluice rollup rm`).
#[derive(Args)]
pub struct NameArgs {
    /// The substream (or rollup).
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) target: Target,
}

/// Flags of `sluice substream backfill` and `sluice rollup backfill`.
#[derive(Args)]
pub struct BackfillArgs {
    /// The substream (or rollup).
    pub(crate) name: String,
    /// Start of the range: Unix seconds, RFC 3339, or relative (`-5m`).
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) from: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    pub(crate) to: String,
    #[command(flatten)]
    pub(crate) target: Target,
}

/// The registry, resolved.
pub(crate) enum Registry {
    Server(SubstreamAdmin),
    Local(EmbeddedStore),
}

pub(crate) fn open(t: &Target) -> Result<Registry> {
    // Registering a Python substream imports it on the server: give that time.
    let mut opts = HttpOptions {
        read_timeout: std::time::Duration::from_secs(120),
        ..HttpOptions::default()
    }
    .with_client(t.client.options());
    // Admin credentials: an admin token (--token, SLUICE_TOKEN), else the local secret of the
    // server holding --data.
    let token = opts.client.token.clone();
    if let Some(s) = &t.server {
        let url = sluice_client::base_url(s)?;
        let token = token.or_else(|| crate::token_cmd::runtime_secret(&url));
        return Ok(Registry::Server(
            SubstreamAdmin::new(s, &opts)?.with_token(token),
        ));
    }
    let dir = t.data.clone().unwrap_or_else(|| PathBuf::from("./data"));
    match sluice_client::resolve_data_dir(&dir)? {
        DataDir::Server(url) => {
            let token = token.or_else(|| crate::token_cmd::local_secret(&dir));
            opts.client = opts.client.or_ca(sluice_client::self_signed_ca(&dir));
            Ok(Registry::Server(
                SubstreamAdmin::new(&url, &opts)?.with_token(token),
            ))
        }
        DataDir::Store(ro) => {
            drop(ro);
            let store = EmbeddedStore::open(&dir)
                .with_context(|| format!("opening {} for writing", dir.display()))?;
            Ok(Registry::Local(store))
        }
    }
}

/// The store of `t`'s data directory when no server holds it (opened read-only, read as it
/// is); `None` when a server answers (`--server`, or a server holding the directory).
pub(crate) fn offline_store(t: &Target) -> Result<Option<Box<sluice_store::EmbeddedStore>>> {
    if t.server.is_some() {
        return Ok(None);
    }
    let dir = t.data.clone().unwrap_or_else(|| "./data".into());
    Ok(match sluice_client::resolve_data_dir(&dir)? {
        sluice_client::DataDir::Store(store) => Some(store),
        sluice_client::DataDir::Server(_) => None,
    })
}

pub(crate) fn print(v: &Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// One line per substream: name, state, filters, transformation.
fn print_list(v: &Value) {
    let Some(list) = v["substreams"].as_array() else {
        return;
    };
    if list.is_empty() {
        eprintln!("sluice: no substreams registered");
    }
    for d in list {
        let filters: Vec<String> = ["dc", "type", "subtype"]
            .iter()
            .filter_map(|k| d[*k].as_str().map(|v| format!("{k}={v}")))
            .collect();
        let t = &d["transform"];
        let what = match t["kind"].as_str() {
            Some("rollup") => crate::rollup_cmd::describe(t),
            Some("select") => {
                let paths: Vec<&str> = t["select"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match t["where"].as_str() {
                    Some(w) => format!("select {} where {w}", paths.join(",")),
                    None => format!("select {}", paths.join(",")),
                }
            }
            _ => format!(
                "python {}:{}",
                t["file"].as_str().unwrap_or("?"),
                t["func"].as_str().unwrap_or("?")
            ),
        };
        println!(
            "{}\t{}\t{}\t{what}",
            d["name"].as_str().unwrap_or("?"),
            if d["enabled"].as_bool() == Some(true) {
                "enabled"
            } else {
                "disabled"
            },
            if filters.is_empty() {
                "*".to_owned()
            } else {
                filters.join(",")
            },
        );
    }
}

fn listed(defs: impl Iterator<Item = registry::Definition>) -> Value {
    serde_json::json!({ "substreams": defs.map(|d| {
        let mut v = d.to_json();
        if let Some(t) = v.get_mut("transform").and_then(Value::as_object_mut) {
            if let Some(src) = t.remove("source") {
                t.insert("source_bytes".into(), src.as_str().map_or(0, str::len).into());
            }
        }
        v
    }).collect::<Vec<_>>() })
}

/// Run `sluice substream …`.
pub fn run(cmd: SubstreamCommand) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    match cmd {
        SubstreamCommand::Add(a) => {
            let mut spec = Spec {
                name: a.name.clone(),
                dc: a.dc,
                type_: a.type_,
                subtype: a.subtype,
                select: a.select,
                where_: a.filter,
                budget_ms: a.budget_ms,
                max_result_bytes: a.max_result_bytes,
                ..Spec::default()
            };
            if let Some(p) = &a.python {
                spec.python_from_arg(p)?;
            }
            // Checked here first (a clear error before anything is sent); the server checks again.
            registry::check_name(&spec.name)?;
            match open(&a.target)? {
                Registry::Server(api) => print(&api.add(&serde_json::to_value(&spec)?)?)?,
                Registry::Local(store) => {
                    print(&registry::add(&store, &spec, now, None)?.to_json())?
                }
            }
            eprintln!(
                "sluice: substream {:?} registered: it runs on blobs stored from now on (older data: sluice substream backfill)",
                a.name
            );
        }
        SubstreamCommand::List(a) => match open(&a.target)? {
            Registry::Server(api) => print_list(&api.list()?),
            Registry::Local(store) => print_list(&listed(registry::load(&store)?.0.into_values())),
        },
        SubstreamCommand::Show(a) => match open(&a.target)? {
            Registry::Server(api) => print(&api.show(&a.name)?)?,
            Registry::Local(store) => {
                let mut v = registry::get(&store, &a.name)?.to_json();
                v["status"] =
                    serde_json::to_value(sluice_substreams::runner::status(&store, &a.name)?)?;
                print(&v)?;
            }
        },
        SubstreamCommand::Enable(a) => set_enabled(a, true, now)?,
        SubstreamCommand::Disable(a) => set_enabled(a, false, now)?,
        SubstreamCommand::Rm(a) => {
            match open(&a.target)? {
                Registry::Server(api) => {
                    api.remove(&a.name)?;
                }
                Registry::Local(store) => registry::remove(&store, &a.name, now)?,
            }
            eprintln!(
                "sluice: substream {:?} removed (its stored results stay until they expire)",
                a.name
            );
        }
        SubstreamCommand::Backfill(a) => {
            let from = sluice_reader::parse_time(&a.from, now)
                .with_context(|| format!("--from {:?}", a.from))?;
            let to = sluice_reader::parse_time(&a.to, now)
                .with_context(|| format!("--to {:?}", a.to))?;
            if to < from {
                bail!("--to is before --from");
            }
            let report = match open(&a.target)? {
                Registry::Server(api) => api.backfill(&a.name, from, to)?,
                Registry::Local(store) => {
                    let r =
                        sluice_substreams::backfill(&store, &a.name, from, to, Default::default())?;
                    store.flush()?;
                    serde_json::json!({
                        "chunks": r.chunks, "present": r.present, "stored": r.stored, "misses": r.misses,
                    })
                }
            };
            print(&report)?;
        }
    }
    Ok(())
}

fn set_enabled(a: NameArgs, enabled: bool, now: i64) -> Result<()> {
    let def = match open(&a.target)? {
        Registry::Server(api) => api.set_enabled(&a.name, enabled)?,
        Registry::Local(store) => registry::set_enabled(&store, &a.name, enabled, now)?.to_json(),
    };
    eprintln!(
        "sluice: substream {:?} {}",
        a.name,
        if def["enabled"].as_bool() == Some(true) {
            "enabled"
        } else {
            "disabled"
        }
    );
    Ok(())
}
