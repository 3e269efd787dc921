//! Which events, and which parts of them: the one [`Selection`] every reader shares.
//!
//! A selection is `dc`, `type`, `subtype` (exact matches on the chunk key; `Some("")` is the
//! empty subtype), `select` (paths to output instead of whole events, read lazily) and `where`
//! (a [`Filter`]). Range reads ([`ReadRequest`](crate::ReadRequest)), tails
//! ([`TailRequest`](crate::TailRequest)), the HTTP API (`GET /v1/events`, `GET /v1/tail`), the
//! CLI (`sluice cat` / `sluice tail`) and the Python reader all take it, in three spellings that
//! convert without loss:
//!
//! | spelling | form |
//! |---|---|
//! | query string | `dc=…&type=…&subtype=…&select=…&select=…&where=…` (`application/x-www-form-urlencoded`) |
//! | CLI flags | `--dc … --type … --subtype … --select … --select … --where …` |
//! | Rust | [`Selection`] (paths and filter parsed) |
//!
//! # Contract
//! - Parsing validates everything: a bad path or expression is a [`SelectionError`] naming the
//!   parameter, never a panic. Limits are those of [`sereal::Path`] and
//!   [`filter`](crate::filter) ([`MAX_EXPRESSION_BYTES`](crate::filter::MAX_EXPRESSION_BYTES)).
//! - Formatting then parsing gives an equal selection: paths are written in their canonical
//!   text, the filter in the text it was parsed from.
//! - A selection applies to chunk keys first ([`Selection::keeps`], no I/O) and to events
//!   second (`select` / `where`, through the lazy reader).
//!
//! - `substream` names a registered substream: the read returns its results instead of the
//!   events (dc / type / subtype / select / where then apply to those results), computing a
//!   missing result client-side unless `no_fallback` (query `no_fallback=1`, flag
//!   `--no-fallback`) asks for the gaps to be reported instead (see `crate::range`).

use std::fmt;

use sereal::Path;

use crate::filter::Filter;

/// The parameter names of a selection, as in the query string (the CLI flags add `--`).
pub const PARAMS: [&str; 7] = [
    "dc",
    "type",
    "subtype",
    "select",
    "where",
    "substream",
    "no_fallback",
];

/// Which events (dc, type, subtype, where) and which parts of them (select).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only this data centre.
    pub dc: Option<String>,
    /// Only this event type.
    pub type_: Option<String>,
    /// Only this subtype (`Some("")` selects the empty subtype).
    pub subtype: Option<String>,
    /// Paths to output instead of whole events (empty: whole events).
    pub select: Vec<Path>,
    /// Keep only events this predicate accepts.
    pub filter: Option<Filter>,
    /// Read this substream's results instead of the events.
    pub substream: Option<String>,
    /// With `substream`: report a missing result as a gap instead of computing it client-side.
    pub no_fallback: bool,
    /// Only the (dc, type) pairs this accepts: the reach of the reader's token, applied with
    /// the other filters to every chunk listed (`None`: everything).
    pub visible: Option<Visible>,
}

/// The test behind a [`Visible`]: whether events of (dc, type) may be seen.
type VisibleFn = dyn Fn(&str, &str) -> bool + Send + Sync;

/// A predicate over (dc, type): which events a reader may see at all.
#[derive(Clone)]
pub struct Visible(std::sync::Arc<VisibleFn>);

impl Visible {
    /// The events of the (dc, type) pairs `allows` accepts.
    pub fn new(allows: impl Fn(&str, &str) -> bool + Send + Sync + 'static) -> Visible {
        Visible(std::sync::Arc::new(allows))
    }

    /// Whether events of `dc` and `type_` are visible.
    pub fn allows(&self, dc: &str, type_: &str) -> bool {
        (self.0)(dc, type_)
    }
}

impl fmt::Debug for Visible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Visible(..)")
    }
}

impl PartialEq for Visible {
    /// The same predicate (by identity).
    fn eq(&self, other: &Visible) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl PartialEq for Selection {
    /// Equal when every field is; filters compare by the text they were parsed from.
    fn eq(&self, other: &Selection) -> bool {
        self.dc == other.dc
            && self.type_ == other.type_
            && self.subtype == other.subtype
            && self.select == other.select
            && self.filter.as_ref().map(Filter::text) == other.filter.as_ref().map(Filter::text)
            && self.substream == other.substream
            && self.no_fallback == other.no_fallback
            && self.visible == other.visible
    }
}

/// A selection parameter that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectionError {
    /// The parameter (`select`, `where`, or an unknown name).
    pub param: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SelectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.param, self.message)
    }
}

impl std::error::Error for SelectionError {}

impl Selection {
    /// Builds a selection from its texts (CLI flags, Python keyword arguments): parses the
    /// `select` paths and the `where` expression.
    pub fn from_texts<S: AsRef<str>>(
        dc: Option<String>,
        type_: Option<String>,
        subtype: Option<String>,
        select: &[S],
        where_: Option<&str>,
    ) -> Result<Selection, SelectionError> {
        let mut sel = Selection {
            dc,
            type_,
            subtype,
            ..Selection::default()
        };
        for p in select {
            sel.accept("select", p.as_ref())?;
        }
        if let Some(w) = where_ {
            sel.accept("where", w)?;
        }
        Ok(sel)
    }

