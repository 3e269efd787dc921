"""Emitters that outlast a restart, with real processes: `sluice serve` SIGKILLed and restarted
under steady emitters, the disk buffer surviving the emitting process's own SIGKILL, and what an
emitter drops reaching the server's completeness counts as `client:<reason>`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Dict, List

import pytest

import sluice
from conftest import Server, free_port, wait_for
import socket


def _exactly_once(server: Server, type_: str, n: int) -> None:
    """Waits for `n` events of `type_` and checks they are 0..n-1, each exactly once."""
    evs = wait_for(lambda: (lambda e: e if len(e) >= n else None)(server.events(type=type_)), 90, f"{n} {type_} events")
    seen = Counter(e["i"] for e in evs)
    missing = [i for i in range(n) if i not in seen]
    twice = sorted(i for i, c in seen.items() if c > 1)
    assert not missing and not twice and len(seen) == n, (
        f"{type_}: {len(evs)} events for {n}: missing {missing[:20]} ({len(missing)}), duplicated {twice[:20]} ({len(twice)})"
    )


class _Steady(threading.Thread):
    """Emits `{"i": 0, 1, …}` at about `rate` events a second until stopped."""

    def __init__(self, em: sluice.Emitter, type_: str, rate: float = 200.0) -> None:
        super().__init__(daemon=True)
        self.em, self.type_, self.rate = em, type_, rate
        self.n = 0
        self.halt = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.halt.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.n < due:
                self.em.emit(self.type_, {"i": self.n})
                self.n += 1
            self.halt.wait(0.01)


def test_server_sigkill_and_restart_under_steady_emitters(tmp_path: Path):
    """SIGKILL `sluice serve`, keep it down ~20 s while three emitters (HTTP, TCP, HTTP with a
    disk buffer) emit 200 events/s each, restart it on the same data dir and ports: every event
    is stored exactly once, none is dropped, and the retry budget (not `retries`) decided."""
    srv = Server(tmp_path / "data")
    errors: List[str] = []
    ems = {
        "RSHTTP": sluice.Emitter(http=srv.url, on_error=lambda m, n: errors.append(m)),
        "RSTCP": sluice.Emitter(tcp=srv.tcp, on_error=lambda m, n: errors.append(m)),
        "RSBUF": sluice.Emitter(http=srv.url, buffer_dir=str(tmp_path / "buf"), on_error=lambda m, n: errors.append(m)),
    }
    runners = {t: _Steady(em, t) for t, em in ems.items()}
    try:
        for r in runners.values():
            r.start()
        wait_for(lambda: all(em.stats()["sent"] >= 300 for em in ems.values()), 60, "delivery before the kill")
        srv.kill()
        killed_at = {t: r.n for t, r in runners.items()}
        time.sleep(20)  # the outage (20 s of events pile up behind the failing batch)
        srv.start()
        wait_for(lambda: all(em.stats()["sent"] > killed_at[t] for t, em in ems.items()), 90, "delivery after the restart")
        time.sleep(2)
        for r in runners.values():
            r.halt.set()
            r.join(10)
        for t, em in ems.items():
            assert em.flush(120), (t, em.stats())
        for t, em in ems.items():
            st = em.stats()
            assert st["retries"] > 0 and st["send_errors"] > 0, (t, st)  # the outage was seen
            assert st["undelivered"] == st["dropped_queue_full"] == st["rejected"] == 0, (t, st, errors[:5])
            assert st["drops_pending"] == st["drops_unreported"] == 0, (t, st)
            assert runners[t].n >= killed_at[t] + 20 * 150  # emitting went on through the outage
        for t, r in runners.items():
            _exactly_once(srv, t, r.n)
        # Shown with `pytest -s` (numbers for the record, not assertions).
        print({t: {"events": r.n, "at_kill": killed_at[t], "retries": ems[t].stats()["retries"]} for t, r in runners.items()})
    finally:
        for r in runners.values():
            r.halt.set()
        for em in ems.values():
            em.close(1)
        srv.stop()


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import sluice
    url, buf, start, stop, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    em = sluice.Emitter(http=url, buffer_dir=buf, retry_budget=600, on_error=lambda m, n: None)
    for i in range(start, stop):
        em.emit("BUFKILL", {"i": i})
    if mode == "deliver":
        ok = em.flush(120)
        st = em.stats()
        em.close(5)
        print(json.dumps({"ok": ok, **st}), flush=True)
    else:
        # Wait until every event is on disk (none left in memory), say so, and wait for SIGKILL.
        while em.stats()["queued"] or not em.stats()["buffered_bytes"]:
            time.sleep(0.01)
        print(json.dumps(em.stats()), flush=True)
        time.sleep(600)
    """
)


