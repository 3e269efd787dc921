//! JSON text straight to [`sereal::Value`], without an intermediate `serde_json::Value`, with a
//! key interner kept across payloads (equal keys share one [`Key`] allocation, as the decoder's
//! keys do) and a nesting bound checked while parsing.
//!
//! The result is the same value [`sereal::json::from_json_slice`] gives (same number kinds,
//! keys in document order), except that duplicate keys are kept as they appear.

use std::fmt;

use rustc_hash::FxHashMap;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use sereal::{Key, Value};

/// Interned keys beyond this many are forgotten (the map is cleared), so that hostile payloads
/// full of random keys cannot grow it without bound. Already handed-out keys stay valid.
const MAX_INTERNED: usize = 16 * 1024;

/// Longest key that is interned; longer keys are allocated each time.
const MAX_INTERNED_KEY: usize = 64;

/// A key interner.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    keys: FxHashMap<Box<str>, Key>,
}

impl Interner {
    pub(crate) fn key(&mut self, s: &str) -> Key {
        if s.len() > MAX_INTERNED_KEY {
            return Key::from(s);
        }
        if let Some(k) = self.keys.get(s) {
            return k.clone();
        }
        if self.keys.len() >= MAX_INTERNED {
            self.keys.clear();
        }
        let k = Key::from(s);
        self.keys.insert(s.into(), k.clone());
        k
    }
}

/// What a parse failed on.
#[derive(Debug)]
pub(crate) enum ParseError {
    /// Nesting deeper than the bound (ours or the parser's own recursion limit).
    TooDeep(String),
    /// Not valid JSON.
    Syntax(String),
}

struct State<'i> {
    interner: &'i mut Interner,
    depth: usize,
    max_depth: usize,
    too_deep: bool,
}

/// Parse one complete JSON text (a whole NDJSON line or a raw array element) into a value.
/// Containers nested deeper than `max_depth` (the top level counts as 1) fail with `TooDeep`.
pub(crate) fn parse_value(text: &str, interner: &mut Interner, max_depth: usize) -> Result<Value, ParseError> {
    let mut state = State { interner, depth: 0, max_depth, too_deep: false };
    let mut de = serde_json::Deserializer::from_str(text);
    let res = ValueSeed(&mut state).deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    res.map_err(|e| classify(e, state.too_deep))
}

/// Split a JSON array text into its raw elements (syntax fully checked, nothing built).
pub(crate) fn split_array(text: &str) -> Result<Vec<&serde_json::value::RawValue>, ParseError> {
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text).map_err(|e| classify(e, false))
}

fn classify(e: serde_json::Error, too_deep: bool) -> ParseError {
    let msg = e.to_string();
    if too_deep || msg.starts_with("recursion limit exceeded") {
        ParseError::TooDeep(msg)
    } else {
        ParseError::Syntax(msg)
    }
}

struct ValueSeed<'s, 'i>(&'s mut State<'i>);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl ValueSeed<'_, '_> {
    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        self.0.depth += 1;
        if self.0.depth > self.0.max_depth {
            self.0.too_deep = true;
            return Err(E::custom(format_args!("nesting deeper than {}", self.0.max_depth)));
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::UInt(v),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Undef)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Undef)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element_seed(ValueSeed(&mut *self.0))? {
            items.push(v);
        }
        self.0.depth -= 1;
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(k) = map.next_key_seed(KeySeed(&mut *self.0.interner))? {
            let v = map.next_value_seed(ValueSeed(&mut *self.0))?;
            entries.push((k, v));
        }
        self.0.depth -= 1;
        Ok(Value::Hash(entries))
    }
}

struct KeySeed<'i>(&'i mut Interner);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(self.0.key(v))
    }
}