    /// Takes one query parameter `key=value` if it is a selection parameter; returns false
    /// (and changes nothing) for any other name. `select` adds a path; the others replace.
    pub fn accept(&mut self, key: &str, value: &str) -> Result<bool, SelectionError> {
        let err = |message: String| SelectionError {
            param: key.to_owned(),
            message,
        };
        match key {
            "dc" => self.dc = Some(value.to_owned()),
            "type" => self.type_ = Some(value.to_owned()),
            "subtype" => self.subtype = Some(value.to_owned()),
            "select" => self
                .select
                .push(Path::parse(value).map_err(|e| err(format!("{value:?}: {e}")))?),
            "where" => self.filter = Some(Filter::parse(value).map_err(|e| err(e.render(value)))?),
            "substream" => self.substream = Some(value.to_owned()),
            "no_fallback" => {
                self.no_fallback = match value {
                    "1" | "true" | "yes" | "" => true,
                    "0" | "false" | "no" => false,
                    _ => return Err(err(format!("{value:?}: 1/true or 0/false"))),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Parses a query string made only of selection parameters (any other name is an error).
    pub fn from_query(query: &str) -> Result<Selection, SelectionError> {
        let mut sel = Selection::default();
        for (k, v) in parse_query(query) {
            if !sel.accept(&k, &v)? {
                return Err(SelectionError {
                    param: k,
                    message: "unknown parameter".into(),
                });
            }
        }
        Ok(sel)
    }

    /// The selection as query parameters, in [`PARAMS`] order (`select` once per path).
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        for (k, v) in [
            ("dc", &self.dc),
            ("type", &self.type_),
            ("subtype", &self.subtype),
        ] {
            if let Some(v) = v {
                pairs.push((k, v.clone()));
            }
        }
        pairs.extend(self.select.iter().map(|p| ("select", p.to_string())));
        if let Some(f) = &self.filter {
            pairs.push(("where", f.text().to_owned()));
        }
        if let Some(s) = &self.substream {
            pairs.push(("substream", s.clone()));
        }
        if self.no_fallback {
            pairs.push(("no_fallback", "1".to_owned()));
        }
        pairs
    }

    /// The selection as an encoded query string (empty when it selects everything).
    pub fn to_query(&self) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.query_pairs() {
            out.append_pair(k, &v);
        }
        out.finish()
    }

    /// The selection as command-line arguments, one `--name=value` per value (the `=` form so
    /// that a value starting with `-` is not taken for a flag).
    pub fn to_args(&self) -> Vec<String> {
        self.query_pairs()
            .into_iter()
            .map(|(k, v)| match k {
                "no_fallback" => "--no-fallback".to_owned(),
                _ => format!("--{k}={v}"),
            })
            .collect()
    }

    /// The selection with `substream` (and `no_fallback`) set.
    pub fn with_substream(mut self, substream: Option<String>, no_fallback: bool) -> Selection {
        self.substream = substream;
        self.no_fallback = no_fallback;
        self
    }

    /// Whether the lazy reader is needed (a `select` or a `where` is given).
    pub fn is_lazy(&self) -> bool {
        !self.select.is_empty() || self.filter.is_some()
    }

    /// Whether chunks of this type and subtype are selected (the dc is chosen when listing).
    pub fn keeps(&self, type_: &str, subtype: &str) -> bool {
        self.type_.as_deref().is_none_or(|t| t == type_)
            && self.subtype.as_deref().is_none_or(|s| s == subtype)
    }

    /// [`keeps`](Self::keeps), and the chunk's (dc, type) is [`visible`](Self::visible).
    pub fn keeps_in(&self, dc: &str, type_: &str, subtype: &str) -> bool {
        self.keeps(type_, subtype) && self.visible.as_ref().is_none_or(|v| v.allows(dc, type_))
    }
}

/// Splits a raw query string (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a
/// byte, invalid UTF-8 replaced) into decoded `(key, value)` pairs, in order.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_round_trips() {
        let q = "dc=ams1&type=WEB&subtype=&select=status&select=%22a+b%22.c&where=status+%3E%3D+500+and+path+%3D%3D+%22%2Fx%26y%22";
        let sel = Selection::from_query(q).unwrap();
        assert_eq!(sel.dc.as_deref(), Some("ams1"));
        assert_eq!(sel.subtype.as_deref(), Some(""));
        assert_eq!(sel.select.len(), 2);
        assert_eq!(
            sel.filter.as_ref().map(Filter::text),
            Some("status >= 500 and path == \"/x&y\"")
        );
        assert_eq!(sel.to_query(), q);
        assert_eq!(Selection::from_query(&sel.to_query()).unwrap(), sel);
        assert_eq!(Selection::default().to_query(), "");
        assert!(sel.keeps("WEB", "") && !sel.keeps("WEB", "api") && !sel.keeps("LB", ""));
    }

    #[test]
    fn bad_parameters_are_named() {
        assert_eq!(
            Selection::from_query("where=status+%3E").unwrap_err().param,
            "where"
        );
        assert_eq!(
            Selection::from_query("select=a..b").unwrap_err().param,
            "select"
        );
        assert_eq!(Selection::from_query("from=0").unwrap_err().param, "from");
        let mut sel = Selection::default();
        assert_eq!(sel.accept("cursor", "x"), Ok(false));
        assert_eq!(sel, Selection::default());
    }
}
