//! Lazy reader: walk a Sereal document without building a tree, extract the values at given
//! [`Path`]s and skip everything else.
//!
//! The body of the document is kept whole (decompressed once into a caller's buffer), because
//! `COPY`, `REFP`, `ALIAS` and `OBJECTV` point back to earlier offsets anywhere in it. Handles
//! ([`Item`]) are spans of that body, like `serde_json`'s `RawValue`: nothing is decoded until it
//! is asked for. Skipping a value is a tight loop over tags that allocates nothing and does not
//! recurse.
//!
//! The events-blob shape (an array of hashes) is served by [`LazyDoc::items`], and the fast path
//! for "three fields out of thirty" is [`Item::select`] (or a reusable [`Selector`]), which makes
//! one pass over an item for all paths and stops as soon as nothing more can match.
//!
//! ```
//! use sereal::lazy::{LazyDoc, Path};
//! use sereal::Value;
//!
//! let json = br#"[{"type":"WEB","http":{"status":200},"tags":["a","b"]},
//!                 {"type":"LB","http":{"status":503},"tags":[]}]"#;
//! let events = sereal::json::from_json_slice(json).unwrap();
//! let doc = sereal::to_vec(&events, &sereal::EncoderOptions::original_events()).unwrap();
//!
//! let paths = [Path::parse("http.status").unwrap(), Path::parse("tags[*]").unwrap()];
//! let mut scratch = Vec::new(); // decompression buffer, reusable across documents
//! let lazy = LazyDoc::open(&doc, &sereal::Limits::default(), &mut scratch).unwrap();
//! let mut rows = Vec::new();
//! for item in lazy.items().unwrap() {
//!     let item = item.unwrap();
//!     // Compare a field without allocating.
//!     let is_web = item.field("type").unwrap().map_or(Ok(false), |t| t.str_eq("WEB")).unwrap();
//!     rows.push((is_web, item.select(&paths).unwrap()));
//! }
//! assert_eq!(rows[0].0, true);
//! assert_eq!(rows[0].1, vec![vec![Value::Int(200)], vec![Value::Binary(b"a".to_vec()), Value::Binary(b"b".to_vec())]]);
//! assert_eq!(rows[1].1, vec![vec![Value::Int(503)], vec![]]);
//! ```
//!
//! # Path semantics
//! A step passes transparently through every kind of reference and wrapper: `REFN` chains,
//! `REFP`, `ALIAS`, `COPY`, `WEAKEN`, `PAD`, tracked items and blessed objects (`OBJECT`,
//! `OBJECTV` and their `_FREEZE` forms: a step into an object looks into its blessed data).
//! A key step matches the first hash entry whose key has the same bytes (binary and UTF-8 keys
//! alike, as [`Value::get`] does); `[i]` indexes an array (`[-1]` is its last element); `[*]`
//! yields every element of an array or every value of a hash, in document order. A step that
//! does not apply (a missing key, an index out of range, a key into an array or a scalar) yields
//! nothing; it is not an error.
//!
//! Selected values are materialised exactly as [`crate::from_slice`] would decode them at that
//! place (`Shared`, `Ref` and `Object` wrappers included), resolving back-references by jumping
//! to their targets.
//!
//! # Validation
//! The lazy reader validates what it reads: every tag it passes over is checked for being a
//! known tag with its data inside the body, every back-reference it follows must point strictly
//! backwards, and decoding a selected value applies the same rules and [`Limits`] as the full
//! decoder. Parts of the document it only skips are checked structurally (tags, lengths, counts)
//! but not semantically (a `REFP` inside a skipped value is not resolved).
//!
//! # Element index
//! A document whose user header holds an [element index](crate::index) that checks out against
//! its body ([`LazyDoc::element_index`]) has its top-level elements located without a walk:
//! [`LazyDoc::items`] and [`Selector::next_selected`] jump to the next element, and a selection
//! stops as soon as its paths are found. Elements that are jumped over are not read at all (not
//! even structurally). An index that does not check out is never used.
//!
//! # Costs and limits
//! Nothing recurses without a bound: skipping is iterative, walking a path and decoding a value
//! stop at [`Limits::max_depth`] (every container, reference and jump counts as a level).
//! Back-references only ever jump backwards, so COPY/REFP loops are errors, not hangs. One
//! selection ([`Item::get`], [`Item::select`], a [`Selector`] call) may visit at most
//! [`Limits::max_values`] items along its paths (wildcards through shared references could
//! otherwise be exponential), and what it materialises is charged against `max_values` and
//! `max_total_string_bytes` like a full decode, each reference being charged its target's size.

use std::fmt;
use std::str::FromStr;

use crate::de::{open, Limits, Parser};
use crate::error::{Error, ErrorCode, Result};
use crate::header::Header;
use crate::tag::*;
use crate::value::Value;
use crate::varint;

// ---------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------

/// One step of a [`Path`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// A hash key (`name`, `"quoted.name"`, `['quoted.name']`).
    Key(String),
    /// An array index (`[3]`); negative counts from the end (`[-1]` is the last element).
    Index(i64),
    /// Every element of an array, or every value of a hash (`[*]`).
    Wildcard,
}

/// A parsed path expression such as `http.status`, `experiments[*].id`, `a[-1]` or
/// `"user.agent".major` / `['user.agent'].major` (quoted keys may contain dots and brackets).
///
/// Grammar: segments separated by `.`; a segment is a key followed by any number of brackets,
/// and the first segment may be brackets only (`[0].id`). A bare key is any run of characters
/// other than `.`, `[`, `]`, quotes and whitespace. A quoted key uses `"…"` or `'…'`, with `\\`,
/// `\"` and `\'` as the only escapes. A bracket holds `*`, an integer, or a quoted key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Path {
    steps: Vec<Step>,
}

impl Path {
    /// Parse a path expression; malformed input is a "bad path" error whose offset is the byte
    /// position in `text` where the problem was found.
    pub fn parse(text: &str) -> Result<Path> {
        PathParser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
        }
        .parse()
    }

    /// A path from explicit steps (at least one).
    pub fn from_steps(steps: Vec<Step>) -> Result<Path> {
        if steps.is_empty() {
            return Err(Error::new(ErrorCode::BadPath("empty path".into()), 0));
        }
        Ok(Path { steps })
    }

    /// The steps of this path.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Follow this path through an already decoded [`Value`], with the same semantics as the lazy
    /// reader (references, `Shared` and objects are looked through). Used to cross-check the lazy
    /// reader, and handy when a value has been decoded anyway.
    pub fn eval<'v>(&self, value: &'v Value) -> Vec<&'v Value> {
        let mut out = Vec::new();
        eval_steps(&self.steps, value, &mut out);
        out
    }
}

fn eval_steps<'v>(steps: &[Step], value: &'v Value, out: &mut Vec<&'v Value>) {
    let Some((step, rest)) = steps.split_first() else {
        out.push(value);
        return;
    };
    // Look through wrappers iteratively (a Ref chain can be long).
    let mut v = value;
    loop {
        v = match v {
            Value::Shared(inner) => inner,
            Value::Ref(inner) => inner,
            Value::Object(o) => &o.value,
            _ => break,
        };
    }
    match (step, v) {
        (Step::Key(k), Value::Hash(entries)) => {
            if let Some((_, child)) = entries
                .iter()
                .find(|(key, _)| key.as_bytes() == k.as_bytes())
            {
                eval_steps(rest, child, out);
            }
        }
        (Step::Index(i), Value::Array(items)) => {
            if let Some(idx) = resolve_index(*i, items.len()) {
                eval_steps(rest, &items[idx], out);
            }
        }
        (Step::Wildcard, Value::Array(items)) => {
            items.iter().for_each(|c| eval_steps(rest, c, out))
        }
        (Step::Wildcard, Value::Hash(entries)) => {
            entries.iter().for_each(|(_, c)| eval_steps(rest, c, out))
        }
        _ => {}
    }
}

#[inline]
fn resolve_index(i: i64, n: usize) -> Option<usize> {
    if i >= 0 {
        usize::try_from(i).ok().filter(|&i| i < n)
    } else {
        let back = usize::try_from(i.unsigned_abs()).ok()?;
        n.checked_sub(back)
    }
}

impl FromStr for Path {
    type Err = Error;
    fn from_str(s: &str) -> Result<Path> {
        Path::parse(s)
    }
}

impl fmt::Display for Path {
    /// The canonical text of the path; parsing it gives the same path back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, step) in self.steps.iter().enumerate() {
            match step {
                Step::Key(k) => {
                    if n > 0 {
                        f.write_str(".")?;
                    }
                    if !k.is_empty() && k.chars().all(is_bare_char) {
                        f.write_str(k)?;
                    } else {
                        f.write_str("\"")?;
                        for c in k.chars() {
                            if c == '"' || c == '\\' {
                                f.write_str("\\")?;
                            }
                            write!(f, "{c}")?;
                        }
                        f.write_str("\"")?;
                    }
                }
                Step::Index(i) => write!(f, "[{i}]")?,
                Step::Wildcard => f.write_str("[*]")?,
            }
        }
        Ok(())
    }
}

fn is_bare_char(c: char) -> bool {
    !matches!(c, '.' | '[' | ']' | '"' | '\'') && !c.is_whitespace() && !c.is_control()
}

struct PathParser<'t> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
}

