#!/usr/bin/env python3
"""bench/alerts: the alert engine's two targets (issue "Alerts"), on a real `sluice serve`
(release build) with a real webhook receiver on loopback.

1. Event -> notification: a 5xx event for a new path every 0.7 s; a rule `for 0`, window 1 s,
   one alert per path. Per event: from its emit to the webhook's arrival, and from the end of its
   second (when its step ends and `for` 0 has passed) to the arrival. Target: p99 <= 2 s after the
   `for` period ends. Anchor in the same run: emit -> readable through `GET /v1/events` (the flush
   every alert waits for), so the verdict is the engine's own share beside it.
2. Cost: 1,000 rules over one rollup of 50 groups (paths) fed 1,000 events/s, 10 distinct windows,
   thresholds varied. The engine's own time (`sluice_alert_evaluation_seconds_total`) over 60 s
   as a share of one core, and the server's whole CPU (utime + stime) with and without the rules
   as the anchor. Target: <= 5 % of one core.

Run: `make bench-alerts` (writes bench/alerts/RESULTS.md).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SLUICE_BIN", str(ROOT / "target/release/sluice"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver(http.server.BaseHTTPRequestHandler):
    arrivals: list = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        t = time.time()
        self.send_response(200)
        self.end_headers()
        try:
            for a in json.loads(body).get("alerts", []):
                if a.get("status") == "firing":
                    Receiver.arrivals.append((a["labels"].get("path"), t))
        except ValueError:
            pass

    def log_message(self, *args: object) -> None:
        pass


class Server:
    def __init__(self, data: Path, hook: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = data
        self.proc = subprocess.Popen(
            [BIN, "serve", "--data", str(data), "--http", f"127.0.0.1:{self.port}", "--tcp", "off", "--udp", "off",
             "--columns", "off", "--alert-webhook", hook],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(300):
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("sluice serve did not start")

    def admin(self) -> str:
        return (self.data / "admin.secret").read_text().strip()

    def call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.admin()}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            return json.loads(raw) if raw else None

    def post(self, lines: list) -> None:
        req = urllib.request.Request(self.url + "/v1/events", data="\n".join(lines).encode(), method="POST")
        urllib.request.urlopen(req, timeout=30).read()

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[-1])
        raise SystemExit(f"metric {name} missing")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def pct(xs: list, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def latency(work: Path, hook_url: str) -> dict:
    s = Server(work / "lat", hook_url)
    try:
        s.call("POST", "/v1/rollups", {"name": "web", "type": "WEB", "group_by": ["path"],
                                       "agg": ["count", "count_if:status >= 500"], "step": "1s"})
        s.call("POST", "/v1/alerts", {"name": "any-5xx", "rollup": "web", "by": ["path"],
                                      "expr": "sum(count where status >= 500) > 0", "samples": 1})
        time.sleep(2)
        sent = {}
        readable = []
        for i in range(60):
            path = f"/p{i}"
            t = time.time()
            sent[path] = t
            s.post([json.dumps({"epoch": int(t), "type": "WEB", "path": path, "status": 500})])
            # The anchor: the same event readable (its second flushed).
            while True:
                q = urllib.parse.urlencode({"from": int(t), "to": int(t) + 1, "type": "WEB",
                                            "where": f'path == "{path}"'})
                with urllib.request.urlopen(f"{s.url}/v1/events?{q}", timeout=10) as r:
                    if any(l.strip() and not l.startswith(b'{"_sluice"') for l in r.read().splitlines()):
                        readable.append(time.time() - t)
                        break
                time.sleep(0.02)
            time.sleep(max(0.0, 0.7 - (time.time() - t)))
        deadline = time.time() + 30
        while time.time() < deadline and len({p for p, _ in Receiver.arrivals}) < len(sent):
            time.sleep(0.1)
        got = {p: t for p, t in Receiver.arrivals if p in sent}
        missing = len(sent) - len(got)
        emit = [got[p] - sent[p] for p in got]
        after_for = [got[p] - (int(sent[p]) + 1) for p in got]
        return {"n": len(got), "missing": missing, "emit_p50": pct(emit, 50), "emit_p99": pct(emit, 99),
                "for_p50": pct(after_for, 50), "for_p99": pct(after_for, 99),
                "readable_p50": pct(readable, 50), "readable_p99": pct(readable, 99)}
    finally:
        s.stop()


def cost(work: Path, hook_url: str, rules: int, seconds: int = 60) -> dict:
    s = Server(work / f"cost{rules}", hook_url)
    stop = threading.Event()
    try:
        s.call("POST", "/v1/rollups", {"name": "web", "type": "WEB", "group_by": ["path"],
                                       "agg": ["count", "count_if:status >= 500", "p95:ms"], "step": "1s"})
        windows = ["1s", "2s", "5s", "10s", "15s", "30s", "1m", "2m", "5m", "10m"]
        for i in range(rules):
            s.call("POST", "/v1/alerts", {
                "name": f"r{i}", "rollup": "web", "by": ["path"], "window": windows[i % len(windows)],
                "expr": f"sum(count where status >= 500) / sum(count) > {0.5 + (i % 97) / 200}",
                "min_count": 10})

        def feed() -> None:
            n = 0
            while not stop.is_set():
                t = int(time.time())
                lines = [json.dumps({"epoch": t, "type": "WEB", "path": f"/g{(n + k) % 50}",
                                     "status": 500 if (n + k) % 13 == 0 else 200, "ms": k % 300})
                         for k in range(250)]
                n += 250
                try:
                    s.post(lines)
                except OSError:
                    pass
                time.sleep(0.25)

        threading.Thread(target=feed, daemon=True).start()
        time.sleep(15)  # warm: windows full, feeds filled
        e0, c0, t0 = s.metric("sluice_alert_evaluation_seconds_total"), s.cpu(), time.time()
        n0 = s.metric("sluice_alert_evaluations_total")
        time.sleep(seconds)
        e1, c1, t1 = s.metric("sluice_alert_evaluation_seconds_total"), s.cpu(), time.time()
        n1 = s.metric("sluice_alert_evaluations_total")
        return {"rules": rules, "engine_share": (e1 - e0) / (t1 - t0), "server_share": (c1 - c0) / (t1 - t0),
                "evaluations_per_s": (n1 - n0) / (t1 - t0)}
    finally:
        stop.set()
        s.stop()


def main() -> None:
    Receiver.arrivals = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-alerts-"))
    try:
        lat = latency(work, hook)
        base = cost(work, hook, 0)
        full = cost(work, hook, 1000)
    finally:
        httpd.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    lines = [
        "# bench/alerts — results",
        "",
        f"`make bench-alerts` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, release build, "
        f"2 shared cores (load average {load:.2f} at the end).",
        "",
        "## Event → notification (webhook on loopback, rule `for 0`, window 1 s, step 1 s)",
        "",
        "| measure | p50 | p99 | target | anchor in the same run (emit → readable, p50 / p99) | verdict |",
        "|---|---|---|---|---|---|",
        f"| after the `for` period ends (end of the event's second) → webhook | {lat['for_p50']:.2f} s | {lat['for_p99']:.2f} s | ≤ 2 s | — | "
        f"{'met' if lat['for_p99'] <= 2 else 'MISSED'} |",
        f"| emit → webhook | {lat['emit_p50']:.2f} s | {lat['emit_p99']:.2f} s | — | {lat['readable_p50']:.2f} / {lat['readable_p99']:.2f} s | "
        f"{lat['emit_p99'] / max(lat['readable_p99'], 1e-9):.2f}× the anchor's p99 |",
        "",
        f"{lat['n']} events, {lat['missing']} without a notification within 30 s.",
        "",
        "## Cost: 1,000 rules over 50 groups (one rollup, 1,000 events/s, 10 distinct windows)",
        "",
        "| rules | engine time / wall time (share of one core) | server CPU / wall time | evaluations/s | target | verdict |",
        "|---|---|---|---|---|---|",
        f"| 0 (anchor) | {base['engine_share'] * 100:.2f} % | {base['server_share'] * 100:.1f} % | {base['evaluations_per_s']:.0f} | — | — |",
        f"| 1,000 | {full['engine_share'] * 100:.2f} % | {full['server_share'] * 100:.1f} % | {full['evaluations_per_s']:.0f} | ≤ 5 % of one core | "
        f"{'met' if full['engine_share'] <= 0.05 else 'MISSED'} (server CPU {full['server_share'] / max(base['server_share'], 1e-9):.2f}× the anchor's) |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    (ROOT / "bench/alerts/RESULTS.md").write_text(text)


if __name__ == "__main__":
    sys.exit(main())
