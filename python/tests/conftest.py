"""Shared fixtures: the real `sluice` binary, real servers on loopback, the Perl reference.

No mocks: servers are `sluice serve` processes on free loopback ports with their own data
directories. Waits are bounded polls (`wait_for`), never timing assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]


def sluice_bin() -> str:
    env = os.environ.get("SLUICE_BIN")
    if env:
        return env
    for p in (ROOT / "target" / "debug" / "sluice", ROOT / "target" / "release" / "sluice"):
        if p.exists():
            return str(p)
    pytest.fail("no sluice binary: run `cargo build -p sluice` or set SLUICE_BIN")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Polls `pred` until it returns something truthy; fails the test after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


class Server:
    """A `sluice serve` process on free loopback ports."""

    def __init__(self, data: Path, *extra: str, ports: Optional[Tuple[int, int, int]] = None, start: bool = True) -> None:
        """`ports`: (http, tcp, udp) to listen on (free ones by default); `start=False` only
        picks them (call :meth:`start`)."""
        self.data = data
        self.extra = extra
        self.http_port, self.tcp_port, self.udp_port = ports or (free_port(), free_port(), free_port(socket.SOCK_DGRAM))
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.tcp = f"127.0.0.1:{self.tcp_port}"
        self.udp = f"127.0.0.1:{self.udp_port}"
        self.log = open(data.parent / f"{data.name}.log", "ab")
        self.proc: Any = None
        if start:
            self.start()

    def start(self) -> None:
        """Starts `sluice serve` (again, after :meth:`kill`: same data directory and ports)."""
        self.proc = subprocess.Popen(
            [
                sluice_bin(), "serve", "--data", str(self.data), "--http", f"127.0.0.1:{self.http_port}",
                "--tcp", self.tcp, "--udp", self.udp, "--dc", "test", *self.extra,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for(self.healthy, 60, "sluice serve to answer /healthz")

    def kill(self) -> None:
        """SIGKILL: no clean shutdown (the WAL replay at the next start recovers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"sluice serve exited with {self.proc.returncode}")
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def events(self, **params: str) -> List[dict]:
        """`GET /v1/events` (from the start of the data by default)."""
        params.setdefault("from", "-1h")
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/v1/events?{q}", timeout=30) as r:
            return [json.loads(l) for l in r.read().splitlines() if l.strip() and not l.startswith(b'{"_sluice"')]

    def stop(self) -> None:
        """SIGTERM: the server stores every open second before it exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "data")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("shared") / "data")
    try:
        yield s
    finally:
        s.stop()


def have_perl_sereal() -> bool:
    return shutil.which("perl") is not None and subprocess.run(
        ["perl", "-MSereal::Encoder", "-MSereal::Decoder", "-MJSON::XS", "-e", "1"], capture_output=True
    ).returncode == 0


@pytest.fixture(scope="session")
def perl() -> str:
    if not have_perl_sereal():
        pytest.fail("the Perl reference is missing: run `make deps` (libsereal-*-perl, libjson-xs-perl)")
    return "perl"


import urllib.parse  # noqa: E402  (used by Server.events)
