"""Sluice for Python: the Sereal codec, a non-blocking event emitter, a reader, a logging handler.

>>> import sluice
>>> with sluice.Emitter(udp="127.0.0.1:8182") as em:          # doctest: +SKIP
...     em.emit("WEB", {"path": "/", "status": 200, "ms": 12.5})
>>> for ev in sluice.Reader(server="http://127.0.0.1:8180").read("-5m", type="WEB"):  # doctest: +SKIP
...     print(ev["path"], ev["status"])

Modules: :mod:`sluice.sereal` (``dumps``/``loads``), :mod:`sluice.emitter` (:class:`Emitter`),
:mod:`sluice.reader` (:class:`Reader`), :mod:`sluice.reduce` (:func:`reduce`: group and aggregate
over time windows), :mod:`sluice.log` (:class:`LoggingHandler`), :mod:`sluice.alerts` (:class:`Alerts`: alert rules
of a running server). Everything is
implemented once, in the Rust crates of the Sluice workspace; this package binds them.
"""

from . import sereal
from .alerts import Alerts
from ._types import PerlObject, PerlRegexp, ReadError, SerealError, SluiceError
from .emitter import Emitter
from .log import LoggingHandler
from .reader import Events, Reader, ReadWarning, Tail
from .reduce import ReduceWarning, reduce

__version__ = "0.1.0"

__all__ = [
    "sereal",
    "Alerts",
    "Emitter",
    "Reader",
    "Events",
    "Tail",
    "ReadWarning",
    "reduce",
    "ReduceWarning",
    "LoggingHandler",
    "SluiceError",
    "SerealError",
    "ReadError",
    "PerlObject",
    "PerlRegexp",
]
