"""The emitter: ``emit(type, event)`` from any program, never blocking, never raising.

How it works: :meth:`Emitter.emit` appends ``(type, subtype, epoch, event)`` to a bounded
``collections.deque`` (an atomic append under the GIL: no lock on the hot path) and returns. A
background thread wakes when a batch is ready or every ``flush_interval`` seconds, packs what is
queued with the Rust codec (tags added, encoded as Sereal arrays with the GIL released, cut into
datagrams for UDP) and sends it. When the queue is full, new events are dropped and counted.

Transports:

- ``udp="host:port"``: datagrams of many events each, fire and forget (a send error is counted,
  never retried: the collector does not acknowledge UDP).
- ``tcp="host:port"``: Sereal frames on one connection, each acknowledged by the collector once
  durable (``ok <accepted> <dropped>``). ``tls=True`` (or ``tcp="tls://host:port"``) wraps the
  connection in TLS.
- ``http="http://host:port"``: ``POST /v1/events`` with a Sereal body, acknowledged the same way
  (``https://`` for TLS).

Credentials (TCP and HTTP; UDP carries none, the collector takes it by source address): a token
(``token=`` or ``SLUICE_TOKEN``) goes in ``Authorization: Bearer …`` on HTTP and in the first
line of each TCP connection (``auth <token>``, answered ``ok auth <name>``). TLS trusts ``ca=`` (a
PEM file, or ``SLUICE_CA``), or uses ``ssl_context=`` as given. See :mod:`sluice._net`.

Acknowledged transports retry a failed batch (connection refused or lost, timeout, 5xx, the
collector ``unavailable``) with jittered exponential backoff (``backoff`` 0.1 s doubling to
``max_backoff`` 5 s) for ``retry_budget`` seconds of failure (default 120: a server restart or a
minute's outage loses nothing); then its events count as ``undelivered``, ``on_error`` is told,
and they are reported to the server as dropped ``retry_budget`` (below). Events the collector refuses (bad tags, too big) count as
``rejected``; they are not retried. A batch refused for its credentials (HTTP 401 or 403, a TCP
``auth`` line not answered ``ok auth``, ``error unauthorized`` or ``error forbidden``) counts as
``unauthorized`` and is not retried either (503, the collector being unavailable, is retried).
A batch whose acknowledgement was lost (a timeout after the collector stored it) is sent again:
delivery is at least once.

Disk buffer (``buffer_dir=``, ``buffer_max_bytes=``, default 256 MiB; :mod:`sluice._buffer`): the
sender moves queued events to append-only NDJSON segment files before sending them and moves a
cursor once they are acknowledged. Nothing is dropped for time then: a batch is retried until it
is delivered, while new events keep going to disk up to the cap (beyond it: ``buffer_full``). What
the buffer holds when the process stops (close during an outage, a crash, SIGKILL) is sent first
by the next emitter on the same directory. One process per directory (a lock); a forked child
does not share it (it uses its memory queue and the retry budget).

Drops are reported (``report_drops=True``; :mod:`sluice._drops`): every event the emitter gives
up on is recorded by (epoch, dc, type, subtype, reason) — ``retry_budget``, ``queue_full``,
``buffer_full``, ``too_large`` (over a datagram or ``max_payload``), ``rejected`` (a whole payload
refused with a 4xx) — and sent to ``POST /v1/drops`` once the server answers again (batched,
merged, at most ``max_drop_records`` pending records), so ``sluice counts`` shows them as dropped
``client:<reason>``. With ``http=`` they go to the same server; with ``tcp=``/``udp=`` to
``drops_url=`` (an ``http(s)://`` base URL) when given. Events the collector drops itself (``ok``
with a dropped count) are in its counts already and are not reported again.

Fork safety: after ``os.fork()`` the child gets an empty queue and starts its own sender thread
(lazily, at its first ``emit``); what the parent had queued is sent by the parent only. Pre-fork
servers can create the emitter before forking.
"""

from __future__ import annotations

import collections
import http.client
import json
import logging
import os
import random
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple, Union

from . import _native
from ._buffer import DiskBuffer, decode_line, encode_line
from ._drops import DropLedger
from ._net import AuthRefused, bearer, make_ssl_context, resolve_token, tcp_connect

__all__ = ["Emitter"]

