//! Hints for a read that printed nothing, or named something the range never had: the one owner
//! of these rules, used by `sluice cat` (reading a store directly) and by the HTTP API (its
//! NDJSON trailer line `{"_sluice":{"warnings":[…],"hints":[…]}}`, which `sluice cat --server`
//! prints).
//!
//! # Contract
//! - A hint is advice, never an error: output and exit status are as without it. The CLI prints
//!   each on stderr as `sluice: hint: …`.
//! - Cheap: the facts come from the read itself ([`ReadFacts`]: a flag and a kind mask per
//!   select / where path, the types in the epoch indexes, a count). Only when a path was never
//!   seen does [`for_read`] sample the range for field names to suggest: at most
//!   [`SAMPLE_EVENTS`] events of at most [`SAMPLE_CHUNKS`] chunks, fully decoded.
//! - The rules, in order:
//!   1. nothing stored in the range: "older than the retention of D days" when the range ends
//!      before the retention cut-off, else "the range … holds no events" (with `--dc`: and the
//!      dcs it does hold);
//!   2. `--type T` not among the types of the range: "no events of type `T`; types here: …"
//!      (with "did you mean" for a match ignoring case);
//!   3. a select / where path no event of the range had: "field `p` never seen in this range"
//!      with "did you mean `q`?" for the nearest field name (edit distance at most a third
//!      of its length, at least 1; or equal ignoring case);
//!   4. a field met only as numbers, compared with a quoted string (or the reverse): say so;
//!   5. none of the above but no event matched: "no events matched (the range holds N events
//!      of the selected types)".
//! - A tail ([`for_tail`], `Tail::hints`) gets rules 2–4 once, when it has caught up and seen
//!   data (a quiet stream is normal: never rule 5); the server sends them as SSE `event: hint`
//!   messages (clients ignore event names they do not know), `sluice tail` prints them. A
//!   field the tail has not met yet is named at once only when it has a near match (a likely
//!   typo); otherwise only after [`TAIL_UNSEEN_AFTER`] events of the selection without it —
//!   never when the tail's own rows had it (a field few events carry is not "never seen"
//!   because the first batch lacked it).

use std::collections::BTreeSet;

use sluice_store::ReadStore;

use crate::facts::{ReadFacts, KIND_NUMBER, KIND_STRING};
use crate::filter::LiteralKind;
use crate::item::{ReadItem, ReadStats};
use crate::range::RangeReader;
use crate::request::{ReadOptions, ReadRequest};
use crate::selection::Selection;
use crate::time::{format_time, Zone};

/// Most events sampled for field names.
pub const SAMPLE_EVENTS: usize = 2_000;
/// Most chunks sampled for field names.
pub const SAMPLE_CHUNKS: usize = 32;
/// Deepest nesting of the field names sampled (`a.b.c` is depth 3).
const SAMPLE_DEPTH: usize = 3;

impl<S, T> RangeReader<S>
where
    S: std::ops::Deref<Target = T>,
    T: ReadStore + ?Sized,
{
    /// Hints for the user about a read that is done: typos in a type or a field, a string
    /// compared with a number field, an empty range or one beyond the retention (see the
    /// [module docs](crate::hints)). Empty when there is nothing to say. Call it after the last
    /// item; it may sample a few chunks of the range (only when a field was never seen).
    ///
    /// Defined here, not beside the reader, so that the hints depend on the reader (they sample
    /// with one) and never the reverse.
    pub fn hints(&self, now: i64) -> Vec<String> {
        for_read(
            self.store(),
            self.request(),
            self.facts(),
            self.stats(),
            now,
        )
    }
}