impl PathParser<'_> {
    #[cold]
    fn bad(&self, what: &str) -> Error {
        Error::new(
            ErrorCode::BadPath(format!("{what} at column {} in {:?}", self.pos, self.text)),
            self.pos,
        )
    }

    fn parse(mut self) -> Result<Path> {
        if self.text.is_empty() {
            return Err(self.bad("empty path"));
        }
        let mut steps = Vec::new();
        let mut first = true;
        loop {
            // A segment: a key (optional for the first segment), then brackets.
            match self.bytes.get(self.pos) {
                Some(b'[') if first => {}
                Some(b'"') | Some(b'\'') => steps.push(Step::Key(self.quoted()?)),
                Some(b'.') | None => {
                    return Err(self.bad(if first {
                        "expected a key"
                    } else {
                        "expected a key after '.'"
                    }))
                }
                Some(b'[') => {
                    return Err(self.bad("expected a key after '.' (write `a[0]`, not `a.[0]`)"))
                }
                Some(_) => steps.push(Step::Key(self.bare()?)),
            }
            first = false;
            while self.bytes.get(self.pos) == Some(&b'[') {
                self.pos += 1;
                steps.push(self.bracket()?);
            }
            match self.bytes.get(self.pos) {
                None => break,
                Some(b'.') => self.pos += 1,
                Some(_) => return Err(self.bad("expected '.', '[' or the end of the path")),
            }
        }
        Ok(Path { steps })
    }

    fn bare(&mut self) -> Result<String> {
        let rest = &self.text[self.pos..];
        let len = rest.find(|c: char| !is_bare_char(c)).unwrap_or(rest.len());
        if len == 0 {
            return Err(self.bad(match rest.chars().next() {
                Some(']') => "unexpected ']'",
                Some(c) if c.is_whitespace() => "whitespace in a key (quote the key)",
                _ => "unexpected character (quote the key)",
            }));
        }
        self.pos += len;
        Ok(rest[..len].to_owned())
    }

    fn quoted(&mut self) -> Result<String> {
        let quote = self.bytes[self.pos];
        let open_at = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let Some(c) = rest.chars().next() else {
                self.pos = open_at;
                return Err(self.bad("unterminated quoted key"));
            };
            self.pos += c.len_utf8();
            match c {
                '\\' => match self.bytes.get(self.pos) {
                    Some(&e @ (b'\\' | b'"' | b'\'')) => {
                        out.push(e as char);
                        self.pos += 1;
                    }
                    _ => {
                        return Err(self
                            .bad("bad escape in quoted key (only \\\\, \\\" and \\' are allowed)"))
                    }
                },
                c if c as u32 == quote as u32 => return Ok(out),
                c => out.push(c),
            }
        }
    }

    fn bracket(&mut self) -> Result<Step> {
        let step = match self.bytes.get(self.pos) {
            Some(b'*') => {
                self.pos += 1;
                Step::Wildcard
            }
            Some(b'"') | Some(b'\'') => Step::Key(self.quoted()?),
            Some(b'-') | Some(b'0'..=b'9') => {
                let start = self.pos;
                if self.bytes[self.pos] == b'-' {
                    self.pos += 1;
                }
                let digits = self.pos;
                while matches!(self.bytes.get(self.pos), Some(b'0'..=b'9')) {
                    self.pos += 1;
                }
                if self.pos == digits {
                    return Err(self.bad("expected digits after '-'"));
                }
                match self.text[start..self.pos].parse::<i64>() {
                    Ok(i) => Step::Index(i),
                    Err(_) => {
                        self.pos = start;
                        return Err(self.bad("index out of range"));
                    }
                }
            }
            None => return Err(self.bad("unterminated '['")),
            Some(_) => {
                return Err(self.bad("expected '*', an integer or a quoted key inside '[ ]'"))
            }
        };
        if self.bytes.get(self.pos) != Some(&b']') {
            return Err(self.bad("expected ']'"));
        }
        self.pos += 1;
        Ok(step)
    }
}

// ---------------------------------------------------------------------------------------------
// The document
// ---------------------------------------------------------------------------------------------

/// A document opened for lazy reading: its header and its whole (decompressed) body.
pub struct LazyDoc<'a> {
    header: Header,
    body: &'a [u8],
    offset_base: usize,
    error_base: usize,
    limits: Limits,
    /// Unique per opened document (a body decompressed into a reused buffer has the same address
    /// as the previous one): what a [`Selector`]'s key cache is valid for.
    id: u64,
    /// The top-level array's element bounds from a checked [element index](crate::index)
    /// (`count + 1` positions), or empty.
    bounds: Vec<u32>,
    /// What became of the document's element index.
    index_use: IndexUse,
}

/// What [`LazyDoc::open`] did with the document's [element index](crate::index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexUse {
    /// The document has none (no user header, another user header, or an index of a newer
    /// format version: all read by walking, as always).
    Absent,
    /// A valid index of this many elements: [`LazyDoc::items`] jumps between elements.
    Used(usize),
    /// The index is damaged or does not match the body: it is not used (elements are found by
    /// walking them, so results are the same, only slower). The reason, for a warning.
    Ignored(String),
}

/// Source of [`LazyDoc`] ids.
static NEXT_DOC_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<'a> LazyDoc<'a> {
    /// A decoder over this body, for materialising selected items (it resolves REFP/ALIAS by
    /// jumping to their targets).
    fn parser<'s>(&'s self) -> Parser<'s, 's> {
        Parser::new(self.body, self.offset_base, self.error_base, &self.limits)
    }
}

impl fmt::Debug for LazyDoc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyDoc")
            .field("header", &self.header)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// A container found by following wrappers.
#[derive(Clone, Copy)]
enum Core {
    /// An array: element count and position of the first element.
    Array(usize, usize),
    /// A hash: pair count and position of the first key.
    Hash(usize, usize),
    /// Anything else (scalars, regexps).
    Other,
}

