//! Decoding one chunk of a range read: the whole blob, or with `select` / `where` / a consumer
//! that names what it reads ([`ReadOptions::needs`], [`ReadOptions::top`]) the lazy pass that
//! picks the paths, evaluates the filter and decodes only what is kept (see "Select and where"
//! in [`crate::range`]). Records what it saw in [`ReadFacts`] for the hints.

use std::sync::Arc;

use sereal::lazy::{Item, ItemDecoder, Selector, Step};
use sereal::{Decoder, Key, Limits, Value};
use sluice_blob::Blob;

use crate::facts::{ReadFacts, KIND_NUMBER, KIND_OTHER, KIND_STRING};
use crate::filter::Filter;
use crate::reduce::{rank_key, TopBuffer};
use crate::request::{ReadOptions, ReadRequest, SparseShape};

/// What one event kept by the filter becomes.
enum Output {
    /// The whole decoded event (no lazy output paths).
    Whole,
    /// `{path text: value}` of the select paths: each path's text (the output key) and whether
    /// it has a `[*]` (an array of every match; otherwise the first match or `null`).
    Select(Vec<(Key, bool)>),
    /// A sparse event ([`ReadOptions::needs`]), built from the first match of each prefix.
    Sparse(SparseShape),
    /// The whole event, but only for the events among the `n` first (by the value of the one
    /// output path) of all those read so far ([`ReadOptions::top`]).
    Top,
}

/// Decodes chunks for one request, reusing buffers across chunks.
pub(crate) struct ChunkDecoder {
    lazy: bool,
    /// Check each chunk's SHA-1 (false: the store checked the bytes, see
    /// [`crate::ReadOptions::verify_sha1`]).
    pub(crate) verify_sha1: bool,
    limits: Limits,
    decoder: Decoder,
    /// The output paths (select, sparse prefixes or the top's field), then the filter's: one
    /// pass for both.
    selector: Selector,
    /// With both output paths and a filter: the filter's paths alone, then the output paths
    /// alone for the events the filter keeps (most events are rejected after a short walk, and
    /// with an element index never walked further).
    split: Option<(Selector, Selector)>,
    /// Set by `decode` when the chunk's element index was bad (read by walking instead).
    pub(crate) notice: Option<String>,
    /// Number of output paths (the selector's first paths); the filter's follow.
    n_out: usize,
    /// How many of the output paths have an entry in [`ReadFacts::path_seen`] (the select
    /// paths do; the facts are per select / where path, see [`crate::hints`]).
    facts_out: usize,
    output: Output,
    /// With [`Output::Top`]: the rank keys of the `n` first events of the chunks read so far
    /// (an event that is not among them cannot be among the read's top `n`).
    top: Option<TopBuffer<()>>,
    filter: Option<Filter>,
    scratch: Vec<u8>,
    found: Vec<Vec<Value>>,
    pub(crate) facts: ReadFacts,
}

impl ChunkDecoder {
    pub(crate) fn new(req: &ReadRequest, opts: &ReadOptions) -> ChunkDecoder {
        let select = &req.selection.select;
        let (output, out_paths) = if !select.is_empty() {
            let keys = select
                .iter()
                .map(|p| {
                    let many = p.steps().iter().any(|s| matches!(s, Step::Wildcard));
                    (Key::Utf8(Arc::from(p.to_string())), many)
                })
                .collect();
            (Output::Select(keys), select.clone())
        } else if let Some(shape) = opts.needs.as_deref().and_then(SparseShape::of) {
            let paths = shape.paths().to_vec();
            (Output::Sparse(shape), paths)
        } else if let Some((by, _)) = &opts.top {
            (Output::Top, vec![by.clone()])
        } else {
            (Output::Whole, Vec::new())
        };
        let facts_out = select.len();
        let filter_paths = req
            .selection
            .filter
            .as_ref()
            .map(|f| f.paths().to_vec())
            .unwrap_or_default();
        let n_facts = facts_out + filter_paths.len();
        let split = (!filter_paths.is_empty() && !out_paths.is_empty()).then(|| {
            (
                Selector::new(filter_paths.clone()),
                Selector::new(out_paths.clone()),
            )
        });
        let n_out = out_paths.len();
        let mut paths = out_paths;
        paths.extend(filter_paths);
        ChunkDecoder {
            facts: ReadFacts {
                path_seen: vec![false; n_facts],
                path_kinds: vec![0; n_facts],
                ..ReadFacts::default()
            },
            lazy: req.is_lazy() || !matches!(output, Output::Whole),
            limits: opts.limits.clone(),
            decoder: Decoder::with_limits(opts.limits.clone()),
            selector: Selector::new(paths),
            split,
            notice: None,
            verify_sha1: true,
            n_out,
            facts_out,
            top: match &output {
                Output::Top => opts.top.as_ref().map(|(_, n)| TopBuffer::new(*n)),
                _ => None,
            },
            output,
            filter: req.selection.filter.clone(),
            scratch: Vec::new(),
            found: Vec::new(),
        }
    }

