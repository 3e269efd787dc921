//! The substream registry of a running server: `/v1/substreams` (list, add, show, enable,
//! disable, remove, backfill). Bodies and answers are JSON (`serde_json::Value`): the
//! definition's format belongs to `sluice-substreams`, this module only carries it.
//!
//! Errors: the server's status and its `{"error": …}` message ([`ClientError::Status`]).

use serde_json::Value;

use crate::{base_url, http_error, ClientError, HttpOptions, Result};

/// A server's substream API.
#[derive(Clone)]
pub struct SubstreamAdmin {
    base: String,
    agent: ureq::Agent,
    /// `Authorization: Bearer …` on every call (an admin token or the server's local secret).
    token: Option<String>,
}

impl SubstreamAdmin {
    /// The API of `server` (`http://HOST:PORT`, `https://HOST:PORT` or `HOST:PORT`), with the
    /// TLS trust (and, unless [`with_token`](Self::with_token) says otherwise, the token) of
    /// `opts.client`. Registering a Python substream imports it on the server: allow for that
    /// in `opts.read_timeout`.
    pub fn new(server: &str, opts: &HttpOptions) -> Result<SubstreamAdmin> {
        Ok(SubstreamAdmin {
            base: base_url(server)?,
            agent: opts.agent()?,
            token: None,
        })
    }

    /// The same API, calling with `token` (admin routes need an admin token or the server's
    /// local secret: see `docs/security.md`).
    pub fn with_token(mut self, token: Option<String>) -> SubstreamAdmin {
        self.token = token;
        self
    }

    /// Any admin route (`/v1/tokens` too): `method path` with a JSON body, the JSON answer.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.request(method, &url);
        if let Some(t) = &self.token {
            req = req.set("authorization", &format!("Bearer {t}"));
        }
        let resp = match body {
            Some(b) => req
                .set("content-type", "application/json")
                .send_string(&b.to_string()),
            None => req.call(),
        }
        .map_err(|e| http_error(&url, e))?;
        let text = resp
            .into_string()
            .map_err(|e| ClientError::io(format!("reading {url}"), e))?;
        serde_json::from_str(&text)
            .map_err(|e| ClientError::Protocol(format!("{url}: not JSON ({e}): {text}")))
    }

    /// `GET /v1/substreams`.
    pub fn list(&self) -> Result<Value> {
        self.call("GET", "/v1/substreams", None)
    }

    /// `POST /v1/substreams` with `spec` (JSON of `sluice_substreams::Spec`).
    pub fn add(&self, spec: &Value) -> Result<Value> {
        self.call("POST", "/v1/substreams", Some(spec))
    }

    /// `GET /v1/substreams/{name}`.
    pub fn show(&self, name: &str) -> Result<Value> {
        self.call("GET", &format!("/v1/substreams/{}", enc(name)), None)
    }

    /// `POST /v1/substreams/{name}/enable` or `…/disable`.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<Value> {
        let what = if enabled { "enable" } else { "disable" };
        self.call(
            "POST",
            &format!("/v1/substreams/{}/{what}", enc(name)),
            None,
        )
    }

    /// `DELETE /v1/substreams/{name}`.
    pub fn remove(&self, name: &str) -> Result<Value> {
        self.call("DELETE", &format!("/v1/substreams/{}", enc(name)), None)
    }

    /// `POST /v1/substreams/{name}/backfill?from=…&to=…`.
    pub fn backfill(&self, name: &str, from: i64, to: i64) -> Result<Value> {
        self.call(
            "POST",
            &format!("/v1/substreams/{}/backfill?from={from}&to={to}", enc(name)),
            None,
        )
    }
}

/// A path segment, percent-encoded.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
