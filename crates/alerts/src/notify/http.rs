//! One POST of a JSON body to a receiver, bounded by the timeout, and what its answer means:
//! 2xx delivered; 429, 5xx and transport errors (refused, reset, timed out) worth retrying; any
//! other answer rejected for good (retrying a 4xx would only block the queue).

use std::io::Read;
use std::time::Duration;

/// Most bytes of a refusing answer's body kept in the error text.
const ERROR_BODY_BYTES: u64 = 200;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The receiver acknowledged (2xx).
    Delivered,
    /// Try again later: 429, 5xx, or no answer (the text says which).
    Retry(String),
    /// The receiver will never take it: another status (the text has the start of its body).
    Reject(String),
}

/// Posts JSON bodies with one agent (connections reused), a bearer token if configured.
pub(crate) struct Poster {
    agent: ureq::Agent,
    bearer: Option<String>,
}

impl Poster {
    /// Every call (connect, send, answer) bounded by `timeout`.
    pub fn new(timeout: Duration, bearer: Option<String>) -> Poster {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout(timeout)
            // A receiver's API does not move: a redirect of a POST is a configuration to fix.
            .redirects(0)
            .user_agent(concat!("sluice-alerts/", env!("CARGO_PKG_VERSION")))
            .build();
        Poster { agent, bearer }
    }

    /// One POST of `body` (JSON) to `url`.
    pub fn post_json(&self, url: &str, body: &str) -> Outcome {
        let mut req = self.agent.post(url).set("Content-Type", "application/json");
        if let Some(token) = &self.bearer {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        match req.send_string(body) {
            Ok(resp) if (200..300).contains(&resp.status()) => Outcome::Delivered,
            Ok(resp) => {
                let code = resp.status();
                Outcome::Reject(format!("HTTP {code}: {}", body_start(resp)))
            }
            Err(ureq::Error::Status(code, resp)) => {
                let msg = format!("HTTP {code}: {}", body_start(resp));
                if code == 429 || code >= 500 {
                    Outcome::Retry(msg)
                } else {
                    Outcome::Reject(msg)
                }
            }
            Err(ureq::Error::Transport(t)) => Outcome::Retry(t.to_string()),
        }
    }
}

/// The first [`ERROR_BODY_BYTES`] of an answer's body, as text (lossy, trimmed).
fn body_start(resp: ureq::Response) -> String {
    let mut buf = Vec::new();
    // A body that cannot be read adds nothing to the error; the status says enough.
    let _ = resp
        .into_reader()
        .take(ERROR_BODY_BYTES)
        .read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_owned()
}
