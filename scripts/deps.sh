#!/usr/bin/env bash
# Install what building and testing Sluice needs, only if missing. Safe to re-run.
set -euo pipefail

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "deps: need root (or sudo) to run: $*" >&2; exit 1; fi
}

# apt needs its package lists once per run (a fresh machine has none).
apt_updated=
apt_update_once() {
  if [[ -z $apt_updated ]]; then as_root apt-get update -qq; apt_updated=1; fi
}

if ! perl -MSereal::Encoder -MSereal::Decoder -MJSON::XS -e 1 2>/dev/null; then
  echo "deps: installing the Perl Sereal reference (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt_update_once
  as_root apt-get install -y -qq libsereal-encoder-perl libsereal-decoder-perl libjson-xs-perl >/dev/null
fi

# The README's commands and the demo use curl, jq and xxd (the README test runs them).
missing=()
for tool in curl jq xxd; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if (( ${#missing[@]} )); then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_update_once
  as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The headless-browser test (crates/cli/tests/browser.rs: a page on another origin tries the
# admin routes) drives Debian's Chromium through its chromedriver (one source package, so their
# versions match). A failed install is not fatal here: that test then says why, and fails when
# CI is set.
if ! command -v chromedriver >/dev/null || [[ ! -x /usr/lib/chromium/chromium ]]; then
  echo "deps: installing chromium and chromium-driver (the browser test)"
  export DEBIAN_FRONTEND=noninteractive
  started=$SECONDS
  if apt_update_once &&
    as_root apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends \
      chromium chromium-driver fonts-dejavu-core >/dev/null; then
    echo "deps: chromium installed in $((SECONDS - started)) s"
  else
    echo "deps: could not install chromium; the browser test will fail under CI" >&2
  fi
fi

# Node.js and npm: the statsd test sends with the npm hot-shots client (scripts/node-deps.sh
# installs it outside the repository).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "deps: installing nodejs and npm (the statsd client test)"
  export DEBIAN_FRONTEND=noninteractive
  apt_update_once
  as_root apt-get install -y -qq nodejs npm >/dev/null
fi

if ! command -v cargo >/dev/null; then
  if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    echo "deps: cargo is in ~/.cargo/bin; add it to PATH" >&2
  else
    echo "deps: installing Rust from Debian (cargo)"
    apt_update_once
    as_root apt-get install -y -qq cargo >/dev/null
  fi
fi
