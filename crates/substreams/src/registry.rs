//! The substream registry: definitions kept in the store's catalog (kind [`CATALOG_KIND`], one
//! JSON record per substream), so every process on the same store sees them and they survive
//! restarts.
//!
//! # Contract
//! - [`validate`] is the one rule for a definition: the name (`[A-Za-z0-9][A-Za-z0-9_.-]*`, no
//!   `/`, within the store's namespace-name limit), the filters, the transformation (`--select`
//!   paths and `--where` parsed by the reader's own parsers; a Python source imported in a
//!   throwaway worker and its function checked, [`sluice_pyworkers::Pool::check`]) and the
//!   budgets. A definition that fails changes nothing in the store.
//! - A Python substream carries its **source** (at most [`MAX_SOURCE_BYTES`]): the file is read
//!   once, at registration, so the definition is complete on any machine and across restarts.
//! - A removed name keeps a record ([`REMOVED_KIND`]) while its stored results may still exist
//!   (the store's retention): re-adding it with another transformation or other filters is
//!   refused (its old results would be read as the new one's); the same one may come back.
//! - Changes are last-write-wins records; `changed` is the time of the last one. A record that
//!   does not parse (written by a newer version, damaged) is skipped and reported by [`load`],
//!   never fatal.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_reader::reduce::{ReduceError, ReduceSpec};
use sluice_reader::{Selection, SelectionError};
use sluice_store::{Namespace, ReadStore, Store, StoreError};

/// The catalog kind of definitions.
pub const CATALOG_KIND: &str = "substream";
/// The catalog kind of removed definitions (`changed` = the removal time): their stored results
/// outlive them until they expire.
pub const REMOVED_KIND: &str = "substream-removed";
/// The catalog kind of the runners' miss/run counters (`<name>/<writer>` records).
pub const STATUS_KIND: &str = "substream-status";
/// Longest Python source kept in a definition (the store's catalog records are ≤ 1 MiB).
pub const MAX_SOURCE_BYTES: usize = 256 << 10;
/// Longest name.
pub const MAX_NAME_LEN: usize = 100;
/// Largest wall / CPU budget per run.
pub const MAX_BUDGET_MS: u64 = 60_000;

/// What a substream does to each blob it applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Transform {
    /// Declarative: select paths of the events a predicate keeps (the reader's language).
    Select {
        /// Paths (`--select`), canonical text.
        select: Vec<String>,
        /// Predicate (`--where`).
        #[serde(rename = "where", default, skip_serializing_if = "Option::is_none")]
        where_: Option<String>,
    },
    /// A rollup: the events a predicate keeps, grouped and aggregated per step into mergeable
    /// partial states ([`sluice_reader::reduce::Reducer::finish_states`]); queried by merging
    /// them (`sluice-rollups`).
    Rollup {
        /// Group-by paths, as written.
        group_by: Vec<String>,
        /// Aggregates, as written (`count`, `sum:ms`, `p95:ms`, `distinct:user`, …).
        aggs: Vec<String>,
        /// The step, seconds.
        step: u64,
        /// Predicate (`--where`).
        #[serde(rename = "where", default, skip_serializing_if = "Option::is_none")]
        where_: Option<String>,
        /// Groups per blob and step before the rest go to `_other`.
        max_groups: usize,
    },
    /// Code: `func(events, ctx) -> iterable of dicts`, from a Python source.
    Python {
        /// Where the source was read from at registration (for people; not read again).
        file: String,
        /// The function's name.
        func: String,
        /// The source itself.
        source: String,
    },
}

/// Budgets of one run of a substream on one blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Wall time, milliseconds.
    pub wall_ms: u64,
    /// CPU time, milliseconds (Python: the worker is killed over it; declarative runs are
    /// bounded by the decoder's limits and checked against the wall budget).
    pub cpu_ms: u64,
    /// Largest stored result blob, bytes.
    pub max_result_bytes: u64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            wall_ms: 1000,
            cpu_ms: 1000,
            max_result_bytes: 4 << 20,
        }
    }
}

/// A registered substream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// Its name: results live in `substreams/<name>`.
    pub name: String,
    /// Only blobs of this dc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dc: Option<String>,
    /// Only blobs of this type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Only blobs of this subtype (`Some("")`: the empty one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtype: Option<String>,
    /// The transformation.
    pub transform: Transform,
    /// Per-run budgets.
    pub budget: Budget,
    /// Whether it runs on newly stored blobs.
    pub enabled: bool,
    /// Registered at (Unix seconds).
    pub created: i64,
    /// Last changed at (Unix seconds).
    pub changed: i64,
}

