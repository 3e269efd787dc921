//! The one HTTP client both servers are measured with: the same library, the same connection
//! reuse, the same batches, every request bounded (connect 5 s, whole request 10 min), and
//! every answer read to its end before the server's CPU is read again.

use std::io::Read;
use std::time::Duration;

use crate::error::{BenchError, Result};

/// Bound on establishing a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on a whole request, answer included (a query over 400 k events on a busy machine).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of an error answer kept in the error message.
const ERROR_BODY_BYTES: usize = 500;

/// A blocking HTTP/1.1 client (keep-alive) for loopback servers.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

impl Client {
    /// A client with the bench's timeouts.
    pub fn new() -> Client {
        Client {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(CONNECT_TIMEOUT)
                .timeout(REQUEST_TIMEOUT)
                .build(),
        }
    }

    /// `GET url?params`, the whole body.
    pub fn get(&self, url: &str, params: &[(&str, &str)]) -> Result<Vec<u8>> {
        let mut req = self.agent.get(url);
        for (k, v) in params {
            req = req.query(k, v);
        }
        read_body("GET", url, req.call())
    }

    /// `POST url` with `body` as `content_type`, the whole answer.
    pub fn post(&self, url: &str, content_type: &str, body: &[u8]) -> Result<Vec<u8>> {
        let req = self.agent.post(url).set("Content-Type", content_type);
        read_body("POST", url, req.send_bytes(body))
    }

    /// Whether `GET url` answers 2xx now (a readiness probe: errors are `false`).
    pub fn is_up(&self, url: &str) -> bool {
        self.agent
            .get(url)
            .timeout(Duration::from_secs(2))
            .call()
            .is_ok()
    }
}

fn read_body(
    method: &'static str,
    url: &str,
    answer: std::result::Result<ureq::Response, ureq::Error>,
) -> Result<Vec<u8>> {
    let fail = |detail: String| BenchError::Http {
        method,
        url: url.to_owned(),
        detail,
    };
    match answer {
        Ok(resp) => {
            let mut body = Vec::new();
            resp.into_reader()
                .read_to_end(&mut body)
                .map_err(|e| fail(format!("reading the answer: {e}")))?;
            Ok(body)
        }
        Err(ureq::Error::Status(code, resp)) => {
            let mut text = resp.into_string().unwrap_or_default();
            if text.len() > ERROR_BODY_BYTES {
                let mut cut = ERROR_BODY_BYTES;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
            Err(fail(format!("status {code}: {}", text.trim_end())))
        }
        Err(e) => Err(fail(e.to_string())),
    }
}
