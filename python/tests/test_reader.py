"""sluice.Reader: range reads and tails, from a server and from a data directory, compared with
`sluice cat` on the same range."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import sluice
from conftest import Server, sluice_bin, wait_for

BASE = int(time.time()) - 120  # seconds in the past: stored at the next flush tick


def _fill(server: Server) -> int:
    """Several seconds × types × subtypes × dcs of events; returns how many."""
    n = 0
    with sluice.Emitter(http=server.url, dc="ams1") as a, sluice.Emitter(http=server.url, dc="lhr2") as b:
        for sec in range(4):
            for i in range(60):
                em = a if i % 3 else b
                t = "WEB" if i % 2 else "CRON"
                ev = {"i": i, "sec": sec, "status": 200 if i % 5 else 503, "path": f"/p{i % 4}",
                      "timings": {"total_ms": i * 1.5}, "experiments": [{"id": i}, {"id": i + 1}]}
                em.emit(t, ev, subtype="s1" if i % 4 < 2 else "", epoch=BASE + sec)
                n += 1
        assert a.flush(30) and b.flush(30)
    wait_for(lambda: len(server.events(**{"from": str(BASE), "to": str(BASE + 4)})) == n, 60, "all events stored")
    return n


def _cat(*args: str) -> list:
    out = subprocess.run([sluice_bin(), "cat", *args], capture_output=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


FILTERS = [
    {},
    {"type": "WEB"},
    {"type": "CRON", "subtype": ""},
    {"dc": "lhr2"},
    {"where": "status >= 500"},
    {"select": ["i", "timings.total_ms", "experiments[*].id"]},
    {"type": "WEB", "select": "path,status", "where": "i < 30"},
]


def _flags(f: dict) -> list:
    out = []
    for k, v in f.items():
        if k == "select":
            v = v if isinstance(v, str) else ",".join(v)
        out += [f"--{k}", v]
    return out


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A server filled with events, then stopped (its data dir readable), with the server-side
    answers recorded while it ran."""
    srv = Server(tmp_path_factory.mktemp("reader") / "data")
    try:
        n = _fill(srv)
        rd = sluice.Reader(server=srv.url)
        live = {}
        for i, f in enumerate(FILTERS):
            live[i] = (list(rd.read(BASE, BASE + 4, **f)), _cat("--server", srv.url, "--from", str(BASE), "--to", str(BASE + 4), *_flags(f)))
        # A running server owns its directory: a data-dir reader goes through it (DIR/SERVER).
        through = list(sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 4))
        assert through == live[0][0]
        t = sluice.Reader(data_dir=str(srv.data)).tail(BASE, idle_timeout=1.0, type="WEB")
        assert len(list(t)) == n // 2
    finally:
        srv.stop()
    return srv, n, live


@pytest.mark.parametrize("i", range(len(FILTERS)))
def test_server_read_equals_sluice_cat(filled, i):
    _, _, live = filled
    ours, cat = live[i]
    assert ours == cat
    assert ours  # every filter matches something


@pytest.mark.parametrize("i", range(len(FILTERS)))
def test_data_dir_read_equals_sluice_cat(filled, i):
    srv, n, live = filled
    f = FILTERS[i]
    ours = list(sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 4, **f))
    cat = _cat("--data", str(srv.data), "--from", str(BASE), "--to", str(BASE + 4), *_flags(f))
    assert ours == cat
    assert ours == live[i][0]  # and the same as the server gave


def test_read_order_and_tags(filled):
    srv, n, _ = filled
    evs = list(sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 4))
    assert len(evs) == n
    keys = [(e["epoch"], e["dc"], e["type"], e["subtype"]) for e in evs]
    assert keys == sorted(keys)  # epoch order, then dc, type, subtype
    assert {e["epoch"] for e in evs} == set(range(BASE, BASE + 4))


def test_time_arguments(filled):
    srv, n, _ = filled
    rd = sluice.Reader(data_dir=str(srv.data))
    start = dt.datetime.fromtimestamp(BASE, dt.timezone.utc)
    assert len(list(rd.read(start, float(BASE + 2)))) == n // 2
    assert len(list(rd.read(start.isoformat().replace("+00:00", "Z"), BASE + 1))) == n // 4
    assert len(list(rd.read("-1h"))) == n
    assert list(rd.read(BASE, BASE)) == []
    with pytest.raises(ValueError):
        rd.read(dt.datetime(2020, 1, 1))  # naive
    with pytest.raises(sluice.ReadError):
        rd.read("yesterday-ish")


def test_reader_errors(tmp_path: Path, filled):
    srv, _, _ = filled
    with pytest.raises(sluice.ReadError, match="no such data directory"):
        sluice.Reader(data_dir=str(tmp_path / "nope")).read(0, 1)
    assert not (tmp_path / "nope").exists()
    with pytest.raises(sluice.ReadError, match="where"):
        sluice.Reader(data_dir=str(srv.data)).read(0, 1, where="status >>> 5")
    with pytest.raises(sluice.ReadError):
        sluice.Reader(server="http://127.0.0.1:1").read(0, 1)
    with pytest.raises(ValueError):
        sluice.Reader()


