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

/// Slots of the interner's front cache (a power of two).
const RECENT: usize = 512;

/// A key interner.
#[derive(Debug)]
pub(crate) struct Interner {
    keys: FxHashMap<Box<str>, Key>,
    /// A small cache in front of `keys`, by length and first 8 bytes (two slots per hash):
    /// events repeat the same few dozen keys, and comparing a word and a length costs a
    /// fraction of hashing the whole key and probing the map. A collision only costs a miss.
    recent: Vec<Option<(u64, Key)>>,
    /// [`Fast`]'s stacks, kept between documents so that they do not grow again each time.
    stacks: Stacks,
}

/// Entries of the maps and elements of the arrays being parsed, innermost last; empty between
/// documents.
#[derive(Debug, Default)]
struct Stacks {
    entries: Vec<(Key, Value)>,
    items: Vec<Value>,
}

impl Default for Interner {
    fn default() -> Interner {
        Interner {
            keys: FxHashMap::default(),
            recent: vec![None; RECENT],
            stacks: Stacks::default(),
        }
    }
}

/// The first 8 bytes of `s` (zero-padded) and `s`'s length, mixed into one word, and the first
/// of the two cache slots it may be in.
#[inline]
fn recent_slot(s: &[u8]) -> (u64, usize) {
    let mut head = [0u8; 8];
    let n = s.len().min(8);
    head[..n].copy_from_slice(&s[..n]);
    let tag = u64::from_le_bytes(head) ^ (s.len() as u64).rotate_right(8);
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 32;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (tag, (x >> 32) as usize & (RECENT - 2))
}

/// `a == b` for the tails of keys (usually under 8 bytes) without a `memcmp` call.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && if a.len() <= 16 {
            a.iter().zip(b).all(|(x, y)| x == y)
        } else {
            a == b
        }
}

impl Interner {
    pub(crate) fn key(&mut self, s: &str) -> Key {
        if s.len() > MAX_INTERNED_KEY {
            return Key::from(s);
        }
        let b = s.as_bytes();
        let (tag, slot) = recent_slot(b);
        for i in [slot, slot + 1] {
            if let Some((t, k)) = &self.recent[i] {
                // Equal tags mean equal length and first 8 bytes.
                if *t == tag && (b.len() <= 8 || short_eq(&k.as_bytes()[8..], &b[8..])) {
                    return k.clone();
                }
            }
        }
        let k = self.lookup(s);
        // The older entry of the pair moves to the second slot.
        self.recent[slot + 1] = self.recent[slot].take();
        self.recent[slot] = Some((tag, k.clone()));
        k
    }

