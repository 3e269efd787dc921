"""The code-substream worker (`sluice._worker`): the rules a transform runs under, and the
protocol spoken over a real worker process (the Rust pool's side is tested in crates/pyworkers)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

import sluice
from sluice import _worker


def test_load_apply_and_context(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("def transform(events, ctx):\n    return ({'x': e['x'] * 2, 'dc': ctx.dc} for e in events)\n")
    fn = _worker.load(str(f), "transform")
    assert _worker.load(str(f), "transform") is fn  # cached
    ctx = _worker.Context("s", 10, "ams1", "WEB", "", 0)
    assert _worker.apply(fn, [{"x": 1}, {"x": 2}], ctx) == [{"x": 2, "dc": "ams1"}, {"x": 4, "dc": "ams1"}]
    none = tmp_path / "none.py"
    none.write_text("def transform(events, ctx):\n    pass\n")
    assert _worker.apply(_worker.load(str(none), "transform"), [{}], ctx) == []
    with pytest.raises(TypeError, match="returned a dict"):
        _worker.apply(lambda ev, c: {"a": 1}, [], ctx)
    with pytest.raises(AttributeError, match="defines no 'nope'"):
        _worker.load(str(f), "nope")


def test_describe_names_type_message_and_place(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("def transform(events, ctx):\n    return 1 / 0\n")
    try:
        _worker.load(str(f), "transform")([], None)
    except ZeroDivisionError as e:
        assert _worker.describe(e) == "ZeroDivisionError: division by zero (bad.py:2)"


def _frames(data: bytes):
    out, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        out.append(data[at + 4:at + 4 + n])
        at += 4 + n
    return out


def test_protocol_over_a_real_worker(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("def transform(events, ctx):\n    print('noise')\n    return [{'n': len(events), 'type': ctx.type}]\n")
    g = tmp_path / "raise.py"
    g.write_text("def transform(events, ctx):\n    raise KeyError('k')\n")
    doc = sluice.sereal.dumps([{"a": 1}, {"a": 2}])
    header = json.dumps({
        "ctx": {"epoch": 1, "dc": "d", "type": "T", "subtype": "", "chunk": 0},
        "jobs": [
            {"name": "a", "file": str(f), "func": "transform", "max_result_bytes": 1000},
            {"name": "b", "file": str(g), "func": "transform", "max_result_bytes": 1000},
        ],
    }).encode()
    body = struct.pack("<I", len(header)) + header + doc
    req = struct.pack("<I", len(body)) + body
    p = subprocess.run([sys.executable, "-m", "sluice._worker"], input=req, capture_output=True, timeout=60)
    assert p.returncode == 0
    frames = _frames(p.stdout)
    kinds = [fr[:1] for fr in frames]
    assert kinds == [b"R", b"D", b"S", b"O", b"S", b"X", b"F"]
    assert sluice.sereal.loads(frames[3][5:]) == [{"n": 2, "type": "T"}]
    assert frames[5][5:6] == b"E" and frames[5][6:].startswith(b"KeyError: 'k' (raise.py:2)")
    assert b"noise" in p.stderr  # a print goes to stderr, never into the protocol


def test_check_mode(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("def transform(events):\n    return []\n")
    p = subprocess.run([sys.executable, "-m", "sluice._worker", "--check", str(f), "transform"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "cannot be called as transform(events, ctx)" in p.stdout
