#!/usr/bin/env bash
# Set up python/.venv and build the `sluice` Python package into it (maturin, release mode).
# Idempotent: an existing venv and installed tools are reused; the build is incremental.
# Prints the venv's python path on the last line.
set -euo pipefail
cd "$(dirname "$0")/../python"

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "python-setup: need root (or sudo) to run: $*" >&2; exit 1; fi
}

# Python 3.10+ (the package uses the stable ABI of 3.10).
PY=${PYTHON:-}
if [[ -z $PY ]]; then
  for c in python3 python3.13 python3.12 python3.11 python3.10; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      PY=$c; break
    fi
  done
fi
[[ -n $PY ]] || { echo "python-setup: need Python 3.10 or later" >&2; exit 1; }

if [[ ! -x .venv/bin/python ]]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    # Debian's python3 ships venv (and ensurepip) separately.
    echo "python-setup: installing python3-venv (Debian)" >&2
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq python3-venv >/dev/null
    rm -rf .venv
    "$PY" -m venv .venv
  fi
fi
VPY=$PWD/.venv/bin/python

# Test and build tools; orjson is the bench's comparison (and speeds up NDJSON reads).
if ! "$VPY" -c 'import pytest, orjson' 2>/dev/null || [[ ! -x .venv/bin/maturin ]]; then
  "$VPY" -m pip install -q --disable-pip-version-check 'maturin>=1.5,<2' pytest orjson >&2
fi
# DuckDB reads the history tier's Parquet files in a test (python/tests/test_duckdb.py).
if ! "$VPY" -c 'import duckdb' 2>/dev/null; then
  "$VPY" -m pip install -q --disable-pip-version-check duckdb >&2
fi
# pyarrow is optional for users (to_arrow, iter_batches) but tested here: its absence fails the tests
# that need it (SLUICE_WITH_ARROW=0 does not install it).
if [[ ${SLUICE_WITH_ARROW:-1} == 1 ]] && ! "$VPY" -c 'import pyarrow' 2>/dev/null; then
  "$VPY" -m pip install -q --disable-pip-version-check pyarrow >&2
fi
# pandas: Reader.rollup(output="pandas") is tested (python/tests/test_rollups.py).
if [[ ${SLUICE_WITH_ARROW:-1} == 1 ]] && ! "$VPY" -c 'import pandas' 2>/dev/null; then
  "$VPY" -m pip install -q --disable-pip-version-check pandas >&2
fi

# statsd: a real statsd client for the statsd ingest test (crates/cli/tests/statsd.rs).
if ! "$VPY" -c 'import statsd' 2>/dev/null; then
  "$VPY" -m pip install -q --disable-pip-version-check 'statsd==4.0.1' >&2
fi

# OpenTelemetry: the Python SDK and its OTLP/HTTP exporter as a real client of POST /v1/logs
# (crates/cli/tests/otlp_logs.rs). Pinned: the test checks what this version sends.
OTEL=1.45.2
if ! "$VPY" -c "import importlib.metadata as m, opentelemetry.exporter.otlp.proto.http._log_exporter
assert m.version('opentelemetry-sdk') == '$OTEL'" 2>/dev/null; then
  "$VPY" -m pip install -q --disable-pip-version-check "opentelemetry-sdk==$OTEL" "opentelemetry-exporter-otlp-proto-http==$OTEL" >&2
fi

# The HyperLogLog oracle of crates/sketches (tests/python_hll.rs): python-hll and mmh3 in a venv of
# their own, because python-hll 0.1.3 (the last release) needs numpy < 1.24 (it uses `np.int`
# and numpy 1.x integer conversions) while pyarrow here brings numpy 2. Inside .venv/ so it is
# ignored and removed with it.
HLL_VENV=$PWD/.venv/hll-oracle
if ! "$HLL_VENV/bin/python" -c 'import python_hll.hll, mmh3' 2>/dev/null; then
  "$PY" -m venv "$HLL_VENV"
  "$HLL_VENV/bin/python" -m pip install -q --disable-pip-version-check 'python-hll==0.1.3' 'numpy<1.24' mmh3 >&2
fi

export PATH="$HOME/.cargo/bin:$PATH"
# Build and install the extension into the venv (incremental: cargo reuses python/target).
VIRTUAL_ENV=$PWD/.venv PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop --release -q >&2
echo "$VPY"