    fn lookup(&mut self, s: &str) -> Key {
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
///
/// Valid, ordinary JSON goes through [`Fast`]; anything it does not take (any error, a number
/// whose kind needs care, deep nesting) is parsed again by serde_json, which then decides: the
/// value, or the error and its message, are exactly serde_json's.
pub(crate) fn parse_value(
    text: &str,
    interner: &mut Interner,
    max_depth: usize,
) -> Result<Value, ParseError> {
    let limit = max_depth.min(FAST_MAX_DEPTH);
    let stacks = std::mem::take(&mut interner.stacks);
    let mut fast = Fast {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        interner: &mut *interner,
        max_depth: limit,
        stacks,
    };
    let v = fast.document();
    let mut stacks = fast.stacks;
    // A declined document may leave entries behind.
    stacks.entries.clear();
    stacks.items.clear();
    interner.stacks = stacks;
    if let Some(v) = v {
        return Ok(v);
    }
    parse_value_serde(text, interner, max_depth)
}

/// The slow, authoritative path: serde_json into a value.
fn parse_value_serde(
    text: &str,
    interner: &mut Interner,
    max_depth: usize,
) -> Result<Value, ParseError> {
    // serde_json (without `arbitrary_precision`) would turn an integer beyond 64 bits into a
    // float, silently changing it: keep it exactly, as a string of its digits (JSON::XS does the
    // same). docs/format.md states the rule.
    let quoted = quote_big_integers(text);
    let text = quoted.as_deref().unwrap_or(text);
    let mut state = State {
        interner,
        depth: 0,
        max_depth,
        too_deep: false,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let res = ValueSeed(&mut state)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    res.map_err(|e| classify(e, state.too_deep))
}

/// `text` with every integer literal that fits neither `i64` nor `u64` put in quotes, or `None`
/// when it has none. Only numbers outside strings are touched; the rest is copied as is.
fn quote_big_integers(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let token = &text[start..i];
                let digits = token.strip_prefix('-').unwrap_or(token);
                let integer = !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit());
                let canonical = integer && (digits == "0" || !digits.starts_with('0'));
                if canonical && token.parse::<i64>().is_err() && token.parse::<u64>().is_err() {
                    let o = out.get_or_insert_with(|| String::with_capacity(text.len() + 8));
                    o.push_str(&text[copied..start]);
                    o.push('"');
                    o.push_str(token);
                    o.push('"');
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    let mut o = out?;
    o.push_str(&text[copied..]);
    Some(o)
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
            return Err(E::custom(format_args!(
                "nesting deeper than {}",
                self.0.max_depth
            )));
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

/// Deepest nesting [`Fast`] follows itself (it recurses); deeper documents go to serde_json,
/// whose own recursion limit is 128.
const FAST_MAX_DEPTH: usize = 100;

/// A JSON parser for the common case: `None` means "not taken" (invalid, or valid but left to
/// serde_json), never a different answer. Strings are sliced from the text (already checked
/// UTF-8) and copied once; keys go through the interner without an allocation when known;
/// container entries are collected on shared stacks and moved into a vector of exact size.
struct Fast<'t, 'i> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
    interner: &'i mut Interner,
    max_depth: usize,
    stacks: Stacks,
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bit 7 of each byte of `x` that is a quote, a backslash or a control character (exact for the
/// lowest such byte, which is all the scanner uses).
#[inline]
fn specials(x: u64) -> u64 {
    let quote = x ^ (LO * b'"' as u64);
    let backslash = x ^ (LO * b'\\' as u64);
    let zero = |v: u64| v.wrapping_sub(LO) & !v & HI;
    zero(quote) | zero(backslash) | (x.wrapping_sub(LO * 0x20) & !x & HI)
}

impl<'t> Fast<'t, '_> {
    fn document(&mut self) -> Option<Value> {
        let v = self.value(0)?;
        self.skip_ws();
        (self.pos == self.bytes.len()).then_some(v)
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.pos += 1;
        }
    }

    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                self.pos += 1;
                let s = self.string()?;
                Some(Value::String(s.into_owned()))
            }
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Undef),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Option<Value> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(v)
        } else {
            None
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        if depth > self.max_depth {
            return None;
        }
        self.pos += 1;
        let base = self.stacks.entries.len();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(Value::Hash(Vec::new()));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.pos += 1;
            let key = match self.string()? {
                std::borrow::Cow::Borrowed(k) => self.interner.key(k),
                std::borrow::Cow::Owned(k) => self.interner.key(&k),
            };
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            let v = self.value(depth)?;
            self.stacks.entries.push((key, v));
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(Value::Hash(self.stacks.entries.drain(base..).collect()));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        if depth > self.max_depth {
            return None;
        }
        self.pos += 1;
        let base = self.stacks.items.len();
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(Value::Array(Vec::new()));
        }
        loop {
            let v = self.value(depth)?;
            self.stacks.items.push(v);
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(Value::Array(self.stacks.items.drain(base..).collect()));
                }
                _ => return None,
            }
        }
    }

    /// The rest of a string whose opening quote has been consumed.
    #[inline]
    fn string(&mut self) -> Option<std::borrow::Cow<'t, str>> {
        let start = self.pos;
        let end = self.scan(start)?;
        if self.bytes[end] == b'"' {
            self.pos = end + 1;
            // Quotes are ASCII, so both ends are character boundaries of the checked text.
            let text: &'t str = self.text;
            return Some(std::borrow::Cow::Borrowed(&text[start..end]));
        }
        self.escaped(start, end).map(std::borrow::Cow::Owned)
    }

    /// Index of the first quote, backslash or control character at or after `from`.
    #[inline]
    fn scan(&self, mut i: usize) -> Option<usize> {
        let b = self.bytes;
        while i + 8 <= b.len() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&b[i..i + 8]);
            let hits = specials(u64::from_le_bytes(word));
            if hits != 0 {
                return Some(i + (hits.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        while i < b.len() {
            if matches!(b[i], b'"' | b'\\' | 0..=0x1F) {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// A string with escapes: `start` is its first byte, `at` the first special byte.
    #[cold]
    fn escaped(&mut self, start: usize, mut at: usize) -> Option<String> {
        let b = self.bytes;
        let mut out = String::with_capacity(at - start + 16);
        out.push_str(&self.text[start..at]);
        loop {
            match b[at] {
                b'"' => {
                    self.pos = at + 1;
                    return Some(out);
                }
                b'\\' => {
                    let c = *b.get(at + 1)?;
                    at += 2;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = hex4(b.get(at..at + 4)?)?;
                            at += 4;
                            let c = if (0xD800..0xDC00).contains(&hi) {
                                // A surrogate pair; anything else is left to serde_json.
                                if b.get(at..at + 2)? != b"\\u" {
                                    return None;
                                }
                                let lo = hex4(b.get(at + 2..at + 6)?)?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return None;
                                }
                                at += 6;
                                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                            } else {
                                char::from_u32(hi)?
                            };
                            out.push(c);
                        }
                        _ => return None,
                    }
                }
                // A control character: invalid inside a string.
                _ => return None,
            }
            let next = self.scan(at)?;
            out.push_str(&self.text[at..next]);
            at = next;
        }
    }

    /// A number, as serde_json types it: integers of up to 18 digits here (`Int`), fractions and
    /// exponents as correctly rounded `f64`; longer integers and `-0` go to serde_json.
    fn number(&mut self) -> Option<Value> {
        let b = self.bytes;
        let start = self.pos;
        let mut i = start;
        let negative = b[i] == b'-';
        if negative {
            i += 1;
        }
        let digits = i;
        let mut n: u64 = 0;
        while let Some(&c @ b'0'..=b'9') = b.get(i) {
            n = n.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
            i += 1;
        }
        let int_len = i - digits;
        // One leading zero at most, and at least one digit.
        if int_len == 0 || (b[digits] == b'0' && int_len > 1) {
            return None;
        }
        let mut float = false;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let from = i;
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            if i == from {
                return None;
            }
            float = true;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let from = i;
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            if i == from {
                return None;
            }
            float = true;
        }
        self.pos = i;
        if float {
            let f: f64 = self.text[start..i].parse().ok()?;
            // serde_json refuses what overflows.
            return f.is_finite().then_some(Value::Float(f));
        }
        if int_len > 18 || (negative && n == 0) {
            return None;
        }
        let n = n as i64;
        Some(Value::Int(if negative { -n } else { n }))
    }
}

