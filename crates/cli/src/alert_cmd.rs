//! `sluice alert add|ls|show|rm|silence|test`: alert rules over rollups (docs/alerts.md),
//! through a running server or in a data directory (the same targets as `sluice rollup`).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use sluice_alerts::catalog;
use sluice_alerts::RuleSpec;
use sluice_substreams::registry;

use crate::substream_cmd::{offline_store, open, print, Registry, Target, TargetArgs};

/// `sluice alert …`
#[derive(Subcommand)]
pub enum AlertCommand {
    /// Add a rule: threshold (`--expr '… > 0.05'`) or anomaly (`--anomaly zscore`).
    Add(Box<AddArgs>),
    /// List the rules with their state.
    #[command(alias = "list")]
    Ls(TargetArgs),
    /// Show one rule, its state and its pending and firing alerts.
    Show(NameArgs),
    /// Remove a rule (and its state).
    Rm(NameArgs),
    /// Silence a rule's notifications for a while (`--for 0`: unsilence).
    Silence(SilenceArgs),
    /// Backtest: when the rule would have fired and resolved over stored rollups.
    Test(TestArgs),
}

/// Flags naming one rule.
#[derive(Args)]
pub struct NameArgs {
    /// The rule.
    name: String,
    #[command(flatten)]
    target: Target,
}

/// Flags of `sluice alert add`.
#[derive(Args)]
pub struct AddArgs {
    /// The name (the `alertname` label).
    name: String,
    /// The rollup it reads.
    #[arg(long)]
    rollup: String,
    /// The expression (`sluice help alerts`): `sum(count where status >= 500) / sum(count) > 0.05`.
    #[arg(long)]
    expr: String,
    /// One alert per value of these group-by fields of the rollup (comma-separated).
    #[arg(long, value_delimiter = ',')]
    by: Vec<String>,
    /// The window the expression sees (default: the rollup's step; anomaly: 5m).
    #[arg(long)]
    window: Option<String>,
    /// How long the condition must hold before it fires (default 0).
    #[arg(long = "for")]
    for_: Option<String>,
    /// How long it keeps firing after the condition stops holding (default 0).
    #[arg(long)]
    keep_firing_for: Option<String>,
    /// The volume floor: fewer events in the window never fire.
    #[arg(long)]
    min_count: Option<u64>,
    /// An anomaly rule: `zscore` or `stddev`.
    #[arg(long)]
    anomaly: Option<String>,
    /// The anomaly baseline window (`1h`, `1d`, `7d`; default 1h).
    #[arg(long)]
    baseline: Option<String>,
    /// The anomaly threshold (default 3).
    #[arg(long)]
    threshold: Option<f64>,
    /// `up`, `down` or `both` (default both).
    #[arg(long)]
    direction: Option<String>,
    /// The anomaly point step.
    #[arg(long)]
    point: Option<String>,
    /// Labels added to every alert: `k=v` (comma-separated, repeatable).
    #[arg(long = "labels", value_delimiter = ',')]
    labels: Vec<String>,
    /// An annotation `k=v` (repeatable; the value may hold commas).
    #[arg(long = "annotation")]
    annotations: Vec<String>,
    /// Sample events carried by each alert (default 5).
    #[arg(long)]
    samples: Option<usize>,
    /// Fields of each sample event (default: the whole event).
    #[arg(long, value_delimiter = ',')]
    sample_fields: Vec<String>,
    /// Which events are evidence (default: the first `count where` condition).
    #[arg(long)]
    evidence_where: Option<String>,
    /// Replace a rule of the same name (its state starts over).
    #[arg(long)]
    replace: bool,
    #[command(flatten)]
    target: Target,
}

/// Flags of `sluice alert silence`.
#[derive(Args)]
pub struct SilenceArgs {
    /// The rule.
    name: String,
    /// For how long (`2h`; `0` unsilences).
    #[arg(long = "for")]
    for_: String,
    #[command(flatten)]
    target: Target,
}

