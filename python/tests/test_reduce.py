"""sluice.reduce: the reader-side group-by/aggregate, and that it agrees with
`sluice cat --group-by … --agg … --window …` on the same data (from a data dir and a server)."""

from __future__ import annotations

import json
import subprocess
import time
import warnings

import pytest

import sluice
from conftest import Server, sluice_bin, wait_for

BASE = int(time.time()) - 120
BASE -= BASE % 10  # windows of 2 s line up with the seconds written

SPECS = [
    dict(group_by="type,status", agg="count,sum:i,avg:timings.total_ms,min:ms,max:ms", window="2s"),
    dict(group_by=["path", "experiments[0].id"], agg=["count", "sum:experiments[*].id"]),
    dict(agg="count,avg:ms", window=3),
    dict(group_by="dc", agg="max:timings.total_ms", window="1m"),
]


def _flags(spec: dict) -> list:
    out = []
    for flag, key in (("--group-by", "group_by"), ("--agg", "agg"), ("--window", "window")):
        v = spec.get(key)
        if v is not None:
            out += [flag, v if isinstance(v, str) else ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    return out


def _whole(rows: list) -> list:
    """The rows without the `partial` mark that reads of a range add to the windows it cuts
    (a reduce of a list of events knows no range)."""
    return [{k: v for k, v in r.items() if k != "partial"} for r in rows]


def _cat(*args: str) -> list:
    out = subprocess.run([sluice_bin(), "cat", *args], capture_output=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def test_rows_on_known_events():
    evs = [
        {"epoch": 100, "k": "a", "ms": 1, "xs": [1, 2]},
        {"epoch": 101, "k": "a", "ms": 2.5, "xs": [3]},
        {"epoch": 103, "k": "b", "ms": "4"},
        {"epoch": 104, "k": "a", "ms": "x"},
        {"k": "a", "ms": 1},  # no epoch: left out, with a warning
    ]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rows = list(sluice.reduce(evs, "k", "count,sum:ms,min:ms,max:ms,avg:ms,sum:xs[*]", window="2s"))
    assert rows == [
        {"window": 100, "k": "a", "count": 2, "sum:ms": 3.5, "min:ms": 1, "max:ms": 2.5, "avg:ms": 1.75, "sum:xs[*]": 6},
        {"window": 102, "k": "b", "count": 1, "sum:ms": 4.0, "min:ms": 4.0, "max:ms": 4.0, "avg:ms": 4.0, "sum:xs[*]": None},
        {"window": 104, "k": "a", "count": 1, "sum:ms": None, "min:ms": None, "max:ms": None, "avg:ms": None, "sum:xs[*]": None},
    ]
    assert any(issubclass(x.category, sluice.ReduceWarning) and "1 without 'epoch'" in str(x.message) for x in w)
    assert list(sluice.reduce([], "k")) == []
    assert list(sluice.reduce([{"epoch": 1}, {"epoch": 2}])) == [{"count": 2}]


def test_bad_specs_are_value_errors():
    for kw in (dict(agg="median:x"), dict(group_by="a["), dict(window="0s"), dict(agg="sum")):
        with pytest.raises(ValueError):
            list(sluice.reduce([{"epoch": 1}], **kw))
    with pytest.raises(ValueError, match="more than 1 groups"):
        list(sluice.reduce([{"epoch": 1, "k": 1}, {"epoch": 1, "k": 2}], "k", max_groups=1))


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A server with events over 6 seconds (numbers as ints, floats and numeric strings), the
    server-side reduces recorded while it runs, then stopped (its data dir readable)."""
    srv = Server(tmp_path_factory.mktemp("reduce") / "data")
    try:
        n = 0
        with sluice.Emitter(http=srv.url, dc="ams1") as a, sluice.Emitter(http=srv.url, dc="lhr2") as b:
            for sec in range(6):
                for i in range(50):
                    ev = {"i": i, "status": 200 if i % 7 else 503, "path": "/p%d" % (i % 3),
                          "ms": [i * 0.5, str(i), i][i % 3], "timings": {"total_ms": i * 1.25},
                          "experiments": [{"id": i % 4}, {"id": i % 5}]}
                    (a if i % 2 else b).emit("WEB" if i % 3 else "CRON", ev, epoch=BASE + sec)
                    n += 1
            assert a.flush(30) and b.flush(30)
        wait_for(lambda: len(srv.events(**{"from": str(BASE), "to": str(BASE + 6)})) == n, 60, "events stored")
        live = []
        for spec in SPECS:
            ours = list(sluice.reduce(sluice.Reader(server=srv.url).read(BASE, BASE + 6), **spec))
            cat = _cat("--server", srv.url, "--from", str(BASE), "--to", str(BASE + 6), *_flags(spec))
            # The reduce of the events themselves (a list: reduced here, in Python).
            events = list(sluice.Reader(server=srv.url).read(BASE, BASE + 6))
            full = list(sluice.reduce(events, **spec))
            direct = list(sluice.Reader(server=srv.url).reduce(BASE, BASE + 6, **spec))
            live.append((ours, cat, full, direct))
    finally:
        srv.stop()
    return srv, n, live


@pytest.mark.parametrize("i", range(len(SPECS)))
def test_python_reduce_equals_sluice_cat(filled, i):
    srv, n, live = filled
    spec = SPECS[i]
    ours = list(sluice.reduce(sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 6), **spec))
    cat = _cat("--data", str(srv.data), "--from", str(BASE), "--to", str(BASE + 6), *_flags(spec))
    assert ours == cat
    assert ours
    # Over a server, both agree too (and with the data dir's rows as sets: the server's
    # order of events within a second may differ, which changes group order, not rows).
    over_server, cat_server, full_server, direct_server = live[i]
    assert over_server == cat_server
    # The server's reduce read (what `sluice.reduce` of an unstarted read and `Reader.reduce`
    # run) gives the rows of the events reduced here.
    assert over_server == direct_server
    assert _whole(over_server) == full_server
    key = lambda r: json.dumps(r, sort_keys=True)
    assert sorted(map(key, over_server)) == sorted(map(key, ours))
    if "count" in str(spec.get("agg", "count")):
        assert sum(r["count"] for r in ours) == n


def test_reduce_ranks_like_count_by():
    """``top``/``by`` rank each window's rows as ``sluice cat --count-by … --top N`` does."""
    evs = [{"epoch": 1, "status": s} for s in [200, 500, 200, 404, 200, 500]]
    rows = list(sluice.reduce(evs, "status", "count", top=2))
    assert rows == [{"status": 200, "count": 3}, {"status": 500, "count": 2}]
    rows = list(sluice.reduce(evs, "status", ["count", "max:status"], by="max:status", top=1))
    assert rows == [{"status": 500, "count": 2, "max:status": 500}]
    with pytest.raises(ValueError, match="not a column"):
        list(sluice.reduce(evs, "status", "count", by="nope"))


WHERES = [None, "status >= 500", "timings.total_ms > 20 and not exists nope"]


@pytest.mark.parametrize("i", range(len(SPECS)))
@pytest.mark.parametrize("where", WHERES)
def test_reduce_read_equals_the_reduce_of_the_events(filled, i, where):
    """``Reader.reduce`` and ``sluice.reduce`` of an unstarted read run the reduce read (only the
    fields it names are read); their rows equal those of the events read whole and reduced in
    Python."""
    srv, _, _ = filled
    spec = SPECS[i]
    reader = sluice.Reader(data_dir=str(srv.data))
    full = list(sluice.reduce(list(reader.read(BASE, BASE + 6, where=where)), **spec))
    assert full
    pushed = list(sluice.reduce(reader.read(BASE, BASE + 6, where=where), **spec))
    direct = list(reader.reduce(BASE, BASE + 6, where=where, **spec))
    # A read knows its range: its rows of a window the range cuts are marked `partial`.
    assert pushed == direct
    assert _whole(pushed) == full
    if spec.get("window") == "1m":  # a minute around a 6 s range: cut at both ends
        assert all(r.get("partial") is True for r in pushed), pushed


def test_reduce_read_count_by_top_and_errors(filled):
    srv, n, _ = filled
    reader = sluice.Reader(data_dir=str(srv.data))
    span = ("--from", str(BASE), "--to", str(BASE + 6))
    rows = reader.reduce(BASE, BASE + 6, count_by="status,path", top=4)
    assert list(rows) == _cat("--data", str(srv.data), *span, "--count-by", "status,path", "--top", "4")
    assert rows.warnings == []
    # Top events (whole) by a field.
    top = list(reader.reduce(BASE, BASE + 6, type="WEB", top=3, by="timings.total_ms"))
    want = _cat("--data", str(srv.data), *span, "--type", "WEB", "--top", "3", "--by", "timings.total_ms")
    assert top == want and len(top) == 3 and "experiments" in top[0]
    with pytest.raises(ValueError, match="use one or the other"):
        reader.reduce(BASE, BASE + 6, count_by="status", group_by="path")
    with pytest.raises(ValueError, match="needs --by"):
        reader.reduce(BASE, BASE + 6, top=3)
    with pytest.raises(ValueError, match="more than 1 groups"):
        list(reader.reduce(BASE, BASE + 6, group_by="status", max_groups=1))
    # A read an event was taken from is reduced here, over what is left.
    ev = reader.read(BASE, BASE + 6)
    next(ev)
    assert list(sluice.reduce(ev, agg="count")) == [{"count": n - 1}]
    # A read with `select` too (its events are the selected paths) is reduced here.
    sel = list(sluice.reduce(reader.read(BASE, BASE + 6, select="status,epoch"), "status"))
    assert sum(r["count"] for r in sel) == n
