//! Reader-side reduce: group events by fields and aggregate them over time windows — the
//! cross-epoch step after a substream's per-blob map, so consumers don't each rewrite it.
//!
//! ```
//! use sluice_reader::reduce::{ReduceSpec, Reducer};
//! let spec = ReduceSpec::parse(&["path"], &["count", "avg:ms", "max:ms"], Some("10s")).unwrap();
//! let mut r = Reducer::new(spec);
//! for (epoch, json) in [(100, r#"{"path":"/a","ms":2}"#), (105, r#"{"path":"/a","ms":4}"#),
//!                       (112, r#"{"path":"/b","ms":"7"}"#)] {
//!     r.push(epoch, &sereal::json::from_json_slice(json.as_bytes()).unwrap()).unwrap();
//! }
//! let rows: Vec<String> = r.finish().iter().map(|v| sereal::json::to_json_value(v).to_string()).collect();
//! assert_eq!(rows, [
//!     r#"{"window":100,"path":"/a","count":2,"avg:ms":3.0,"max:ms":4}"#,
//!     r#"{"window":110,"path":"/b","count":1,"avg:ms":7.0,"max:ms":7.0}"#,
//! ]);
//! ```
//!
//! # Semantics (the Python `sluice.reduce` is this code, through the native module)
//! - **Fields** are paths in the reader's syntax ([`sereal::Path`]: `a.b`, `a[0]`, `a[*].b`,
//!   `"key.with.dots"`). A group-by path takes its **first** match; no match groups under `null`.
//!   Group keys compare by their JSON mapping (so `1` and `1.0` are different groups, a binary
//!   and a UTF-8 string with the same bytes the same one).
//! - **Aggregates**: `count` (events in the group), `sum:P`, `min:P`, `max:P`, `avg:P` over every
//!   match of `P` that is a number, or a string that reads as one (the `--where` rule:
//!   [`crate::filter::number_value`]); anything else, and non-finite numbers, are skipped.
//!   `sum` is an exact integer while every value is an integer (and fits in 64 bits), otherwise
//!   the float sum in event order; `avg` is the float sum over the number of values; `min`/`max`
//!   keep the value as it came (an integer stays an integer; a numeric string gives its float);
//!   with no value they are `null`.
//! - **Sketches** (the states of `sluice_sketches`, which the rollups share, so a rollup and a
//!   query over the same events agree): `pNN:P` (`p50`, `p95`, `p99.9`: any quantile from 0 to
//!   100 with at most one decimal) is the value at that quantile of the numbers `sum` takes, from
//!   a DDSketch: within 1 % of the exact value of rank `⌊q·(n−1)⌋` (`p0`/`p100` are the exact min
//!   and max), a float, `null` with no value. `distinct:P` counts the distinct values of every
//!   match of `P` (any kind; `null` is no value) with a HyperLogLog in postgresql-hll's format and
//!   hash (an integer hashed as `hll_hash_bigint`, a string by its bytes, anything else by its
//!   JSON text): exact up to 160 values, then within a few percent (2.3 % standard error); `0`
//!   with no value.
//! - **Conditional counts**: `count_if:EXPR` counts the group's events that match `EXPR`, a
//!   `--where` expression ([`crate::filter`]: `count_if:status >= 500`); `ratio:EXPR` is that
//!   count over `count`, a float from 0 to 1. Their expression's paths are read like the others
//!   (sparse events hold them: a missing path stays missing). An expression may hold commas
//!   inside brackets, parentheses or quotes (`count_if:status in (500, 503)`).
//! - **Windows**: `--window 10s` puts an event of epoch `e` in the window starting at
//!   `e - e.rem_euclid(10)`; rows carry `"window": start`. Without a window there is one group
//!   set for the whole input and no `window` field. When the caller gave the read's range
//!   ([`Plan::set_range`]), the rows of a window that lies only partly inside `[from, to)` (the
//!   first one when `from` is not on a window boundary, the last when `to` is not) also carry
//!   `"partial": true`: they hold only the events of the range's part of the window.
//! - **Rows**: `{window?, <group paths as written>…, <aggregates as written>…}`, windows in time
//!   order, groups in order of first appearance. A window's rows are ready as soon as an event of
//!   a later window arrives (reads come in epoch order), so memory holds one window at a time;
//!   an event older than a window already handed out is counted in [`Reducer::late`] and left
//!   out (never silently: the CLI warns and exits 3).
//! - **Limits**: at most [`ReduceSpec::max_groups`] groups held at once (default
//!   [`DEFAULT_MAX_GROUPS`]); one more is [`ReduceError::TooManyGroups`].
//! - **Repeats**: a read may hand over equal events as one with a count
//!   ([`Reducer::push_repeated`], [`crate::ReadEvent::repeat`]); every aggregate adds it `n`
//!   times, but [`Plan::narrow_read`] asks for repeats only when the plan's aggregates are all
//!   `count`, `min`, `max`, `count_if` or `ratio`.
//!
//! # Reads for a plan
//! A range read whose events go to a [`Sink`] is narrowed with [`Plan::narrow_read`] (the CLI,
//! `GET /v1/events` and the Python bindings all do): a reduce then gets sparse events
//! ([`crate::request::SparseShape`]: only its paths' values, read lazily from blob chunks), a
//! top-N only the events that can still be among its top; decoding whole events was most of a
//! reduce's cost. The rows are those of whole events (`tests/reduce_lazy.rs`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use sereal::{Key, Path, Value};
use sluice_sketches::{Distinct, Quantiles};

use crate::filter::Filter;
use crate::request::ReadOptions;

/// Default cap on groups held at once.
pub const DEFAULT_MAX_GROUPS: usize = 1_000_000;

/// A reduce that cannot be set up or run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReduceError {
    /// A `--group-by`, `--agg` or `--window` value does not parse.
    Spec(String),
    /// More groups than the limit.
    TooManyGroups(usize),
    /// A partial state ([`Reducer::finish_states`]) that does not read.
    State(String),
}

impl fmt::Display for ReduceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceError::Spec(m) => write!(f, "{m}"),
            ReduceError::State(m) => write!(f, "a partial aggregate state does not read: {m}"),
            ReduceError::TooManyGroups(n) => write!(
                f,
                "more than {n} groups held at once: group by fewer fields, use a shorter window, or raise the limit"
            ),
        }
    }
}

impl std::error::Error for ReduceError {}

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    /// Events in the group.
    Count,
    /// Sum of the values.
    Sum,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Mean of the values.
    Avg,
    /// The value at a quantile, in thousandths (`p95` is 950, `p99.9` 999): a DDSketch, within
    /// 1 % of the exact value ([`sluice_sketches::Quantiles`]).
    Quantile(u16),
    /// Distinct values: a HyperLogLog, exact up to 160 values ([`sluice_sketches::Distinct`]).
    Distinct,
    /// Events that match a `--where` expression.
    CountIf,
    /// Events that match a `--where` expression over the events in the group.
    Ratio,
}

/// The functions `--agg` knows, for error messages.
const FUNCTIONS: &str = "count, sum:PATH, min:PATH, max:PATH, avg:PATH, pNN:PATH (p50, p95, p99.9), distinct:PATH, count_if:EXPR or ratio:EXPR";

/// One aggregate: a function, its path (none for `count`, `count_if`, `ratio`), its condition
/// (`count_if`, `ratio`) and its column name.
#[derive(Debug, Clone)]
pub struct Agg {
    /// The function.
    pub kind: AggKind,
    /// The values' path (`None` for `count`, `count_if` and `ratio`).
    pub path: Option<Path>,
    /// The condition of `count_if` / `ratio` (a `--where` expression).
    pub condition: Option<Filter>,
    /// The output column: the text as written (`count`, `avg:ms`, `count_if:status >= 500`).
    pub label: String,
}

impl PartialEq for Agg {
    fn eq(&self, other: &Agg) -> bool {
        self.kind == other.kind
            && self.path == other.path
            && self.condition.as_ref().map(Filter::text)
                == other.condition.as_ref().map(Filter::text)
            && self.label == other.label
    }
}

/// `pNN` / `pNN.N` (0 to 100) in thousandths.
fn quantile_name(name: &str) -> Option<u16> {
    let digits = name.strip_prefix('p')?;
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let ok = |s: &str, max_len: usize| s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !ok(int, 3) || !ok(frac, 1) || (digits.contains('.') && frac.is_empty()) {
        return None;
    }
    let thousandths = int.parse::<u16>().ok()? * 10 + frac.parse::<u16>().unwrap_or(0);
    (thousandths <= 1000).then_some(thousandths)
}

