"""Reading events back: a time range (:meth:`Reader.read`) or the live stream (:meth:`Reader.tail`).

Two sources, one interface:

- ``Reader(data_dir=...)`` reads a data directory with the Rust reader (``crates/reader``), in
  this process: chunks verified, ``select``/``where`` applied lazily. The embedded store allows one
  process per directory; the directory is locked only while a read is running. While a
  ``sluice serve`` runs on it, the read goes through that server instead (its address is in
  ``<data_dir>/SERVER``), with the server's JSON mapping for values.
- ``Reader(server="http://host:8180")`` asks a running ``sluice serve``: ``GET /v1/events``
  (NDJSON) for ranges and ``GET /v1/tail`` (Server-Sent Events, resumable cursors) for tails.
  ``https://`` for TLS (trusting ``ca=``/``SLUICE_CA``, or ``ssl_context=``); a token
  (``token=`` or ``SLUICE_TOKEN``, scope ``read``) goes in ``Authorization: Bearer …``. A
  refused token is a :class:`ReadError` with ``status`` 401 or 403, never retried.

Events are dicts carrying their tags (``epoch``, ``dc``, ``type``, ``subtype``), in epoch order
(then dc, type, subtype, chunk, as stored). With ``select``, each event is instead a dict of
``{path: value}``. Values over HTTP follow the server's JSON mapping (``docs/format.md``): a
binary string that is not UTF-8 comes as ``{"$binary": base64}``, a NaN as ``"NaN"``; read from a
data directory they are ``bytes`` and ``float`` (the :mod:`sluice.sereal` mapping).

A chunk that cannot be read (checksum mismatch, missing blob) does not stop a read: it becomes a
:class:`ReadWarning` in the iterator's ``warnings`` list (and a warning on the ``sluice.reader``
logger), and the read goes on.
"""

from __future__ import annotations

import datetime as _dt
import http.client
import inspect
import json
import logging
import os
import ssl
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Union

from . import _native
from ._net import bearer, make_ssl_context, resolve_token
from ._types import ReadError
from .reduce import _items

__all__ = ["Reader", "Events", "Tail", "ReadWarning", "ReadError"]

log = logging.getLogger("sluice.reader")

TimeArg = Union[int, float, str, _dt.datetime]

try:  # orjson parses NDJSON lines faster, when it is installed; json is the fallback.
    import orjson as _orjson

    _parse_json = _orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _parse_json = json.loads


class ReadWarning(NamedTuple):
    """A part of the range that could not be read and was skipped."""

    key: str
    """The chunk's key ``<epoch>:<dc>:<type>:<subtype>:<chunk>`` (or ``<epoch>-<dc>``)."""
    reason: str
    """What went wrong."""


