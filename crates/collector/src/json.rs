//! JSON text to Sereal, two ways:
//! - [`transcode_event`], the fast path: one event's text straight into a [`Fragment`] through a
//!   [`FragmentWriter`] (no value tree), reporting its top-level tags; it declines (`None`)
//!   anything that is not plain, valid JSON it can type with certainty.
//! - [`parse_value`], the authoritative path: serde_json into a [`sereal::Value`], without an
//!   intermediate `serde_json::Value`, with a key interner kept across payloads (equal keys share
//!   one [`Key`] allocation, as the decoder's keys do) and a nesting bound checked while parsing.
//!
//! Both give the value [`sereal::json::from_json_slice`] gives (same number kinds, keys in
//! document order), except that duplicate keys are kept as they appear; a fragment encodes
//! byte for byte as that value does (tested below).
//!
//! Two shortcuts of the fast path change no byte (tests below):
//! - Keys met before are found in a [`KeyCache`] by their raw text (up to 15 bytes, no escape)
//!   and written from their encoding ([`sereal::EncodedKey`]); the caller keeps the cache
//!   between events, and a cache in any state gives the same fragment as a fresh one.
//! - A decimal without an exponent whose digits fit 2^53 and whose fraction has at most 22
//!   digits is one division of two exact doubles ([`decimal_f64`]): the correctly rounded
//!   value, the bits `str::parse` gives; anything else is parsed by `str::parse` as before.
//!
//! [`Fragment`]: sereal::Fragment

use std::borrow::Cow;
use std::fmt;

use rustc_hash::FxHashMap;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use sereal::{EncodedKey, FragmentWriter, Key, Value};

use crate::epoch::EpochInput;

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
}

