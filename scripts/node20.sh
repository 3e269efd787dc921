#!/usr/bin/env bash
# Node.js >= 20 for the JavaScript SDK's tests (sdk/js). Prints the path of a `node` binary on
# its last line: the one on PATH when it is 20 or newer, else the official Node 20 build from
# nodejs.org, downloaded once (checked against its SHA-256 list) into $SLUICE_NODE20_DIR, default
# ~/.cache/sluice/node20. Idempotent. (Debian 12's own nodejs package is 18: too old.)
set -euo pipefail

VERSION=v20.20.2
DIR=${SLUICE_NODE20_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/node20}

if command -v node >/dev/null; then
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [[ $major -ge 20 ]]; then
    command -v node
    exit 0
  fi
fi

case $(uname -m) in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "node20: no official Node build for $(uname -m); install Node >= 20 yourself" >&2; exit 1 ;;
esac
name=node-$VERSION-linux-$arch
if [[ ! -x $DIR/$name/bin/node ]]; then
  echo "node20: downloading $name from nodejs.org into $DIR" >&2
  mkdir -p "$DIR"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  curl -fsSL --max-time 300 -o "$tmp/$name.tar.xz" "https://nodejs.org/dist/$VERSION/$name.tar.xz"
  curl -fsSL --max-time 60 -o "$tmp/SHASUMS256.txt" "https://nodejs.org/dist/$VERSION/SHASUMS256.txt"
  (cd "$tmp" && grep " $name.tar.xz\$" SHASUMS256.txt | sha256sum -c - >&2)
  tar -xJf "$tmp/$name.tar.xz" -C "$DIR"
fi
echo "$DIR/$name/bin/node"
