"""A standard library :class:`logging.Handler` that sends log records as Sluice events.

>>> import logging, sluice
>>> handler = sluice.LoggingHandler(udp="127.0.0.1:8182", type="LOG")   # doctest: +SKIP
>>> logging.getLogger().addHandler(handler)                             # doctest: +SKIP
>>> secure = sluice.LoggingHandler(http="https://logs.example:8180", token="sluice_…", ca="ca.pem")  # doctest: +SKIP
>>> logging.getLogger("app").warning("disk %s is %d%% full", "/var", 93, extra={"host": "web1"})

Each record becomes one event (the record's second as its ``epoch``)::

    {"message": "disk /var is 93% full", "level": "WARNING", "levelno": 30, "logger": "app",
     "time": 1764000000.123, "module": "...", "func": "...", "line": 12, "file": "...",
     "process": 4242, "thread": "MainThread", "host": "web1",
     "exc": "Traceback ...",  # when the record has exc_info
     "stack": "..."}          # when it has stack_info

``extra`` fields are added as they are when Sereal can carry them (str, numbers, bool, None,
bytes, and dicts/lists/tuples of those); anything else is added as its ``repr``. Handling a
record never blocks (the emitter queues it) and never raises. Records of the ``sluice`` loggers
themselves are skipped, so an emitter's own warnings cannot loop back into it.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional, Union

from .emitter import Emitter

__all__ = ["LoggingHandler"]

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 1, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}

_PLAIN = (str, int, float, bool, type(None), bytes)

Tag = Union[str, Callable[[logging.LogRecord], str]]


def _plain(v: Any, depth: int = 0) -> Any:
    """``v`` if Sereal can carry it, else its repr (so one odd ``extra`` cannot lose a record)."""
    if isinstance(v, _PLAIN):
        return v
    if depth < 8:
        if isinstance(v, dict):
            return {k if isinstance(k, (str, bytes)) else str(k): _plain(x, depth + 1) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [_plain(x, depth + 1) for x in v]
    return repr(v)


class LoggingHandler(logging.Handler):
    """Sends each log record as an event.

    Args:
        emitter: an :class:`~sluice.Emitter` to send with; when omitted, one is made from
            ``emitter_options`` (e.g. ``udp="127.0.0.1:8182"``) and closed with the handler.
        type: the events' type (default ``"LOG"``), or a function of the record.
        subtype: the events' subtype (default empty), or a function of the record, e.g.
            ``lambda r: r.levelname``.
        level: the handler's level.
        **emitter_options: passed to :class:`~sluice.Emitter` when ``emitter`` is not given,
            credentials and TLS included (``tcp="…", tls=True, token=…, ca=…`` or
            ``http="https://…", token=…``; the token defaults to ``SLUICE_TOKEN``).
    """

    def __init__(
        self,
        emitter: Optional[Emitter] = None,
        *,
        type: Tag = "LOG",
        subtype: Tag = "",
        level: int = logging.NOTSET,
        **emitter_options: Any,
    ) -> None:
        super().__init__(level)
        if emitter is not None and emitter_options:
            raise ValueError("give either emitter= or emitter options, not both")
        self._owns = emitter is None
        self.emitter = emitter if emitter is not None else Emitter(**emitter_options)
        self.type = type
        self.subtype = subtype

    def event(self, record: logging.LogRecord) -> Dict[str, Any]:
        """The event for ``record`` (override to change its shape)."""
        ev: Dict[str, Any] = {
            "message": record.getMessage(),
            "level": record.levelname,
            "levelno": record.levelno,
            "logger": record.name,
            "time": record.created,
            "module": record.module,
            "func": record.funcName,
            "line": record.lineno,
            "file": record.pathname,
            "process": record.process,
            "thread": record.threadName,
        }
        if record.exc_info:
            ev["exc"] = self.formatter.formatException(record.exc_info) if self.formatter else logging.Formatter().formatException(record.exc_info)
        elif record.exc_text:
            ev["exc"] = record.exc_text
        if record.stack_info:
            ev["stack"] = record.stack_info
        for k, v in vars(record).items():
            if k not in _STANDARD and k not in ev:
                ev[k] = _plain(v)
        return ev

    def emit(self, record: logging.LogRecord) -> None:
        """Queue ``record`` as an event (never blocks)."""
        name = record.name
        if name == "sluice" or name.startswith("sluice."):
            return
        try:
            t = self.type(record) if callable(self.type) else self.type
            s = self.subtype(record) if callable(self.subtype) else self.subtype
            self.emitter.emit(t, self.event(record), subtype=s, epoch=int(record.created))
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        """Wait (up to the emitter's ``close_timeout``) until the queued records are sent."""
        self.emitter.flush(self.emitter.close_timeout)

    def close(self) -> None:
        """Close the handler (and the emitter, if the handler made it)."""
        try:
            if self._owns:
                self.emitter.close()
        finally:
            super().close()