impl Agg {
    /// Parses `count`, `sum:P`, `min:P`, `max:P`, `avg:P`, `pNN:P`, `distinct:P`,
    /// `count_if:EXPR` or `ratio:EXPR`.
    pub fn parse(text: &str) -> Result<Agg, ReduceError> {
        let text = text.trim();
        let (name, arg) = match text.split_once(':') {
            Some((n, p)) => (n.trim(), Some(p.trim())),
            None => (text, None),
        };
        let kind = match name {
            "count" => AggKind::Count,
            "sum" => AggKind::Sum,
            "min" => AggKind::Min,
            "max" => AggKind::Max,
            "avg" => AggKind::Avg,
            "distinct" => AggKind::Distinct,
            "count_if" => AggKind::CountIf,
            "ratio" => AggKind::Ratio,
            other => match quantile_name(other) {
                Some(q) => AggKind::Quantile(q),
                None => {
                    return Err(ReduceError::Spec(format!(
                        "--agg {text:?}: unknown function {other:?}: {FUNCTIONS}"
                    )))
                }
            },
        };
        let (mut path, mut condition) = (None, None);
        match (kind, arg) {
            (AggKind::Count, None) => {}
            (AggKind::Count, Some(_)) => {
                return Err(ReduceError::Spec(format!(
                    "--agg {text:?}: count takes no path"
                )))
            }
            (AggKind::CountIf | AggKind::Ratio, None | Some("")) => {
                return Err(ReduceError::Spec(format!(
                    "--agg {text:?}: {name} needs a --where expression, e.g. {name}:status >= 500"
                )))
            }
            (AggKind::CountIf | AggKind::Ratio, Some(e)) => {
                condition = Some(
                    Filter::parse(e)
                        .map_err(|err| ReduceError::Spec(format!("--agg {text:?}: {err}")))?,
                );
            }
            (_, None) | (_, Some("")) => {
                return Err(ReduceError::Spec(format!(
                    "--agg {text:?}: {name} needs a path, e.g. {name}:ms"
                )))
            }
            (_, Some(p)) => {
                path = Some(
                    Path::parse(p)
                        .map_err(|e| ReduceError::Spec(format!("--agg {text:?}: {e}")))?,
                );
            }
        }
        // The column is the text as written, without the spaces around `:`.
        let label = match arg {
            Some(a) => format!("{name}:{a}"),
            None => name.to_string(),
        };
        Ok(Agg {
            kind,
            path,
            condition,
            label,
        })
    }

    /// Whether adding an event `n` times equals adding it once with a count of `n` in a way
    /// that lets column reads hand over equal events as one ([`ReadOptions::repeats`]): count,
    /// min, max and the conditional counts (a float `sum` / `avg` would round in another order;
    /// quantiles and distinct counts are exact with repeats too, but are left out of the
    /// shortcut to keep it to counts).
    fn takes_repeats(&self) -> bool {
        matches!(
            self.kind,
            AggKind::Count | AggKind::Min | AggKind::Max | AggKind::CountIf | AggKind::Ratio
        )
    }
}

/// Parses a window length: seconds (`30`) or a number with a unit `s`, `m`, `h`, `d` (`10s`,
/// `5m`), the units of relative times ([`crate::time`]).
pub fn parse_window(text: &str) -> Result<u64, ReduceError> {
    let t = text.trim();
    let secs = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<i64>()
            .map_err(|_| ReduceError::Spec(format!("--window {text:?}: too large")))?
    } else {
        crate::time::parse_time(&format!("+{t}"), 0)
            .map_err(|e| ReduceError::Spec(format!("--window {text:?}: {e}")))?
    };
    if secs <= 0 {
        return Err(ReduceError::Spec(format!(
            "--window {text:?}: must be at least 1 second"
        )));
    }
    Ok(secs as u64)
}

/// What to group by, what to compute, over which windows.
#[derive(Debug, Clone, PartialEq)]
pub struct ReduceSpec {
    /// Group-by paths and their column names (as written).
    pub group_by: Vec<(String, Path)>,
    /// Aggregates, in output order (at least one).
    pub aggs: Vec<Agg>,
    /// Window length in seconds (`None`: one window for everything).
    pub window: Option<u64>,
    /// Most groups held at once.
    pub max_groups: usize,
    /// Rows of each window ranked by a column, largest first, and cut to the first `limit`
    /// (`--count-by`, `--top`); `None`: rows in first-seen order, all of them.
    pub rank: Option<Rank>,
    /// Past `max_groups`, new groups go into one group whose every key is `_other` (counted in
    /// [`Reducer::overflowed`]) instead of failing: rollups, which must never be unbounded
    /// nor stop.
    pub overflow: bool,
    /// The read's range `[from, to)` (set by [`Plan::set_range`]): rows of a window that lies
    /// only partly inside it carry `"partial": true`. `None`: no window is marked.
    pub range: Option<(i64, i64)>,
}

/// The key value of the group that takes the groups past the cap ([`ReduceSpec::overflow`]).
pub const OTHER_GROUP: &str = "_other";

/// How [`ReduceSpec::rank`] orders and cuts the rows of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rank {
    /// The column (an aggregate's label: `count`, `max:ms`, or a group-by field).
    pub by: String,
    /// Rows kept per window (`None`: all).
    pub limit: Option<usize>,
}

impl ReduceSpec {
    /// Parses the texts of `--group-by` (paths), `--agg` and `--window`; each list element may
    /// itself hold several comma-separated items (`"a,b"`). No aggregate means `count`.
    pub fn parse<S: AsRef<str>>(
        group_by: &[S],
        aggs: &[S],
        window: Option<&str>,
    ) -> Result<ReduceSpec, ReduceError> {
        let split = |items: &[S]| -> Vec<String> {
            items
                .iter()
                .flat_map(|s| split_top_level(s.as_ref()))
                .filter(|s| !s.is_empty())
                .collect()
        };
        let mut paths = Vec::new();
        for text in split(group_by) {
            let p = Path::parse(&text)
                .map_err(|e| ReduceError::Spec(format!("--group-by {text:?}: {e}")))?;
            paths.push((text, p));
        }
        let mut parsed = Vec::new();
        for text in split(aggs) {
            parsed.push(Agg::parse(&text)?);
        }
        if parsed.is_empty() {
            parsed.push(Agg::parse("count")?);
        }
        let mut labels: Vec<&str> = paths.iter().map(|(t, _)| t.as_str()).collect();
        labels.extend(parsed.iter().map(|a| a.label.as_str()));
        let window = window.map(parse_window).transpose()?;
        if window.is_some() {
            labels.push("window");
        }
        for (i, l) in labels.iter().enumerate() {
            if labels[..i].contains(l) {
                return Err(ReduceError::Spec(format!(
                    "column {l:?} appears twice (group-by fields, aggregates and `window` share the row)"
                )));
            }
        }
        Ok(ReduceSpec {
            group_by: paths,
            aggs: parsed,
            window,
            max_groups: DEFAULT_MAX_GROUPS,
            rank: None,
            overflow: false,
            range: None,
        })
    }

    /// Ranks each window's rows by column `by` (default: the first aggregate), largest first,
    /// keeping `limit` of them. Refuses a column the rows do not have.
    pub fn ranked(
        mut self,
        by: Option<&str>,
        limit: Option<usize>,
    ) -> Result<ReduceSpec, ReduceError> {
        let by = match by {
            Some(b) => b.to_owned(),
            None => self.aggs[0].label.clone(),
        };
        let known = self
            .group_by
            .iter()
            .map(|(t, _)| t.as_str())
            .chain(self.aggs.iter().map(|a| a.label.as_str()));
        if !known.clone().any(|l| l == by) {
            return Err(ReduceError::Spec(format!(
                "--by {by:?}: not a column of the rows (columns: {})",
                known.collect::<Vec<_>>().join(", ")
            )));
        }
        self.rank = Some(Rank { by, limit });
        Ok(self)
    }
}

/// A value's place in a ranking (see [`rank_key`]): kind (2 number, 1 text, 0 missing), number,
/// JSON text.
pub(crate) type RankKey = (u8, f64, Vec<u8>);

