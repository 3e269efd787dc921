#!/usr/bin/env bash
# VictoriaLogs, the peer of `make bench-history`: built from the Go module proxy once, into a
# cache outside the repository, only when missing. Recipe origin: /work/shared/recipes/go-servers.md
# (verified on the session machine, 2026-11; `go install` of v1.52.1 takes about a minute).
#
#   scripts/victorialogs.sh path    build if missing, print the binary's path
set -euo pipefail
VERSION=v1.52.1
BIN_DIR=${SLUICE_CACHE:-$HOME/.cache/sluice}/bin
BIN=$BIN_DIR/victoria-logs
if [[ ! -x $BIN ]]; then
  if ! command -v go >/dev/null; then
    if [[ $(id -u) -eq 0 ]]; then apt-get install -y -qq golang >/dev/null || (apt-get update -qq && apt-get install -y -qq golang >/dev/null); else sudo apt-get install -y -qq golang >/dev/null; fi
  fi
  mkdir -p "$BIN_DIR"
  echo "victorialogs: building $VERSION into $BIN_DIR (about a minute)" >&2
  GOBIN=$BIN_DIR go install "github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@$VERSION" >&2
fi
echo "$BIN"
