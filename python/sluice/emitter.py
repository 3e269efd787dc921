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
collector ``unavailable``) with exponential backoff, ``retries`` times; then its events count as
``undelivered`` and ``on_error`` is told. Events the collector refuses (bad tags, too big) count as
``rejected``; they are not retried. A batch refused for its credentials (HTTP 401 or 403, a TCP
``auth`` line not answered ``ok auth``, ``error unauthorized`` or ``error forbidden``) counts as
``unauthorized`` and is not retried either (503, the collector being unavailable, is retried).
A batch whose acknowledgement was lost (a timeout after the collector stored it) is sent again:
delivery is at least once.

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
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from . import _native
from ._net import AuthRefused, bearer, make_ssl_context, resolve_token, tcp_connect

__all__ = ["Emitter"]

log = logging.getLogger("sluice.emitter")

_Item = Tuple[str, str, int, Any]

# Every live emitter, to reset after fork (a WeakSet: an emitter that is dropped is forgotten).
_EMITTERS: "weakref.WeakSet[Emitter]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for e in list(_EMITTERS):
        e._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# Events packed per call for UDP (see `_send_batch`).
_UDP_SLICE = 256


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
        retries: resends of a failed batch on TCP/HTTP before it counts as undelivered.
        backoff: first wait before a resend, doubled each time up to ``max_backoff``.
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
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        on_error: Optional[Callable[[str, int], None]] = None,
        close_timeout: float = 2.0,
        token: Optional[str] = None,
        tls: bool = False,
        ca: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
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
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._on_error = on_error
        self.close_timeout = close_timeout
        self._closed = False
        self._init_state()
        _EMITTERS.add(self)
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
        self._stats: Dict[str, int] = dict.fromkeys(
            (
                "emitted", "sent", "dropped_queue_full", "dropped_closed", "dropped_error", "invalid",
                "oversized", "rejected", "unauthorized", "undelivered", "payloads", "send_errors",
                "retries",
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
        self._init_state()
        self._closed = closed

    # ---- the hot path ------------------------------------------------------------------------
    def emit(self, type: str, event: Mapping[str, Any], *, subtype: str = "", epoch: Optional[int] = None) -> None:
        """Queue ``event`` (a dict) of ``type`` (and ``subtype``) to be sent; return at once.

        ``epoch`` is the event's second (Unix time); by default, now. The event gets the tags
        ``epoch``, ``dc``, ``type`` and ``subtype`` (replacing keys of those names). It is encoded
        later, on the sender thread: do not change it after emitting it. Never blocks and never
        raises; an event that cannot be queued (queue full, emitter closed) or encoded (not a
        dict, an unsupported value, bad type) is dropped and counted in :meth:`stats`.
        """
        try:
            q = self._queue
            if len(q) >= self._max_queue:
                self._stats["dropped_queue_full"] += 1
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
        """Wait until every event queued so far has been sent (or given up on). Returns False
        if ``timeout`` seconds passed first."""
        if self._thread is None:
            return not self._queue
        end = None if timeout is None else time.monotonic() + timeout
        self._wake.set()
        with self._idle:
            while self._queue or self._busy:
                self._wake.set()
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(0.05 if left is None else min(left, 0.05))
        return True

    def close(self, timeout: Optional[float] = None) -> bool:
        """Send what is queued (waiting at most ``timeout`` seconds, default ``close_timeout``),
        stop the sender thread and close the connection. Later :meth:`emit` calls are dropped
        (counted as ``dropped_closed``). Returns False if events were left unsent."""
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
        retries, or lost at close), ``payloads`` (datagrams/frames/requests sent),
        ``send_errors``, ``retries``."""
        s = dict(self._stats)
        s["queued"] = len(self._queue)
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
        while True:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            while q:
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
                    self._send_batch(batch)
                except Exception as e:  # a bug must not kill the thread: count and go on
                    self._stats["undelivered"] += len(batch)
                    self._report(f"internal error sending a batch: {e!r}", len(batch))
                finally:
                    with self._idle:
                        self._busy -= n
                        self._idle.notify_all()
            with self._idle:
                self._idle.notify_all()
            if self._stop.is_set():
                return

    def _report(self, message: str, events: int) -> None:
        try:
            if self._on_error is not None:
                self._on_error(message, events)
            else:
                log.warning("sluice emitter %s=%s: %s", self.transport, self.target, message)
        except Exception:
            pass

    def _send_batch(self, batch: List[_Item]) -> None:
        self._stats["emitted"] += len(batch)
        if self.transport == "udp":
            # Packing converts events with the GIL held: in slices, the calling threads get the
            # GIL back between them (a datagram per slice may be left part-full: no matter).
            for i in range(0, len(batch), _UDP_SLICE):
                packed = self._pack(batch[i : i + _UDP_SLICE], self._max_datagram)
                self._send_udp(packed.payloads, packed.events)
        else:
            # One request / frame per payload; acknowledgements say how many were accepted.
            for payload in self._pack(batch, self._max_payload).payloads:
                self._send_acked(payload)

    def _pack(self, items: List[_Item], max_bytes: int) -> Any:
        packed = _native.pack_events(items, self.dc, max_bytes=max_bytes, compress=self._compress)
        lost = packed.invalid + packed.oversized
        if lost:
            self._stats["invalid"] += packed.invalid
            self._stats["oversized"] += packed.oversized
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

    def _send_acked(self, payload: bytes) -> None:
        delay = self._backoff
        attempt = 0
        while True:
            try:
                accepted, refused = self._send_once(payload)
                self._stats["payloads"] += 1
                self._stats["sent"] += accepted
                if refused:
                    self._stats["rejected"] += refused
                    self._report(f"the collector refused {refused} event(s)", refused)
                return
            except AuthRefused as e:
                # Permanent: the same credentials get the same answer. Counted, never resent.
                self._disconnect()
                n = _count_events(payload)
                self._stats["unauthorized"] += n
                self._report(f"{e}; {n} event(s) not sent (check the token: token= or SLUICE_TOKEN)", n)
                return
            except _Retryable as e:
                self._stats["send_errors"] += 1
                self._disconnect()
                out_of_time = self._deadline is not None and time.monotonic() + delay > self._deadline
                if attempt >= self._retries or out_of_time:
                    n = _count_events(payload)
                    self._stats["undelivered"] += n
                    self._report(f"gave up after {attempt + 1} attempt(s): {e}", n)
                    return
                attempt += 1
                self._stats["retries"] += 1
                # Interruptible by close(): a closing emitter stops waiting at its deadline.
                self._stop.wait(delay)
                delay = min(delay * 2, self._max_backoff)

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
        return 0, _count_events(payload)

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
        return 0, _count_events(payload)

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