log = logging.getLogger("sluice.emitter")

_Item = Tuple[str, str, Any, Any]

# Every live emitter, to reset after fork (a WeakSet: an emitter that is dropped is forgotten).
_EMITTERS: "weakref.WeakSet[Emitter]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for e in list(_EMITTERS):
        e._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# Events packed per call for UDP (see `_send_batch`).
_UDP_SLICE = 256
# Queue-full drops remembered by key between two sender wakes (more are counted only).
_MAX_EMIT_DROPS = 10_000


class _Retryable(Exception):
    """A batch failed in a way that resending may fix."""


def _host_port(addr: str, what: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{what}: expected host:port, got {addr!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class Emitter:
    """Sends events to a Sluice collector without ever blocking or failing the caller.

    Exactly one of ``udp``, ``tcp`` or ``http`` must be given. Use it as a context manager, or
    call :meth:`close` (an ``atexit`` hook flushes what is left, for up to ``close_timeout``
    seconds, when the interpreter exits).

    Args:
        udp: ``"host:port"`` of the collector's UDP listener (``sluice serve``: 8182).
        tcp: ``"host:port"`` of its TCP listener (8181).
        http: base URL of its HTTP API (``"http://127.0.0.1:8180"``; ``"https://…"`` for TLS).
        token: the token for TCP and HTTP (a ``sluice token create --scope ingest`` secret);
            ``None`` takes ``SLUICE_TOKEN`` from the environment, ``""`` sends none. Not for UDP.
        tls: wrap the TCP connection in TLS (HTTP follows its URL's scheme); ``tcp="tls://host:port"``,
            as the CLI spells it, is the same.
        ca: PEM file of the CA (or the self-signed certificate) to trust for TLS; ``None`` takes
            ``SLUICE_CA``, and without either the system's CAs are trusted.
        ssl_context: an :class:`ssl.SSLContext` to use for TLS instead (client certificates,
            pinning); not with ``ca``.
        dc: the data centre to tag events with; ``None`` lets the collector use its own.
        max_queue: events held while waiting to be sent; more are dropped (and counted).
        batch_size: events that wake the sender at once (it also wakes every ``flush_interval``).
        flush_interval: most seconds an event waits in the queue before it is sent.
        max_datagram: largest UDP datagram, in bytes (events are packed up to it).
        max_payload: largest TCP frame / HTTP body, in bytes.
        compress: compress payloads (``"zstd"``, ``"zlib"``, ``"snappy"``) or not (``None``).
        timeout: seconds for every network operation (connect, send, acknowledgement).
        retry_budget: seconds a failing batch is retried on TCP/HTTP before it counts as
            undelivered (dropped ``retry_budget``); not with a disk buffer (it keeps trying).
        retries: also give up after this many resends (``None``: the budget alone decides).
        backoff: first wait before a resend, doubled each time up to ``max_backoff``; each wait
            is jittered (between half and all of it) so that emitters do not resend in step.
        buffer_dir: a directory for the disk buffer (see above); ``None``: memory only.
        buffer_max_bytes: cap on the bytes the disk buffer holds undelivered.
        report_drops: report dropped events to the server (``POST /v1/drops``).
        drops_url: where to report them for ``tcp=``/``udp=`` (``"http://127.0.0.1:8180"``);
            ``http=`` reports to its own URL.
        max_drop_records: most drop records (keys) held waiting for the server.
        on_error: called on the sender thread as ``on_error(message, events)`` when events are
            lost (undelivered, rejected, dropped as invalid or oversized); by default a warning
            is logged on the ``sluice.emitter`` logger.
        close_timeout: seconds the exit hook waits for the queue to drain.

    Raises:
        ValueError: bad arguments (only at construction; :meth:`emit` never raises).
    """

    def __init__(
        self,
        *,
        udp: Optional[str] = None,
        tcp: Optional[str] = None,
        http: Optional[str] = None,
        dc: Optional[str] = None,
        max_queue: int = 100_000,
        batch_size: int = 1000,
        flush_interval: float = 0.2,
        max_datagram: int = 8192,
        max_payload: int = 4 << 20,
        compress: Optional[str] = None,
        timeout: float = 5.0,
        retries: Optional[int] = None,
        retry_budget: float = 120.0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        on_error: Optional[Callable[[str, int], None]] = None,
        close_timeout: float = 2.0,
        token: Optional[str] = None,
        tls: bool = False,
        ca: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        buffer_dir: Optional[str] = None,
        buffer_max_bytes: int = 256 << 20,
        report_drops: bool = True,
        drops_url: Optional[str] = None,
        max_drop_records: int = 10_000,
    ) -> None:
        given = [(k, v) for k, v in (("udp", udp), ("tcp", tcp), ("http", http)) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of udp=, tcp= or http=")
        self.transport, target = given[0]
        if self.transport == "http":
            u = urllib.parse.urlsplit(target)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"http: expected a URL like http://127.0.0.1:8180, got {target!r}")
            self._url = u
            self._path = (u.path.rstrip("/") or "") + "/v1/events"
            self._addr: Tuple[str, int] = (u.hostname, u.port or (443 if u.scheme == "https" else 80))
        elif self.transport == "tcp" and target.startswith("tls://"):
            # The CLI's spelling (`sluice emit --tcp tls://host:port`): the same as tls=True.
            self._addr = _host_port(target[len("tls://"):], self.transport)
            tls = True
        else:
            self._addr = _host_port(target, self.transport)
        # Credentials and TLS: checked and built here, so the sender thread never meets a bad one.
        self._token: Optional[str] = None
        self._ssl: Optional[ssl.SSLContext] = None
        if self.transport == "udp":
            if token or tls or ca or ssl_context is not None:
                raise ValueError(
                    "udp: no token or TLS (UDP carries no credentials; the collector takes it by "
                    "source address, udp_allow): use tcp= or http= for those"
                )
        else:
            self._token = resolve_token(token)
            if self.transport == "http":
                if tls:
                    raise ValueError("http: TLS follows the URL: use https://")
                use_tls = self._url.scheme == "https"
                if not use_tls and (ca or ssl_context is not None):
                    raise ValueError("http: ca= and ssl_context= need an https:// URL")
            else:
                use_tls = bool(tls)
                if not use_tls and (ca or ssl_context is not None):
                    raise ValueError("tcp: ca= and ssl_context= need tls=True")
            if use_tls:
                self._ssl = make_ssl_context(ca, ssl_context)
        if max_queue < 1 or batch_size < 1:
            raise ValueError("max_queue and batch_size must be at least 1")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if retry_budget < 0 or backoff < 0 or max_backoff < 0 or (retries is not None and retries < 0):
            raise ValueError("retry_budget, retries, backoff and max_backoff must not be negative")
        if buffer_max_bytes < 1 or max_drop_records < 1:
            raise ValueError("buffer_max_bytes and max_drop_records must be at least 1")
        # Where drops are reported: the HTTP target itself, or drops_url for TCP and UDP.
        self._drops_url: Optional[urllib.parse.SplitResult] = None
        self._drops_ssl: Optional[ssl.SSLContext] = None
        if drops_url is not None:
            d = urllib.parse.urlsplit(drops_url)
            if d.scheme not in ("http", "https") or not d.hostname:
                raise ValueError(f"drops_url: expected a URL like http://127.0.0.1:8180, got {drops_url!r}")
            self._drops_url = d
        elif self.transport == "http":
            self._drops_url = self._url
        if not report_drops:
            self._drops_url = None
        if self._drops_url is not None and self._drops_url.scheme == "https":
            self._drops_ssl = self._ssl or make_ssl_context(ca, ssl_context)
        self._drops_token = self._token if self.transport != "udp" else resolve_token(None)
        if compress not in (None, "zstd", "zlib", "snappy"):
            raise ValueError(f"compress must be None, 'zstd', 'zlib' or 'snappy', not {compress!r}")
        if dc is not None and (not dc or len(dc.encode()) > 64 or any(c in dc for c in ":|")):
            raise ValueError(f"bad dc {dc!r}: 1-64 bytes, no ':' or '|'")
        # A dry run of the encoder options: bad ones fail here, not silently on the sender thread.
        _native.pack_events([], dc, max_bytes=None, compress=compress)
        self.target = target
        self.dc = dc
        self._max_queue = max_queue
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_datagram = max_datagram
        self._max_payload = max_payload
        self._compress = compress
        self._timeout = timeout
        self._retries = retries
        self._retry_budget = retry_budget
        self._max_drop_records = max_drop_records
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._on_error = on_error
        self.close_timeout = close_timeout
        self._closed = False
        # Opened last: a bad argument above must not leave the directory locked.
        self._buffer: Optional[DiskBuffer] = DiskBuffer(buffer_dir, buffer_max_bytes) if buffer_dir else None
        self._init_state()
        _EMITTERS.add(self)
        if self._buffer is not None and self._buffer.has_pending():
            self._start()  # what an earlier process left is sent first, without waiting for an emit
        _register_atexit()

    # ---- state that a forked child must not share -------------------------------------------
    def _init_state(self) -> None:
        self._pid = os.getpid()
        self._queue: Deque[_Item] = collections.deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition(threading.Lock())
        self._busy = 0  # events taken off the queue and not yet sent (or given up on)
        self._thread: Optional[threading.Thread] = None
        self._start_lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._reader: Any = None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._deadline: Optional[float] = None
        self._ledger = DropLedger(self._max_drop_records)
        self._emit_drops: Deque[Tuple[str, str, Any]] = collections.deque()
        self._server_up = True  # the last send was answered (drop reports wait for it)
        self._stats: Dict[str, int] = dict.fromkeys(
            (
                "emitted", "sent", "dropped_queue_full", "dropped_closed", "dropped_error", "invalid",
                "oversized", "rejected", "unauthorized", "undelivered", "payloads", "send_errors",
                "retries", "dropped_buffer_full", "buffer_errors",
            ),
            0,
        )

    def _reset_after_fork(self) -> None:
        # The parent's sender thread does not exist here, and its locks may have been held at
        # the fork: start over with fresh ones. The inherited sockets are copies of the parent's
        # connections: closing our copies leaves the parent's open (no shutdown is sent), and the
        # child connects anew when it first sends.
        try:
            self._disconnect()
        except Exception:
            pass
        closed = self._closed
        if self._buffer is not None:
            # The directory stays the parent's: the child keeps to its memory queue.
            self._buffer.abandon()
            self._buffer = None
        self._init_state()
        self._closed = closed

    # ---- the hot path ------------------------------------------------------------------------
    def emit(
        self, type: str, event: Mapping[str, Any], *, subtype: str = "", epoch: Union[int, float, str, None] = None
    ) -> None:
        """Queue ``event`` (a dict) of ``type`` (and ``subtype``) to be sent; return at once.

        ``epoch`` is the event's second (Unix time); by default, now, as whole seconds. Any
        other form the collector reads goes as given: milliseconds (values >= 1e11), float
        seconds, an RFC 3339 string; it stores whole seconds. The event gets the tags
        ``epoch``, ``dc``, ``type`` and ``subtype`` (replacing keys of those names). It is encoded
        later, on the sender thread: do not change it after emitting it. Never blocks and never
        raises; an event that cannot be queued (queue full, emitter closed) or encoded (not a
        dict, an unsupported value, bad type) is dropped and counted in :meth:`stats`.
        """
        try:
            q = self._queue
            if len(q) >= self._max_queue:
                self._stats["dropped_queue_full"] += 1
                if len(self._emit_drops) < _MAX_EMIT_DROPS:
                    self._emit_drops.append((type, subtype, int(time.time()) if epoch is None else epoch))
                return
            if self._closed:
                self._stats["dropped_closed"] += 1
                return
            q.append((type, subtype, int(time.time()) if epoch is None else epoch, event))
            if self._thread is None:
                self._start()
            elif len(q) >= self._batch_size and not self._wake.is_set():
                self._wake.set()
        except Exception:  # never into the caller: count it
            self._stats["dropped_error"] += 1

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            t = threading.Thread(target=self._run, name=f"sluice-emitter-{self.transport}", daemon=True)
            t.start()
            self._thread = t

    # ---- public control ----------------------------------------------------------------------
    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until every event queued so far has been sent (or given up on; with a disk
        buffer: until the buffer is empty too). Returns False if ``timeout`` seconds passed
        first."""
        if self._thread is None:
            return not self._queue and not self._buffered()
        end = None if timeout is None else time.monotonic() + timeout
        self._wake.set()
        with self._idle:
            while self._queue or self._busy or self._buffered():
                self._wake.set()
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(0.05 if left is None else min(left, 0.05))
        return True

    def close(self, timeout: Optional[float] = None) -> bool:
        """Send what is queued (waiting at most ``timeout`` seconds, default ``close_timeout``),
        stop the sender thread and close the connection. Later :meth:`emit` calls are dropped
        (counted as ``dropped_closed``). Returns False if events were left unsent (with a disk
        buffer they stay there, for the next emitter on the directory)."""
        if timeout is None:
            timeout = self.close_timeout
        self._closed = True
        self._deadline = time.monotonic() + timeout
        ok = self.flush(timeout)
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(max(0.0, self._deadline - time.monotonic()) + 0.1)
        sender_done = t is None or not t.is_alive()
        if self._buffer is not None and sender_done:
            self._intake()  # what is still queued goes to disk, not lost
            try:
                self._buffer.close()
            except OSError as e:
                self._report(f"disk buffer: {e}", 0)
        if sender_done:
            self._drain_emit_drops()
            if self._drops_url is not None and self._server_up and self._ledger.pending():
                self._ledger.report(self._post_drops, force=True)
        if not ok:
            left = len(self._queue)
            self._queue.clear()
            if left:
                self._stats["undelivered"] += left
                self._report(f"closed with {left} event(s) not sent", left)
        self._disconnect()
        return ok

    def stats(self) -> Dict[str, int]:
        """Counters since construction (or since the fork, in a child): ``emitted`` (taken by
        the sender), ``sent`` (delivered; acknowledged on TCP/HTTP), ``queued`` (waiting now),
        ``dropped_queue_full``, ``dropped_closed``, ``dropped_error`` (``emit`` itself failed,
        e.g. a bad ``epoch``), ``invalid`` (not encodable, bad tags),
        ``oversized`` (larger than a datagram/payload alone), ``rejected`` (refused by the
        collector), ``unauthorized`` (refused for the credentials: HTTP 401/403, TCP ``auth``
        refused, ``error unauthorized|forbidden``; not retried), ``undelivered`` (given up after
        the retry budget, or lost at close), ``payloads`` (datagrams/frames/requests sent),
        ``send_errors``, ``retries``; with a disk buffer ``dropped_buffer_full`` (over its cap),
        ``buffer_errors`` (a write failed) and ``buffered_bytes`` (waiting on disk); drop
        reports: ``drops_pending`` (dropped events not yet reported), ``drops_reported`` (accepted
        by the server), ``drops_unreported`` (not recordable, or refused by the server)."""
        s = dict(self._stats)
        s["queued"] = len(self._queue)
        s["buffered_bytes"] = self._buffer.pending_bytes if self._buffer is not None else 0
        s["drops_pending"] = self._ledger.pending()
        s["drops_reported"] = self._ledger.reported
        s["drops_unreported"] = self._ledger.unrecorded
        return s

    def __enter__(self) -> "Emitter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        tls = ", tls=True" if self._ssl is not None and self.transport == "tcp" else ""
        return f"Emitter({self.transport}={self.target!r}, dc={self.dc!r}{tls})"

    # ---- the sender thread -------------------------------------------------------------------
    def _run(self) -> None:
        q = self._queue
        at_once = self._buffered()  # what an earlier process left is sent without waiting
        while True:
            if not at_once:
                self._wake.wait(self._flush_interval)
            at_once = False
            self._wake.clear()
            if self._buffer is not None:
                try:
                    self._run_buffered()
                except Exception as e:  # a bug must not kill the thread: the data stays on disk
                    self._report(f"internal error sending from the disk buffer: {e!r}", 0)
                    self._stop.wait(self._flush_interval)
            while q and self._buffer is None:
                n = min(len(q), self._batch_size)
                batch: List[_Item] = []
                # `_busy` is raised before events leave the queue, so `flush` never sees both
                # empty while a batch is in flight.
                self._busy += n
                try:
                    for _ in range(n):
                        batch.append(q.popleft())
                except IndexError:  # cleared by close() meanwhile
                    pass
                try:
                    self._stats["emitted"] += len(batch)
                    self._send_batch(batch, keep=False)
                except Exception as e:  # a bug must not kill the thread: count and go on
                    self._stats["undelivered"] += len(batch)
                    self._report(f"internal error sending a batch: {e!r}", len(batch))
                finally:
                    with self._idle:
                        self._busy -= n
                        self._idle.notify_all()
            try:
                self._drain_emit_drops()
                self._maybe_report_drops()
            except Exception as e:
                self._report(f"internal error reporting drops: {e!r}", 0)
            with self._idle:
                self._idle.notify_all()
            if self._stop.is_set():
                return

    def _buffered(self) -> bool:
        return self._buffer is not None and self._buffer.has_pending()

    def _run_buffered(self) -> None:
        """Queue → disk, then disk → collector, batch by batch, until both are empty or the
        emitter closes (what is not delivered then stays on disk)."""
        buf = self._buffer
        assert buf is not None
        while True:
            self._intake()
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return
            got = buf.read(self._batch_size, max(1, self._max_payload // 2))
            if got is None:
                if not self._queue:
                    return
                continue
            lines, end = got
            items: List[_Item] = []
            for line in lines:
                try:
                    items.append(decode_line(line))
                except Exception as e:
                    self._stats["invalid"] += 1
                    self._report(f"disk buffer: a damaged line dropped: {e}", 1)
            if items and not self._send_batch(items, keep=True):
                return  # closing: the batch stays on disk
            buf.commit(end)
            with self._idle:
                self._idle.notify_all()

    def _intake(self) -> None:
        """Moves the memory queue to the disk buffer (beyond its cap: ``buffer_full``)."""
        buf = self._buffer
        if buf is None:
            return
        q = self._queue
        while q:
            n = min(len(q), self._batch_size)
            self._busy += n
            try:
                items: List[_Item] = []
                try:
                    for _ in range(n):
                        items.append(q.popleft())
                except IndexError:
                    pass
                self._stats["emitted"] += len(items)
                lines: List[bytes] = []
                size = 0
                full: List[_Item] = []
                for it in items:
                    try:
                        line = encode_line(it)
                    except Exception as e:
                        self._stats["invalid"] += 1
                        self._report(f"dropped 1 event(s): {e}", 1)
                        continue
                    if not buf.fits(size + len(line) + 1):
                        full.append(it)
                        continue
                    lines.append(line)
                    size += len(line) + 1
                try:
                    buf.append(lines)
                except OSError as e:
                    self._stats["buffer_errors"] += 1
                    full.extend(decode_line(line) for line in lines)
                    self._report(f"disk buffer write failed: {e}", 0)
                if full:
                    self._stats["dropped_buffer_full"] += len(full)
                    if self._drops_url is not None:
                        self._ledger.add_items(full, self.dc, "buffer_full")
                    self._report(f"disk buffer full: {len(full)} event(s) dropped", len(full))
            finally:
                with self._idle:
                    self._busy -= n
                    self._idle.notify_all()

    def _drain_emit_drops(self) -> None:
        d = self._emit_drops
        if self._drops_url is None:  # not reported: counted in stats() only
            d.clear()
            return
        while d:
            try:
                t, s, e = d.popleft()
            except IndexError:
                break
            self._ledger.add(e, self.dc, t, s, "queue_full")

    def _maybe_report_drops(self) -> None:
        # Only once the server answers (a report during an outage would only fail).
        if self._drops_url is not None and self._server_up and self._ledger.due():
            self._ledger.report(self._post_drops)

    def _post_drops(self, body: bytes) -> Tuple[int, bytes]:
        u = self._drops_url
        assert u is not None
        port = u.port or (443 if u.scheme == "https" else 80)
        conn: http.client.HTTPConnection
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname, port, timeout=self._timeout, context=self._drops_ssl)
        else:
            conn = http.client.HTTPConnection(u.hostname, port, timeout=self._timeout)
        try:
            headers = {"Content-Type": "application/json", **bearer(self._drops_token)}
            conn.request("POST", (u.path.rstrip("/") or "") + "/v1/drops", body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _report(self, message: str, events: int) -> None:
        try:
            if self._on_error is not None:
                self._on_error(message, events)
            else:
                log.warning("sluice emitter %s=%s: %s", self.transport, self.target, message)
        except Exception:
            pass

    def _send_batch(self, batch: List[_Item], keep: bool) -> bool:
        """Sends a batch; False if the emitter closed while a ``keep`` batch (from the disk
        buffer) was still failing, so that it stays on disk."""
        if self.transport == "udp":
            # Packing converts events with the GIL held: in slices, the calling threads get the
            # GIL back between them (a datagram per slice may be left part-full: no matter).
            for i in range(0, len(batch), _UDP_SLICE):
                packed = self._pack(batch[i : i + _UDP_SLICE], self._max_datagram)
                self._send_udp(packed.payloads, packed.events)
            return True
        # One request / frame per payload; acknowledgements say how many were accepted.
        for payload in self._pack(batch, self._max_payload).payloads:
            if not self._send_acked(payload, keep):
                return False
        return True

    def _pack(self, items: List[_Item], max_bytes: int) -> Any:
        packed = _native.pack_events(items, self.dc, max_bytes=max_bytes, compress=self._compress)
        lost = packed.invalid + packed.oversized
        if lost:
            self._stats["invalid"] += packed.invalid
            self._stats["oversized"] += packed.oversized
            if packed.oversized and self._drops_url is not None:
                # Which ones: each alone (a rare path), for their keys.
                for it in items:
                    try:
                        alone = _native.pack_events([it], self.dc, max_bytes=max_bytes, compress=self._compress)
                    except Exception:
                        continue
                    if alone.oversized:
                        self._ledger.add(it[2], self.dc, it[0], it[1], "too_large")
            self._report(f"dropped {lost} event(s): {packed.first_error}", lost)
        return packed

    def _send_udp(self, payloads: List[bytes], events: int) -> None:
        failed = 0
        for p in payloads:
            try:
                if self._sock is None:
                    # Resolved once per socket, not per datagram (a host name would otherwise
                    # cost a lookup for every send).
                    fam, _, _, _, sockaddr = socket.getaddrinfo(*self._addr, type=socket.SOCK_DGRAM)[0]
                    self._sock = socket.socket(fam, socket.SOCK_DGRAM)
                    self._sock.settimeout(self._timeout)
                    self._sockaddr = sockaddr
                self._sock.sendto(p, self._sockaddr)
                self._stats["payloads"] += 1
            except OSError as e:
                failed += 1
                self._stats["send_errors"] += 1
                if failed == 1:
                    self._report(f"UDP send failed: {e}", 0)
                self._disconnect()
        if failed:
            # Datagrams carry unequal numbers of events: count them in proportion.
            lost = round(events * failed / max(1, len(payloads)))
            self._stats["undelivered"] += lost
            self._stats["sent"] += events - lost
        else:
            self._stats["sent"] += events

    def _dropped_payload(self, payload: bytes, reason: str) -> int:
        """Records a payload's events as dropped for ``reason``; returns how many it held."""
        if self._drops_url is not None:
            return self._ledger.add_payload(payload, self.dc, reason)
        return _count_events(payload)

    def _send_acked(self, payload: bytes, keep: bool) -> bool:
        """Sends one payload until it is acknowledged, refused, or out of budget (then dropped
        as ``retry_budget``). ``keep`` (from the disk buffer): no budget, and False when the
        emitter closes first (the payload stays on disk)."""
        delay = self._backoff
        attempt = 0
        first_failure: Optional[float] = None
        while True:
            try:
                accepted, refused = self._send_once(payload)
                self._server_up = True
                self._stats["payloads"] += 1
                self._stats["sent"] += accepted
                if refused:
                    self._stats["rejected"] += refused
                    self._report(f"the collector refused {refused} event(s)", refused)
                if attempt:
                    self._maybe_report_drops()  # the server is back: what was dropped meanwhile
                return True
            except AuthRefused as e:
                # Permanent: the same credentials get the same answer. Counted, never resent
                # (nor reported: the report would carry the same credentials).
                self._disconnect()
                n = _count_events(payload)
                self._stats["unauthorized"] += n
                self._report(f"{e}; {n} event(s) not sent (check the token: token= or SLUICE_TOKEN)", n)
                return True
            except _Retryable as e:
                self._server_up = False
                self._stats["send_errors"] += 1
                self._disconnect()
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                wait = delay * (0.5 + random.random() / 2)
                closing = self._deadline is not None and now + wait > self._deadline
                if closing and keep:
                    return False
                over_budget = not keep and now + wait - first_failure > self._retry_budget
                over_retries = not keep and self._retries is not None and attempt >= self._retries
                if closing or over_budget or over_retries:
                    n = self._dropped_payload(payload, "retry_budget")
                    self._stats["undelivered"] += n
                    self._report(f"gave up after {attempt + 1} attempt(s) in {now - first_failure:.1f} s: {e}", n)
                    return True
                attempt += 1
                self._stats["retries"] += 1
                self._backoff_wait(wait)
                delay = min(delay * 2, self._max_backoff)

    def _backoff_wait(self, wait: float) -> None:
        # Interruptible by close(): a closing emitter stops waiting. With a disk buffer, new
        # events keep moving to disk meanwhile (the memory queue must not fill in an outage).
        end = time.monotonic() + wait
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, self._flush_interval) if self._buffer is not None else left)
            if self._buffer is not None:
                self._intake()
            self._drain_emit_drops()

    def _send_once(self, payload: bytes) -> Tuple[int, int]:
        if self.transport == "tcp":
            return self._send_tcp(payload)
        return self._send_http(payload)

    def _send_tcp(self, payload: bytes) -> Tuple[int, int]:
        try:
            if self._sock is None:
                self._sock, self._reader = tcp_connect(
                    self._addr, self._timeout, token=self._token, context=self._ssl, what=self.target
                )
            self._sock.sendall(b"S" + len(payload).to_bytes(4, "big") + payload)
            line = self._reader.readline(4096)
        except OSError as e:
            raise _Retryable(f"TCP {self.target}: {e}") from None
        if not line.endswith(b"\n"):
            raise _Retryable(f"TCP {self.target}: connection closed before the acknowledgement")
        parts = line.decode("ascii", "replace").split()
        if parts[:1] == ["ok"] and len(parts) >= 3:
            return int(parts[1]), int(parts[2])
        if parts[:2] == ["error", "unavailable"]:
            raise _Retryable(f"TCP {self.target}: collector unavailable")
        if parts[:2] in (["error", "unauthorized"], ["error", "forbidden"]):
            # As HTTP 401 / 403: the token is refused, or does not reach these events.
            raise AuthRefused(f"TCP {self.target}: {line.decode('utf-8', 'replace').strip()}")
        # Any other error: the collector refused the payload; resending would not help.
        self._report(f"TCP {self.target}: {line.decode('ascii', 'replace').strip()}", 0)
        return 0, self._dropped_payload(payload, "rejected")

    def _send_http(self, payload: bytes) -> Tuple[int, int]:
        try:
            if self._conn is None:
                if self._ssl is not None:
                    self._conn = http.client.HTTPSConnection(
                        self._addr[0], self._addr[1], timeout=self._timeout, context=self._ssl
                    )
                else:
                    self._conn = http.client.HTTPConnection(self._addr[0], self._addr[1], timeout=self._timeout)
            headers = {"Content-Type": "application/x-sereal", **bearer(self._token)}
            self._conn.request("POST", self._path, body=payload, headers=headers)
            resp = self._conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise _Retryable(f"HTTP {self.target}: {e!r}") from None
        if resp.status >= 500 or resp.status in (408, 429):
            raise _Retryable(f"HTTP {self.target}: {resp.status} {body[:200]!r}")
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if resp.status in (401, 403):
            why = answer.get("error") or body[:200].decode("utf-8", "replace")
            raise AuthRefused(f"HTTP {self.target}: {resp.status} {why}")
        if resp.status == 200:
            return int(answer.get("accepted", 0)), int(answer.get("dropped_total", 0))
        self._report(f"HTTP {self.target}: {resp.status} {answer.get('error') or body[:200]!r}", 0)
        return 0, self._dropped_payload(payload, "rejected")

    def _disconnect(self) -> None:
        for closer in (self._reader, self._sock, self._conn):
            try:
                if closer is not None:
                    closer.close()
            except Exception:
                pass
        self._reader = self._sock = self._conn = None


def _count_events(payload: bytes) -> int:
    try:
        body = _native.loads(payload)
        return len(body) if isinstance(body, list) else 1
    except Exception:
        return 0


_atexit_registered = False


def _register_atexit() -> None:
    global _atexit_registered
    if _atexit_registered:
        return
    _atexit_registered = True
    import atexit

    def _close_all() -> None:
        for e in list(_EMITTERS):
            if not e._closed and e._pid == os.getpid():
                try:
                    e.close()
                except Exception:
                    pass

    atexit.register(_close_all)
