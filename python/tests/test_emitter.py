"""sluice.Emitter against a real `sluice serve` (UDP, TCP, HTTP), a server that is down, fork()."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

import sluice
from conftest import Server, free_port, wait_for


def _read_back(server: Server, type_: str, n: int) -> list:
    """The server's events of `type_`, once `n` of them are stored (a second is stored about
    `grace` seconds after it ends)."""
    return wait_for(lambda: (lambda evs: evs if len(evs) >= n else None)(server.events(type=type_)), 60, f"{n} {type_} events")


@pytest.mark.parametrize("transport", ["udp", "tcp", "http"])
def test_emit_reaches_the_server(shared_server: Server, transport: str):
    target = {"udp": shared_server.udp, "tcp": shared_server.tcp, "http": shared_server.url}[transport]
    type_ = f"T{transport.upper()}"
    n = 3000
    with sluice.Emitter(dc="ams1", batch_size=500, **{transport: target}) as em:
        for i in range(n):
            em.emit(type_, {"i": i, "path": f"/p/{i % 7}", "ms": i / 8, "type": "ignored", "tags": ["x", i]}, subtype="sub")
        assert em.flush(30)
        st = em.stats()
    assert st["sent"] == n and st["emitted"] == n
    assert st["undelivered"] == st["invalid"] == st["dropped_queue_full"] == 0
    assert st["payloads"] > (1 if transport == "udp" else 0)  # UDP: many events per datagram, several datagrams
    evs = _read_back(shared_server, type_, n)
    assert sorted(e["i"] for e in evs) == list(range(n))  # each exactly once
    e = evs[0]
    assert e["type"] == type_ and e["subtype"] == "sub" and e["dc"] == "ams1" and isinstance(e["epoch"], int)
    assert e["path"].startswith("/p/") and e["tags"][0] == "x"


def test_tags_epoch_and_default_dc(shared_server: Server):
    epoch = int(time.time()) - 30
    with sluice.Emitter(http=shared_server.url) as em:
        em.emit("TAGS", {"k": 1}, epoch=epoch)
        em.emit("TAGS", {"k": 2, "epoch": 5, "dc": "zz"})  # the event's own tag keys are replaced
    evs = _read_back(shared_server, "TAGS", 2)
    by_k = {e["k"]: e for e in evs}
    assert by_k[1]["epoch"] == epoch
    assert by_k[1]["dc"] == "test" and by_k[2]["dc"] == "test"  # the server's --dc
    assert by_k[2]["epoch"] != 5


def test_epoch_as_people_write_it(shared_server: Server):
    """Whole seconds by default; milliseconds, float seconds and RFC 3339 go as given and are
    stored as whole seconds."""
    e = int(time.time()) - 60
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e))
    with sluice.Emitter(http=shared_server.url) as em:
        em.emit("EPOCHS", {"k": "ms"}, epoch=e * 1000 + 999)
        em.emit("EPOCHS", {"k": "float"}, epoch=e + 0.75)
        em.emit("EPOCHS", {"k": "rfc3339"}, epoch=iso)
        em.emit("EPOCHS", {"k": "int"}, epoch=e)
        assert em.flush(30)
        assert em.stats()["sent"] == 4, em.stats()
    assert {ev["k"]: ev["epoch"] for ev in _read_back(shared_server, "EPOCHS", 4)} == dict.fromkeys(["ms", "float", "rfc3339", "int"], e)


def test_bad_events_are_dropped_and_counted(shared_server: Server):
    errors = []
    with sluice.Emitter(http=shared_server.url, on_error=lambda m, n: errors.append((m, n))) as em:
        em.emit("BAD", {"ok": 1})
        em.emit("BAD", {"obj": object()})       # not encodable
        em.emit("BAD", ["not", "a", "dict"])     # type: ignore[arg-type]
        em.emit("BA:D", {"x": 1})                # bad type
        em.emit("BAD", {"x": 1}, subtype="a|b")  # bad subtype
        em.emit("BAD", {"x": 1}, epoch=[5])      # type: ignore[arg-type]  # not an epoch at all
        em.emit("BAD", {"x": 1}, epoch="soon")   # a string the collector cannot read: rejected
        em.emit("BAD", {"big": "x" * 100_000})   # over the collector's event limit: rejected
        assert em.flush(30)
        st = em.stats()
    assert st["invalid"] == 5 and st["sent"] == 1 and st["rejected"] == 2
    assert sum(n for _, n in errors) == 7
    assert [e["ok"] for e in _read_back(shared_server, "BAD", 1)] == [1]


def test_udp_drops_events_too_big_for_a_datagram(shared_server: Server):
    with sluice.Emitter(udp=shared_server.udp, max_datagram=1000, on_error=lambda m, n: None) as em:
        em.emit("UDPBIG", {"blob": "x" * 5000})
        for i in range(50):
            em.emit("UDPBIG", {"i": i, "pad": "y" * 100})
        assert em.flush(30)
        st = em.stats()
    assert st["oversized"] == 1 and st["sent"] == 50 and st["payloads"] >= 6
    assert len(_read_back(shared_server, "UDPBIG", 50)) == 50


def test_queue_full_drops_newest_and_counts(shared_server: Server):
    em = sluice.Emitter(udp=shared_server.udp, max_queue=10, batch_size=10_000, flush_interval=60)
    try:
        # The sender only wakes every 60 s or at 10k events: the queue fills at 10.
        for i in range(25):
            em.emit("FULL", {"i": i})
        st = em.stats()
        assert st["queued"] + st["emitted"] <= 10 and st["dropped_queue_full"] >= 15
    finally:
        em.close()


def _emit_calls_return(em: sluice.Emitter, n: int) -> None:
    for i in range(n):
        em.emit("DOWN", {"i": i})


@pytest.mark.parametrize("transport", ["udp", "tcp", "http"])
def test_server_down_emit_stays_non_blocking(transport: str):
    port = free_port(socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM)
    target = {"udp": f"127.0.0.1:{port}", "tcp": f"127.0.0.1:{port}", "http": f"http://127.0.0.1:{port}"}[transport]
    lost = []
    em = sluice.Emitter(retries=2, backoff=0.01, timeout=1, on_error=lambda m, n: lost.append(n), **{transport: target})
    # emit() returns while nothing listens (it only queues): run it in a thread and require
    # that it finishes; the bounded wait is a hang detector, not a timing assertion.
    t = threading.Thread(target=_emit_calls_return, args=(em, 20_000))
    t.start()
    t.join(60)
    assert not t.is_alive()
    em.flush(30)
    st = em.stats()
    em.close(5)
    st = em.stats()
    if transport == "udp":
        # Datagrams to a closed port may or may not be reported by the kernel: nothing blocks,
        # nothing raises, and every event is accounted for.
        assert st["sent"] + st["undelivered"] == 20_000
    else:
        assert st["sent"] == 0 and st["undelivered"] == 20_000 and st["retries"] > 0
        assert sum(lost) == 20_000


def test_server_down_then_up_tcp_delivers_after_retry(tmp_path):
    """An acknowledged transport retries until the collector comes back."""
    http_port, tcp_port = free_port(), free_port()
    em = sluice.Emitter(tcp=f"127.0.0.1:{tcp_port}", retries=10_000, backoff=0.05, max_backoff=0.2, timeout=2)
    em.emit("LATE", {"i": 1})
    em.emit("LATE", {"i": 2})
    wait_for(lambda: em.stats()["retries"] > 0, 30, "a failed first attempt")

    class Fixed(Server):
        def __init__(self, data):  # the ports the emitter already uses
            self.data = data
            self.http_port, self.tcp_port, self.udp_port = http_port, tcp_port, free_port(socket.SOCK_DGRAM)
            self.url = f"http://127.0.0.1:{http_port}"
            self.tcp, self.udp = f"127.0.0.1:{tcp_port}", f"127.0.0.1:{self.udp_port}"
            import subprocess
            from conftest import sluice_bin
            self.log = open(tmp_path / "late.log", "wb")
            self.proc = subprocess.Popen(
                [sluice_bin(), "serve", "--data", str(data), "--http", f"127.0.0.1:{http_port}", "--tcp", self.tcp, "--udp", self.udp],
                stdout=self.log, stderr=subprocess.STDOUT,
            )
            wait_for(self.healthy, 60, "server")

    srv = Fixed(tmp_path / "data")
    try:
        assert em.flush(60)
        assert em.stats()["sent"] == 2
        assert sorted(e["i"] for e in _read_back(srv, "LATE", 2)) == [1, 2]
    finally:
        em.close(1)
        srv.stop()


def test_fork_safety(shared_server: Server):
    """Created before fork(), used in both processes: the child has its own queue and sender,
    the parent's queued events are sent once (by the parent)."""
    em = sluice.Emitter(http=shared_server.url, flush_interval=60, batch_size=100_000)
    em.emit("FORK", {"who": "parent-before", "i": 0})  # queued, not yet sent at fork time
    assert em.stats()["queued"] == 1
    pid = os.fork()
    if pid == 0:  # child: must never return into pytest
        code = 1
        try:
            assert em.stats()["queued"] == 0
            for i in range(100):
                em.emit("FORK", {"who": "child", "i": i})
            code = 0 if em.flush(30) and em.stats()["sent"] == 100 else 2
            em.close(5)
        finally:
            os._exit(code)
    for i in range(1, 100):
        em.emit("FORK", {"who": "parent", "i": i})
    assert em.flush(30)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    em.close()
    evs = _read_back(shared_server, "FORK", 200)
    assert len(evs) == 200
    assert sorted(e["i"] for e in evs if e["who"] == "child") == list(range(100))
    assert sorted(e["i"] for e in evs if e["who"] != "child") == list(range(100))


