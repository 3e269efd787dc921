"""DuckDB opens the history tier's files as they are.

A real `sluice serve` (parts every second) takes `sluice gen` events of three types and several
subtypes; once its columns hold every event, DuckDB runs SQL over the served directory with the
one-liner docs/history.md gives (`read_parquet(…, hive_partitioning = true, union_by_name =
true)`), and its counts equal `sluice cat --count-by` over the same range.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import duckdb  # installed by scripts/python-setup.sh: its absence fails the test
import pytest

from conftest import Server, sluice_bin, wait_for


def metric(srv: Server, name: str) -> float:
    with urllib.request.urlopen(srv.url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    pytest.fail(f"metric {name} missing")


def count_by(data: Path, field: str, start: int, end: int, *extra: str) -> dict:
    out = subprocess.run(
        [sluice_bin(), "cat", "--data", str(data), "--from", str(start), "--to", str(end),
         "--count-by", field, "--format", "json", *extra],
        check=True, capture_output=True, text=True,
    ).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    return {json.dumps(r[field]): r["count"] for r in rows}


def test_duckdb_reads_the_served_columns(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    srv = Server(data, "--columns-every", "1s")
    try:
        start = int(time.time()) - 30
        events = subprocess.run(
            [sluice_bin(), "gen", "--count", "20000", "--seed", "11", "--rate", "2000", "--epoch", str(start)],
            check=True, capture_output=True,
        ).stdout
        lines = events.splitlines(keepends=True)
        for i in range(0, len(lines), 5000):
            body = b"".join(lines[i : i + 5000])
            req = urllib.request.Request(srv.url + "/v1/events", data=body, method="POST")
            with urllib.request.urlopen(req, timeout=60) as r:
                assert r.status == 200
        wait_for(lambda: metric(srv, "sluice_columns_rows_written_total") >= 20000, 120,
                 "the columns to hold every event")
    finally:
        srv.stop()
    end = start + 20
    files = str(data / "columns" / "**" / "*.parquet")
    db = duckdb.connect()
    rel = f"read_parquet('{files}', hive_partitioning = true, union_by_name = true)"
    total = db.execute(f"SELECT count(*) FROM {rel}").fetchall()[0][0]
    assert total == 20000
    # Counts per status, per type and per a nested field equal Sluice's own.
    for field, sql_field in [("status", "status"), ("type", "type"), ("tls.version", "tls.version")]:
        mine = count_by(data, field, start, end, "--top", "100000")
        theirs = {
            json.dumps(v): c
            for v, c in db.execute(f"SELECT {sql_field} AS v, count(*) FROM {rel} GROUP BY 1").fetchall()
        }
        assert theirs == mine, field
    # A nested number: the same values per type (DuckDB widens BIGINT and DOUBLE columns of
    # different files to DOUBLE, so compare as numbers).
    mine = subprocess.run(
        [sluice_bin(), "cat", "--data", str(data), "--from", str(start), "--to", str(end), "--type", "WEB",
         "--group-by", "path", "--agg", "sum:timings.total_ms", "--format", "json"],
        check=True, capture_output=True, text=True,
    ).stdout
    mine = {r["path"]: r["sum:timings.total_ms"] for r in map(json.loads, mine.splitlines()) if r}
    theirs = dict(db.execute(
        f"SELECT path, sum(timings.total_ms) FROM {rel} WHERE type = 'WEB' GROUP BY 1").fetchall())
    assert mine.keys() == theirs.keys()
    for k in mine:
        assert abs(mine[k] - theirs[k]) < 1e-6 * max(1.0, abs(mine[k])), k
    # The hive partitions are columns too.
    dates = db.execute(f"SELECT DISTINCT date FROM {rel}").fetchall()
    assert len(dates) >= 1
    # Blobs and columns give Sluice the same counts.
    assert count_by(data, "status", start, end, "--top", "100000") == count_by(
        data, "status", start, end, "--top", "100000", "--no-columns")
