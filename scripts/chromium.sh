#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the browser tests (crates/cli/tests/console.rs, the
# console; crates/cli/tests/browser.rs): Debian's chromium + chromium-driver (one source
# package, so their versions match), installed only when missing. Safe to re-run; `make test`
# runs it. SLUICE_SKIP_BROWSER=1 skips the install (the console test then prints SKIPPED).
set -euo pipefail

if [[ ${SLUICE_SKIP_BROWSER:-} == 1 ]]; then
  echo "chromium: SLUICE_SKIP_BROWSER=1, not installing"
  exit 0
fi
if command -v chromedriver >/dev/null && [[ -x /usr/lib/chromium/chromium ]]; then
  exit 0
fi

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "chromium: need root (or sudo) to run: $*" >&2; exit 1; fi
}

echo "chromium: installing chromium and chromium-driver (the browser tests)"
export DEBIAN_FRONTEND=noninteractive
started=$SECONDS
as_root apt-get update -qq
as_root apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends \
  chromium chromium-driver fonts-dejavu-core >/dev/null
echo "chromium: installed in $((SECONDS - started)) s ($(chromedriver --version | head -n 1))"