impl Definition {
    /// Whether it applies to blobs of `dc`, `type_`, `subtype`.
    pub fn applies(&self, dc: &str, type_: &str, subtype: &str) -> bool {
        self.dc.as_deref().is_none_or(|d| d == dc)
            && self.type_.as_deref().is_none_or(|t| t == type_)
            && self.subtype.as_deref().is_none_or(|s| s == subtype)
    }

    /// The declarative selection (`select` / `where` parsed; a rollup's `where` alone), `None`
    /// for a Python substream.
    pub fn selection(&self) -> Result<Option<Selection>, SelectionError> {
        match &self.transform {
            Transform::Select { select, where_ } => {
                Selection::from_texts(None, None, None, select, where_.as_deref()).map(Some)
            }
            Transform::Rollup { where_, .. } => {
                Selection::from_texts::<&str>(None, None, None, &[], where_.as_deref()).map(Some)
            }
            Transform::Python { .. } => Ok(None),
        }
    }

    /// A rollup's reduce (its step the window, groups past its cap to `_other`); `None` for
    /// other substreams.
    pub fn rollup_spec(&self) -> Option<Result<ReduceSpec, ReduceError>> {
        match &self.transform {
            Transform::Rollup {
                group_by,
                aggs,
                step,
                max_groups,
                ..
            } => Some(rollup_reduce(group_by, aggs, *step, *max_groups)),
            _ => None,
        }
    }

    /// Whether it is a rollup.
    pub fn is_rollup(&self) -> bool {
        matches!(self.transform, Transform::Rollup { .. })
    }

    /// Whether it is a Python substream.
    pub fn is_python(&self) -> bool {
        matches!(self.transform, Transform::Python { .. })
    }

    /// The definition as JSON (the catalog record and the HTTP answer).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// What someone asks to register (CLI flags, an HTTP body).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// Only this dc.
    #[serde(default)]
    pub dc: Option<String>,
    /// Only this type.
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    /// Only this subtype.
    #[serde(default)]
    pub subtype: Option<String>,
    /// Declarative: paths.
    #[serde(default)]
    pub select: Vec<String>,
    /// Declarative: predicate.
    #[serde(rename = "where", default)]
    pub where_: Option<String>,
    /// Code: the file name (as given; informative).
    #[serde(default)]
    pub python_file: Option<String>,
    /// Code: the function (default `transform`).
    #[serde(default)]
    pub python_func: Option<String>,
    /// Code: the source (the CLI reads the file and sends it).
    #[serde(default)]
    pub python_source: Option<String>,
    /// Wall and CPU budget per run, milliseconds (default 1000).
    #[serde(default)]
    pub budget_ms: Option<u64>,
    /// Result size budget, bytes (default 4 MiB).
    #[serde(default)]
    pub max_result_bytes: Option<u64>,
    /// Rollup: group-by paths.
    #[serde(default)]
    pub group_by: Vec<String>,
    /// Rollup: aggregates (their presence makes a rollup).
    #[serde(default)]
    pub agg: Vec<String>,
    /// Rollup: the step (`10s`, `1m`; default [`DEFAULT_ROLLUP_STEP`]).
    #[serde(default)]
    pub step: Option<String>,
    /// Rollup: groups per blob and step before the rest go to `_other` (default
    /// [`DEFAULT_ROLLUP_GROUPS`]).
    #[serde(default)]
    pub max_groups: Option<usize>,
}

/// A rollup's step when none is given.
pub const DEFAULT_ROLLUP_STEP: &str = "10s";
/// A rollup's group cap per blob and step when none is given.
pub const DEFAULT_ROLLUP_GROUPS: usize = 10_000;
/// The largest group cap a rollup may ask for.
pub const MAX_ROLLUP_GROUPS: usize = 1_000_000;

/// The reduce of a rollup: one owner for the registry (validation) and the executor.
pub fn rollup_reduce(
    group_by: &[String],
    aggs: &[String],
    step: u64,
    max_groups: usize,
) -> Result<ReduceSpec, ReduceError> {
    let mut spec = ReduceSpec::parse(group_by, aggs, Some(&step.to_string()))?;
    spec.max_groups = max_groups;
    spec.overflow = true;
    Ok(spec)
}

