#!/usr/bin/env bash
# A real Prometheus remote-write receiver, Graphite (carbon plaintext) listener and query API for
# Sluice's export tests: VictoriaMetrics single node, built from the Go module proxy (no download
# site, no Docker) once, into a cache outside the repository, only when the binary is missing.
# Recipe origin: /work/shared/recipes/go-servers.md (verified on the session machine, 2026-11:
# VictoriaMetrics v1.151.0, about 50 s to build on 2 cores, 27 MB); this script is the
# repository's own copy of it:
#   GOBIN=DIR go install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0
#
#   scripts/victoriametrics.sh start    start one victoria-metrics on 127.0.0.1 (free ports, HTTP
#                                       and Graphite) if it is not up; print the `export` lines
#   scripts/victoriametrics.sh stop     stop the server this script started (by its PID)
#   scripts/victoriametrics.sh status   up or not (exit 1 when not)
#   scripts/victoriametrics.sh env      print the `export` lines of the running server
#   scripts/victoriametrics.sh build    only build the binary if missing (Go from apt if missing)
#
# Idempotent: `start` with the server up returns at once. The export lines (also in
# $HOME_DIR/env): SLUICE_VM_HTTP (http://127.0.0.1:PORT: remote write at /api/v1/write, queries
# at /api/v1/export, /api/v1/query_range, import at /api/v1/import/prometheus) and
# SLUICE_VM_GRAPHITE (127.0.0.1:PORT, carbon plaintext over TCP).
# State lives in $SLUICE_VM_HOME (default: target/victoriametrics in the repository); the binary in
# ${SLUICE_CACHE:-~/.cache/sluice}/bin/victoria-metrics. Ports are picked free at each start
# (several checkouts may run at once); SLUICE_VM_HTTP_PORT / SLUICE_VM_GRAPHITE_PORT pin them.
set -euo pipefail

MODULE_VERSION=v1.151.0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOME_DIR=${SLUICE_VM_HOME:-$ROOT/target/victoriametrics}
BIN_DIR=${SLUICE_CACHE:-$HOME/.cache/sluice}/bin
BIN=$BIN_DIR/victoria-metrics

build() {
  # The version stamp beside the binary: another version in the cache is rebuilt, not used.
  if [[ -x $BIN && $(cat "$BIN.version" 2>/dev/null) == "$MODULE_VERSION" ]]; then return 0; fi
  # Go >= 1.21 (it fetches the toolchain the module asks for): scripts/go.sh (Debian 12's apt
  # Go is 1.19).
  PATH=$(dirname "$(GO_NEED_MINOR=21 "$ROOT/scripts/go.sh" | tail -n 1)"):$PATH
  mkdir -p "$BIN_DIR"
  echo "victoriametrics: building VictoriaMetrics ($MODULE_VERSION) into $BIN_DIR (about 1 minute)" >&2
  local work start=$SECONDS
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  GOBIN=$work GOFLAGS=-p=2 go install \
    "github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$MODULE_VERSION" >&2
  mv "$work/victoria-metrics" "$BIN.partial"
  mv "$BIN.partial" "$BIN"
  echo "$MODULE_VERSION" >"$BIN.version"
  rm -rf "$work"
  trap - EXIT
  echo "victoriametrics: built in $((SECONDS - start)) s" >&2
}

pid_of() { cat "$HOME_DIR/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Up means: the HTTP API answers /health and the Graphite listener accepts connections.
ready() {
  [[ -f $HOME_DIR/env ]] || return 1
  local http graphite
  http=$(sed -n 's/^export SLUICE_VM_HTTP=//p' "$HOME_DIR/env")
  graphite=$(sed -n 's/^export SLUICE_VM_GRAPHITE=127.0.0.1://p' "$HOME_DIR/env")
  [[ $(curl -s --max-time 5 "$http/health" || true) == OK ]] || return 1
  port_open "$graphite"
}

start() {
  if alive && ready; then
    echo "victoriametrics: already up (pid $(pid_of))" >&2
    cat "$HOME_DIR/env"
    return
  fi
  stop_server
  build
  local http_port graphite_port
  http_port=${SLUICE_VM_HTTP_PORT:-$(free_port)}
  graphite_port=${SLUICE_VM_GRAPHITE_PORT:-$(free_port)}
  while [[ $graphite_port == "$http_port" ]]; do graphite_port=$(free_port); done
  for port in "$http_port" "$graphite_port"; do
    if port_open "$port"; then
      echo "victoriametrics: 127.0.0.1:$port is taken (SLUICE_VM_*_PORT?)" >&2
      exit 1
    fi
  done
  rm -rf "$HOME_DIR/data"
  mkdir -p "$HOME_DIR/data" "$HOME_DIR/logs"
  cat >"$HOME_DIR/env" <<ENV
export SLUICE_VM_HTTP=http://127.0.0.1:$http_port
export SLUICE_VM_GRAPHITE=127.0.0.1:$graphite_port
ENV
  # Loopback only; any sample age accepted (tests write fixed past timestamps); no latency offset
  # on queries (the tests read back what they just wrote); no self-telemetry.
  (cd "$HOME_DIR" && exec setsid "$BIN" -storageDataPath="$HOME_DIR/data" \
    -httpListenAddr="127.0.0.1:$http_port" -graphiteListenAddr="127.0.0.1:$graphite_port" \
    -retentionPeriod=100y -search.latencyOffset=0s -search.disableCache \
    -loggerLevel=WARN >"$HOME_DIR/logs/vm.log" 2>&1 </dev/null) &
  echo $! >"$HOME_DIR/pid"
  local deadline=$((SECONDS + 60))
  until ready; do
    if ! alive; then
      echo "victoriametrics: the server died; tail of its log:" >&2
      tail -n 30 "$HOME_DIR/logs/vm.log" >&2 || true
      rm -f "$HOME_DIR/pid"
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "victoriametrics: not ready in 60 s; tail of its log:" >&2
      tail -n 30 "$HOME_DIR/logs/vm.log" >&2 || true
      stop_server
      exit 1
    fi
    sleep 0.2
  done
  echo "victoriametrics: up (pid $(pid_of), HTTP on 127.0.0.1:$http_port, Graphite on" \
    "127.0.0.1:$graphite_port)" >&2
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
  if alive && ready; then
    echo "victoriametrics: up (pid $(pid_of))"
  else
    echo "victoriametrics: not running"
    return 1
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop_server; echo "victoriametrics: stopped" ;;
  status) status ;;
  env) status >/dev/null && cat "$HOME_DIR/env" ;;
  build) build; echo "victoriametrics: $BIN" ;;
  *) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
