"""The worker process of the code-substream pool (``crates/pyworkers``); not a public API.

The pool starts ``python -m sluice._worker`` with its limits already set (``RLIMIT_AS``, its own
process group) and talks to it over stdin/stdout. Per request (one blob, several substreams) the
worker decodes the blob's Sereal document once with :func:`sluice.sereal.loads`, then calls each
substream's ``transform(events, ctx)`` in turn and sends each result as soon as it is ready, so a
later substream that hangs or dies costs nothing already done. The parent enforces the wall and
CPU budgets (it kills the process); this side reports exceptions, ``MemoryError`` and results
over their size budget.

Wire format (integers little endian; the Rust side is ``crates/pyworkers/src/proto.rs``)::

    request = u32 len | u32 header_len | header JSON | Sereal document
    frame   = u32 len | kind (1 byte) | body           # len counts kind + body
    R "1"           ready                 D u32         decoded, number of events
    B message       blob does not decode  M message     out of memory decoding
    S u32 job       job started           O u32 job | Sereal document (array of dicts)
    X u32 job | code (E exception, M memory, L too large: message = size) | message
    F               every job answered

``python -m sluice._worker --check FILE FUNC`` imports FILE and checks that FUNC is a callable
taking ``(events, ctx)``: exit 0, or exit 1 with one line saying why on stdout.

:func:`load` and :func:`apply` are the rules a substream runs under; a client-side fallback
that applies a transformation itself should use them so that its output is the same.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import struct
import sys
from typing import Any, Callable, Dict, List, Tuple

from . import sereal

__all__ = ["Context", "load", "apply", "describe"]

_U32 = struct.Struct("<I")


class Context:
    """What ``transform(events, ctx)`` gets as ``ctx``: the substream's name and the blob's
    ``epoch``, ``dc``, ``type``, ``subtype`` and ``chunk``."""

    __slots__ = ("name", "epoch", "dc", "type", "subtype", "chunk")

    def __init__(self, name: str, epoch: int, dc: str, type: str, subtype: str = "", chunk: int = 0):
        self.name = name
        self.epoch = epoch
        self.dc = dc
        self.type = type
        self.subtype = subtype
        self.chunk = chunk

    def __repr__(self) -> str:
        return "Context(name=%r, epoch=%r, dc=%r, type=%r, subtype=%r, chunk=%r)" % (
            self.name, self.epoch, self.dc, self.type, self.subtype, self.chunk)


# Loaded modules, by (absolute path, mtime, size): a file changed on disk is loaded again.
_modules: Dict[Tuple[str, int, int], Any] = {}


def load(file: str, func: str) -> Callable[[List[dict], Context], Any]:
    """The function ``func`` of the Python file ``file`` (imported once per process and cached)."""
    path = os.path.abspath(file)
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    module = _modules.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location("sluice_substream_%d" % len(_modules), path)
        if spec is None or spec.loader is None:
            raise ImportError("cannot import %s (not a Python file?)" % path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[key] = module
    fn = getattr(module, func, None)
    if fn is None:
        raise AttributeError("%s defines no %r" % (file, func))
    if not callable(fn):
        raise TypeError("%s: %r is a %s, not a function" % (file, func, type(fn).__name__))
    return fn


def apply(fn: Callable[[List[dict], Context], Any], events: List[dict], ctx: Context) -> List[dict]:
    """Calls ``fn(events, ctx)`` and returns its results as a list of dicts (``None`` is no
    result). ``events`` gets a list of its own; the dicts in it are shared between the
    substreams of a blob and must be treated as read-only."""
    out = fn(list(events), ctx)
    if out is None:
        return []
    if isinstance(out, (dict, str, bytes)):
        raise TypeError("transform returned a %s; return an iterable of dicts" % type(out).__name__)
    results = []
    for n, item in enumerate(out):
        if not isinstance(item, dict):
            raise TypeError("transform result %d is a %s, not a dict" % (n, type(item).__name__))
        results.append(item)
    return results


def describe(exc: BaseException) -> str:
    """``Type: first line of the message (file:line)``, the place being the innermost frame
    outside this module."""
    if isinstance(exc, SyntaxError) and exc.filename:  # the place is the file being compiled
        text = [exc.msg or ""]
        where = "%s:%s" % (os.path.basename(exc.filename), exc.lineno)
    else:
        text = str(exc).strip().splitlines()
        where = None
        tb = exc.__traceback__
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if name != __file__ and not name.startswith("<frozen"):
                where = "%s:%d" % (os.path.basename(name), tb.tb_lineno)
            tb = tb.tb_next
    msg = "%s: %s" % (type(exc).__name__, text[0]) if text and text[0] else type(exc).__name__
    return "%s (%s)" % (msg, where) if where else msg


class _Channel:
    """The protocol streams: the original stdin/stdout, moved off fds 0 and 1 so that user code
    that prints writes to stderr and user code that reads stdin reads nothing."""

    def __init__(self) -> None:
        self.rin = open(os.dup(0), "rb", buffering=1 << 16)
        self.wout = open(os.dup(1), "wb", buffering=1 << 16)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)

    def send(self, kind: bytes, *parts: bytes) -> None:
        n = 1 + sum(len(p) for p in parts)
        self.wout.write(_U32.pack(n))
        self.wout.write(kind)
        for p in parts:
            self.wout.write(p)
        self.wout.flush()

    def read_request(self):
        head = self.rin.read(4)
        if len(head) < 4:
            return None
        (n,) = _U32.unpack(head)
        body = self.rin.read(n)
        if len(body) < n:
            return None
        (hlen,) = _U32.unpack_from(body, 0)
        header = json.loads(body[4:4 + hlen])
        return header, memoryview(body)[4 + hlen:]


def _run(chan: _Channel, header: dict, doc: memoryview) -> None:
    try:
        events = sereal.loads(doc)
        if not isinstance(events, list):
            raise TypeError("the blob's body is a %s, not an array of events" % type(events).__name__)
    except MemoryError:
        events = None
        chan.send(b"M", b"MemoryError while decoding the blob")
        return
    except Exception as e:  # a bad document: every job of this blob fails the same way
        chan.send(b"B", describe(e).encode())
        chan.send(b"F")
        return
    chan.send(b"D", _U32.pack(len(events)))
    c = header["ctx"]
    for i, job in enumerate(header["jobs"]):
        idx = _U32.pack(i)
        chan.send(b"S", idx)
        try:
            fn = load(job["file"], job["func"])
            ctx = Context(job["name"], c["epoch"], c["dc"], c["type"], c["subtype"], c["chunk"])
            out = sereal.dumps(apply(fn, events, ctx))
        except MemoryError:
            chan.send(b"X", idx, b"M", b"MemoryError")
            continue
        except BaseException as e:  # SystemExit and KeyboardInterrupt from user code included
            chan.send(b"X", idx, b"E", describe(e).encode("utf-8", "replace"))
            continue
        if len(out) > job["max_result_bytes"]:
            chan.send(b"X", idx, b"L", str(len(out)).encode())
        else:
            chan.send(b"O", idx, out)
    chan.send(b"F")


def _check(file: str, func: str) -> int:
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        fn = load(file, func)
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins without a signature: accept
            sig = None
        if sig is not None:
            try:
                sig.bind(None, None)
            except TypeError:
                raise TypeError("%s%s cannot be called as %s(events, ctx)" % (func, sig, func)) from None
    except BaseException as e:
        real_stdout.write("%s:%s: %s\n" % (file, func, describe(e)))
        real_stdout.flush()
        return 1
    return 0


def main(argv: List[str]) -> int:
    if len(argv) == 4 and argv[1] == "--check":
        return _check(argv[2], argv[3])
    if len(argv) != 1:
        sys.stderr.write("usage: python -m sluice._worker [--check FILE FUNC]\n")
        return 2
    chan = _Channel()
    chan.send(b"R", b"1")
    while True:
        req = chan.read_request()
        if req is None:  # the pool closed our stdin: done
            return 0
        _run(chan, *req)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
