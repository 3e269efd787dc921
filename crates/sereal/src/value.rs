//! The value model: what a Sereal document carries, kept faithfully enough to re-encode it.
//!
//! Perl data has references everywhere; JSON has none. The model keeps the one distinction that
//! matters for interchange and drops the rest:
//! - a reference to an array or hash (`ARRAYREF_n`, `REFN ARRAY`, …) is [`Value::Array`] /
//!   [`Value::Hash`] — the container itself. A bare `ARRAY`/`HASH` body decodes the same way.
//! - a reference to anything else (a scalar, or a ref to a ref) is [`Value::Ref`].
//! - an item the document marks as referenced more than once (the track bit, used by `REFP` and
//!   `ALIAS`) is [`Value::Shared`]; every place it appears holds the same `Arc`.
//! - `UNDEF` and `CANONICAL_UNDEF` are both [`Value::Undef`]; weak references decode as strong ones
//!   (the `WEAKEN` marker is dropped), because neither difference survives outside Perl.

use std::sync::Arc;

/// A decoded Sereal value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Perl `undef` (`UNDEF` or `CANONICAL_UNDEF`); JSON `null`.
    Undef,
    /// `TRUE`/`FALSE` (protocol 3+) or `YES`/`NO` (protocol 5).
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// `FLOAT`, `DOUBLE`, and (narrowed to `f64`) `LONG_DOUBLE` / `FLOAT_128`.
    Float(f64),
    /// A byte string with no declared encoding (`BINARY`, `SHORT_BINARY`), or a `STR_UTF8` whose
    /// bytes are not valid UTF-8 (Perl's lax `utf8`).
    Binary(Vec<u8>),
    /// A UTF-8 string (`STR_UTF8`).
    String(String),
    /// An array (in Perl: a reference to one).
    Array(Vec<Value>),
    /// A hash with its keys in document order (in Perl: a reference to one).
    Hash(Hash),
    /// A reference to a non-container value (a scalar ref, or a ref to a ref).
    Ref(Box<Value>),
    /// A blessed value (`OBJECT`, `OBJECTV` and their `_FREEZE` forms).
    Object(Box<Object>),
    /// A Perl regular expression (`REGEXP`).
    Regexp(Box<Regexp>),
    /// A value referenced from several places in the document (`REFP`, `ALIAS`).
    Shared(Arc<Value>),
}

/// Hash entries in document order. A `Vec` rather than a map: event hashes are small, order is
/// part of what the reference encoder emits, and building a map would cost more than it saves.
pub type Hash = Vec<(Key, Value)>;

/// A hash key: Sereal keys are strings, binary or UTF-8. Keys compare, hash and sort by their
/// bytes, so the binary key `cpu` (as Perl writes ASCII) equals the UTF-8 key `cpu` (as JSON
/// gives it).
///
/// The bytes live in an `Arc`: the same key repeats in every event of a blob, and sharing one
/// allocation (as Perl shares hash keys) makes decoding a repeated key a reference-count bump
/// and lets the encoder recognise a repeated key by its pointer.
#[derive(Debug, Clone)]
pub enum Key {
    /// A key with no declared encoding (usually ASCII).
    Binary(Arc<[u8]>),
    /// A UTF-8 key.
    Utf8(Arc<str>),
}

/// A blessed value: class name plus the blessed data.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The Perl class name.
    pub class: String,
    /// The blessed data (for `_FREEZE` objects: the array of values `FREEZE` returned).
    pub value: Value,
    /// True for `OBJECT_FREEZE`/`OBJECTV_FREEZE`: a Perl decoder would call `Class->THAW`.
    pub frozen: bool,
}

/// A Perl regular expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Regexp {
    /// The pattern source.
    pub pattern: Value,
    /// The modifiers, e.g. `"i"`.
    pub flags: String,
}

impl Key {
    /// The key's bytes (UTF-8 for `Utf8` keys).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Binary(b) => b,
            Key::Utf8(s) => s.as_bytes(),
        }
    }

    /// The key as text, if it is valid UTF-8 (a binary key usually is).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Key::Binary(b) => std::str::from_utf8(b).ok(),
            Key::Utf8(s) => Some(s),
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::Utf8(s.into())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Key {
        Key::Utf8(s.into())
    }
}

impl Key {
    /// The address of the shared bytes: equal for clones of one key, so it identifies a key
    /// cheaply while the value tree that holds it is alive.
    pub(crate) fn ptr(&self) -> usize {
        match self {
            Key::Binary(b) => b.as_ptr() as usize,
            Key::Utf8(s) => s.as_ptr() as usize,
        }
    }
}

impl Value {
    /// Follow `Shared` wrappers to the value they hold.
    pub fn resolve(&self) -> &Value {
        let mut v = self;
        while let Value::Shared(inner) = v {
            v = inner;
        }
        v
    }

    /// Look up a key in a hash (after resolving `Shared`); `None` for non-hashes.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self.resolve() {
            Value::Hash(entries) => entries
                .iter()
                .find(|(k, _)| k.as_bytes() == key.as_bytes())
                .map(|(_, v)| v),
            Value::Object(o) => o.value.get(key),
            _ => None,
        }
    }

    /// The text of a string value (a binary string only if it is valid UTF-8).
    pub fn as_str(&self) -> Option<&str> {
        match self.resolve() {
            Value::String(s) => Some(s),
            Value::Binary(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value as an `i64`, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match self.resolve() {
            Value::Int(i) => Some(*i),
            Value::UInt(u) => i64::try_from(*u).ok(),
            _ => None,
        }
    }

    /// The value as an `f64`, for any number.
    pub fn as_f64(&self) -> Option<f64> {
        match self.resolve() {
            Value::Int(i) => Some(*i as f64),
            Value::UInt(u) => Some(*u as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The elements of an array value.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self.resolve() {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}