def _child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE, text=True)


def test_disk_buffer_survives_the_emitters_sigkill(tmp_path: Path):
    """A child emits with a disk buffer: 0..499 delivered, then the server goes down and
    500..999 wait on disk when the child is SIGKILLed. The server comes back; a new child on the
    same buffer directory sends those first, then 1000..1499: each event stored exactly once
    (the cursor keeps the delivered ones from being sent again)."""
    buf = str(tmp_path / "buf")
    srv = Server(tmp_path / "data")
    try:
        first = _child(srv.url, buf, "0", "500", "deliver")
        out, _ = first.communicate(timeout=180)
        st = json.loads(out.splitlines()[-1])
        assert first.returncode == 0 and st["ok"] and st["sent"] == 500, st
        srv.kill()
        second = _child(srv.url, buf, "500", "1000", "hold")
        assert second.stdout is not None
        line = second.stdout.readline()
        assert line, "the child died before buffering"
        held = json.loads(line)
        assert held["buffered_bytes"] > 0 and held["sent"] == 0, held
        second.send_signal(signal.SIGKILL)
        second.wait(30)
        segs = [p for p in os.listdir(buf) if p.startswith("seg-")]
        assert segs, os.listdir(buf)
        srv.start()
        third = _child(srv.url, buf, "1000", "1500", "deliver")
        out, _ = third.communicate(timeout=180)
        st = json.loads(out.splitlines()[-1])
        assert third.returncode == 0 and st["ok"], st
        assert st["sent"] == 1000 and st["buffered_bytes"] == 0, st  # 500 left behind + its own 500
        _exactly_once(srv, "BUFKILL", 1500)
    finally:
        srv.stop()


def test_disk_buffer_lock_cap_and_buffer_full_in_counts(tmp_path: Path):
    """One process per buffer directory; over its cap events are dropped as buffer_full; once the
    server answers, the buffer is delivered and the drops show as `client:buffer_full`."""
    ports = (free_port(), free_port(), free_port(socket.SOCK_DGRAM))
    srv = Server(tmp_path / "data", ports=ports, start=False)
    epoch = int(time.time())
    em = sluice.Emitter(http=srv.url, buffer_dir=str(tmp_path / "b"), buffer_max_bytes=2000, on_error=lambda m, n: None)
    try:
        with pytest.raises(ValueError, match="in use"):
            sluice.Emitter(http=srv.url, buffer_dir=str(tmp_path / "b"))
        for i in range(200):
            em.emit("CAP", {"i": i, "pad": "x" * 20}, epoch=epoch)
        wait_for(lambda: em.stats()["queued"] == 0 and em.stats()["dropped_buffer_full"] > 0, 30, "the cap")
        st = em.stats()
        assert 0 < st["buffered_bytes"] <= 2000 and 0 < st["dropped_buffer_full"] < 200, st
        assert st["drops_pending"] == st["dropped_buffer_full"]  # recorded, for when the server answers
        assert not em.flush(0.5)  # the server is down: the buffer holds them
        srv.start()
        assert em.flush(60)
        kept = 200 - st["dropped_buffer_full"]
        wait_for(lambda: em.stats()["drops_reported"] == st["dropped_buffer_full"], 60, "the buffer_full report")
        assert em.stats()["sent"] == kept and em.stats()["buffered_bytes"] == 0
        assert sorted(e["i"] for e in _wait_events(srv, "CAP", kept)) == list(range(kept))  # the first ones, in order
        wait_for(lambda: _counts(srv, epoch).get("CAP", {}).get("client:buffer_full") == 200 - kept, 60, "client:buffer_full")
    finally:
        em.close(1)
        srv.stop()
    # Closed: the directory is free again.
    sluice.Emitter(http=srv.url, buffer_dir=str(tmp_path / "b")).close(0.1)


def _wait_events(server: Server, type_: str, n: int) -> list:
    return wait_for(lambda: (lambda e: e if len(e) >= n else None)(server.events(type=type_)), 60, f"{n} {type_} events")


def _counts(server: Server, epoch: int) -> Dict[str, Dict[str, int]]:
    """`GET /v1/counts` of one second: type → its `dropped` map."""
    with urllib.request.urlopen(f"{server.url}/v1/counts?from={epoch}&to={epoch + 1}&dc=test", timeout=30) as r:
        rows = [json.loads(l) for l in r.read().splitlines() if l.strip()]
    return {row["type"]: row.get("dropped") or {} for row in rows}


