#!/usr/bin/env bash
# The Go toolchain for the Go SDK's tests (sdk/go, `make test-go`). Debian 12's apt `golang`
# (1.19) is too old for the module (go 1.23: iterators), so nothing is installed from apt: this
# checks that a `go` >= 1.23 is in PATH (or at /usr/local/go/bin, where the official tarball
# goes) and prints its path on the last line. Idempotent; installs nothing.
set -euo pipefail

NEED_MINOR=23
GO=$(command -v go || true)
if [[ -z $GO && -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
fi
if [[ -z $GO ]]; then
  cat >&2 <<MSG
go.sh: no Go toolchain found (go in PATH or /usr/local/go/bin/go).
  The Go SDK (sdk/go) needs Go >= 1.$NEED_MINOR; Debian 12's apt golang (1.19) is too old.
  Install the official release: https://go.dev/dl/ (tar -C /usr/local -xzf go1.X.linux-amd64.tar.gz),
  then add /usr/local/go/bin to PATH and run make test-go again.
MSG
  exit 1
fi
version=$("$GO" env GOVERSION 2>/dev/null || true)   # e.g. go1.26.8
minor=$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$version")
if [[ ! $version =~ ^go1\.[0-9]+ ]] || (( minor < NEED_MINOR )); then
  echo "go.sh: $GO is ${version:-of an unknown version}; the Go SDK needs Go >= 1.$NEED_MINOR (https://go.dev/dl/)" >&2
  exit 1
fi
echo "$GO"
