#!/usr/bin/env bash
# Install what building and testing Sluice needs, only if missing. Safe to re-run.
set -euo pipefail

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "deps: need root (or sudo) to run: $*" >&2; exit 1; fi
}

if ! perl -MSereal::Encoder -MSereal::Decoder -MJSON::XS -e 1 2>/dev/null; then
  echo "deps: installing the Perl Sereal reference (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq libsereal-encoder-perl libsereal-decoder-perl libjson-xs-perl >/dev/null
fi

# The README's commands and the demo use curl, jq and xxd (the README test runs them).
missing=()
for tool in curl jq xxd; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if (( ${#missing[@]} )); then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    echo "deps: cargo is in ~/.cargo/bin; add it to PATH" >&2
  else
    echo "deps: installing Rust from Debian (cargo)"
    as_root apt-get install -y -qq cargo >/dev/null
  fi
fi