def test_drops_reach_the_counts_as_client_reasons(tmp_path: Path):
    """retry_budget (server down, budget spent), queue_full, too_large (UDP, reported over
    drops_url): each shows in `GET /v1/counts` as `client:<reason>` for its (epoch, type)."""
    ports = (free_port(), free_port(), free_port(socket.SOCK_DGRAM))
    srv = Server(tmp_path / "data", ports=ports, start=False)
    epoch = int(time.time())
    try:
        # Down: 7 events spend a 0.3 s budget and are dropped as retry_budget.
        em = sluice.Emitter(http=srv.url, retry_budget=0.3, backoff=0.05, on_error=lambda m, n: None)
        for i in range(7):
            em.emit("DROPRB", {"i": i}, epoch=epoch)
        assert em.flush(30)
        st = em.stats()
        assert st["undelivered"] == 7 and st["drops_pending"] == 7 and st["retries"] > 0, st
        srv.start()
        em.emit("DROPRB", {"i": 7}, epoch=epoch)  # answered: the report follows
        wait_for(lambda: em.stats()["drops_reported"] == 7, 60, "the retry_budget report")
        em.close()

        # queue_full: the sender sleeps (60 s interval, huge batch) while the queue fills at 5.
        em = sluice.Emitter(http=srv.url, max_queue=5, batch_size=10**6, flush_interval=60)
        for i in range(9):
            em.emit("DROPQF", {"i": i}, epoch=epoch)
        assert em.stats()["dropped_queue_full"] == 4
        assert em.flush(30)
        wait_for(lambda: em.stats()["drops_reported"] == 4, 60, "the queue_full report")
        em.close()

        # too_large over UDP, reported to drops_url.
        em = sluice.Emitter(udp=srv.udp, drops_url=srv.url, max_datagram=1000, on_error=lambda m, n: None)
        em.emit("DROPTL", {"big": "x" * 5000}, epoch=epoch)
        em.emit("DROPTL", {"small": 1}, epoch=epoch)
        assert em.flush(30)
        wait_for(lambda: em.stats()["drops_reported"] == 1, 60, "the too_large report")
        em.close()

        def seen() -> Dict[str, Dict[str, int]]:
            c = _counts(srv, epoch)
            want = {"DROPRB": ("client:retry_budget", 7), "DROPQF": ("client:queue_full", 4), "DROPTL": ("client:too_large", 1)}
            return c if all(c.get(t, {}).get(r) == n for t, (r, n) in want.items()) else {}

        wait_for(seen, 60, "client drops in /v1/counts")
    finally:
        srv.stop()


def test_forked_child_does_not_share_the_disk_buffer(shared_server: Server, tmp_path: Path):
    """The directory stays the parent's (one writer); the child sends from memory."""
    em = sluice.Emitter(http=shared_server.url, buffer_dir=str(tmp_path / "fb"))
    pid = os.fork()
    if pid == 0:  # child: must never return into pytest
        code = 1
        try:
            for i in range(50):
                em.emit("FORKBUF", {"who": "child", "i": i})
            ok = em.flush(30)
            st = em.stats()
            code = 0 if ok and st["sent"] == 50 and st["buffered_bytes"] == 0 else 2
            em.close(5)
        finally:
            os._exit(code)
    for i in range(50):
        em.emit("FORKBUF", {"who": "parent", "i": i})
    assert em.flush(30)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    em.close()
    evs = _wait_events(shared_server, "FORKBUF", 100)
    assert sorted((e["who"], e["i"]) for e in evs) == sorted([(w, i) for w in ("child", "parent") for i in range(50)])


def test_a_payload_the_server_refuses_is_reported_rejected(tmp_path: Path):
    """A whole payload refused with a 4xx (here 413: over the server's max_body_bytes) is not
    retried; its events show in the counts as `client:rejected`."""
    cfg = tmp_path / "small.toml"
    cfg.write_text("max_body_bytes = 4096\n")
    srv = Server(tmp_path / "data", "--config", str(cfg))
    epoch = int(time.time())
    try:
        em = sluice.Emitter(http=srv.url, on_error=lambda m, n: None)
        for i in range(100):
            em.emit("DROPREJ", {"i": i, "pad": "y" * 100}, epoch=epoch)  # ~12 KB in one payload
        assert em.flush(30)
        wait_for(lambda: em.stats()["drops_reported"] == 100, 60, "the rejected report")
        st = em.stats()
        assert st["rejected"] == 100 and st["retries"] == 0 and st["sent"] == 0, st
        em.close()
        wait_for(lambda: _counts(srv, epoch).get("DROPREJ", {}).get("client:rejected") == 100, 60, "client:rejected")
    finally:
        srv.stop()