impl Default for Interner {
    fn default() -> Interner {
        Interner {
            keys: FxHashMap::default(),
            recent: vec![None; RECENT],
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
                // Equal tags and lengths mean equal first 8 bytes (the tag mixes the length into
                // the 8th byte, so it alone does not tell a short key from a longer one).
                if *t == tag
                    && k.as_bytes().len() == b.len()
                    && (b.len() <= 8 || short_eq(&k.as_bytes()[8..], &b[8..]))
                {
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
/// The value, or the error and its message, are exactly serde_json's.
pub(crate) fn parse_value(
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

/// The top-level tag fields (`epoch`, `dc`, `type`, `subtype`, in that order) as
/// [`transcode_event`] met them.
pub(crate) type Tags<'t> = [Option<TagValue<'t>>; 4];

/// The value of a tag field the fast path takes: anything else (`null`, a float, a container,
/// a repeated tag) is left to the authoritative path.
#[derive(Debug)]
pub(crate) enum TagValue<'t> {
    Str(Cow<'t, str>),
    Int(i64),
}

/// Transcode one event's JSON text (an object) straight into `out` as a Sereal fragment, with
/// no value tree: on `Some`, `out` holds the event's top-level hash still open (the caller
/// appends the tags it fills, then closes and finishes it) and the tags found are returned.
///
/// `None` means "not taken" — invalid JSON, a top level that is not an object, a number or an
/// escape whose value needs care, nesting deeper than `max_depth` (or [`FAST_MAX_DEPTH`]), a tag
/// field that is repeated or neither a string nor an integer (`epoch`: not a number) — never a
/// different answer: the caller then goes through [`parse_value`] and the value rules, which
/// decide. A numeric `epoch` is written as the whole second it names ([`crate::epoch`]:
/// milliseconds, float seconds), as the authoritative path stores it. `out` is then in an
/// unspecified state (clear it).
pub(crate) fn transcode_event<'t>(
    text: &'t str,
    out: &mut FragmentWriter,
    cache: &mut KeyCache,
    max_depth: usize,
) -> Option<Tags<'t>> {
    let mut fast = Fast {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        out,
        cache,
        max_depth: max_depth.min(FAST_MAX_DEPTH),
    };
    let tags = fast.event()?;
    fast.skip_ws();
    (fast.pos == fast.bytes.len()).then_some(tags)
}

/// A JSON-to-Sereal transcoder for the common case: strings are sliced from the text (already
/// checked UTF-8) and written once, numbers typed as serde_json types them.
struct Fast<'t, 'w> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
    out: &'w mut FragmentWriter,
    cache: &'w mut KeyCache,
    max_depth: usize,
}

/// Slots of the [`KeyCache`] (a power of two), in pairs: a key may be in either slot of its
/// pair. 30 keys in 256 direct-mapped slots collided often enough to miss one key in five (every
/// event repeats both keys of a colliding pair); three keys for one of 256 pairs are rare.
const KEY_SLOTS: usize = 512;

/// One cached key: its raw text as two little-endian words (zero-padded) and its length, its
/// tag index and its encoding.
#[derive(Clone, Debug)]
struct CachedKey {
    head: u64,
    tail: u64,
    /// `u8::MAX` for an empty slot (no cached key is that long).
    len: u8,
    /// [`tag_index`] of the key, or `u8::MAX`.
    tag: u8,
    encoded: EncodedKey,
}

/// Keys met before, by their raw text, so that a repeated key (events repeat the same few dozen)
/// is recognised with two word comparisons and written as one fixed-size copy instead of being
/// scanned, checked and copied again: two-way, filled on every miss. Kept between events by the
/// caller of [`transcode_event`] (28 KB, fixed: unknown keys only replace entries). A hit
/// writes exactly what a miss writes: the key's text is equal byte for byte and its next byte
/// is the closing quote.
///
/// Short string values were cached the same way (on their second miss in a row, so that unique
/// ids and addresses did not evict the repeated ones): 4.5 hits per event, −0.24 k instructions
/// per event, but no CPU time saved (`perf`), so not kept.
#[derive(Debug)]
pub(crate) struct KeyCache {
    slots: Vec<CachedKey>,
}

impl Default for KeyCache {
    fn default() -> KeyCache {
        let empty = CachedKey {
            head: 0,
            tail: 0,
            len: u8::MAX,
            tag: u8::MAX,
            encoded: EncodedKey::new("").expect("the empty key fits"),
        };
        KeyCache {
            slots: vec![empty; KEY_SLOTS],
        }
    }
}

impl KeyCache {
    /// The entry for the key `words` describes ([`key_words`]).
    #[inline]
    fn find(&self, (head, tail, len, slot): Words) -> Option<&CachedKey> {
        self.slots[slot..slot + 2]
            .iter()
            .find(|s| s.head == head && s.tail == tail && usize::from(s.len) == len)
    }

