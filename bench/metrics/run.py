#!/usr/bin/env python3
"""make bench-metrics: the statsd row. Datagrams per second at which >= 99.9 % of N statsd
datagrams (`bench.c:1|c`) are received and counted, for `sluice serve --statsd`, Etsy statsd
(npm `statsd`) and `statsd_exporter` (Go module proxy), with the same paced sender
(bench/metrics, sendmmsg from one thread) on loopback.

Each trial starts the server afresh, sends N datagrams at a rate, waits until its count stops
moving, and reads it: Sluice `sluice_statsd_events_total`, statsd_exporter `bench_c` (the
counter it exports), Etsy statsd the `bench.c` counter of its admin interface (flushInterval one
hour, so nothing is flushed away). Rates double from --start until a trial keeps < 99.9 %, then
--bisect steps between the last pass and the first failure.

Usage: bench/metrics/run.py [--count N] [--start RATE] [--bisect K] [--only sluice,etsy,exporter]
Prints a Markdown table (also written to bench/metrics/RESULTS.md with --write).
"""
import argparse, json, os, re, shutil, socket, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sluice")
ETSY_VERSION = "0.9.0"
EXPORTER_VERSION = "v0.31.0"
PAYLOAD = "bench.c:1|c"


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build():
    sh(["cargo", "build", "--release", "-q", "-p", "sluice"], cwd=ROOT)
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target", "bench-metrics"))
    sh(["cargo", "build", "--release", "-q", "--manifest-path", os.path.join(ROOT, "bench/metrics/Cargo.toml")], env=env)
    etsy = os.path.join(CACHE, "node-etsy")
    if not os.path.exists(os.path.join(etsy, "node_modules/statsd/stats.js")):
        os.makedirs(etsy, exist_ok=True)
        sh(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", etsy, f"statsd@{ETSY_VERSION}"])
    bindir = os.path.join(CACHE, "bin")
    exporter = os.path.join(bindir, "statsd_exporter")
    if not os.path.exists(exporter):
        go = shutil.which("go") or "/usr/local/go/bin/go"
        sh([go, "install", f"github.com/prometheus/statsd_exporter@{EXPORTER_VERSION}"], env=dict(os.environ, GOBIN=bindir))
    return {
        "sluice": os.path.join(ROOT, "target/release/sluice"),
        "sender": os.path.join(ROOT, "target/bench-metrics/release/sluice-bench-metrics"),
        "etsy": os.path.join(etsy, "node_modules/statsd/stats.js"),
        "exporter": exporter,
    }


def http_text(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def prom(text, name):
    total = None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


def etsy_counter(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"counters\n")
        buf = b""
        while b"END" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    m = re.search(r"'bench\.c': (\d+)", buf.decode())
    return int(m.group(1)) if m else 0


class Server:
    def __init__(self, kind, bins, tmp):
        self.kind, self.port = kind, free_port()
        self.admin = free_port()
        log = open(os.path.join(tmp, f"{kind}.log"), "ab")
        if kind == "sluice":
            data = tempfile.mkdtemp(dir=tmp)
            cmd = [bins["sluice"], "serve", "--data", data, "--http", f"127.0.0.1:{self.admin}", "--tcp", "off",
                   "--udp", "off", "--statsd", f"127.0.0.1:{self.port}"]
        elif kind == "exporter":
            cmd = [bins["exporter"], f"--statsd.listen-udp=127.0.0.1:{self.port}", "--statsd.listen-tcp=",
                   f"--web.listen-address=127.0.0.1:{self.admin}", "--statsd.read-buffer=33554432"]
        else:
            conf = os.path.join(tmp, "etsy.js")
            with open(conf, "w") as f:
                json.dump({"port": self.port, "address": "127.0.0.1", "mgmt_port": self.admin,
                           "mgmt_address": "127.0.0.1", "flushInterval": 3600000, "backends": []}, f)
            cmd = ["node", bins["etsy"], conf]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        deadline = time.time() + 30
        while True:
            try:
                self.count()
                break
            except Exception:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{kind} did not start (see {log.name})")
                time.sleep(0.1)

    def count(self):
        if self.kind == "sluice":
            return prom(http_text(f"http://127.0.0.1:{self.admin}/metrics"), "sluice_statsd_events_total") or 0
        if self.kind == "exporter":
            text = http_text(f"http://127.0.0.1:{self.admin}/metrics")
            return prom(text, "bench_c") or 0
        return etsy_counter(self.admin)

    def cpu(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def trial(kind, bins, tmp, n, rate):
    srv = Server(kind, bins, tmp)
    try:
        cpu0 = srv.cpu()
        out = subprocess.run([bins["sender"], f"127.0.0.1:{srv.port}", str(n), str(int(rate)), PAYLOAD],
                             check=True, capture_output=True, text=True).stdout.split()
        achieved = float(out[2])
        last, still = -1, time.time()
        while time.time() - still < 1.0:
            c = srv.count()
            if c != last:
                last, still = c, time.time()
            if c >= n:
                break
            time.sleep(0.1)
        cpu = srv.cpu() - cpu0
        return last / n, achieved, cpu
    finally:
        srv.stop()


def search(kind, bins, tmp, n, start, bisect):
    rows, best, fail = [], None, None
    rate = start
    while fail is None and rate <= 16_000_000:
        kept, achieved, cpu = trial(kind, bins, tmp, n, rate)
        rows.append((rate, achieved, kept, cpu))
        print(f"{kind}: {rate:,.0f}/s asked, {achieved:,.0f}/s sent: {kept * 100:.3f} % counted, {cpu:.2f} CPU-s",
              file=sys.stderr)
        if kept >= 0.999 and achieved >= rate * 0.95:
            best = (rate, achieved, kept, cpu)
            rate *= 2
        elif kept >= 0.999:
            best = (rate, achieved, kept, cpu)  # the sender's own limit
            break
        else:
            fail = rate
    lo = best[0] if best else 0
    for _ in range(bisect if fail else 0):
        mid = (lo + fail) / 2
        kept, achieved, cpu = trial(kind, bins, tmp, n, mid)
        rows.append((mid, achieved, kept, cpu))
        print(f"{kind}: {mid:,.0f}/s asked, {achieved:,.0f}/s sent: {kept * 100:.3f} % counted, {cpu:.2f} CPU-s",
              file=sys.stderr)
        if kept >= 0.999:
            lo, best = mid, (mid, achieved, kept, cpu)
        else:
            fail = mid
    return best, fail, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=5_000_000)
    ap.add_argument("--start", type=float, default=25_000)
    ap.add_argument("--bisect", type=int, default=3)
    ap.add_argument("--only", default="sluice,etsy,exporter")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    bins = build()
    tmp = tempfile.mkdtemp(prefix="bench-metrics-")
    names = {"sluice": "Sluice `serve --statsd`", "etsy": f"Etsy statsd {ETSY_VERSION} (npm)",
             "exporter": f"statsd_exporter {EXPORTER_VERSION} (Go)"}
    results = {}
    for kind in a.only.split(","):
        results[kind] = search(kind, bins, tmp, a.count, a.start, a.bisect)
    lines = [f"## statsd: datagrams/s with >= 99.9 % of {a.count:,} `{PAYLOAD}` datagrams counted",
             "", f"One paced sender (sendmmsg, one thread) on loopback; {os.cpu_count()} cores shared; "
             f"rates double from {a.start:,.0f}/s, then {a.bisect} bisection steps.", "",
             "| server | best rate kept ≥ 99.9 % (datagrams/s) | kept there | server CPU-s there | first rate below 99.9 % | kept there |",
             "|---|---|---|---|---|---|"]
    for kind, (best, fail, rows) in results.items():
        f_kept = next((r[2] for r in rows if r[0] == fail), None)
        lines.append("| {} | {} | {} | {} | {} | {} |".format(
            names[kind],
            (f"≥ {best[1]:,.0f} (the sender's limit)" if fail is None else f"{best[1]:,.0f}") if best else "—",
            f"{best[2] * 100:.3f} %" if best else "—",
            f"{best[3]:.2f}" if best else "—",
            f"{fail:,.0f}" if fail else "not reached",
            f"{f_kept * 100:.2f} %" if f_kept is not None else "—"))
    peers = [(results[k][0][1], results[k][1]) for k in ("etsy", "exporter") if k in results and results[k][0]]
    sl = results.get("sluice")
    if sl and sl[0] and peers:
        ratio = sl[0][1] / max(p[0] for p in peers)
        if any(p[1] is None for p in peers):
            # A peer kept up with the sender: its own limit is unknown, so is the ratio.
            lines += ["", "Sluice / the better peer: not measured (target ≥ 5×) — a peer kept ≥ 99.9 % up to "
                          "the sender's limit as well, so neither limit is known."]
        else:
            bound = "≥ " if sl[1] is None else ""
            lines += ["", f"Sluice / the better peer: **{bound}{ratio:.1f}×** (target ≥ 5×)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        with open(os.path.join(ROOT, "bench/metrics/RESULTS.md"), "w") as f:
            f.write("# bench-metrics results\n\nWritten by `bench/metrics/run.py --write` (`make bench-metrics`).\n\n" + text)


if __name__ == "__main__":
    main()
