"""sluice.Alerts against a real server: add (checked: a bad expression is refused naming it), list,
show, silence, a backtest over stored history that fires on a 5xx burst and resolves, and
remove; changes need the admin token."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import sluice
from conftest import Server, sluice_bin, wait_for


def _post(url: str, body: bytes) -> None:
    req = urllib.request.Request(url + "/v1/events", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


def test_rules_are_added_listed_backtested_and_removed(tmp_path: Path) -> None:
    s = Server(tmp_path / "data", "--columns", "off")
    try:
        subprocess.run(
            [sluice_bin(), "rollup", "add", "web", "--type", "WEB", "--group-by", "path",
             "--agg", "count,count_if:status >= 500", "--step", "1s", "--server", s.url],
            capture_output=True, check=True,
        )
        # Changes need an admin token: the server's per-start local secret.
        admin = (tmp_path / "data" / "admin.secret").read_text().strip()
        alerts = sluice.Alerts(server=s.url, token=admin)
        with pytest.raises(sluice.ReadError) as e:
            sluice.Alerts(server=s.url, token="").add("x", rollup="web", expr="sum(count) > 1")
        assert getattr(e.value, "status", None) == 401
        with pytest.raises(sluice.ReadError) as e:
            alerts.add("bad", rollup="web", expr="sum(p99:ms) > 1")
        assert e.value.status == 400 and "p99:ms" in str(e.value)  # type: ignore[attr-defined]
        rule = alerts.add(
            "web-5xx", rollup="web", by=["path"], window="5s", for_="3s", min_count=20,
            expr="sum(count where status >= 500) / sum(count) > 0.2",
            labels={"team": "web"}, sample_fields=["path", "status"],
        )
        assert rule["window_secs"] == 5 and rule["for_secs"] == 3 and rule["by"] == ["path"]
        with pytest.raises(sluice.ReadError) as e:
            alerts.add("web-5xx", rollup="web", expr="sum(count) > 1")
        assert e.value.status == 409  # type: ignore[attr-defined]
        # Two minutes of history: /a fails (half 500s) for 20 s in the middle.
        t0 = int(time.time()) - 180
        lines = []
        for sec in range(120):
            for path in ("/a", "/b"):
                for k in range(20):
                    failing = path == "/a" and 50 <= sec < 70 and k % 2 == 0
                    lines.append(json.dumps({"epoch": t0 + sec, "type": "WEB", "path": path,
                                             "status": 500 if failing else 200}))
        _post(s.url, "\n".join(lines).encode())

        def transitions() -> list:
            answer = alerts.test("web-5xx", t0, t0 + 130)
            return [(t["labels"]["path"], t["status"], t["t"]) for t in answer["transitions"]]

        got = wait_for(lambda: transitions() if len(transitions()) == 2 else None, 60, "a backtest with both transitions")
        assert got[0][:2] == ("/a", "firing") and got[1][:2] == ("/a", "resolved")
        # Fires once the burst held for `for` (3 s) with the window (5 s) holding enough of it.
        assert t0 + 50 < got[0][2] <= t0 + 60, got
        assert t0 + 70 <= got[1][2] <= t0 + 76, got
        frame = alerts.test("web-5xx", t0, t0 + 130, output="pandas")
        assert set(frame["path"]) == {"/a", "/b"} and (frame["state"] == "firing").any()
        listed = {r["name"]: r for r in alerts.list()}
        assert listed["web-5xx"]["kind"] == "threshold"
        assert listed["web-5xx"]["state"] in ("inactive", "pending", "firing")
        silenced = alerts.silence("web-5xx", "2h")
        assert silenced["silenced_until"] > time.time() + 7000
        assert alerts.show("web-5xx")["silenced_until"] == silenced["silenced_until"]
        alerts.remove("web-5xx")
        with pytest.raises(sluice.ReadError) as e:
            alerts.show("web-5xx")
        assert e.value.status == 404  # type: ignore[attr-defined]
    finally:
        s.stop()