    /// The output values of one chunk (all or nothing), or why the chunk is unreadable.
    pub(crate) fn decode(&mut self, bytes: &[u8]) -> Result<Vec<Value>, String> {
        let blob = if self.verify_sha1 {
            Blob::parse(bytes)
        } else {
            Blob::parse_store_checked(bytes)
        }
        .map_err(|e| e.to_string())?;
        if !self.lazy {
            let values = blob
                .decode_with(&mut self.decoder)
                .map_err(|e| e.to_string())?;
            self.facts.scanned += values.len() as u64;
            return Ok(values);
        }
        let doc = blob
            .lazy(&self.limits, &mut self.scratch)
            .map_err(|e| e.to_string())?;
        if let sereal::lazy::IndexUse::Ignored(reason) = doc.element_index() {
            self.notice = Some(format!("{reason}; events found by walking instead"));
        }
        let mut items = doc.items().map_err(|e| format!("blob body: {e}"))?;
        // One pass per event picks undecoded handles for the output and filter paths; the
        // filter is evaluated first, and only the events it keeps are decoded (most are not: a
        // `status >= 500` keeps ~2 %). Handles borrow the body, so they live per chunk.
        let mut handles: Vec<Vec<Item<'_>>> = Vec::new();
        let mut picked_out: Vec<Vec<Item<'_>>> = Vec::new();
        let mut out = Vec::new();
        // A top-N: the running top as it will be if this chunk is read whole (a chunk that
        // fails gives no events, so it must not raise the bar), and the events to decode.
        let mut running_top = self.top.clone();
        let mut top_events: Vec<(usize, Item<'_>)> = Vec::new();
        let mut i = 0usize;
        let (n_out, facts_out) = (self.n_out, self.facts_out);
        loop {
            // Filter paths first, the output paths only for the events kept — once every select
            // path has been seen (until then each event is searched for all paths, so that
            // `path_seen` means what it says: some scanned event had it).
            let filter_first = match &self.split {
                Some(_) => self.facts.path_seen[..facts_out].iter().all(|&s| s),
                None => false,
            };
            let next = match (&mut self.split, filter_first) {
                (Some((filter_sel, _)), true) => filter_sel.next_selected(&mut items, &mut handles),
                _ => self.selector.next_selected(&mut items, &mut handles),
            };
            let Some(item) = next else { break };
            let event = i;
            i += 1;
            let item = item.map_err(|e| format!("event {event}: {e}"))?;
            self.facts.scanned += 1;
            // Where the filter's handles start in `handles`.
            let fbase = if filter_first { 0 } else { n_out };
            // The handles with facts: the select paths' (when searched) and the filter's.
            let (facts_first, handles_first) = if filter_first {
                (facts_out, 0)
            } else {
                (0, n_out - facts_out)
            };
            let seen = self.facts.path_seen[facts_first..].iter_mut();
            for (seen, picked) in seen.zip(&handles[handles_first..]) {
                *seen |= !picked.is_empty();
            }
            // One budget per event for all it decodes, as one selection had; set up on first use
            // (most events only have a plain integer read, which needs no decoder).
            let mut dec = None;
            // The common `field <op> literal` on one plain integer (`status >= 500`): evaluated
            // on that value alone, without the per-path value lists.
            let one = match (&self.filter, &handles[fbase..]) {
                (Some(f), [picked]) if picked.len() == 1 => plain_int(&picked[0])
                    .and_then(|v| f.matches_one(&v).map(|keep| (keep, kind_of(&v)))),
                _ => None,
            };
            if let Some((keep, kind)) = one {
                self.facts.path_kinds[facts_out] |= kind;
                if !keep {
                    continue;
                }
            } else if let Some(f) = &self.filter {
                self.found.resize_with(handles.len() - fbase, Vec::new);
                let kinds = self.facts.path_kinds[facts_out..].iter_mut();
                for ((values, picked), kind) in
                    self.found.iter_mut().zip(&handles[fbase..]).zip(kinds)
                {
                    values.clear();
                    for h in picked {
                        let v = decode_item(&mut dec, &doc, h, event)?;
                        *kind |= kind_of(&v);
                        values.push(v);
                    }
                }
                if !f.matches_selected(&self.found) {
                    continue;
                }
            }
            if let Output::Whole = self.output {
                let whole = dec
                    .get_or_insert_with(|| doc.item_decoder())
                    .decode(&item)
                    .map_err(|e| format!("event {event}: {e}"))?;
                out.push(whole);
                continue;
            }
            let selected = match (&mut self.split, filter_first) {
                (Some((_, out_sel)), true) => {
                    out_sel
                        .select_handles(&item, &mut picked_out)
                        .map_err(|e| format!("event {event}: {e}"))?;
                    &picked_out
                }
                _ => &handles,
            };
            match &self.output {
                Output::Select(keys) => {
                    let mut hash = Vec::with_capacity(n_out);
                    for ((key, many), picked) in keys.iter().zip(selected) {
                        let v = if *many {
                            let mut all = Vec::with_capacity(picked.len());
                            for h in picked {
                                all.push(decode_item(&mut dec, &doc, h, event)?);
                            }
                            Value::Array(all)
                        } else {
                            match picked.first() {
                                Some(h) => decode_item(&mut dec, &doc, h, event)?,
                                None => Value::Undef,
                            }
                        };
                        hash.push((key.clone(), v));
                    }
                    out.push(Value::Hash(hash));
                }
                Output::Sparse(shape) => {
                    let mut values = Vec::with_capacity(n_out);
                    for picked in &selected[..n_out] {
                        values.push(match picked.first() {
                            Some(h) => Some(decode_item(&mut dec, &doc, h, event)?),
                            None => None,
                        });
                    }
                    out.push(shape.build(values));
                }
                Output::Top => {
                    let key = match selected.first().and_then(|picked| picked.first()) {
                        Some(h) => rank_key(Some(&decode_item(&mut dec, &doc, h, event)?)),
                        None => rank_key(None),
                    };
                    if let Some(top) = &mut running_top {
                        if top.would_keep(&key) {
                            let kept: Result<(), String> = top.offer(key, || Ok(()));
                            kept?;
                            top_events.push((event, item));
                        }
                    }
                }
                Output::Whole => {}
            }
        }
        // A top-N: the events that were among the first `n` when read, decoded whole, in
        // chunk order (a superset of the read's top `n`, in read order: the top-N of what the
        // read hands out is the top-N of every event).
        for (event, item) in top_events {
            let mut dec = doc.item_decoder();
            out.push(
                dec.decode(&item)
                    .map_err(|e| format!("event {event}: {e}"))?,
            );
        }
        if running_top.is_some() {
            self.top = running_top;
        }
        Ok(out)
    }
}

/// Decodes `h` with the event's decoder (made on first use), or reads a plain integer without
/// one.
fn decode_item<'d>(
    dec: &mut Option<ItemDecoder<'d>>,
    doc: &'d sereal::lazy::LazyDoc<'d>,
    h: &Item<'d>,
    event: usize,
) -> Result<Value, String> {
    if let Some(v) = plain_int(h) {
        return Ok(v);
    }
    dec.get_or_insert_with(|| doc.item_decoder())
        .decode(h)
        .map_err(|e| format!("event {event}: {e}"))
}