def test_closed_emitter_drops_and_counts(shared_server: Server):
    em = sluice.Emitter(udp=shared_server.udp)
    em.close()
    em.emit("X", {})
    assert em.stats()["dropped_closed"] == 1


def test_constructor_validates():
    with pytest.raises(ValueError):
        sluice.Emitter()
    with pytest.raises(ValueError):
        sluice.Emitter(udp="a:1", tcp="b:2")
    with pytest.raises(ValueError):
        sluice.Emitter(udp="nocolon")
    with pytest.raises(ValueError):
        sluice.Emitter(http="ftp://x")
    with pytest.raises(ValueError):
        sluice.Emitter(udp="127.0.0.1:1", dc="a:b")
    with pytest.raises(ValueError):
        sluice.Emitter(udp="127.0.0.1:1", compress="lz4")


@pytest.mark.parametrize("compress", ["zstd", "zlib", "snappy"])
def test_compressed_payloads(shared_server: Server, compress: str):
    type_ = f"Z{compress.upper()}"
    with sluice.Emitter(tcp=shared_server.tcp, compress=compress) as em:
        for i in range(500):
            em.emit(type_, {"i": i, "text": "the same words again " * 5})
        assert em.flush(30)
        assert em.stats()["sent"] == 500
    assert len(_read_back(shared_server, type_, 500)) == 500


def test_many_threads_emitting(shared_server: Server):
    with sluice.Emitter(http=shared_server.url) as em:
        def work(t: int) -> None:
            for i in range(2000):
                em.emit("THREADS", {"t": t, "i": i})

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert em.flush(30)
        assert em.stats()["sent"] == 8000
    evs = _read_back(shared_server, "THREADS", 8000)
    assert sorted((e["t"], e["i"]) for e in evs) == [(t, i) for t in range(4) for i in range(2000)]
