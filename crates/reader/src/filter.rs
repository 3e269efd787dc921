//! The `--where` language: predicates over paths of an event. The user's guide is
//! `docs/query.md` (shown by `sluice help where`); this module is the one owner of the language.
//!
//! ```text
//! expr    := or
//! or      := and ( ("or" | "||") and )*
//! and     := unary ( ("and" | "&&") unary )*
//! unary   := ("not" | "!") unary | primary
//! primary := "(" expr ")"
//!          | "exists" path
//!          | path op literal            op: == = != < <= > >=
//!          | path "in" "[" literal ("," literal)* "]"      (or "(" … ")")
//!          | path "~" string | path "!~" string     (regular expression search)
//!          | path "contains" string                 (substring search)
//! literal := number | "string" | 'string' | true | false | null
//! path    := as `sereal::Path`: a.b, a[0], a[-1], a[*].b, "key.with.dots".c
//! ```
//!
//! Keywords (`and or not exists in contains true false null`) are matched case-insensitively
//! (`AND` = `and`): where a keyword can stand, a field of that name cannot, so this is never
//! ambiguous (quote such a field: `"and" == 1`). A parse error names its column and, for the
//! common slips (`&`, `=~`, `like`, an unquoted string, …), a [`FilterError::hint`];
//! [`FilterError::render`] shows the expression with a caret under the column.
//!
//! Semantics, chosen to be unsurprising on schema-less events:
//! - A path with `[*]` may match several values; a comparison holds if it holds for **any** of
//!   them. A path that matches nothing makes every comparison false (use `not exists p`).
//! - Numbers compare by value whatever their encoding (integer, float). A string that reads as a
//!   number compares with a number literal as that number (Perl producers often send `"500"`).
//!   Otherwise values of different kinds are not equal and not ordered.
//! - Strings compare by bytes; `~` searches with the `regex` crate's syntax.
//! - `null` matches an undefined value (JSON `null`); booleans equal `true`/`false`.
//!
//! ```
//! use sluice_reader::Filter;
//! let f = Filter::parse(r#"status >= 500 and not path ~ "^/static/""#).unwrap();
//! let event = sereal::json::from_json_slice(br#"{"status":503,"path":"/book"}"#).unwrap();
//! assert!(f.matches(&event));
//! ```

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;

use sereal::{Path, Value};

/// Longest expression accepted, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 64 * 1024;
/// Deepest nesting of parentheses and `not`s accepted.
pub const MAX_NESTING: usize = 64;

/// A parsed `--where` expression.
#[derive(Debug, Clone)]
pub struct Filter {
    expr: Expr,
    paths: Vec<Path>,
    /// The text it was parsed from (so a selection can be passed on as a query or flags).
    text: String,
}

/// Why an expression does not parse: a message, the byte column where it went wrong, and a
/// suggestion when the slip is a common one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// What is wrong.
    pub message: String,
    /// Byte offset in the expression.
    pub column: usize,
    /// What to write instead (e.g. "use `and`"), when known.
    pub hint: Option<String>,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at column {}", self.message, self.column + 1)?;
        if let Some(h) = &self.hint {
            write!(f, "; {h}")?;
        }
        Ok(())
    }
}

impl FilterError {
    /// The error over several lines: the message, the expression, a caret under the column,
    /// and the hint (for a terminal; [`Display`](fmt::Display) is the one-line form).
    pub fn render(&self, expression: &str) -> String {
        let shown: String = expression
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let col = expression
            .get(..self.column.min(expression.len()))
            .map_or(0, |s| s.chars().count());
        let mut out = format!(
            "{} at column {}\n  {shown}\n  {}^",
            self.message,
            col + 1,
            " ".repeat(col)
        );
        if let Some(h) = &self.hint {
            out.push_str(&format!("\n  hint: {h}"));
        }
        out.push_str("\n  (the language: `sluice help where`)");
        out
    }
}

impl std::error::Error for FilterError {}

