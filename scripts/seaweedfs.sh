#!/usr/bin/env bash
# A real S3-compatible object store for Sluice's tests (the S3 column locations): SeaweedFS, built
# from the Go module proxy (no download site, no Docker) once, into a cache outside the repository,
# only when the binary is missing. Recipe origin: /work/shared/recipes/go-servers.md (verified on
# the session machine, 2026-11: SeaweedFS 4.53, about 10 minutes to build on 2 cores, 233 MB);
# this script is the repository's own copy of it:
#   src=$(go mod download -json github.com/seaweedfs/seaweedfs@$MODULE_VERSION | …["Dir"])
#   cp -r "$src" "$b/weed" && chmod -R u+w "$b/weed" && (cd "$b/weed" && go build -o DIR/weed ./weed)
#   weed server -dir=DATA -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.port=19333 -volume.port=18080 \
#     -filer -filer.port=18888 -s3 -s3.port=18333
# (its go.mod has replace directives, so `go install` refuses it: it is built as its own module).
#
#   scripts/seaweedfs.sh start    start one `weed server` (master + volume + filer + S3 gateway on
#                                 127.0.0.1) if it is not up; print the `export` lines to use it
#   scripts/seaweedfs.sh stop     stop the server this script started (by its PID)
#   scripts/seaweedfs.sh status   up or not (exit 1 when not)
#   scripts/seaweedfs.sh env      print the `export` lines of the running server
#   scripts/seaweedfs.sh build    only build the binary if missing (Go from apt if missing)
#
# Idempotent: `start` with the server up returns at once. Requests are signed: one identity with
# Admin actions (`-s3.config`), its keys generated on first start and kept in the state directory.
# `start` makes the bucket `sluice-test`, and waits until an object can be put and read back.
# The export lines (also in $HOME_DIR/env): SLUICE_S3_ENDPOINT, SLUICE_S3_BUCKET, SLUICE_S3_REGION,
# SLUICE_S3_ACCESS_KEY_ID, SLUICE_S3_SECRET_ACCESS_KEY.
# State lives in $SLUICE_SEAWEEDFS_HOME (default: target/seaweedfs in the repository); the binary in
# ${SLUICE_CACHE:-~/.cache/sluice}/bin/weed. Ports (several checkouts may run at once; gRPC ports
# are each HTTP port + 10000): SLUICE_SEAWEEDFS_S3_PORT (18333), SLUICE_SEAWEEDFS_MASTER_PORT
# (19333), SLUICE_SEAWEEDFS_VOLUME_PORT (18080), SLUICE_SEAWEEDFS_FILER_PORT (18888).
set -euo pipefail

# SeaweedFS 4.53 (the module proxy knows it only by this pseudo-version).
MODULE_VERSION=v0.0.0-20261109003541-7506e5f91cd6
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOME_DIR=${SLUICE_SEAWEEDFS_HOME:-$ROOT/target/seaweedfs}
BIN_DIR=${SLUICE_CACHE:-$HOME/.cache/sluice}/bin
BIN=$BIN_DIR/weed
S3_PORT=${SLUICE_SEAWEEDFS_S3_PORT:-18333}
MASTER_PORT=${SLUICE_SEAWEEDFS_MASTER_PORT:-19333}
VOLUME_PORT=${SLUICE_SEAWEEDFS_VOLUME_PORT:-18080}
FILER_PORT=${SLUICE_SEAWEEDFS_FILER_PORT:-18888}
BUCKET=sluice-test
REGION=us-east-1
ENDPOINT=http://127.0.0.1:$S3_PORT
OK_SHA256=2689367b205c16ce32ed4200942b8b8b1e262dfc70d9bc9fbc77c49699a4f1df

