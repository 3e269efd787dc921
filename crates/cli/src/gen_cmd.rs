//! `sluice gen`: a realistic, deterministic stream of WEB / CRON / LB events.

use std::io::Write;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use sluice_gen::{GenConfig, TypeMix};

use crate::sereal_cmd::EncodeFlags;

/// Output formats of `sluice gen`.
#[derive(Clone, Copy, ValueEnum)]
enum GenFormat {
    /// One JSON event per line.
    Ndjson,
    /// One Sereal document whose body is the array of events.
    Sereal,
}

/// Flags of `sluice gen`.
#[derive(Args)]
pub struct GenArgs {
    /// Number of events.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Seed: the same flags give the same events.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Relative weights of WEB,CRON,LB events, e.g. `75,5,20` or `1,0,0`.
    #[arg(long, default_value = "75,5,20")]
    mix: String,
    /// Data-centre ids, comma-separated.
    #[arg(long, default_value = "ams1,ams4,lhr2,fra3")]
    dcs: String,
    /// Events per second of event time (epochs advance every this many events).
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Epoch of the first event (Unix seconds); default: now.
    #[arg(long)]
    epoch: Option<i64>,
    /// Approximate size of a WEB event as JSON, in bytes.
    #[arg(long, default_value_t = 500)]
    size: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "ndjson")]
    format: GenFormat,
    #[command(flatten)]
    encode: EncodeFlags,
}

/// Run `sluice gen`.
pub fn run(a: GenArgs) -> Result<()> {
    let weights: Vec<u32> = a
        .mix
        .split(',')
        .map(|w| w.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--mix: {e} (expected three integers like 75,5,20)"))?;
    let [web, cron, lb] = weights[..] else { bail!("--mix needs three weights: WEB,CRON,LB") };
    if web + cron + lb == 0 {
        bail!("--mix: at least one weight must be positive");
    }
    let dcs: Vec<String> = a.dcs.split(',').map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()).collect();
    if dcs.is_empty() {
        bail!("--dcs: give at least one data-centre id");
    }
    if a.rate == 0 {
        bail!("--rate must be positive");
    }
    let epoch_start = match a.epoch {
        Some(e) => e,
        None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() as i64,
    };
    let cfg = GenConfig {
        seed: a.seed,
        count: a.count,
        dcs,
        mix: TypeMix { web, cron, lb },
        epoch_start,
        events_per_second: a.rate,
        web_json_bytes: a.size,
        ..GenConfig::default()
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match a.format {
        GenFormat::Ndjson => sluice_gen::write_json_lines(&cfg, &mut out)?,
        GenFormat::Sereal => {
            let doc = sereal::to_vec(&sluice_gen::events_array(&cfg), &a.encode.options()?)?;
            out.write_all(&doc)?;
        }
    }
    out.flush()?;
    Ok(())
}
