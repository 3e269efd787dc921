//! `sluice emit`: NDJSON events from standard input to a collector, over UDP (fire-and-forget,
//! many events per datagram), TCP (one line per event batch, acknowledged) or HTTP (POST batches,
//! acknowledged). Also the transport behind `sluice gen --udp/--tcp/--http`. The transports are
//! `sluice_client::send`; this module maps the flags onto it.

use std::io::BufRead;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_client::{ClientArgs, ClientOptions, SendOptions, Sender, Transport};

use crate::output::plural;

/// Where to send events.
#[derive(Args, Clone)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// Send datagrams to this UDP address (fire-and-forget).
    #[arg(long)]
    pub udp: Option<String>,
    /// Send NDJSON lines to this TCP address, one message per line (pipelined), and wait for
    /// each line's acknowledgement: a bad line is refused alone, reported with its line number.
    /// `tls://HOST:PORT` for a TLS listener.
    #[arg(long)]
    pub tcp: Option<String>,
    /// POST NDJSON batches to this base URL (e.g. http://127.0.0.1:8180, https://HOST:PORT).
    #[arg(long)]
    pub http: Option<String>,
}

/// Flags of `sluice emit`.
#[derive(Args)]
pub struct EmitArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    client: ClientArgs,
}

/// Batching and timeouts.
#[derive(Args, Clone)]
pub struct Tuning {
    /// Events per HTTP request, or TCP lines written before their acknowledgements are read.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Largest UDP datagram to send, in bytes (events are packed into datagrams up to this).
    #[arg(long, default_value_t = 8192)]
    max_datagram: usize,
    /// Network timeout in seconds (connect, write, acknowledgement).
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// Connects the sender of `sluice_client` to the flags' target with `client`'s token and TLS
/// trust; refused batches are reported on stderr.
pub fn connect(target: &Target, tuning: &Tuning, client: ClientOptions) -> Result<Sender> {
    let to = match (&target.udp, &target.tcp, &target.http) {
        (Some(a), _, _) => Transport::Udp(a.clone()),
        (None, Some(a), _) => Transport::Tcp(a.clone()),
        (None, None, Some(url)) => Transport::Http(url.clone()),
        (None, None, None) => bail!("give one of --udp, --tcp, --http"),
    };
    let opts = SendOptions {
        batch: tuning.batch,
        max_datagram: tuning.max_datagram,
        timeout: Duration::from_secs(tuning.timeout.max(1)),
        client,
    };
    Ok(Sender::connect(&to, &opts)?.on_refusal(|m| eprintln!("sluice: {m}")))
}

/// Run `sluice emit`.
pub fn run(a: EmitArgs) -> Result<()> {
    let mut sender = connect(&a.target, &a.tuning, a.client.options())?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .context("reading standard input")?
            == 0
        {
            break;
        }
        sender.send_line(&line)?;
    }
    let sent = sender.finish()?;
    eprintln!(
        "sluice: sent {} in {}{}",
        plural(sent.events, "event"),
        plural(sent.messages, "message"),
        if a.target.udp.is_some() {
            String::new()
        } else {
            format!(", {} accepted, {} refused", sent.accepted, sent.refused)
        }
    );
    if sent.refused > 0 {
        bail!(
            "{} refused (the others were accepted; see above)",
            plural(sent.refused, "event")
        );
    }
    Ok(())
}