impl<'a> LazyDoc<'a> {
    /// Open `doc` (one document; bytes after its body are ignored): parse the header and, for a
    /// compressed body, decompress it into `scratch` (cleared first; reuse it across documents to
    /// avoid reallocating). Nothing of the body is read yet. `limits` bound decompression, depth,
    /// and what materialising values may cost.
    ///
    /// A valid [element index](crate::index) in the user header is checked against the body here
    /// and then used by [`LazyDoc::items`]; a bad one is set aside ([`LazyDoc::element_index`]
    /// says why), never trusted.
    pub fn open(doc: &'a [u8], limits: &Limits, scratch: &'a mut Vec<u8>) -> Result<LazyDoc<'a>> {
        let body = open(doc, limits, scratch)?;
        let mut lazy = LazyDoc {
            header: body.header,
            body: body.bytes,
            offset_base: body.offset_base,
            error_base: body.error_base,
            limits: limits.clone(),
            id: NEXT_DOC_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            bounds: Vec::new(),
            index_use: IndexUse::Absent,
        };
        if let Some(range) = lazy.header.user_header.clone() {
            lazy.load_index(doc.get(range).unwrap_or_default());
        }
        Ok(lazy)
    }

    /// Parse and check the element index in user header body `uh`.
    fn load_index(&mut self, uh: &[u8]) {
        use crate::index::{ElementIndex, Parsed};
        let index = match ElementIndex::parse(uh) {
            Parsed::NotAnIndex | Parsed::Unsupported(_) => return,
            Parsed::Bad(reason) => {
                self.index_use = IndexUse::Ignored(format!("element index: {reason}"));
                return;
            }
            Parsed::Index(index) => index,
        };
        let checked = match self.resolve(0, &mut 0, &mut None, &mut false) {
            Ok(Core::Array(count, first)) => {
                index.check(self.body.len(), count, first, |p| self.skip_n(p, 1).ok())
            }
            Ok(_) => Err("the body is not an array".into()),
            Err(e) => Err(format!("the body's array: {e}")),
        };
        match checked {
            Ok(()) => {
                self.index_use = IndexUse::Used(index.len());
                self.bounds = index.into_bounds();
            }
            Err(reason) => self.index_use = IndexUse::Ignored(format!("element index: {reason}")),
        }
    }

    /// What became of the document's [element index](crate::index): absent, used, or ignored
    /// (with the reason: a reader should warn, since a writer produced a bad one).
    pub fn element_index(&self) -> &IndexUse {
        &self.index_use
    }

    /// A decoder for items of this document that charges all it decodes to one budget, like one
    /// selection does (see [`ItemDecoder`]).
    pub fn item_decoder(&self) -> ItemDecoder<'_> {
        ItemDecoder {
            parser: self.parser(),
        }
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The body bytes (after decompression).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The top-level item as an undecoded span. This skips over the whole body once to find
    /// where the item ends; [`LazyDoc::items`] does not.
    pub fn root(&self) -> Result<Item<'_>> {
        let end = self.skip_n(0, 1)?;
        Ok(Item {
            doc: self.shrink(),
            start: 0,
            end,
            in_copy: false,
        })
    }

    /// Iterate over the elements of the top-level array (an `ARRAY`, `ARRAYREF`, or a reference
    /// to one), yielding a handle per element without decoding it. A body that is not an array is
    /// a "not an array" error.
    pub fn items(&self) -> Result<Items<'_>> {
        let mut depth = 0;
        match self.resolve(0, &mut depth, &mut None, &mut false)? {
            Core::Array(n, first) => Ok(Items {
                doc: self.shrink(),
                pos: first,
                remaining: n,
                failed: false,
                bounds: &self.bounds,
            }),
            _ => Err(self.err(ErrorCode::NotAnArray, 0)),
        }
    }

    /// `&LazyDoc<'a>` as `&LazyDoc<'_>` (covariance, spelled out for the handles).
    fn shrink(&self) -> &LazyDoc<'_> {
        self
    }

    #[cold]
    fn err(&self, code: ErrorCode, at: usize) -> Error {
        Error::new(code, at + self.error_base)
    }

    #[cold]
    fn eof(&self) -> Error {
        Error::eof(self.body.len() + self.error_base)
    }

    #[inline]
    fn byte_at(&self, pos: usize) -> Result<u8> {
        self.body.get(pos).copied().ok_or_else(|| self.eof())
    }

    #[inline]
    fn varint_at(&self, pos: &mut usize) -> Result<u64> {
        // Up to 3 bytes inline (offsets in bodies of up to 2 MiB, all lengths and counts that
        // matter); longer ones, and all errors, through `varint::read`.
        let b = self.body;
        let p = *pos;
        if let Some(&b0) = b.get(p) {
            if b0 < 0x80 {
                *pos = p + 1;
                return Ok(b0 as u64);
            }
            if let (Some(&b1), Some(&b2)) = (b.get(p + 1), b.get(p + 2)) {
                if b1 < 0x80 {
                    *pos = p + 2;
                    return Ok((b0 & 0x7f) as u64 | (b1 as u64) << 7);
                }
                if b2 < 0x80 {
                    *pos = p + 3;
                    return Ok((b0 & 0x7f) as u64 | ((b1 & 0x7f) as u64) << 7 | (b2 as u64) << 14);
                }
            }
        }
        varint::read(b, pos).map_err(|e| e.with_base(self.error_base))
    }

    /// A document offset (as written after REFP/ALIAS/COPY/OBJECTV) as a body index strictly
    /// before `before`, so that following back-references always terminates.
    fn back_offset(&self, offset: u64, before: usize) -> Result<usize> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_sub(self.offset_base))
            .filter(|&i| i < before)
            .ok_or_else(|| self.err(ErrorCode::BadOffset(offset), before))
    }

    fn count_at(&self, pos: &mut usize, at: usize) -> Result<usize> {
        let n = self.varint_at(pos)?;
        if n > self.limits.max_elements as u64 {
            return Err(self.err(ErrorCode::ElementCountLimit(self.limits.max_elements), at));
        }
        Ok(n as usize)
    }

    /// Skip `pending` consecutive items starting at `pos`; returns the position after them.
    /// Iterative and allocation-free. The tags that make up most of an events document (short
    /// strings, COPY / VARINT with a one- or two-byte varint, small integers) each take one
    /// well-predicted branch; every other tag is handled by one lookup in [`SKIP`] and
    /// branch-free arithmetic, plus a short loop for the tags that carry a varint. (A fully
    /// branch-free loop measured slower: each tag's length then waits on the previous one.)
    /// Each item needs at least one byte, so a lying count fails as soon as it exceeds what is
    /// left.
    fn skip_n(&self, mut pos: usize, mut pending: usize) -> Result<usize> {
        let buf = self.body;
        let len = buf.len();
        if pos.saturating_add(pending) > len {
            return Err(self.eof());
        }
        while pending > 0 {
            let Some(&tag) = buf.get(pos) else {
                return Err(self.eof());
            };
            pending -= 1;
            match tag & !TRACK_FLAG {
                SHORT_BINARY_0..=0x7f => {
                    pos += 1 + (tag & 0x1f) as usize;
                    continue;
                }
                VARINT | ZIGZAG | REFP | ALIAS | COPY => {
                    // Only the varint's length matters here; longer ones take the general path.
                    match (buf.get(pos + 1), buf.get(pos + 2)) {
                        (Some(&b1), _) if b1 < 0x80 => {
                            pos += 2;
                            continue;
                        }
                        (Some(_), Some(&b2)) if b2 < 0x80 => {
                            pos += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
                0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => {
                    pos += 1;
                    continue;
                }
                _ => {}
            }
            let action = SKIP[tag as usize];
            pos += 1;
            if action & SKIP_VARINT == 0 {
                pos += (action & 0xff) as usize;
                pending += ((action >> 8) & 0x1f) as usize;
            } else {
                if action == SKIP_INVALID {
                    return Err(self.bad_tag(tag, pos - 1));
                }
                // The varint: only its value matters here, not its canonical form.
                let at = pos;
                let mut v: u64 = 0;
                let mut shift = 0u32;
                loop {
                    let b = *buf.get(pos).ok_or_else(|| self.eof())?;
                    pos += 1;
                    v |= ((b & 0x7f) as u64) << shift;
                    if b < 0x80 {
                        break;
                    }
                    shift += 7;
                    if shift > 63 {
                        return Err(self.err(ErrorCode::VarintOverflow, at));
                    }
                }
                let v = usize::try_from(v).unwrap_or(usize::MAX);
                // A string's length moves `pos`; an ARRAY/HASH count adds 1 or 2 items per unit.
                let to_pos = 0usize.wrapping_sub((action & SKIP_V_BYTES != 0) as usize);
                pos = pos.saturating_add(v & to_pos);
                let per_unit = ((action & SKIP_V_ITEMS) >> 10) as usize;
                let extra = ((action >> 8) & 0x03) as usize;
                pending = pending
                    .saturating_add(v.saturating_mul(per_unit))
                    .saturating_add(extra);
            }
            // Where `pending` grows (containers, wrappers) or a long item moved `pos`: a count
            // that cannot fit in what is left fails here, not after walking the rest. The fast
            // paths above move `pos` by at most 32 and are caught by `get` or the final check.
            if pos.saturating_add(pending) > len {
                return Err(self.eof());
            }
        }
        if pos > len {
            return Err(self.eof());
        }
        Ok(pos)
    }

    /// [`LazyDoc::skip_n`] of one item, with the scalars of event documents inline.
    #[inline(always)]
    fn skip_one(&self, pos: usize) -> Result<usize> {
        let buf = self.body;
        if let Some(&tag) = buf.get(pos) {
            let end = match tag & !TRACK_FLAG {
                SHORT_BINARY_0..=0x7f => pos + 1 + (tag & 0x1f) as usize,
                0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => pos + 1,
                // A varint of up to 10 bytes (what `skip_n` accepts): integers such as byte
                // counts and ids, and COPY offsets.
                VARINT | ZIGZAG | COPY => match (buf.get(pos + 1), buf.get(pos + 2)) {
                    (Some(&b1), _) if b1 < 0x80 => pos + 2,
                    (Some(_), Some(&b2)) if b2 < 0x80 => pos + 3,
                    _ => match buf
                        .get(pos + 3..)
                        .and_then(|r| r.iter().take(8).position(|&b| b < 0x80))
                    {
                        Some(k) => pos + 4 + k,
                        None => usize::MAX,
                    },
                },
                DOUBLE => pos + 9,
                _ => usize::MAX,
            };
            if end <= buf.len() {
                return Ok(end);
            }
        }
        self.skip_n(pos, 1)
    }

    #[cold]
    fn bad_tag(&self, tag: u8, at: usize) -> Error {
        match tag & !TRACK_FLAG {
            MANY => self.err(
                ErrorCode::UnsupportedTag("MANY (never implemented by any encoder)"),
                at,
            ),
            _ => self.err(ErrorCode::BadTag(tag), at),
        }
    }

    /// The bytes and end of a string tag at `pos` (a hash key, class name or string value).
    #[inline]
    fn string_at(&self, pos: usize) -> Result<Option<(&'a [u8], bool, usize)>> {
        let tag = self.byte_at(pos)? & !TRACK_FLAG;
        let mut p = pos + 1;
        let (len, utf8) = match tag {
            SHORT_BINARY_0..=0x7f => ((tag & 0x1f) as usize, false),
            BINARY | STR_UTF8 => {
                let n = self.varint_at(&mut p)?;
                if n > self.limits.max_string_bytes as u64 {
                    return Err(self.err(
                        ErrorCode::StringLengthLimit(self.limits.max_string_bytes),
                        pos,
                    ));
                }
                (n as usize, tag == STR_UTF8)
            }
            _ => return Ok(None),
        };
        let end = p
            .checked_add(len)
            .filter(|&e| e <= self.body.len())
            .ok_or_else(|| self.eof())?;
        Ok(Some((&self.body[p..end], utf8, end)))
    }

    /// A hash key at `pos` (a string, or a COPY of one): its bytes, whether it is flagged UTF-8,
    /// and the position after it.
    #[inline]
    fn key_at(&self, pos: usize) -> Result<(&'a [u8], bool, usize)> {
        let tag = self.byte_at(pos)? & !TRACK_FLAG;
        if tag == COPY {
            let mut p = pos + 1;
            let offset = self.varint_at(&mut p)?;
            let idx = self.back_offset(offset, pos)?;
            return match self.string_at(idx)? {
                Some((bytes, utf8, _)) => Ok((bytes, utf8, p)),
                None => Err(self.err(ErrorCode::BadKeyTag(self.body[idx] & !TRACK_FLAG), idx)),
            };
        }
        match self.string_at(pos)? {
            Some((bytes, utf8, end)) => Ok((bytes, utf8, end)),
            None => Err(self.err(ErrorCode::BadKeyTag(tag), pos)),
        }
    }

    /// The position after a class name (a string or COPY of one) at `pos`.
    fn skip_class(&self, pos: usize) -> Result<usize> {
        let tag = self.byte_at(pos)? & !TRACK_FLAG;
        match tag {
            SHORT_BINARY_0..=0x7f | BINARY | STR_UTF8 | COPY => Ok(self.key_at(pos)?.2),
            _ => Err(self.err(ErrorCode::BadClassName(tag), pos)),
        }
    }

    #[inline]
    fn enter(&self, depth: &mut usize, at: usize) -> Result<()> {
        *depth += 1;
        self.check_depth(*depth, at)
    }

    #[inline]
    fn check_depth(&self, depth: usize, at: usize) -> Result<()> {
        if depth > self.limits.max_depth {
            return Err(self.err(ErrorCode::DepthLimit(self.limits.max_depth), at));
        }
        Ok(())
    }

    /// Follow wrappers (PAD, track bit, REFN, WEAKEN, OBJECT*, REFP, ALIAS, COPY) from `pos` to
    /// the container or scalar they lead to. On the first back-reference jump, `jumped` is set to
    /// the position after it (the end of the item at `pos`). Every wrapper counts as a level of
    /// depth; jumps only go backwards, so this always terminates.
    fn resolve(
        &self,
        mut p: usize,
        depth: &mut usize,
        jumped: &mut Option<usize>,
        in_copy: &mut bool,
    ) -> Result<Core> {
        loop {
            let at = p;
            let tag = self.byte_at(p)? & !TRACK_FLAG;
            p += 1;
            match tag {
                PAD => {}
                0x40..=0x4f => return Ok(Core::Array((tag & 0x0f) as usize, p)),
                0x50..=0x5f => return Ok(Core::Hash((tag & 0x0f) as usize, p)),
                ARRAY => {
                    let n = self.count_at(&mut p, at)?;
                    return Ok(Core::Array(n, p));
                }
                HASH => {
                    let n = self.count_at(&mut p, at)?;
                    return Ok(Core::Hash(n, p));
                }
                REFN | WEAKEN => self.enter(depth, at)?,
                OBJECT | OBJECT_FREEZE => {
                    self.enter(depth, at)?;
                    p = self.skip_class(p)?;
                }
                OBJECTV | OBJECTV_FREEZE => {
                    self.enter(depth, at)?;
                    let offset = self.varint_at(&mut p)?;
                    let idx = self.back_offset(offset, at)?;
                    self.skip_class(idx)?;
                }
                REFP | ALIAS | COPY => {
                    if tag == COPY {
                        if *in_copy {
                            return Err(self.err(ErrorCode::CopyOfCopy, at));
                        }
                        *in_copy = true;
                    }
                    self.enter(depth, at)?;
                    let offset = self.varint_at(&mut p)?;
                    let idx = self.back_offset(offset, at)?;
                    if tag != COPY {
                        if self.byte_at(idx)? & TRACK_FLAG == 0 {
                            return Err(self.err(ErrorCode::BadOffset(offset), at));
                        }
                        // The target was written (and is read) outside any COPY expansion.
                        *in_copy = false;
                    }
                    if jumped.is_none() {
                        *jumped = Some(p);
                    }
                    p = idx;
                }
                _ => return Ok(Core::Other),
            }
        }
    }

    /// Follow only what [`Value::resolve`] looks through (PAD, track bit, ALIAS, COPY, WEAKEN) to
    /// the tag of a scalar.
    fn resolve_scalar(&self, mut p: usize) -> Result<usize> {
        let mut depth = 0;
        let mut in_copy = false;
        loop {
            let at = p;
            let tag = self.byte_at(p)? & !TRACK_FLAG;
            p += 1;
            match tag {
                PAD => {}
                WEAKEN => self.enter(&mut depth, at)?,
                ALIAS | COPY => {
                    if tag == COPY {
                        if in_copy {
                            return Err(self.err(ErrorCode::CopyOfCopy, at));
                        }
                        in_copy = true;
                    }
                    self.enter(&mut depth, at)?;
                    let offset = self.varint_at(&mut p)?;
                    let idx = self.back_offset(offset, at)?;
                    if tag == ALIAS {
                        if self.byte_at(idx)? & TRACK_FLAG == 0 {
                            return Err(self.err(ErrorCode::BadOffset(offset), at));
                        }
                        in_copy = false;
                    }
                    p = idx;
                }
                _ => return Ok(at),
            }
        }
    }
}

/// In [`SKIP`]: the tag is followed by a varint (then the low bits below say what it counts).
const SKIP_VARINT: u16 = 0x8000;
/// With [`SKIP_VARINT`]: the varint is a byte length to skip (BINARY, STR_UTF8).
const SKIP_V_BYTES: u16 = 0x4000;
/// With [`SKIP_VARINT`]: items per unit of the varint (bits 10-11: 1 for ARRAY, 2 for HASH).
const SKIP_V_ITEMS: u16 = 0x0c00;
/// In [`SKIP`]: not a valid tag.
const SKIP_INVALID: u16 = 0xffff;

/// How to skip each tag byte. Without [`SKIP_VARINT`]: the low byte is the number of data bytes
/// after the tag and bits 8-12 the number of further items that belong to it (children, or the
/// item after a PAD/REFN/WEAKEN). With it: a varint follows, then see [`SKIP_V_BYTES`] and
/// [`SKIP_V_ITEMS`]; bits 8-9 are further items (1 for OBJECTV). The track flag changes nothing.
static SKIP: [u16; 256] = skip_table();

const fn skip_table() -> [u16; 256] {
    let mut t = [SKIP_INVALID; 256];
    let mut b = 0;
    while b < 256 {
        let tag = (b as u8) & !TRACK_FLAG;
        t[b] = match tag {
            0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => 0,
            0x60..=0x7f => (tag & 0x1f) as u16,
            0x40..=0x4f => ((tag & 0x0f) as u16) << 8,
            0x50..=0x5f => (2 * (tag & 0x0f) as u16) << 8,
            FLOAT => 4,
            DOUBLE => 8,
            LONG_DOUBLE | FLOAT_128 => 16,
            REFN | WEAKEN | PAD => 1 << 8,
            OBJECT | OBJECT_FREEZE | REGEXP => 2 << 8,
            VARINT | ZIGZAG | REFP | ALIAS | COPY => SKIP_VARINT,
            BINARY | STR_UTF8 => SKIP_VARINT | SKIP_V_BYTES,
            ARRAY => SKIP_VARINT | (1 << 10),
            HASH => SKIP_VARINT | (2 << 10),
            OBJECTV | OBJECTV_FREEZE => SKIP_VARINT | (1 << 8),
            _ => SKIP_INVALID,
        };
        b += 1;
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Items
// ---------------------------------------------------------------------------------------------

/// A borrowed, undecoded item of a [`LazyDoc`] body: the span of one tagged value (think
/// `serde_json::value::RawValue`). Cheap to copy. Its bytes are not self-contained (they may
/// refer back to earlier parts of the body), so all reading goes through the document.
#[derive(Clone, Copy)]
pub struct Item<'d> {
    doc: &'d LazyDoc<'d>,
    start: usize,
    end: usize,
    /// Reached inside a COPY expansion (through a selection), where a further COPY is invalid:
    /// decoding it later must apply the same rule as decoding it during the walk.
    in_copy: bool,
}

impl fmt::Debug for Item<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Item")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("tag", &crate::tag::name(self.tag()))
            .finish()
    }
}

/// A borrowed scalar read straight from the body, without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'d> {
    /// `UNDEF` / `CANONICAL_UNDEF`.
    Undef,
    /// `TRUE`/`FALSE`/`YES`/`NO`.
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// A float (long doubles narrowed to `f64`).
    Float(f64),
    /// A string's bytes; `utf8` is true for `STR_UTF8` (whose bytes may still be invalid UTF-8).
    Str {
        /// The string bytes, borrowed from the body.
        bytes: &'d [u8],
        /// Whether the string was flagged UTF-8.
        utf8: bool,
    },
}

