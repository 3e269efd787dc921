#!/usr/bin/env bash
# A real Alertmanager for Sluice's alert-notification tests: it takes alerts on
# `POST /api/v2/alerts` (as Prometheus sends them) and routes every one to a webhook URL the
# caller gives. Built from the Go module proxy (no download site, no Docker) once, into a cache
# outside the repository, only when the binary is missing. Recipe origin:
# /work/shared/recipes/go-servers.md "Alertmanager v0.35.0" (verified on the session machine,
# 2026-11: about 1.5 minutes to build on 2 cores, 53 MB); this script is the repository's own copy
# of it. Its web UI is embedded and the module ships without it, so an empty UI folder satisfies
# the embed:
#   src=$(go mod download -json github.com/prometheus/alertmanager@v0.35.0 | …["Dir"])
#   cp -r "$src" "$b/am" && chmod -R u+w "$b/am" && mkdir -p "$b/am/ui/app/dist" &&
#     echo '<html></html>' > "$b/am/ui/app/dist/index.html"
#   (cd "$b/am" && go build -o DIR/alertmanager ./cmd/alertmanager)
#
#   scripts/alertmanager.sh start WEBHOOK_URL   start one alertmanager on a free 127.0.0.1 port
#                                               routing every alert to WEBHOOK_URL (if it is not
#                                               up); print the `export` lines to use it
#   scripts/alertmanager.sh stop                stop the one in $SLUICE_AM_HOME (by its PID)
#   scripts/alertmanager.sh stop-all            stop every one under target/alertmanager/ (the
#                                               tests' own instances, left by a killed test)
#   scripts/alertmanager.sh status              up or not (exit 1 when not)
#   scripts/alertmanager.sh build               only build the binary if missing (Go from apt if
#                                               missing)
#
# Each test starts its own instance (its own webhook receiver), so state lives in $SLUICE_AM_HOME
# (default: target/alertmanager/default in the repository; tests use target/alertmanager/NAME).
# Routing: one group per alert (group_by: ['...']), group_wait 0s, group_interval 1s,
# repeat_interval 24h (a firing alert is sent once, then its resolution), send_resolved. No
# cluster (no gossip port): --cluster.listen-address is empty. The export line (also in
# $SLUICE_AM_HOME/env): SLUICE_AM_URL (http://127.0.0.1:PORT). SLUICE_AM_PORT pins the port.
# The binary: ${SLUICE_CACHE:-~/.cache/sluice}/bin/alertmanager (built under a lock there, so two
# tests starting at once build it once). Go: see ensure_go (Debian 12's apt Go is too old).
set -euo pipefail

MODULE_VERSION=v0.35.0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_DIR=$ROOT/target/alertmanager
HOME_DIR=${SLUICE_AM_HOME:-$BASE_DIR/default}
BIN_DIR=${SLUICE_CACHE:-$HOME/.cache/sluice}/bin
BIN=$BIN_DIR/alertmanager

# Alertmanager v0.35.0 needs Go >= 1.26 (its go.mod): scripts/go.sh gives one (Debian 12's own
# `golang` is 1.19; then the toolchain is fetched as a Go module into the cache).
ensure_go() {
  local go
  go=$(GO_NEED_MINOR=26 "$ROOT/scripts/go.sh" | tail -n 1)
  PATH=$(dirname "$go"):$PATH
}

built() { [[ -x $BIN && $(cat "$BIN.version" 2>/dev/null) == "$MODULE_VERSION" ]]; }