/// Flags of `sluice alert test`.
#[derive(Args)]
pub struct TestArgs {
    /// The rule.
    name: String,
    /// Start: Unix seconds, RFC 3339, or relative (`-7d`).
    #[arg(long, allow_hyphen_values = true)]
    from: String,
    /// End; default `now`.
    #[arg(long, allow_hyphen_values = true, default_value = "now")]
    to: String,
    /// `table` (default: the transitions) or `json` (the whole answer, with every value).
    #[arg(long, default_value = "table")]
    format: String,
    #[command(flatten)]
    target: Target,
}

fn pairs(items: &[String], flag: &str) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("{flag} {kv:?}: give NAME=VALUE"))?;
            Ok((k.trim().to_owned(), v.to_owned()))
        })
        .collect()
}

/// Run `sluice alert …`.
pub fn run(cmd: AlertCommand) -> Result<()> {
    let now = sluice_reader::time::now_unix();
    match cmd {
        AlertCommand::Add(a) => {
            let a = *a;
            let spec = RuleSpec {
                name: a.name.clone(),
                rollup: a.rollup,
                expr: a.expr,
                by: a.by,
                window: a.window,
                for_: a.for_,
                keep_firing_for: a.keep_firing_for,
                min_count: a.min_count,
                anomaly: a.anomaly,
                baseline: a.baseline,
                threshold: a.threshold,
                direction: a.direction,
                point: a.point,
                labels: pairs(&a.labels, "--labels")?,
                annotations: pairs(&a.annotations, "--annotation")?,
                samples: a.samples,
                sample_fields: a.sample_fields,
                evidence_where: a.evidence_where,
            };
            match open(&a.target)? {
                Registry::Server(api) => {
                    let path = if a.replace {
                        "/v1/alerts?replace=true"
                    } else {
                        "/v1/alerts"
                    };
                    print(&api.call("POST", path, Some(&serde_json::to_value(&spec)?))?)?
                }
                Registry::Local(store) => print(&serde_json::to_value(catalog::add(
                    &store, &spec, a.replace,
                )?)?)?,
            }
            eprintln!("sluice: alert rule {:?} added: `sluice alert test {} --from -1d` shows when it would have fired", a.name, a.name);
        }
        AlertCommand::Ls(a) => {
            for r in rules(&a.target)? {
                let alerts = r["alerts"].as_array().map_or(0, Vec::len);
                println!(
                    "{}\t{}\t{}\t{}\t{}{}",
                    r["name"].as_str().unwrap_or("?"),
                    r["state"].as_str().unwrap_or("?"),
                    r["kind"].as_str().unwrap_or("?"),
                    r["rollup"].as_str().unwrap_or("?"),
                    r["expr"].as_str().unwrap_or(""),
                    if alerts > 0 {
                        format!("\t({alerts} pending or firing)")
                    } else {
                        String::new()
                    }
                );
            }
        }
        AlertCommand::Show(a) => {
            let found = rules(&a.target)?
                .into_iter()
                .find(|r| r["name"] == a.name.as_str());
            match found {
                Some(r) => print(&r)?,
                None => bail!("no alert rule named {:?}", a.name),
            }
        }
        AlertCommand::Rm(a) => {
            match open(&a.target)? {
                Registry::Server(api) => {
                    api.call(
                        "DELETE",
                        &format!("/v1/alerts/{}", sluice_client::substreams::enc(&a.name)),
                        None,
                    )?;
                }
                Registry::Local(store) => catalog::remove(&store, &a.name)?,
            }
            eprintln!("sluice: alert rule {:?} removed", a.name);
        }
        AlertCommand::Silence(a) => {
            let secs = match a.for_.trim() {
                "0" | "0s" => 0,
                t => sluice_reader::reduce::parse_window(t)
                    .map_err(|e| anyhow::anyhow!(e.to_string().replace("--window", "--for")))?
                    as i64,
            };
            let rule = match open(&a.target)? {
                Registry::Server(api) => api.call(
                    "POST",
                    &format!(
                        "/v1/alerts/{}/silence?for={secs}",
                        sluice_client::substreams::enc(&a.name)
                    ),
                    None,
                )?,
                Registry::Local(store) => serde_json::to_value(catalog::silence(
                    &store,
                    &a.name,
                    if secs == 0 { 0 } else { now + secs },
                )?)?,
            };
            match rule["silenced_until"].as_i64() {
                Some(t) if t > 0 => eprintln!(
                    "sluice: alert rule {:?} silenced until {t} (Unix seconds)",
                    a.name
                ),
                _ => eprintln!("sluice: alert rule {:?} not silenced", a.name),
            }
        }
        AlertCommand::Test(a) => test(a, now)?,
    }
    Ok(())
}

