"""Reader.iter_batches() and Reader.to_arrow(): a range as Arrow record batches.

A real `sluice serve` (columns every second) takes `sluice gen` events of three types; stopped,
its data directory is read as batches (columns in Rust, handed over as Arrow IPC) and the
answers are compared with `sluice cat` over the same range: row counts, counts by status, the
request ids of a filtered read, one (dc, type) per batch and at most `rows_per_batch` rows in
each. Through a running server the same rows come back.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow as pa  # installed by scripts/python-setup.sh: its absence fails the test
import pyarrow.compute as pc

from conftest import Server, sluice_bin, wait_for
from sluice import Reader

COUNT = 6000


def cat(data: Path, start: int, end: int, *extra: str) -> list:
    out = subprocess.run(
        [sluice_bin(), "cat", "--data", str(data), "--from", str(start), "--to", str(end),
         "--format", "json", *extra],
        check=True, capture_output=True, text=True,
    ).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def serve_events(data: Path) -> tuple:
    srv = Server(data, "--columns-every", "1s")
    start = int(time.time()) - 20
    events = subprocess.run(
        [sluice_bin(), "gen", "--count", str(COUNT), "--seed", "3", "--rate", "600", "--epoch", str(start)],
        check=True, capture_output=True,
    ).stdout
    req = urllib.request.Request(srv.url + "/v1/events", data=events, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
    return srv, start, start + 10


def test_batches_and_table_answer_as_cat_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    srv, start, end = serve_events(data)
    try:
        # Through the running server: the same number of rows.
        wait_for(lambda: len(srv.events(**{"from": str(start), "to": str(end)})) == COUNT, 60,
                 "every event stored")
        via = Reader(server=srv.url).to_arrow(start, end)
        assert via.num_rows == COUNT
    finally:
        srv.stop()

    r = Reader(data_dir=str(data))
    batches = list(r.iter_batches(start, end, rows_per_batch=1000))
    assert r.warnings == []
    assert sum(b.num_rows for b in batches) == COUNT
    kinds = set()
    for b in batches:
        assert 0 < b.num_rows <= 1000
        meta = {k.decode(): v.decode() for k, v in (b.schema.metadata or {}).items()}
        kinds.add((meta["sluice.dc"], meta["sluice.type"]))
        assert set(b.column("type").to_pylist()) == {meta["sluice.type"]}
        assert b.schema.field("_epoch").type == pa.int64()
    assert {t for _, t in kinds} == {"WEB", "CRON", "LB"}

    table = r.to_arrow(start, end)
    assert table.num_rows == COUNT
    mine = Counter(e.get("status") for e in cat(data, start, end))
    theirs = Counter()
    for row in pc.value_counts(table.column("status")).to_pylist():
        theirs[row["values"]] += row["counts"]
    assert theirs == mine

    # A filter and a select: the same request ids as `sluice cat`.
    filtered = r.to_arrow(start, end, where="status >= 500", select="request_id,status")
    want = sorted((e.get("request_id") for e in cat(data, start, end, "--where", "status >= 500")), key=str)
    assert any(want), "some 5xx with a request id"
    assert sorted(filtered.column("request_id").to_pylist(), key=str) == want
    assert all(s >= 500 for s in filtered.column("status").to_pylist())