impl Spec {
    /// A code substream spec from `FILE[:FUNC]`, reading the file now.
    pub fn python_from_arg(&mut self, arg: &str) -> Result<(), Error> {
        let (file, func) = match arg.rsplit_once(':') {
            Some((f, func)) if !func.is_empty() && !func.contains('/') => (f, func),
            _ => (arg, "transform"),
        };
        let path = PathBuf::from(file);
        let meta = std::fs::metadata(&path)
            .map_err(|e| Error::Invalid(format!("--python {file}: {e}")))?;
        if meta.len() > MAX_SOURCE_BYTES as u64 {
            return Err(Error::Invalid(format!(
                "--python {file}: {} bytes, more than {MAX_SOURCE_BYTES}",
                meta.len()
            )));
        }
        let source = std::fs::read_to_string(&path)
            .map_err(|e| Error::Invalid(format!("--python {file}: {e}")))?;
        self.python_file = Some(file.to_owned());
        self.python_func = Some(func.to_owned());
        self.python_source = Some(source);
        Ok(())
    }
}

/// Why a registry operation failed.
#[derive(Debug)]
pub enum Error {
    /// The request is invalid (HTTP 400): nothing changed.
    Invalid(String),
    /// No such substream (HTTP 404).
    NotFound(String),
    /// The name is taken (HTTP 409).
    Exists(String),
    /// The store failed (HTTP 500/503).
    Store(StoreError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(m) => write!(f, "invalid substream: {m}"),
            Error::NotFound(n) => write!(f, "no substream named {n:?}"),
            Error::Exists(n) => write!(
                f,
                "a substream named {n:?} exists already (rm it first to change it)"
            ),
            Error::Store(e) => write!(f, "store: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        Error::Store(e)
    }
}

/// Checks a name: see the [module docs](self).
pub fn check_name(name: &str) -> Result<(), Error> {
    let bad = |why: &str| Err(Error::Invalid(format!("name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.contains('/') {
        return bad("contains `/` (results live in substreams/<name>)");
    }
    if name.len() > MAX_NAME_LEN {
        return bad(&format!("longer than {MAX_NAME_LEN} bytes"));
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return bad("use letters, digits, `_`, `.` and `-`, starting with a letter or digit");
    }
    // The store's own rule for the namespace it names.
    Namespace::parse(&format!("substreams/{name}"))
        .map_err(|e| Error::Invalid(format!("name {name:?}: {e}")))?;
    Ok(())
}

/// The definition `spec` asks for, validated (Python: imported and its function checked with
/// `python`, or the first [`sluice_pyworkers::find_python`]). Nothing is stored.
pub fn validate(spec: &Spec, now: i64, python: Option<&Path>) -> Result<Definition, Error> {
    check_name(&spec.name)?;
    for (what, v) in [("dc", &spec.dc), ("type", &spec.type_)] {
        if let Some(v) = v {
            sluice_blob::key::check_tag(what, v, false)
                .map_err(|e| Error::Invalid(format!("--{what}: {e}")))?;
        }
    }
    if let Some(v) = &spec.subtype {
        sluice_blob::key::check_tag("subtype", v, true)
            .map_err(|e| Error::Invalid(format!("--subtype: {e}")))?;
    }
    let mut budget = Budget::default();
    if let Some(ms) = spec.budget_ms {
        if ms == 0 || ms > MAX_BUDGET_MS {
            return Err(Error::Invalid(format!(
                "--budget-ms {ms}: 1 ..= {MAX_BUDGET_MS}"
            )));
        }
        budget.wall_ms = ms;
        budget.cpu_ms = ms;
    }
    if let Some(b) = spec.max_result_bytes {
        if b == 0 {
            return Err(Error::Invalid("max_result_bytes: at least 1".into()));
        }
        budget.max_result_bytes = b;
    }
    let rollup_asked = !spec.agg.is_empty() || !spec.group_by.is_empty() || spec.step.is_some();
    if rollup_asked {
        if spec.python_source.is_some() || !spec.select.is_empty() {
            return Err(Error::Invalid(
                "a rollup takes --group-by / --agg / --step (and --where), not --select or --python"
                    .into(),
            ));
        }
        if spec.agg.is_empty() {
            return Err(Error::Invalid(
                "a rollup needs --agg (count, sum:PATH, p95:PATH, distinct:PATH, …)".into(),
            ));
        }
        let step = sluice_reader::reduce::parse_window(
            spec.step.as_deref().unwrap_or(DEFAULT_ROLLUP_STEP),
        )
        .map_err(|e| Error::Invalid(e.to_string().replace("--window", "--step")))?;
        let max_groups = spec.max_groups.unwrap_or(DEFAULT_ROLLUP_GROUPS);
        if !(1..=MAX_ROLLUP_GROUPS).contains(&max_groups) {
            return Err(Error::Invalid(format!(
                "--max-groups {max_groups}: 1 ..= {MAX_ROLLUP_GROUPS}"
            )));
        }
        let reduce = rollup_reduce(&spec.group_by, &spec.agg, step, max_groups)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let sel = Selection::from_texts::<&str>(None, None, None, &[], spec.where_.as_deref())
            .map_err(|e| Error::Invalid(e.to_string()))?;
        return Ok(Definition {
            name: spec.name.clone(),
            dc: spec.dc.clone(),
            type_: spec.type_.clone(),
            subtype: spec.subtype.clone(),
            transform: Transform::Rollup {
                group_by: reduce.group_by.iter().map(|(t, _)| t.clone()).collect(),
                aggs: reduce.aggs.iter().map(|a| a.label.clone()).collect(),
                step,
                where_: sel.filter.as_ref().map(|f| f.text().to_owned()),
                max_groups,
            },
            budget,
            enabled: true,
            created: now,
            changed: now,
        });
    }
    let transform = match (&spec.python_source, spec.select.is_empty()) {
        (Some(_), false) => {
            return Err(Error::Invalid(
                "give either --select (with an optional --where) or --python, not both".into(),
            ))
        }
        (None, true) => {
            return Err(Error::Invalid(
                "give --select PATHS [--where EXPR] or --python FILE[:FUNC]".into(),
            ))
        }
        (None, false) => {
            let sel = Selection::from_texts(None, None, None, &spec.select, spec.where_.as_deref())
                .map_err(|e| Error::Invalid(e.to_string()))?;
            Transform::Select {
                select: sel.select.iter().map(|p| p.to_string()).collect(),
                where_: sel.filter.as_ref().map(|f| f.text().to_owned()),
            }
        }
        (Some(source), true) => {
            if spec.where_.is_some() {
                return Err(Error::Invalid(
                    "--where goes with --select (filter inside the Python function)".into(),
                ));
            }
            if source.len() > MAX_SOURCE_BYTES {
                return Err(Error::Invalid(format!(
                    "Python source of {} bytes, more than {MAX_SOURCE_BYTES}",
                    source.len()
                )));
            }
            let func = spec
                .python_func
                .clone()
                .unwrap_or_else(|| "transform".into());
            if func.is_empty() || !func.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(Error::Invalid(format!("function name {func:?}")));
            }
            let python = match python {
                Some(p) => p.to_path_buf(),
                None => sluice_pyworkers::find_python()
                    .map_err(|e| Error::Invalid(format!("cannot check the Python file: {e}")))?,
            };
            let dir = tempfile::tempdir()
                .map_err(|e| Error::Invalid(format!("checking the Python file: {e}")))?;
            let file = crate::code_file(dir.path(), &spec.name, source)
                .map_err(|e| Error::Invalid(format!("checking the Python file: {e}")))?;
            sluice_pyworkers::Pool::check(&python, &file, &func).map_err(|e| {
                Error::Invalid(format!(
                    "--python {}: {e}",
                    spec.python_file.as_deref().unwrap_or("(source)")
                ))
            })?;
            Transform::Python {
                file: spec.python_file.clone().unwrap_or_default(),
                func,
                source: source.clone(),
            }
        }
    };
    Ok(Definition {
        name: spec.name.clone(),
        dc: spec.dc.clone(),
        type_: spec.type_.clone(),
        subtype: spec.subtype.clone(),
        transform,
        budget,
        enabled: true,
        created: now,
        changed: now,
    })
}

/// The registry as read: definitions by name, and the records that did not parse (name, why).
pub type Loaded = (BTreeMap<String, Definition>, Vec<(String, String)>);

/// Every definition in `store`, by name, and the records that did not parse (name, why).
pub fn load<S: ReadStore + ?Sized>(store: &S) -> Result<Loaded, StoreError> {
    let mut defs = BTreeMap::new();
    let mut bad = Vec::new();
    for (name, bytes) in store.get_catalog(CATALOG_KIND)? {
        match serde_json::from_slice::<Definition>(&bytes) {
            Ok(d) if d.name == name => {
                defs.insert(name, d);
            }
            Ok(d) => bad.push((name, format!("record names {:?}", d.name))),
            Err(e) => bad.push((name, e.to_string())),
        }
    }
    Ok((defs, bad))
}

/// The definition named `name`.
pub fn get<S: ReadStore + ?Sized>(store: &S, name: &str) -> Result<Definition, Error> {
    let (mut defs, _) = load(store)?;
    defs.remove(name)
        .ok_or_else(|| Error::NotFound(name.to_owned()))
}

fn put(store: &dyn Store, def: &Definition) -> Result<(), Error> {
    let bytes = serde_json::to_vec(def).map_err(|e| Error::Invalid(e.to_string()))?;
    store.put_catalog(CATALOG_KIND, &def.name, Some(&bytes))?;
    store.flush()?;
    Ok(())
}

/// Validates and registers `spec` (an existing name is refused).
pub fn add(
    store: &dyn Store,
    spec: &Spec,
    now: i64,
    python: Option<&Path>,
) -> Result<Definition, Error> {
    check_name(&spec.name)?;
    if load(store)?.0.contains_key(&spec.name) {
        return Err(Error::Exists(spec.name.clone()));
    }
    let def = validate(spec, now, python)?;
    let removed = store.get_catalog(REMOVED_KIND)?;
    if let Some(old) = removed
        .get(&spec.name)
        .and_then(|b| serde_json::from_slice::<Definition>(b).ok())
    {
        let r = store.retention();
        let kept_until = old.changed + r.period_secs + r.partition_secs;
        let same = old.dc == def.dc
            && old.type_ == def.type_
            && old.subtype == def.subtype
            && old.transform == def.transform;
        if now < kept_until && !same {
            return Err(Error::Invalid(format!(
                "name {:?}: a substream of that name with another transformation or other filters \
                 was removed at {}; its stored results are kept until about {kept_until} and would \
                 be read as this one's: pick another name (or re-add the same definition)",
                spec.name, old.changed
            )));
        }
    }
    put(store, &def)?;
    if removed.contains_key(&spec.name) {
        store.put_catalog(REMOVED_KIND, &spec.name, None)?;
    }
    Ok(def)
}

/// Enables or disables `name` (from the next stored blob on).
pub fn set_enabled(
    store: &dyn Store,
    name: &str,
    enabled: bool,
    now: i64,
) -> Result<Definition, Error> {
    let mut def = get(store, name)?;
    if def.enabled != enabled {
        def.enabled = enabled;
        def.changed = now;
        put(store, &def)?;
    }
    Ok(def)
}

/// Removes `name` from the registry (its stored results stay until they expire; see
/// [`REMOVED_KIND`]).
pub fn remove(store: &dyn Store, name: &str, now: i64) -> Result<(), Error> {
    let mut def = get(store, name)?;
    def.changed = now;
    let bytes = serde_json::to_vec(&def).map_err(|e| Error::Invalid(e.to_string()))?;
    store.put_catalog(REMOVED_KIND, name, Some(&bytes))?;
    store.put_catalog(CATALOG_KIND, name, None)?;
    store.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, select: &[&str], where_: Option<&str>) -> Spec {
        Spec {
            name: name.into(),
            select: select.iter().map(|s| s.to_string()).collect(),
            where_: where_.map(str::to_owned),
            ..Spec::default()
        }
    }

    #[test]
    fn names_and_transformations_are_checked() {
        assert!(validate(&spec("errors", &["status"], Some("status >= 500")), 1, None).is_ok());
        for bad in ["a/b", "", "-x", "a b", &"x".repeat(101)] {
            let e = validate(&spec(bad, &["status"], None), 1, None).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{bad}: {e}");
        }
        let e = validate(&spec("x", &["a..b"], None), 1, None).unwrap_err();
        assert!(e.to_string().contains("select"), "{e}");
        let e = validate(&spec("x", &["a"], Some("status >")), 1, None).unwrap_err();
        assert!(e.to_string().contains("where"), "{e}");
        let e = validate(&spec("x", &[], None), 1, None).unwrap_err();
        assert!(e.to_string().contains("--select"), "{e}");
    }

    #[test]
    fn registry_round_trips_through_the_catalog() {
        let store = sluice_store::InMemoryStore::new();
        let def = add(
            &store,
            &spec("errors", &["status", "path"], Some("status >= 500")),
            10,
            None,
        )
        .unwrap();
        assert!(matches!(
            add(&store, &spec("errors", &["x"], None), 11, None),
            Err(Error::Exists(_))
        ));
        assert_eq!(get(&store, "errors").unwrap(), def);
        let off = set_enabled(&store, "errors", false, 12).unwrap();
        assert!(!off.enabled && off.changed == 12 && off.created == 10);
        remove(&store, "errors", 13).unwrap();
        assert!(matches!(get(&store, "errors"), Err(Error::NotFound(_))));
        assert!(load(&store).unwrap().0.is_empty());
        // Its results outlive it: another definition under the name is refused, the same is not.
        let e = add(&store, &spec("errors", &["status"], None), 14, None).unwrap_err();
        assert!(e.to_string().contains("pick another name"), "{e}");
        add(
            &store,
            &spec("errors", &["status", "path"], Some("status >= 500")),
            15,
            None,
        )
        .unwrap();
    }
}