/// Orders values for ranking: numbers (numeric strings too) by value above everything else,
/// then text; missing values last.
pub(crate) fn rank_key(v: Option<&Value>) -> RankKey {
    match v {
        None | Some(Value::Undef) => (0, 0.0, Vec::new()),
        Some(v) => match crate::filter::number_value(v) {
            Some(n) if !n.is_nan() => (2, n, Vec::new()),
            _ => {
                let mut text = Vec::new();
                let _ = sereal::json::to_writer(&mut text, v);
                (1, 0.0, text)
            }
        },
    }
}

/// Whether `a` ranks strictly below `b`.
fn ranks_below(a: &RankKey, b: &RankKey) -> bool {
    a.0.cmp(&b.0)
        .then(a.1.total_cmp(&b.1))
        .then(a.2.cmp(&b.2))
        .is_lt()
}

/// Sorts `rows` (hashes) by column `by`, largest first (a stable sort: ties keep their order),
/// and keeps the first `limit`.
pub fn rank_rows(rows: &mut Vec<Value>, by: &str, limit: Option<usize>) {
    let keyed = |row: &Value| match row {
        Value::Hash(pairs) => rank_key(
            pairs
                .iter()
                .find(|(k, _)| k.as_str() == Some(by))
                .map(|(_, v)| v),
        ),
        _ => rank_key(None),
    };
    rows.sort_by(|a, b| {
        let (ka, kb) = (keyed(a), keyed(b));
        kb.0.cmp(&ka.0)
            .then(kb.1.total_cmp(&ka.1))
            .then(kb.2.cmp(&ka.2))
    });
    if let Some(n) = limit {
        rows.truncate(n);
    }
}

/// The `n` largest of what is offered by [`RankKey`], ties to the earliest offered: the rule of
/// [`TopEvents`], and of the blob reader's cut to the events that are among the top `n` of
/// those read so far ([`crate::ReadOptions::top`]), which must keep every event the top-N of
/// the read can hold.
#[derive(Debug, Clone)]
pub(crate) struct TopBuffer<T> {
    n: usize,
    /// (rank key, arrival order, thing), at most `n`.
    kept: Vec<(RankKey, u64, T)>,
    seen: u64,
    /// Once `kept` is full: where its smallest is (found again after each change, so that the
    /// many offers that are not kept cost one comparison).
    smallest_at: Option<usize>,
}

impl<T> TopBuffer<T> {
    /// Keeps the `n` largest.
    pub(crate) fn new(n: usize) -> TopBuffer<T> {
        TopBuffer {
            n,
            kept: Vec::new(),
            seen: 0,
            smallest_at: None,
        }
    }

    /// Whether something ranked `key`, offered now, would be kept (cheaper than building it
    /// when it would not).
    pub(crate) fn would_keep(&self, key: &RankKey) -> bool {
        if self.n == 0 {
            return false;
        }
        if self.kept.len() < self.n {
            return true;
        }
        // Ties go to the earlier: only a strictly larger key displaces the smallest kept.
        self.smallest_at
            .is_some_and(|at| ranks_below(&self.kept[at].0, key))
    }

    /// Offers one thing ranked `key`; `make` builds it only if it is kept.
    pub(crate) fn offer<E>(
        &mut self,
        key: RankKey,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<(), E> {
        self.seen += 1;
        if !self.would_keep(&key) {
            return Ok(());
        }
        let entry = (key, self.seen, make()?);
        if self.kept.len() < self.n {
            self.kept.push(entry);
        } else if let Some(at) = self.smallest_at {
            self.kept[at] = entry;
        }
        if self.kept.len() == self.n {
            self.smallest_at = self.smallest();
        }
        Ok(())
    }

    /// Where the smallest kept one is (of equal keys, the latest offered: it loses ties).
    fn smallest(&self) -> Option<usize> {
        // n is small: a scan is fine.
        self.kept
            .iter()
            .enumerate()
            .min_by(|(_, a), (_, b)| {
                if ranks_below(&a.0, &b.0) {
                    std::cmp::Ordering::Less
                } else if ranks_below(&b.0, &a.0) {
                    std::cmp::Ordering::Greater
                } else {
                    b.1.cmp(&a.1)
                }
            })
            .map(|(at, _)| at)
    }

    /// The kept ones, largest first (ties in the order offered).
    pub(crate) fn into_ranked(mut self) -> Vec<T> {
        self.kept.sort_by(|a, b| {
            b.0 .0
                .cmp(&a.0 .0)
                .then(b.0 .1.total_cmp(&a.0 .1))
                .then(b.0 .2.cmp(&a.0 .2))
                .then(a.1.cmp(&b.1))
        });
        self.kept.into_iter().map(|(_, _, t)| t).collect()
    }
}

/// The `n` events with the largest value at `path` (numbers first, then text; events without
/// it last), kept in a bounded buffer: `sluice cat --top N --by PATH`.
#[derive(Debug)]
pub struct TopEvents {
    path: Path,
    kept: TopBuffer<Value>,
}

impl TopEvents {
    /// Keeps the `n` largest events by `path`.
    pub fn new(path: &str, n: usize) -> Result<TopEvents, ReduceError> {
        let path =
            Path::parse(path).map_err(|e| ReduceError::Spec(format!("--by {path:?}: {e}")))?;
        Ok(TopEvents {
            path,
            kept: TopBuffer::new(n),
        })
    }

    /// Offers one event.
    pub fn push(&mut self, event: &Value) {
        let key = rank_key(self.path.eval(event).first().copied());
        let kept: Result<(), std::convert::Infallible> = self.kept.offer(key, || Ok(event.clone()));
        let Ok(()) = kept;
    }

