#!/usr/bin/env bash
# Install the npm packages the tests use (the hot-shots statsd client, crates/cli/tests/statsd.rs)
# into a cache directory outside the repository: $SLUICE_NODE_DIR, default
# ~/.cache/sluice/node. Idempotent: an installed, matching version is reused. Installs Node.js
# and npm with apt when they are missing (Debian 12). Prints the node_modules directory on the
# last line (for NODE_PATH).
set -euo pipefail

HOT_SHOTS=17.1.1
DIR=${SLUICE_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/node}

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "node-deps: need root (or sudo) to run: $*" >&2; exit 1; fi
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node-deps: installing nodejs and npm (Debian)" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq nodejs npm >/dev/null
fi

have=$(node -e "try { console.log(require('$DIR/node_modules/hot-shots/package.json').version) } catch (e) {}" 2>/dev/null || true)
if [[ $have != "$HOT_SHOTS" ]]; then
  mkdir -p "$DIR"
  npm install --silent --no-audit --no-fund --prefix "$DIR" "hot-shots@$HOT_SHOTS" >&2
fi
echo "$DIR/node_modules"