/// The hints for a finished read of `req` over `store` (see the [module docs](self)).
pub fn for_read<T: ReadStore + ?Sized>(
    store: &T,
    req: &ReadRequest,
    facts: &ReadFacts,
    stats: ReadStats,
    now: i64,
) -> Vec<String> {
    let mut hints = Vec::new();
    let sel = &req.selection;
    let utc = Zone::utc();
    let range = || {
        format!(
            "{} to {}",
            format_time(req.from as f64, &utc),
            format_time(req.to as f64, &utc)
        )
    };
    if stats.epochs == 0 {
        let retention = store.retention().period_secs;
        if retention > 0 && req.to <= now - retention {
            hints.push(format!(
                "no events matched: the range ({}) is older than the retention of {} days \
                 (data before {} is expired)",
                range(),
                retention / 86_400,
                format_time((now - retention) as f64, &utc)
            ));
        } else if let Some(dc) = &sel.dc {
            // A dc typo looks like an empty range: list the dcs the range does have.
            let dcs: BTreeSet<String> = store
                .list_epochs(None, req.from, req.to)
                .map(|pairs| pairs.into_iter().map(|(_, d)| d).collect())
                .unwrap_or_default();
            let mut h = format!(
                "no events matched: the range ({}) holds no events of dc `{dc}`",
                range()
            );
            if !dcs.is_empty() {
                let listed: Vec<&str> = dcs.iter().map(String::as_str).take(20).collect();
                h.push_str(&format!("; dcs here: {}", listed.join(", ")));
                if let Some(m) = dcs.iter().find(|x| x.eq_ignore_ascii_case(dc)) {
                    h.push_str(&format!(" (dcs are case-sensitive: did you mean `{m}`?)"));
                }
            }
            hints.push(h);
        } else {
            hints.push(format!(
                "no events matched: the range ({}) holds no events",
                range()
            ));
        }
        return hints;
    }
    let typos = typo_hints(store, req, facts, None).unwrap_or_default();
    if typos.iter().any(|h| h.starts_with(NO_TYPE)) {
        return typos;
    }
    hints.extend(typos);
    if hints.is_empty() && stats.events == 0 {
        let what = match (&sel.type_, sel.filter.is_some()) {
            (Some(t), _) => format!(" of type `{t}`"),
            _ => String::new(),
        };
        if sel.is_lazy() {
            hints.push(format!(
                "no events matched: the range ({}) holds {} {}{what}, none of them matched",
                range(),
                facts.scanned,
                if facts.scanned == 1 {
                    "event"
                } else {
                    "events"
                }
            ));
        } else {
            hints.push(format!(
                "no events matched: the range ({}) has data in {} {}, none of the selected \
                 dc / type / subtype",
                range(),
                stats.epochs,
                if stats.epochs == 1 {
                    "second"
                } else {
                    "seconds"
                }
            ));
        }
    }
    hints
}

/// Start of the hint for a type the range does not have.
const NO_TYPE: &str = "no events of type";

/// The typo hints of a tail (rules 2–4: a quiet stream is normal, so never "no events
/// matched"), or `None` until it can judge: no type listed yet, (for a select / where) no
/// event of the selected types scanned yet, or a field without a near match unseen in fewer
/// than [`TAIL_UNSEEN_AFTER`] events. Field names are sampled from the last
/// [`TAIL_SAMPLE_SECS`] before `now`, once: `sample` keeps them for the next calls (a tail
/// asks on every poll until it gets an answer).
pub fn for_tail<T: ReadStore + ?Sized>(
    store: &T,
    selection: &Selection,
    facts: &ReadFacts,
    now: i64,
    sample: &std::sync::OnceLock<BTreeSet<String>>,
) -> Option<Vec<String>> {
    if facts.types.is_empty() {
        return None;
    }
    let req = ReadRequest::selected(now - TAIL_SAMPLE_SECS, now + 1, selection.clone());
    let type_missing = selection
        .type_
        .as_ref()
        .is_some_and(|t| !facts.types.contains(t));
    if !type_missing && selection.is_lazy() && facts.scanned == 0 {
        return None;
    }
    typo_hints(store, &req, facts, Some(sample))
}

/// Events of its selection a tail scans before it calls a field with no near match "never
/// seen": a live stream's first batch says little (a field that a few events carry, such as
/// `error`, is usually missing from it). A field with a near match (a likely typo) is named at
/// once; one the tail then meets is not named at all.
pub const TAIL_UNSEEN_AFTER: u64 = 1_000;

/// Seconds of history a tail's field-name sample reads.
pub const TAIL_SAMPLE_SECS: i64 = 300;