    /// The kept events, largest first (ties in arrival order).
    pub fn finish(self) -> Vec<Value> {
        self.kept.into_ranked()
    }
}

/// Splits at commas outside quotes, brackets and parentheses (a path may hold `"a,b"` or `[*]`,
/// a `count_if` expression `in (500, 503)`).
fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut escaped = false;
    for c in s.chars() {
        if let Some(q) = quote {
            cur.push(c);
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
            '"' | '\'' => {
                quote = Some(c);
                cur.push(c);
            }
            '[' | '(' => {
                depth += 1;
                cur.push(c);
            }
            ']' | ')' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

/// The running state of one aggregate over one group.
#[derive(Debug, Clone, Default)]
struct Acc {
    n: u64,
    all_int: bool,
    int_sum: i128,
    float_sum: f64,
    min: Option<(f64, Value)>,
    max: Option<(f64, Value)>,
    /// `count_if` / `ratio`: events that matched.
    matched: u64,
    /// `pNN`: made on the first value.
    quantiles: Option<Box<Quantiles>>,
    /// `distinct`: made on the first value.
    distinct: Option<Box<Distinct>>,
}

/// Adds `v` to a distinct count: an integer as postgresql-hll's `hll_hash_bigint` hashes it, a
/// string by its bytes (`hll_hash_text`; a binary string with the same bytes is the same
/// value), anything else by its JSON text; `null` is not a value.
fn add_distinct(d: &mut Distinct, v: &Value) {
    match v.resolve() {
        Value::Undef => {}
        Value::Int(i) => d.add_i64(*i),
        Value::String(s) => d.add_bytes(s.as_bytes()),
        Value::Binary(b) => d.add_bytes(b),
        other => {
            let mut text = Vec::new();
            let _ = sereal::json::to_writer(&mut text, other);
            d.add_bytes(&text);
        }
    }
}

/// A value as a number: `(as f64, exact integer if it is one, the value to report)`.
fn numeric(v: &Value) -> Option<(f64, Option<i128>, Value)> {
    let v = v.resolve();
    match v {
        Value::Int(i) => Some((*i as f64, Some(i128::from(*i)), v.clone())),
        Value::UInt(u) => Some((*u as f64, Some(i128::from(*u)), v.clone())),
        Value::Float(f) if f.is_finite() => Some((*f, None, v.clone())),
        Value::Float(_) => None,
        _ => crate::filter::number_value(v).map(|f| (f, None, Value::Float(f))),
    }
}

impl Acc {
    /// Adds `v`, `n` times.
    fn add(&mut self, v: &Value, n: u64) {
        let Some((f, int, shown)) = numeric(v) else {
            return;
        };
        if self.n == 0 {
            self.all_int = true;
        }
        self.n += n;
        self.float_sum += if n == 1 { f } else { f * n as f64 };
        match int {
            Some(i) => self.int_sum = self.int_sum.saturating_add(i.saturating_mul(i128::from(n))),
            None => self.all_int = false,
        }
        if self.min.as_ref().is_none_or(|(m, _)| f < *m) {
            self.min = Some((f, shown.clone()));
        }
        if self.max.as_ref().is_none_or(|(m, _)| f > *m) {
            self.max = Some((f, shown));
        }
    }

    /// Adds the value at a `pNN` path, `n` times (the numbers `sum` takes).
    fn add_quantile(&mut self, v: &Value, n: u64) {
        if let Some((f, _, _)) = numeric(v) {
            let q = self.quantiles.get_or_insert_with(Default::default);
            for _ in 0..n {
                q.add(f);
            }
        }
    }

    /// This state as a Sereal hash holding what `kind` needs (see [`Reducer::finish_states`]).
    fn state(&self, kind: AggKind) -> Value {
        let mut out: Vec<(Key, Value)> = Vec::new();
        match kind {
            AggKind::Count => {}
            AggKind::CountIf | AggKind::Ratio => {
                out.push((Key::from("m"), Value::Int(self.matched as i64)));
            }
            AggKind::Quantile(_) => {
                if let Some(q) = &self.quantiles {
                    out.push((Key::from("q"), Value::Binary(q.to_bytes())));
                }
            }
            AggKind::Distinct => {
                if let Some(d) = &self.distinct {
                    out.push((Key::from("d"), Value::Binary(d.to_bytes())));
                }
            }
            AggKind::Sum | AggKind::Avg | AggKind::Min | AggKind::Max => {
                if self.n > 0 {
                    out.push((Key::from("n"), Value::Int(self.n as i64)));
                    out.push((Key::from("f"), Value::Float(self.float_sum)));
                    // An exact integer sum while every value was one (and it fits).
                    if let (true, Ok(i)) = (self.all_int, i64::try_from(self.int_sum)) {
                        out.push((Key::from("i"), Value::Int(i)));
                    }
                    if let Some((_, v)) = &self.min {
                        out.push((Key::from("lo"), v.clone()));
                    }
                    if let Some((_, v)) = &self.max {
                        out.push((Key::from("hi"), v.clone()));
                    }
                }
            }
        }
        Value::Hash(out)
    }

    /// Merges a state of [`Acc::state`] into this one.
    fn merge_state(&mut self, s: &Value) -> Result<(), ReduceError> {
        let bad = |what: String| ReduceError::State(what);
        let int = |name: &str| hash_get(s, name).and_then(Value::as_i64);
        if let Some(m) = int("m") {
            self.matched += u64::try_from(m).map_err(|_| bad(format!("bad count {m}")))?;
        }
        if let Some(Value::Binary(b)) = hash_get(s, "q").map(Value::resolve) {
            let q = Quantiles::from_bytes(b).map_err(|e| bad(e.to_string()))?;
            match &mut self.quantiles {
                Some(have) => have.merge(&q).map_err(|e| bad(e.to_string()))?,
                None => self.quantiles = Some(Box::new(q)),
            }
        }
        if let Some(Value::Binary(b)) = hash_get(s, "d").map(Value::resolve) {
            let d = Distinct::from_bytes(b).map_err(|e| bad(e.to_string()))?;
            match &mut self.distinct {
                Some(have) => have.merge(&d).map_err(|e| bad(e.to_string()))?,
                None => self.distinct = Some(Box::new(d)),
            }
        }
        let n = int("n").and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
        if n > 0 {
            let all_int = int("i").is_some();
            self.all_int = if self.n == 0 {
                all_int
            } else {
                self.all_int && all_int
            };
            self.n += n;
            self.int_sum = self
                .int_sum
                .saturating_add(i128::from(int("i").unwrap_or(0)));
            self.float_sum += hash_get(s, "f").and_then(Value::as_f64).unwrap_or(0.0);
            if let Some((f, _, shown)) = hash_get(s, "lo").and_then(numeric) {
                if self.min.as_ref().is_none_or(|(m, _)| f < *m) {
                    self.min = Some((f, shown));
                }
            }
            if let Some((f, _, shown)) = hash_get(s, "hi").and_then(numeric) {
                if self.max.as_ref().is_none_or(|(m, _)| f > *m) {
                    self.max = Some((f, shown));
                }
            }
        }
        Ok(())
    }

    fn result(&self, kind: AggKind, count: u64) -> Value {
        match kind {
            AggKind::Count => Value::Int(count as i64),
            AggKind::CountIf => Value::Int(self.matched as i64),
            // A group holds at least one event.
            AggKind::Ratio => Value::Float(self.matched as f64 / count.max(1) as f64),
            AggKind::Distinct => Value::Int(
                self.distinct
                    .as_ref()
                    .map_or(0, |d| d.cardinality().min(i64::MAX as u64) as i64),
            ),
            AggKind::Quantile(q) => self
                .quantiles
                .as_ref()
                .and_then(|s| s.quantile(f64::from(q) / 1000.0))
                .map_or(Value::Undef, Value::Float),
            _ if self.n == 0 => Value::Undef,
            AggKind::Sum => match i64::try_from(self.int_sum) {
                Ok(i) if self.all_int => Value::Int(i),
                _ => Value::Float(self.float_sum),
            },
            AggKind::Avg => Value::Float(self.float_sum / self.n as f64),
            AggKind::Min => self.min.as_ref().map_or(Value::Undef, |(_, v)| v.clone()),
            AggKind::Max => self.max.as_ref().map_or(Value::Undef, |(_, v)| v.clone()),
        }
    }
}

#[derive(Debug)]
struct Group {
    key: Vec<Value>,
    count: u64,
    accs: Vec<Acc>,
}

#[derive(Debug, Default)]
struct Window {
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<Group>,
}

/// Groups and aggregates events pushed in epoch order (see the module docs).
#[derive(Debug)]
pub struct Reducer {
    spec: ReduceSpec,
    windows: BTreeMap<i64, Window>,
    /// Windows starting before this were handed out.
    handed_out_before: Option<i64>,
    groups: usize,
    late: u64,
    events: u64,
    /// Events put in the `_other` group ([`ReduceSpec::overflow`]).
    overflowed: u64,
    labels: Vec<Key>,
    /// The JSON key of the event being pushed (kept to spare an allocation per event).
    key_scratch: Vec<u8>,
}

/// Where a new group's key comes from.
enum KeySource<'a> {
    /// The group-by paths' first matches in this event.
    Event(&'a Value),
    /// These values (a partial state's key).
    Values(&'a [Value]),
}

/// The value of `name` in the hash `v` (a partial state).
fn hash_get<'v>(v: &'v Value, name: &str) -> Option<&'v Value> {
    match v.resolve() {
        Value::Hash(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .map(|(_, v)| v),
        _ => None,
    }
}

/// The first match of `path` in `event`, or undef (a group-by path's value).
fn first_match<'v>(path: &Path, event: &'v Value) -> &'v Value {
    const UNDEF: &Value = &Value::Undef;
    path.eval(event).first().copied().unwrap_or(UNDEF)
}

impl Reducer {
    /// A reducer for `spec`.
    pub fn new(spec: ReduceSpec) -> Reducer {
        let labels = spec
            .group_by
            .iter()
            .map(|(t, _)| t.as_str())
            .chain(spec.aggs.iter().map(|a| a.label.as_str()))
            .map(|l| Key::Utf8(Arc::from(l)))
            .collect();
        Reducer {
            spec,
            windows: BTreeMap::new(),
            handed_out_before: None,
            groups: 0,
            late: 0,
            events: 0,
            overflowed: 0,
            labels,
            key_scratch: Vec::new(),
        }
    }

    fn window_of(&self, epoch: i64) -> i64 {
        match self.spec.window {
            Some(w) => {
                let w = w.min(i64::MAX as u64) as i64;
                epoch - epoch.rem_euclid(w)
            }
            None => 0,
        }
    }

    /// Adds one event of second `epoch`.
    pub fn push(&mut self, epoch: i64, event: &Value) -> Result<(), ReduceError> {
        self.push_repeated(epoch, event, 1)
    }

