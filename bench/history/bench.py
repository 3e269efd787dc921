#!/usr/bin/env python3
"""`make bench-history`: Sluice's history queries beside VictoriaLogs, in one run, same client.

Both servers get the same `sluice gen` events (400 k by default, seed 7) over HTTP from this
one Python client, in batches of 10 k. Each row is the server's CPU (utime + stime from
/proc/PID/stat, all threads) around the same work; queries are the median of 5 runs. Sluice is
read twice: through its column files (the default read) and through its blobs (`columns=off`).
The columns writer's own CPU is its thread's (named `columns`), read from /proc/PID/task.

Not a test: nothing is asserted on time. Row counts are compared between the servers and a
mismatch is printed as MISMATCH. The table goes to stdout and to bench/history/RESULTS.md.

Environment: SLUICE_BENCH_EVENTS (default 400000), SLUICE_BIN (default target/release/sluice).
"""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLUICE = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "target", "release", "sluice"))
EVENTS = int(os.environ.get("SLUICE_BENCH_EVENTS", "400000"))
BATCH = 10_000
RUNS = 5
TICK = os.sysconf("SC_CLK_TCK")
TIMEOUT = 600


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ms(pid, tid=None):
    """utime + stime of a process (or one of its threads), in ms."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICK


def thread_named(pid, name):
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == name:
                    return tid
        except OSError:
            pass
    return None


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return r.read()


def wait_http(url, what):
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            http("GET", url)
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"bench-history: {what} did not start ({url})")


def du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def metric(base, name):
    for line in http("GET", base + "/metrics").decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    sys.exit(f"bench-history: metric {name} missing")


class Server:
    def __init__(self, argv, log):
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def cpu(self):
        return cpu_ms(self.proc.pid)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def measure(server, work, runs=RUNS):
    """Median server CPU ms and wall ms of `work()`, and its last result."""
    cpu, wall, out = [], [], None
    for _ in range(runs):
        c0, t0 = server.cpu(), time.perf_counter()
        out = work()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append(server.cpu() - c0)
    return statistics.median(cpu), statistics.median(wall), out


def ndjson_rows(body):
    return [l for l in body.decode().splitlines() if l and not l.startswith('{"_sluice"')]


def main():
    vl_bin = subprocess.check_output([os.path.join(ROOT, "scripts", "victorialogs.sh"), "path"]).decode().strip()
    work = tempfile.mkdtemp(prefix="sluice-bench-history-")
    try:
        run(vl_bin, work)
    finally:
        if not os.environ.get("SLUICE_KEEP_TEMP"):
            shutil.rmtree(work, ignore_errors=True)


def run(vl_bin, work):
    now = int(time.time())
    # 400 k events over 400 s inside the previous hour: a closed hour, so Sluice's columns are
    # the merged hour files a day of history is made of (not minute parts).
    rate = max(1, EVENTS // 400)
    start = now - now % 3600 - 3600 + 600
    gen = subprocess.check_output(
        [SLUICE, "gen", "--count", str(EVENTS), "--seed", "7", "--rate", str(rate), "--epoch", str(start)]
    )
    lines = gen.splitlines(keepends=True)
    events = [json.loads(l) for l in lines]
    end = max(e["epoch"] for e in events) + 1
    batches = [b"".join(lines[i : i + BATCH]) for i in range(0, len(lines), BATCH)]
    errors = [e for e in events if isinstance(e.get("status"), int) and e["status"] >= 500]
    needle = events[len(events) // 2].get("request_id") or next(e["request_id"] for e in events if "request_id" in e)
    second = events[len(events) // 2]["epoch"]
    one_second = sum(1 for e in events if e["epoch"] == second)
    statuses = len({e.get("status") for e in events})
    print(f"{len(events)} events, {len(errors)} with status >= 500, {statuses} statuses, one second = {one_second} events")

    # VictoriaLogs.
    vl_port = free_port()
    vl_dir = os.path.join(work, "vl")
    vl = Server(
        [vl_bin, f"-storageDataPath={vl_dir}", f"-httpListenAddr=127.0.0.1:{vl_port}", "-retentionPeriod=100y"],
        os.path.join(work, "vl.log"),
    )
    vl_base = f"http://127.0.0.1:{vl_port}"
    wait_http(vl_base + "/health", "VictoriaLogs")
    # Sluice with its defaults (parts every minute, hours merged once closed).
    sl_port = free_port()
    data = os.path.join(work, "sluice")
    config = os.path.join(work, "sluice.toml")
    with open(config, "w") as f:
        f.write(f'data_dir = "{data}"\nhttp = "127.0.0.1:{sl_port}"\ntcp = "off"\nudp = "off"\n')
    sl = Server([SLUICE, "serve", "--config", config], os.path.join(work, "sluice.log"))
    sl_base = f"http://127.0.0.1:{sl_port}"
    wait_http(sl_base + "/healthz", "sluice serve")
    try:
        rows = bench(vl, vl_base, vl_dir, sl, sl_base, data, batches, len(events), start, end, needle, second,
                     len(errors), one_second, statuses)
    finally:
        vl.stop()
        sl.stop()
    report(rows, len(events))


def vl_query(base, q, start, end):
    params = urllib.parse.urlencode({"query": q, "start": str(start), "end": str(end)})
    return [l for l in http("GET", f"{base}/select/logsql/query?{params}").decode().splitlines() if l]


def sl_query(base, params):
    return ndjson_rows(http("GET", f"{base}/v1/events?{params}"))


def bench(vl, vl_base, vl_dir, sl, sl_base, data, batches, n, start, end, needle, second, n_errors, one_second,
          statuses):
    rows = []
    # Ingest: the same client, the same batches; CPU until each server has everything stored.
    c0 = vl.cpu()
    for b in batches:
        http("POST", vl_base + "/insert/jsonline?_stream_fields=dc,type,subtype&_time_field=epoch&_msg_field=path",
             b, {"Content-Type": "application/stream+json"})
    http("GET", vl_base + "/internal/force_flush")
    vl_ingest = vl.cpu() - c0
    c0 = sl.cpu()
    for b in batches:
        http("POST", sl_base + "/v1/events", b, {"Content-Type": "application/x-ndjson"})
    deadline = time.time() + 120
    while metric(sl_base, "sluice_events_flushed_total") < n:
        if time.time() > deadline:
            sys.exit("bench-history: sluice did not store every event")
        time.sleep(0.1)
    sl_ingest = sl.cpu() - c0
    # The columns catch up: the closed hour ends as one merged file per (dc, type), its parts
    # gone. The writer's CPU is its thread's (parts, then the hour merge: each event twice).
    deadline = time.time() + 600
    while True:
        st = json.loads(subprocess.check_output(
            [SLUICE, "columns", "status", "--json", "--data", data, "--from", str(start), "--to", str(end)]))
        if st["rows"] == n and st["parts"] == 0:
            break
        if time.time() > deadline:
            sys.exit(f"bench-history: the columns did not catch up: {st}")
        time.sleep(0.5)
    tid = thread_named(sl.proc.pid, "columns")
    columns_cpu = cpu_ms(sl.proc.pid, tid) if tid else None
    written = metric(sl_base, "sluice_columns_rows_written_total")
    rows.append(("ingest, events per server CPU-second", n / (vl_ingest / 1000), n / (sl_ingest / 1000), None,
                 "≥ 3× cheaper than VL", "higher is better"))
    if columns_cpu:
        rows.append(("writing columns, events per CPU-second (its thread)", None, None, n / (columns_cpu / 1000),
                     "≥ 300 k", f"{100 * columns_cpu / sl_ingest:.0f} % added to ingest CPU (target ≤ 25 %); "
                                f"{written:.0f} rows written for {n} events (minute parts, then the hour)"))
    # Disk: VictoriaLogs after a merge; Sluice's store (blobs + indexes) and columns apart.
    try:
        http("GET", vl_base + "/internal/force_merge")
    except OSError:
        pass
    time.sleep(2)
    store_bytes = du(data) - du(os.path.join(data, "wal")) - du(os.path.join(data, "columns")) - du(
        os.path.join(data, "spool"))
    rows.append(("disk, bytes per event", du(vl_dir) / n, store_bytes / n, du(os.path.join(data, "columns")) / n,
                 "columns ≤ 0.8× VL", "lower is better; Sluice blobs exclude the WAL"))

    def row(name, target, vl_q, sl_params, expect):
        vl_cpu, _, vl_out = measure(vl, lambda: vl_query(vl_base, vl_q, start, end))
        bl_cpu, _, bl_out = measure(sl, lambda: sl_query(sl_base, sl_params + "&columns=off"))
        co_cpu, _, co_out = measure(sl, lambda: sl_query(sl_base, sl_params))
        counts = (len(vl_out), len(bl_out), len(co_out))
        note = f"rows {counts[0]} / {counts[1]} / {counts[2]}"
        if not (counts[0] == counts[1] == counts[2] == expect):
            note += f" MISMATCH (expected {expect})"
        rows.append((name + ", CPU ms", vl_cpu, bl_cpu, co_cpu, target, note))

    q_range = f"from={start}&to={end}"
    row("`status >= 500`, 2 fields", "≤ 1× VL", "status:>=500 | fields request_id, status",
        q_range + "&where=" + urllib.parse.quote("status >= 500") + "&select=request_id,status", n_errors)
    row("`request_id == X` (1 row)", "≤ 1× VL", f'request_id:="{needle}"',
        q_range + "&where=" + urllib.parse.quote(f'request_id == "{needle}"'), 1)
    row("count by status", "≤ 1× VL (blobs ≤ 5×)", "* | stats by (status) count() c",
        q_range + "&count_by=status", statuses)
    ts = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    row("one second, every field", "≤ 1× VL", f"_time:[{ts(second)}, {ts(second + 1)})",
        f"from={second}&to={second + 1}", one_second)
    return rows


def fmt(v, ms=False):
    if v is None:
        return "n/a"
    if ms:
        return f"{v:,.0f}"
    return f"{v / 1000:,.0f} k" if v >= 10_000 else f"{v:,.1f}"


def report(rows, n):
    load = open("/proc/loadavg").read().split()[:3]
    out = [
        f"# bench-history: {n} events, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {' '.join(load)}",
        "",
        "| work | VictoriaLogs | Sluice blobs | Sluice columns | columns ÷ VL | target | note |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for name, vl, blobs, cols, target, note in rows:
        ms = "CPU ms" in name
        if "ingest" in name:
            ratio = f"{blobs / vl:.1f}× cheaper" if vl and blobs else "n/a"
        elif vl and cols is not None:
            ratio = f"{cols / vl:.2f}×"
        else:
            ratio = "n/a"
        out.append(f"| {name} | {fmt(vl, ms)} | {fmt(blobs, ms)} | {fmt(cols, ms)} | {ratio} | {target} | {note} |")
    text = "\n".join(out) + "\n"
    print(text)
    with open(os.path.join(ROOT, "bench", "history", "RESULTS.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
