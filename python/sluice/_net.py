"""Credentials and TLS shared by the pure-Python clients (:class:`~sluice.Emitter`,
:class:`~sluice.Reader`, and so :class:`~sluice.LoggingHandler`): standard library only.

- **Token**: ``token=`` or, when that is ``None``, the ``SLUICE_TOKEN`` environment variable
  (``token=""`` sends none, whatever the environment says). HTTP requests carry
  ``Authorization: Bearer <token>``; a TCP connection starts with the line ``auth <token>``, which
  the collector answers ``ok auth <name>``.
- **TLS**: an ``ssl_context=`` as given, else a default context (certificates and host names
  verified) trusting ``ca=`` (a PEM file) or, when that is ``None``, ``SLUICE_CA``; with neither,
  the system's trusted CAs (``ca=""``: the system's, whatever the environment says).
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import IO, Optional, Tuple

TOKEN_ENV = "SLUICE_TOKEN"
CA_ENV = "SLUICE_CA"


class AuthRefused(Exception):
    """The collector refused the credentials (HTTP 401/403, a TCP ``auth`` line answered with
    anything but ``ok auth …``, or ``error unauthorized``): resending the same cannot help."""


def resolve_token(token: Optional[str]) -> Optional[str]:
    """``token``, or ``SLUICE_TOKEN`` when it is ``None``; ``None`` when there is none. Raises
    ``ValueError`` for a token that cannot travel in a header or a line."""
    if token is None:
        token = os.environ.get(TOKEN_ENV)
        what = TOKEN_ENV
    else:
        what = "token"
    if token is None:
        return None
    if not isinstance(token, str):
        raise ValueError(f"{what}: expected a str, got {type(token).__name__}")
    token = token.strip()
    if not token:
        return None
    if any(c.isspace() or ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise ValueError(f"{what}: a token is printable ASCII without spaces")
    return token


def make_ssl_context(
    ca: Optional[str] = None, ssl_context: Optional[ssl.SSLContext] = None, default_ca: Optional[str] = None
) -> ssl.SSLContext:
    """The context TLS connections use (see the module doc). ``default_ca`` is trusted when
    neither ``ca`` nor ``SLUICE_CA`` names a file. Raises ``ValueError`` for a CA file that cannot
    be read, or both ``ca`` and ``ssl_context``."""
    if ssl_context is not None:
        if ca:
            raise ValueError("give ca= or ssl_context=, not both")
        if not isinstance(ssl_context, ssl.SSLContext):
            raise ValueError(f"ssl_context: expected an ssl.SSLContext, got {type(ssl_context).__name__}")
        return ssl_context
    what = "ca"
    if ca is None:
        ca = os.environ.get(CA_ENV) or None
        what = CA_ENV
        if ca is None:
            ca = default_ca
            what = "the server's self-signed certificate"
    try:
        return ssl.create_default_context(cafile=ca or None)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"{what} {ca!r}: {e}") from None


def bearer(token: Optional[str]) -> dict:
    """The request headers that carry ``token``."""
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def tcp_connect(
    addr: Tuple[str, int],
    timeout: float,
    *,
    token: Optional[str] = None,
    context: Optional[ssl.SSLContext] = None,
    what: str = "",
) -> Tuple[socket.socket, IO[bytes]]:
    """A TCP connection to the collector's ingest port (wrapped in TLS when ``context`` is
    given, the host name checked against ``addr[0]``), authenticated with ``token`` when there
    is one. Returns the socket and a buffered reader of it.

    Raises:
        OSError: connecting, the TLS handshake (``ssl.SSLError`` is one) or the exchange failed,
            or the connection closed before the ``auth`` answer.
        AuthRefused: the ``auth`` line was answered with anything but ``ok auth <name>``.
    """
    sock = socket.create_connection(addr, timeout=timeout)
    reader: Optional[IO[bytes]] = None
    try:
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=addr[0])
        reader = sock.makefile("rb")
        if token is not None:
            sock.sendall(b"auth " + token.encode("ascii") + b"\n")
            line = reader.readline(4096)
            if not line.endswith(b"\n"):
                raise ConnectionError("connection closed before the answer to the auth line")
            reply = line.decode("utf-8", "replace").strip()
            if not reply.startswith("ok auth"):
                raise AuthRefused(f"TCP {what or '%s:%d' % addr}: auth refused: {reply!r}")
    except BaseException:
        if reader is not None:
            reader.close()
        sock.close()
        raise
    return sock, reader
