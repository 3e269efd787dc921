//! The four history queries, as LogsQL for VictoriaLogs and as `GET /v1/events` parameters for
//! Sluice, and the check of every answer against what the events imply (not only one server's
//! answer against the other's): a wrong answer is measured anyway and reported as MISMATCH.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{BenchError, Result};
use crate::events::{key_text, Events};

/// One of the history queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// `status >= 500`, two fields of each match.
    Errors,
    /// `request_id == X`: one event.
    Needle,
    /// Events per status.
    CountByStatus,
    /// One second, every field of every event.
    OneSecond,
}

impl Query {
    /// Every query, in the table's order.
    pub const ALL: [Query; 4] = [
        Query::Errors,
        Query::Needle,
        Query::CountByStatus,
        Query::OneSecond,
    ];

    /// The table row's name.
    pub fn label(self) -> &'static str {
        match self {
            Query::Errors => "`status >= 500`, 2 fields",
            Query::Needle => "`request_id == X` (1 row)",
            Query::CountByStatus => "count by status",
            Query::OneSecond => "one second, every field",
        }
    }

    /// The LogsQL query (docs/victorialogs/logsql.md of VictoriaLogs v1.52.1).
    pub fn logsql(self, ev: &Events) -> String {
        match self {
            Query::Errors => "status:>=500 | fields request_id, status".to_owned(),
            Query::Needle => format!("request_id:={}", logsql_string(&ev.needle)),
            Query::CountByStatus => "* | stats by (status) count() as count".to_owned(),
            Query::OneSecond => {
                format!("_time:[{}, {})", rfc3339(ev.second), rfc3339(ev.second + 1))
            }
        }
    }

    /// The parameters of Sluice's `GET /v1/events` (docs/query.md), besides `columns=off`.
    pub fn sluice_params(self, ev: &Events) -> Vec<(String, String)> {
        let range = |from: i64, to: i64| {
            vec![
                ("from".to_owned(), from.to_string()),
                ("to".to_owned(), to.to_string()),
            ]
        };
        let mut params = match self {
            Query::OneSecond => range(ev.second, ev.second + 1),
            _ => range(ev.first, ev.end),
        };
        match self {
            Query::Errors => {
                params.push(("where".to_owned(), "status >= 500".to_owned()));
                // One `select` per path: the HTTP parameter does not split on commas.
                params.push(("select".to_owned(), "request_id".to_owned()));
                params.push(("select".to_owned(), "status".to_owned()));
            }
            Query::Needle => params.push((
                "where".to_owned(),
                format!("request_id == {}", sluice_string(&ev.needle)),
            )),
            Query::CountByStatus => params.push(("count_by".to_owned(), "status".to_owned())),
            Query::OneSecond => {}
        }
        params
    }

    /// Checks an answer's rows against the events: `Ok(detail)` when right, `Err(detail)`
    /// (what differs) when not.
    pub fn check(self, ev: &Events, rows: &[Value]) -> std::result::Result<String, String> {
        match self {
            Query::Errors => {
                let mut ids: Vec<String> =
                    rows.iter().map(|r| key_text(r.get("request_id"))).collect();
                ids.sort_unstable();
                if ids == ev.error_ids {
                    Ok(format!("{} rows", rows.len()))
                } else {
                    Err(format!(
                        "{} rows, expected {} (request ids differ)",
                        rows.len(),
                        ev.error_ids.len()
                    ))
                }
            }
            Query::Needle => {
                let right = rows.len() == 1
                    && rows
                        .iter()
                        .all(|r| key_text(r.get("request_id")) == ev.needle);
                if right {
                    Ok("1 row".to_owned())
                } else {
                    Err(format!(
                        "{} rows, expected the 1 with that request_id",
                        rows.len()
                    ))
                }
            }
            Query::CountByStatus => {
                let mut counts: BTreeMap<String, u64> = BTreeMap::new();
                for r in rows {
                    let n = match r.get("count") {
                        Some(Value::Number(n)) => n.as_u64(),
                        Some(Value::String(s)) => s.parse().ok(),
                        _ => None,
                    };
                    let Some(n) = n else {
                        return Err(format!("a row without a count: {r}"));
                    };
                    *counts.entry(key_text(r.get("status"))).or_default() += n;
                }
                if counts == ev.by_status {
                    Ok(format!("{} rows", rows.len()))
                } else {
                    Err(format!(
                        "{} rows, expected {} (counts differ)",
                        rows.len(),
                        ev.by_status.len()
                    ))
                }
            }
            Query::OneSecond => {
                if rows.len() == ev.second_rows {
                    Ok(format!("{} rows", rows.len()))
                } else {
                    Err(format!("{} rows, expected {}", rows.len(), ev.second_rows))
                }
            }
        }
    }
}

