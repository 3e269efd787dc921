//! The subset of opentelemetry-proto that `POST /v1/logs` reads and answers with, as `prost`
//! messages derived by hand (no `protoc`, no build script) with the field numbers of
//! `opentelemetry/proto/{collector/logs/v1/logs_service,logs/v1/logs,common/v1/common,
//! resource/v1/resource}.proto` and `google/rpc/status.proto`. Fields Sluice does not map are
//! left out: prost skips unknown fields, as protobuf readers must.
//!
//! The same structs read the OTLP/JSON encoding (`serde`, see [`super::json`] for the field
//! rules: lowerCamelCase or the proto names, hex ids, 64-bit integers as strings or numbers).

use serde::Deserialize;

use super::json::{de_hex, de_i32, de_u32, de_u64, nullable};

/// `ExportLogsServiceRequest`: what an exporter sends.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ExportLogsServiceRequest {
    /// Logs grouped by the resource that produced them.
    #[prost(message, repeated, tag = "1")]
    #[serde(alias = "resource_logs", deserialize_with = "nullable")]
    pub resource_logs: Vec<ResourceLogs>,
}

/// `ResourceLogs`: one resource and its logs, by instrumentation scope.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceLogs {
    /// The resource (its attributes: `service.name`, `deployment.environment`, …).
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// The logs, by scope.
    #[prost(message, repeated, tag = "2")]
    #[serde(alias = "scope_logs", deserialize_with = "nullable")]
    pub scope_logs: Vec<ScopeLogs>,
}

/// `Resource`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Resource {
    /// The resource attributes.
    #[prost(message, repeated, tag = "1")]
    #[serde(deserialize_with = "nullable")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeLogs`: the logs of one instrumentation scope.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ScopeLogs {
    /// The scope (logger name and version).
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// The log records.
    #[prost(message, repeated, tag = "2")]
    #[serde(alias = "log_records", deserialize_with = "nullable")]
    pub log_records: Vec<LogRecord>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InstrumentationScope {
    /// The scope's name (for Python's logging handler: the logger name).
    #[prost(string, tag = "1")]
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The scope's version.
    #[prost(string, tag = "2")]
    #[serde(deserialize_with = "nullable")]
    pub version: String,
}

/// `LogRecord`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LogRecord {
    /// When the event happened, Unix nanoseconds (0: unknown).
    #[prost(fixed64, tag = "1")]
    #[serde(alias = "time_unix_nano", deserialize_with = "de_u64")]
    pub time_unix_nano: u64,
    /// When the collection system saw it, Unix nanoseconds (0: unknown).
    #[prost(fixed64, tag = "11")]
    #[serde(alias = "observed_time_unix_nano", deserialize_with = "de_u64")]
    pub observed_time_unix_nano: u64,
    /// `SeverityNumber` (0 unspecified, 1-24 TRACE … FATAL4).
    #[prost(int32, tag = "2")]
    #[serde(alias = "severity_number", deserialize_with = "de_i32")]
    pub severity_number: i32,
    /// The severity as the source wrote it (`WARNING`, `info`, …).
    #[prost(string, tag = "3")]
    #[serde(alias = "severity_text", deserialize_with = "nullable")]
    pub severity_text: String,
    /// The body: a message, or a structured value.
    #[prost(message, optional, tag = "5")]
    pub body: Option<AnyValue>,
    /// The record's attributes.
    #[prost(message, repeated, tag = "6")]
    #[serde(deserialize_with = "nullable")]
    pub attributes: Vec<KeyValue>,
    /// W3C trace flags.
    #[prost(fixed32, tag = "8")]
    #[serde(deserialize_with = "de_u32")]
    pub flags: u32,
    /// Trace id: 16 bytes, or empty.
    #[prost(bytes = "vec", tag = "9")]
    #[serde(alias = "trace_id", deserialize_with = "de_hex")]
    pub trace_id: Vec<u8>,
    /// Span id: 8 bytes, or empty.
    #[prost(bytes = "vec", tag = "10")]
    #[serde(alias = "span_id", deserialize_with = "de_hex")]
    pub span_id: Vec<u8>,
    /// The event name (for log records that are events), or empty.
    #[prost(string, tag = "12")]
    #[serde(alias = "event_name", deserialize_with = "nullable")]
    pub event_name: String,
}

/// `KeyValue`: one attribute.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default)]
pub struct KeyValue {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    /// Its value (absent: an empty value).
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `AnyValue`: a string, bool, integer, double, array, key-value list or bytes (JSON: see
/// [`super::json`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    /// The value; `None`: empty.
    #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub value: Option<Value>,
}

/// The `value` oneof of [`AnyValue`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    /// `string_value`.
    #[prost(string, tag = "1")]
    String(String),
    /// `bool_value`.
    #[prost(bool, tag = "2")]
    Bool(bool),
    /// `int_value`.
    #[prost(int64, tag = "3")]
    Int(i64),
    /// `double_value`.
    #[prost(double, tag = "4")]
    Double(f64),
    /// `array_value`.
    #[prost(message, tag = "5")]
    Array(ArrayValue),
    /// `kvlist_value`.
    #[prost(message, tag = "6")]
    Kvlist(KeyValueList),
    /// `bytes_value`.
    #[prost(bytes = "vec", tag = "7")]
    Bytes(Vec<u8>),
}

/// `ArrayValue`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default)]
pub struct ArrayValue {
    /// The elements.
    #[prost(message, repeated, tag = "1")]
    #[serde(deserialize_with = "nullable")]
    pub values: Vec<AnyValue>,
}

/// `KeyValueList`: a map as a list (keys may repeat on the wire; the last one wins in the event).
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default)]
pub struct KeyValueList {
    /// The entries.
    #[prost(message, repeated, tag = "1")]
    #[serde(deserialize_with = "nullable")]
    pub values: Vec<KeyValue>,
}

/// `ExportLogsServiceResponse`: the 200 answer (empty when everything was accepted).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportLogsServiceResponse {
    /// Set when some records were rejected.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportLogsPartialSuccess>,
}

/// `ExportLogsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportLogsPartialSuccess {
    /// How many records were rejected (not to be retried).
    #[prost(int64, tag = "1")]
    pub rejected_log_records: i64,
    /// Why, in words.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// `google.rpc.Status`: the body of a 4xx / 5xx answer (its `details` are not sent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// A `google.rpc.Code` (3 `INVALID_ARGUMENT`, 8 `RESOURCE_EXHAUSTED`, 14 `UNAVAILABLE`, …).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// The error, in words.
    #[prost(string, tag = "2")]
    pub message: String,
}
