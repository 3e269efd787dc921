//! Range reads through a server: `GET /v1/events`.
//!
//! [`HttpReader::events`] sends `from`, `to`, `format` and the [`Selection`] as query
//! parameters. For NDJSON the answer is read line by line ([`NdjsonEvents`]): each line is an
//! event, except the server's last line `{"_sluice":{"warnings":[{"key":…,"reason":…},…]}}`
//! which becomes one [`HttpItem::Warning`] per chunk it could not read (an unparsable warnings
//! line becomes one warning with key `_sluice` and the line as reason: never dropped), and one
//! [`HttpItem::Hint`] per entry of its `"hints"` (advice: a type or field never seen…), and one
//! [`HttpItem::Notice`] per entry of its `"notices"` (substream results the server computed from
//! the full blob: nothing lost). For
//! Sereal the body is handed over as it is ([`EventStream::Sereal`]).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};

use sluice_reader::{OutputFormat, ReadWarning, Selection};

use crate::{base_url, http_error, ClientError, HttpOptions, Result};

/// A server's read API.
#[derive(Clone)]
pub struct HttpReader {
    base: String,
    agent: ureq::Agent,
    no_columns: bool,
}

/// What an NDJSON range read yields.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpItem {
    /// One event as a JSON line (without the newline).
    Event(String),
    /// A chunk the server could not read (skipped).
    Warning(ReadWarning),
    /// Advice about the read (`sluice_reader::hints`), e.g. a field never seen.
    Hint(String),
    /// Something the server did that loses nothing (a substream fallback).
    Notice(ReadWarning),
}

/// The answer of [`HttpReader::events`].
pub enum EventStream {
    /// NDJSON, parsed into events and warnings.
    Ndjson(NdjsonEvents),
    /// Sereal documents, one per event, as the server sends them.
    Sereal(Box<dyn Read + Send + Sync>),
}

/// The events and warnings of an NDJSON answer, in order.
pub struct NdjsonEvents {
    url: String,
    lines: std::io::Lines<BufReader<Box<dyn Read + Send + Sync>>>,
    warnings: VecDeque<HttpItem>,
}

impl HttpReader {
    /// A reader of `server` (`http://HOST:PORT`, `https://HOST:PORT` or `HOST:PORT`), with the
    /// token and TLS trust of `opts.client`.
    pub fn new(server: &str, opts: &HttpOptions) -> Result<HttpReader> {
        Ok(HttpReader {
            base: base_url(server)?,
            agent: opts.agent()?,
            no_columns: opts.no_columns,
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Reads the events of `from <= epoch < to` that `selection` picks.
    pub fn events(
        &self,
        from: i64,
        to: i64,
        selection: &Selection,
        format: OutputFormat,
    ) -> Result<EventStream> {
        let url = format!("{}/v1/events", self.base);
        // A server writes the wire formats only; a human format is rendered from NDJSON here.
        let format = format.wire();
        let format_name = format.name();
        let mut req = self
            .agent
            .get(&url)
            .query("from", &from.to_string())
            .query("to", &to.to_string())
            .query("format", format_name)
            // This client reads the trailer line, so it can take hints.
            .query("hints", "1");
        for (k, v) in selection.query_pairs() {
            req = req.query(k, &v);
        }
        if self.no_columns {
            req = req.query("columns", "off");
        }
        let resp = req.call().map_err(|e| http_error(&url, e))?;
        let body = resp.into_reader();
        Ok(match format {
            OutputFormat::Sereal => EventStream::Sereal(body),
            _ => EventStream::Ndjson(NdjsonEvents {
                url,
                lines: BufReader::new(body).lines(),
                warnings: VecDeque::new(),
            }),
        })
    }
}

impl HttpReader {
    /// `GET /v1/counts` of `from <= epoch < to` (one dc or all): the NDJSON body, one line per
    /// (epoch, dc, type, subtype).
    pub fn counts(&self, from: i64, to: i64, dc: Option<&str>) -> Result<String> {
        let url = format!("{}/v1/counts", self.base);
        let mut req = self
            .agent
            .get(&url)
            .query("from", &from.to_string())
            .query("to", &to.to_string());
        if let Some(dc) = dc {
            req = req.query("dc", dc);
        }
        let resp = req.call().map_err(|e| http_error(&url, e))?;
        resp.into_string().map_err(|e| ClientError::Transport {
            url: url.clone(),
            message: format!("reading the answer: {e}"),
        })
    }
}

/// The warnings and hints of a `{"_sluice":{"warnings":[…],"hints":[…]}}` line, or `None` if
/// `line` is an event.
fn trailer_warnings(line: &str) -> Option<Vec<HttpItem>> {
    if !line.starts_with("{\"_sluice\"") {
        return None;
    }
    let parsed: Option<Vec<HttpItem>> = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| {
            let hints = v["_sluice"]["hints"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let notices = v["_sluice"]["notices"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            v["_sluice"]["warnings"].as_array().map(|ws| {
                ws.iter()
                    .map(|w| {
                        HttpItem::Warning(ReadWarning {
                            key: w["key"].as_str().unwrap_or("?").to_owned(),
                            reason: w["reason"]
                                .as_str()
                                .map_or_else(|| w["reason"].to_string(), str::to_owned),
                        })
                    })
                    .chain(hints.iter().map(|h| {
                        HttpItem::Hint(h.as_str().map_or_else(|| h.to_string(), str::to_owned))
                    }))
                    .chain(notices.iter().map(|n| {
                        HttpItem::Notice(ReadWarning {
                            key: n["key"].as_str().unwrap_or("?").to_owned(),
                            reason: n["reason"]
                                .as_str()
                                .map_or_else(|| n["reason"].to_string(), str::to_owned),
                        })
                    }))
                    .collect()
            })
        });
    Some(parsed.unwrap_or_else(|| {
        vec![HttpItem::Warning(ReadWarning {
            key: "_sluice".into(),
            reason: line.to_owned(),
        })]
    }))
}

impl Iterator for NdjsonEvents {
    type Item = Result<HttpItem>;

    fn next(&mut self) -> Option<Result<HttpItem>> {
        loop {
            if let Some(w) = self.warnings.pop_front() {
                return Some(Ok(w));
            }
            let line = match self.lines.next()? {
                Ok(line) => line,
                Err(e) => {
                    return Some(Err(ClientError::Transport {
                        url: self.url.clone(),
                        message: format!("reading the answer: {e}"),
                    }))
                }
            };
            match trailer_warnings(&line) {
                Some(ws) => self.warnings.extend(ws),
                None if line.is_empty() => {}
                None => return Some(Ok(HttpItem::Event(line))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_lines() {
        assert_eq!(trailer_warnings("{\"id\":1}"), None);
        let ws = trailer_warnings(
            r#"{"_sluice":{"warnings":[{"key":"1:a:B::0","reason":"bad"},{"key":"k","reason":"r"}]}}"#,
        );
        assert_eq!(ws.map(|w| w.len()), Some(2));
        let junk = trailer_warnings("{\"_sluice\": nope").unwrap();
        assert!(matches!(&junk[0], HttpItem::Warning(w) if w.key == "_sluice"));
        let hinted =
            trailer_warnings(r#"{"_sluice":{"warnings":[],"hints":["field `x` never seen"]}}"#);
        assert_eq!(
            hinted,
            Some(vec![HttpItem::Hint("field `x` never seen".into())])
        );
    }
}
