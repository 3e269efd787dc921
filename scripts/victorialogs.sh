#!/usr/bin/env bash
# VictoriaLogs, the peer of `make bench-history`: built from the Go module proxy once, into a
# cache outside the repository, only when missing. Recipe origin: /work/shared/recipes/go-servers.md
# (verified on the session machine, 2026-11; `go install` of v1.52.1 takes about a minute).
#
#   scripts/victorialogs.sh build   build if missing (Go from scripts/go.sh), say where it is
#   scripts/victorialogs.sh path    build if missing, print the binary's path (stdout: the path only)
set -euo pipefail
VERSION=v1.52.1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${SLUICE_CACHE:-$HOME/.cache/sluice}/bin
BIN=$BIN_DIR/victoria-logs

build() {
  [[ -x $BIN ]] && return 0
  # Go >= 1.21 (it fetches the toolchain the module asks for): scripts/go.sh (Debian 12's apt
  # Go is 1.19).
  PATH=$(dirname "$(GO_NEED_MINOR=21 "$ROOT/scripts/go.sh" | tail -n 1)"):$PATH
  mkdir -p "$BIN_DIR"
  echo "victorialogs: building $VERSION into $BIN_DIR (about a minute)" >&2
  GOBIN=$BIN_DIR go install "github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@$VERSION" >&2
}

case ${1:-} in
  build) build; echo "victorialogs: $BIN" ;;
  path) build; echo "$BIN" ;;
  *) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