fn hex4(h: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in h {
        let d = (c as char).to_digit(16)?;
        v = v * 16 + d;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast parser either declines or agrees with serde_json, value for value (`Debug`
    /// tells `-0.0` from `0.0`), and never accepts what serde_json refuses.
    fn check(text: &str, max_depth: usize) -> bool {
        let mut a = Interner::default();
        let mut b = Interner::default();
        let limit = max_depth.min(FAST_MAX_DEPTH);
        let mut fast = Fast {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            interner: &mut a,
            max_depth: limit,
            stacks: Stacks::default(),
        };
        let got = fast.document();
        let want = parse_value_serde(text, &mut b, max_depth);
        match (&got, &want) {
            (Some(g), Ok(w)) => assert_eq!(format!("{g:?}"), format!("{w:?}"), "{text:?}"),
            (Some(g), Err(e)) => panic!("fast accepted {text:?} as {g:?}; serde_json: {e:?}"),
            (None, _) => {}
        }
        got.is_some()
    }

    #[test]
    fn agrees_with_serde_json() {
        let cases = [
            r#"{}"#,
            r#"[]"#,
            r#" { "a" : 1 , "b" : [ 1 , 2 ] } "#,
            r#"{"a":1,"a":2}"#,
            r#"{"s":"plain","e":"q\"b\\s\/n\nt\tr\rb\bf\f","u":"\u00e9\u4e2d\ud83d\ude00"}"#,
            r#"{"lone":"\ud800"}"#,
            r#"{"lone":"\udc00x"}"#,
            r#"{"bad":"\x"}"#,
            r#"{"bad":"\u12"}"#,
            "{\"ctl\":\"a\u{1}b\"}",
            "{\"tab\":\"a\tb\"}",
            "{\"del\":\"a\u{7f}b\"}",
            r#"{"naïve":"café ✓"}"#,
            r#"{"n":0}"#,
            r#"{"n":-0}"#,
            r#"{"n":-0.0}"#,
            r#"{"n":0.0}"#,
            r#"{"n":1.5}"#,
            r#"{"n":-1.5e-3}"#,
            r#"{"n":1e5}"#,
            r#"{"n":1E+5}"#,
            r#"{"n":1e-400}"#,
            r#"{"n":1e400}"#,
            r#"{"n":-1e400}"#,
            r#"{"n":123456789012345678}"#,
            r#"{"n":1234567890123456789}"#,
            r#"{"n":9223372036854775807}"#,
            r#"{"n":9223372036854775808}"#,
            r#"{"n":18446744073709551615}"#,
            r#"{"n":18446744073709551616}"#,
            r#"{"n":-9223372036854775808}"#,
            r#"{"n":-9223372036854775809}"#,
            r#"{"n":0.1}"#,
            r#"{"n":2.2250738585072014e-308}"#,
            r#"{"n":1.7976931348623157e308}"#,
            r#"{"n":01}"#,
            r#"{"n":1.}"#,
            r#"{"n":.5}"#,
            r#"{"n":-}"#,
            r#"{"n":+1}"#,
            r#"{"n":1e}"#,
            r#"{"n":1e+}"#,
            r#"{"n":--1}"#,
            r#"{"n":1.5.5}"#,
            r#"{"n":0x10}"#,
            r#"{"n":NaN}"#,
            r#"{"n":Infinity}"#,
            r#"{"t":true,"f":false,"z":null}"#,
            r#"{"t":tru}"#,
            r#"{"t":nul}"#,
            r#"{"t":truex}"#,
            r#"{"a":1}x"#,
            r#"{"a":1},"#,
            r#"{"a":1"#,
            r#"{"a" 1}"#,
            r#"{"a":}"#,
            r#"{,}"#,
            r#"{"a":1,}"#,
            r#"[1,]"#,
            r#"{a:1}"#,
            r#"{'a':1}"#,
            r#"{"a":[1,2,[3,[4,{}]]]}"#,
            "{\"a\":1}\u{a0}",
            "\u{feff}{}",
            r#""str""#,
            "5",
            r#"{"a":"unterminated"#,
            r#"{"a":"x\"#,
            "",
            "   ",
        ];
        for c in cases {
            for depth in [1, 2, 32, 200] {
                let _ = check(c, depth);
            }
        }
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        for n in [31, 32, 33, 99, 100, 101, 127, 128, 129, 300] {
            for depth in [32, 100, 127, 128, 1000] {
                let _ = check(&deep(n), depth);
            }
        }
    }

    #[test]
    fn agrees_on_generated_and_mutated_events() {
        let text = sluice_gen::events_json_lines(&sluice_gen::GenConfig::mixed(3, 400));
        let mut rng = sluice_gen::Rng::new(9);
        let alphabet = b"{}[]\":,\\ 0123456789.eE+-tfnu\x01ab";
        for line in text.lines() {
            assert!(
                check(line, 32),
                "ordinary events take the fast path: {line}"
            );
            for _ in 0..20 {
                let mut bytes = line.as_bytes().to_vec();
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(bytes.len() as u64) as usize;
                    if bytes[at].is_ascii() {
                        bytes[at] = alphabet[rng.below(alphabet.len() as u64) as usize];
                    }
                }
                if let Ok(s) = std::str::from_utf8(&bytes) {
                    let _ = check(s, 32);
                }
            }
        }
    }
}
