//! Prometheus remote write (protocol 1.0): rows → `WriteRequest` protobuf → snappy block → HTTP
//! POST with `Content-Encoding: snappy`, `Content-Type: application/x-protobuf` and
//! `X-Prometheus-Remote-Write-Version: 0.1.0`, a connect and an overall deadline on every call.
//!
//! The four messages are written here with `prost`'s derive (no `protoc`, no build script), with
//! the field numbers of `prompb/remote.proto` and `prompb/types.proto`.
//!
//! Answers: 2xx acknowledged; 429 and 5xx (and any transport error) retryable; other 4xx rejected
//! (the receiver will never take this batch: retrying it would block the queue forever).

use std::collections::HashMap;
use std::time::Duration;

use prost::Message;
use sluice_rollups::RollupRow;

use crate::naming::{series_labels, timestamp_ms};
use crate::{Sink, SinkError};

/// `prometheus.WriteRequest` (field 2 reserved; metadata, field 3, not sent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// One entry per series.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: labels sorted by name, samples in time order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// The series' labels, `__name__` among them.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Its samples.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// Label name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Unix milliseconds.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The `WriteRequest` of `rows`: one series per (labels), its samples sorted by time (a series
/// spread over several rows of several steps becomes one entry). Aggregates without a value
/// give no sample. Series in the order of their first row.
pub fn write_request(rows: &[RollupRow]) -> WriteRequest {
    let mut index: HashMap<Vec<(String, String)>, usize> = HashMap::new();
    let mut out = WriteRequest::default();
    for row in rows {
        for (aggregate, value) in &row.values {
            let Some(value) = *value else { continue };
            let labels = series_labels(row, aggregate);
            let i = *index.entry(labels.clone()).or_insert_with(|| {
                out.timeseries.push(TimeSeries {
                    labels: labels
                        .into_iter()
                        .map(|(name, value)| Label { name, value })
                        .collect(),
                    samples: Vec::new(),
                });
                out.timeseries.len() - 1
            });
            out.timeseries[i].samples.push(Sample {
                value,
                timestamp: timestamp_ms(row),
            });
        }
    }
    for ts in &mut out.timeseries {
        ts.samples.sort_by_key(|s| s.timestamp);
    }
    out
}

/// The HTTP body: the protobuf of [`write_request`], snappy block-compressed.
pub fn encode(rows: &[RollupRow]) -> Vec<u8> {
    let proto = write_request(rows).encode_to_vec();
    snap::raw::Encoder::new()
        .compress_vec(&proto)
        .expect("snappy compresses any input under 4 GiB")
}

/// Sends batches to a remote-write URL.
pub struct RemoteWriteSink {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
}

impl RemoteWriteSink {
    /// A sink for `url` (`http(s)://host:port/api/v1/write`): connecting may take `connect`, a
    /// whole call (connect, send, answer) `timeout`. `headers` go on every request (e.g.
    /// `Authorization`).
    pub fn new(
        url: &str,
        connect: Duration,
        timeout: Duration,
        headers: Vec<(String, String)>,
    ) -> RemoteWriteSink {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(connect)
            .timeout(timeout)
            .user_agent(concat!("sluice-exports/", env!("CARGO_PKG_VERSION")))
            .build();
        RemoteWriteSink {
            agent,
            url: url.to_owned(),
            headers,
        }
    }
}

impl Sink for RemoteWriteSink {
    fn send(&mut self, rows: &[RollupRow]) -> Result<(), SinkError> {
        let body = encode(rows);
        let mut req = self
            .agent
            .post(&self.url)
            .set("Content-Encoding", "snappy")
            .set("Content-Type", "application/x-protobuf")
            .set("X-Prometheus-Remote-Write-Version", "0.1.0");
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        match req.send_bytes(&body) {
            Ok(_) => Ok(()),
            Err(ureq::Error::Status(code, resp)) => {
                let text: String = resp
                    .into_string()
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect();
                let msg = format!("{}: HTTP {code}: {}", self.url, text.trim());
                if code == 429 || code >= 500 {
                    Err(SinkError::Retry(msg))
                } else {
                    Err(SinkError::Reject(msg))
                }
            }
            Err(ureq::Error::Transport(t)) => Err(SinkError::Retry(format!("{}: {t}", self.url))),
        }
    }

    fn describe(&self) -> String {
        format!("remote write {}", self.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_merge_sorted_and_decode_back() {
        let row = |start: i64, v: Option<f64>| RollupRow {
            rollup: "web".into(),
            start,
            step: 10,
            group: vec![("status".into(), "200".into())],
            values: vec![("count".into(), Some(1.0)), ("max:ms".into(), v)],
        };
        let rows = vec![row(110, Some(2.0)), row(100, None), row(120, Some(4.0))];
        let body = encode(&rows);
        let proto = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let req = WriteRequest::decode(&proto[..]).unwrap();
        assert_eq!(req, write_request(&rows));
        assert_eq!(req.timeseries.len(), 2);
        let count = &req.timeseries[0];
        let names: Vec<(&str, &str)> = count
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("__name__", "sluice_web_count"),
                ("rollup", "web"),
                ("status", "200")
            ]
        );
        let times: Vec<i64> = count.samples.iter().map(|s| s.timestamp).collect();
        assert_eq!(times, [110_000, 120_000, 130_000]);
        let max: Vec<(f64, i64)> = req.timeseries[1]
            .samples
            .iter()
            .map(|s| (s.value, s.timestamp))
            .collect();
        assert_eq!(max, [(2.0, 120_000), (4.0, 130_000)]);
    }

    #[test]
    fn wire_bytes_of_one_sample() {
        // Hand-checked against the proto: WriteRequest{1: TimeSeries{1: Label{1:"a",2:"b"},
        // 2: Sample{1: 1.0 (fixed64), 2: 5 (varint)}}}.
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "a".into(),
                    value: "b".into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 5,
                }],
            }],
        };
        assert_eq!(
            req.encode_to_vec(),
            [
                0x0a, 0x15, 0x0a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'b', 0x12, 0x0b, 0x09, 0, 0,
                0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0x05
            ]
        );
    }
}
