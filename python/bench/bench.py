"""`make bench-python`: sluice.sereal dumps/loads against orjson and the standard json module on
the same events, and the cost of Emitter.emit() on the calling thread. Targets, not tests:

- dumps / loads: within 1.5x of orjson, at least 5x the standard library;
- emit(): at most 5 us per event on the calling thread at 100k events/s.

Events: `sluice gen` (realistic WEB / CRON / LB events), or a built-in generator without the
binary. Each codec row is the best of several runs in process CPU time (the machine is shared
and noisy); the emit() rows are wall time on the calling thread.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, List

import sluice
from sluice.sereal import dumps, loads

try:
    import orjson
except ImportError:  # the table says so
    orjson = None

ROOT = Path(__file__).resolve().parents[2]
N_EVENTS = int(os.environ.get("BENCH_EVENTS", "10000"))


def events(n: int) -> List[dict]:
    for p in (os.environ.get("SLUICE_BIN"), ROOT / "target/release/sluice", ROOT / "target/debug/sluice"):
        if p and Path(p).exists():
            out = subprocess.run([str(p), "gen", "--count", str(n)], capture_output=True, check=True).stdout
            return [json.loads(l) for l in out.splitlines()]
    return [
        {"epoch": 1_700_000_000 + i // 1000, "dc": "ams1", "type": "WEB", "subtype": "www", "status": 200,
         "path": f"/hotel/{i % 97}.html", "timings": {"total_ms": i * 0.37, "db_ms": 3.5}, "is_bot": False,
         "user_id": None, "experiments": [{"id": 4000 + i % 7, "variant": i % 3}], "request_id": f"{i:016x}"}
        for i in range(n)
    ]


def best(f: Callable[[], Any], repeat: int = 7, min_time: float = 0.2) -> float:
    """CPU seconds per call of `f`, best of `repeat` rounds of at least `min_time` each.

    Process CPU time, not wall time: the calls are single-threaded, and on this shared machine
    wall time also counts the time other jobs hold the CPU (3x at a load of 15 on 2 cores)."""
    clock = time.process_time
    loops = 1
    while True:
        t = clock()
        for _ in range(loops):
            f()
        dt = clock() - t
        if dt >= min_time:
            break
        loops *= 2
    times = [dt / loops]
    for _ in range(repeat - 1):
        t = clock()
        for _ in range(loops):
            f()
        times.append((clock() - t) / loops)
    return min(times)


def _each(fn: Callable[[Any], Any], items: List[Any]) -> None:
    # Results are dropped as they come (keeping 10k outputs alive made orjson's per-call
    # numbers 10x worse here, through allocator behaviour, not its own work).
    for x in items:
        fn(x)


def codec_rows(evs: List[dict]) -> List[tuple]:
    rows = []
    enc = {
        "sluice.sereal": lambda o: dumps(o),
        "orjson": (lambda o: orjson.dumps(o)) if orjson else None,
        "json": lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode(),
    }
    dec = {"sluice.sereal": loads, "orjson": orjson.loads if orjson else None, "json": json.loads}
    for shape, payload in (("one event per call", None), (f"{len(evs)} events in one array", evs)):
        for op, fns in (("dumps", enc), ("loads", dec)):
            res = {}
            for name, fn in fns.items():
                if fn is None:
                    res[name] = None
                    continue
                if op == "dumps":
                    if payload is None:
                        res[name] = best(lambda: _each(fn, evs), repeat=5) / len(evs)
                    else:
                        res[name] = best(lambda: fn(payload), repeat=5) / len(evs)
                else:
                    if payload is None:
                        docs = [enc[name](e) for e in evs]
                        res[name] = best(lambda: _each(fn, docs), repeat=5) / len(evs)
                    else:
                        doc = enc[name](payload)
                        assert fn(doc) == json.loads(json.dumps(evs))
                        res[name] = best(lambda: fn(doc), repeat=5) / len(evs)
            rows.append((f"{op}, {shape}", res))
    return rows


def emit_rows(evs: List[dict]) -> List[tuple]:
    """Time spent inside emit() on the calling thread, paced at 100k events/s, with the sender
    thread encoding and sending (UDP to a local socket that is never read: the kernel drops what
    overflows, which costs the sender nothing extra)."""
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    addr = f"127.0.0.1:{sink.getsockname()[1]}"
    rows = []
    for label, rate, seconds in (("paced 100k events/s, 2 s", 100_000, 2.0), ("unpaced, 200k events", None, None)):
        em = sluice.Emitter(udp=addr, max_queue=1_000_000)
        total = 200_000 if rate is None else int(rate * seconds)
        burst = 1000
        inside = 0.0
        start = time.perf_counter()
        n = 0
        while n < total:
            t0 = time.perf_counter()
            for i in range(burst):
                em.emit("WEB", evs[(n + i) % len(evs)])
            inside += time.perf_counter() - t0
            n += burst
            if rate is not None:
                # Sleep until this burst's slot: the pacing keeps the offered rate at `rate`.
                ahead = start + n / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        wall = time.perf_counter() - start
        em.flush(60)
        st = em.stats()
        em.close()
        rows.append((label, inside / total, total / wall, st))
    sink.close()
    return rows


def main() -> None:
    evs = events(N_EVENTS)
    ndjson_bytes = sum(len(json.dumps(e, separators=(",", ":"))) for e in evs)
    print(f"sluice Python bench: {len(evs)} events from `sluice gen` ({ndjson_bytes / len(evs):.0f} B/event as JSON), "
          f"Python {sys.version.split()[0]}, orjson {getattr(orjson, '__version__', 'missing')}")
    print()
    print("| case | sluice.sereal | orjson | json | vs orjson (target >= 0.67x) | vs json (target >= 5x) |")
    print("|---|---|---|---|---|---|")
    for label, r in codec_rows(evs):
        ours = r["sluice.sereal"]
        def us(x):
            return "n/a" if x is None else f"{x * 1e6:.2f} us/event"
        vs_orjson = "n/a" if r["orjson"] is None else f"{r['orjson'] / ours:.2f}x"
        print(f"| {label} | {us(ours)} | {us(r['orjson'])} | {us(r['json'])} | {vs_orjson} | {r['json'] / ours:.2f}x |")
    print()
    print("| emit() on the calling thread | us/event inside emit() (target <= 5) | offered events/s | sent | dropped |")
    print("|---|---|---|---|---|")
    for label, per, rate, st in emit_rows(evs):
        dropped = st["dropped_queue_full"] + st["invalid"] + st["undelivered"]
        print(f"| {label} | {per * 1e6:.2f} | {rate:,.0f} | {st['sent']:,} | {dropped:,} |")


if __name__ == "__main__":
    main()
