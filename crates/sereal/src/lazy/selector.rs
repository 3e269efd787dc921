//! [`Selector`]: a reusable selection of several paths, and the hot loop of a filtered read
//! ([`Selector::next_selected`]): the next element of an array with handles to what the paths
//! select in it, in one pass.

use super::doc::LazyDoc;
use super::item::ItemEmit;
use super::item::{Item, Items};
use super::path::Path;
use super::plan::KeyPlan;
use super::walker::{walk, walk_from, PathCursor, ValueEmit};
use crate::error::Result;
use crate::value::Value;

/// A reusable multi-path selection: holds the paths and the buffers of the walk, so that
/// selecting from many items allocates only for the values it returns.
#[derive(Debug, Clone)]
pub struct Selector {
    paths: Vec<Path>,
    stack: Vec<PathCursor>,
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
            item.doc,
            item.start,
            &self.paths,
            &mut self.stack,
            ValueEmit(item.doc.parser()),
            out,
        )
    }

    /// Like [`Selector::select`] but yielding undecoded handles.
    pub fn select_items<'d>(&mut self, item: &Item<'d>) -> Result<Vec<Vec<Item<'d>>>> {
        let mut out = Vec::new();
        walk(
            item.doc,
            item.start,
            &self.paths,
            &mut self.stack,
            ItemEmit,
            &mut out,
        )?;
        Ok(out)
    }

    /// The next element of `items` together with undecoded handles of the values at each path
    /// in it (`out[i]` for path `i`, as [`Selector::select_items`] gives them), in **one** pass
    /// over the element: `items.next()` followed by `select_items` reads each element twice,
    /// once to find where it ends and once to select. This is the hot loop of a filtered read:
    /// evaluate a filter on some handles, and decode the others (with an
    /// [`ItemDecoder`](super::ItemDecoder)) only for elements that pass.
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
        let need_end = known_end.is_none();
        let end = walk_from(
            doc,
            start,
            &self.paths,
            &mut self.stack,
            ItemEmit,
            out,
            need_end,
        )?;
        match (end, known_end) {
            (_, Some(end)) => Ok(end),
            (Some(end), None) => Ok(end),
            (None, None) => doc.skip_n(start, 1),
        }
    }
}
