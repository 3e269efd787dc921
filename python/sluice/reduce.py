"""Group events by fields and aggregate them over time windows: the reader-side reduce.

>>> rows = sluice.reduce(reader.read("-1h", type="WEB"), group_by="path,status",   # doctest: +SKIP
...                      agg="count,avg:ms,max:ms", window="1m")
>>> next(rows)                                                                     # doctest: +SKIP
{'window': 1700000040, 'path': '/search', 'status': 200, 'count': 812, 'avg:ms': 14.2, 'max:ms': 95.1}

The same code as ``sluice cat --group-by … --agg … --window …`` (``crates/reader/src/reduce.rs``,
through the native module), so the rows are the same:

- ``group_by``: paths in the reader's syntax (``a.b``, ``xs[0]``, ``xs[*].id``,
  ``"key.with.dots"``), a comma-separated string or a list; a path's first match is the group's
  value (``None`` when missing). Groups compare by their JSON form (``1`` and ``1.0`` differ).
- ``agg``: ``count``, ``sum:PATH``, ``min:PATH``, ``max:PATH``, ``avg:PATH`` (default ``count``),
  over every match of PATH that is a number or a string that reads as one; other values are
  skipped. ``sum`` of integers is an exact integer; ``min``/``max`` keep the value's type;
  ``None`` when a group has no value. Also ``pNN:PATH`` (``p50``, ``p95``, ``p99.9``: the
  quantile of those numbers from a DDSketch, within 1 %), ``distinct:PATH`` (distinct values
  from a HyperLogLog in postgresql-hll's format: exact up to 160, then ~2 % error),
  ``count_if:EXPR`` (events matching a ``where`` expression: ``"count_if:status >= 500"``) and
  ``ratio:EXPR`` (that count over ``count``, a float).
- ``window``: seconds (an int) or ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"``; each row then starts with
  ``window`` (its start, Unix seconds) and windows come out in time order, each as soon as an event
  of a later window arrives. The time of an event is its ``time_field`` (the ``epoch`` tag every
  event read carries).
- Rows are dicts: window, the group-by fields (keys as written), then the aggregates (keys as
  written, e.g. ``"avg:ms"``), groups in order of first appearance.
- Events without a time, or older than a window already returned, are left out and counted:
  a :class:`ReduceWarning` at the end says how many.

Given the :class:`~sluice.reader.Events` of a ``Reader.read`` (without ``select``) that nothing
has been taken from, and the default ``time_field``, the reduce runs where the data is instead
(:meth:`Reader.reduce <sluice.reader.Reader.reduce>`: the data directory's reader, or the
server): only the fields it names are read, and only the rows come back. Same rows; the read's
warnings and hints land in that ``Events`` object.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from . import _native

__all__ = ["reduce", "ReduceWarning"]

_BATCH = 512


class ReduceWarning(UserWarning):
    """Some events were left out of a reduce (no time field, or arrived after their window)."""


def _items(spec: Union[None, str, Sequence[str]]) -> List[str]:
    if spec is None:
        return []
    if isinstance(spec, str):
        return [spec]  # commas are split by the Rust parser (which knows quotes and brackets)
    return [str(s) for s in spec]


def reduce(
    events: Iterable[Dict[str, Any]],
    group_by: Union[None, str, Sequence[str]] = None,
    agg: Union[None, str, Sequence[str]] = None,
    window: Union[None, int, str] = None,
    *,
    time_field: str = "epoch",
    max_groups: Optional[int] = None,
    top: Optional[int] = None,
    by: Optional[str] = None,
) -> Iterator[Dict[str, Any]]:
    """Rows of ``events`` grouped by ``group_by`` with the aggregates ``agg`` per ``window``
    (see the module docs). A generator: rows of a window come as soon as it is complete.
    With ``top`` and/or ``by``, each window's rows are ranked by column ``by`` (default the
    first aggregate), largest first, keeping ``top`` of them (``sluice cat --count-by`` /
    ``--top``): ``reduce(evs, "status", "count", top=3)`` are the three most frequent statuses.

    Raises:
        ValueError: a bad path, aggregate or window; more than ``max_groups`` groups held at
            once (default 1,000,000); an event that is not a dict.
    """
    r = _native.Reducer(
        _items(group_by),
        _items(agg),
        None if window is None else str(window),
        time_field=time_field,
        max_groups=max_groups,
        top=top,
        by=by,
    )
    reduce_read = getattr(events, "_reducible", lambda: None)() if time_field == "epoch" else None
    if reduce_read is not None:
        # The same spec as a plan (`agg` default `count`: always a grouping, never a top-N of
        # events), run by the read itself.
        rows = reduce_read(
            dict(
                group_by=_items(group_by),
                agg=_items(agg) or ["count"],
                window=None if window is None else str(window),
                count_by=[],
                top=top,
                by=by,
                max_groups=max_groups,
            )
        )
        yield from rows
        late = [w.reason for w in getattr(rows, "warnings", []) if w.key == "reduce"]
        if late:
            warnings.warn("reduce left out events: " + "; ".join(late), ReduceWarning, stacklevel=2)
        return
    batch: List[Dict[str, Any]] = []
    for ev in events:
        batch.append(ev)
        if len(batch) >= _BATCH:
            yield from r.push(batch)
            batch = []
    if batch:
        yield from r.push(batch)
    yield from r.finish()
    left_out = []
    if r.no_epoch:
        left_out.append("%d without %r" % (r.no_epoch, time_field))
    if r.late:
        left_out.append("%d after their window was returned" % r.late)
    if left_out:
        warnings.warn("reduce left out events: " + ", ".join(left_out), ReduceWarning, stacklevel=2)
