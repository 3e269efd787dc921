//! `sluice funnel`: how many sessions reach each of a sequence of steps, and how fast
//! (`sluice_reader::funnel`; the guide is docs/funnels.md, `sluice help funnel`). Reads a data
//! directory (blobs, and the column files where they cover the range), a store, or asks a
//! server (`GET /v1/funnel`); prints a table or the JSON answer.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_client::{ClientArgs, HttpOptions};
use sluice_reader::funnel::{Funnel, FunnelSpec};
use sluice_reader::{parse_time_in, Filter, RangeReader, ReadRequest, Selection};

/// Flags of `sluice funnel`.
#[derive(Args)]
pub struct FunnelArgs {
    /// Start of the range (the forms of `sluice cat --from`: `-1d`, RFC 3339, Unix seconds).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End of the range (excluded); default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// The field naming a session (e.g. `session_id`).
    #[arg(long)]
    by: String,
    /// A step, as a --where expression; repeat it, in order (e.g. `--step 'path == "/search"'`).
    #[arg(long = "step", required = true)]
    steps: Vec<String>,
    /// Later steps count only within this long of the session's first step (`30m`, `2h`, seconds).
    #[arg(long)]
    within: Option<String>,
    /// Split the funnel by these fields (comma-separated or repeated), e.g. `dc`.
    #[arg(long = "group-by")]
    group_by: Vec<String>,
    /// Most sessions held in memory; step-1 events of sessions beyond it are counted and
    /// reported (exit status 3), not used. Default 1,000,000.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Only this data centre.
    #[arg(long)]
    dc: Option<String>,
    /// Only this event type.
    #[arg(long = "type")]
    type_: Option<String>,
    /// Only this subtype.
    #[arg(long)]
    subtype: Option<String>,
    /// Only events for which this holds (`sluice help where`).
    #[arg(long = "where")]
    filter: Option<String>,
    /// `table` (default) or `json` (the answer of `GET /v1/funnel`).
    #[arg(long, default_value = "table")]
    format: String,
    /// The data directory (read directly, or through the server running on it).
    #[arg(long, default_value = "./data", conflicts_with = "server")]
    data: PathBuf,
    /// Read a store directly instead: `embedded:DIR` or `cassandra://…`.
    #[arg(long, conflicts_with = "server")]
    store: Option<String>,
    /// Ask a running server instead (e.g. http://127.0.0.1:8180).
    #[arg(long)]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Read blobs only, even where the column files cover the range.
    #[arg(long)]
    no_columns: bool,
    /// Time zone of --from / --to without an offset: `UTC`, `+02:00`, an IANA name.
    #[arg(long, default_value = "UTC")]
    tz: String,
}

/// Run `sluice funnel`.
pub fn run(a: FunnelArgs) -> Result<()> {
    if !matches!(a.format.as_str(), "table" | "json") {
        bail!("--format {:?}: table or json", a.format);
    }
    let now = sluice_reader::time::now_unix();
    let zone = sluice_reader::Zone::parse(&a.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))?;
    let from =
        parse_time_in(&a.from, now, &zone).with_context(|| format!("--from {:?}", a.from))?;
    let to = parse_time_in(&a.to, now, &zone).with_context(|| format!("--to {:?}", a.to))?;
    crate::cat_cmd::check_range(from, to)?;
    let spec = FunnelSpec::parse(
        &a.by,
        &a.steps,
        a.within.as_deref(),
        &a.group_by,
        a.max_sessions,
    )
    .map_err(|e| anyhow::anyhow!("--{e}"))?;
    let filter = a
        .filter
        .as_deref()
        .map(Filter::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--where: {e}"))?;
    let selection = Selection {
        dc: a.dc.clone(),
        type_: a.type_.clone(),
        subtype: a.subtype.clone(),
        filter,
        ..Selection::default()
    };
    let mut http = HttpOptions::default().with_client(a.client.options());
    http.no_columns = a.no_columns;
    let server = match &a.server {
        Some(s) => s.clone(),
        None => match crate::store_arg::open_for_read(&a.data, a.store.as_deref())? {
            crate::store_arg::ReadSource::Store(store) => {
                let mut opts = sluice_reader::ReadOptions::default();
                if !a.no_columns && a.store.is_none() {
                    opts.columns = sluice_columns::view::data_dir_view(&a.data);
                }
                spec.narrow_read(&mut opts);
                let req = ReadRequest::selected(from, to, selection);
                let mut reader = RangeReader::new(&*store, req, opts)?;
                let report = Funnel::new(spec).read(&mut reader);
                return print(&report.to_json(), &a.format);
            }
            crate::store_arg::ReadSource::Server(url) => {
                http.client = http.client.or_ca(sluice_client::self_signed_ca(&a.data));
                url
            }
        },
    };
    let mut query = vec![
        ("from", from.to_string()),
        ("to", to.to_string()),
        ("by", a.by.clone()),
    ];
    query.extend(a.steps.iter().map(|s| ("step", s.clone())));
    query.extend(a.within.iter().map(|w| ("within", w.clone())));
    query.extend(a.group_by.iter().map(|g| ("group_by", g.clone())));
    query.extend(a.max_sessions.map(|m| ("max_sessions", m.to_string())));
    query.extend(selection.query_pairs());
    if a.no_columns {
        query.push(("columns", "off".into()));
    }
    let path = format!(
        "/v1/funnel?{}",
        query
            .iter()
            .map(|(k, v)| format!("{k}={}", sluice_client::substreams::enc(v)))
            .collect::<Vec<_>>()
            .join("&")
    );
    let api = sluice_client::SubstreamAdmin::new(&server, &http)?;
    let answer = api.call("GET", &path, None)?;
    print(&answer, &a.format)
}

/// Prints the answer; warnings and an overflow on stderr (exit status 3: the counts are
/// incomplete).
fn print(answer: &serde_json::Value, format: &str) -> Result<()> {
    if format == "json" {
        println!("{answer}");
    } else {
        print!("{}", sluice_reader::funnel::render_table(answer));
    }
    let warnings: Vec<&str> = answer["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str())
        .collect();
    for w in &warnings {
        eprintln!("sluice: warning: {w}");
    }
    let overflow = answer["overflow"].as_u64().unwrap_or(0);
    if overflow > 0 {
        eprintln!(
            "sluice: warning: {overflow} step-1 events of sessions beyond --max-sessions {} were not used: the counts are low",
            answer["max_sessions"]
        );
    }
    if !warnings.is_empty() || overflow > 0 {
        return Err(crate::PartialRead(format!(
            "the funnel is incomplete: {} unreadable chunks, {overflow} step-1 events over the session cap",
            warnings.len()
        ))
        .into());
    }
    Ok(())
}
