//! The OTLP/JSON encoding of the messages in [`super::proto`] (the protobuf JSON mapping with
//! OTLP's exceptions): keys in lowerCamelCase (the proto field names are taken too), trace and
//! span ids as hex strings (not base64), `bytesValue` in base64, 64-bit integers as strings or
//! numbers, `severityNumber` as an integer (or the enum's name), `null` for a default value and
//! unknown keys ignored. Anything else is a decoding error: the request is unreadable (400).

use base64::Engine as _;
use serde::de::{self, Deserializer, Error as _};
use serde::Deserialize;

use super::proto::{AnyValue, ArrayValue, KeyValueList, Value};

/// A field that may be `null` (the JSON mapping's default value).
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A number or a decimal string (how the JSON mapping writes 64-bit integers).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Int(i64),
    UInt(u64),
    Float(f64),
    Text(String),
}

fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
    match Option::<NumOrText>::deserialize(d)? {
        None => Ok(None),
        Some(NumOrText::Int(i)) => Ok(Some(i.into())),
        Some(NumOrText::UInt(u)) => Ok(Some(u.into())),
        // `1.0e9` is an integer written as a float: taken when it is whole.
        Some(NumOrText::Float(f)) if f.fract() == 0.0 && f.abs() < 1e38 => Ok(Some(f as i128)),
        Some(NumOrText::Float(f)) => Err(D::Error::custom(format!("{f} is not an integer"))),
        Some(NumOrText::Text(s)) => s
            .trim()
            .parse::<i128>()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("{s:?} is not an integer"))),
    }
}

fn ranged<'de, D: Deserializer<'de>, T: TryFrom<i128> + Default>(d: D) -> Result<T, D::Error> {
    match integer(d)? {
        None => Ok(T::default()),
        Some(i) => T::try_from(i).map_err(|_| D::Error::custom(format!("{i} is out of range"))),
    }
}

/// A `fixed64` / `uint64`: a number or a string.
pub(crate) fn de_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    ranged(d)
}

/// A `fixed32` / `uint32`.
pub(crate) fn de_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d)
}

/// `severityNumber`: an integer, or the enum's name (`SEVERITY_NUMBER_WARN`).
pub(crate) fn de_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrName {
        Int(i64),
        Name(String),
    }
    match Option::<NumOrName>::deserialize(d)? {
        None => Ok(0),
        Some(NumOrName::Int(i)) => {
            i32::try_from(i).map_err(|_| D::Error::custom(format!("{i} is out of range")))
        }
        Some(NumOrName::Name(s)) => severity_from_name(&s)
            .or_else(|| s.trim().parse().ok())
            .ok_or_else(|| D::Error::custom(format!("unknown severity number {s:?}"))),
    }
}

/// The number of a `SeverityNumber` name.
fn severity_from_name(name: &str) -> Option<i32> {
    const LEVELS: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];
    let rest = name.strip_prefix("SEVERITY_NUMBER_")?;
    if rest == "UNSPECIFIED" {
        return Some(0);
    }
    let (level, n) = match rest.char_indices().find(|(_, c)| c.is_ascii_digit()) {
        Some((i, _)) => (&rest[..i], rest[i..].parse::<i32>().ok()?),
        None => (rest, 1),
    };
    let base = LEVELS.iter().position(|l| *l == level)? as i32;
    (1..=4).contains(&n).then_some(base * 4 + n)
}

/// `traceId` / `spanId`: hex (OTLP/JSON's exception to the base64 of `bytes`); empty: none.
pub(crate) fn de_hex<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s: String = nullable(d)?;
    hex::decode(s.trim()).map_err(|e| D::Error::custom(format!("bad hex id {s:?}: {e}")))
}

/// An `AnyValue` in JSON: an object with at most one of `stringValue`, `boolValue`, `intValue`,
/// `doubleValue` (a number or `"NaN"`, `"Infinity"`, `"-Infinity"`), `arrayValue`,
/// `kvlistValue`, `bytesValue` (base64); `{}` is an empty value.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct AnyValueJson {
    #[serde(alias = "string_value")]
    string_value: Option<String>,
    #[serde(alias = "bool_value")]
    bool_value: Option<bool>,
    #[serde(alias = "int_value", deserialize_with = "integer")]
    int_value: Option<i128>,
    #[serde(alias = "double_value", deserialize_with = "double")]
    double_value: Option<f64>,
    #[serde(alias = "array_value")]
    array_value: Option<ArrayValue>,
    #[serde(alias = "kvlist_value")]
    kvlist_value: Option<KeyValueList>,
    #[serde(alias = "bytes_value")]
    bytes_value: Option<String>,
}

