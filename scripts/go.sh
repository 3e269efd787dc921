#!/usr/bin/env bash
# A Go toolchain >= 1.$GO_NEED_MINOR (default 23: the Go SDK's module uses iterators), its path
# printed on the last line. The one owner of "which Go" for the Makefile and the scripts that build
# servers from the Go module proxy (alertmanager.sh).
#
# - A `go` in PATH or at /usr/local/go/bin (where the official archive goes) that is new enough is
#   used as it is.
# - No Go at all: Debian's `golang` is installed from apt (1.19 on Debian 12: too old to build the
#   SDK, but able to fetch modules).
# - Go too old (or SLUICE_GO_FROM_PROXY=1): the toolchain $GO_TOOLCHAIN is fetched as the Go module
#   it is (golang.org/toolchain, what Go >= 1.21 fetches itself with GOTOOLCHAIN=auto), checked by
#   `go mod download` against the checksum database, into ${SLUICE_CACHE:-~/.cache/sluice}/bin,
#   once (later runs find it there).
# Idempotent.
set -euo pipefail

NEED_MINOR=${GO_NEED_MINOR:-23}
GO_TOOLCHAIN=go1.26.8
BIN_DIR=${SLUICE_CACHE:-$HOME/.cache/sluice}/bin

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "go.sh: need root (or sudo) to run: $*" >&2; exit 1; fi
}

minor_of() { "$1" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p'; }

# A Go installed from the official archive may not be on PATH (non-login shells, CI).
[[ -x /usr/local/go/bin/go ]] && PATH=$PATH:/usr/local/go/bin
GO=$(command -v go || true)
if [[ -z $GO ]]; then
  echo "go.sh: installing Go (apt)" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq golang >/dev/null ||
    { as_root apt-get update -qq && as_root apt-get install -y -qq golang >/dev/null; }
  GO=$(command -v go)
fi
minor=$(minor_of "$GO")
if [[ ${SLUICE_GO_FROM_PROXY:-} == 1 || -z $minor || $minor -lt $NEED_MINOR ]]; then
  dir=$BIN_DIR/$GO_TOOLCHAIN
  if [[ ! -x $dir/bin/go ]]; then
    echo "go.sh: fetching the Go toolchain $GO_TOOLCHAIN (module proxy; $GO is go1.${minor:-?})" >&2
    mkdir -p "$BIN_DIR"
    src=$(cd / && "$GO" mod download -json \
      "golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.$("$GO" env GOOS)-$("$GO" env GOARCH)" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    rm -rf "$dir.partial" && cp -r "$src" "$dir.partial" && chmod -R u+w "$dir.partial"
    # Module zips keep no file modes.
    chmod +x "$dir.partial"/bin/* "$dir.partial"/pkg/tool/*/*
    rm -rf "$dir" && mv "$dir.partial" "$dir"
  fi
  GO=$dir/bin/go
fi
echo "$GO"
