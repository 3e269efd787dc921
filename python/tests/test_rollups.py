"""Reader.rollup: a rollup's states merged (from a server, then from the data directory after
it stops) give the rows Reader.reduce gives over the same events, as Arrow, pandas or dicts."""

from __future__ import annotations

import json
import random
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import sluice
from conftest import Server, sluice_bin, wait_for

AGG = "count,sum:bytes,max:bytes,p95:ms,distinct:user,count_if:status >= 500"


def _post(url: str, path: str, body: bytes) -> dict:
    req = urllib.request.Request(url + path, data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"{}")


def _results(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('sluice_substream_results_total{substream="web"}'):
                return float(line.split()[-1])
    return 0.0  # absent until the first result; the wait below fails if it never comes


def _by_key(rows: list, start: str) -> dict:
    return {(r[start], r["path"]): r for r in rows}


def test_rollup_rows_equal_the_reduce_of_the_events(tmp_path: Path) -> None:
    s = Server(tmp_path / "data", "--columns", "off")
    try:
        # The CLI, which finds the server's per-start admin secret (admin routes need it).
        subprocess.run(
            [sluice_bin(), "rollup", "add", "web", "--type", "WEB", "--group-by", "path", "--agg", AGG,
             "--step", "10s", "--server", s.url],
            capture_output=True, check=True,
        )
        t0 = int(time.time()) - 120
        t0 -= t0 % 60
        rng = random.Random(5)
        lines = []
        for sec in range(40):
            for _ in range(30):
                lines.append(json.dumps({
                    "epoch": t0 + sec, "type": "WEB", "path": f"/p{rng.randrange(3)}",
                    "bytes": rng.randrange(5000), "ms": rng.random() * 300, "user": f"u{rng.randrange(50)}",
                    "status": 503 if rng.random() < 0.1 else 200,
                }))
        _post(s.url, "/v1/events", "\n".join(lines).encode())
        wait_for(lambda: _results(s.url) >= 40, 60, "the rollup to run on the 40 stored blobs")

        server = sluice.Reader(server=s.url)
        table = server.rollup("web", t0, t0 + 40, step="20s")
        assert table.num_rows == 6  # two 20 s steps x three paths
        got = _by_key(table.to_pylist(), "start")
        want = _by_key(list(server.reduce(t0, t0 + 40, type="WEB", group_by="path", agg=AGG, window="20s")), "window")
        assert got.keys() == want.keys()
        for k, w in want.items():
            for a in AGG.split(","):
                assert got[k][a] == pytest.approx(w[a], rel=1e-9), (k, a)
        with pytest.raises(sluice.ReadError, match="multiple"):
            server.rollup("web", t0, t0 + 40, step="15s")
    finally:
        s.stop()

    local = sluice.Reader(data_dir=str(tmp_path / "data"))
    frame = local.rollup("web", t0, t0 + 40, step="20s", output="pandas")
    assert len(frame) == 6
    rows = local.rollup("web", t0, t0 + 40, step="20s", where='path == "/p1"', output="rows")
    assert [r["path"] for r in rows] == ["/p1", "/p1"]
    assert {(r["start"], r["path"]): r["count"] for r in rows} == {
        k: v["count"] for k, v in got.items() if k[1] == "/p1"
    }
