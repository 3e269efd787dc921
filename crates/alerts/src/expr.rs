//! The alert expression language: arithmetic over a rollup's aggregates in a window, and for a
//! threshold rule one comparison. It is small on purpose (not PromQL); `sluice help alerts`
//! and `docs/alerts.md` document it from the grammar here.
//!
//! ```text
//! rule    := value [ ("<" | "<=" | ">" | ">=" | "==" | "!=") number ]
//! value   := product { ("+" | "-") product }
//! product := unary { ("*" | "/") unary }
//! unary   := "-" unary | number | call | "(" value ")"
//! call    := ("sum" | "value" | "rate") "(" aggregate ")"
//! aggregate := one of the rollup's aggregates as written (count, sum:bytes, p95:ms,
//!              distinct:user_id, count_if:status >= 500, …) | "count where" EXPR
//!              (the rollup's `count_if:EXPR`)
//! ```
//!
//! - `sum(A)` (or `value(A)`): the aggregate over the rule's window, its states merged — a
//!   count adds up, a `p95` is the 95th percentile of every event of the window, a `max` the
//!   largest. `rate(A)`: `sum(A)` per second of the window.
//! - A value that does not exist (no event in the window, a division by zero, an aggregate
//!   with no value) makes the whole expression have none: the condition is then false.

use std::fmt;

use sluice_reader::filter::Filter;
use sluice_rollups::GroupValues;

/// Why an expression does not parse or does not fit its rollup.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (at {at}: {snippet:?})")]
pub struct ExprError {
    /// What is wrong.
    pub message: String,
    /// Byte offset in the expression.
    pub at: usize,
    /// The text from there (at most 30 characters).
    pub snippet: String,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Cmp {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
        }
    }
}

/// How a call turns an aggregate into a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Sum,
    Rate,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Num(f64),
    Call(Func, usize),
    Neg(Box<Node>),
    Bin(char, Box<Node>, Box<Node>),
}

/// A parsed expression, its aggregates resolved to the rollup's.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    text: String,
    value: Node,
    /// The rollup's aggregate labels, by index from `Node::Call`.
    aggs: Vec<String>,
    /// The `count where` / `count_if` conditions the expression names, in order.
    conditions: Vec<String>,
    compare: Option<(Cmp, f64)>,
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Expr {
    /// Parses `text` against the aggregates of its rollup (`rollup_aggs`, as written).
    pub fn parse(text: &str, rollup_aggs: &[String]) -> Result<Expr, ExprError> {
        let mut p = Parser {
            text,
            at: 0,
            rollup_aggs,
            aggs: Vec::new(),
            conditions: Vec::new(),
        };
        let value = p.value()?;
        p.skip_ws();
        let compare = if p.at < text.len() {
            let cmp = p.cmp()?;
            p.skip_ws();
            let n = p.number()?;
            Some((cmp, n))
        } else {
            None
        };
        p.skip_ws();
        if p.at < text.len() {
            return Err(p.error("unexpected text after the expression"));
        }
        Ok(Expr {
            text: text.trim().to_owned(),
            value,
            aggs: p.aggs,
            conditions: p.conditions,
            compare,
        })
    }

    /// The rollup's aggregates it reads, as written.
    pub fn aggregates(&self) -> &[String] {
        &self.aggs
    }

    /// The comparison, if the expression has one (a threshold rule's).
    pub fn comparison(&self) -> Option<(Cmp, f64)> {
        self.compare
    }

    /// The conditions of the `count where` / `count_if` aggregates it uses, in order (the
    /// events an alert's evidence is taken from).
    pub fn conditions(&self) -> &[String] {
        &self.conditions
    }

    /// The value over a window of `window_secs` for one group (`None`: no value).
    pub fn value(&self, g: &GroupValues, window_secs: u64) -> Option<f64> {
        let v = eval(&self.value, &self.aggs, g, window_secs)?;
        v.is_finite().then_some(v)
    }

    /// Whether a value meets the comparison (`false` without one, or without a value).
    pub fn holds(&self, value: Option<f64>) -> bool {
        match (self.compare, value) {
            (Some((cmp, threshold)), Some(v)) => cmp.holds(v, threshold),
            _ => false,
        }
    }

    /// The comparison as text (`> 0.05`), or "".
    pub fn comparison_text(&self) -> String {
        self.compare
            .map(|(c, n)| format!("{} {n}", c.text()))
            .unwrap_or_default()
    }
}

