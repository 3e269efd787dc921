//! The general walk: follow any number of [`Path`]s of any kind (keys, indexes, wildcards)
//! through an item in one pass, emitting values or handles for what they reach, and stopping as
//! soon as nothing more can match.

use super::doc::{Core, LazyDoc};
use super::path::{resolve_index, Path, Step};
use crate::de::Parser;
use crate::error::{ErrorCode, Result};
use crate::value::Value;

/// A path being followed: which path, how many steps are done, and (for key steps inside the
/// current hash) whether it already matched — only the first entry with a key counts.
#[derive(Debug, Clone, Copy)]
pub(super) struct PathCursor {
    path: u32,
    step: u32,
    done: bool,
}

/// What to produce for a matched item.
pub(super) trait Emit<'d> {
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

/// Emit decoded values.
pub(super) struct ValueEmit<'d>(pub(super) Parser<'d, 'd>);

impl<'d> Emit<'d> for ValueEmit<'d> {
    type Out = Value;
    fn emit(&mut self, _doc: &'d LazyDoc<'d>, pos: usize, in_copy: bool) -> Result<(Value, usize)> {
        self.0.value_at(pos, in_copy)
    }
}

/// Select `paths` from the item at `start` of `doc` into `out` (resized to one `Vec` per path,
/// each cleared), using `stack` for the cursors.
pub(super) fn walk<'d, E: Emit<'d>>(
    doc: &'d LazyDoc<'d>,
    start: usize,
    paths: &[Path],
    stack: &mut Vec<PathCursor>,
    emit: E,
    out: &mut Vec<Vec<E::Out>>,
) -> Result<()> {
    out.resize_with(paths.len(), Vec::new);
    out.iter_mut().for_each(Vec::clear);
    walk_from(doc, start, paths, stack, emit, out, false)?;
    Ok(())
}

/// Visit the item at `start` for all of `paths` (into `out`, already one `Vec` per path), with
/// the result of [`Walker::node`]: the item's end when `need_end`.
pub(super) fn walk_from<'d, E: Emit<'d>>(
    doc: &'d LazyDoc<'d>,
    start: usize,
    paths: &[Path],
    stack: &mut Vec<PathCursor>,
    emit: E,
    out: &mut Vec<Vec<E::Out>>,
    need_end: bool,
) -> Result<Option<usize>> {
    if paths.len() > u32::MAX as usize {
        return Err(doc
            .body
            .err(ErrorCode::BadPath("too many paths".into()), start));
    }
    stack.clear();
    stack.extend((0..paths.len()).map(|i| PathCursor {
        path: i as u32,
        step: 0,
        done: false,
    }));
    let visits_left = doc.limits.max_values;
    let mut w = Walker {
        doc,
        paths,
        stack,
        emit,
        out,
        visits_left,
    };
    let hi = w.stack.len();
    w.node(start, 0, hi, need_end, 0, false)
}

/// The general walk: every kind of step, any number of paths at once, one pass over an item.
struct Walker<'d, 'w, E: Emit<'d>> {
    doc: &'d LazyDoc<'d>,
    paths: &'w [Path],
    stack: &'w mut Vec<PathCursor>,
    emit: E,
    out: &'w mut Vec<Vec<E::Out>>,
    /// Items this walk may still visit. Back-references can make a document a DAG whose paths
    /// (`[*][*]…` through doubling REFPs) are exponentially many; this bounds the work.
    visits_left: usize,
}

impl<'d, E: Emit<'d>> Walker<'d, '_, E> {
    #[inline]
    fn step_of(&self, c: PathCursor) -> Option<&Step> {
        self.paths[c.path as usize].steps().get(c.step as usize)
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
            return Err(d
                .body
                .err(ErrorCode::TotalValuesLimit(d.limits.max_values), pos));
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
                    self.stack.push(PathCursor {
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
                    self.stack.push(PathCursor {
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