#[derive(Debug, Clone)]
enum Expr {
    Or(Vec<Expr>),
    And(Vec<Expr>),
    Not(Box<Expr>),
    Exists(usize),
    Compare(usize, Op, Literal),
    In(usize, Vec<Literal>),
    Matches(usize, Box<regex::bytes::Regex>, bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Null,
    Bool(bool),
    Number(f64),
    Str(String),
}

impl Filter {
    /// Parse an expression.
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        if text.len() > MAX_EXPRESSION_BYTES {
            return Err(FilterError {
                message: format!("expression longer than {MAX_EXPRESSION_BYTES} bytes"),
                column: 0,
                hint: None,
            });
        }
        let mut p = Parser {
            text,
            pos: 0,
            paths: Vec::new(),
            depth: 0,
        };
        let expr = p.or()?;
        p.ws();
        if p.pos < text.len() {
            let hint = after_expression_hint(p.rest());
            return Err(p
                .error("unexpected text after the expression")
                .with_hint(hint));
        }
        Ok(Filter {
            expr,
            paths: p.paths,
            text: text.to_owned(),
        })
    }

    /// The expression as it was given to [`Filter::parse`].
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The paths the expression reads, in the order [`Filter::matches_selected`] expects their
    /// values: select these lazily, then evaluate without decoding the rest of the event.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    /// The comparisons with a literal: `(index in [`Filter::paths`], literal kind, operator
    /// text)` per `path op literal` / `in` item, for hints about mismatched kinds (e.g. a
    /// number field compared with a string).
    pub fn comparisons(&self) -> Vec<(usize, LiteralKind, &'static str)> {
        let mut out = Vec::new();
        collect_comparisons(&self.expr, &mut out);
        out
    }

    /// `top-level field == "text"` comparisons every matching event satisfies (the conjuncts of
    /// the expression that are such): a store may skip data that holds no such string.
    pub fn string_equalities(&self) -> Vec<(String, String)> {
        let one = |e: &Expr| match e {
            Expr::Compare(i, Op::Eq, Literal::Str(s)) => match self.paths.get(*i)?.steps() {
                [sereal::lazy::Step::Key(k)] => Some((k.clone(), s.clone())),
                _ => None,
            },
            _ => None,
        };
        match &self.expr {
            Expr::And(items) => items.iter().filter_map(one).collect(),
            e => one(e).into_iter().collect(),
        }
    }

    /// Does a decoded event satisfy the expression?
    pub fn matches(&self, event: &Value) -> bool {
        let found: Vec<Vec<&Value>> = self.paths.iter().map(|p| p.eval(event)).collect();
        eval(&self.expr, &found)
    }

    /// When the whole expression is one comparison of its only path with a literal
    /// (`status >= 500`), whether an event whose path holds exactly `value` satisfies it — what
    /// [`Filter::matches_selected`] says for `[[value]]`, without the lists. `None` for any other
    /// expression.
    pub fn matches_one(&self, value: &Value) -> Option<bool> {
        match &self.expr {
            Expr::Compare(0, op, lit) if self.paths.len() == 1 => Some(compare(value, *op, lit)),
            _ => None,
        }
    }

    /// Evaluate on values already selected for [`Filter::paths`] (one list per path, e.g. from
    /// `sereal::lazy::Selector`).
    pub fn matches_selected(&self, selected: &[Vec<Value>]) -> bool {
        eval(&self.expr, selected)
    }

    /// Evaluate on at most one value per path, borrowed from columns (`None`: the path is
    /// missing): what [`Filter::matches`] says of an event holding exactly those values.
    pub fn matches_scalars(&self, found: &[Option<Scalar<'_>>]) -> bool {
        eval_scalars(&self.expr, found)
    }
}

/// A value as the filter sees it, borrowed from a column of a Parquet file (the column reads
/// evaluate the filter on these before building any event): what such a column can hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string's bytes.
    Str(&'a [u8]),
    /// A map or an array.
    Other,
}

/// The kind of a literal in an expression (see [`Filter::comparisons`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiteralKind {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool,
    /// A number.
    Number,
    /// A quoted string.
    String,
}

