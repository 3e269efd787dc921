#!/usr/bin/env bash
# Build the `sluice` Python package as an abi3 manylinux wheel into dist/ (maturin, release).
# `pip install dist/sluice-*.whl` then needs no Rust toolchain (python/tests/test_wheel.py proves
# it in a fresh venv). Incremental: cargo reuses python/target, so an unchanged tree only
# repackages. Replaces older sluice wheels in dist/. Prints the wheel's path on the last line.
#
# Tag: manylinux_2_34 (glibc >= 2.34: Debian 12, Ubuntu 22.04, RHEL 9). The extension is linked
# here against Debian 12's glibc 2.36, and Rust std / the C dependencies pull versioned symbols up
# to GLIBC_2.34; maturin's audit refuses manylinux_2_28 for them (docs/decisions.md, "Python wheel").
# SLUICE_WHEEL_COMPAT overrides the tag (e.g. when built in an older manylinux container).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/python"

if [[ ! -x .venv/bin/maturin ]]; then
  "$root/scripts/python-setup.sh" >/dev/null
fi
export PATH="$HOME/.cargo/bin:$PATH" CARGO_INCREMENTAL=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The same interpreter and environment as `maturin develop` in python-setup.sh: pyo3's build
# script keys on them, and any difference rebuilds pyo3 and the extension (minutes here).
VIRTUAL_ENV=$PWD/.venv PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin build --release \
  --compatibility "${SLUICE_WHEEL_COMPAT:-manylinux_2_34}" -o "$out" >&2
whl=$(ls "$out"/sluice-*.whl)
mkdir -p "$root/dist"
rm -f "$root"/dist/sluice-*.whl
mv "$whl" "$root/dist/"
echo "$root/dist/$(basename "$whl")"
