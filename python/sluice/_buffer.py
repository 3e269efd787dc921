"""The emitter's optional disk buffer: a bounded queue of events in a directory that outlives the
emitting process (``Emitter(buffer_dir=…)``).

Layout (the SDK contract; the Go and JavaScript emitters keep the same shape): append-only NDJSON
segment files ``seg-0000000001.ndjson``, one event a line, and ``cursor.json``, the first byte
not yet delivered (``{"seg": N, "off": BYTES}``, replaced atomically by rename). Events are
appended before they are sent and the cursor moves only after the collector acknowledged them,
so what a process had not delivered when it stopped (close, crash, SIGKILL) is sent first by the
next emitter on the directory: delivery is at least once. Appends always go to a new segment:
a segment written by an earlier process is only read, and a torn last line (the process died
mid-write) is cut off at start.

A line is ``[type, subtype, epoch, event]`` as JSON; an event JSON cannot carry as is (bytes, a
``PerlObject``) is written as ``{"sereal": BASE64}`` of the same list, so it comes back intact.

One process at a time: the directory is locked (``flock`` on ``lock``; the kernel releases it
when the process dies, even by SIGKILL). A second emitter on a locked directory is refused.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
from typing import Any, List, Optional, Tuple

from . import _native

__all__ = ["DiskBuffer", "encode_line", "decode_line"]

_SEGMENT = re.compile(r"^seg-(\d{10})\.ndjson$")
_CURSOR = "cursor.json"

Item = Tuple[str, str, Any, Any]


def encode_line(item: Item) -> bytes:
    """One queued ``(type, subtype, epoch, event)`` as a buffer line (no newline). Raises
    ValueError/TypeError when neither JSON nor Sereal can carry it."""
    row = [item[0], item[1], item[2], item[3]]
    try:
        return json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError):
        pass
    doc = _native.dumps(row)
    return b'{"sereal":"' + base64.b64encode(doc) + b'"}'


def decode_line(line: bytes) -> Item:
    """A buffer line back to ``(type, subtype, epoch, event)``. Raises ValueError when damaged."""
    v = json.loads(line)
    if isinstance(v, dict) and isinstance(v.get("sereal"), str):
        v = _native.loads(base64.b64decode(v["sereal"], validate=True))
    if not isinstance(v, list) or len(v) != 4:
        raise ValueError("not a [type, subtype, epoch, event] line")
    return (v[0], v[1], v[2], v[3])


class BufferLocked(ValueError):
    """Another live process holds the buffer directory."""


class DiskBuffer:
    """An append-only, size-capped queue of NDJSON lines in ``directory`` (created if missing).

    ``max_bytes`` caps the bytes not yet delivered; :meth:`fits` says whether more do.
    Not thread-safe: the emitter's sender thread is its only user.
    """

    def __init__(self, directory: str, max_bytes: int, segment_bytes: Optional[int] = None) -> None:
        self.dir = os.fspath(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 << 10, min(16 << 20, max_bytes // 8))
        os.makedirs(self.dir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.dir, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise BufferLocked(f"buffer_dir {self.dir!r} is in use by another emitter process") from None
        seg, off = 0, 0
        try:
            with open(os.path.join(self.dir, _CURSOR), "rb") as f:
                c = json.loads(f.read())
            if isinstance(c.get("seg"), int) and isinstance(c.get("off"), int) and c["off"] >= 0:
                seg, off = c["seg"], c["off"]
        except (OSError, ValueError, AttributeError):
            pass  # no cursor yet (or a torn one: everything present is sent again, at least once)
        self.segs: List[int] = []
        for name in os.listdir(self.dir):
            m = _SEGMENT.match(name)
            if not m:
                continue
            n = int(m.group(1))
            if n < seg:  # delivered, its deletion was interrupted
                _remove(self._file(n))
                continue
            self.segs.append(n)
        self.segs.sort()
        for n in self.segs:
            self._trim_torn(n)
        if not self.segs or self.segs[0] != seg:
            seg, off = (self.segs[0] if self.segs else 0), 0
        self.cursor: Tuple[int, int] = (seg, off)
        self._write_seg = (self.segs[-1] if self.segs else 0) + 1
        self._write_fd: Optional[int] = None
        self._write_size = 0
        self.pending_bytes = max(0, sum(self._size(n) for n in self.segs) - off)

    def _file(self, n: int) -> str:
        return os.path.join(self.dir, f"seg-{n:010d}.ndjson")

    def _size(self, n: int) -> int:
        try:
            return os.stat(self._file(n)).st_size
        except OSError:
            return 0

    def _trim_torn(self, n: int) -> None:
        path = self._file(n)
        size = self._size(n)
        if size == 0:
            return
        with open(path, "r+b") as f:
            back = min(size, 1 << 20)
            f.seek(size - back)
            tail = f.read(back)
            if tail.endswith(b"\n"):
                return
            nl = tail.rfind(b"\n")
            f.truncate(size - back + nl + 1 if nl >= 0 else size - back)

    def fits(self, n: int) -> bool:
        """Whether ``n`` more bytes fit under the cap."""
        return self.pending_bytes + n <= self.max_bytes

    def append(self, lines: List[bytes]) -> None:
        """Appends lines (each without its newline) in one write. Raises OSError."""
        if not lines:
            return
        if self._write_fd is None or self._write_size >= self.segment_bytes:
            if self._write_fd is not None:
                os.close(self._write_fd)
                self._write_fd = None
                self._write_seg += 1
            self._write_fd = os.open(
                self._file(self._write_seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
            )
            self._write_size = 0
            self.segs.append(self._write_seg)
            if len(self.segs) == 1:
                self.cursor = (self._write_seg, 0)
        data = b"\n".join(lines) + b"\n"
        view = memoryview(data)
        while view:
            # The page cache keeps what is written once write() returns: it survives this
            # process's SIGKILL (fsync at close guards against a machine crash too).
            view = view[os.write(self._write_fd, view):]
        self._write_size += len(data)
        self.pending_bytes += len(data)

    def read(self, max_events: int, max_bytes: int) -> Optional[Tuple[List[bytes], Tuple[int, int]]]:
        """The next lines to deliver from the cursor: at most ``max_events`` lines and about
        ``max_bytes`` bytes (at least one line). Returns ``(lines, end)`` (pass ``end`` to
        :meth:`commit`), or None when everything is delivered."""
        while self.segs:
            seg, off = self.cursor
            size = self._size(seg)
            if off < size:
                with open(self._file(seg), "rb") as f:
                    f.seek(off)
                    buf = f.read(min(size - off, max_bytes + 1))
                    lines: List[bytes] = []
                    used = 0
                    while len(lines) < max_events:
                        nl = buf.find(b"\n", used)
                        if nl < 0 or (lines and nl + 1 > max_bytes):
                            break
                        lines.append(buf[used:nl])
                        used = nl + 1
                    if not lines:
                        # One line longer than max_bytes (written under a larger limit): whole.
                        f.seek(off)
                        line = f.readline()
                        if not line.endswith(b"\n"):
                            return None
                        return [line[:-1]], (seg, off + len(line))
                return lines, (seg, off + used)
            if seg == self._write_seg and self._write_fd is not None:
                return None  # delivered up to what is being appended
            later = [n for n in self.segs if n > seg]
            if not later:
                return None
            self.commit((later[0], 0))
        return None

    def commit(self, end: Tuple[int, int]) -> None:
        """Marks everything before ``end`` delivered: the cursor file is replaced (rename) and
        delivered segments are deleted. Raises OSError."""
        seg, off = self.cursor
        if end[0] == seg:
            delivered = end[1] - off
        else:
            delivered = max(0, self._size(seg) - off) + sum(self._size(n) for n in self.segs if seg < n < end[0]) + end[1]
        self.cursor = end
        self.pending_bytes = max(0, self.pending_bytes - delivered)
        tmp = os.path.join(self.dir, _CURSOR + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"seg": end[0], "off": end[1]}, f)
        os.replace(tmp, os.path.join(self.dir, _CURSOR))
        while self.segs and self.segs[0] < end[0]:
            _remove(self._file(self.segs.pop(0)))

    def has_pending(self) -> bool:
        """Whether lines wait to be delivered."""
        return self.pending_bytes > 0

    def close(self) -> None:
        """Syncs the appends to disk and releases the directory."""
        if self._write_fd is not None:
            try:
                os.fsync(self._write_fd)
            finally:
                os.close(self._write_fd)
                self._write_fd = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def abandon(self) -> None:
        """Closes the descriptors without touching the lock's owner (a forked child: the parent
        keeps the directory; closing our copy of the lock fd would not release it anyway)."""
        for fd in (self._write_fd, self._lock_fd):
            if fd is not None and fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._write_fd = None
        self._lock_fd = -1


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