fn collect_comparisons(e: &Expr, out: &mut Vec<(usize, LiteralKind, &'static str)>) {
    let kind = |l: &Literal| match l {
        Literal::Null => LiteralKind::Null,
        Literal::Bool(_) => LiteralKind::Bool,
        Literal::Number(_) => LiteralKind::Number,
        Literal::Str(_) => LiteralKind::String,
    };
    match e {
        Expr::Or(items) | Expr::And(items) => {
            items.iter().for_each(|x| collect_comparisons(x, out))
        }
        Expr::Not(inner) => collect_comparisons(inner, out),
        Expr::Compare(p, op, lit) => out.push((*p, kind(lit), op.text())),
        Expr::In(p, lits) => out.extend(lits.iter().map(|l| (*p, kind(l), "in"))),
        Expr::Exists(_) | Expr::Matches(..) => {}
    }
}

impl Op {
    fn text(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// A suggestion for text found where `and`, `or`, `)` or the end should be.
fn after_expression_hint(rest: &str) -> String {
    let word = first_word(rest);
    match word.to_ascii_lowercase().as_str() {
        _ if rest.starts_with('&') => "use `and` (or `&&`)".into(),
        _ if rest.starts_with('|') => "use `or` (or `||`)".into(),
        _ if rest.starts_with(')') => "this `)` has no `(`".into(),
        "andnot" | "and_not" => "use `and not`".into(),
        "xor" | "nor" => "combine with `and`, `or`, `not`".into(),
        _ => format!(
            "expected `and`, `or`, `)` or the end of the expression; strings need quotes \
             (path == \"{word}\")"
        ),
    }
}

/// A suggestion for text found where an operator should be.
fn operator_hint(rest: &str) -> Option<String> {
    if rest.starts_with("=~") {
        return Some("use `~` for a regular expression (path ~ \"^/api\")".into());
    }
    if rest.starts_with("<>") {
        return Some("use `!=`".into());
    }
    let word = first_word(rest).to_ascii_lowercase();
    Some(
        match word.as_str() {
            "like" | "ilike" | "matches" | "match" | "has" | "includes" => {
                "use `contains \"text\"` for a substring, `~ \"regex\"` for a pattern"
            }
            "is" => "use `== null`, or `not exists path` for a missing field",
            "eq" => "use `==`",
            "ne" => "use `!=`",
            "lt" => "use `<`",
            "le" | "lte" => "use `<=`",
            "gt" => "use `>`",
            "ge" | "gte" => "use `>=`",
            "and" | "or" | "" => "a field alone is not a condition: use `exists path`",
            _ => return None,
        }
        .to_owned(),
    )
}

fn first_word(rest: &str) -> &str {
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// `found[i]`: the values of path `i` (`&Value` or `Value`); a missing list is no values. Runs
/// once per event read with `--where`, so it borrows and never allocates.
fn eval<V: Borrow<Value>>(e: &Expr, found: &[Vec<V>]) -> bool {
    let values = |p: usize| {
        found
            .get(p)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(Borrow::borrow)
    };
    match e {
        Expr::Or(items) => items.iter().any(|x| eval(x, found)),
        Expr::And(items) => items.iter().all(|x| eval(x, found)),
        Expr::Not(inner) => !eval(inner, found),
        Expr::Exists(p) => values(*p).next().is_some(),
        Expr::Compare(p, op, lit) => values(*p).any(|v| compare(v, *op, lit)),
        Expr::In(p, lits) => values(*p).any(|v| lits.iter().any(|l| compare(v, Op::Eq, l))),
        Expr::Matches(p, re, want) => {
            values(*p).any(|v| string_bytes(v).is_some_and(|b| re.is_match(b)) == *want)
        }
    }
}

/// [`eval`] for one value per path (`None`: missing), as [`Filter::matches_scalars`] documents.
fn eval_scalars(e: &Expr, found: &[Option<Scalar<'_>>]) -> bool {
    let value = |p: usize| found.get(p).copied().flatten();
    match e {
        Expr::Or(items) => items.iter().any(|x| eval_scalars(x, found)),
        Expr::And(items) => items.iter().all(|x| eval_scalars(x, found)),
        Expr::Not(inner) => !eval_scalars(inner, found),
        Expr::Exists(p) => value(*p).is_some(),
        Expr::Compare(p, op, lit) => value(*p).is_some_and(|v| compare_scalar(v, *op, lit)),
        Expr::In(p, lits) => {
            value(*p).is_some_and(|v| lits.iter().any(|l| compare_scalar(v, Op::Eq, l)))
        }
        Expr::Matches(p, re, want) => value(*p).is_some_and(|v| {
            let hit = match v {
                Scalar::Str(b) => re.is_match(b),
                _ => false,
            };
            hit == *want
        }),
    }
}

fn string_bytes(v: &Value) -> Option<&[u8]> {
    match v.resolve() {
        Value::String(s) => Some(s.as_bytes()),
        Value::Binary(b) => Some(b),
        Value::Ref(inner) => string_bytes(inner),
        _ => None,
    }
}

/// A value as a number under the language's rule: a number, or a string that reads as a finite
/// one (Perl producers often send `"500"`). Shared with [`crate::reduce`].
pub fn number_value(v: &Value) -> Option<f64> {
    number(v, true)
}

fn number(v: &Value, coerce_strings: bool) -> Option<f64> {
    match v.resolve() {
        Value::Int(i) => Some(*i as f64),
        Value::UInt(u) => Some(*u as f64),
        Value::Float(f) => Some(*f),
        Value::Ref(inner) => number(inner, coerce_strings),
        _ if coerce_strings => string_bytes(v).and_then(number_of_bytes),
        _ => None,
    }
}

/// A string that reads as a finite number, as that number.
fn number_of_bytes(b: &[u8]) -> Option<f64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|f| f.is_finite())
}

fn compare(v: &Value, op: Op, lit: &Literal) -> bool {
    let ordering: Option<Ordering> = match lit {
        Literal::Null => match v.resolve() {
            Value::Undef => Some(Ordering::Equal),
            _ => None,
        },
        Literal::Bool(b) => match v.resolve() {
            Value::Bool(x) => Some(x.cmp(b)),
            _ => None,
        },
        Literal::Number(n) => number(v, true).and_then(|x| x.partial_cmp(n)),
        Literal::Str(s) => string_bytes(v).map(|b| b.cmp(s.as_bytes())),
    };
    let null_is_undef = matches!(lit, Literal::Null) && matches!(v.resolve(), Value::Undef);
    decide(op, ordering, null_is_undef)
}

/// [`compare`] for a value of a column (never undefined: a column holds no `null`s, they travel
/// in `_rest`): the same rules, without building the value.
fn compare_scalar(v: Scalar<'_>, op: Op, lit: &Literal) -> bool {
    let ordering: Option<Ordering> = match (lit, v) {
        (Literal::Null, _) => None,
        (Literal::Bool(b), Scalar::Bool(x)) => Some(x.cmp(b)),
        (Literal::Bool(_), _) => None,
        (Literal::Number(n), Scalar::Int(i)) => (i as f64).partial_cmp(n),
        (Literal::Number(n), Scalar::Float(f)) => f.partial_cmp(n),
        (Literal::Number(n), Scalar::Str(b)) => number_of_bytes(b).and_then(|x| x.partial_cmp(n)),
        (Literal::Number(_), _) => None,
        (Literal::Str(s), Scalar::Str(b)) => Some(b.cmp(s.as_bytes())),
        (Literal::Str(_), _) => None,
    };
    decide(op, ordering, false)
}

/// A comparison's outcome from the ordering of the value against the literal (`None`: not
/// comparable) and whether both are null.
fn decide(op: Op, ordering: Option<Ordering>, null_is_undef: bool) -> bool {
    match (op, ordering) {
        (Op::Ne, None) => !null_is_undef,
        (_, None) => false,
        (Op::Eq, Some(o)) => o == Ordering::Equal,
        (Op::Ne, Some(o)) => o != Ordering::Equal,
        (Op::Lt, Some(o)) => o == Ordering::Less,
        (Op::Le, Some(o)) => o != Ordering::Greater,
        (Op::Gt, Some(o)) => o == Ordering::Greater,
        (Op::Ge, Some(o)) => o != Ordering::Less,
    }
}

struct Parser<'t> {
    text: &'t str,
    pos: usize,
    paths: Vec<Path>,
    depth: usize,
}

impl FilterError {
    fn with_hint(mut self, hint: impl Into<String>) -> FilterError {
        self.hint = Some(hint.into());
        self
    }
}

impl Parser<'_> {
    fn error(&self, message: &str) -> FilterError {
        FilterError {
            message: message.to_owned(),
            column: self.pos,
            hint: None,
        }
    }

    fn ws(&mut self) {
        while self.text[self.pos..].starts_with(|c: char| c.is_whitespace()) {
            self.pos += self.text[self.pos..]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
        }
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    /// Consume `word` (any case) if it is next as a whole word (not a prefix of a longer
    /// identifier).
    fn keyword(&mut self, word: &str) -> bool {
        self.ws();
        let rest = self.rest();
        let head = rest.get(..word.len());
        if head.is_some_and(|h| h.eq_ignore_ascii_case(word))
            && !rest[word.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            self.pos += word.len();
            return true;
        }
        false
    }

    fn symbol(&mut self, sym: &str) -> bool {
        self.ws();
        if self.rest().starts_with(sym) {
            self.pos += sym.len();
            return true;
        }
        false
    }

    fn nest(&mut self) -> Result<(), FilterError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error("expression nested too deeply"));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut items = vec![self.and()?];
        while self.keyword("or") || self.symbol("||") {
            items.push(self.and()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Expr::Or(items)
        })
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut items = vec![self.unary()?];
        while self.keyword("and") || self.symbol("&&") {
            items.push(self.unary()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Expr::And(items)
        })
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        self.ws();
        if self.keyword("not")
            || (self.rest().starts_with('!') && !self.rest().starts_with("!=") && self.symbol("!"))
        {
            self.nest()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, FilterError> {
        if self.symbol("(") {
            self.nest()?;
            let e = self.or()?;
            self.depth -= 1;
            if !self.symbol(")") {
                return Err(self.error("expected `)`"));
            }
            return Ok(e);
        }
        if self.keyword("exists") {
            let p = self.path()?;
            return Ok(Expr::Exists(p));
        }
        let p = self.path()?;
        self.ws();
        if self.rest().starts_with("=~") || self.rest().starts_with("<>") {
            let err = self.error("expected an operator: == != < <= > >= in ~ !~ contains");
            return Err(err.with_hint(operator_hint(self.rest()).unwrap_or_default()));
        }
        for (sym, op) in [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
            ("=", Op::Eq),
        ] {
            if self.symbol(sym) {
                let lit = self.literal()?;
                return Ok(Expr::Compare(p, op, lit));
            }
        }
        for (sym, want) in [("!~", false), ("~", true)] {
            if self.symbol(sym) {
                self.ws();
                let at = self.pos;
                let Literal::Str(pattern) = self.literal()? else {
                    return Err(FilterError {
                        message: "a regular expression must be a quoted string".into(),
                        column: at,
                        hint: None,
                    });
                };
                let re = regex::bytes::RegexBuilder::new(&pattern)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| FilterError {
                        message: format!("bad regular expression: {e}"),
                        column: at,
                        hint: Some(
                            "for a plain substring use `contains \"text\"` (no escaping)".into(),
                        ),
                    })?;
                return Ok(Expr::Matches(p, Box::new(re), want));
            }
        }
        if self.keyword("contains") {
            self.ws();
            let at = self.pos;
            let Literal::Str(text) = self.literal()? else {
                return Err(FilterError {
                    message: "`contains` takes a quoted string".into(),
                    column: at,
                    hint: Some("path contains \"text\"".into()),
                });
            };
            // A substring search is a regular expression of the escaped text: one matcher.
            let re = regex::bytes::RegexBuilder::new(&regex::escape(&text))
                .size_limit(1 << 20)
                .build()
                .map_err(|e| FilterError {
                    message: format!("search text too large: {e}"),
                    column: at,
                    hint: None,
                })?;
            return Ok(Expr::Matches(p, Box::new(re), true));
        }
        if self.keyword("in") {
            let close = if self.symbol("[") {
                "]"
            } else if self.symbol("(") {
                ")"
            } else {
                return Err(self
                    .error("expected `[` or `(` after `in`")
                    .with_hint("status in [500, 503]"));
            };
            let mut lits = vec![self.literal()?];
            while self.symbol(",") {
                lits.push(self.literal()?);
            }
            if !self.symbol(close) {
                return Err(self.error(&format!("expected `,` or `{close}`")));
            }
            return Ok(Expr::In(p, lits));
        }
        let err = self.error("expected an operator: == != < <= > >= in ~ !~ contains");
        Err(match operator_hint(self.rest()) {
            Some(h) => err.with_hint(h),
            None => err,
        })
    }

    /// A path: everything up to whitespace or an operator, outside quotes and brackets.
    fn path(&mut self) -> Result<usize, FilterError> {
        self.ws();
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let (mut quote, mut brackets) = (None::<u8>, 0usize);
        let mut i = self.pos;
        while i < bytes.len() {
            let c = bytes[i];
            match quote {
                Some(q) => {
                    if c == b'\\' {
                        i += 1;
                    } else if c == q {
                        quote = None;
                    }
                }
                None => match c {
                    b'"' | b'\'' => quote = Some(c),
                    b'[' => brackets += 1,
                    b']' => brackets = brackets.saturating_sub(1),
                    _ if brackets > 0 => {}
                    b' ' | b'\t' | b'\n' | b'\r' | b'=' | b'!' | b'<' | b'>' | b'~' | b'('
                    | b')' | b',' | b'&' | b'|' => break,
                    _ => {}
                },
            }
            i += 1;
        }
        let text = &self.text[start..i.min(bytes.len())];
        if text.is_empty() {
            return Err(self.error("expected a path"));
        }
        let path = Path::parse(text).map_err(|e| FilterError {
            message: format!("bad path {text:?}: {e}"),
            column: start,
            hint: None,
        })?;
        self.pos = i.min(bytes.len());
        self.paths.push(path);
        Ok(self.paths.len() - 1)
    }

    fn literal(&mut self) -> Result<Literal, FilterError> {
        self.ws();
        let text = self.text;
        let rest = &text[self.pos..];
        if let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
            let mut out = String::new();
            let mut chars = rest[1..].char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, 'n')) => out.push('\n'),
                        Some((_, 't')) => out.push('\t'),
                        Some((_, other)) => out.push(other),
                        None => break,
                    },
                    c if c == q => {
                        self.pos += 1 + i + 1;
                        return Ok(Literal::Str(out));
                    }
                    c => out.push(c),
                }
            }
            return Err(self
                .error("unterminated string")
                .with_hint(format!("close it with {q}")));
        }
        for (word, lit) in [
            ("true", Literal::Bool(true)),
            ("false", Literal::Bool(false)),
            ("null", Literal::Null),
        ] {
            if self.keyword(word) {
                return Ok(lit);
            }
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
            .unwrap_or(rest.len());
        match rest[..len].parse::<f64>() {
            Ok(n) if len > 0 && n.is_finite() => {
                self.pos += len;
                Ok(Literal::Number(n))
            }
            _ => {
                let err = self
                    .error("expected a literal: a number, a quoted string, true, false or null");
                let word = first_word(rest);
                Err(if word.is_empty() {
                    err
                } else {
                    err.with_hint(format!("strings need quotes: \"{word}\""))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> Value {
        sereal::json::from_json_slice(json.as_bytes()).expect("json")
    }

    #[test]
    fn comparisons_and_logic() {
        let e = ev(
            r#"{"status":503,"code":"500","path":"/static/a.css","t":{"ms":1.5},"exp":[{"id":1},{"id":7}],"bot":false,"u":null}"#,
        );
        let yes = [
            "status >= 500",
            "status == 503 and t.ms < 2",
            "status = 503",
            "code == 500",
            "code == '500'",
            "path ~ '^/static/'",
            "path !~ 'x'",
            "exp[*].id == 7",
            "exp[*].id in [3, 7]",
            "exists t.ms",
            "not exists t.nope",
            "bot == false",
            "u == null",
            "status != 200",
            "(status < 500 or path ~ 'css$') and !bot == true",
            "exp[-1].id > 5",
            "\"t\".ms == 1.5",
        ];
        for f in yes {
            assert!(
                Filter::parse(f)
                    .unwrap_or_else(|e| panic!("{f}: {e}"))
                    .matches(&e),
                "{f}"
            );
        }
        let no = [
            "status < 500",
            "missing == 1",
            "missing != 1 and false_path == 2",
            "exp[*].id == 2",
            "path ~ '^/api'",
            "status == 'abc'",
            "bot == true",
            "u != null",
            "not status >= 500",
        ];
        for f in no {
            assert!(
                !Filter::parse(f)
                    .unwrap_or_else(|e| panic!("{f}: {e}"))
                    .matches(&e),
                "{f}"
            );
        }
    }

    #[test]
    fn keywords_any_case_in_parentheses_and_contains() {
        let e = ev(r#"{"status":503,"path":"/api/a.b?x","ok":true,"u":null}"#);
        for f in [
            "status >= 500 AND path ~ '^/api'",
            "status < 500 OR NOT ok == FALSE",
            "status in (500, 503)",
            "status IN [503]",
            "path contains 'a.b?'",
            "path CONTAINS \"/api/\" and not path contains 'zzz'",
            "Exists status and u == NULL",
        ] {
            assert!(
                Filter::parse(f)
                    .unwrap_or_else(|e| panic!("{f}: {e}"))
                    .matches(&e),
                "{f}"
            );
        }
        // `contains` is a plain substring: `.` is not "any character".
        assert!(!Filter::parse("path contains 'a_b'").unwrap().matches(&e));
        assert!(!Filter::parse("path contains 'a.bx'").unwrap().matches(&e));
        assert!(Filter::parse("status in (500, 503]").is_err());
    }

    #[test]
    fn errors_hint_and_show_a_caret() {
        let cases = [
            ("status >= 500 & x", "use `and`"),
            ("path =~ '^/a'", "use `~`"),
            ("path like 'a'", "contains"),
            ("path == foo", "\"foo\""),
            ("status >= 500 xor x", "`and`"),
            ("status is null", "== null"),
        ];
        for (f, want) in cases {
            let e = Filter::parse(f).expect_err(f);
            let hint = e.hint.clone().unwrap_or_default();
            assert!(hint.contains(want), "{f}: {e}");
        }
        let e = Filter::parse("status >= 500 & x").unwrap_err();
        let shown = e.render("status >= 500 & x");
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[1], "  status >= 500 & x");
        assert_eq!(lines[2], "                ^");
        assert!(shown.contains("hint: use `and`"));
        let f = Filter::parse("status >= '500' or code in [1, 'x']").unwrap();
        assert_eq!(
            f.comparisons(),
            vec![
                (0, LiteralKind::String, ">="),
                (1, LiteralKind::Number, "in"),
                (1, LiteralKind::String, "in")
            ]
        );
    }

    #[test]
    fn errors_name_the_column() {
        for (f, col) in [
            ("status >", 8),
            ("status 500", 7),
            ("(status > 1", 11),
            ("x ~ 5", 4),
            ("x ~ '('", 4),
            ("status > 1 extra", 11),
            ("", 0),
            ("a[ == 1", 0),
        ] {
            let e = Filter::parse(f).expect_err(f);
            assert_eq!(e.column, col, "{f}: {e}");
        }
        let deep = format!("{}a == 1{}", "(".repeat(100), ")".repeat(100));
        assert!(Filter::parse(&deep).is_err());
        let nots = format!("{}a == 1", "not ".repeat(100));
        assert!(Filter::parse(&nots).is_err());
    }

    #[test]
    fn paths_are_listed_for_lazy_selection() {
        let f = Filter::parse("a.b == 1 or c[*].d in [1,2] or exists e").expect("parse");
        let paths: Vec<String> = f.paths().iter().map(|p| p.to_string()).collect();
        assert_eq!(paths.len(), 3);
        let selected = vec![vec![], vec![Value::Int(2)], vec![]];
        assert!(f.matches_selected(&selected));
        assert!(!f.matches_selected(&[vec![], vec![Value::Int(3)], vec![]]));
    }

    #[test]
    fn one_comparison_agrees_with_the_lists() {
        let values = [
            Value::Int(499),
            Value::Int(500),
            Value::Int(-3),
            Value::UInt(u64::MAX),
            Value::String("500".into()),
            Value::String("x".into()),
            Value::Undef,
        ];
        for text in [
            "status >= 500",
            "status < 500",
            "status == 500",
            "status != 500",
            "status != null",
            "status == \"x\"",
        ] {
            let f = Filter::parse(text).expect(text);
            for v in &values {
                let lists = f.matches_selected(&[vec![v.clone()]]);
                assert_eq!(f.matches_one(v), Some(lists), "{text} on {v:?}");
            }
        }
        // Anything but one comparison of the only path is left to the lists.
        for text in [
            "status >= 500 and status < 600",
            "not status >= 500",
            "status in [500, 503]",
            "exists status",
            "a == 1 or b == 2",
        ] {
            let f = Filter::parse(text).expect(text);
            assert_eq!(f.matches_one(&Value::Int(500)), None, "{text}");
        }
    }

    #[test]
    fn scalars_agree_with_the_lists() {
        // Every kind a column holds, against every kind of expression, missing paths included.
        let values: Vec<(Option<Value>, Option<Scalar<'_>>)> = vec![
            (None, None),
            (Some(Value::Int(499)), Some(Scalar::Int(499))),
            (Some(Value::Int(500)), Some(Scalar::Int(500))),
            (Some(Value::Float(500.0)), Some(Scalar::Float(500.0))),
            (Some(Value::Float(f64::NAN)), Some(Scalar::Float(f64::NAN))),
            (Some(Value::String("500".into())), Some(Scalar::Str(b"500"))),
            (Some(Value::String(" 7 ".into())), Some(Scalar::Str(b" 7 "))),
            (
                Some(Value::String("/api/x".into())),
                Some(Scalar::Str(b"/api/x")),
            ),
            (Some(Value::Bool(true)), Some(Scalar::Bool(true))),
            (Some(Value::Hash(vec![])), Some(Scalar::Other)),
            (
                Some(Value::Array(vec![Value::Int(500)])),
                Some(Scalar::Other),
            ),
        ];
        for text in [
            "status >= 500",
            "status < 500",
            "status == 500",
            "status != 500",
            "status == null",
            "status != null",
            "status == \"500\"",
            "status > \"4\"",
            "status == true",
            "status != false",
            "status in [500, \"x\", true]",
            "exists status",
            "not exists status",
            "status ~ \"^/api\"",
            "status !~ \"^/api\"",
            "status contains \"pi\"",
            "status >= 500 or not status == 7",
        ] {
            let f = Filter::parse(text).expect(text);
            for (v, s) in &values {
                let lists = f.matches_selected(&[v.iter().cloned().collect()]);
                assert_eq!(f.matches_scalars(&[*s]), lists, "{text} on {v:?}");
            }
        }
    }
}