fn eval(node: &Node, aggs: &[String], g: &GroupValues, window_secs: u64) -> Option<f64> {
    match node {
        Node::Num(n) => Some(*n),
        Node::Call(func, i) => {
            let v = g.value(aggs.get(*i)?)?;
            match func {
                Func::Sum => Some(v),
                Func::Rate => Some(v / window_secs.max(1) as f64),
            }
        }
        Node::Neg(n) => eval(n, aggs, g, window_secs).map(|v| -v),
        Node::Bin(op, a, b) => {
            let (a, b) = (
                eval(a, aggs, g, window_secs)?,
                eval(b, aggs, g, window_secs)?,
            );
            match op {
                '+' => Some(a + b),
                '-' => Some(a - b),
                '*' => Some(a * b),
                _ if b == 0.0 => None,
                _ => Some(a / b),
            }
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    rollup_aggs: &'a [String],
    aggs: Vec<String>,
    conditions: Vec<String>,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> ExprError {
        ExprError {
            message: message.to_owned(),
            at: self.at,
            snippet: self.text[self.at..].chars().take(30).collect(),
        }
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.at = self.text.len() - trimmed.len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.rest().starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Node, ExprError> {
        let mut left = self.product()?;
        loop {
            self.skip_ws();
            let op = match self.rest().chars().next() {
                Some(c @ ('+' | '-')) => c,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.product()?;
            left = Node::Bin(op, Box::new(left), Box::new(right));
        }
    }

    fn product(&mut self) -> Result<Node, ExprError> {
        let mut left = self.unary()?;
        loop {
            self.skip_ws();
            let op = match self.rest().chars().next() {
                Some(c @ ('*' | '/')) => c,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.unary()?;
            left = Node::Bin(op, Box::new(left), Box::new(right));
        }
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        self.skip_ws();
        if self.eat('-') {
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        if self.eat('(') {
            let v = self.value()?;
            if !self.eat(')') {
                return Err(self.error("expected `)`"));
            }
            return Ok(v);
        }
        if self
            .rest()
            .starts_with(|c: char| c.is_ascii_digit() || c == '.')
        {
            return Ok(Node::Num(self.number()?));
        }
        let word: String = self
            .rest()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let func = match word.as_str() {
            "sum" | "value" => Func::Sum,
            "rate" => Func::Rate,
            "" => return Err(self.error("expected a number, `(` or sum(…) / rate(…)")),
            _ => {
                return Err(self.error(&format!(
                    "unknown function {word:?}: use sum(AGGREGATE) or rate(AGGREGATE)"
                )))
            }
        };
        self.at += word.len();
        if !self.eat('(') {
            return Err(self.error(&format!("expected `(` after {word}")));
        }
        self.skip_ws();
        let start = self.at;
        let end = self.matching_paren()?;
        let arg = self.text[start..end].trim().to_owned();
        self.at = end + 1;
        let i = self.resolve(&arg, start)?;
        Ok(Node::Call(func, i))
    }

    /// The offset of the `)` closing the call whose argument starts here (quotes and nested
    /// parentheses skipped).
    fn matching_paren(&self) -> Result<usize, ExprError> {
        let mut depth = 0usize;
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for (i, c) in self.rest().char_indices() {
            if let Some(q) = quote {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
                continue;
            }
            match c {
                '"' | '\'' => quote = Some(c),
                '(' => depth += 1,
                ')' if depth == 0 => return Ok(self.at + i),
                ')' => depth -= 1,
                _ => {}
            }
        }
        Err(self.error("no `)` closes this call"))
    }

    /// The index in `self.aggs` of the rollup aggregate `arg` names.
    fn resolve(&mut self, arg: &str, at: usize) -> Result<usize, ExprError> {
        let wanted = match arg.strip_prefix("count where ") {
            Some(cond) => format!("count_if:{}", cond.trim()),
            None => arg.to_owned(),
        };
        let found = self
            .rollup_aggs
            .iter()
            .find(|a| same_aggregate(a, &wanted))
            .cloned()
            .ok_or_else(|| ExprError {
                message: format!(
                    "the rollup has no aggregate {wanted:?} (it has: {})",
                    self.rollup_aggs.join(", ")
                ),
                at,
                snippet: arg.chars().take(30).collect(),
            })?;
        if let Some(cond) = found
            .strip_prefix("count_if:")
            .or_else(|| found.strip_prefix("ratio:"))
        {
            if !self.conditions.iter().any(|c| c == cond) {
                self.conditions.push(cond.to_owned());
            }
        }
        if let Some(i) = self.aggs.iter().position(|a| *a == found) {
            return Ok(i);
        }
        self.aggs.push(found);
        Ok(self.aggs.len() - 1)
    }

    fn cmp(&mut self) -> Result<Cmp, ExprError> {
        self.skip_ws();
        let r = self.rest();
        let (cmp, len) = if r.starts_with("<=") {
            (Cmp::Le, 2)
        } else if r.starts_with(">=") {
            (Cmp::Ge, 2)
        } else if r.starts_with("==") {
            (Cmp::Eq, 2)
        } else if r.starts_with("!=") {
            (Cmp::Ne, 2)
        } else if r.starts_with('<') {
            (Cmp::Lt, 1)
        } else if r.starts_with('>') {
            (Cmp::Gt, 1)
        } else {
            return Err(self.error("expected an operator or a comparison (> >= < <= == !=)"));
        };
        self.at += len;
        Ok(cmp)
    }

    fn number(&mut self) -> Result<f64, ExprError> {
        self.skip_ws();
        let r = self.rest();
        let mut len = 0;
        for (i, c) in r.char_indices() {
            let sign_ok = (c == '-' || c == '+') && (i == 0 || r[..i].ends_with(['e', 'E']));
            if c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || sign_ok {
                len = i + 1;
            } else {
                break;
            }
        }
        let n: f64 = r[..len]
            .parse()
            .map_err(|_| self.error("expected a number"))?;
        if !n.is_finite() {
            return Err(self.error("expected a finite number"));
        }
        self.at += len;
        Ok(n)
    }
}

/// The text without the spaces outside quoted strings.
fn squash(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in s.chars() {
        match quote {
            Some(q) => {
                out.push(c);
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c.is_whitespace() => {}
            None => {
                if c == '"' || c == '\'' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// Whether two aggregates as written are the same: equal text, or the same kind and a
/// condition that parses to the same filter (spaces do not matter).
fn same_aggregate(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if squash(a) == squash(b) {
        return true;
    }
    for kind in ["count_if:", "ratio:"] {
        if let (Some(x), Some(y)) = (a.strip_prefix(kind), b.strip_prefix(kind)) {
            return match (Filter::parse(x), Filter::parse(y)) {
                (Ok(x), Ok(y)) => format!("{x:?}") == format!("{y:?}"),
                _ => false,
            };
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aggs() -> Vec<String> {
        ["count", "count_if:status >= 500", "p95:ms", "max:ms"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn group(values: &[(&str, Option<f64>)]) -> GroupValues {
        GroupValues {
            group: vec![],
            key: vec![],
            events: 0,
            values: values.iter().map(|(a, v)| (a.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn ratio_of_counts() {
        let e = Expr::parse("sum(count where status>=500) / sum(count) > 0.05", &aggs()).unwrap();
        let g = group(&[
            ("count", Some(100.0)),
            ("count_if:status >= 500", Some(6.0)),
        ]);
        assert_eq!(e.value(&g, 60), Some(0.06));
        assert!(e.holds(e.value(&g, 60)));
        assert_eq!(e.conditions(), ["status >= 500"]);
        let g = group(&[("count", Some(0.0)), ("count_if:status >= 500", Some(0.0))]);
        assert_eq!(e.value(&g, 60), None, "0/0 has no value");
        assert!(!e.holds(None));
    }

    #[test]
    fn arithmetic_and_rate() {
        let e = Expr::parse("rate(count) * 2 - -(1 + sum(p95:ms)) <= 1e3", &aggs()).unwrap();
        let g = group(&[("count", Some(120.0)), ("p95:ms", Some(10.0))]);
        assert_eq!(e.value(&g, 60), Some(4.0 + 11.0));
        assert_eq!(e.comparison(), Some((Cmp::Le, 1000.0)));
        assert!(Expr::parse("sum(count)", &aggs())
            .unwrap()
            .comparison()
            .is_none());
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = Expr::parse("sum(p99:ms) > 1", &aggs()).unwrap_err();
        assert!(e.message.contains("no aggregate \"p99:ms\""), "{e}");
        assert_eq!(e.at, 4);
        let e = Expr::parse("avg(count) > 1", &aggs()).unwrap_err();
        assert!(e.message.contains("unknown function"), "{e}");
        let e = Expr::parse("sum(count) > ", &aggs()).unwrap_err();
        assert!(e.message.contains("number"), "{e}");
        let e = Expr::parse("sum(count) > 1 2", &aggs()).unwrap_err();
        assert!(e.message.contains("after"), "{e}");
        let e = Expr::parse("sum(count > 1", &aggs()).unwrap_err();
        assert!(e.message.contains("closes"), "{e}");
    }
}
