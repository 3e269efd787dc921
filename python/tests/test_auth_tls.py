"""Tokens and TLS in the pure-Python clients: Emitter (HTTP, TCP), Reader,
LoggingHandler.

Two kinds of tests:

- the wire contract against small local servers run by the test (an ``http.server`` and a TCP
  socket): what is sent (``Authorization: Bearer``, the ``auth`` line, TLS), and how answers are
  taken (401/403 permanent, 503 retried);
- real ``sluice serve`` processes: ``--auth`` with tokens made by ``sluice token create``,
  ``--tls-self-signed`` with ``ca=`` its ``DATA/tls/self-signed.pem``, and both at once.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import sluice
from conftest import free_port, sluice_bin, wait_for

# ---- local stand-ins for the collector's wire ---------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's next scripted (status, body) and records it."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        srv: Any = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        srv.requests.append((self.command, self.path, dict(self.headers), body))
        status, payload = srv.script(self.command, self.path, body)
        data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


class LocalHttp:
    """A threaded HTTP server on loopback whose answers are given by ``script(method, path,
    body) -> (status, json_or_bytes)``; ``requests`` lists what it got."""

    def __init__(self, script: Any, context: Optional[ssl.SSLContext] = None) -> None:
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        self.srv.daemon_threads = True
        if context is not None:
            self.srv.socket = context.wrap_socket(self.srv.socket, server_side=True)
        self.srv.requests = []  # type: ignore[attr-defined]
        self.srv.script = script  # type: ignore[attr-defined]
        scheme = "https" if context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.srv.server_address[1]}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> List[Tuple[str, str, Dict[str, str], bytes]]:
        return self.srv.requests  # type: ignore[attr-defined]

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def _accept_all(method: str, path: str, body: bytes) -> Tuple[int, Any]:
    if method == "POST":
        n = len(sluice.sereal.loads(body))
        return 200, {"accepted": n, "dropped_total": 0}
    return 200, b'{"epoch":1,"type":"X","k":1}\n'


class LocalTcp:
    """A TCP collector stand-in: expects ``auth <token>`` first when ``answer`` is given and
    replies ``answer`` to it; acknowledges each Sereal frame with ``ok <n> 0``. ``lines`` lists
    the auth lines it got."""

    def __init__(self, answer: Optional[str]) -> None:
        self.lines: List[str] = []
        self.frames = 0
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c: socket.socket) -> None:
        with c, c.makefile("rb") as r:
            if self.answer is not None:
                line = r.readline()
                self.lines.append(line.decode())
                c.sendall(self.answer.encode() + b"\n")
                if not self.answer.startswith("ok auth"):
                    return
            while True:
                mark = r.read(1)
                if mark != b"S":
                    return
                n = int.from_bytes(r.read(4), "big")
                doc = sluice.sereal.loads(r.read(n))
                self.frames += 1
                c.sendall(f"ok {len(doc)} 0\n".encode())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_TOKEN", raising=False)
    monkeypatch.delenv("SLUICE_CA", raising=False)


def test_http_sends_the_bearer_token_from_the_argument_or_the_environment(no_env, monkeypatch):
    srv = LocalHttp(_accept_all)
    try:
        with sluice.Emitter(http=srv.url, token="sluice_arg") as em:
            em.emit("X", {"k": 1})
            assert em.flush(10)
        monkeypatch.setenv("SLUICE_TOKEN", "sluice_env")
        with sluice.Emitter(http=srv.url) as em:
            em.emit("X", {"k": 2})
            assert em.flush(10)
        with sluice.Emitter(http=srv.url, token="") as em:  # "": none, whatever the environment says
            em.emit("X", {"k": 3})
            assert em.flush(10)
        evs = sluice.Reader(server=srv.url).read(0, 10).to_list()
        assert evs == [{"epoch": 1, "type": "X", "k": 1}]
        sluice.Reader(server=srv.url, token="sluice_read").read(0, 10).to_list()
        auth = [(m, h.get("Authorization")) for m, _, h, _ in srv.requests]
        assert auth == [
            ("POST", "Bearer sluice_arg"),
            ("POST", "Bearer sluice_env"),
            ("POST", None),
            ("GET", "Bearer sluice_env"),
            ("GET", "Bearer sluice_read"),
        ]
    finally:
        srv.close()


def test_http_401_and_403_are_permanent_503_is_retried(no_env):
    answers = {"/401": (401, {"error": "no token"}), "/403": (403, {"error": "scope"}), "/503": (503, {"error": "busy"})}
    srv = LocalHttp(lambda m, p, b: answers[p.rsplit("/v1/", 1)[0]])
    try:
        for code in (401, 403):
            errors: List[Tuple[str, int]] = []
            with sluice.Emitter(http=f"{srv.url}/{code}", token="t", retries=5, backoff=0.01,
                                on_error=lambda m, n: errors.append((m, n))) as em:
                for i in range(3):
                    em.emit("X", {"i": i})
                assert em.flush(10)
                st = em.stats()
            assert st["unauthorized"] == 3 and st["retries"] == 0 and st["sent"] == 0, st
            assert st["undelivered"] == 0 and st["rejected"] == 0
            assert len(errors) == 1 and errors[0][1] == 3 and str(code) in errors[0][0], errors
            assert ("no token" if code == 401 else "scope") in errors[0][0]
        sent = len(srv.requests)
        assert sent == 2  # one request each: never resent
        with sluice.Emitter(http=f"{srv.url}/503", retries=3, backoff=0.01, on_error=lambda m, n: None) as em:
            em.emit("X", {"i": 0})
            assert em.flush(10)
            st = em.stats()
        assert st["retries"] == 3 and st["undelivered"] == 1 and st["unauthorized"] == 0, st
        assert len(srv.requests) - sent == 4
    finally:
        srv.close()


def test_tcp_sends_the_auth_line_first(no_env):
    srv = LocalTcp("ok auth t1")
    try:
        with sluice.Emitter(tcp=srv.addr, token="sluice_tcp") as em:
            for i in range(5):
                em.emit("X", {"i": i})
            assert em.flush(10)
            st = em.stats()
        assert st["sent"] == 5 and st["unauthorized"] == 0, st
        assert srv.lines == ["auth sluice_tcp\n"] and srv.frames >= 1
    finally:
        srv.close()


@pytest.mark.parametrize("answer", ["error unauthorized unknown token; closing", "ok 0 1", "nonsense"])
def test_tcp_auth_answered_otherwise_is_an_error_naming_the_reply(no_env, answer):
    srv = LocalTcp(answer)
    errors: List[str] = []
    try:
        with sluice.Emitter(tcp=srv.addr, token="sluice_x", retries=5, backoff=0.01,
                            on_error=lambda m, n: errors.append(m)) as em:
            em.emit("X", {"i": 1})
            em.emit("X", {"i": 2})
            assert em.flush(10)
            st = em.stats()
        assert st["unauthorized"] == 2 and st["retries"] == 0 and st["sent"] == 0, st
        assert len(srv.lines) == 1  # one connection: not retried
        assert any(answer in m for m in errors), errors
        assert srv.frames == 0
    finally:
        srv.close()


def test_constructor_checks_credentials_and_tls(no_env, tmp_path: Path, monkeypatch):
    with pytest.raises(ValueError, match="UDP carries no credentials"):
        sluice.Emitter(udp="127.0.0.1:1", token="t")
    with pytest.raises(ValueError, match="udp"):
        sluice.Emitter(udp="127.0.0.1:1", tls=True)
    with pytest.raises(ValueError, match="tls=True"):
        sluice.Emitter(tcp="127.0.0.1:1", ca=str(tmp_path / "ca.pem"))
    with pytest.raises(ValueError, match="https://"):
        sluice.Emitter(http="http://127.0.0.1:1", tls=True)
    with pytest.raises(ValueError, match="https://"):
        sluice.Reader(server="http://127.0.0.1:1", ca=str(tmp_path / "ca.pem"))
    with pytest.raises(ValueError, match="missing.pem"):
        sluice.Emitter(tcp="127.0.0.1:1", tls=True, ca=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="missing.pem"):
        sluice.Reader(server="https://127.0.0.1:1", ca=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="spaces"):
        sluice.Emitter(http="http://127.0.0.1:1", token="a b")
    with pytest.raises(ValueError, match="not both"):
        sluice.Reader(server="https://127.0.0.1:1", ca="x.pem", ssl_context=ssl.create_default_context())
    monkeypatch.setenv("SLUICE_CA", str(tmp_path / "env-missing.pem"))
    with pytest.raises(ValueError, match="SLUICE_CA"):
        sluice.Emitter(http="https://127.0.0.1:1")
    # The environment's token and CA are not forced on transports that cannot use them.
    monkeypatch.setenv("SLUICE_TOKEN", "t")
    sluice.Emitter(udp="127.0.0.1:1").close(0)
    sluice.Emitter(tcp="127.0.0.1:1").close(0)
    # LoggingHandler passes them on.
    with pytest.raises(ValueError, match="tls=True"):
        sluice.LoggingHandler(tcp="127.0.0.1:1", ca="x.pem")


def _self_signed(tmp_path: Path) -> Tuple[str, str]:
    """A certificate for 127.0.0.1 made with the openssl CLI: (cert, key)."""
    cert, key = tmp_path / "local.pem", tmp_path / "local.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )
    return str(cert), str(key)


def test_https_with_ca_against_a_local_tls_server(no_env, tmp_path: Path):
    cert, key = _self_signed(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = LocalHttp(_accept_all, ctx)
    try:
        with sluice.Emitter(http=srv.url, ca=cert, token="tok") as em:
            em.emit("X", {"k": 1})
            assert em.flush(10)
            assert em.stats()["sent"] == 1
        assert sluice.Reader(server=srv.url, ca=cert).read(0, 10).to_list() == [{"epoch": 1, "type": "X", "k": 1}]
        own = ssl.create_default_context(cafile=cert)
        assert sluice.Reader(server=srv.url, ssl_context=own).read(0, 10).to_list()
        # Without the CA: the certificate is not trusted.
        with pytest.raises(sluice.ReadError, match="CERTIFICATE_VERIFY_FAILED"):
            sluice.Reader(server=srv.url).read(0, 10).to_list()
        with sluice.Emitter(http=srv.url, retries=1, backoff=0.01, on_error=lambda m, n: None) as em:
            em.emit("X", {"k": 2})
            assert em.flush(10)
            assert em.stats()["undelivered"] == 1 and em.stats()["sent"] == 0
    finally:
        srv.close()


# ---- real servers --------------------------------------------------------------------------------


class SecureServer:
    """A ``sluice serve`` on free loopback ports with extra flags (``--auth``,
    ``--tls-self-signed``); ``ca`` is its self-signed certificate when it serves TLS."""

    def __init__(self, data: Path, *flags: str) -> None:
        self.data = data
        self.tls = "--tls-self-signed" in flags
        self.http_port, self.tcp_port = free_port(), free_port()
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.http_port}"
        self.tcp = f"127.0.0.1:{self.tcp_port}"
        self.ca = str(data / "tls" / "self-signed.pem")
        self.log_path = data.parent / f"{data.name}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sluice_bin(), "serve", "--data", str(data), "--http", f"127.0.0.1:{self.http_port}",
             "--tcp", self.tcp, "--udp", "off", "--dc", "test", *flags],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_for(self.healthy, 60, "sluice serve to answer /healthz")

    def context(self) -> Optional[ssl.SSLContext]:
        return ssl.create_default_context(cafile=self.ca) if self.tls else None

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"sluice serve exited with {self.proc.returncode}: {self.log_path.read_text(errors='replace')}")
        if self.tls and not os.path.exists(self.ca):
            return False
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2, context=self.context()) as r:
                return r.status == 200
        except OSError:
            return False

    def token(self, name: str, scope: str, *extra: str) -> str:
        """``sluice token create`` (the CLI finds the local secret in the data directory);
        the secret is the first line of its output."""
        env = dict(os.environ)
        env.pop("SLUICE_TOKEN", None)
        if self.tls:
            env["SLUICE_CA"] = self.ca
        p = subprocess.run(
            [sluice_bin(), "token", "create", "--data", str(self.data), "--name", name, "--scope", scope, *extra],
            capture_output=True, text=True, env=env, timeout=60,
        )
        assert p.returncode == 0, f"token create: {p.returncode}\n{p.stdout}\n{p.stderr}"
        secret = p.stdout.splitlines()[0].strip()
        assert secret.startswith("sluice_"), p.stdout
        return secret

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _server(factory: pytest.TempPathFactory, name: str, *flags: str) -> Iterator[SecureServer]:
    s = SecureServer(factory.mktemp(name) / "data", *flags)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    yield from _server(tmp_path_factory, "auth", "--auth")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    yield from _server(tmp_path_factory, "tls", "--tls-self-signed")


@pytest.fixture(scope="module")
def auth_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    yield from _server(tmp_path_factory, "authtls", "--auth", "--tls-self-signed")


def _read_back(reader: sluice.Reader, type_: str, n: int) -> List[dict]:
    """The events of `type_` once `n` of them are stored."""
    def got() -> Optional[List[dict]]:
        evs = reader.read("-1h", type=type_).to_list()
        return evs if len(evs) >= n else None
    return wait_for(got, 60, f"{n} {type_} events")


def test_auth_token_delivers_and_reads(no_env, auth_server: SecureServer):
    tok = auth_server.token("t1", "ingest,read")
    reader = sluice.Reader(server=auth_server.url, token=tok)
    for transport, target in (("http", auth_server.url), ("tcp", auth_server.tcp)):
        with sluice.Emitter(token=tok, **{transport: target}) as em:
            for i in range(50):
                em.emit(f"A{transport.upper()}", {"i": i})
            assert em.flush(30)
            st = em.stats()
        assert st["sent"] == 50 and st["unauthorized"] == st["undelivered"] == 0, st
        evs = _read_back(reader, f"A{transport.upper()}", 50)
        assert sorted(e["i"] for e in evs) == list(range(50))


def test_auth_token_from_the_environment(no_env, auth_server: SecureServer, monkeypatch):
    monkeypatch.setenv("SLUICE_TOKEN", auth_server.token("envtok", "ingest,read"))
    with sluice.Emitter(http=auth_server.url) as em:
        em.emit("AENV", {"i": 1})
        assert em.flush(30)
        assert em.stats()["sent"] == 1
    assert [e["i"] for e in _read_back(sluice.Reader(server=auth_server.url), "AENV", 1)] == [1]


@pytest.mark.parametrize("transport", ["http", "tcp"])
@pytest.mark.parametrize("token", [None, "sluice_00000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "garbage"])
def test_auth_without_a_good_token_is_refused_not_retried(no_env, auth_server: SecureServer, transport, token):
    errors: List[Tuple[str, int]] = []
    target = auth_server.url if transport == "http" else auth_server.tcp
    em = sluice.Emitter(token=token, retries=1000, backoff=0.01, on_error=lambda m, n: errors.append((m, n)),
                        **{transport: target})
    try:
        for i in range(10):
            em.emit("AREFUSED", {"i": i})
        # Would take for ever if refusals were retried 1000 times with backoff up to 5 s.
        assert em.flush(30)
        st = em.stats()
    finally:
        em.close(1)
    assert st["unauthorized"] == 10 and st["sent"] == 0 and st["retries"] == 0, st
    assert sum(n for _, n in errors) == 10
    assert all(("401" in m if transport == "http" else "unauthorized" in m) for m, _ in errors), errors


def test_auth_scopes_and_reach(no_env, auth_server: SecureServer):
    read_only = auth_server.token("ro", "read")
    ingest_web = auth_server.token("web", "ingest", "--types", "WEB")
    # A read token cannot send; an ingest token limited to WEB cannot send LB: 403, not retried.
    for tok, type_ in ((read_only, "WEB"), (ingest_web, "LB")):
        for transport, target in (("http", auth_server.url), ("tcp", auth_server.tcp)):
            errors: List[str] = []
            with sluice.Emitter(token=tok, retries=1000, on_error=lambda m, n: errors.append(m),
                                **{transport: target}) as em:
                em.emit(type_, {"x": 1})
                assert em.flush(30)
                st = em.stats()
            assert st["unauthorized"] == 1 and st["retries"] == 0 and st["sent"] == 0, (transport, st, errors)
            if transport == "http":
                assert "403" in errors[0], errors
    with sluice.Emitter(http=auth_server.url, token=ingest_web) as em:
        em.emit("WEB", {"x": 2})
        assert em.flush(30) and em.stats()["sent"] == 1
    # Reading: none is 401, an ingest-only token 403, a read token reads.
    with pytest.raises(sluice.ReadError) as e:
        sluice.Reader(server=auth_server.url).read("-1h").to_list()
    assert e.value.status == 401  # type: ignore[attr-defined]
    with pytest.raises(sluice.ReadError) as e:
        sluice.Reader(server=auth_server.url, token=ingest_web).read("-1h").to_list()
    assert e.value.status == 403  # type: ignore[attr-defined]
    with pytest.raises(sluice.ReadError) as e:  # a tail is not retried either
        next(iter(sluice.Reader(server=auth_server.url, token=ingest_web).tail(idle_timeout=30)))
    assert e.value.status == 403  # type: ignore[attr-defined]
    assert [e["x"] for e in _read_back(sluice.Reader(server=auth_server.url, token=read_only), "WEB", 1)] == [2]


def test_logging_handler_with_a_token(no_env, auth_server: SecureServer):
    import logging

    tok = auth_server.token("logs", "ingest,read")
    handler = sluice.LoggingHandler(http=auth_server.url, token=tok, type="ALOG")
    log = logging.getLogger("test.auth.handler")
    log.addHandler(handler)
    try:
        log.warning("with %s", "a token")
        handler.flush()
        assert handler.emitter.stats()["sent"] == 1
    finally:
        log.removeHandler(handler)
        handler.close()
    evs = _read_back(sluice.Reader(server=auth_server.url, token=tok), "ALOG", 1)
    assert evs[0]["message"] == "with a token"


def test_tls_self_signed(no_env, tls_server: SecureServer):
    ca = tls_server.ca
    with sluice.Emitter(http=tls_server.url, ca=ca) as em:
        em.emit("THTTPS", {"i": 1})
        assert em.flush(30) and em.stats()["sent"] == 1
    with sluice.Emitter(tcp=tls_server.tcp, tls=True, ca=ca) as em:
        em.emit("TTCPS", {"i": 2})
        assert em.flush(30) and em.stats()["sent"] == 1
    with sluice.Emitter(tcp=f"tls://{tls_server.tcp}", ca=ca) as em:  # the CLI's spelling
        assert "tls=True" in repr(em)
        em.emit("TTCPS", {"i": 3})
        assert em.flush(30) and em.stats()["sent"] == 1
    reader = sluice.Reader(server=tls_server.url, ca=ca)
    assert [e["i"] for e in _read_back(reader, "THTTPS", 1)] == [1]
    assert sorted(e["i"] for e in _read_back(reader, "TTCPS", 2)) == [2, 3]
    # A tail over TLS.
    with reader.tail("-1h", type="THTTPS", idle_timeout=30) as t:
        assert next(iter(t))["i"] == 1
    # The data directory of a running TLS server: read through it, trusting its own certificate.
    assert [e["i"] for e in sluice.Reader(data_dir=str(tls_server.data)).read("-1h", type="THTTPS")] == [1]


def test_tls_untrusted_or_plain_fails(no_env, tls_server: SecureServer):
    # No CA given: the self-signed certificate is not trusted.
    with pytest.raises(sluice.ReadError, match="CERTIFICATE_VERIFY_FAILED"):
        sluice.Reader(server=tls_server.url).read("-1h").to_list()
    for kw in ({"http": tls_server.url}, {"tcp": tls_server.tcp, "tls": True}, {"tcp": tls_server.tcp}):
        errors: List[str] = []
        with sluice.Emitter(retries=1, backoff=0.01, timeout=5, on_error=lambda m, n: errors.append(m), **kw) as em:
            em.emit("TBAD", {"i": 1})
            assert em.flush(30)
            st = em.stats()
        assert st["sent"] == 0 and st["undelivered"] + st["rejected"] == 1, (kw, st, errors)
    # Plain HTTP to the TLS port is refused too.
    with pytest.raises(sluice.ReadError):
        sluice.Reader(server=tls_server.url.replace("https://", "http://")).read("-1h").to_list()


def test_auth_and_tls_together(no_env, auth_tls_server: SecureServer, monkeypatch):
    srv = auth_tls_server
    tok = srv.token("both", "ingest,read")
    with sluice.Emitter(tcp=srv.tcp, tls=True, ca=srv.ca, token=tok) as em:
        em.emit("BOTH", {"i": 1})
        assert em.flush(30) and em.stats()["sent"] == 1
    with sluice.Emitter(http=srv.url, ssl_context=srv.context(), token=tok) as em:
        em.emit("BOTH", {"i": 2})
        assert em.flush(30) and em.stats()["sent"] == 1
    with sluice.Emitter(tcp=srv.tcp, tls=True, ca=srv.ca, retries=100, on_error=lambda m, n: None) as em:
        em.emit("BOTH", {"i": 3})  # no token
        assert em.flush(30)
        assert em.stats()["unauthorized"] == 1 and em.stats()["retries"] == 0
    # Token and CA from the environment.
    monkeypatch.setenv("SLUICE_TOKEN", tok)
    monkeypatch.setenv("SLUICE_CA", srv.ca)
    evs = _read_back(sluice.Reader(server=srv.url), "BOTH", 2)
    assert sorted(e["i"] for e in evs) == [1, 2]


def test_drops_are_reported_with_the_token_over_tls(no_env, auth_tls_server: SecureServer):
    """Drop reports carry the emitter's token and trust its CA: over TCP+TLS with
    drops_url=https://…, queue_full drops reach POST /v1/drops under --auth."""
    srv = auth_tls_server
    tok = srv.token("dropper", "ingest")
    em = sluice.Emitter(tcp=srv.tcp, tls=True, ca=srv.ca, token=tok, drops_url=srv.url,
                        max_queue=3, batch_size=10**6, flush_interval=60)
    try:
        for i in range(5):
            em.emit("TLSDROP", {"i": i})
        assert em.stats()["dropped_queue_full"] == 2
        assert em.flush(30)
        wait_for(lambda: em.stats()["drops_reported"] == 2, 60, "the drops report")
        assert em.stats()["drops_unreported"] == 0
    finally:
        em.close(1)
    # Without a token the report is refused (401): kept for a later try, never counted reported.
    em = sluice.Emitter(udp=None, http=srv.url, ca=srv.ca, token="", max_queue=1, batch_size=10**6,
                        flush_interval=60, on_error=lambda m, n: None)
    try:
        em.emit("TLSDROP", {"i": 0})
        em.emit("TLSDROP", {"i": 1})
        assert em.flush(30)
        assert em.stats()["unauthorized"] == 1 and em.stats()["drops_reported"] == 0
    finally:
        em.close(1)
