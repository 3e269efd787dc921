//! The command-line spelling of a [`Selection`]: `--dc`, `--type`, `--subtype`, `--select`,
//! `--where`, `--substream`, `--no-fallback` (shared by `sluice cat` and `sluice tail`); and of
//! [`ClientOptions`]: `--token`, `--ca`, `--client-cert`, `--client-key` ([`ClientArgs`], every
//! command that talks to a server; [`TlsArgs`] alone where a command has its own `--token`).
//!
//! `--select` takes comma-separated paths (and may be repeated), so a path whose quoted key
//! holds a comma cannot be given on the command line (use the query string or the Rust type).

use std::path::PathBuf;

use clap::Args;
use sluice_reader::{Selection, SelectionError};

use crate::ClientOptions;

/// Which events, and which parts of them (flags).
#[derive(Args, Clone, Debug, Default)]
pub struct SelectionArgs {
    /// Only this data centre.
    #[arg(long)]
    pub dc: Option<String>,
    /// Only this event type (case-sensitive: a hint lists the types of the range when none match).
    #[arg(long = "type")]
    pub type_: Option<String>,
    /// Only this subtype (`--subtype ''` for the empty one).
    #[arg(long)]
    pub subtype: Option<String>,
    /// Print only these paths (comma-separated), read lazily; see `sluice help where`.
    #[arg(long, value_delimiter = ',')]
    pub select: Vec<String>,
    /// Print only events for which this holds, e.g. `status >= 500 and path ~ "^/api"`; the
    /// language: `sluice help where` (docs/query.md).
    #[arg(long = "where")]
    pub filter: Option<String>,
    /// Read this substream's results instead of the events (a missing result is computed here
    /// from the full blob, said on stderr).
    #[arg(long)]
    pub substream: Option<String>,
    /// With --substream: report chunks without a stored result as gaps (exit status 3) instead
    /// of computing them.
    #[arg(long, requires = "substream")]
    pub no_fallback: bool,
}

impl SelectionArgs {
    /// The selection (paths and expression parsed); an error names the parameter (`where`).
    pub fn selection(&self) -> Result<Selection, SelectionError> {
        Selection::from_texts(
            self.dc.clone(),
            self.type_.clone(),
            self.subtype.clone(),
            &self.select,
            self.filter.as_deref(),
        )
        .map(|s| s.with_substream(self.substream.clone(), self.no_fallback))
    }
}

/// The token and TLS trust of a client (flags, or the environment).
#[derive(Args, Clone, Debug, Default)]
pub struct ClientArgs {
    /// The token: sent as `Authorization: Bearer` (HTTP) or as the `auth` first line (TCP);
    /// UDP carries none.
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// `--ca`, `--client-cert`, `--client-key`.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS trust and identity of a client (flags, or the environment).
#[derive(Args, Clone, Debug, Default)]
pub struct TlsArgs {
    /// CA certificates (PEM) trusted for https:// servers and tls:// TCP targets, besides the
    /// built-in web roots: a private CA, or a server's DATA/tls/self-signed.pem.
    #[arg(long, env = "SLUICE_CA", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// A client certificate chain (PEM) to present (mutual TLS), with --client-key.
    #[arg(
        long,
        env = "SLUICE_CLIENT_CERT",
        value_name = "PEM",
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The private key (PEM) of --client-cert.
    #[arg(
        long,
        env = "SLUICE_CLIENT_KEY",
        value_name = "PEM",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
}

impl ClientArgs {
    /// The options (an empty token is none).
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            token: self
                .token
                .as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
            ..self.tls.options()
        }
    }
}

impl TlsArgs {
    /// The options, without a token.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            token: None,
            ca: self.ca.clone(),
            cert: self.client_cert.clone(),
            key: self.client_key.clone(),
        }
    }
}