/// Rules 2–4 of the [module docs](self); a type hint comes alone. For a tail (`tail`: its
/// field-name sample, taken once), `None` while a field without a near match is unseen in
/// fewer than [`TAIL_UNSEEN_AFTER`] events (it may still come: judged on a later poll).
fn typo_hints<T: ReadStore + ?Sized>(
    store: &T,
    req: &ReadRequest,
    facts: &ReadFacts,
    tail: Option<&std::sync::OnceLock<BTreeSet<String>>>,
) -> Option<Vec<String>> {
    let mut hints = Vec::new();
    let sel = &req.selection;
    if let Some(t) = &sel.type_ {
        if !facts.types.is_empty() && !facts.types.contains(t) {
            let listed: Vec<&str> = facts.types.iter().map(String::as_str).collect();
            let mut h = format!(
                "{NO_TYPE} `{t}` in this range; types here: {}",
                listed.join(", ")
            );
            if let Some(m) = facts.types.iter().find(|x| x.eq_ignore_ascii_case(t)) {
                h.push_str(&format!(" (types are case-sensitive: did you mean `{m}`?)"));
            }
            hints.push(h);
            return Some(hints);
        }
    }
    let mut paths: Vec<String> = sel.select.iter().map(|p| p.to_string()).collect();
    if let Some(f) = &sel.filter {
        paths.extend(f.paths().iter().map(|p| p.to_string()));
    }
    let unseen: BTreeSet<&str> = paths
        .iter()
        .zip(&facts.path_seen)
        .filter(|(_, seen)| !**seen)
        .map(|(p, _)| p.as_str())
        .collect();
    if facts.scanned > 0 && !unseen.is_empty() {
        let owned;
        let fields = match tail {
            Some(cache) => cache.get_or_init(|| sample_fields(store, req)),
            None => {
                owned = sample_fields(store, req);
                &owned
            }
        };
        for p in &unseen {
            let best = nearest(p, fields);
            if tail.is_some() && best.is_none() && facts.scanned < TAIL_UNSEEN_AFTER {
                return None;
            }
            let mut h = format!("field `{p}` never seen in this range");
            if let Some(best) = best {
                h.push_str(&format!("; did you mean `{best}`?"));
            }
            hints.push(h);
        }
    }
    if let Some(f) = &sel.filter {
        let offset = sel.select.len();
        let mut said = BTreeSet::new();
        for (i, lit, op) in f.comparisons() {
            let kinds = facts.path_kinds.get(offset + i).copied().unwrap_or(0);
            let path = f.paths()[i].to_string();
            let numbers_only = kinds & KIND_NUMBER != 0 && kinds & KIND_STRING == 0;
            if lit == LiteralKind::String && numbers_only && said.insert(path.clone()) {
                hints.push(format!(
                    "`{path}` holds numbers in this range but is compared with a quoted string \
                     (`{op}`): strings never equal or order against numbers; drop the quotes \
                     (e.g. {path} {op} 500)"
                ));
            }
        }
    }
    Some(hints)
}

/// Field names (dotted paths up to [`SAMPLE_DEPTH`]) of a sample of the range's events.
fn sample_fields<T: ReadStore + ?Sized>(store: &T, req: &ReadRequest) -> BTreeSet<String> {
    let sel = &req.selection;
    let sample = ReadRequest::selected(
        req.from,
        req.to,
        Selection {
            dc: sel.dc.clone(),
            type_: sel.type_.clone(),
            subtype: sel.subtype.clone(),
            ..Selection::default()
        },
    );
    let mut fields = BTreeSet::new();
    let Ok(reader) = RangeReader::new(store, sample, ReadOptions::default()) else {
        return fields;
    };
    let mut reader = reader;
    let mut events = 0usize;
    while let Some(item) = reader.next() {
        if let ReadItem::Event(e) = item {
            add_fields(&e.value, "", 1, &mut fields);
            events += 1;
        }
        if events >= SAMPLE_EVENTS || reader.stats().chunks >= SAMPLE_CHUNKS {
            break;
        }
    }
    fields
}

fn add_fields(v: &sereal::Value, prefix: &str, depth: usize, out: &mut BTreeSet<String>) {
    if let sereal::Value::Hash(entries) = v.resolve() {
        for (k, child) in entries {
            let name = String::from_utf8_lossy(k.as_bytes());
            let path = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}.{name}")
            };
            if depth < SAMPLE_DEPTH {
                add_fields(child, &path, depth + 1, out);
            }
            if out.len() < 10_000 {
                out.insert(path);
            }
        }
    }
}

/// The candidate nearest to `word`: equal ignoring case, else the smallest edit distance
/// (Damerau: a swap of two neighbours counts 1) if it is at most a third of the word's length
/// (at least 1); on a tie, the one closest in length (`stauts`: `status` before `stats`).
pub fn nearest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a String>,
) -> Option<&'a str> {
    let len = word.chars().count();
    let limit = (len / 3).max(1);
    let mut best: Option<((usize, usize), &str)> = None;
    for c in candidates {
        if c == word {
            continue;
        }
        let d = if c.eq_ignore_ascii_case(word) {
            0
        } else {
            strsim::damerau_levenshtein(word, c)
        };
        let rank = (d, c.chars().count().abs_diff(len));
        if d <= limit && best.is_none_or(|(b, _)| rank < b) {
            best = Some((rank, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_names() {
        let names: Vec<String> = ["stats", "status", "path", "ms", "t.ms", "Type"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(nearest("stauts", &names), Some("status"));
        assert_eq!(nearest("pth", &names), Some("path"));
        assert_eq!(nearest("type", &names), Some("Type"));
        assert_eq!(nearest("nope", &names), None);
        assert_eq!(nearest("t.mss", &names), Some("t.ms"));
    }
}
