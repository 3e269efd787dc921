"""Reader.funnel: a real `sluice serve` counts funnels (GET /v1/funnel) that equal a brute-force
computation from the definition (docs/funnels.md) over the events read back in the reader's
order: steps out of order, repeated, in the same second, past `within`, several dcs."""

from __future__ import annotations

import json
import math
import random
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import sluice
from conftest import Server

STEPS = ["/search", "/hotel", "/book"]


def _post(url: str, body: bytes) -> dict:
    req = urllib.request.Request(url + "/v1/events", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"{}")


def _reached(events: List[Tuple[int, str]], within: Optional[int]) -> List[int]:
    """The epochs at which one session reached each step (its events in read order)."""
    first = next((i for i, e in enumerate(events) if e[1] == STEPS[0]), None)
    if first is None:
        return []
    times, at = [events[first][0]], first
    for step in STEPS[1:]:
        nxt = next(
            (j for j in range(at + 1, len(events))
             if events[j][1] == step and (within is None or events[j][0] - times[0] <= within)),
            None,
        )
        if nxt is None:
            break
        at = nxt
        times.append(events[at][0])
    return times


def _rank(values: List[int], q: float) -> Optional[int]:
    if not values:
        return None
    v = sorted(values)
    k = max(1, math.ceil(q * len(v)))  # nearest rank
    return v[min(k, len(v)) - 1]


def _brute_force(events: List[dict], within: Optional[int], by_dc: bool) -> List[dict]:
    sessions: Dict[Tuple[str, str], List[Tuple[int, str]]] = {}
    for e in events:
        if e.get("type") != "WEB" or "session_id" not in e:
            continue
        g = e["dc"] if by_dc else ""
        sessions.setdefault((g, json.dumps(e["session_id"])), []).append((e["epoch"], e["path"]))
    groups: Dict[str, List[List[int]]] = {}
    for (g, _), evs in sessions.items():
        t = _reached(evs, within)
        if t:
            groups.setdefault(g, []).append(t)
    out = []
    for g in sorted(groups, key=lambda g: json.dumps([g])):
        all_t = groups[g]
        n = [sum(1 for t in all_t if len(t) > k) for k in range(len(STEPS))]
        steps = []
        for k in range(len(STEPS)):
            gaps = [t[k] - t[k - 1] for t in all_t if k > 0 and len(t) > k]
            steps.append({
                "step": k + 1, "sessions": n[k],
                "from_previous": None if k == 0 or n[k - 1] == 0 else n[k] / n[k - 1],
                "from_first": n[k] / n[0] if n[0] else None,
                "median_secs": _rank(gaps, 0.5), "p90_secs": _rank(gaps, 0.9),
            })
        out.append({"group": {"dc": g} if by_dc else {}, "steps": steps})
    return out


def _same(answer: dict, expected: List[dict]) -> None:
    assert answer["overflow"] == 0 and answer["warnings"] == []
    assert len(answer["groups"]) == len(expected)
    for got, want in zip(answer["groups"], expected):
        assert got["group"] == want["group"]
        for s, w in zip(got["steps"], want["steps"]):
            for k in ("step", "sessions", "median_secs", "p90_secs"):
                assert s[k] == w[k], (got["group"], s["step"], k)
            for k in ("from_previous", "from_first"):
                assert s[k] == pytest.approx(w[k]) if w[k] is not None else s[k] is None


def test_funnel_equals_brute_force(tmp_path: Path) -> None:
    s = Server(tmp_path / "data", "--columns", "off")
    try:
        rng = random.Random(11)
        base = int(time.time()) - 3600
        lines = []
        for i in range(250):
            sid = i if i % 9 == 0 else f"s{i}"
            dc = rng.choice(["ams1", "lhr2"])
            t0 = base + rng.randrange(600)
            spread = 1200 if rng.random() < 0.3 else 90
            for _ in range(1 + rng.randrange(9)):
                lines.append(json.dumps({
                    "epoch": t0 + rng.randrange(spread), "dc": dc,
                    "type": "WEB" if rng.random() < 0.9 else "LB", "session_id": sid,
                    "path": rng.choice(STEPS + ["/home", "/search"]),
                }))
        _post(s.url, "\n".join(lines).encode())
        lo, hi = base - 5, base + 1900
        # Every event stored: then the reader's order is what the definition applies to.
        deadline = time.monotonic() + 60
        while len(s.events(**{"from": str(lo), "to": str(hi)})) < len(lines):
            assert time.monotonic() < deadline, "the events were not all stored"
            time.sleep(0.2)
        read = s.events(**{"from": str(lo), "to": str(hi)})
        reader = sluice.Reader(server=s.url)
        steps = [f'path == "{p}"' for p in STEPS]
        for within, by_dc in ((None, False), (300, True), ("1m", True)):
            w = None if within is None else (60 if within == "1m" else within)
            answer = reader.funnel(lo, hi, by="session_id", steps=steps, within=within,
                                   group_by="dc" if by_dc else None, type="WEB")
            expected = _brute_force(read, w, by_dc)
            assert expected[0]["steps"][2]["sessions"] > 0
            _same(answer, expected)
        # A data directory a server runs on is read through it.
        local = sluice.Reader(data_dir=str(tmp_path / "data"))
        answer = local.funnel(lo, hi, by="session_id", steps=steps, type="WEB")
        _same(answer, _brute_force(read, None, False))
        # The cap: counted, not silent.
        capped = reader.funnel(lo, hi, by="session_id", steps=steps, max_sessions=3)
        assert capped["sessions"] == 3 and capped["overflow"] > 0
        with pytest.raises(sluice.ReadError, match="step 2"):
            reader.funnel(lo, hi, by="session_id", steps=[steps[0], "path =="])
    finally:
        s.stop()
    with pytest.raises(sluice.ReadError, match="sluice funnel --data"):
        sluice.Reader(data_dir=str(tmp_path / "data")).funnel(0, 1, by="session_id", steps=["a == 1"])