impl<'d> Item<'d> {
    /// Body index of the item's first byte (`Item::as_bytes` is `body[start..end]`).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Body index just past the item.
    pub fn end(&self) -> usize {
        self.end
    }

    /// The item's bytes in the body, undecoded.
    pub fn as_bytes(&self) -> &'d [u8] {
        &self.doc.body[self.start..self.end]
    }

    /// The item's first tag byte (track flag included; may be `PAD`).
    pub fn tag(&self) -> u8 {
        self.doc.body[self.start]
    }

    /// The document this item belongs to.
    pub fn doc(&self) -> &'d LazyDoc<'d> {
        self.doc
    }

    /// Decode the whole item, exactly as the full decoder would decode it at this place.
    pub fn decode(&self) -> Result<Value> {
        let mut m = self.doc.parser();
        m.value_at(self.start, self.in_copy).map(|(v, _)| v)
    }

    /// The values at `path` (several for `[*]`, none if the path does not match).
    pub fn get(&self, path: &Path) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        walk(
            self,
            std::slice::from_ref(path),
            &mut stack,
            ValueEmit(self.doc.parser()),
            &mut out,
        )?;
        Ok(out.pop().unwrap_or_default())
    }

    /// The values at each of `paths`, in one pass over the item: `result[i]` holds the values at
    /// `paths[i]`, in document order. Stops reading as soon as nothing more can match. For many
    /// items, a [`Selector`] reuses its buffers between calls.
    pub fn select(&self, paths: &[Path]) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        walk(
            self,
            paths,
            &mut stack,
            ValueEmit(self.doc.parser()),
            &mut out,
        )?;
        Ok(out)
    }

    /// Like [`Item::select`] but returns undecoded handles instead of values (for cheap scalar
    /// reads and comparisons, or decoding only some of them).
    pub fn select_items(&self, paths: &[Path]) -> Result<Vec<Vec<Item<'d>>>> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        walk(self, paths, &mut stack, ItemEmit, &mut out)?;
        Ok(out)
    }

    /// The value under `key` when this item is a hash (or a reference to / object wrapping one),
    /// as an undecoded handle; `None` if the key is missing or this is not a hash.
    pub fn field(&self, key: &str) -> Result<Option<Item<'d>>> {
        let d = self.doc;
        let mut depth = 0;
        let Core::Hash(n, mut p) = d.resolve(self.start, &mut depth, &mut None, &mut false)? else {
            return Ok(None);
        };
        for _ in 0..n {
            let (k, _, after) = d.key_at(p)?;
            if k == key.as_bytes() {
                return Ok(Some(Item {
                    doc: d,
                    start: after,
                    end: d.skip_n(after, 1)?,
                    in_copy: false,
                }));
            }
            p = d.skip_n(after, 1)?;
        }
        Ok(None)
    }

    /// Element `index` (negative counts from the end) when this item is an array (or a reference
    /// to / object wrapping one); `None` if out of range or not an array.
    pub fn element(&self, index: i64) -> Result<Option<Item<'d>>> {
        let d = self.doc;
        let mut depth = 0;
        let Core::Array(n, first) = d.resolve(self.start, &mut depth, &mut None, &mut false)?
        else {
            return Ok(None);
        };
        let Some(i) = resolve_index(index, n) else {
            return Ok(None);
        };
        let start = d.skip_n(first, i)?;
        Ok(Some(Item {
            doc: d,
            start,
            end: d.skip_n(start, 1)?,
            in_copy: false,
        }))
    }

    /// The elements of this item when it is an array (or a reference to / object wrapping one),
    /// as undecoded handles; `None` if it is not an array.
    pub fn elements(&self) -> Result<Option<Items<'d>>> {
        let mut depth = 0;
        Ok(
            match self
                .doc
                .resolve(self.start, &mut depth, &mut None, &mut false)?
            {
                Core::Array(n, first) => Some(Items {
                    doc: self.doc,
                    pos: first,
                    remaining: n,
                    failed: false,
                    bounds: &[],
                }),
                _ => None,
            },
        )
    }

    /// The entries of this item when it is a hash (or a reference to / object wrapping one), as
    /// (key bytes, undecoded value) pairs; `None` if it is not a hash.
    pub fn entries(&self) -> Result<Option<Entries<'d>>> {
        let mut depth = 0;
        Ok(
            match self
                .doc
                .resolve(self.start, &mut depth, &mut None, &mut false)?
            {
                Core::Hash(n, first) => Some(Entries {
                    doc: self.doc,
                    pos: first,
                    remaining: n,
                    failed: false,
                }),
                _ => None,
            },
        )
    }

    /// The item as a borrowed scalar, looking through what `Value::resolve` looks through (`PAD`,
    /// `ALIAS`, `COPY`, `WEAKEN`, the track bit); `None` for containers, references, objects and
    /// regexps.
    pub fn scalar(&self) -> Result<Option<Scalar<'d>>> {
        let d = self.doc;
        let at = d.resolve_scalar(self.start)?;
        let tag = d.body[at] & !TRACK_FLAG;
        let mut p = at + 1;
        Ok(Some(match tag {
            0x00..=0x0f => Scalar::Int(tag as i64),
            0x10..=0x1f => Scalar::Int(tag as i64 - 32),
            VARINT => {
                let v = d.varint_at(&mut p)?;
                match i64::try_from(v) {
                    Ok(i) => Scalar::Int(i),
                    Err(_) => Scalar::UInt(v),
                }
            }
            ZIGZAG => Scalar::Int(varint::unzigzag(d.varint_at(&mut p)?)),
            UNDEF | CANONICAL_UNDEF => Scalar::Undef,
            TRUE | YES => Scalar::Bool(true),
            FALSE | NO => Scalar::Bool(false),
            FLOAT | DOUBLE | LONG_DOUBLE | FLOAT_128 => {
                match d.parser().value_at(at, false)?.0.resolve() {
                    Value::Float(f) => Scalar::Float(*f),
                    _ => return Ok(None),
                }
            }
            BINARY | STR_UTF8 | SHORT_BINARY_0..=0x7f => match d.string_at(at)? {
                Some((bytes, utf8, _)) => Scalar::Str { bytes, utf8 },
                None => return Ok(None),
            },
            _ => return Ok(None),
        }))
    }

    /// The bytes of a string item (see [`Item::scalar`]), borrowed from the body.
    pub fn str_bytes(&self) -> Result<Option<&'d [u8]>> {
        Ok(match self.scalar()? {
            Some(Scalar::Str { bytes, .. }) => Some(bytes),
            _ => None,
        })
    }

    /// The text of a string item whose bytes are valid UTF-8, borrowed from the body.
    pub fn as_str(&self) -> Result<Option<&'d str>> {
        Ok(self.str_bytes()?.and_then(|b| std::str::from_utf8(b).ok()))
    }

    /// Whether this item is a string equal to `s` (byte comparison, no allocation).
    pub fn str_eq(&self, s: &str) -> Result<bool> {
        Ok(self.str_bytes()? == Some(s.as_bytes()))
    }

    /// The item as an `i64`, if it is an integer that fits.
    pub fn as_i64(&self) -> Result<Option<i64>> {
        Ok(match self.scalar()? {
            Some(Scalar::Int(i)) => Some(i),
            Some(Scalar::UInt(u)) => i64::try_from(u).ok(),
            _ => None,
        })
    }

    /// The item as an `f64`, for any number.
    pub fn as_f64(&self) -> Result<Option<f64>> {
        Ok(match self.scalar()? {
            Some(Scalar::Int(i)) => Some(i as f64),
            Some(Scalar::UInt(u)) => Some(u as f64),
            Some(Scalar::Float(f)) => Some(f),
            _ => None,
        })
    }

    /// The item as a boolean, if it is one (`TRUE`/`FALSE`/`YES`/`NO`).
    pub fn as_bool(&self) -> Result<Option<bool>> {
        Ok(match self.scalar()? {
            Some(Scalar::Bool(b)) => Some(b),
            _ => None,
        })
    }
}

