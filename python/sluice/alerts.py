"""Alert rules over rollups, through a running server's ``/v1/alerts`` (docs/alerts.md).

>>> a = sluice.Alerts(server="http://127.0.0.1:8180")                       # doctest: +SKIP
>>> a.add("web-5xx", rollup="web", expr="sum(count where status >= 500) / sum(count) > 0.05",
...       by=["path"], window="1m", for_="1m", min_count=100)              # doctest: +SKIP
>>> [t["status"] for t in a.test("web-5xx", "-7d")["transitions"]]           # doctest: +SKIP

Rules are evaluated by the server, so this talks to one; changes need a token with the
``admin`` scope, reads ``read`` (``token=`` or ``SLUICE_TOKEN``).
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Union

from ._net import bearer, make_ssl_context, resolve_token
from ._types import ReadError

TimeArg = Union[int, float, str]


class Alerts:
    """The alert rules of a running server.

    Args:
        server: its base URL, ``http://127.0.0.1:8180``.
        token: sent as ``Authorization: Bearer``; ``None`` takes ``SLUICE_TOKEN``.
        ca: PEM file to trust for ``https://``; ``ssl_context``: or a context.
        timeout: seconds for each call (a backtest over a week may take a while).

    Raises:
        ValueError: a URL that is not ``http(s)://``.
    """

    def __init__(
        self,
        *,
        server: str,
        token: Optional[str] = None,
        ca: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        timeout: float = 120.0,
    ) -> None:
        u = urllib.parse.urlsplit(server)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server: expected a URL like http://127.0.0.1:8180, got {server!r}")
        self.server = server
        self._url = u
        self._token = resolve_token(token)
        self._ssl = make_ssl_context(ca, ssl_context) if u.scheme == "https" else None
        self.timeout = timeout

    def _call(self, method: str, path: str, query: Sequence[tuple] = (), body: Any = None) -> Any:
        base = self._url.path.rstrip("/")
        target = f"{base}{path}" + (f"?{urllib.parse.urlencode(list(query))}" if query else "")
        if self._url.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._url.hostname, self._url.port or 443, timeout=self.timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(self._url.hostname, self._url.port or 80, timeout=self.timeout)
        headers = dict(bearer(self._token))
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ReadError(f"{self.server}{path}: {e!r}") from None
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"error": raw.decode("utf-8", "replace")}
        if not 200 <= resp.status < 300:
            msg = answer.get("error", answer) if isinstance(answer, dict) else answer
            if resp.status in (401, 403):
                msg = f"{msg} (the token: token= or SLUICE_TOKEN; changes need scope admin)"
            err = ReadError(f"{method} {self.server}{path}: {resp.status}: {msg}")
            err.status = resp.status  # type: ignore[attr-defined]
            raise err
        return answer

    def list(self) -> List[Dict[str, Any]]:
        """Every rule with its ``state`` (inactive, pending, firing), ``last_eval``, its pending
        and firing ``alerts`` and ``undelivered`` notifications."""
        return list(self._call("GET", "/v1/alerts").get("rules", []))

    def show(self, name: str) -> Dict[str, Any]:
        """One rule as :meth:`list` gives it (``ReadError`` with status 404 when missing)."""
        return dict(self._call("GET", f"/v1/alerts/{urllib.parse.quote(name, safe='')}"))

    def add(
        self,
        name: str,
        *,
        rollup: str,
        expr: str,
        by: Sequence[str] = (),
        window: Optional[str] = None,
        for_: Optional[str] = None,
        keep_firing_for: Optional[str] = None,
        min_count: Optional[int] = None,
        anomaly: Optional[str] = None,
        baseline: Optional[str] = None,
        threshold: Optional[float] = None,
        direction: Optional[str] = None,
        point: Optional[str] = None,
        labels: Optional[Dict[str, str]] = None,
        annotations: Optional[Dict[str, str]] = None,
        samples: Optional[int] = None,
        sample_fields: Sequence[str] = (),
        evidence_where: Optional[str] = None,
        replace: bool = False,
    ) -> Dict[str, Any]:
        """Adds a rule (as ``sluice alert add``; durations as text: ``"1m"``); the rule as
        stored. ``ReadError`` with status 400 names a bad field, 409 a name that is taken."""
        spec: Dict[str, Any] = {"name": name, "rollup": rollup, "expr": expr, "by": list(by)}
        for key, value in (
            ("window", window), ("for", for_), ("keep_firing_for", keep_firing_for),
            ("min_count", min_count), ("anomaly", anomaly), ("baseline", baseline),
            ("threshold", threshold), ("direction", direction), ("point", point),
            ("samples", samples), ("evidence_where", evidence_where),
        ):
            if value is not None:
                spec[key] = value
        if labels:
            spec["labels"] = dict(labels)
        if annotations:
            spec["annotations"] = dict(annotations)
        if sample_fields:
            spec["sample_fields"] = list(sample_fields)
        query = [("replace", "true")] if replace else []
        return dict(self._call("POST", "/v1/alerts", query, spec))

    def remove(self, name: str) -> None:
        """Removes a rule and its state."""
        self._call("DELETE", f"/v1/alerts/{urllib.parse.quote(name, safe='')}")

    def silence(self, name: str, for_: Union[str, int]) -> Dict[str, Any]:
        """Sends nothing for the rule for ``for_`` (``"2h"``; ``0`` unsilences); the rule."""
        return dict(
            self._call("POST", f"/v1/alerts/{urllib.parse.quote(name, safe='')}/silence", [("for", str(for_))])
        )

    def test(
        self,
        name: str,
        start: TimeArg,
        end: Optional[TimeArg] = None,
        *,
        max_points: int = 100_000,
        output: str = "dict",
    ) -> Any:
        """Backtests the rule over ``start <= t <= end`` (Unix seconds, RFC 3339, or relative as
        ``"-7d"``): the server evaluates it at each step over stored rollups, from a fresh state.

        Returns:
            ``output="dict"``: ``{"evaluations", "points": [{t, labels, value, state}],
            "truncated", "transitions": [{t, labels, status, value, firing_since}],
            "warnings"}``; ``output="pandas"``: the points as a DataFrame (one column per label).
        """
        if output not in ("dict", "pandas"):
            raise ValueError(f"output: 'dict' or 'pandas', got {output!r}")
        query = [("from", str(start)), ("to", "now" if end is None else str(end)), ("max_points", str(max_points))]
        answer = self._call("GET", f"/v1/alerts/{urllib.parse.quote(name, safe='')}/test", query)
        if output == "dict":
            return answer
        import pandas as pd

        rows = [{"t": p["t"], **p["labels"], "value": p["value"], "state": p["state"]} for p in answer["points"]]
        return pd.DataFrame(rows)
