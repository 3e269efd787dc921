//! [`NotifierConfig`]: where notifications go and how hard the notifier tries, checked once at
//! start ([`NotifierConfig::validate`]) so that a receiver that can never work is said at once,
//! not at every retry.

use std::time::Duration;

use url::{Host, Url};

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("notifier configuration: {0}")]
pub struct ConfigError(pub String);

/// Where notifications go and how they are retried; [`NotifierConfig::default`] gives the
/// defaults (no receivers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifierConfig {
    /// Alertmanager base URLs (`http(s)://host:port[/prefix]`); alerts go to
    /// `{base}/api/v2/alerts`. The URL's own `user:pass@` is sent as basic auth.
    pub alertmanagers: Vec<String>,
    /// Webhook URLs, sent the Alertmanager webhook format (version 4). The URL's own
    /// `user:pass@` is sent as basic auth.
    pub webhooks: Vec<String>,
    /// Sent as `Authorization: Bearer TOKEN` to every receiver (then no URL may carry
    /// `user:pass@`).
    pub bearer_token: Option<String>,
    /// `externalURL` in webhook messages (the Sluice server's public URL); empty by default.
    pub external_url: String,
    /// Every HTTP call, connect to answer. Default 5 s.
    pub timeout: Duration,
    /// Most notifications waiting per receiver, the one being sent included. Default 10,000.
    pub queue_capacity: usize,
    /// The first wait after a failed attempt (doubled after each, with jitter). Default 500 ms.
    pub backoff_min: Duration,
    /// The longest wait between attempts. Default 30 s.
    pub backoff_max: Duration,
    /// A notification not delivered this long after [`crate::notify::Notifier::send`] is dropped
    /// (counted `max_age`). Default 1 h.
    pub max_age: Duration,
    /// How often firing alerts are posted again to Alertmanager (so it does not time them out,
    /// as Prometheus does). Default 60 s.
    pub resend_firing: Duration,
}

impl Default for NotifierConfig {
    fn default() -> NotifierConfig {
        NotifierConfig {
            alertmanagers: Vec::new(),
            webhooks: Vec::new(),
            bearer_token: None,
            external_url: String::new(),
            timeout: Duration::from_secs(5),
            queue_capacity: 10_000,
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            max_age: Duration::from_secs(3600),
            resend_firing: Duration::from_secs(60),
        }
    }
}

/// What a receiver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReceiverKind {
    /// Alertmanager's API: `POST {base}/api/v2/alerts`, firing alerts resent.
    Alertmanager,
    /// The Alertmanager webhook format (version 4), one POST per notification.
    Webhook,
}

impl ReceiverKind {
    /// `alertmanager` or `webhook` (a metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverKind::Alertmanager => "alertmanager",
            ReceiverKind::Webhook => "webhook",
        }
    }
}

/// One checked receiver.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub kind: ReceiverKind,
    /// Where the POSTs go (credentials included: ureq sends them as basic auth).
    pub post_url: String,
    /// The URL as shown in stats and errors: no credentials.
    pub shown: String,
}

impl NotifierConfig {
    /// Checks every field; the error names the field and what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.targets().map(|_| ())
    }

    /// The receivers, checked.
    pub(crate) fn targets(&self) -> Result<Vec<Target>, ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.alertmanagers.is_empty() && self.webhooks.is_empty() {
            return err("no receivers: give at least one Alertmanager or webhook URL".into());
        }
        if self.timeout.is_zero() {
            return err("timeout is 0".into());
        }
        if self.queue_capacity == 0 {
            return err("queue_capacity is 0".into());
        }
        if self.backoff_min.is_zero() {
            return err("backoff_min is 0".into());
        }
        if self.backoff_max < self.backoff_min {
            return err(format!(
                "backoff_max ({:?}) is less than backoff_min ({:?})",
                self.backoff_max, self.backoff_min
            ));
        }
        if self.max_age.is_zero() {
            return err("max_age is 0".into());
        }
        if self.resend_firing.is_zero() {
            return err("resend_firing is 0".into());
        }
        if let Some(token) = &self.bearer_token {
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return err("bearer_token: empty, or not printable ASCII without spaces".into());
            }
        }
        if !self.external_url.is_empty() {
            match Url::parse(&self.external_url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => {
                    return err(format!(
                        "external_url {:?}: not an http(s) URL",
                        self.external_url
                    ))
                }
            }
        }
        let mut targets: Vec<Target> = Vec::new();
        let all = self
            .alertmanagers
            .iter()
            .map(|u| (ReceiverKind::Alertmanager, u))
            .chain(self.webhooks.iter().map(|u| (ReceiverKind::Webhook, u)));
        for (kind, raw) in all {
            let target = self.target(kind, raw)?;
            if targets
                .iter()
                .any(|t| t.kind == kind && t.post_url == target.post_url)
            {
                return err(format!(
                    "{} URL {:?} given twice (each notification would be sent twice)",
                    kind.as_str(),
                    target.shown
                ));
            }
            targets.push(target);
        }
        Ok(targets)
    }

    fn target(&self, kind: ReceiverKind, raw: &str) -> Result<Target, ConfigError> {
        let what = kind.as_str();
        let url = Url::parse(raw).map_err(|e| ConfigError(format!("{what} URL: {e}")))?;
        let mut shown_url = url.clone();
        // Never show credentials (stats, logs, errors).
        let _ = shown_url.set_username("");
        let _ = shown_url.set_password(None);
        shown_url.set_fragment(None);
        let shown = shown_url.to_string();
        let bad = |m: &str| Err(ConfigError(format!("{what} URL {shown:?}: {m}")));
        if !matches!(url.scheme(), "http" | "https") {
            return bad("not http:// or https://");
        }
        let Some(host) = url.host() else {
            return bad("no host");
        };
        if url.fragment().is_some() {
            return bad(
                "has a #fragment, which is never sent; a token goes in bearer_token, a user and \
                 password as user:pass@host",
            );
        }
        let basic = !url.username().is_empty() || url.password().is_some();
        if basic && self.bearer_token.is_some() {
            return bad("has user:pass@ and bearer_token is set: one Authorization, not two");
        }
        if (basic || self.bearer_token.is_some()) && url.scheme() == "http" && !is_loopback(&host) {
            return bad("credentials over plain http beyond loopback: use https://");
        }
        let post_url = match kind {
            ReceiverKind::Alertmanager => {
                if url.query().is_some() {
                    return bad("an Alertmanager base URL takes no ?query");
                }
                format!("{}/api/v2/alerts", url.as_str().trim_end_matches('/'))
            }
            ReceiverKind::Webhook => url.to_string(),
        };
        Ok(Target {
            kind,
            post_url,
            shown,
        })
    }
}

fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alertmanager_path_appended_and_credentials_hidden() {
        let cfg = NotifierConfig {
            alertmanagers: vec!["https://u:secret@am.example:9093/prefix/".into()],
            webhooks: vec!["http://127.0.0.1:9/hook?x=1".into()],
            ..NotifierConfig::default()
        };
        let t = cfg.targets().unwrap();
        assert_eq!(
            t[0].post_url,
            "https://u:secret@am.example:9093/prefix/api/v2/alerts"
        );
        assert_eq!(t[0].shown, "https://am.example:9093/prefix/");
        assert_eq!(t[1].post_url, "http://127.0.0.1:9/hook?x=1");
    }
}