/// The rules with their states (the server's live view, or the data directory's catalog).
fn rules(target: &Target) -> Result<Vec<Value>> {
    Ok(match open(target)? {
        Registry::Server(api) => api.call("GET", "/v1/alerts", None)?["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        Registry::Local(store) => {
            let (rules, bad) = catalog::load_rules(&store)?;
            for (name, why) in bad {
                eprintln!("sluice: warning: alert rule {name:?} does not load: {why}");
            }
            rules
                .into_values()
                .map(|r| {
                    let state = catalog::load_state(&store, &r.name).unwrap_or_default();
                    let mut v = serde_json::to_value(&r).unwrap_or_default();
                    v["kind"] = r.kind().into();
                    v["state"] = state.overall().into();
                    v["last_eval"] = state.last_eval.into();
                    v["alerts"] =
                        serde_json::to_value(state.instances.values().collect::<Vec<_>>())
                            .unwrap_or_default();
                    v
                })
                .collect()
        }
    })
}

fn test(a: TestArgs, now: i64) -> Result<()> {
    if !matches!(a.format.as_str(), "table" | "json") {
        bail!("--format {:?}: table or json", a.format);
    }
    let from =
        sluice_reader::parse_time(&a.from, now).with_context(|| format!("--from {:?}", a.from))?;
    let to = sluice_reader::parse_time(&a.to, now).with_context(|| format!("--to {:?}", a.to))?;
    if to < from {
        bail!("--to is before --from");
    }
    // A data directory no server holds is read as it is (read-only); otherwise the server
    // answers.
    let local = offline_store(&a.target)?;
    let answer: Value = match local {
        Some(store) => {
            let rule = catalog::get_rule(&*store, &a.name)?;
            let def = registry::get(&*store, &rule.rollup)?;
            serde_json::to_value(sluice_alerts::backtest(
                &*store, &rule, &def, from, to, 1_000_000,
            )?)?
        }
        None => {
            let Registry::Server(api) = open(&a.target)? else {
                bail!("no server holds the data directory");
            };
            api.call(
                "GET",
                &format!(
                    "/v1/alerts/{}/test?from={from}&to={to}&max_points=1000000",
                    sluice_client::substreams::enc(&a.name)
                ),
                None,
            )?
        }
    };
    for w in answer["warnings"].as_array().into_iter().flatten() {
        eprintln!("sluice: warning: {}", w.as_str().unwrap_or(""));
    }
    if a.format == "json" {
        return print(&answer);
    }
    let transitions = answer["transitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let fired = transitions
        .iter()
        .filter(|t| t["status"] == "firing")
        .count();
    println!("TIME (UTC)           STATUS    VALUE         LABELS");
    for t in &transitions {
        let at = t["t"].as_i64().unwrap_or(0);
        let labels: Vec<String> = t["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        println!(
            "{:<20} {:<9} {:<13} {}",
            sluice_reader::time::format_time(at as f64, &sluice_reader::time::Zone::utc()),
            t["status"].as_str().unwrap_or("?"),
            t["value"]
                .as_f64()
                .map_or("none".to_owned(), |v| format!("{v:.6}")),
            labels.join(",")
        );
    }
    eprintln!(
        "sluice: {} evaluations from {from} to {to}: would have fired {fired} time(s){}",
        answer["evaluations"].as_u64().unwrap_or(0),
        if answer["truncated"].as_bool() == Some(true) {
            " (points truncated)"
        } else {
            ""
        }
    );
    Ok(())
}