/// The value of an integer written in place (no reference, no track flag), as the decoder would
/// give it, read without setting up a decoder: most `where` operands are such numbers (a status,
/// a duration). `None` for anything else.
#[inline]
fn plain_int(h: &sereal::lazy::Item<'_>) -> Option<Value> {
    use sereal::lazy::Scalar;
    use sereal::tag::{VARINT, ZIGZAG};
    match h.tag() {
        0x00..=0x1f | VARINT | ZIGZAG => match h.scalar() {
            Ok(Some(Scalar::Int(i))) => Some(Value::Int(i)),
            Ok(Some(Scalar::UInt(u))) => Some(Value::UInt(u)),
            _ => None,
        },
        _ => None,
    }
}

fn kind_of(v: &Value) -> u8 {
    match v.resolve() {
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => KIND_NUMBER,
        Value::String(_) | Value::Binary(_) => KIND_STRING,
        Value::Ref(inner) => kind_of(inner),
        _ => KIND_OTHER,
    }
}

/// Decodes stored blobs into the sparse events a reduce needs — only the paths it names, read
/// lazily, the events a `--where` drops never built — as a range read narrowed by
/// [`crate::reduce::Plan::narrow_read`] does (the same decoder). What a rollup runs on each
/// newly stored blob.
pub struct ReduceDecoder {
    inner: ChunkDecoder,
}

impl std::fmt::Debug for ReduceDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReduceDecoder").finish_non_exhaustive()
    }
}

impl ReduceDecoder {
    /// A decoder keeping the events `filter` keeps, with the paths `needs` (`None`: whole
    /// events), within `limits`.
    pub fn new(filter: Option<Filter>, needs: Option<Vec<sereal::Path>>, limits: Limits) -> Self {
        let selection = crate::Selection {
            filter,
            ..crate::Selection::default()
        };
        let req = ReadRequest::selected(0, 1, selection);
        let opts = ReadOptions {
            needs,
            limits,
            ..ReadOptions::default()
        };
        let mut inner = ChunkDecoder::new(&req, &opts);
        // Bytes handed over by the writer that just built them: their SHA-1 holds.
        inner.verify_sha1 = false;
        ReduceDecoder { inner }
    }

    /// The kept events of one blob, or why it cannot be read.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Vec<Value>, String> {
        self.inner.decode(bytes)
    }
}
