//! Paths: parsing and printing `a.b[0]`-style path expressions, and following them through an
//! already decoded [`Value`].

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, ErrorCode, Result};
use crate::value::Value;

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
pub(super) fn resolve_index(i: i64, n: usize) -> Option<usize> {
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