def test_locked_data_dir_without_a_server_is_a_read_error(filled):
    srv, n, _ = filled
    # Data-dir readers open the store read-only and share its lock: a tail does not block a read.
    holder = sluice.Reader(data_dir=str(srv.data)).tail(BASE, idle_timeout=5.0)
    next(holder)
    try:
        assert len(list(sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 4))) == n
    finally:
        holder.close()
    # A writer's exclusive lock (what `sluice serve` takes); the stopped server left no SERVER file.
    with open(os.path.join(str(srv.data), "LOCK"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(sluice.ReadError, match="running server"):
            list(sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 4))


def test_data_dir_lock_is_released_after_a_read(filled):
    srv, n, _ = filled
    rd = sluice.Reader(data_dir=str(srv.data))
    it = rd.read(BASE, BASE + 4)
    next(it)
    it.close()
    # Another reader (another process would too) can open the directory now.
    assert len(_cat("--data", str(srv.data), "--from", str(BASE), "--to", str(BASE + 4))) == n


def test_to_arrow(filled):
    pa = pytest.importorskip("pyarrow")
    srv, n, _ = filled
    table = sluice.Reader(data_dir=str(srv.data)).read(BASE, BASE + 4, select="i,status").to_arrow()
    assert isinstance(table, pa.Table) and table.num_rows == n
    assert set(table.column_names) == {"i", "status"}


def test_to_arrow_keeps_fields_the_first_event_lacks(server: Server):
    """The schema comes from every event, not the first: a field only later events have is a
    column (null elsewhere), and a field of mixed types becomes JSON text with a warning."""
    pa = pytest.importorskip("pyarrow")
    epoch = int(time.time()) - 30
    with sluice.Emitter(http=server.url) as em:
        em.emit("ARROW", {"i": 0, "code": 200}, epoch=epoch)
        for i in range(1, 5):
            em.emit("ARROW", {"i": i, "ms": i * 1.5, "code": "E1" if i == 4 else 200}, epoch=epoch)
        assert em.flush(30)
    rd = sluice.Reader(server=server.url)
    wait_for(lambda: len(rd.read(epoch, epoch + 1, type="ARROW").to_list()) == 5, 60, "stored")
    events = rd.read(epoch, epoch + 1, type="ARROW")
    table = events.to_arrow()
    assert table.num_rows == 5
    assert "ms" in table.column_names, table.schema
    by_i = {r["i"]: r for r in table.to_pylist()}
    assert by_i[0]["ms"] is None and by_i[3]["ms"] == 4.5
    assert table.schema.field("ms").type == pa.float64()
    assert table.schema.field("code").type == pa.string()
    assert sorted(r["code"] for r in by_i.values()) == ['"E1"', "200", "200", "200", "200"]
    assert [w.key for w in events.warnings] == ["column code"]


def test_data_dir_tail_reads_history(filled):
    srv, n, _ = filled
    t = sluice.Reader(data_dir=str(srv.data)).tail(BASE, idle_timeout=1.0, type="WEB")
    evs = list(t)
    assert len(evs) == n // 2 and all(e["type"] == "WEB" for e in evs)
    assert t.cursor and t.cursor.startswith("t1.")


def test_server_tail_follows_and_resumes(server: Server):
    rd = sluice.Reader(server=server.url)
    start = int(time.time()) - 5
    with sluice.Emitter(http=server.url) as em:
        for i in range(20):
            em.emit("TAIL", {"i": i}, epoch=start)
    tail = rd.tail(start, type="TAIL", idle_timeout=30)
    got = []
    for ev in tail:
        got.append(ev["i"])
        if len(got) == 20:
            break
    assert sorted(got) == list(range(20))
    # The cursor covers every event handed out so far.
    cursor = tail.cursor
    assert cursor
    tail.close()
    # New events while no one follows, then resume from the cursor: exactly the new ones.
    with sluice.Emitter(http=server.url) as em:
        for i in range(20, 30):
            em.emit("TAIL", {"i": i})
    resumed = rd.tail(cursor=cursor, type="TAIL", idle_timeout=30)
    more = []
    for ev in resumed:
        more.append(ev["i"])
        if len(more) == 10:
            break
    resumed.close()
    assert sorted(more) == list(range(20, 30))
    # Nothing else arrives (no duplicate of the first 20): a short idle tail ends empty.
    assert list(rd.tail(cursor=resumed.cursor, type="TAIL", idle_timeout=2)) == []


def _assert_hints(rd: "sluice.Reader", t0: int, t1: int, type_: str) -> None:
    ev = rd.read(t0, t1, type=type_.lower())
    assert ev.to_list() == []
    assert any(type_ in h for h in ev.hints), ev.hints
    ev = rd.read(t0, t1, type=type_, where="stauts >= 500")
    assert ev.to_list() == []
    assert any("status" in h for h in ev.hints), ev.hints


def test_hints_explain_an_empty_read_from_a_data_dir(filled):
    """A read naming a type or field the range never holds says so in ``hints``, as
    ``sluice cat`` does."""
    srv, _, _ = filled
    _assert_hints(sluice.Reader(data_dir=str(srv.data)), BASE, BASE + 4, "WEB")


def test_hints_explain_an_empty_read_from_a_server(server: Server):
    epoch = int(time.time()) - 30
    with sluice.Emitter(http=server.url) as em:
        for i in range(3):
            em.emit("HINTED", {"i": i, "status": 500}, epoch=epoch)
        assert em.flush(30)
    rd = sluice.Reader(server=server.url)
    wait_for(lambda: len(rd.read(epoch, epoch + 1, type="HINTED").to_list()) == 3, 60, "stored")
    _assert_hints(rd, epoch, epoch + 1, "HINTED")
