#!/usr/bin/env bash
# Build the `sluice` Python package as an abi3 manylinux wheel into dist/ (maturin, release).
# `pip install dist/sluice-*.whl` then needs no Rust toolchain (python/tests/test_wheel.py proves
# it in a fresh venv). Replaces older sluice wheels in dist/. Prints the wheel's path on the last
# line.
#
# Tag (docs/decisions.md, "Python wheel"):
# - default: manylinux2014 (glibc >= 2.17), linked with zig (`maturin --zig`, PyPI `ziglang`,
#   installed into python/.venv here) against an old glibc's symbols. Its own target directory
#   (python/target/zig): the first build compiles everything (~7 min on 2 shared cores), later
#   ones only what changed.
# - SLUICE_WHEEL_ZIG=0, or when zig cannot be installed: manylinux_2_34 (glibc >= 2.34: Debian 12,
#   Ubuntu 22.04, RHEL 9), linked natively against Debian 12's glibc 2.36; Rust std and the C
#   dependencies pull versioned symbols up to GLIBC_2.34, so maturin refuses manylinux_2_28.
#   It shares python/target with `maturin develop` (seconds when that is fresh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/python"

if [[ ! -x .venv/bin/maturin ]]; then
  "$root/scripts/python-setup.sh" >/dev/null
fi
export PATH="$HOME/.cargo/bin:$PATH" CARGO_INCREMENTAL=0
zig=${SLUICE_WHEEL_ZIG:-1}
if [[ $zig == 1 ]] && ! .venv/bin/python -m ziglang version >/dev/null 2>&1; then
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check 'ziglang==0.17.1' >&2; then
    echo "python-wheel: ziglang could not be installed: building a manylinux_2_34 wheel instead" >&2
    zig=0
  fi
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The venv's interpreter and environment, as `maturin develop` in python-setup.sh: pyo3's build
# script keys on them, and any difference rebuilds pyo3 and the extension (minutes here).
if [[ $zig == 1 ]]; then
  VIRTUAL_ENV=$PWD/.venv PATH="$PWD/.venv/bin:$PATH" CARGO_TARGET_DIR=$PWD/target/zig \
    .venv/bin/maturin build --release --zig --target "$(rustc -vV | sed -n 's/^host: //p')" \
    --compatibility manylinux2014 -o "$out" >&2
else
  VIRTUAL_ENV=$PWD/.venv PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin build --release \
    --compatibility manylinux_2_34 -o "$out" >&2
fi
whl=$(ls "$out"/sluice-*.whl)
mkdir -p "$root/dist"
rm -f "$root"/dist/sluice-*.whl
mv "$whl" "$root/dist/"
echo "$root/dist/$(basename "$whl")"