    /// Cache `key`, which `words` describes (the older entry of the pair moves to the second
    /// slot).
    fn fill(&mut self, (head, tail, len, slot): Words, key: &str, tag: Option<usize>) {
        let Some(encoded) = EncodedKey::new(key).filter(|_| key.len() == len) else {
            return;
        };
        self.slots.swap(slot, slot + 1);
        self.slots[slot] = CachedKey {
            head,
            tail,
            len: len as u8,
            tag: tag.map_or(u8::MAX, |t| t as u8),
            encoded,
        };
    }
}

/// What [`key_words`] reads: the first 8 bytes, the next 8 (both zero-padded past the key),
/// the key's length, its cache slot.
type Words = (u64, u64, usize, usize);

/// The raw text of the key starting at `p` (after its opening quote) when it is plain (no
/// escape, no control character) and at most 15 bytes with its closing quote at `p + len`.
/// `None` for anything else, and near the end of the text (16 bytes are read).
#[inline]
fn key_words(b: &[u8], p: usize) -> Option<Words> {
    let w = b.get(p..p + 16)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(&w[..8]);
    let head = u64::from_le_bytes(word);
    let hits = specials(head);
    let (head, tail, len) = if hits != 0 {
        let n = (hits.trailing_zeros() / 8) as usize;
        (head & low_bytes(n), 0, n)
    } else {
        word.copy_from_slice(&w[8..]);
        let tail = u64::from_le_bytes(word);
        let hits = specials(tail);
        if hits == 0 {
            return None;
        }
        let n = (hits.trailing_zeros() / 8) as usize;
        (head, tail & low_bytes(n), 8 + n)
    };
    if w[len] != b'"' {
        return None;
    }
    let x = (head ^ tail.rotate_left(29) ^ len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    Some((head, tail, len, (x >> 48) as usize & (KEY_SLOTS - 2)))
}

/// A mask of the lowest `n` bytes of a word (`n < 8`).
#[inline]
fn low_bytes(n: usize) -> u64 {
    (1u64 << (8 * n)).wrapping_sub(1)
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

/// What [`Fast::number`] wrote.
enum Number {
    Int(i64),
    Float(f64),
}

/// The index of a tag name among `epoch`, `dc`, `type`, `subtype`.
#[inline]
fn tag_index(key: &str) -> Option<usize> {
    match key {
        "epoch" => Some(0),
        "dc" => Some(1),
        "type" => Some(2),
        "subtype" => Some(3),
        _ => None,
    }
}

impl<'t> Fast<'t, '_> {
    /// The top-level object, left open in `out`.
    fn event(&mut self) -> Option<Tags<'t>> {
        if self.peek()? != b'{' || self.max_depth == 0 {
            return None;
        }
        self.pos += 1;
        self.out.begin_hash();
        let mut tags: Tags<'t> = [None, None, None, None];
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(tags);
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.pos += 1;
            let tag = self.key()?;
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            match tag {
                Some(t) => {
                    if tags[t].is_some() {
                        return None;
                    }
                    tags[t] = Some(if t == 0 {
                        self.epoch_value()?
                    } else {
                        self.tag_value()?
                    });
                }
                None => self.value(1)?,
            }
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(tags);
                }
                _ => return None,
            }
        }
    }

    /// A hash key whose opening quote has been consumed, written to `out`; returns its
    /// [`tag_index`].
    #[inline]
    fn key(&mut self) -> Option<Option<usize>> {
        let words = key_words(self.bytes, self.pos);
        if let Some(w) = words {
            if let Some(hit) = self.cache.find(w) {
                self.out.encoded_key(&hit.encoded);
                // The length as read from the text, not from the entry: parsing goes on
                // without waiting for the table's load.
                self.pos += w.2 + 1;
                return Some((hit.tag != u8::MAX).then_some(usize::from(hit.tag)));
            }
        }
        self.key_missed(words)
    }

    /// [`key`](Self::key) when the cache did not have it: scanned, written and cached.
    #[inline(never)]
    fn key_missed(&mut self, words: Option<Words>) -> Option<Option<usize>> {
        let key = self.string()?;
        self.out.key(&key);
        let tag = tag_index(&key);
        if let Some(w) = words {
            self.cache.fill(w, &key, tag);
        }
        Some(tag)
    }

    /// The value of a top-level tag field: a string or an integer.
    fn tag_value(&mut self) -> Option<TagValue<'t>> {
        match self.peek()? {
            b'"' => {
                self.pos += 1;
                let s = self.string()?;
                self.out.str(&s);
                Some(TagValue::Str(s))
            }
            b'-' | b'0'..=b'9' => match self.number()? {
                Number::Int(i) => Some(TagValue::Int(i)),
                Number::Float(_) => None,
            },
            _ => None,
        }
    }

    /// The value of the top-level `epoch`: a number, written as the whole second it names
    /// (milliseconds, float seconds: `crate::epoch`, the one rule), so the fragment holds what
    /// the authoritative path stores. A string (RFC 3339) or anything else is left to that path.
    fn epoch_value(&mut self) -> Option<TagValue<'t>> {
        if !matches!(self.peek()?, b'-' | b'0'..=b'9') {
            return None;
        }
        let at = self.out.len();
        let input = match self.number()? {
            Number::Int(i) => EpochInput::Int(i),
            Number::Float(f) => EpochInput::Float(f),
        };
        let second = crate::epoch::normalize(input).ok()?;
        if input != EpochInput::Int(second) {
            self.out.replace_number(at, second);
        }
        Some(TagValue::Int(second))
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

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                self.pos += 1;
                let s = self.string()?;
                self.out.str(&s);
                Some(())
            }
            b't' => self.literal(b"true").map(|()| self.out.bool(true)),
            b'f' => self.literal(b"false").map(|()| self.out.bool(false)),
            b'n' => self.literal(b"null").map(|()| self.out.undef()),
            b'-' | b'0'..=b'9' => self.number().map(|_| ()),
            _ => None,
        }
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > self.max_depth {
            return None;
        }
        self.pos += 1;
        self.out.begin_hash();
        if self.peek()? == b'}' {
            self.pos += 1;
            self.out.end();
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.pos += 1;
            self.key()?;
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            self.value(depth)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    self.out.end();
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > self.max_depth {
            return None;
        }
        self.pos += 1;
        self.out.begin_array();
        if self.peek()? == b']' {
            self.pos += 1;
            self.out.end();
            return Some(());
        }
        loop {
            self.value(depth)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    self.out.end();
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The rest of a string whose opening quote has been consumed.
    #[inline]
    fn string(&mut self) -> Option<Cow<'t, str>> {
        let start = self.pos;
        let end = self.scan(start)?;
        if self.bytes[end] == b'"' {
            self.pos = end + 1;
            // Quotes are ASCII, so both ends are character boundaries of the checked text.
            let text: &'t str = self.text;
            return Some(Cow::Borrowed(&text[start..end]));
        }
        self.escaped(start, end).map(Cow::Owned)
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
    fn number(&mut self) -> Option<Number> {
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
        // The digits after the point, also accumulated into `n` (for `decimal_f64`).
        let mut frac_len = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let from = i;
            while let Some(&c @ b'0'..=b'9') = b.get(i) {
                n = n.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                i += 1;
            }
            if i == from {
                return None;
            }
            frac_len = i - from;
            float = true;
        }
        let mut exponent = false;
        if let Some(b'e' | b'E') = b.get(i) {
            exponent = true;
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
            let fast = if exponent {
                None
            } else {
                decimal_f64(n, int_len + frac_len, frac_len)
            };
            let f = match fast {
                Some(f) if negative => -f,
                Some(f) => f,
                None => self.text[start..i].parse().ok()?,
            };
            // serde_json refuses what overflows.
            if !f.is_finite() {
                return None;
            }
            self.out.float(f);
            return Some(Number::Float(f));
        }
        if int_len > 18 || (negative && n == 0) {
            return None;
        }
        let n = n as i64;
        let n = if negative { -n } else { n };
        self.out.int(n);
        Some(Number::Int(n))
    }
}