build() {
  # The version stamp beside the binary: another version in the cache is rebuilt, not used.
  if built; then return 0; fi
  mkdir -p "$BIN_DIR"
  # One build at a time (tests of several binaries may start at once); the second waits, then
  # finds the binary.
  exec 9>"$BIN_DIR/.alertmanager.lock"
  flock 9
  if built; then flock -u 9; return 0; fi
  ensure_go
  echo "alertmanager: building Alertmanager ($MODULE_VERSION) into $BIN_DIR (about 1.5 minutes)" >&2
  local src work start=$SECONDS
  src=$(go mod download -json "github.com/prometheus/alertmanager@$MODULE_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  cp -r "$src" "$work/am" && chmod -R u+w "$work/am"
  mkdir -p "$work/am/ui/app/dist" && echo '<html></html>' >"$work/am/ui/app/dist/index.html"
  (cd "$work/am" && go build -p 2 -o "$BIN.partial" ./cmd/alertmanager) >&2
  mv "$BIN.partial" "$BIN"
  echo "$MODULE_VERSION" >"$BIN.version"
  rm -rf "$work"
  trap - EXIT
  flock -u 9
  echo "alertmanager: built in $((SECONDS - start)) s with $(go env GOVERSION)" >&2
}

pid_of() { cat "$1/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of "$1"); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Up means: /-/ready answers 200.
ready() {
  [[ -f $HOME_DIR/env ]] || return 1
  local url
  url=$(sed -n 's/^export SLUICE_AM_URL=//p' "$HOME_DIR/env")
  curl -sf --max-time 5 -o /dev/null "$url/-/ready"
}

start() {
  local webhook=${1:-}
  if [[ ! $webhook =~ ^https?://[^/]+ ]]; then
    echo "alertmanager: start needs the webhook URL (http://HOST:PORT/PATH), got '$webhook'" >&2
    exit 2
  fi
  if alive "$HOME_DIR" && ready && [[ $(cat "$HOME_DIR/webhook" 2>/dev/null) == "$webhook" ]]; then
    echo "alertmanager: already up (pid $(pid_of "$HOME_DIR"))" >&2
    cat "$HOME_DIR/env"
    return
  fi
  stop_one "$HOME_DIR"
  build
  local port
  port=${SLUICE_AM_PORT:-$(free_port)}
  if port_open "$port"; then
    echo "alertmanager: 127.0.0.1:$port is taken (SLUICE_AM_PORT?)" >&2
    exit 1
  fi
  rm -rf "$HOME_DIR/data"
  mkdir -p "$HOME_DIR/data" "$HOME_DIR/logs"
  echo "$webhook" >"$HOME_DIR/webhook"
  # The URL is quoted as a YAML string (a test URL has no quote in it; refuse one that does).
  if [[ $webhook == *\'* ]]; then echo "alertmanager: a quote in the webhook URL" >&2; exit 2; fi
  cat >"$HOME_DIR/alertmanager.yml" <<YAML
# Written by scripts/alertmanager.sh: every alert, one group each, to the caller's webhook.
route:
  receiver: test-webhook
  group_by: ['...']
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 24h
receivers:
  - name: test-webhook
    webhook_configs:
      - url: '$webhook'
        send_resolved: true
        max_alerts: 0
YAML
  cat >"$HOME_DIR/env" <<ENV
export SLUICE_AM_URL=http://127.0.0.1:$port
ENV
  (cd "$HOME_DIR" && exec setsid "$BIN" --config.file="$HOME_DIR/alertmanager.yml" \
    --storage.path="$HOME_DIR/data" --web.listen-address="127.0.0.1:$port" \
    --cluster.listen-address= --log.level=info >"$HOME_DIR/logs/alertmanager.log" 2>&1 </dev/null) &
  echo $! >"$HOME_DIR/pid"
  local deadline=$((SECONDS + 60))
  until ready; do
    if ! alive "$HOME_DIR"; then
      echo "alertmanager: the server died; tail of its log:" >&2
      tail -n 30 "$HOME_DIR/logs/alertmanager.log" >&2 || true
      rm -f "$HOME_DIR/pid"
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "alertmanager: not ready in 60 s; tail of its log:" >&2
      tail -n 30 "$HOME_DIR/logs/alertmanager.log" >&2 || true
      stop_one "$HOME_DIR"
      exit 1
    fi
    sleep 0.1
  done
  echo "alertmanager: up (pid $(pid_of "$HOME_DIR"), 127.0.0.1:$port, routing to $webhook)" >&2
  cat "$HOME_DIR/env"
}

stop_one() {
  local dir=$1 p i
  p=$(pid_of "$dir")
  if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p"
    for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  fi
  rm -f "$dir/pid"
}

stop_all() {
  local dir
  for dir in "$BASE_DIR"/*/; do
    [[ -f $dir/pid ]] && stop_one "${dir%/}"
  done
  return 0
}

status() {
  if alive "$HOME_DIR" && ready; then
    echo "alertmanager: up (pid $(pid_of "$HOME_DIR"))"
  else
    echo "alertmanager: not running"
    return 1
  fi
}

case ${1:-} in
  start) start "${2:-}" ;;
  stop) stop_one "$HOME_DIR"; echo "alertmanager: stopped" ;;
  stop-all) stop_all; echo "alertmanager: all stopped" ;;
  status) status ;;
  build) build; echo "alertmanager: $BIN" ;;
  *) sed -n '2,32p' "$0" >&2; exit 2 ;;
esac