/// Decodes [`Item`]s of one document (e.g. what [`Selector::next_selected`] picked) into
/// [`Value`]s, exactly as [`Item::decode`] would, but with one budget for all of them: what they
/// materialise together is bounded by [`Limits::max_values`] and
/// [`Limits::max_total_string_bytes`], as for one [`Selector::select_into`] call. Make one per
/// event; it allocates nothing until it decodes.
pub struct ItemDecoder<'d> {
    parser: Parser<'d, 'd>,
}

impl fmt::Debug for ItemDecoder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemDecoder").finish_non_exhaustive()
    }
}

impl<'d> ItemDecoder<'d> {
    /// Decode `item` (an item of the document this decoder was made for).
    pub fn decode(&mut self, item: &Item<'d>) -> Result<Value> {
        self.parser
            .value_at(item.start, item.in_copy)
            .map(|(v, _)| v)
    }
}

/// Where each of `count` consecutive values starting at `elements[0]` starts, walking them
/// (structural checks only); positions are offset by `base`. `None` if they do not walk.
pub(crate) fn element_starts(elements: &[u8], base: usize, count: usize) -> Option<Vec<usize>> {
    let doc = LazyDoc {
        header: Header {
            version: crate::header::MAX_PROTOCOL,
            encoding: crate::header::Encoding::Raw,
            body_offset: 0,
            user_header: None,
        },
        body: elements,
        offset_base: 1,
        error_base: 0,
        limits: Limits::default(),
        id: 0,
        bounds: Vec::new(),
        index_use: IndexUse::Absent,
    };
    let mut starts = Vec::with_capacity(count);
    let mut pos = 0;
    for _ in 0..count {
        starts.push(pos + base);
        pos = doc.skip_n(pos, 1).ok()?;
    }
    Some(starts)
}

/// Iterator over the elements of an array, as undecoded [`Item`]s. After an error it ends.
#[derive(Debug, Clone)]
pub struct Items<'d> {
    doc: &'d LazyDoc<'d>,
    pos: usize,
    remaining: usize,
    failed: bool,
    /// Element bounds from the document's element index (top-level array only), or empty: then
    /// each element is walked to find where it ends.
    bounds: &'d [u32],
}

impl<'d> Items<'d> {
    /// The end of the next element when the element index gives it (no walk needed).
    #[inline]
    fn indexed_end(&self) -> Option<usize> {
        let i = self.bounds.len().checked_sub(self.remaining)?;
        self.bounds.get(i).map(|&e| e as usize)
    }
}

impl<'d> Iterator for Items<'d> {
    type Item = Result<Item<'d>>;

    fn next(&mut self) -> Option<Result<Item<'d>>> {
        if self.remaining == 0 || self.failed {
            return None;
        }
        let start = self.pos;
        let end = match self.indexed_end() {
            Some(end) => Ok(end),
            None => self.doc.skip_n(start, 1),
        };
        match end {
            Ok(end) => {
                self.pos = end;
                self.remaining -= 1;
                Some(Ok(Item {
                    doc: self.doc,
                    start,
                    end,
                    in_copy: false,
                }))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            (0, Some(self.remaining))
        }
    }
}

impl Items<'_> {
    /// Elements not yet yielded, as declared by the array's count.
    pub fn remaining(&self) -> usize {
        if self.failed {
            0
        } else {
            self.remaining
        }
    }
}

