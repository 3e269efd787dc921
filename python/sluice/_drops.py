"""The drops an emitter reports to the server (``POST /v1/drops``, the SDK contract): merged by
(epoch, dc, type, subtype, reason), bounded, sent in batches once the server answers again, so
``sluice counts`` shows them as dropped ``client:<reason>``.

Reasons: ``retry_budget`` (gave up after the retry budget), ``queue_full`` (the memory queue was
full), ``buffer_full`` (the disk buffer was at its cap), ``too_large`` (an event over the size
limit), ``rejected`` (the server refused a whole payload with a 4xx).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import _native

__all__ = ["DropLedger", "REASONS"]

REASONS = ("retry_budget", "queue_full", "buffer_full", "too_large", "rejected")

# Records per request (the server takes up to 10,000).
_REPORT_BATCH = 1000
# After a failed report, the next one waits this long (seconds).
_REPORT_PAUSE = 5.0

_Key = Tuple[int, Optional[str], str, str, str]


def _tag_ok(s: Any, may_be_empty: bool) -> bool:
    return (
        isinstance(s, str)
        and (may_be_empty or bool(s))
        and len(s.encode()) <= 64
        and not any(c in ":|" or ord(c) < 32 or ord(c) == 127 for c in s)
    )


class DropLedger:
    """Pending drop records, merged by key, at most ``max_records`` of them (more drops of new
    keys are counted as ``unrecorded``). Thread-safe."""

    def __init__(self, max_records: int = 10_000) -> None:
        self.max_records = max_records
        self._records: Dict[_Key, int] = {}
        self._lock = threading.Lock()
        self.unrecorded = 0  # dropped events that could not be recorded or reported
        self.reported = 0  # dropped events whose records the server accepted
        self._pause_until = 0.0
        self.last_error: Optional[str] = None

    def add(self, epoch: Any, dc: Optional[str], type_: Any, subtype: Any, reason: str, count: int = 1) -> None:
        """Adds ``count`` drops of ``reason`` for one (epoch, dc, type, subtype); a key the
        server would refuse (bad tags, an epoch that is no int, float or str) is only counted.
        The epoch goes in the form it was emitted in (the server reads every form)."""
        if (
            not isinstance(epoch, (int, float, str))
            or isinstance(epoch, bool)
            or not _tag_ok(type_, False)
            or not _tag_ok(subtype, True)
            or (dc is not None and not _tag_ok(dc, False))
        ):
            with self._lock:
                self.unrecorded += count
            return
        key = (epoch, dc, type_, subtype, reason)
        with self._lock:
            if key in self._records:
                self._records[key] += count
            elif len(self._records) < self.max_records:
                self._records[key] = count
            else:
                self.unrecorded += count

    def add_items(self, items: Iterable[Tuple[str, str, Any, Any]], dc: Optional[str], reason: str) -> None:
        """Adds one drop per queued ``(type, subtype, epoch, event)``."""
        for t, s, e, _ in items:
            self.add(e, dc, t, s, reason)

    def add_payload(self, payload: bytes, dc: Optional[str], reason: str) -> int:
        """Adds one drop per event of a packed payload (its tags say the key); returns how many
        events it held."""
        try:
            body = _native.loads(payload)
        except Exception:
            return 0
        events = body if isinstance(body, list) else [body]
        for ev in events:
            if isinstance(ev, dict):
                self.add(ev.get("epoch"), ev.get("dc", dc), ev.get("type"), ev.get("subtype", ""), reason)
            else:
                with self._lock:
                    self.unrecorded += 1
        return len(events)

    def pending(self) -> int:
        """Dropped events waiting to be reported."""
        with self._lock:
            return sum(self._records.values())

    def due(self) -> bool:
        """Whether a report should be tried now (records wait, not paused after a failure)."""
        return bool(self._records) and time.monotonic() >= self._pause_until

    def report(self, post: Callable[[bytes], Tuple[int, bytes]], force: bool = False) -> None:
        """Sends what is pending through ``post(body) -> (status, answer)``, best effort:
        records the server accepted are removed; a 400 (records it will never take) discards
        the batch (counted as ``unrecorded``); anything else keeps them for a later try, not
        before a pause."""
        if not force and not self.due():
            return
        while True:
            with self._lock:
                keys = list(self._records)[:_REPORT_BATCH]
                batch = [(k, self._records[k]) for k in keys]
            if not batch:
                return
            drops: List[Dict[str, Any]] = []
            for (epoch, dc, t, s, reason), n in batch:
                r: Dict[str, Any] = {"epoch": epoch, "type": t, "subtype": s, "reason": reason, "count": n}
                if dc is not None:
                    r["dc"] = dc
                drops.append(r)
            try:
                status, answer = post(json.dumps({"drops": drops}).encode())
            except Exception as e:  # no answer: keep them
                self.last_error = f"drops not reported: {e!r}"
                self._pause_until = time.monotonic() + _REPORT_PAUSE
                return
            if status not in (200, 400):
                self.last_error = f"drops not reported: {status} {answer[:200]!r}"
                self._pause_until = time.monotonic() + _REPORT_PAUSE
                return
            with self._lock:
                for (k, n) in batch:
                    left = self._records.get(k, 0) - n
                    if left > 0:
                        self._records[k] = left  # more drops of this key arrived meanwhile
                    else:
                        self._records.pop(k, None)
                total = sum(n for _, n in batch)
                if status == 200:
                    self.reported += total
                else:
                    self.unrecorded += total
                    self.last_error = f"drops refused: {answer[:200]!r}"