    /// Adds `n` equal events of second `epoch` ([`crate::ReadEvent::repeat`]): exact for every
    /// aggregate but a float `sum` / `avg`, whose additions round in another order (so
    /// [`Plan::narrow_read`] asks for repeats only for count, min, max, count_if and ratio).
    pub fn push_repeated(&mut self, epoch: i64, event: &Value, n: u64) -> Result<(), ReduceError> {
        let start = self.window_of(epoch);
        if self.handed_out_before.is_some_and(|b| start < b) {
            self.late += n;
            return Ok(());
        }
        // The group's key as JSON texts (how keys compare), in a buffer kept across events: the
        // key's values are cloned only for a new group.
        let mut key_bytes = std::mem::take(&mut self.key_scratch);
        key_bytes.clear();
        for (_, p) in &self.spec.group_by {
            // Writing JSON to a Vec cannot fail.
            let _ = sereal::json::to_writer(&mut key_bytes, first_match(p, event));
            key_bytes.push(0);
        }
        let at = self.group_index(start, &key_bytes, KeySource::Event(event), n);
        self.key_scratch = key_bytes;
        let at = at?;
        let Some(group) = self
            .windows
            .get_mut(&start)
            .and_then(|w| w.groups.get_mut(at))
        else {
            return Ok(()); // `group_index` made it: not reached
        };
        group.count += n;
        for (agg, acc) in self.spec.aggs.iter().zip(group.accs.iter_mut()) {
            match (agg.kind, &agg.path, &agg.condition) {
                (AggKind::CountIf | AggKind::Ratio, _, Some(c)) if c.matches(event) => {
                    acc.matched += n;
                }
                (AggKind::CountIf | AggKind::Ratio, _, _) => {}
                (AggKind::Quantile(_), Some(p), _) => {
                    for v in p.eval(event) {
                        acc.add_quantile(v, n);
                    }
                }
                // Adding a value again changes no distinct count: once is `n` times.
                (AggKind::Distinct, Some(p), _) => {
                    for v in p.eval(event) {
                        add_distinct(acc.distinct.get_or_insert_with(Default::default), v);
                    }
                }
                (_, Some(p), _) => {
                    for v in p.eval(event) {
                        acc.add(v, n);
                    }
                }
                _ => {}
            }
        }
        self.events += n;
        Ok(())
    }

    /// The index of the group of `key_bytes` in window `start`, made (its key from `source`)
    /// if new; past the cap, the `_other` group ([`ReduceSpec::overflow`]) or an error.
    fn group_index(
        &mut self,
        start: i64,
        key_bytes: &[u8],
        source: KeySource<'_>,
        n: u64,
    ) -> Result<usize, ReduceError> {
        let n_aggs = self.spec.aggs.len();
        let window = self.windows.entry(start).or_default();
        if let Some(&at) = window.index.get(key_bytes) {
            return Ok(at);
        }
        let (key_bytes, key): (Vec<u8>, Vec<Value>) = if self.groups >= self.spec.max_groups {
            if !self.spec.overflow {
                return Err(ReduceError::TooManyGroups(self.spec.max_groups));
            }
            self.overflowed += n;
            let values = vec![Value::String(OTHER_GROUP.into()); self.spec.group_by.len()];
            let mut bytes = Vec::new();
            for v in &values {
                let _ = sereal::json::to_writer(&mut bytes, v);
                bytes.push(0);
            }
            if let Some(&at) = window.index.get(&bytes) {
                return Ok(at);
            }
            (bytes, values)
        } else {
            let key = match source {
                KeySource::Event(event) => self
                    .spec
                    .group_by
                    .iter()
                    .map(|(_, p)| first_match(p, event).clone())
                    .collect(),
                KeySource::Values(values) => values.to_vec(),
            };
            (key_bytes.to_vec(), key)
        };
        self.groups += 1;
        window.groups.push(Group {
            key,
            count: 0,
            accs: vec![Acc::default(); n_aggs],
        });
        window.index.insert(key_bytes, window.groups.len() - 1);
        Ok(window.groups.len() - 1)
    }

    /// Events put in the `_other` group ([`ReduceSpec::overflow`]).
    pub fn overflowed(&self) -> u64 {
        self.overflowed
    }

    /// Takes the rows of every window as **partial states** instead of values: one
    /// `{"w": window start, "k": [group key…], "n": events, "a": [state of each aggregate]}`
    /// per group, which [`Reducer::push_state`] merges exactly (counts, sums, min / max,
    /// conditional counts; quantile and distinct sketches merged, never averaged). What a rollup
    /// stores per blob.
    pub fn finish_states(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        for (start, w) in std::mem::take(&mut self.windows) {
            for g in w.groups {
                let accs = self
                    .spec
                    .aggs
                    .iter()
                    .zip(&g.accs)
                    .map(|(agg, acc)| acc.state(agg.kind))
                    .collect();
                out.push(Value::Hash(vec![
                    (Key::from("w"), Value::Int(start)),
                    (Key::from("k"), Value::Array(g.key)),
                    (
                        Key::from("n"),
                        Value::Int(g.count.min(i64::MAX as u64) as i64),
                    ),
                    (Key::from("a"), Value::Array(accs)),
                ]));
            }
        }
        out
    }

    /// Merges one partial state of [`Reducer::finish_states`] made with the same group-by
    /// paths and aggregates (its window is taken into this reducer's, which must be a multiple
    /// of the state's for exact windows). Pushed in window order, as events are.
    pub fn push_state(&mut self, state: &Value) -> Result<(), ReduceError> {
        let bad = |what: &str| ReduceError::State(what.to_owned());
        let field = |name: &str| hash_get(state, name);
        let start = field("w")
            .and_then(Value::as_i64)
            .ok_or_else(|| bad("no window start \"w\""))?;
        let Some(Value::Array(key)) = field("k").map(Value::resolve) else {
            return Err(bad("no group key \"k\""));
        };
        let count = field("n")
            .and_then(Value::as_i64)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| bad("no event count \"n\""))?;
        let Some(Value::Array(accs)) = field("a").map(Value::resolve) else {
            return Err(bad("no aggregate states \"a\""));
        };
        if key.len() != self.spec.group_by.len() || accs.len() != self.spec.aggs.len() {
            return Err(bad("made with other group-by paths or aggregates"));
        }
        let start = self.window_of(start);
        if self.handed_out_before.is_some_and(|b| start < b) {
            self.late += count;
            return Ok(());
        }
        let mut key_bytes = Vec::new();
        for v in key {
            let _ = sereal::json::to_writer(&mut key_bytes, v);
            key_bytes.push(0);
        }
        let at = self.group_index(start, &key_bytes, KeySource::Values(key), count)?;
        let Some(group) = self
            .windows
            .get_mut(&start)
            .and_then(|w| w.groups.get_mut(at))
        else {
            return Ok(());
        };
        group.count += count;
        for (acc, s) in group.accs.iter_mut().zip(accs) {
            acc.merge_state(s)?;
        }
        self.events += count;
        Ok(())
    }

    /// Rows of the windows that are complete: every window before the latest one seen.
    pub fn ready(&mut self) -> Vec<Value> {
        let Some(&latest) = self.windows.keys().next_back() else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        while let Some(entry) = self.windows.first_entry() {
            if *entry.key() >= latest {
                break;
            }
            let (start, w) = entry.remove_entry();
            self.handed_out_before = Some(start + 1);
            self.rows_of(start, w, &mut rows);
        }
        rows
    }

    /// The rows of every window left (call once, at the end of the input).
    pub fn finish(mut self) -> Vec<Value> {
        let mut rows = Vec::new();
        for (start, w) in std::mem::take(&mut self.windows) {
            self.rows_of(start, w, &mut rows);
        }
        rows
    }

    /// Events left out because their window had already been handed out.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Events aggregated so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    fn rows_of(&mut self, start: i64, w: Window, out: &mut Vec<Value>) {
        self.groups = self.groups.saturating_sub(w.groups.len());
        let mut rows = Vec::with_capacity(w.groups.len());
        for g in w.groups {
            let mut row: Vec<(Key, Value)> = Vec::with_capacity(self.labels.len() + 1);
            if let Some(len) = self.spec.window {
                row.push((Key::Utf8(Arc::from("window")), Value::Int(start)));
                // A window the range cuts holds only part of its events: say so (unless a
                // group-by field or aggregate is itself named `partial`).
                let end = start.saturating_add(i64::try_from(len).unwrap_or(i64::MAX));
                let cut = self
                    .spec
                    .range
                    .is_some_and(|(from, to)| start < from || end > to);
                if cut && !self.labels.iter().any(|l| l.as_bytes() == b"partial") {
                    row.push((Key::Utf8(Arc::from("partial")), Value::Bool(true)));
                }
            }
            let mut labels = self.labels.iter();
            for v in g.key {
                if let Some(l) = labels.next() {
                    row.push((l.clone(), v));
                }
            }
            for (agg, acc) in self.spec.aggs.iter().zip(&g.accs) {
                if let Some(l) = labels.next() {
                    row.push((l.clone(), acc.result(agg.kind, g.count)));
                }
            }
            rows.push(Value::Hash(row));
        }
        if let Some(rank) = &self.spec.rank {
            rank_rows(&mut rows, &rank.by, rank.limit);
        }
        out.append(&mut rows);
    }
}

