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

/// Events generated when `--count` is not given (and not `--live`).
const DEFAULT_COUNT: usize = 1000;

/// Flags of `sluice gen`.
#[derive(Args)]
pub struct GenArgs {
    /// Number of events (default 1000; with --live, until interrupted; 0 also means until
    /// interrupted with --live).
    #[arg(long)]
    count: Option<usize>,
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
    /// Send to this UDP address instead of printing.
    #[arg(long, conflicts_with_all = ["tcp", "http"])]
    udp: Option<String>,
    /// Send to this TCP address (acknowledged) instead of printing.
    #[arg(long, conflicts_with_all = ["udp", "http"])]
    tcp: Option<String>,
    /// POST to this base URL (acknowledged) instead of printing, e.g. http://127.0.0.1:8180.
    #[arg(long, conflicts_with_all = ["udp", "tcp"])]
    http: Option<String>,
    /// Live mode: events carry the current second and are paced at --rate events per second of
    /// wall-clock time, until interrupted unless --count is given.
    #[arg(long)]
    live: bool,
    #[command(flatten)]
    tuning: crate::emit_cmd::Tuning,
    #[command(flatten)]
    client: sluice_client::ClientArgs,
}

/// Run `sluice gen`.
pub fn run(a: GenArgs) -> Result<()> {
    let weights: Vec<u32> = a
        .mix
        .split(',')
        .map(|w| w.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--mix: {e} (expected three integers like 75,5,20)"))?;
    let [web, cron, lb] = weights[..] else {
        bail!("--mix needs three weights: WEB,CRON,LB")
    };
    if web + cron + lb == 0 {
        bail!("--mix: at least one weight must be positive");
    }
    let dcs: Vec<String> = a
        .dcs
        .split(',')
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
        .collect();
    if dcs.is_empty() {
        bail!("--dcs: give at least one data-centre id");
    }
    if a.rate == 0 {
        bail!("--rate must be positive");
    }
    let epoch_start = match a.epoch {
        Some(e) => e,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs() as i64,
    };
    let cfg = GenConfig {
        seed: a.seed,
        count: a.count.unwrap_or(DEFAULT_COUNT),
        dcs,
        mix: TypeMix { web, cron, lb },
        epoch_start,
        events_per_second: a.rate,
        web_json_bytes: a.size,
        ..GenConfig::default()
    };
    if a.live || a.udp.is_some() || a.tcp.is_some() || a.http.is_some() {
        return send(&a, cfg);
    }
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

/// Generate and send (or print, paced) event by event: `--live` and the transport flags.
fn send(a: &GenArgs, cfg: GenConfig) -> Result<()> {
    if matches!(a.format, GenFormat::Sereal) {
        bail!("--format sereal writes a file; transports and --live send NDJSON");
    }
    let target = crate::emit_cmd::Target {
        udp: a.udp.clone(),
        tcp: a.tcp.clone(),
        http: a.http.clone(),
    };
    let mut sender = if target.udp.is_some() || target.tcp.is_some() || target.http.is_some() {
        Some(crate::emit_cmd::connect(
            &target,
            &a.tuning,
            a.client.options(),
        )?)
    } else {
        None
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let forever = a.live && matches!(a.count, None | Some(0));
    let mut gen = sluice_gen::Generator::new(GenConfig {
        count: if forever { usize::MAX } else { cfg.count },
        ..cfg
    });
    let started = std::time::Instant::now();
    let mut last_flush = started;
    let mut line = Vec::with_capacity(1024);
    for (i, mut event) in (0_u64..).zip(gen.by_ref()) {
        if a.live {
            // Pace to --rate per second of wall time, and stamp the current second.
            let due = std::time::Duration::from_secs_f64(i as f64 / a.rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                // Send what is batched every 200 ms: low latency without a request per event.
                if last_flush.elapsed() >= std::time::Duration::from_millis(200) {
                    if let Some(s) = sender.as_mut() {
                        s.flush()?;
                    }
                    out.flush()?;
                    last_flush = std::time::Instant::now();
                }
                std::thread::sleep(wait);
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs() as i64;
            if let sereal::Value::Hash(entries) = &mut event {
                for (k, v) in entries.iter_mut() {
                    if k.as_bytes() == b"epoch" {
                        *v = sereal::Value::Int(now);
                    }
                }
            }
        }
        line.clear();
        sereal::json::to_writer(&mut line, &event)?;
        match sender.as_mut() {
            Some(s) => s.send_line(&line)?,
            None => {
                out.write_all(&line)?;
                out.write_all(b"\n")?;
            }
        }
    }
    out.flush()?;
    if let Some(s) = sender {
        let sent = s.finish()?;
        eprintln!(
            "sluice: sent {} in {} ({} refused)",
            crate::output::plural(sent.events, "event"),
            crate::output::plural(sent.messages, "message"),
            sent.refused
        );
        if sent.refused > 0 {
            bail!("{} refused", crate::output::plural(sent.refused, "event"));
        }
    }
    Ok(())
}