def _epoch(t: TimeArg, now: int) -> int:
    if isinstance(t, bool):
        raise TypeError("a time must be an int, float, str or datetime, not bool")
    if isinstance(t, int):
        return t
    if isinstance(t, float):
        return int(t // 1)
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            raise ValueError("a naive datetime is ambiguous: give one with a tzinfo (e.g. UTC)")
        return int(t.timestamp() // 1)
    if isinstance(t, str):
        return _native.parse_time(t, now)
    raise TypeError(f"a time must be an int, float, str or datetime, not {type(t).__name__}")


def _paths(select: Union[None, str, Sequence[str]]) -> List[str]:
    if select is None:
        return []
    if isinstance(select, str):
        return [p.strip() for p in select.split(",") if p.strip()]
    return list(select)


class Events:
    """The events of one range read: an iterator of dicts (see :meth:`Reader.read`).

    Attributes:
        warnings: the :class:`ReadWarning` s met so far.
        hints: once the read is over, what may explain an empty or odd answer (a field or type
            never seen in the range, with a suggestion; an empty range; a range beyond
            retention), as ``sluice cat`` prints them; also logged at INFO.
    """

    def __init__(self, it: Iterator[Dict[str, Any]], closer: Any = None) -> None:
        self._it = it
        self._closer = closer
        self.warnings: List[ReadWarning] = []
        self.notices: List[ReadWarning] = []
        self.hints: List[str] = []
        # `(reader, start, end, filters)`: what it takes to run this read as a reduce read
        # instead (set by `Reader.read` without `select`; `sluice.reduce` uses it). Not a
        # closure over `self`: a cycle would keep the store locked until the GC runs.
        self._reduce_read: Optional[tuple] = None

    def _reducible(self) -> Any:
        """``(plan) -> this Events, now iterating the rows of the reduce read``, while nothing
        has been taken from this read (and it has no ``select``); else ``None``."""
        if self._reduce_read is None:
            return None
        if inspect.isgenerator(self._it) and inspect.getgeneratorstate(self._it) != inspect.GEN_CREATED:
            return None
        reader, t0, t1, filters = self._reduce_read
        return lambda plan: reader._reduce(t0, t1, plan, filters, into=self)

    def __iter__(self) -> "Events":
        return self

    def __next__(self) -> Dict[str, Any]:
        return next(self._it)

    def _warn(self, key: str, reason: str) -> None:
        w = ReadWarning(key, reason)
        self.warnings.append(w)
        log.warning("sluice read: %s: %s", key, reason)

    def _note(self, key: str, reason: str) -> None:
        self.notices.append(ReadWarning(key, reason))
        log.info("sluice read: %s: %s", key, reason)

    def _hint(self, hint: str) -> None:
        self.hints.append(hint)
        log.info("sluice read: hint: %s", hint)

    def close(self) -> None:
        """Stop the read early (closes the store or the connection)."""
        if self._closer is not None:
            self._closer()
            self._closer = None

    def __enter__(self) -> "Events":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def to_list(self) -> List[Dict[str, Any]]:
        """The remaining events, as a list."""
        return list(self)

    def to_arrow(self) -> Any:
        """The remaining events as a ``pyarrow.Table``: one column per top-level key seen in
        *any* event (in order of first appearance; ``null`` where an event lacks it), each
        column's type inferred from all its values. A column whose values have no common Arrow
        type (``1`` in one event, ``"x"`` in another) becomes strings: JSON text of each value,
        with a warning in :attr:`warnings`. Needs ``pyarrow``."""
        try:
            import pyarrow as pa
        except ImportError as e:
            raise ImportError("to_arrow() needs pyarrow: pip install pyarrow") from e
        rows = list(self)
        names: Dict[str, None] = {}
        for row in rows:
            for k in row:
                names.setdefault(k, None)
        columns = {}
        for name in names:
            values = [row.get(name) for row in rows]
            try:
                columns[name] = pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                self._warn(f"column {name}", "mixed value types: stored as JSON text")
                columns[name] = pa.array(
                    [None if v is None else json.dumps(v, default=str) for v in values],
                    type=pa.string(),
                )
        return pa.table(columns) if columns else pa.table({})


class Tail:
    """A tail (see :meth:`Reader.tail`): an iterator of events that follows the live stream.

    Attributes:
        cursor: the resume token (``None`` until the first one is known): pass it as
            ``Reader.tail(cursor=...)`` to continue with no gap. Events come in batches (one
            per poll); the cursor moves to the end of a batch as its last event is yielded. So
            read after an event, it covers that event and everything before: resuming repeats
            nothing, except when taken in the middle of a batch, where the resumed tail repeats
            that batch's events already yielded (never a gap).
        warnings: the :class:`ReadWarning` s met so far.
    """

    def __init__(self, gen_factory: Any) -> None:
        self.cursor: Optional[str] = None
        self.warnings: List[ReadWarning] = []
        self.notices: List[ReadWarning] = []
        self._closed = False
        self._gen = gen_factory(self)

    def __iter__(self) -> "Tail":
        return self

    def __next__(self) -> Dict[str, Any]:
        return next(self._gen)

    def _warn(self, key: str, reason: str) -> None:
        self.warnings.append(ReadWarning(key, reason))
        log.warning("sluice tail: %s: %s", key, reason)

    def _note(self, key: str, reason: str) -> None:
        self.notices.append(ReadWarning(key, reason))
        log.info("sluice tail: %s: %s", key, reason)

    def close(self) -> None:
        """Stop following (closes the store or the connection)."""
        self._closed = True
        self._gen.close()

    def __enter__(self) -> "Tail":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _with_cursor(t: Tail, events: List[Dict[str, Any]], cursor: Optional[str]) -> Iterator[Dict[str, Any]]:
    """Yields a poll's events; the tail's cursor moves to `cursor` just before the last one is
    handed out (a consumer that stops after any event then resumes without a gap)."""
    last = len(events) - 1
    for i, ev in enumerate(events):
        if i == last:
            t.cursor = cursor
        yield ev


class Reader:
    """Reads events from a data directory or a running server.

    Args:
        data_dir: a data directory (as ``sluice serve --data`` writes it) with no server
            running on it.
        server: base URL of a running server, e.g. ``"http://127.0.0.1:8180"``.
        timeout: seconds for connecting and for each read from the server.
        binary: how binary strings come out of a data directory (see :func:`sluice.sereal.loads`).
        substream: read this registered substream's results instead of the events (``sluice
            substream add``). A result that is missing (shed, failed, or stored before the
            substream existed) is computed from the full blob — by the Rust reader for a data
            directory, by the server otherwise — and listed in the iterator's ``notices``.
        fallback: with ``substream``, ``False`` reports missing results as ``warnings`` (gaps)
            instead of computing them.
        token: the token sent to the server (scope ``read``); ``None`` takes ``SLUICE_TOKEN``
            from the environment, ``""`` sends none.
        ca: PEM file of the CA (or the self-signed certificate) to trust for ``https://``;
            ``None`` takes ``SLUICE_CA``, and without either the system's CAs are trusted (for a
            data directory read through its running server: that server's
            ``tls/self-signed.pem`` when it has one).
        ssl_context: an :class:`ssl.SSLContext` to use for ``https://`` instead; not with ``ca``.

    Exactly one of ``data_dir`` and ``server`` must be given.

    Raises:
        ValueError: bad arguments (a URL that is not ``http(s)://``, a CA file that cannot be
            read, a token with spaces).
    """

    def __init__(
        self,
        *,
        data_dir: Optional[str] = None,
        server: Optional[str] = None,
        timeout: float = 30.0,
        binary: str = "auto",
        substream: Optional[str] = None,
        fallback: bool = True,
        token: Optional[str] = None,
        ca: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        if (data_dir is None) == (server is None):
            raise ValueError("give exactly one of data_dir= or server=")
        self._token = resolve_token(token)
        self._ca = ca
        self._ssl_arg = ssl_context
        self._ssl: Optional[ssl.SSLContext] = None
        self.data_dir = None if data_dir is None else str(data_dir)
        self.server = server
        self.timeout = timeout
        self.binary = binary
        self.substream = substream
        self.fallback = fallback
        #: The warnings (unreadable chunks) of the last :meth:`iter_batches` / :meth:`to_arrow`.
        self.warnings: List[ReadWarning] = []
        if server is not None:
            u = urllib.parse.urlsplit(server)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"server: expected a URL like http://127.0.0.1:8180, got {server!r}")
            self._url = u
            if u.scheme == "https":
                self._ssl = make_ssl_context(ca, ssl_context)
            elif ca or ssl_context is not None:
                raise ValueError("server: ca= and ssl_context= need an https:// URL")

    def __repr__(self) -> str:
        src = f"data_dir={self.data_dir!r}" if self.data_dir is not None else f"server={self.server!r}"
        sub = "" if self.substream is None else f", substream={self.substream!r}"
        return f"Reader({src}{sub})"

    def _substream_query(self) -> List[tuple]:
        if self.substream is None:
            return []
        return [("substream", self.substream)] + ([] if self.fallback else [("no_fallback", "1")])

    # ---- range reads -------------------------------------------------------------------------
    def read(
        self,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        *,
        dc: Optional[str] = None,
        type: Optional[str] = None,
        subtype: Optional[str] = None,
        select: Union[None, str, Sequence[str]] = None,
        where: Optional[str] = None,
    ) -> Events:
        """The events of ``start <= epoch < end``, in epoch order.

        Args:
            start: first second: Unix seconds, an aware ``datetime``, or text as
                ``sluice cat --from`` takes it (``"-5m"``, ``"now"``, RFC 3339).
            end: first second *not* read; default now (as ``sluice cat``).
            dc, type, subtype: only events with these tags (``subtype=""``: the empty subtype).
            select: paths to return instead of whole events (``"status"``,
                ``"timings.total_ms"``, ``"experiments[*].id"``); a list or a comma-separated str.
            where: keep only events for which this holds, e.g. ``"status >= 500"``.

        Returns:
            an :class:`Events` iterator of dicts (with ``warnings``, ``to_arrow()``).

        Raises:
            ReadError: the read cannot start (no such directory, owned by a running server, bad
                ``select``/``where``, the server refused the request or cannot be reached).
        """
        now = int(time.time())
        t0 = _epoch(start, now)
        t1 = now if end is None else _epoch(end, now)
        paths = _paths(select)
        if self.data_dir is not None:
            try:
                native = _native.open_range(
                    self.data_dir, t0, t1, dc=dc, type_=type, subtype=subtype,
                    select=paths, where_=where, binary=self.binary,
                    substream=self.substream, no_fallback=not self.fallback,
                )
            except ReadError:
                live = self._live_server()
                if live is None:
                    raise
                return live.read(t0, t1, dc=dc, type=type, subtype=subtype, select=select, where=where)
            ev = Events(iter(()), native.close)
            ev._it = self._local_events(native, ev)
        else:
            query = [("from", str(t0)), ("to", str(t1)), ("format", "json"), ("hints", "1")]
            query += self._filter_query(dc, type, subtype, paths, where) + self._substream_query()
            conn, resp = self._get("/v1/events", query)
            ev = Events(iter(()), conn.close)
            ev._it = self._server_events(conn, resp, ev)
        if not paths:
            ev._reduce_read = (self, t0, t1, (dc, type, subtype, where))
        return ev

    def iter_batches(
        self,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        *,
        dc: Optional[str] = None,
        type: Optional[str] = None,
        subtype: Optional[str] = None,
        select: Union[None, str, Sequence[str]] = None,
        where: Optional[str] = None,
        rows_per_batch: int = 65536,
    ) -> Iterator[Any]:
        """The events of ``start <= epoch < end`` as ``pyarrow.RecordBatch`` es, with bounded
        memory: at most ``rows_per_batch`` events per (dc, type) are held at once, so a week of
        events that does not fit in memory streams through.

        From a data directory the events become columns in Rust, in the history tier's layout
        (docs/history.md): ``_epoch``, ``_subtype``, ``_chunk``, a column per field (objects as
        structs, arrays as lists) whose type sticks per (dc, type) for the read, ``<field>__str``
        for strings where the field holds another type, ``_ints`` and ``_rest`` (Sereal bytes of
        what fits no column: decode with :func:`sluice.sereal.loads`). Each batch holds one
        (dc, type): its schema's metadata has ``sluice.dc`` and ``sluice.type``. Column files
        are read where they cover. From a server, each batch is built from the events read
        (``pyarrow.RecordBatch.from_pylist``). Needs ``pyarrow``.

        Raises:
            ReadError: as for :meth:`read`.
        """
        try:
            import pyarrow as pa
        except ImportError as e:
            raise ImportError("iter_batches() needs pyarrow: pip install pyarrow") from e
        if rows_per_batch < 1:
            raise ValueError("rows_per_batch must be at least 1")
        now = int(time.time())
        t0 = _epoch(start, now)
        t1 = now if end is None else _epoch(end, now)
        paths = _paths(select)
        native = None
        if self.data_dir is not None and self.substream is None:
            try:
                native = _native.open_batches(
                    self.data_dir, t0, t1, dc=dc, type_=type, subtype=subtype,
                    select=paths, where_=where, rows_per_batch=rows_per_batch,
                )
            except ReadError:
                if self._live_server() is None:
                    raise
        if native is None:
            events = self.read(t0, t1, dc=dc, type=type, subtype=subtype, select=select, where=where)
            with events:
                rows: List[Dict[str, Any]] = []
                for e in events:
                    rows.append(e)
                    if len(rows) >= rows_per_batch:
                        yield pa.RecordBatch.from_pylist(rows)
                        rows = []
                if rows:
                    yield pa.RecordBatch.from_pylist(rows)
            self.warnings = list(events.warnings)
            return
        self.warnings = []
        try:
            while True:
                data = native.next_ipc()
                self.warnings += [ReadWarning(k, r) for k, r in native.take_warnings()]
                if data is None:
                    return
                yield pa.ipc.open_stream(data).read_next_batch()
        finally:
            native.close()

    def to_arrow(
        self,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        **kwargs: Any,
    ) -> Any:
        """The events of ``start <= epoch < end`` as one ``pyarrow.Table``: the batches of
        :meth:`iter_batches` (same arguments), their schemas merged by name (a field's column
        types are promoted where (dc, type)s differ). Warnings of the read are in
        :attr:`warnings`. Needs ``pyarrow``."""
        import pyarrow as pa

        tables = [pa.Table.from_batches([b]) for b in self.iter_batches(start, end, **kwargs)]
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")

    def reduce(
        self,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        *,
        group_by: Union[None, str, Sequence[str]] = None,
        agg: Union[None, str, Sequence[str]] = None,
        window: Union[None, int, str] = None,
        count_by: Union[None, str, Sequence[str]] = None,
        top: Optional[int] = None,
        by: Optional[str] = None,
        max_groups: Optional[int] = None,
        dc: Optional[str] = None,
        type: Optional[str] = None,
        subtype: Optional[str] = None,
        where: Optional[str] = None,
    ) -> Events:
        """Rows of a reduce over the events of ``start <= epoch < end``, computed where the data
        is: ``sluice cat --group-by/--agg/--window/--count-by/--top/--by`` on a data directory,
        ``GET /v1/events`` with those parameters on a server. Only the fields the reduce names
        are read (blob chunks lazily), and only the rows come back.

        Args:
            start, end, dc, type, subtype, where: as for :meth:`read`.
            group_by, agg, window: as for :func:`sluice.reduce` (rows per group and window;
                ``agg`` defaults to ``count``).
            count_by: paths: ``group_by`` with ``agg="count"``, ranked by count (with ``top``,
                the most frequent).
            top, by: rows ranked by column ``by`` (default the first aggregate), ``top`` of
                them per window; without a group (``top=5, by="ms"``), the ``top`` events with
                the largest field ``by`` (whole events).
            max_groups: most groups held at once (default 1,000,000).

        Returns:
            an :class:`Events` iterator of rows (dicts), with ``warnings`` (unreadable chunks;
            key ``reduce``: events left out) and ``hints``.

        Raises:
            ValueError: a bad path, aggregate, window or combination (as ``sluice cat`` refuses
                it); more than ``max_groups`` groups held at once (while iterating).
            ReadError: the read cannot start (as for :meth:`read`).
        """
        plan = dict(
            group_by=_items(group_by),
            agg=_items(agg),
            window=None if window is None else str(window),
            count_by=_items(count_by),
            top=top,
            by=by,
            max_groups=max_groups,
        )
        _native.check_plan(**plan)
        now = int(time.time())
        t0 = _epoch(start, now)
        t1 = now if end is None else _epoch(end, now)
        return self._reduce(t0, t1, plan, (dc, type, subtype, where))

    def _reduce(
        self, t0: int, t1: int, plan: Dict[str, Any], filters: tuple, into: Optional[Events] = None
    ) -> Events:
        """The reduce read of `plan` (checked) over `filters` (dc, type, subtype, where); with
        `into`, an unstarted read whose store or connection is closed first and whose iterator
        becomes the rows."""
        dc, type_, subtype, where = filters
        if into is not None:
            into.close()
        if self.data_dir is not None:
            try:
                native = _native.open_reduce(
                    self.data_dir, t0, t1, **plan, dc=dc, type_=type_, subtype=subtype,
                    where_=where, binary=self.binary,
                    substream=self.substream, no_fallback=not self.fallback,
                )
            except ReadError:
                live = self._live_server()
                if live is None:
                    raise
                return live._reduce(t0, t1, plan, filters, into)
            ev = into if into is not None else Events(iter(()))
            ev._closer = native.close
            ev._it = self._local_events(native, ev)
            return ev
        query = [("from", str(t0)), ("to", str(t1)), ("format", "json"), ("hints", "1")]
        query += self._filter_query(dc, type_, subtype, [], where) + self._substream_query()
        for key in ("group_by", "agg", "count_by"):
            query += [(key, v) for v in plan[key]]
        for key in ("window", "top", "by", "max_groups"):
            if plan[key] is not None:
                query.append((key, str(plan[key])))
        conn, resp = self._get("/v1/events", query)
        ev = into if into is not None else Events(iter(()))
        ev._closer = conn.close
        ev._it = self._server_events(conn, resp, ev)
        return ev

    def rollup(
        self,
        name: str,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        *,
        step: Union[None, int, str] = None,
        where: Optional[str] = None,
        output: str = "arrow",
    ) -> Any:
        """The rows of rollup ``name`` (``sluice rollup add``) over ``start <= epoch < end``:
        its stored states merged at ``step`` (a multiple of the rollup's; default the rollup's),
        quantiles and distinct counts merged as sketches, as ``sluice rollup query`` gives them.

        Args:
            name: the rollup.
            start, end: as for :meth:`read`.
            step: seconds, or a duration (``"1m"``).
            where: keep only the groups for which this holds (over the group-by fields).
            output: ``"arrow"`` (a :class:`pyarrow.Table`), ``"pandas"`` (a DataFrame) or
                ``"rows"`` (a list of dicts): one row per (step, group) with ``start``, the
                group fields (as text) and the aggregates.

        Returns:
            the rows in the asked form; ``self.warnings`` holds the states skipped.

        Raises:
            ValueError: a bad step, ``where`` or ``output``.
            ReadError: no such rollup, a step that is not a multiple of the rollup's, or the
                read cannot start.
        """
        if output not in ("arrow", "pandas", "rows"):
            raise ValueError(f"output: 'arrow', 'pandas' or 'rows', got {output!r}")
        now = int(time.time())
        t0 = _epoch(start, now)
        t1 = now if end is None else _epoch(end, now)
        step_s = None if step is None else str(step)
        self.warnings = []
        if self.data_dir is not None:
            try:
                rows, warnings, _other = _native.rollup_query(self.data_dir, name, t0, t1, step_s, where)
            except ReadError:
                live = self._live_server()
                if live is None:
                    raise
                got = live.rollup(name, t0, t1, step=step, where=where, output=output)
                self.warnings = live.warnings
                return got
        else:
            query = [("from", str(t0)), ("to", str(t1))]
            if step_s is not None:
                query.append(("step", step_s))
            if where is not None:
                query.append(("where", where))
            conn, resp = self._get(f"/v1/rollups/{urllib.parse.quote(name, safe='')}", query)
            try:
                body = _parse_json(resp.read())
            finally:
                conn.close()
            rows = body.get("rows", [])
            warnings = [str(w) for w in body.get("warnings", [])]
        self.warnings = [ReadWarning("rollup", w) for w in warnings]
        if output == "rows":
            return rows
        import pyarrow as pa

        table = pa.Table.from_pylist(rows)
        return table if output == "arrow" else table.to_pandas()

    def funnel(
        self,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        *,
        by: str,
        steps: Sequence[str],
        within: Union[None, int, str] = None,
        group_by: Union[None, str, Sequence[str]] = None,
        dc: Optional[str] = None,
        type: Optional[str] = None,
        subtype: Optional[str] = None,
        where: Optional[str] = None,
        max_sessions: Optional[int] = None,
        columns: bool = True,
    ) -> Dict[str, Any]:
        """How many sessions reach each of ``steps`` (``--where`` expressions, in order) over
        ``start <= epoch < end``, the conversions and the median / p90 seconds between steps:
        ``sluice funnel``'s answer (``GET /v1/funnel``; the semantics are in ``docs/funnels.md``).

        Args:
            start, end: as for :meth:`read`.
            by: the field naming a session (``"session_id"``).
            steps: the steps' expressions, e.g. ``['path == "/search"', 'path == "/book"']``.
            within: later steps count only within this long of the session's first step
                (seconds, or a duration like ``"30m"``).
            group_by: a field (or fields) to split the funnel by, e.g. ``"dc"``.
            dc, type, subtype, where: which events, as for :meth:`read`.
            max_sessions: the cap on sessions held (default 1,000,000); the step-1 events of
                sessions refused are counted in ``overflow`` (and logged as a warning).
            columns: ``False`` reads blobs only, even where the column files cover the range.

        Returns:
            the answer as a dict: ``groups`` (each ``{"group": {...}, "steps": [{"step",
            "where", "sessions", "from_previous", "from_first", "median_secs", "p90_secs"}]}``),
            ``events``, ``sessions``, ``overflow``, ``warnings``, ``from_columns``;
            ``self.warnings`` holds the chunks skipped.

        Raises:
            ReadError: bad arguments (answered 400 by the server) or the read cannot start.
                A data directory is read through the server running on it; funnels over a
                data directory with no server are ``sluice funnel --data DIR``'s.
        """
        if isinstance(steps, str):
            steps = [steps]
        if not steps:
            raise ValueError("steps: at least one --where expression")
        now = int(time.time())
        t0 = _epoch(start, now)
        t1 = now if end is None else _epoch(end, now)
        self.warnings = []
        if self.data_dir is not None:
            live = self._live_server()
            if live is None:
                raise ReadError(
                    f"{self.data_dir}: no server runs on it; a funnel over a data directory is "
                    f"`sluice funnel --data {self.data_dir}` (or start `sluice serve` on it)"
                )
            got = live.funnel(t0, t1, by=by, steps=steps, within=within, group_by=group_by, dc=dc,
                              type=type, subtype=subtype, where=where, max_sessions=max_sessions,
                              columns=columns)
            self.warnings = live.warnings
            return got
        query = [("from", str(t0)), ("to", str(t1)), ("by", by)]
        query += [("step", s) for s in steps]
        if within is not None:
            query.append(("within", str(within)))
        groups = [group_by] if isinstance(group_by, str) else list(group_by or [])
        query += [("group_by", g) for g in groups]
        if max_sessions is not None:
            query.append(("max_sessions", str(max_sessions)))
        if not columns:
            query.append(("columns", "off"))
        query += self._filter_query(dc, type, subtype, [], where)
        conn, resp = self._get("/v1/funnel", query)
        try:
            body = _parse_json(resp.read())
        finally:
            conn.close()
        self.warnings = [ReadWarning("funnel", str(w)) for w in body.get("warnings", [])]
        for w in self.warnings:
            log.warning("skipped: %s", w.reason)
        if body.get("overflow"):
            log.warning("%s step-1 events of sessions beyond max_sessions=%s were not used: the counts are low",
                        body["overflow"], body.get("max_sessions"))
        return body

    def _live_server(self) -> Optional["Reader"]:
        """When a running ``sluice serve`` holds ``data_dir`` (its lock), a reader of that server:
        the server writes its address to ``<data_dir>/SERVER`` (as ``sluice cat --data`` uses it).
        ``None`` when the file is missing or holds no ``http://`` address."""
        try:
            with open(f"{self.data_dir}/SERVER", encoding="utf-8") as f:
                url = f.read().strip()
        except OSError:
            return None
        if url.startswith("https://"):
            # The server's own self-signed certificate, when nothing else is said to be trusted.
            own = os.path.join(self.data_dir or ".", "tls", "self-signed.pem")
            try:
                ctx = make_ssl_context(
                    self._ca, self._ssl_arg, default_ca=own if os.path.exists(own) else None
                )
            except ValueError as e:
                raise ReadError(f"{self.data_dir} is served by {url}: {e}") from None
        elif url.startswith("http://"):
            ctx = None
        else:
            return None
        log.info("%s is in use by a running server; reading through %s", self.data_dir, url)
        return Reader(server=url, timeout=self.timeout, binary=self.binary,
                      substream=self.substream, fallback=self.fallback,
                      token=self._token or "", ssl_context=ctx)

    @staticmethod
    def _local_events(native: Any, ev: Events) -> Iterator[Dict[str, Any]]:
        try:
            while True:
                batch = native.next_batch()
                for key, reason in native.take_warnings():
                    ev._warn(key, reason)
                for key, reason in native.take_notices():
                    ev._note(key, reason)
                if not batch:
                    for h in native.take_hints():
                        ev._hint(h)
                    return
                yield from batch
        finally:
            native.close()

    @staticmethod
    def _server_events(conn: http.client.HTTPConnection, resp: Any, ev: Events) -> Iterator[Dict[str, Any]]:
        try:
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise ReadError(f"reading the response: {e!r}") from None
                if not line:
                    return
                if line.startswith(b'{"_sluice"'):
                    trailer = _parse_json(line).get("_sluice", {})
                    for w in trailer.get("warnings", []):
                        ev._warn(str(w.get("key")), str(w.get("reason")))
                    for w in trailer.get("notices", []):
                        ev._note(str(w.get("key")), str(w.get("reason")))
                    for h in trailer.get("hints", []):
                        ev._hint(str(h))
                    continue
                if line.strip():
                    yield _parse_json(line)
        finally:
            conn.close()

    @staticmethod
    def _filter_query(dc: Optional[str], type_: Optional[str], subtype: Optional[str], paths: List[str], where: Optional[str]) -> List[tuple]:
        q = [(k, v) for k, v in (("dc", dc), ("type", type_), ("subtype", subtype), ("where", where)) if v is not None]
        q += [("select", p) for p in paths]
        return q

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        u = self._url
        if u.scheme == "https":
            return http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)

    def _get(self, path: str, query: List[tuple], timeout: Optional[float] = None) -> Any:
        base = self._url.path.rstrip("/")
        target = f"{base}{path}?{urllib.parse.urlencode(query)}"
        conn = self._connect(self.timeout if timeout is None else timeout)
        try:
            conn.request("GET", target, headers=bearer(self._token))
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ReadError(f"{self.server}{path}: {e!r}") from None
        if resp.status != 200:
            body = resp.read()
            conn.close()
            try:
                msg = json.loads(body).get("error", body.decode("utf-8", "replace"))
            except (ValueError, AttributeError):
                msg = body.decode("utf-8", "replace")
            if resp.status in (401, 403):
                msg = f"{msg} (the token: token= or SLUICE_TOKEN, scope read)"
            err = ReadError(f"{self.server}{path}: {resp.status}: {msg}")
            err.status = resp.status  # type: ignore[attr-defined]
            raise err
        return conn, resp

    # ---- tails -------------------------------------------------------------------------------
    def tail(
        self,
        start: Optional[TimeArg] = None,
        *,
        cursor: Optional[str] = None,
        dc: Optional[str] = None,
        type: Optional[str] = None,
        subtype: Optional[str] = None,
        select: Union[None, str, Sequence[str]] = None,
        where: Optional[str] = None,
        idle_timeout: Optional[float] = None,
        poll_interval: float = 0.25,
    ) -> Tail:
        """Follow the stream: the events from ``start`` (default now), then new ones as they are
        stored, without end. History and live data are one read.

        Args:
            start: where to start (as for :meth:`read`); ignored when ``cursor`` is given.
            cursor: a token from an earlier tail's ``cursor``: continue exactly after it.
            dc, type, subtype, select, where: as for :meth:`read`.
            idle_timeout: stop (end the iteration) after this many seconds without an event;
                ``None`` follows for ever.
            poll_interval: seconds between polls of a data directory.

        Returns:
            a :class:`Tail` iterator; its ``cursor`` attribute is the resume token.

        A server connection that fails or goes quiet is re-opened from the cursor (no gap, no
        duplicate), with backoff.
        """
        now = int(time.time())
        t0 = None if start is None else _epoch(start, now)
        paths = _paths(select)
        if self.data_dir is not None:
            try:
                native = _native.open_tail(
                    self.data_dir, start=t0, cursor=cursor, dc=dc, type_=type, subtype=subtype,
                    select=paths, where_=where, binary=self.binary,
                    substream=self.substream, no_fallback=not self.fallback,
                )
            except ReadError:
                live = self._live_server()
                if live is None:
                    raise
                return live.tail(t0, cursor=cursor, dc=dc, type=type, subtype=subtype, select=select,
                                 where=where, idle_timeout=idle_timeout)
            return Tail(lambda t: self._local_tail(t, native, idle_timeout, poll_interval))
        query = self._filter_query(dc, type, subtype, paths, where) + self._substream_query()
        return Tail(lambda t: self._server_tail(t, t0, cursor, query, idle_timeout))

    @staticmethod
    def _local_tail(t: Tail, native: Any, idle_timeout: Optional[float], poll_interval: float) -> Iterator[Dict[str, Any]]:
        last = time.monotonic()
        try:
            while True:
                events, warnings, caught_up, notices = native.poll(int(time.time()))
                for key, reason in warnings:
                    t._warn(key, reason)
                for key, reason in notices:
                    t._note(key, reason)
                cursor = native.cursor()
                if events:
                    last = time.monotonic()
                    yield from _with_cursor(t, events, cursor)
                    continue
                t.cursor = cursor
                if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    return
                if caught_up:
                    time.sleep(poll_interval)
        finally:
            native.close()

    def _server_tail(
        self, t: Tail, start: Optional[int], cursor: Optional[str], filters: List[tuple], idle_timeout: Optional[float]
    ) -> Iterator[Dict[str, Any]]:
        if cursor is not None:
            t.cursor = cursor
        last = time.monotonic()
        backoff = 0.1
        while True:
            if t.cursor is not None:
                query = [("cursor", t.cursor)]
            elif start is not None:
                query = [("from", str(start))]
            else:
                query = []
            # Each socket read waits at most this long; a quiet stream is then re-opened from the
            # cursor (the server only writes when there is something new).
            wait = self.timeout
            if idle_timeout is not None:
                wait = max(0.05, min(wait, idle_timeout - (time.monotonic() - last)))
            try:
                conn, resp = self._get("/v1/tail", query + filters, timeout=wait)
            except ReadError as e:
                if 400 <= getattr(e, "status", 0) < 500:
                    raise  # the request itself is bad (filter, cursor): retrying cannot help
                t._warn("tail", str(e))
                if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.1
            try:
                kind, data = "message", []
                pending: List[Dict[str, Any]] = []  # this poll's events, until its cursor comes
                while True:
                    if idle_timeout is not None:
                        left = idle_timeout - (time.monotonic() - last)
                        if left <= 0:
                            return
                        if conn.sock is not None:
                            conn.sock.settimeout(max(0.05, min(self.timeout, left)))
                    try:
                        raw = resp.readline()
                    except (OSError, http.client.HTTPException):
                        break  # quiet or broken: re-open from the cursor
                    if not raw:
                        break
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
                    elif line == "":
                        if data:
                            text = "\n".join(data)
                            if kind == "event":
                                pending.append(_parse_json(text))
                            elif kind == "cursor":
                                if pending:
                                    last = time.monotonic()
                                    batch, pending = pending, []
                                    yield from _with_cursor(t, batch, text)
                                else:
                                    t.cursor = text
                            elif kind == "warning":
                                w = _parse_json(text)
                                t._warn(str(w.get("key")), str(w.get("reason")))
                            elif kind == "notice":
                                w = _parse_json(text)
                                t._note(str(w.get("key")), str(w.get("reason")))
                        kind, data = "message", []
            finally:
                conn.close()
            if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                return