/// The reduce and ranking options as a user gives them (`sluice cat` flags, `GET /v1/events`
/// parameters): [`PlanArgs::plan`] is the one place they are checked and combined.
#[derive(Debug, Clone, Default)]
pub struct PlanArgs {
    /// `--group-by` / `group_by` paths (comma-separated or repeated).
    pub group_by: Vec<String>,
    /// `--agg` / `agg` aggregates.
    pub agg: Vec<String>,
    /// `--window` / `window` length.
    pub window: Option<String>,
    /// `--count-by` / `count_by`: `group_by` with `agg count`, ranked by count.
    pub count_by: Vec<String>,
    /// `--top` / `top`: rows (or events) kept.
    pub top: Option<usize>,
    /// `--by` / `by`: the column rows are ranked by, or the field events are.
    pub by: Option<String>,
    /// Most groups held at once (default [`DEFAULT_MAX_GROUPS`]).
    pub max_groups: Option<usize>,
}

/// What a read does with its events instead of handing them out.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Group and aggregate (maybe ranked): rows.
    Reduce(ReduceSpec),
    /// The `n` events with the largest value at path `by`.
    Top {
        /// The field.
        by: String,
        /// How many.
        n: usize,
    },
}

impl Plan {
    /// The paths a reduce reads (group-by and aggregate paths, and the paths of `count_if` /
    /// `ratio` expressions), so a read can fetch only those fields; `None` when the plan needs
    /// whole events (a top-N prints them).
    pub fn paths(&self) -> Option<Vec<Path>> {
        match self {
            Plan::Reduce(spec) => Some(
                spec.group_by
                    .iter()
                    .map(|(_, p)| p.clone())
                    .chain(spec.aggs.iter().filter_map(|a| a.path.clone()))
                    .chain(
                        spec.aggs
                            .iter()
                            .filter_map(|a| a.condition.as_ref())
                            .flat_map(|c| c.paths().iter().cloned()),
                    )
                    .collect(),
            ),
            Plan::Top { .. } => None,
        }
    }

    /// Tells a reduce the range it reads, `[from, to)`: the rows of a window only partly
    /// inside it (the first, when `from` is not on a window boundary; the last, when `to` is
    /// not) carry `"partial": true`.
    pub fn set_range(&mut self, from: i64, to: i64) {
        if let Plan::Reduce(spec) = self {
            spec.range = Some((from, to));
        }
    }

    /// Tells a read what this plan reads of each event, so blob chunks are read lazily: a
    /// reduce's paths ([`ReadOptions::needs`]: sparse events, and only those fields of the
    /// column files), a top-N's field and count ([`ReadOptions::top`]: only the events that
    /// can be among the top are decoded). The rows are those of whole events.
    pub fn narrow_read(&self, opts: &mut ReadOptions) {
        match self {
            Plan::Reduce(spec) => {
                opts.needs = self.paths();
                // Equal events may come as one with a count where that changes no aggregate.
                opts.repeats = spec.aggs.iter().all(Agg::takes_repeats);
            }
            Plan::Top { by, n } => {
                // `PlanArgs::plan` checked the path; a plan built otherwise reads whole events.
                opts.top = Path::parse(by).ok().map(|p| (p, *n));
            }
        }
    }
}

impl PlanArgs {
    /// The plan asked for; `None` when no option is given (a plain read). `selects`: whether
    /// the read projects events (`select`), which a reduce cannot take.
    pub fn plan(&self, selects: bool) -> Result<Option<Plan>, ReduceError> {
        let spec_err = |m: &str| Err(ReduceError::Spec(m.to_owned()));
        let grouped = !(self.group_by.is_empty()
            && self.count_by.is_empty()
            && self.agg.is_empty()
            && self.window.is_none());
        if !grouped {
            return match (self.top, &self.by) {
                (None, None) => Ok(None),
                (Some(n), Some(by)) => {
                    Path::parse(by).map_err(|e| ReduceError::Spec(format!("--by {by:?}: {e}")))?;
                    Ok(Some(Plan::Top { by: by.clone(), n }))
                }
                (Some(_), None) => {
                    spec_err("--top N needs --by FIELD (or a --group-by / --count-by to rank)")
                }
                (None, Some(_)) => spec_err("--by needs --top N or a --group-by / --count-by"),
            };
        }
        if selects {
            return spec_err(
                "--select cannot be combined with --group-by/--agg/--window (a reduce reads only the fields it names: name them in --group-by and --agg)",
            );
        }
        if !self.count_by.is_empty() && (!self.group_by.is_empty() || !self.agg.is_empty()) {
            return spec_err("--count-by is --group-by PATHS --agg count: use one or the other");
        }
        let mut spec = if self.count_by.is_empty() {
            ReduceSpec::parse(&self.group_by, &self.agg, self.window.as_deref())?
        } else {
            ReduceSpec::parse(
                &self.count_by,
                &["count".to_owned()],
                self.window.as_deref(),
            )?
        };
        spec.max_groups = self.max_groups.unwrap_or(DEFAULT_MAX_GROUPS).max(1);
        if !self.count_by.is_empty() || self.top.is_some() || self.by.is_some() {
            spec = spec.ranked(self.by.as_deref(), self.top)?;
        }
        Ok(Some(Plan::Reduce(spec)))
    }
}

/// Runs a [`Plan`] over events pushed in epoch order: rows as windows complete, the rest (or
/// the top events) at the end.
#[derive(Debug)]
pub enum Sink {
    /// A reduce.
    Reduce(Reducer),
    /// A top-N.
    Top(TopEvents),
}

impl Sink {
    /// A sink for `plan`.
    pub fn new(plan: Plan) -> Result<Sink, ReduceError> {
        Ok(match plan {
            Plan::Reduce(spec) => Sink::Reduce(Reducer::new(spec)),
            Plan::Top { by, n } => Sink::Top(TopEvents::new(&by, n)?),
        })
    }

    /// Whether the plan needs each event's epoch (a top-N does not).
    pub fn needs_epoch(&self) -> bool {
        matches!(self, Sink::Reduce(_))
    }

    /// Adds one event of second `epoch`; returns the rows now complete.
    pub fn push(&mut self, epoch: i64, event: &Value) -> Result<Vec<Value>, ReduceError> {
        self.push_repeated(epoch, event, 1)
    }

    /// Adds an event read ([`crate::ReadEvent::repeat`] times); returns the rows now complete.
    pub fn push_read(&mut self, event: &crate::ReadEvent) -> Result<Vec<Value>, ReduceError> {
        self.push_repeated(event.key.epoch(), &event.value, event.repeat)
    }

    /// Adds `n` equal events of second `epoch`; returns the rows now complete.
    pub fn push_repeated(
        &mut self,
        epoch: i64,
        event: &Value,
        n: u64,
    ) -> Result<Vec<Value>, ReduceError> {
        match self {
            Sink::Reduce(r) => {
                r.push_repeated(epoch, event, n)?;
                Ok(r.ready())
            }
            Sink::Top(t) => {
                for _ in 0..n {
                    t.push(event);
                }
                Ok(Vec::new())
            }
        }
    }

