//! `sluice token create|list|revoke`: the tokens of a running server's store, through its admin
//! API (`/v1/tokens`). Credentials: `--token` / `SLUICE_TOKEN` (an admin token), else the local
//! secret the server wrote to `DIR/admin.secret` (the server's user, on its machine).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;

/// Where the server is and who asks.
#[derive(Args, Clone)]
pub struct Target {
    /// A running server (e.g. http://127.0.0.1:8180); default: the one holding --data.
    #[arg(long)]
    server: Option<String>,
    /// The data directory of the server (its address in DIR/SERVER, its local secret in
    /// DIR/admin.secret).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// An admin token (default: $SLUICE_TOKEN, else the local secret of --data).
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    tls: sluice_client::TlsArgs,
}

/// `sluice token …`
#[derive(Subcommand)]
pub enum TokenCommand {
    /// Make a token and print its secret (once: only its hash is stored).
    Create(CreateArgs),
    /// List the tokens (never their secrets).
    List(Target),
    /// Revoke a token (by name or id): refused from then on, no restart.
    Revoke(RevokeArgs),
}

/// Flags of `sluice token create`.
#[derive(Args)]
pub struct CreateArgs {
    /// A name for people and the audit log (`A-Z a-z 0-9 . _ -`).
    #[arg(long)]
    name: String,
    /// Scopes, comma-separated: ingest, read, admin.
    #[arg(long, value_name = "SCOPES")]
    scope: String,
    /// Only these event types (comma-separated patterns, `*` matches any run): reading and
    /// sending; default every type.
    #[arg(long, default_value = "")]
    types: String,
    /// Only these data centres (comma-separated patterns); default every dc.
    #[arg(long, default_value = "")]
    dcs: String,
    /// Expires after this long (`90d`, `12h`, `30m`); default never.
    #[arg(long, value_parser = humantime::parse_duration)]
    expires: Option<std::time::Duration>,
    #[command(flatten)]
    target: Target,
}

/// Flags of `sluice token revoke`.
#[derive(Args)]
pub struct RevokeArgs {
    /// The token's name or id.
    which: String,
    #[command(flatten)]
    target: Target,
}

/// Runs a `sluice token` command.
pub fn run(cmd: TokenCommand) -> Result<()> {
    match cmd {
        TokenCommand::Create(a) => {
            let expires = a
                .expires
                .map(|d| sluice_reader::time::now_unix() + d.as_secs() as i64);
            let body = serde_json::json!({
                "name": a.name, "scopes": a.scope, "types": a.types, "dcs": a.dcs, "expires": expires,
            });
            let v = call(&a.target, "POST", "/v1/tokens", Some(&body))?;
            let secret = v["secret"]
                .as_str()
                .context("the server's answer has no secret")?;
            println!("{secret}");
            eprintln!(
                "sluice: token {} ({}) created; the secret above is shown once: only its hash is stored",
                v["token"]["name"].as_str().unwrap_or("?"),
                v["token"]["scopes"].as_str().unwrap_or("?")
            );
        }
        TokenCommand::List(t) => {
            let v = call(&t, "GET", "/v1/tokens", None)?;
            for tok in v["tokens"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                println!("{tok}");
            }
        }
        TokenCommand::Revoke(a) => {
            let path = format!("/v1/tokens/{}", sluice_client::substreams::enc(&a.which));
            let v = call(&a.target, "DELETE", &path, None)?;
            println!("{}", v["revoked"]);
        }
    }
    Ok(())
}

/// The server's address: `--server`, else `DIR/SERVER`.
fn server(t: &Target) -> Result<String> {
    if let Some(s) = &t.server {
        return Ok(sluice_client::base_url(s)?);
    }
    let file = t.data.join(sluice_store::SERVER_FILE);
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "{}: no running server found (start `sluice serve --data {}`, or give --server)",
            file.display(),
            t.data.display()
        )
    })?;
    Ok(sluice_client::base_url(text.trim())?)
}

/// The admin credentials: `--token` / `SLUICE_TOKEN`, else the local secret of `--data`, else
/// the one the server left for its user by its address.
fn credentials(t: &Target) -> Result<String> {
    if let Some(tok) = &t.token {
        return Ok(tok.trim().to_string());
    }
    let by_address = || server(t).ok().and_then(|url| runtime_secret(&url));
    local_secret(&t.data).or_else(by_address).with_context(|| {
        format!(
            "no admin credentials: give --token (or SLUICE_TOKEN), or run as the server's user beside {}",
            t.data.join(sluice_server::auth::ADMIN_SECRET_FILE).display()
        )
    })
}

/// The local secret the server at `url` (`http://HOST:PORT`) left for the CLI of its user
/// (`sluice_auth::runtime_secret_path`).
pub fn runtime_secret(url: &str) -> Option<String> {
    let addr = url
        .split_once("://")
        .map_or(url, |(_, a)| a)
        .trim_end_matches('/');
    let text = std::fs::read_to_string(sluice_auth::runtime_secret_path(addr)?).ok()?;
    let s = text.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The per-start local secret a server wrote to `dir/admin.secret`.
pub fn local_secret(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(sluice_server::auth::ADMIN_SECRET_FILE)).ok()?;
    let s = text.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// `method path` on the server's admin API with the admin credentials.
fn call(t: &Target, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
    let client = t.tls.options();
    let http = sluice_client::HttpOptions::default().with_client(match &t.server {
        None => client.or_ca(sluice_client::self_signed_ca(&t.data)),
        Some(_) => client,
    });
    let admin =
        sluice_client::SubstreamAdmin::new(&server(t)?, &http)?.with_token(Some(credentials(t)?));
    Ok(admin.call(method, path, body)?)
}