/// Iterator over the entries of a hash, as (key bytes, undecoded value) pairs. After an error it
/// ends.
#[derive(Debug, Clone)]
pub struct Entries<'d> {
    doc: &'d LazyDoc<'d>,
    pos: usize,
    remaining: usize,
    failed: bool,
}

impl<'d> Iterator for Entries<'d> {
    type Item = Result<(&'d [u8], Item<'d>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 || self.failed {
            return None;
        }
        let r = self.doc.key_at(self.pos).and_then(|(k, _, start)| {
            let end = self.doc.skip_n(start, 1)?;
            Ok((
                k,
                Item {
                    doc: self.doc,
                    start,
                    end,
                    in_copy: false,
                },
            ))
        });
        match r {
            Ok((k, item)) => {
                self.pos = item.end;
                self.remaining -= 1;
                Some(Ok((k, item)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            (0, Some(self.remaining))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Selection: one pass over an item for many paths
// ---------------------------------------------------------------------------------------------

/// A reusable multi-path selection: holds the paths and the buffers of the walk, so that
/// selecting from many items allocates only for the values it returns.
#[derive(Debug, Clone)]
pub struct Selector {
    paths: Vec<Path>,
    stack: Vec<Cursor>,
    /// The paths as a tree of keys, when they are all plain key paths (`a.b.c`): the fast walk
    /// of [`Selector::next_selected`].
    plan: Option<KeyPlan>,
}

impl Selector {
    /// A selector for `paths`.
    pub fn new(paths: Vec<Path>) -> Selector {
        let plan = KeyPlan::build(&paths);
        Selector {
            paths,
            stack: Vec::new(),
            plan,
        }
    }

    /// Parse each of `paths` (see [`Path::parse`]) into a selector.
    pub fn parse<S: AsRef<str>>(paths: &[S]) -> Result<Selector> {
        let paths = paths
            .iter()
            .map(|p| Path::parse(p.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Selector::new(paths))
    }

    /// The paths selected.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    /// The values at each path in `item` (see [`Item::select`]).
    pub fn select(&mut self, item: &Item<'_>) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::new();
        self.select_into(item, &mut out)?;
        Ok(out)
    }

    /// Like [`Selector::select`], writing into `out` (resized to one `Vec` per path; the inner
    /// vectors are cleared and keep their capacity).
    pub fn select_into(&mut self, item: &Item<'_>, out: &mut Vec<Vec<Value>>) -> Result<()> {
        walk(
            item,
            &self.paths,
            &mut self.stack,
            ValueEmit(item.doc.parser()),
            out,
        )
    }

    /// Like [`Selector::select`] but yielding undecoded handles.
    pub fn select_items<'d>(&mut self, item: &Item<'d>) -> Result<Vec<Vec<Item<'d>>>> {
        let mut out = Vec::new();
        walk(item, &self.paths, &mut self.stack, ItemEmit, &mut out)?;
        Ok(out)
    }

    /// The next element of `items` together with undecoded handles of the values at each path
    /// in it (`out[i]` for path `i`, as [`Selector::select_items`] gives them), in **one** pass
    /// over the element: `items.next()` followed by `select_items` reads each element twice,
    /// once to find where it ends and once to select. This is the hot loop of a filtered read:
    /// evaluate a filter on some handles, and decode the others (with an [`ItemDecoder`]) only
    /// for elements that pass.
    ///
    /// Plain key paths (`a.b.c`) take a specialised walk that identifies each hash key once per
    /// document (by the offset a COPY'd key points to) and skips everything else by length.
    /// After an error, as with [`Items`], the iteration ends.
    pub fn next_selected<'d>(
        &mut self,
        items: &mut Items<'d>,
        out: &mut Vec<Vec<Item<'d>>>,
    ) -> Option<Result<Item<'d>>> {
        if items.remaining == 0 || items.failed {
            return None;
        }
        let doc = items.doc;
        let start = items.pos;
        let known_end = items.indexed_end();
        out.resize_with(self.paths.len(), Vec::new);
        out.iter_mut().for_each(Vec::clear);
        let r = match &mut self.plan {
            Some(plan) => plan.select(doc, start, known_end, out),
            None => self.walk_items(doc, start, known_end, out),
        };
        match r {
            Ok(end) => {
                items.pos = end;
                items.remaining -= 1;
                Some(Ok(Item {
                    doc,
                    start,
                    end,
                    in_copy: false,
                }))
            }
            Err(e) => {
                items.failed = true;
                Some(Err(e))
            }
        }
    }

    /// Undecoded handles of the values at each path in `item` (`out[i]` for path `i`; `out` is
    /// resized and its vectors cleared), by the same walk as [`Selector::next_selected`] but
    /// stopping as soon as every path is found: `item`'s end is already known. For a second
    /// selection from an element that passed a filter selected first.
    pub fn select_handles<'d>(
        &mut self,
        item: &Item<'d>,
        out: &mut Vec<Vec<Item<'d>>>,
    ) -> Result<()> {
        out.resize_with(self.paths.len(), Vec::new);
        out.iter_mut().for_each(Vec::clear);
        let (doc, start, end) = (item.doc, item.start, Some(item.end));
        match &mut self.plan {
            Some(plan) => plan.select(doc, start, end, out)?,
            None => self.walk_items(doc, start, end, out)?,
        };
        Ok(())
    }

    /// The general walk with handles as output, also finding the end of the item at `start`
    /// (unless `known_end` gives it: then the walk stops when nothing more can match).
    fn walk_items<'d>(
        &mut self,
        doc: &'d LazyDoc<'d>,
        start: usize,
        known_end: Option<usize>,
        out: &mut Vec<Vec<Item<'d>>>,
    ) -> Result<usize> {
        if self.paths.len() > u32::MAX as usize {
            return Err(doc.err(ErrorCode::BadPath("too many paths".into()), start));
        }
        self.stack.clear();
        self.stack.extend((0..self.paths.len()).map(|i| Cursor {
            path: i as u32,
            step: 0,
            done: false,
        }));
        let visits_left = doc.limits.max_values;
        let mut w = Walker {
            doc,
            paths: &self.paths,
            stack: &mut self.stack,
            emit: ItemEmit,
            out,
            visits_left,
        };
        let hi = w.stack.len();
        let need_end = known_end.is_none();
        match (w.node(start, 0, hi, need_end, 0, false)?, known_end) {
            (_, Some(end)) => Ok(end),
            (Some(end), None) => Ok(end),
            (None, None) => doc.skip_n(start, 1),
        }
    }
}

/// Selection of plain key paths as a tree of keys: node 0 is the item itself, each node's
/// children are the keys looked up in the hash it resolves to, and a node ends the paths listed
/// in its `ends`. Same semantics as [`Walker`] with [`ItemEmit`] (first matching key only,
/// wrappers looked through), specialised: no cursor stack, and hash keys are identified through
/// a per-document cache instead of compared byte by byte against every path.
#[derive(Debug, Clone)]
struct KeyPlan {
    nodes: Vec<PlanNode>,
    /// Key cache: [`KEY_CACHE_SLOTS`] slots per node, `(body index of a COPY'd key + 1, child)`;
    /// valid for the document `cache_doc`. `NO_CHILD` caches a key that is none of the node's.
    cache: Vec<(usize, u32)>,
    /// Per node and pair number (the first [`MEMO_PAIRS`]), the last COPY'd key seen there.
    /// Events of one stream list their keys in the same order, so this usually names the key
    /// before it is read: the key's bytes are compared as one word, and where its value starts
    /// is known without waiting for the varint to be decoded.
    memo: Vec<MemoSlot>,
    cache_doc: u64,
    visits_left: usize,
}

#[derive(Debug, Clone, Default)]
struct PlanNode {
    /// Paths (indexes into the selector's paths) that end at this node.
    ends: Vec<u32>,
    /// Keys looked up under this node, and the node each leads to.
    children: Vec<(Box<[u8]>, u32)>,
}

/// Slots of the key cache per plan node (a power of two): an event has a few dozen distinct
/// keys, and a collision only costs a re-comparison.
const KEY_CACHE_SLOTS: usize = 64;
/// Most keys under one node for the plan (a bit set of found keys per hash).
const MAX_PLAN_CHILDREN: usize = 64;
const NO_CHILD: u32 = u32::MAX;
/// A key remembered by [`KeyPlan::memo`]: its encoding (the COPY tag and offset varint, at
/// most 4 bytes, little-endian in `raw`, `mask` covering its `len` bytes), the body index the
/// offset names, and which child it is.
#[derive(Debug, Clone, Copy)]
struct MemoSlot {
    raw: u32,
    mask: u32,
    len: u8,
    idx: usize,
    child: u32,
}

/// A slot that matches nothing (`raw & 0` is never 1).
const EMPTY_MEMO: MemoSlot = MemoSlot {
    raw: 1,
    mask: 0,
    len: 0,
    idx: 0,
    child: NO_CHILD,
};

/// Pairs per hash with a [`KeyPlan::memo`] slot.
const MEMO_PAIRS: usize = 32;

impl KeyPlan {
    /// The plan of `paths`, or `None` when one has an index or wildcard step (or a node would
    /// have too many keys): those take the general walk.
    fn build(paths: &[Path]) -> Option<KeyPlan> {
        if paths.is_empty() || paths.len() > u32::MAX as usize / 2 {
            return None;
        }
        let mut nodes = vec![PlanNode::default()];
        for (i, path) in paths.iter().enumerate() {
            let mut node = 0usize;
            for step in &path.steps {
                let Step::Key(k) = step else { return None };
                let found = nodes[node]
                    .children
                    .iter()
                    .find(|(key, _)| **key == *k.as_bytes())
                    .map(|&(_, n)| n);
                node = match found {
                    Some(n) => n as usize,
                    None => {
                        if nodes[node].children.len() >= MAX_PLAN_CHILDREN {
                            return None;
                        }
                        let n = u32::try_from(nodes.len()).ok()?;
                        nodes[node].children.push((k.as_bytes().into(), n));
                        nodes.push(PlanNode::default());
                        n as usize
                    }
                };
            }
            nodes[node].ends.push(i as u32);
        }
        let cache = vec![(0, NO_CHILD); nodes.len() * KEY_CACHE_SLOTS];
        let memo = vec![EMPTY_MEMO; nodes.len() * MEMO_PAIRS];
        Some(KeyPlan {
            nodes,
            cache,
            memo,
            cache_doc: 0,
            visits_left: 0,
        })
    }

