"""`Reader(substream=...)`: a substream's results through a server and from a data directory
(real `sluice serve`, substreams registered with the real CLI), equal to the same selection
applied to the full stream; with the substream disabled the fallback fills the gaps (notices),
and `fallback=False` reports them as warnings."""

import json
import subprocess
import time
from pathlib import Path

from conftest import Server, sluice_bin, wait_for
from sluice import Reader

SELECT = ["status", "path"]
WHERE = "status >= 500"


def cli(*args: str) -> str:
    return subprocess.run([sluice_bin(), *args], capture_output=True, check=True, text=True).stdout


def canon(events):
    return sorted(json.dumps(e, sort_keys=True) for e in events)


def test_substream_reads_equal_the_client_side_selection(tmp_path: Path):
    s = Server(tmp_path / "data")
    try:
        cli("substream", "add", "errors", "--type", "WEB", "--select", ",".join(SELECT), "--where", WHERE,
            "--server", s.url)
        t0 = int(time.time())
        cli("gen", "--count", "3000", "--seed", "5", "--epoch", str(t0 - 4), "--http", s.url)
        full = Reader(server=s.url)
        wait_for(lambda: len(full.read(t0 - 10, t0 + 10).to_list()) >= 3000, 30, "events stored")
        expected = canon(full.read(t0 - 10, t0 + 10, type="WEB", select=SELECT, where=WHERE))
        assert expected

        def complete():
            ev = Reader(server=s.url, substream="errors", fallback=False).read(t0 - 10, t0 + 10)
            got = ev.to_list()
            return None if ev.warnings else got

        got = wait_for(complete, 30, "substream results stored")
        assert canon(got) == expected

        # Disabled: new blobs have no result; the fallback computes them (notices), same output.
        cli("substream", "disable", "errors", "--server", s.url)
        cli("gen", "--count", "2000", "--seed", "6", "--epoch", str(t0 - 2), "--http", s.url)
        wait_for(lambda: len(full.read(t0 - 10, t0 + 10).to_list()) >= 5000, 30, "events stored")
        expected = canon(full.read(t0 - 10, t0 + 10, type="WEB", select=SELECT, where=WHERE))
        gaps = Reader(server=s.url, substream="errors", fallback=False).read(t0 - 10, t0 + 10)
        gaps.to_list()
        assert gaps.warnings
        ev = Reader(server=s.url, substream="errors").read(t0 - 10, t0 + 10)
        assert canon(ev.to_list()) == expected
        assert sorted(n.key for n in ev.notices) == sorted(w.key for w in gaps.warnings)
        assert not ev.warnings
    finally:
        s.stop()

    # From the data directory: the Rust reader, its fallback in-process.
    ev = Reader(data_dir=str(tmp_path / "data"), substream="errors").read(t0 - 10, t0 + 10)
    assert canon(ev.to_list()) == expected
    assert sorted(n.key for n in ev.notices) == sorted(w.key for w in gaps.warnings)
