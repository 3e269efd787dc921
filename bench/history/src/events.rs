//! The events both servers get, generated once by `sluice gen` (NDJSON), cut into the batches
//! the client posts, and what the four queries must answer, computed from the events
//! themselves: the expected answers are how the bench checks both servers, not only each
//! against the other.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::error::{BenchError, Result};

/// How the events are generated.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// Number of events.
    pub count: usize,
    /// `sluice gen --seed`.
    pub seed: u64,
    /// Events per second of event time (`sluice gen --rate`).
    pub rate: usize,
    /// Epoch of the first event (`sluice gen --epoch`).
    pub epoch: i64,
    /// Events per POST.
    pub batch: usize,
}

/// The generated events and the answers they imply.
#[derive(Debug)]
pub struct Events {
    /// The NDJSON batches, each `batch` events (the last one fewer).
    pub batches: Vec<Vec<u8>>,
    /// Number of events.
    pub count: usize,
    /// Bytes of NDJSON.
    pub bytes: usize,
    /// The first epoch.
    pub first: i64,
    /// One past the last epoch (the exclusive end of the range read).
    pub end: i64,
    /// The `request_id` (empty when absent) of every event with `status >= 500`, sorted.
    pub error_ids: Vec<String>,
    /// A `request_id` carried by exactly one event.
    pub needle: String,
    /// The second read whole by the one-second query.
    pub second: i64,
    /// Events in that second.
    pub second_rows: usize,
    /// Events per status (the status as text; empty for events without one).
    pub by_status: BTreeMap<String, u64>,
}

/// Runs `sluice gen` and reads its events.
pub fn generate(sluice: &Path, spec: &GenSpec) -> Result<Events> {
    let out = Command::new(sluice)
        .args([
            "gen",
            "--count",
            &spec.count.to_string(),
            "--seed",
            &spec.seed.to_string(),
            "--rate",
            &spec.rate.to_string(),
            "--epoch",
            &spec.epoch.to_string(),
        ])
        .output()
        .map_err(|e| BenchError::Program {
            program: format!("{} gen", sluice.display()),
            detail: format!("could not start: {e}"),
        })?;
    if !out.status.success() {
        return Err(BenchError::Program {
            program: format!("{} gen", sluice.display()),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            ),
        });
    }
    from_ndjson(&out.stdout, spec.batch.max(1))
}

/// The text a value compares as in both servers' answers: a string as itself, a number as its
/// JSON text, nothing (absent, null) as the empty string.
pub fn key_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The number a status compares as (`status >= 500`): a number, or a string that reads as one.
fn as_number(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Reads NDJSON events into batches of `batch` and the expected answers.
pub fn from_ndjson(ndjson: &[u8], batch: usize) -> Result<Events> {
    let lines: Vec<&[u8]> = ndjson
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(BenchError::parse("sluice gen output", "no events"));
    }
    let mut epochs = Vec::with_capacity(lines.len());
    let mut error_ids = Vec::new();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut id_at: Vec<Option<String>> = Vec::with_capacity(lines.len());
    let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let event: Value = serde_json::from_slice(line)
            .map_err(|e| BenchError::parse(format!("event {i} of sluice gen"), e))?;
        let epoch = event
            .get("epoch")
            .and_then(Value::as_i64)
            .ok_or_else(|| BenchError::parse(format!("event {i} of sluice gen"), "no epoch"))?;
        epochs.push(epoch);
        let status = event.get("status");
        *by_status.entry(key_text(status)).or_default() += 1;
        let id = event
            .get("request_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if as_number(status).is_some_and(|s| s >= 500.0) {
            error_ids.push(id.clone().unwrap_or_default());
        }
        if let Some(id) = &id {
            *ids.entry(id.clone()).or_default() += 1;
        }
        id_at.push(id);
    }
    error_ids.sort_unstable();
    let middle = lines.len() / 2;
    // The first request id from the middle on that no other event carries.
    let needle = id_at[middle..]
        .iter()
        .chain(id_at[..middle].iter())
        .flatten()
        .find(|id| ids.get(*id) == Some(&1))
        .cloned()
        .ok_or_else(|| BenchError::parse("sluice gen output", "no unique request_id"))?;
    let second = epochs[middle];
    let second_rows = epochs.iter().filter(|e| **e == second).count();
    let first = epochs.iter().copied().min().unwrap_or(second);
    let end = epochs.iter().copied().max().unwrap_or(second) + 1;
    let batches = lines
        .chunks(batch)
        .map(|chunk| {
            let mut b = Vec::with_capacity(chunk.iter().map(|l| l.len() + 1).sum());
            for l in chunk {
                b.extend_from_slice(l);
                b.push(b'\n');
            }
            b
        })
        .collect();
    Ok(Events {
        batches,
        count: lines.len(),
        bytes: ndjson.len(),
        first,
        end,
        error_ids,
        needle,
        second,
        second_rows,
        by_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NDJSON: &str = r#"{"epoch":100,"status":200,"request_id":"a"}
{"epoch":100,"status":503,"request_id":"b"}
{"epoch":101,"status":"500"}
{"epoch":101,"request_id":"c"}
{"epoch":101,"status":404,"request_id":"c"}
{"epoch":102,"status":200,"request_id":"d"}
"#;

    #[test]
    fn expectations_come_from_the_events() {
        let ev = from_ndjson(NDJSON.as_bytes(), 4).unwrap();
        assert_eq!(ev.count, 6);
        assert_eq!((ev.first, ev.end), (100, 103));
        // A string status that reads as a number counts; an event without request_id gives "".
        assert_eq!(ev.error_ids, vec!["".to_owned(), "b".to_owned()]);
        // The middle event (index 3) carries "c", which is not unique: the next unique one wins.
        assert_eq!(ev.needle, "d");
        assert_eq!((ev.second, ev.second_rows), (101, 3));
        let statuses: Vec<(&str, u64)> =
            ev.by_status.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            statuses,
            vec![("", 1), ("200", 2), ("404", 1), ("500", 1), ("503", 1)]
        );
        assert_eq!(ev.batches.len(), 2);
        assert_eq!(ev.batches[1], b"{\"epoch\":101,\"status\":404,\"request_id\":\"c\"}\n{\"epoch\":102,\"status\":200,\"request_id\":\"d\"}\n");
    }

    #[test]
    fn events_without_epoch_or_json_are_errors() {
        assert!(from_ndjson(b"{\"status\":200}\n", 10).is_err());
        assert!(from_ndjson(b"not json\n", 10).is_err());
        assert!(from_ndjson(b"", 10).is_err());
    }
}