/// Exact powers of ten as `f64` (10^22 is the last one a double holds exactly).
const EXACT_POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The decimal `mantissa / 10^frac_len` (written with `digits` digits in all) as the correctly
/// rounded `f64` — the same bits as `str::parse` — when that takes one division: the mantissa
/// read without overflow (at most 19 digits) and exact in a double (at most 2^53), the power of
/// ten exact (at most 10^22). Then both operands are exact and IEEE division rounds the exact
/// quotient once (Clinger's fast path, which `str::parse` takes too after parsing again).
/// `None` otherwise: the caller parses.
#[inline]
fn decimal_f64(mantissa: u64, digits: usize, frac_len: usize) -> Option<f64> {
    if digits > 19 || mantissa > 1 << 53 {
        return None;
    }
    let power = *EXACT_POWERS_OF_TEN.get(frac_len)?;
    Some(mantissa as f64 / power)
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

    use sereal::{ArrayEncoder, EncoderOptions};

    thread_local! {
        /// One key cache for every text a test thread checks.
        static SHARED_KEYS: std::cell::RefCell<KeyCache> = std::cell::RefCell::new(KeyCache::default());
    }

    /// The transcoder either declines or agrees with serde_json: its fragment encodes byte for
    /// byte as serde_json's value does (twice in a row, so that de-duplication across events is
    /// covered), under both profiles' encoder settings; and it never accepts what serde_json
    /// refuses. Its tags are those of the value.
    fn check(text: &str, max_depth: usize) -> bool {
        let transcode = |cache: &mut KeyCache| {
            let mut w = FragmentWriter::new();
            transcode_event(text, &mut w, cache, max_depth).map(|tags| {
                w.end();
                (tags, w.finish().expect("a well-formed fragment"))
            })
        };
        // Cold, then warm (every cacheable key a hit), then through a cache that every checked
        // text shares (hits, misses and replaced slots of other texts' keys): all the same.
        let mut cache = KeyCache::default();
        let got = transcode(&mut cache);
        let warm = transcode(&mut cache);
        let shared = SHARED_KEYS.with(|c| transcode(&mut c.borrow_mut()));
        for other in [&warm, &shared] {
            assert_eq!(format!("{got:?}"), format!("{other:?}"), "{text:?}");
            assert_eq!(
                got.as_ref().map(|g| &g.1),
                other.as_ref().map(|o| &o.1),
                "{text:?}"
            );
        }
        // What ingest stores: the authoritative value with a numeric `epoch` as its second.
        let want = parse_value(text, &mut Interner::default(), max_depth).map(normalised);
        match (&got, &want) {
            (Some((tags, frag)), Ok(value)) => {
                let mut options = vec![
                    EncoderOptions::original_events(),
                    EncoderOptions {
                        dedupe_strings: true,
                        ..EncoderOptions::default()
                    },
                    EncoderOptions::default(),
                ];
                options.push(EncoderOptions {
                    canonical: true,
                    ..options[1].clone()
                });
                for opts in options {
                    let mut a = ArrayEncoder::new(opts.clone()).unwrap();
                    let mut b = ArrayEncoder::new(opts).unwrap();
                    let (mut da, mut db) = (Vec::new(), Vec::new());
                    for _ in 0..2 {
                        a.push(value).unwrap();
                        b.push_fragment(frag).unwrap();
                    }
                    a.finish_into(&mut da).unwrap();
                    b.finish_into(&mut db).unwrap();
                    assert_eq!(da, db, "{text:?}");
                }
                for (t, name) in ["epoch", "dc", "type", "subtype"].iter().enumerate() {
                    let found = value.get(name);
                    match (&tags[t], found) {
                        (None, None) => {}
                        (Some(TagValue::Int(i)), Some(Value::Int(j))) => assert_eq!(i, j),
                        (Some(TagValue::Str(s)), Some(v)) => assert_eq!(Some(&**s), v.as_str()),
                        (got, want) => panic!("{text:?}: tag {name}: {got:?} vs {want:?}"),
                    }
                }
            }
            (Some(g), Err(e)) => panic!("fast accepted {text:?} as {g:?}; serde_json: {e:?}"),
            (None, _) => {}
        }
        got.is_some()
    }

    /// `v` with its one top-level numeric `epoch` as the whole second it names (the rule ingest
    /// applies to the authoritative path's value, `crate::epoch`).
    fn normalised(v: Value) -> Value {
        let Value::Hash(mut h) = v else { return v };
        if h.iter().filter(|(k, _)| k.as_bytes() == b"epoch").count() == 1 {
            if let Some(entry) = h.iter_mut().find(|(k, _)| k.as_bytes() == b"epoch") {
                if matches!(entry.1, Value::Int(_) | Value::Float(_)) {
                    if let Ok(e) = crate::epoch::from_value(&entry.1) {
                        entry.1 = Value::Int(e);
                    }
                }
            }
        }
        Value::Hash(h)
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
        let tagged = [
            r#"{"type":"WEB","dc":"ams1","subtype":"","epoch":1700000000,"x":[true,false,null]}"#,
            r#"{"type":"W\u0045B","dc":7,"epoch":-3}"#,
            r#"{"type":"WEB","type":"WEB"}"#,
            r#"{"type":null}"#,
            r#"{"epoch":1.5}"#,
            r#"{"dc":["a"]}"#,
            // Milliseconds and float seconds: written as the second (`crate::epoch`).
            r#"{"type":"WEB","epoch":1795928400250,"n":1}"#,
            r#"{"epoch":1795928400.75,"type":"WEB"}"#,
            r#"{"type":"WEB","epoch":1.7959284e9}"#,
            r#"{"type":"WEB","epoch":"2026-11-29T05:00:00Z"}"#,
            r#"{"big":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":"dup"},"arr":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,"dup"],"q":"dup"}"#,
        ];
        for c in tagged {
            let _ = check(c, 32);
        }
        assert!(check(tagged[0], 32) && check(tagged[1], 32) && check(tagged[10], 32));
        assert!(!check(tagged[2], 32) && !check(tagged[3], 32));
        // A numeric epoch is taken, written as its second; a string one is not.
        for i in [4, 6, 7, 8] {
            assert!(check(tagged[i], 32), "{}", tagged[i]);
        }
        assert!(!check(tagged[9], 32));
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        for n in [31, 32, 33, 99, 100, 101, 127, 128, 129, 300] {
            for depth in [32, 100, 127, 128, 1000] {
                let _ = check(&deep(n), depth);
            }
        }
    }

    /// The float a transcoded `{"n":<number>}` holds, or `None` if declined or not a float.
    fn transcoded_float(number: &str) -> Option<f64> {
        let text = format!(r#"{{"n":{number}}}"#);
        let mut w = FragmentWriter::new();
        transcode_event(&text, &mut w, &mut KeyCache::default(), 8)?;
        w.end();
        match w.finish().ok()?.to_value().ok()? {
            Value::Hash(mut entries) => match entries.pop()?.1 {
                Value::Float(f) => Some(f),
                _ => None,
            },
            _ => None,
        }
    }

    /// Decimals without an exponent take one division (`decimal_f64`) instead of `str::parse`:
    /// the same bits as `str::parse` on edge cases and on 200 000 generated decimals of every
    /// length around the fast path's bounds (19 digits, 2^53, 10^22), both signs.
    #[test]
    fn decimal_floats_have_the_bits_str_parse_gives() {
        let mut cases: Vec<String> = [
            "0.0",
            "-0.0",
            "0.1",
            "0.2",
            "0.3",
            "1.5",
            "105.57",
            "11.397",
            "3.315",
            "-2.5",
            "9007199254740992.0",
            "9007199254740993.0",
            "9007199254740991.5",
            "900719925474099.3",
            "0.9007199254740993",
            "1.7976931348623157",
            "4.9406564584124654",
            "2.2250738585072014",
            "0.0000000000000000000001",
            "0.00000000000000000000001",
            "1234567890123456789.0",
            "12345678901234567890.0",
            "1.0000000000000000000001",
            "0.1000000000000000055511",
            "123456.7890123456789",
            "0.30000000000000004",
            "99999999999999999.9",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut rng = sluice_gen::Rng::new(12);
        for _ in 0..200_000 {
            let int_len = rng.below(20) as usize;
            let frac_len = 1 + rng.below(24) as usize;
            let mut t = String::new();
            if rng.below(2) == 0 {
                t.push('-');
            }
            if int_len == 0 {
                t.push('0');
            } else {
                t.push(char::from(b'1' + rng.below(9) as u8));
                for _ in 1..int_len {
                    t.push(char::from(b'0' + rng.below(10) as u8));
                }
            }
            t.push('.');
            for _ in 0..frac_len {
                // Runs of zeros and nines put values next to rounding boundaries.
                let d = match rng.below(4) {
                    0 => 0,
                    1 => 9,
                    _ => rng.below(10) as u8,
                };
                t.push(char::from(b'0' + d));
            }
            cases.push(t);
        }
        for case in &cases {
            let want: f64 = case.parse().unwrap();
            let got = transcoded_float(case).unwrap_or_else(|| panic!("{case} declined"));
            assert_eq!(got.to_bits(), want.to_bits(), "{case}");
        }
        // The fast path's own bounds, against the same answer from `str::parse`.
        assert!(decimal_f64(1 << 53, 16, 0).is_some());
        assert!(decimal_f64((1 << 53) + 1, 16, 0).is_none());
        assert!(decimal_f64(1, 20, 3).is_none());
        assert!(decimal_f64(1, 1, 23).is_none());
        assert_eq!(decimal_f64(1, 1, 22), Some("1e-22".parse().unwrap()));
        assert_eq!(decimal_f64(10557, 5, 2), Some(105.57));
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