    /// Select from the item at `start` into `out` (sized and cleared); returns the item's end
    /// (`known_end` when given: then the walk stops as soon as nothing more can match).
    fn select<'d>(
        &mut self,
        doc: &'d LazyDoc<'d>,
        start: usize,
        known_end: Option<usize>,
        out: &mut [Vec<Item<'d>>],
    ) -> Result<usize> {
        if self.cache_doc != doc.id {
            self.cache.fill((0, NO_CHILD));
            self.memo.fill(EMPTY_MEMO);
            self.cache_doc = doc.id;
        }
        self.visits_left = doc.limits.max_values;
        let need_end = known_end.is_none();
        match (
            self.node(doc, 0, start, need_end, 0, false, out)?,
            known_end,
        ) {
            (_, Some(end)) => Ok(end),
            (Some(end), None) => Ok(end),
            (None, None) => doc.skip_n(start, 1),
        }
    }

    /// [`Walker::node`] for plan node `node` at `pos`.
    #[allow(clippy::too_many_arguments)]
    fn node<'d>(
        &mut self,
        d: &'d LazyDoc<'d>,
        node: u32,
        pos: usize,
        need_end: bool,
        mut depth: usize,
        in_copy: bool,
        out: &mut [Vec<Item<'d>>],
    ) -> Result<Option<usize>> {
        if self.visits_left == 0 {
            return Err(d.err(ErrorCode::TotalValuesLimit(d.limits.max_values), pos));
        }
        self.visits_left -= 1;
        let n = &self.nodes[node as usize];
        let mut known_end = None;
        if !n.ends.is_empty() {
            let end = d.skip_one(pos)?;
            for &p in &n.ends {
                out[p as usize].push(Item {
                    doc: d,
                    start: pos,
                    end,
                    in_copy,
                });
            }
            known_end = Some(end);
        }
        if n.children.is_empty() {
            return Ok(match known_end {
                Some(e) => Some(e),
                None if need_end => Some(d.skip_n(pos, 1)?),
                None => None,
            });
        }
        let mut jumped = None;
        let mut in_copy = in_copy;
        let core = d.resolve(pos, &mut depth, &mut jumped, &mut in_copy)?;
        let known_end = known_end.or(jumped);
        let need_end = need_end && known_end.is_none();
        let end = match core {
            Core::Hash(count, first) => {
                self.hash(d, node, count, first, need_end, depth, pos, in_copy, out)?
            }
            Core::Array(..) => {
                // A key does not apply to an array; the depth check is the general walk's.
                d.check_depth(depth + 1, pos)?;
                None
            }
            Core::Other => None,
        };
        Ok(match known_end.or(end) {
            Some(e) => Some(e),
            None if need_end => Some(d.skip_n(pos, 1)?),
            None => None,
        })
    }

    /// [`Walker::hash`] for the children of `node`.
    #[allow(clippy::too_many_arguments)]
    fn hash<'d>(
        &mut self,
        d: &'d LazyDoc<'d>,
        node: u32,
        count: usize,
        first: usize,
        need_end: bool,
        depth: usize,
        at: usize,
        in_copy: bool,
        out: &mut [Vec<Item<'d>>],
    ) -> Result<Option<usize>> {
        let depth = depth + 1;
        d.check_depth(depth, at)?;
        let mut keys_left = self.nodes[node as usize].children.len();
        let mut found = 0u64;
        let mut e = first;
        let mut pair = 0;
        while pair < count {
            // Most pairs of an event are keys no path wants, named by the memo: skip them in a
            // tight loop (half the instructions of the general step below, which does the same
            // for them). Anything else — a wanted key, a memo miss, the last pair, an odd value —
            // leaves it for the general step, which also reports errors.
            let memo = node as usize * MEMO_PAIRS;
            while pair + 1 < count && pair < MEMO_PAIRS {
                let Some(&m) = self.memo.get(memo + pair) else {
                    break;
                };
                let Some(w) = d.body.get(e..e + 4) else { break };
                let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if m.child != NO_CHILD || w & m.mask != m.raw || m.idx >= e {
                    break;
                }
                match d.skip_one(e + m.len as usize) {
                    Ok(end) => e = end,
                    Err(_) => break,
                }
                pair += 1;
            }
            let (child, value_at) = self.key(d, node, pair, e)?;
            let hit = child != NO_CHILD && found & (1 << child) == 0;
            if hit {
                found |= 1 << child;
                keys_left -= 1;
            }
            let more_wanted = keys_left > 0 && pair + 1 < count;
            if !hit {
                if !more_wanted && !need_end {
                    return Ok(None);
                }
                e = d.skip_one(value_at)?;
            } else {
                let next = self.nodes[node as usize].children[child as usize].1;
                let target = &self.nodes[next as usize];
                if target.children.is_empty() {
                    // Paths end here and go no deeper (most do): `node`'s work, inline.
                    if self.visits_left == 0 {
                        return Err(
                            d.err(ErrorCode::TotalValuesLimit(d.limits.max_values), value_at)
                        );
                    }
                    self.visits_left -= 1;
                    let end = d.skip_one(value_at)?;
                    for &p in &target.ends {
                        out[p as usize].push(Item {
                            doc: d,
                            start: value_at,
                            end,
                            in_copy,
                        });
                    }
                    e = end;
                } else {
                    let child_need = need_end || more_wanted;
                    match self.node(d, next, value_at, child_need, depth, in_copy, out)? {
                        Some(end) if child_need => e = end,
                        _ => return Ok(None),
                    }
                }
            }
            if !more_wanted {
                if !need_end {
                    return Ok(None);
                }
                // Nothing more to find here: skip the remaining pairs in one go.
                let rest = (count - pair - 1).checked_mul(2).ok_or_else(|| d.eof())?;
                return Ok(Some(d.skip_n(e, rest)?));
            }
            pair += 1;
        }
        Ok(Some(e))
    }

