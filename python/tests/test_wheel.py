"""The wheel installs and works without Rust: `pip install dist/sluice-*.whl` into a fresh venv
whose PATH has no cargo/rustc, then `import sluice` emits to and reads from a real `sluice serve`.

The wheel comes from `scripts/python-wheel.sh` (`make wheel`); `make test-python` builds it first
and passes its path in SLUICE_WHEEL. Run alone, this test builds it (incrementally) itself, the
natively linked one unless SLUICE_WHEEL_ZIG=1 (`make wheel`'s manylinux2014 one, linked by zig).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from conftest import ROOT, Server


def _wheel() -> Path:
    given = os.environ.get("SLUICE_WHEEL")
    if given:
        return Path(given).resolve()
    env = {**os.environ, "SLUICE_WHEEL_ZIG": os.environ.get("SLUICE_WHEEL_ZIG", "0")}
    out = subprocess.run([str(ROOT / "scripts" / "python-wheel.sh")], check=True, stdout=subprocess.PIPE, text=True, env=env)
    return Path(out.stdout.strip().splitlines()[-1])


def _env_without_rust() -> dict:
    """This environment minus every trace of a Rust toolchain (PATH entries holding cargo or
    rustc, CARGO*/RUSTUP* variables) and of the dev venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP", "RUSTC", "VIRTUAL_ENV", "PYTHON"))}
    keep = []
    for d in env.get("PATH", "").split(os.pathsep):
        if d and not any(os.path.exists(os.path.join(d, tool)) for tool in ("cargo", "rustc", "rustup", "maturin")):
            keep.append(d)
    env["PATH"] = os.pathsep.join(keep)
    return env


def _check_tag_against_symbols(whl: Path, tmp: Path) -> None:
    """The platform tag is honest: no versioned glibc symbol of the extension is newer than the
    glibc its manylinux tag promises (checked with binutils' objdump, when it is installed)."""
    m = re.search(r"manylinux_(\d+)_(\d+)_", whl.name) or re.search(r"manylinux2014_", whl.name)
    assert m, whl.name
    promised = (int(m.group(1)), int(m.group(2))) if m.re.groups else (2, 17)
    if shutil.which("objdump") is None:
        return
    with zipfile.ZipFile(whl) as z:
        so = next(n for n in z.namelist() if n.startswith("sluice/_native") and n.endswith(".so"))
        path = Path(z.extract(so, tmp / "unpacked"))
    dump = subprocess.run(["objdump", "-T", str(path)], check=True, capture_output=True, text=True).stdout
    needed = {tuple(int(x) for x in v.split(".")[:2]) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", dump)}
    assert needed and max(needed) <= promised, (whl.name, sorted(needed)[-3:])


def test_wheel_installs_and_runs_without_rust(tmp_path: Path, server: Server):
    whl = _wheel()
    assert whl.exists(), f"no wheel at {whl}"
    # abi3 for CPython >= 3.10, a manylinux platform tag (pip refuses a plain linux_x86_64 on PyPI).
    assert "-cp310-abi3-manylinux" in whl.name, whl.name
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
    assert any(n.startswith("sluice/_native") and n.endswith(".so") for n in names), names
    assert "sluice/emitter.py" in names and "sluice/py.typed" in names

    _check_tag_against_symbols(whl, tmp_path)

    env = _env_without_rust()
    for tool in ("cargo", "rustc", "maturin"):
        assert shutil.which(tool, path=env["PATH"]) is None, f"{tool} still on PATH"
    venv = tmp_path / "fresh"
    # The system interpreter that built the dev venv, not the dev venv itself (it holds sluice).
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True, env=env, cwd=tmp_path)
    py = venv / "bin" / "python"
    # --no-index: only this file, nothing from a registry and no source build to fall back on.
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check", str(whl)],
        check=True, env=env, cwd=tmp_path,
    )
    script = textwrap.dedent(
        f"""
        import sys, time
        import sluice
        assert sluice.__file__.startswith({str(venv)!r}), sluice.__file__
        with sluice.Emitter(http={server.url!r}) as em:
            for i in range(100):
                em.emit("WHEEL", {{"i": i, "b": b"raw"}})
            assert em.flush(30), em.stats()
            assert em.stats()["sent"] == 100, em.stats()
        assert sluice.sereal.loads(sluice.sereal.dumps({{"k": [1, 2.5]}})) == {{"k": [1, 2.5]}}
        r = sluice.Reader(server={server.url!r})
        end = time.monotonic() + 60
        while True:
            got = sorted(e["i"] for e in r.read("-1h", type="WHEEL"))
            if len(got) >= 100 or time.monotonic() > end:
                break
            time.sleep(0.2)
        assert got == list(range(100)), got
        print("ok", sluice.__file__)
        """
    )
    out = subprocess.run([str(py), "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")