fn double<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<NumOrText>::deserialize(d)? {
        None => Ok(None),
        Some(NumOrText::Int(i)) => Ok(Some(i as f64)),
        Some(NumOrText::UInt(u)) => Ok(Some(u as f64)),
        Some(NumOrText::Float(f)) => Ok(Some(f)),
        Some(NumOrText::Text(s)) => match s.as_str() {
            "NaN" => Ok(Some(f64::NAN)),
            "Infinity" => Ok(Some(f64::INFINITY)),
            "-Infinity" => Ok(Some(f64::NEG_INFINITY)),
            _ => s
                .parse()
                .map(Some)
                .map_err(|_| D::Error::custom(format!("{s:?} is not a number"))),
        },
    }
}

impl<'de> Deserialize<'de> for AnyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyValue, D::Error> {
        let Some(j) = Option::<AnyValueJson>::deserialize(d)? else {
            return Ok(AnyValue::default());
        };
        let mut set: Vec<Value> = Vec::with_capacity(1);
        if let Some(s) = j.string_value {
            set.push(Value::String(s));
        }
        if let Some(b) = j.bool_value {
            set.push(Value::Bool(b));
        }
        if let Some(i) = j.int_value {
            let i = i64::try_from(i)
                .map_err(|_| D::Error::custom(format!("intValue {i} is out of range")))?;
            set.push(Value::Int(i));
        }
        if let Some(f) = j.double_value {
            set.push(Value::Double(f));
        }
        if let Some(a) = j.array_value {
            set.push(Value::Array(a));
        }
        if let Some(kv) = j.kvlist_value {
            set.push(Value::Kvlist(kv));
        }
        if let Some(b) = j.bytes_value {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map_err(|e| D::Error::custom(format!("bytesValue is not base64: {e}")))?;
            set.push(Value::Bytes(bytes));
        }
        if set.len() > 1 {
            return Err(de::Error::custom("an AnyValue holds more than one value"));
        }
        Ok(AnyValue { value: set.pop() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::proto::ExportLogsServiceRequest;

    #[test]
    fn severity_names() {
        assert_eq!(severity_from_name("SEVERITY_NUMBER_TRACE"), Some(1));
        assert_eq!(severity_from_name("SEVERITY_NUMBER_INFO"), Some(9));
        assert_eq!(severity_from_name("SEVERITY_NUMBER_WARN3"), Some(15));
        assert_eq!(severity_from_name("SEVERITY_NUMBER_FATAL4"), Some(24));
        assert_eq!(severity_from_name("SEVERITY_NUMBER_FATAL5"), None);
        assert_eq!(severity_from_name("INFO"), None);
    }

    #[test]
    fn the_json_mapping() {
        let text = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},
          "scopeLogs":[{"scope":{"name":"s","version":null},"logRecords":[{"timeUnixNano":"1700000000123456789",
          "severityNumber":"SEVERITY_NUMBER_WARN","severity_text":"WARN","traceId":"5B8EFFF798038103D269B633813FC60C",
          "spanId":"eee19b7ec3c1b174","body":{"kvlistValue":{"values":[{"key":"n","value":{"intValue":"7"}},
          {"key":"d","value":{"doubleValue":"NaN"}},{"key":"b","value":{"bytesValue":"AAE="}}]}},"unknown":1}]}]}]}"#;
        let req: ExportLogsServiceRequest = serde_json::from_str(text).unwrap();
        let rec = &req.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(rec.time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(rec.severity_number, 13);
        assert_eq!(rec.severity_text, "WARN");
        assert_eq!(rec.trace_id.len(), 16);
        assert_eq!(rec.span_id, hex::decode("eee19b7ec3c1b174").unwrap());
        let Some(Value::Kvlist(kv)) = rec.body.as_ref().and_then(|b| b.value.clone()) else {
            panic!("body")
        };
        assert_eq!(
            kv.values[0].value.as_ref().unwrap().value,
            Some(Value::Int(7))
        );
        assert_eq!(
            kv.values[2].value.as_ref().unwrap().value,
            Some(Value::Bytes(vec![0, 1]))
        );
    }

    #[test]
    fn unreadable_json_is_an_error() {
        for bad in [
            r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"xyz"}]}]}]}"#,
            r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"soon"}]}]}]}"#,
            r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"a","intValue":1}}]}]}]}"#,
            r#"{"resourceLogs":{}}"#,
            "[1,",
        ] {
            assert!(
                serde_json::from_str::<ExportLogsServiceRequest>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