build() {
  # The version stamp beside the binary: another version in the cache is rebuilt, not used.
  if [[ -x $BIN && $(cat "$BIN.version" 2>/dev/null) == "$MODULE_VERSION" ]]; then return 0; fi
  # Go >= 1.21 (it fetches the toolchain the module asks for): scripts/go.sh (Debian 12's apt
  # Go is 1.19).
  PATH=$(dirname "$(GO_NEED_MINOR=21 "$ROOT/scripts/go.sh" | tail -n 1)"):$PATH
  mkdir -p "$BIN_DIR"
  echo "seaweedfs: building SeaweedFS ($MODULE_VERSION) into $BIN_DIR (about 10 minutes)" >&2
  local src work start=$SECONDS
  src=$(go mod download -json "github.com/seaweedfs/seaweedfs@$MODULE_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  cp -r "$src" "$work/weed" && chmod -R u+w "$work/weed"
  (cd "$work/weed" && go build -p 2 -o "$BIN.partial" ./weed) >&2
  mv "$BIN.partial" "$BIN"
  echo "$MODULE_VERSION" >"$BIN.version"
  rm -rf "$work"
  trap - EXIT
  echo "seaweedfs: built in $((SECONDS - start)) s" >&2
}

pid_of() { cat "$HOME_DIR/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The identity's keys: made once per state directory (tests only; never real secrets).
keys() {
  if [[ ! -f $HOME_DIR/keys ]]; then
    mkdir -p "$HOME_DIR"
    python3 -c 'import secrets; print("sluice" + secrets.token_hex(7)); print(secrets.token_urlsafe(30))' \
      >"$HOME_DIR/keys.partial"
    mv "$HOME_DIR/keys.partial" "$HOME_DIR/keys"
  fi
  ACCESS_KEY=$(sed -n 1p "$HOME_DIR/keys")
  SECRET_KEY=$(sed -n 2p "$HOME_DIR/keys")
}

write_config() {
  cat >"$HOME_DIR/s3.json" <<JSON
{
  "identities": [
    {
      "name": "sluice-test",
      "credentials": [{ "accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY" }],
      "actions": ["Admin", "Read", "Write", "List", "Tagging"]
    }
  ]
}
JSON
  chmod 600 "$HOME_DIR/s3.json"
  cat >"$HOME_DIR/env" <<ENV
export SLUICE_S3_ENDPOINT=$ENDPOINT
export SLUICE_S3_BUCKET=$BUCKET
export SLUICE_S3_REGION=$REGION
export SLUICE_S3_ACCESS_KEY_ID=$ACCESS_KEY
export SLUICE_S3_SECRET_ACCESS_KEY=$SECRET_KEY
ENV
}

# A signed S3 request with curl (SigV4): s3 METHOD PATH [curl args…]; prints the HTTP status.
s3() {
  local method=$1 path=$2; shift 2
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X "$method" \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" "$@" "$ENDPOINT$path" || echo 000
}

# Up means: the bucket exists and an object can be written and read back with our keys.
ready() {
  local code
  code=$(s3 PUT "/$BUCKET")
  [[ $code == 200 || $code == 409 ]] || return 1
  # curl signs the payload only with its hash given (sha256 of "ok").
  [[ $(s3 PUT "/$BUCKET/.ready" --data-binary ok -H "x-amz-content-sha256: $OK_SHA256") == 200 ]] ||
    return 1
  [[ $(s3 GET "/$BUCKET/.ready") == 200 ]] || return 1
  s3 DELETE "/$BUCKET/.ready" >/dev/null
}

start() {
  keys
  if alive && ready; then
    echo "seaweedfs: already up (pid $(pid_of), S3 on $ENDPOINT)" >&2
    cat "$HOME_DIR/env"
    return
  fi
  stop_server
  for port in "$S3_PORT" "$MASTER_PORT" "$VOLUME_PORT" "$FILER_PORT"; do
    if port_open "$port"; then
      echo "seaweedfs: 127.0.0.1:$port answers, but not from $HOME_DIR: another server holds the" \
        "port (another checkout's? run its 'scripts/seaweedfs.sh stop', or set" \
        "SLUICE_SEAWEEDFS_*_PORT)" >&2
      exit 1
    fi
  done
  build
  rm -rf "$HOME_DIR/data"
  mkdir -p "$HOME_DIR/data" "$HOME_DIR/logs"
  write_config
  # Every listener pinned to 127.0.0.1 and to ports derived from ours; the extra gateways (Iceberg,
  # Lance) off, no telemetry; small volumes so a test run takes little disk.
  (cd "$HOME_DIR" && exec setsid "$BIN" server -dir="$HOME_DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$MASTER_PORT" -master.port.grpc=$((MASTER_PORT + 10000)) \
    -master.telemetry=false -master.volumeSizeLimitMB=64 \
    -volume.port="$VOLUME_PORT" -volume.port.grpc=$((VOLUME_PORT + 10000)) -volume.preStopSeconds=0 \
    -filer -filer.port="$FILER_PORT" -filer.port.grpc=$((FILER_PORT + 10000)) \
    -s3 -s3.port="$S3_PORT" -s3.port.grpc=$((S3_PORT + 10000)) -s3.port.iceberg=0 -s3.port.lance=0 \
    -s3.config="$HOME_DIR/s3.json" -s3.localSocket="$HOME_DIR/s3.sock" \
    -filer.localSocket="$HOME_DIR/filer.sock" \
    >"$HOME_DIR/logs/weed.log" 2>&1 </dev/null) &
  echo $! >"$HOME_DIR/pid"
  local deadline=$((SECONDS + 60))
  until ready; do
    if ! alive; then
      echo "seaweedfs: the server died; tail of its log:" >&2
      tail -n 30 "$HOME_DIR/logs/weed.log" >&2 || true
      rm -f "$HOME_DIR/pid"
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "seaweedfs: S3 not ready in 60 s; tail of its log:" >&2
      tail -n 30 "$HOME_DIR/logs/weed.log" >&2 || true
      stop_server
      exit 1
    fi
    sleep 0.3
  done
  echo "seaweedfs: up (pid $(pid_of), S3 on $ENDPOINT, bucket $BUCKET)" >&2
  cat "$HOME_DIR/env"
}

stop_server() {
  local p i
  p=$(pid_of)
  if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p"
    for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  fi
  rm -f "$HOME_DIR/pid"
}

status() {
  if [[ -f $HOME_DIR/keys ]] && keys && alive && ready; then
    echo "seaweedfs: up (pid $(pid_of), S3 on $ENDPOINT)"
  else
    echo "seaweedfs: not running"
    return 1
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop_server; echo "seaweedfs: stopped" ;;
  status) status ;;
  env) status >/dev/null && cat "$HOME_DIR/env" ;;
  build) build; echo "seaweedfs: $BIN" ;;
  *) sed -n '2,27p' "$0" >&2; exit 2 ;;
esac