    /// The hash key at `pos` (validated as [`LazyDoc::key_at`] does): which child of `node` it
    /// names (`NO_CHILD` for none), and the position of its value.
    #[inline]
    fn key(&mut self, d: &LazyDoc<'_>, node: u32, pair: usize, pos: usize) -> Result<(u32, usize)> {
        let body = d.body;
        let memo = node as usize * MEMO_PAIRS + pair;
        let word = body
            .get(pos..pos + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        if pair < MEMO_PAIRS {
            if let (Some(m), Some(w)) = (self.memo.get(memo), word) {
                // The same bytes name the same offset; it must still point backwards from here.
                if w & m.mask == m.raw && m.idx < pos {
                    return Ok((m.child, pos + m.len as usize));
                }
            }
        }
        let tag = d.byte_at(pos)? & !TRACK_FLAG;
        if tag == COPY {
            // The offset: one or two varint bytes inline (keys near the start of the body).
            let (idx, p) = match (body.get(pos + 1), body.get(pos + 2)) {
                (Some(&b1), _) if b1 < 0x80 => (d.back_offset(b1 as u64, pos)?, pos + 2),
                (Some(&b1), Some(&b2)) if b2 < 0x80 => (
                    d.back_offset((b1 & 0x7f) as u64 | (b2 as u64) << 7, pos)?,
                    pos + 3,
                ),
                _ => {
                    let mut p = pos + 1;
                    let offset = d.varint_at(&mut p)?;
                    (d.back_offset(offset, pos)?, p)
                }
            };
            // Encoders write every repeated key as a COPY of its first occurrence, so almost
            // every key is identified by the memo or this cache; the target was validated when
            // cached.
            let hash =
                ((idx as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % KEY_CACHE_SLOTS;
            let slot = node as usize * KEY_CACHE_SLOTS + hash;
            let (cached_idx, child) = self.cache[slot];
            let child = if cached_idx == idx + 1 {
                child
            } else {
                let child = match d.string_at(idx)? {
                    Some((bytes, _, _)) => self.child(node, bytes),
                    None => return Err(d.err(ErrorCode::BadKeyTag(d.body[idx] & !TRACK_FLAG), idx)),
                };
                self.cache[slot] = (idx + 1, child);
                child
            };
            let len = p - pos;
            if let (true, Some(w), Some(slot)) =
                (pair < MEMO_PAIRS && len <= 4, word, self.memo.get_mut(memo))
            {
                let mask = u32::MAX >> (32 - 8 * len as u32);
                *slot = MemoSlot {
                    raw: w & mask,
                    mask,
                    len: len as u8,
                    idx,
                    child,
                };
            }
            return Ok((child, p));
        }
        match d.string_at(pos)? {
            Some((bytes, _, end)) => Ok((self.child(node, bytes), end)),
            None => Err(d.err(ErrorCode::BadKeyTag(tag), pos)),
        }
    }

    #[inline]
    fn child(&self, node: u32, key: &[u8]) -> u32 {
        self.nodes[node as usize]
            .children
            .iter()
            .position(|(k, _)| **k == *key)
            .map_or(NO_CHILD, |i| i as u32)
    }
}

/// A path being followed: which path, how many steps are done, and (for key steps inside the
/// current hash) whether it already matched — only the first entry with a key counts.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    path: u32,
    step: u32,
    done: bool,
}

/// What to produce for a matched item.
trait Emit<'d> {
    type Out;
    /// Produce the output for the item at `pos`, and the position after the item.
    /// `in_copy`: the item is read as part of a COPY expansion (where a further COPY is invalid).
    fn emit(
        &mut self,
        doc: &'d LazyDoc<'d>,
        pos: usize,
        in_copy: bool,
    ) -> Result<(Self::Out, usize)>;
}

struct ValueEmit<'d>(Parser<'d, 'd>);

impl<'d> Emit<'d> for ValueEmit<'d> {
    type Out = Value;
    fn emit(&mut self, _doc: &'d LazyDoc<'d>, pos: usize, in_copy: bool) -> Result<(Value, usize)> {
        self.0.value_at(pos, in_copy)
    }
}

struct ItemEmit;

impl<'d> Emit<'d> for ItemEmit {
    type Out = Item<'d>;
    fn emit(
        &mut self,
        doc: &'d LazyDoc<'d>,
        pos: usize,
        in_copy: bool,
    ) -> Result<(Item<'d>, usize)> {
        let end = doc.skip_n(pos, 1)?;
        Ok((
            Item {
                doc,
                start: pos,
                end,
                in_copy,
            },
            end,
        ))
    }
}

fn walk<'d, E: Emit<'d>>(
    item: &Item<'d>,
    paths: &[Path],
    stack: &mut Vec<Cursor>,
    emit: E,
    out: &mut Vec<Vec<E::Out>>,
) -> Result<()> {
    out.resize_with(paths.len(), Vec::new);
    out.iter_mut().for_each(Vec::clear);
    if paths.len() > u32::MAX as usize {
        return Err(item
            .doc
            .err(ErrorCode::BadPath("too many paths".into()), item.start));
    }
    stack.clear();
    stack.extend((0..paths.len()).map(|i| Cursor {
        path: i as u32,
        step: 0,
        done: false,
    }));
    let visits_left = item.doc.limits.max_values;
    let mut w = Walker {
        doc: item.doc,
        paths,
        stack,
        emit,
        out,
        visits_left,
    };
    let hi = w.stack.len();
    w.node(item.start, 0, hi, false, 0, false)?;
    Ok(())
}

struct Walker<'d, 'w, E: Emit<'d>> {
    doc: &'d LazyDoc<'d>,
    paths: &'w [Path],
    stack: &'w mut Vec<Cursor>,
    emit: E,
    out: &'w mut Vec<Vec<E::Out>>,
    /// Items this walk may still visit. Back-references can make a document a DAG whose paths
    /// (`[*][*]…` through doubling REFPs) are exponentially many; this bounds the work.
    visits_left: usize,
}

impl<'d, E: Emit<'d>> Walker<'d, '_, E> {
    #[inline]
    fn step_of(&self, c: Cursor) -> Option<&Step> {
        self.paths[c.path as usize].steps.get(c.step as usize)
    }

    /// Visit the item at `pos` with the cursors `stack[lo..hi]`. Returns the position after the
    /// item when `need_end` (or when it is known anyway), else possibly `None` — the caller then
    /// stops, nothing more being wanted.
    fn node(
        &mut self,
        pos: usize,
        lo: usize,
        hi: usize,
        need_end: bool,
        mut depth: usize,
        in_copy: bool,
    ) -> Result<Option<usize>> {
        let d = self.doc;
        if self.visits_left == 0 {
            return Err(d.err(ErrorCode::TotalValuesLimit(d.limits.max_values), pos));
        }
        self.visits_left -= 1;
        let mut known_end = None;
        let mut stepping = false;
        for i in lo..hi {
            let c = self.stack[i];
            if self.step_of(c).is_none() {
                let (v, end) = self.emit.emit(d, pos, in_copy)?;
                self.out[c.path as usize].push(v);
                known_end = Some(end);
            } else {
                stepping = true;
            }
        }
        if !stepping {
            return Ok(match known_end {
                Some(e) => Some(e),
                None if need_end => Some(d.skip_n(pos, 1)?),
                None => None,
            });
        }
        let mut jumped = None;
        let mut in_copy = in_copy;
        let core = d.resolve(pos, &mut depth, &mut jumped, &mut in_copy)?;
        let known_end = known_end.or(jumped);
        // The container's own end is needed only if the item's end is and is not known yet.
        let need_end = need_end && known_end.is_none();
        let end = match core {
            Core::Array(n, first) => self.array(n, first, lo, hi, need_end, depth, pos, in_copy)?,
            Core::Hash(n, first) => self.hash(n, first, lo, hi, need_end, depth, pos, in_copy)?,
            Core::Other => None,
        };
        Ok(match known_end.or(end) {
            Some(e) => Some(e),
            None if need_end => Some(d.skip_n(pos, 1)?),
            None => None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn array(
        &mut self,
        n: usize,
        first: usize,
        lo: usize,
        hi: usize,
        need_end: bool,
        depth: usize,
        at: usize,
        in_copy: bool,
    ) -> Result<Option<usize>> {
        let d = self.doc;
        let depth = depth + 1;
        d.check_depth(depth, at)?;
        // The last element any cursor wants.
        let mut last: Option<usize> = None;
        let mut wildcard = false;
        for i in lo..hi {
            let want = match self.step_of(self.stack[i]) {
                Some(Step::Wildcard) => {
                    wildcard = true;
                    n.checked_sub(1)
                }
                Some(Step::Index(k)) => resolve_index(*k, n),
                _ => None,
            };
            last = last.max(want);
        }
        let Some(last) = last else { return Ok(None) };
        let mut e = first;
        let mut i = 0;
        while i <= last {
            if !wildcard {
                // Jump straight to the next element some index wants.
                let mut next = last;
                for j in lo..hi {
                    if let Some(Step::Index(k)) = self.step_of(self.stack[j]) {
                        if let Some(x) = resolve_index(*k, n).filter(|&x| x >= i) {
                            next = next.min(x);
                        }
                    }
                }
                e = d.skip_n(e, next - i)?;
                i = next;
            }
            let base = self.stack.len();
            for j in lo..hi {
                let c = self.stack[j];
                let hit = match self.step_of(c) {
                    Some(Step::Wildcard) => true,
                    Some(Step::Index(k)) => resolve_index(*k, n) == Some(i),
                    _ => false,
                };
                if hit {
                    self.stack.push(Cursor {
                        path: c.path,
                        step: c.step + 1,
                        done: false,
                    });
                }
            }
            let top = self.stack.len();
            let child_need = need_end || i < last;
            let r = self.node(e, base, top, child_need, depth, in_copy);
            self.stack.truncate(base);
            match r? {
                Some(next) => e = next,
                None => return Ok(None),
            }
            i += 1;
        }
        if !need_end {
            return Ok(None);
        }
        Ok(Some(d.skip_n(e, n - last - 1)?))
    }

    #[allow(clippy::too_many_arguments)]
    fn hash(
        &mut self,
        n: usize,
        first: usize,
        lo: usize,
        hi: usize,
        need_end: bool,
        depth: usize,
        at: usize,
        in_copy: bool,
    ) -> Result<Option<usize>> {
        let d = self.doc;
        let depth = depth + 1;
        d.check_depth(depth, at)?;
        let mut wildcard = false;
        let mut keys_left = 0usize;
        for i in lo..hi {
            self.stack[i].done = false;
            match self.step_of(self.stack[i]) {
                Some(Step::Wildcard) => wildcard = true,
                Some(Step::Key(_)) => keys_left += 1,
                _ => {}
            }
        }
        if !wildcard && keys_left == 0 {
            return Ok(None);
        }
        let mut e = first;
        for pair in 0..n {
            let (key, _, value_at) = d.key_at(e)?;
            let base = self.stack.len();
            for j in lo..hi {
                let c = self.stack[j];
                let hit = match self.step_of(c) {
                    Some(Step::Wildcard) => true,
                    Some(Step::Key(k)) if !c.done && k.as_bytes() == key => {
                        self.stack[j].done = true;
                        keys_left -= 1;
                        true
                    }
                    _ => false,
                };
                if hit {
                    self.stack.push(Cursor {
                        path: c.path,
                        step: c.step + 1,
                        done: false,
                    });
                }
            }
            let more_wanted = (wildcard || keys_left > 0) && pair + 1 < n;
            let top = self.stack.len();
            if top == base {
                if !more_wanted && !need_end {
                    return Ok(None);
                }
                e = d.skip_n(value_at, 1)?;
                continue;
            }
            let child_need = need_end || more_wanted;
            let r = self.node(value_at, base, top, child_need, depth, in_copy);
            self.stack.truncate(base);
            match r? {
                Some(next) if child_need => e = next,
                _ => return Ok(None),
            }
            if !more_wanted && !need_end {
                return Ok(None);
            }
        }
        Ok(Some(e))
    }
}