/// A LogsQL string literal.
fn logsql_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// A string literal of Sluice's `where` language (double-quoted, `\"` and `\\` escaped).
fn sluice_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `2026-11-28T19:00:00Z` for a Unix second.
pub fn rfc3339(unix: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix.max(0).unsigned_abs());
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A server's answer: its rows, and Sluice's trailer line (`{"_sluice":…}`: warnings) if any.
#[derive(Debug, Default)]
pub struct Answer {
    /// One JSON object per NDJSON line.
    pub rows: Vec<Value>,
    /// Sluice's `_sluice` line, when there was one.
    pub trailer: Option<Value>,
}

/// Parses an NDJSON answer; a `{"_sluice":…}` line is the trailer, not a row.
pub fn parse_ndjson(what: &str, body: &[u8]) -> Result<Answer> {
    let mut answer = Answer::default();
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: Value = serde_json::from_slice(line)
            .map_err(|e| BenchError::parse(format!("{what}: answer line {}", i + 1), e))?;
        match v.get("_sluice") {
            Some(trailer) => answer.trailer = Some(trailer.clone()),
            None => answer.rows.push(v),
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::from_ndjson;

    fn events() -> Events {
        from_ndjson(
            br#"{"epoch":100,"status":200,"request_id":"a"}
{"epoch":100,"status":503,"request_id":"b"}
{"epoch":101,"status":500}
{"epoch":101,"status":200,"request_id":"q\"x"}
"#,
            10,
        )
        .unwrap()
    }

    #[test]
    fn queries_name_the_same_events_in_both_languages() {
        let ev = events();
        assert_eq!(ev.needle, "q\"x");
        assert_eq!(Query::Needle.logsql(&ev), r#"request_id:="q\"x""#);
        let p = Query::Needle.sluice_params(&ev);
        assert!(p.contains(&("where".to_owned(), r#"request_id == "q\"x""#.to_owned())));
        assert!(p.contains(&("from".to_owned(), "100".to_owned())));
        assert!(p.contains(&("to".to_owned(), "102".to_owned())));
        assert_eq!(
            Query::OneSecond.logsql(&ev),
            "_time:[1970-01-01T00:01:41Z, 1970-01-01T00:01:42Z)"
        );
        let p = Query::Errors.sluice_params(&ev);
        let selects: Vec<&str> = p
            .iter()
            .filter(|(k, _)| k == "select")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(selects, ["request_id", "status"]);
        let p = Query::OneSecond.sluice_params(&ev);
        assert_eq!(p[0], ("from".to_owned(), "101".to_owned()));
        assert_eq!(p[1], ("to".to_owned(), "102".to_owned()));
    }

    #[test]
    fn checks_accept_both_servers_shapes_and_catch_wrong_answers() {
        let ev = events();
        // VictoriaLogs gives strings and "" for a missing field; Sluice numbers and null.
        let vl = parse_ndjson(
            "vl",
            br#"{"request_id":"b","status":"503"}
{"request_id":"","status":"500"}
"#,
        )
        .unwrap();
        let sl = parse_ndjson(
            "sluice",
            br#"{"request_id":null,"status":500}
{"request_id":"b","status":503}
{"_sluice":{"warnings":["w"]}}
"#,
        )
        .unwrap();
        assert!(Query::Errors.check(&ev, &vl.rows).is_ok());
        assert!(Query::Errors.check(&ev, &sl.rows).is_ok());
        assert!(sl.trailer.is_some());
        assert!(Query::Errors.check(&ev, &sl.rows[..1]).is_err());

        let counts = parse_ndjson(
            "vl",
            br#"{"status":"200","count":"2"}
{"status":"503","count":"1"}
{"status":"500","count":"1"}
"#,
        )
        .unwrap();
        assert!(Query::CountByStatus.check(&ev, &counts.rows).is_ok());
        assert!(Query::CountByStatus.check(&ev, &counts.rows[..2]).is_err());

        assert!(Query::OneSecond.check(&ev, &counts.rows[..2]).is_ok());
        assert!(Query::OneSecond.check(&ev, &counts.rows).is_err());
        assert!(Query::Needle.check(&ev, &[]).is_err());
        assert!(parse_ndjson("x", b"{\"a\":1}\nnot json\n").is_err());
    }
}