    /// The rows left, and how many events came after their window was handed out.
    pub fn finish(self) -> (Vec<Value>, u64) {
        match self {
            Sink::Reduce(r) => {
                let late = r.late();
                (r.finish(), late)
            }
            Sink::Top(t) => (t.finish(), 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> Value {
        sereal::json::from_json_slice(json.as_bytes()).expect("json")
    }

    fn rows(r: Vec<Value>) -> Vec<String> {
        r.iter()
            .map(|v| sereal::json::to_json_value(v).to_string())
            .collect()
    }

    /// Partial states of 10 s windows, merged into 60 s windows, give the rows the events give
    /// directly (integers only: a float sum adds in another order).
    #[test]
    fn merged_states_give_the_rows_of_the_events() {
        let aggs = [
            "count",
            "sum:ms",
            "min:ms",
            "max:ms",
            "avg:ms",
            "p50:ms",
            "p99:ms",
            "distinct:user",
            "count_if:status >= 500",
            "ratio:status >= 500",
        ];
        let events: Vec<(i64, Value)> = (0..2_000i64)
            .map(|i| {
                let json = format!(
                    r#"{{"path":"/{}","ms":{},"user":"u{}","status":{}}}"#,
                    i % 3,
                    (i * 37) % 1000,
                    i % 250,
                    if i % 7 == 0 { 503 } else { 200 }
                );
                (1_000 + i / 10, ev(&json))
            })
            .collect();
        let direct = {
            let mut r = Reducer::new(ReduceSpec::parse(&["path"], &aggs, Some("60s")).unwrap());
            for (e, v) in &events {
                r.push(*e, v).unwrap();
            }
            rows(r.finish())
        };
        // States per 10 s, as rollups store them (one reducer per "blob" of 100 events).
        let mut merged = Reducer::new(ReduceSpec::parse(&["path"], &aggs, Some("60s")).unwrap());
        for blob in events.chunks(100) {
            let mut r = Reducer::new(ReduceSpec::parse(&["path"], &aggs, Some("10s")).unwrap());
            for (e, v) in blob {
                r.push(*e, v).unwrap();
            }
            for state in r.finish_states() {
                merged.push_state(&state).unwrap();
            }
        }
        assert_eq!(merged.events(), 2_000);
        // Group order may differ (first seen): compare sorted.
        let mut got = rows(merged.finish());
        let mut want = direct;
        got.sort();
        want.sort();
        assert_eq!(got, want);

        // A state made with other aggregates is refused, not misread.
        let mut other = Reducer::new(ReduceSpec::parse(&["path"], &["count"], None).unwrap());
        let mut r = Reducer::new(ReduceSpec::parse(&["path"], &aggs, Some("10s")).unwrap());
        r.push(1_000, &events[0].1).unwrap();
        let state = r.finish_states().remove(0);
        assert!(matches!(
            other.push_state(&state),
            Err(ReduceError::State(_))
        ));
        assert!(matches!(
            other.push_state(&ev("[1]")),
            Err(ReduceError::State(_))
        ));
    }

    #[test]
    fn past_the_cap_groups_overflow_into_other_and_are_counted() {
        let mut spec = ReduceSpec::parse(&["user"], &["count"], None).unwrap();
        spec.max_groups = 3;
        spec.overflow = true;
        let mut r = Reducer::new(spec);
        for i in 0..10 {
            r.push(1, &ev(&format!(r#"{{"user":"u{i}"}}"#))).unwrap();
        }
        assert_eq!(r.overflowed(), 7);
        let rows = rows(r.finish());
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows[3], r#"{"user":"_other","count":7}"#);
    }

    #[test]
    fn groups_aggregates_and_windows() {
        let spec = ReduceSpec::parse(
            &["type,status"],
            &["count,sum:ms,min:ms,max:ms,avg:ms", "sum:t[*]"],
            Some("10s"),
        )
        .unwrap();
        let mut r = Reducer::new(spec);
        let input = [
            (100, r#"{"type":"WEB","status":200,"ms":1,"t":[1,2]}"#),
            (101, r#"{"type":"WEB","status":500,"ms":2.5}"#),
            (103, r#"{"type":"WEB","status":200,"ms":"4","t":[3]}"#),
            (109, r#"{"type":"WEB","status":200,"ms":"x"}"#),
            (110, r#"{"type":"WEB","status":200}"#),
        ];
        for (i, (e, j)) in input.iter().enumerate() {
            r.push(*e, &ev(j)).unwrap();
            if i == 3 {
                assert!(r.ready().is_empty(), "window 100 is still open");
            }
        }
        assert_eq!(
            rows(r.ready()),
            [
                r#"{"window":100,"type":"WEB","status":200,"count":3,"sum:ms":5.0,"min:ms":1,"max:ms":4.0,"avg:ms":2.5,"sum:t[*]":6}"#,
                r#"{"window":100,"type":"WEB","status":500,"count":1,"sum:ms":2.5,"min:ms":2.5,"max:ms":2.5,"avg:ms":2.5,"sum:t[*]":null}"#,
            ]
        );
        // Late: window 100 was handed out.
        r.push(105, &ev(r#"{"type":"WEB","status":200,"ms":1}"#))
            .unwrap();
        assert_eq!(r.late(), 1);
        assert_eq!(
            rows(r.finish()),
            [
                r#"{"window":110,"type":"WEB","status":200,"count":1,"sum:ms":null,"min:ms":null,"max:ms":null,"avg:ms":null,"sum:t[*]":null}"#
            ]
        );
    }

    #[test]
    fn ranked_rows_and_top_events() {
        let spec = ReduceSpec::parse(&["status"], &["count", "max:ms"], None)
            .unwrap()
            .ranked(None, Some(2))
            .unwrap();
        let mut r = Reducer::new(spec);
        for (status, ms) in [(200, 1), (500, 9), (200, 2), (404, 3), (200, 4), (500, 1)] {
            r.push(0, &ev(&format!(r#"{{"status":{status},"ms":{ms}}}"#)))
                .unwrap();
        }
        assert_eq!(
            rows(r.finish()),
            [
                r#"{"status":200,"count":3,"max:ms":4}"#,
                r#"{"status":500,"count":2,"max:ms":9}"#
            ]
        );
        let bad = ReduceSpec::parse(&["status"], &["count"], None)
            .unwrap()
            .ranked(Some("ms"), None);
        assert!(bad.is_err());

        let mut top = TopEvents::new("ms", 3).unwrap();
        for j in [
            r#"{"ms":5}"#,
            r#"{"ms":"12"}"#,
            "{}",
            r#"{"ms":1}"#,
            r#"{"ms":7}"#,
            r#"{"ms":7,"b":1}"#,
        ] {
            top.push(&ev(j));
        }
        assert_eq!(
            rows(top.finish()),
            [r#"{"ms":"12"}"#, r#"{"ms":7}"#, r#"{"ms":7,"b":1}"#]
        );
    }

    #[test]
    fn no_window_no_group_and_missing_fields() {
        let mut r = Reducer::new(ReduceSpec::parse::<&str>(&[], &[], None).unwrap());
        for e in [1, 50, 7] {
            r.push(e, &ev("{}")).unwrap();
        }
        assert!(r.ready().is_empty());
        assert_eq!(rows(r.finish()), [r#"{"count":3}"#]);

        let mut r = Reducer::new(ReduceSpec::parse(&["a.b"], &["sum:n"], None).unwrap());
        r.push(0, &ev(r#"{"n":1}"#)).unwrap();
        r.push(0, &ev(r#"{"a":{"b":1},"n":9223372036854775807}"#))
            .unwrap();
        r.push(0, &ev(r#"{"a":{"b":1.0},"n":1}"#)).unwrap();
        r.push(0, &ev(r#"{"a":{"b":1},"n":1}"#)).unwrap();
        assert_eq!(
            rows(r.finish()),
            [
                r#"{"a.b":null,"sum:n":1}"#,
                // Past i64: the float sum.
                r#"{"a.b":1,"sum:n":9.223372036854776e+18}"#,
                r#"{"a.b":1.0,"sum:n":1}"#,
            ]
        );
    }

    #[test]
    fn negative_epochs_and_group_limit() {
        let mut spec = ReduceSpec::parse(&["k"], &["count"], Some("1m")).unwrap();
        assert_eq!(spec.window, Some(60));
        spec.max_groups = 2;
        let mut r = Reducer::new(spec);
        r.push(-1, &ev(r#"{"k":1}"#)).unwrap();
        r.push(-1, &ev(r#"{"k":2}"#)).unwrap();
        assert_eq!(
            r.push(-1, &ev(r#"{"k":3}"#)),
            Err(ReduceError::TooManyGroups(2))
        );
        // A new window frees the old one's groups once it is handed out.
        r.push(0, &ev(r#"{"k":3}"#)).unwrap_err();
        assert_eq!(rows(r.ready()).len(), 2);
        r.push(0, &ev(r#"{"k":3}"#)).unwrap();
        assert_eq!(rows(r.finish()), [r#"{"window":0,"k":3,"count":1}"#]);
    }

    #[test]
    fn sketches_and_conditional_counts() {
        let spec = ReduceSpec::parse(
            &["path"],
            &[
                "count,p50:ms,p95:ms,p99.9:ms,p0:ms,p100:ms,distinct:user",
                "count_if:status >= 500,ratio:status in (500, 503),count_if:exists user",
            ],
            None,
        )
        .unwrap();
        assert_eq!(spec.aggs[1].kind, AggKind::Quantile(500));
        assert_eq!(spec.aggs[3].kind, AggKind::Quantile(999));
        assert_eq!(spec.aggs[8].label, "ratio:status in (500, 503)");
        let mut r = Reducer::new(spec);
        // 10 000 events on /a: ms 1..=10000 (as numbers and numeric strings), users 0..2500
        // (integers and strings), statuses 200 / 500 / 503 / 404; one event on /b without them.
        let mut exact_ms = Vec::new();
        let (mut errors, mut ratio_hits, mut with_user) = (0, 0, 0);
        for i in 1..=10_000i64 {
            let status = [200, 500, 503, 404, 200][(i % 5) as usize];
            errors += i64::from(status >= 500);
            ratio_hits += i64::from(status == 500 || status == 503);
            let ms = if i % 3 == 0 {
                format!("\"{i}\"")
            } else {
                i.to_string()
            };
            let user = match i % 4 {
                0 => format!("{}", i % 2500),
                1 => format!("\"u{}\"", i % 2500),
                _ => "null".to_owned(),
            };
            with_user += 1; // `exists user` holds for null too: it is there
            exact_ms.push(i as f64);
            r.push(
                0,
                &ev(&format!(
                    r#"{{"path":"/a","ms":{ms},"status":{status},"user":{user}}}"#
                )),
            )
            .unwrap();
        }
        r.push(0, &ev(r#"{"path":"/b","status":"x"}"#)).unwrap();
        let out = r.finish();
        let a = &out[0];
        let get = |row: &Value, k: &str| row.get(k).cloned().unwrap_or(Value::Undef);
        for (label, q) in [("p50:ms", 0.5), ("p95:ms", 0.95), ("p99.9:ms", 0.999)] {
            let want = exact_ms[(q * (exact_ms.len() as f64 - 1.0)) as usize];
            let got = get(a, label).as_f64().expect(label);
            assert!(
                (got - want).abs() <= 0.01 * want,
                "{label}: {got} vs {want}"
            );
        }
        assert_eq!(get(a, "p0:ms"), Value::Float(1.0));
        assert_eq!(get(a, "p100:ms"), Value::Float(10_000.0));
        // Users: i % 4 == 0 gives integers i % 2500 (the multiples of 4 below 2500: 625), i % 4
        // == 1 strings "u…" (2500 / 4 = 625 values, each a different string); nulls do not count.
        let distinct = get(a, "distinct:user").as_i64().expect("distinct");
        assert!(
            (distinct - 1250).abs() as f64 <= 0.07 * 1250.0,
            "{distinct}"
        );
        assert_eq!(get(a, "count_if:status >= 500"), Value::Int(errors));
        assert_eq!(
            get(a, "ratio:status in (500, 503)"),
            Value::Float(ratio_hits as f64 / 10_000.0)
        );
        assert_eq!(get(a, "count_if:exists user"), Value::Int(with_user));
        assert_eq!(
            rows(vec![out[1].clone()]),
            [
                r#"{"path":"/b","count":1,"p50:ms":null,"p95:ms":null,"p99.9:ms":null,"p0:ms":null,"p100:ms":null,"distinct:user":0,"count_if:status >= 500":0,"ratio:status in (500, 503)":0.0,"count_if:exists user":0}"#
            ]
        );

        // Small distinct sets are exact; 1 and 1.0 and "1" are three values, a binary and a
        // UTF-8 string with the same bytes one.
        let mut r = Reducer::new(ReduceSpec::parse::<&str>(&[], &["distinct:v[*]"], None).unwrap());
        r.push(0, &ev(r#"{"v":[1,1.0,"1",1,null,{"a":1},{"a":1}]}"#))
            .unwrap();
        let mut bin = ev(r#"{"v":[]}"#);
        if let Value::Hash(h) = &mut bin {
            h[0].1 = Value::Array(vec![Value::Binary(b"1".to_vec())]);
        }
        r.push(0, &bin).unwrap();
        assert_eq!(rows(r.finish()), [r#"{"distinct:v[*]":4}"#]);
    }

    #[test]
    fn repeats_add_n_times_and_narrowed_reads_name_condition_paths() {
        let aggs = ["count,min:ms,p95:ms,distinct:u,count_if:s >= 500,ratio:exists x.y"];
        let spec = ReduceSpec::parse(&["k"], &aggs, Some("10s")).unwrap();
        let events = [
            r#"{"k":1,"ms":5,"u":"a","s":500,"x":{"y":null}}"#,
            r#"{"k":1,"ms":"7.5","u":3,"s":200}"#,
            r#"{"k":2,"ms":1,"s":503,"x":{"z":1}}"#,
        ];
        let (mut once, mut each) = (Reducer::new(spec.clone()), Reducer::new(spec.clone()));
        for (i, e) in events.iter().enumerate() {
            let n = 3 + i as u64 * 40;
            once.push_repeated(1, &ev(e), n).unwrap();
            for _ in 0..n {
                each.push(1, &ev(e)).unwrap();
            }
        }
        assert_eq!(rows(once.finish()), rows(each.finish()));

        let plan = Plan::Reduce(spec.clone());
        let mut opts = ReadOptions::default();
        plan.narrow_read(&mut opts);
        let needs: Vec<String> = opts.needs.unwrap().iter().map(|p| p.to_string()).collect();
        assert_eq!(needs, ["k", "ms", "ms", "u", "s", "x.y"]);
        assert!(!opts.repeats, "p95 and distinct leave the repeat shortcut");
        for (aggs, repeats) in [
            ("count,count_if:s >= 500,ratio:s == 1,min:ms,max:ms", true),
            ("count,p50:ms", false),
            ("distinct:u", false),
            ("avg:ms", false),
        ] {
            let mut opts = ReadOptions::default();
            Plan::Reduce(ReduceSpec::parse(&["k"], &[aggs], None).unwrap()).narrow_read(&mut opts);
            assert_eq!(opts.repeats, repeats, "{aggs}");
        }

        // A sparse event (only the plan's paths, a missing one left out) gives the rows of the
        // whole one, `exists` included.
        let shape = crate::request::SparseShape::of(&plan.paths().unwrap()).unwrap();
        let (mut whole, mut sparse) = (Reducer::new(spec.clone()), Reducer::new(spec));
        for e in events {
            let e = ev(e);
            whole.push(1, &e).unwrap();
            let values = shape
                .paths()
                .iter()
                .map(|p| p.eval(&e).first().map(|v| (*v).clone()));
            sparse.push(1, &shape.build(values)).unwrap();
        }
        assert_eq!(rows(whole.finish()), rows(sparse.finish()));
    }

    #[test]
    fn specs_are_validated() {
        for (g, a, w) in [
            (vec!["a["], vec!["count"], None),
            (vec!["a"], vec!["median:x"], None),
            (vec!["a"], vec!["sum"], None),
            (vec!["a"], vec!["count:x"], None),
            (vec!["a"], vec!["count"], Some("0s")),
            (vec!["a"], vec!["count"], Some("10 parsecs")),
            (vec!["a,a"], vec!["count"], None),
            (vec!["window"], vec!["count"], Some("5")),
            (vec!["a"], vec!["p101:x"], None),
            (vec!["a"], vec!["p9.99:x"], None),
            (vec!["a"], vec!["p:x"], None),
            (vec!["a"], vec!["p95."], None),
            (vec!["a"], vec!["p95"], None),
            (vec!["a"], vec!["distinct"], None),
            (vec!["a"], vec!["count_if"], None),
            (vec!["a"], vec!["ratio: "], None),
            (vec!["a"], vec!["count_if:status >"], None),
            (vec!["a"], vec!["p95:x,p95:x"], None),
        ] {
            let e = ReduceSpec::parse(&g, &a, w).expect_err("bad spec");
            assert!(matches!(e, ReduceError::Spec(_)), "{e}");
        }
        let s = ReduceSpec::parse(&[r#""x,y".z, q[*]"#], &["avg: ms "], Some("30")).unwrap();
        let cols: Vec<&str> = s.group_by.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(cols, [r#""x,y".z"#, "q[*]"]);
        assert_eq!(s.aggs[0].label, "avg:ms");
        assert_eq!(s.window, Some(30));
        let e = Agg::parse("median:x").unwrap_err().to_string();
        assert!(e.contains("pNN:PATH") && e.contains("count_if:EXPR"), "{e}");
        let e = Agg::parse("count_if:status >").unwrap_err().to_string();
        assert!(e.contains("count_if:status >"), "{e}");
        for (name, q) in [
            ("p0", 0),
            ("p5", 50),
            ("p99.9", 999),
            ("p100", 1000),
            ("p100.0", 1000),
        ] {
            assert_eq!(quantile_name(name), Some(q), "{name}");
        }
    }
}
