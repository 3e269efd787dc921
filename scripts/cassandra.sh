#!/usr/bin/env bash
# A real Apache Cassandra for Sluice's tests and benches, from Maven Central (no tarball, no
# Docker): `cassandra-all` and its dependencies fetched by Maven, started with plain `java`.
# Recipe origin: /work/shared/recipes/cassandra-from-maven.md (verified on the session machine,
# 2026-11-22); this script is the repository's own copy of it.
#
#   scripts/cassandra.sh start [1|3]   start a 1-node (127.0.0.1) or 3-node (127.0.0.1-3) cluster
#   scripts/cassandra.sh stop          stop every node this script started
#   scripts/cassandra.sh stop-node K   stop node K only (replication tests); start-node K restarts it
#   scripts/cassandra.sh status        which nodes run, and which cluster shape
#   scripts/cassandra.sh nodetool K ARGS  nodetool against node K (e.g. `nodetool 1 flush`)
#   scripts/cassandra.sh du KEYSPACE   bytes on disk of a keyspace's SSTables, over all nodes
#
# Idempotent: `start N` with N nodes already up returns at once; with the other shape up it
# stops that one first (data is thrown away: these clusters are for tests). Installs a JDK and
# Maven via apt when missing. Small heaps: 1 GB for a single node, 512 MB per node of three.
# State lives in $SLUICE_CASSANDRA_HOME (default: target/cassandra in the repository).
# CQL on 127.0.0.K:9042, storage on 127.0.0.K:7000 (loopback aliases need no set-up on Linux).
# Beside another such cluster on the machine: SLUICE_CASSANDRA_NET=127.0.1 (nodes on 127.0.1.K)
# and SLUICE_CASSANDRA_JMX=7298 (JMX on 7298+K); the tests and the bench read the same variables.
set -euo pipefail

NET=${SLUICE_CASSANDRA_NET:-127.0.0}
JMX=${SLUICE_CASSANDRA_JMX:-7198}

VERSION=5.0.6
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOME_DIR=${SLUICE_CASSANDRA_HOME:-$ROOT/target/cassandra}
LIB=$HOME_DIR/lib
mkdir -p "$HOME_DIR"

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "cassandra: need root (or sudo) to run: $*" >&2; exit 1; fi
}

deps() {
  local pkgs=()
  command -v java >/dev/null || pkgs+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || pkgs+=(maven)
  if ((${#pkgs[@]})); then
    echo "cassandra: installing ${pkgs[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
  if [[ ! -f $LIB/.complete-$VERSION ]]; then
    echo "cassandra: fetching cassandra-all $VERSION and its dependencies from Maven Central"
    rm -rf "$LIB"
    mkdir -p "$LIB"
    cat >"$HOME_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sluice</groupId><artifactId>cassandra-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId><version>$VERSION</version></dependency>
  </dependencies>
</project>
POM
    (cd "$HOME_DIR" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$LIB")
    touch "$LIB/.complete-$VERSION"
  fi
}

node_dir() { echo "$HOME_DIR/node$1"; }
pid_of() { local f; f="$(node_dir "$1")/pid"; [[ -f $f ]] && cat "$f" || true; }
alive() { local p; p=$(pid_of "$1"); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }
shape() { cat "$HOME_DIR/shape" 2>/dev/null || echo 0; }

# 16 tokens per node, evenly spaced over the Murmur3 range and interleaved between `n` nodes.
tokens() {
  local k=$1 n=$2
  python3 - "$k" "$n" <<'PY'
import sys
k, n = int(sys.argv[1]), int(sys.argv[2])
total = 16 * n
step = 2**64 // total
print(",".join(str(-2**63 + (i * n + (k - 1)) * step) for i in range(16)))
PY
}

write_config() {
  local k=$1 n=$2 d
  d=$(node_dir "$k")
  mkdir -p "$d/conf" "$d/data" "$d/logs" "$d/tmp"
  {
    cat <<YAML
cluster_name: 'sluice-test'
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
data_file_directories:
  - $d/data/data
commitlog_directory: $d/data/commitlog
saved_caches_directory: $d/data/saved_caches
hints_directory: $d/data/hints
cdc_raw_directory: $d/data/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$NET.1:7000"
listen_address: $NET.$k
rpc_address: $NET.$k
storage_port: 7000
native_transport_port: 9042
start_native_transport: true
endpoint_snitch: SimpleSnitch
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
auto_snapshot: false
# Blobs are written once by LWT (INSERT … IF NOT EXISTS): Paxos v2 needs half the round trips.
paxos_variant: v2
# Tests create a keyspace per contract item: keep schema changes and small tables cheap.
memtable_heap_space: 128MiB
max_hints_delivery_threads: 1
hinted_handoff_throttle: 10MiB
YAML
    if ((n == 1)); then
      echo "allocate_tokens_for_local_replication_factor: 1"
    else
      echo "initial_token: $(tokens "$k" "$n")"
      echo "auto_bootstrap: false"
    fi
  } >"$d/conf/cassandra.yaml"
  cat >"$d/conf/logback.xml" <<'XML'
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE" /></root>
</configuration>
XML
  cat >"$d/conf/jvm17.options" <<OPTS
-ea
-da:net.openhft...
-XX:+UseThreadPriorities
-XX:+HeapDumpOnOutOfMemoryError
-XX:HeapDumpPath=$d/tmp
-Xss256k
-XX:+UseTLAB
-XX:+ResizeTLAB
-XX:+PerfDisableSharedMem
-Djava.net.preferIPv4Stack=true
-XX:+UseG1GC
-XX:+ParallelRefProcEnabled
-XX:MaxTenuringThreshold=1
-XX:G1HeapRegionSize=16m
-XX:G1RSetUpdatingPauseTimePercent=5
-XX:MaxGCPauseMillis=300
-XX:InitiatingHeapOccupancyPercent=70
-Djdk.attach.allowAttachSelf=true
--add-exports java.base/jdk.internal.misc=ALL-UNNAMED
--add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
--add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
--add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
--add-exports java.sql/java.sql=ALL-UNNAMED
--add-exports java.base/java.lang.ref=ALL-UNNAMED
--add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
--add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
--add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
--add-opens java.base/java.lang.module=ALL-UNNAMED
--add-opens java.base/jdk.internal.loader=ALL-UNNAMED
--add-opens java.base/jdk.internal.ref=ALL-UNNAMED
--add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
--add-opens java.base/jdk.internal.math=ALL-UNNAMED
--add-opens java.base/jdk.internal.module=ALL-UNNAMED
--add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
--add-opens java.base/sun.nio.ch=ALL-UNNAMED
--add-opens java.base/java.io=ALL-UNNAMED
--add-opens java.base/java.lang.reflect=ALL-UNNAMED
--add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
--add-opens java.base/java.lang=ALL-UNNAMED
--add-opens java.base/java.util=ALL-UNNAMED
-Dio.netty.tryReflectionSetAccessible=true
-Dio.netty.allocator.useCacheForAllThreads=true
-Dio.netty.allocator.maxOrder=11
OPTS
}

cql_open() { (exec 3<>"/dev/tcp/$NET.$1/9042") 2>/dev/null; }

launch() {
  local k=$1 n=$2 d heap ring jamm
  d=$(node_dir "$k")
  if alive "$k"; then return; fi
  heap=1G ring=1000
  ((n > 1)) && heap=512M ring=5000
  jamm=$(ls "$LIB"/jamm-*.jar | head -n 1)
  (cd "$d/tmp" && exec setsid java @"$d/conf/jvm17.options" \
    -Dcassandra.ring_delay_ms=$ring -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Xms$heap -Xmx$heap -javaagent:"$jamm" \
    -Dcassandra.config="file://$d/conf/cassandra.yaml" -Dcassandra.storagedir="$d/data" \
    -Dcassandra.logdir="$d/logs" -Dlogback.configurationFile="$d/conf/logback.xml" \
    -Dcassandra-foreground=yes -Dcassandra.jmx.local.port=$((JMX + k)) \
    -cp "$d/conf:$LIB/*" org.apache.cassandra.service.CassandraDaemon \
    >"$d/logs/stdout.log" 2>&1 </dev/null) &
  echo $! >"$d/pid"
}

wait_up() {
  local k=$1 deadline=$((SECONDS + 120))
  until cql_open "$k"; do
    if ! alive "$k"; then
      echo "cassandra: node $k died; tail of its log:" >&2
      tail -n 30 "$(node_dir "$k")/logs/system.log" >&2 || true
      exit 1
    fi
    if ((SECONDS > deadline)); then echo "cassandra: node $k not up in 120 s" >&2; exit 1; fi
    sleep 0.5
  done
}

stop_node() {
  local k=$1 p i
  p=$(pid_of "$k")
  if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p"
    for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  fi
  rm -f "$(node_dir "$k")/pid"
}

start() {
  local n=${1:-1} k up=1
  [[ $n == 1 || $n == 3 ]] || { echo "cassandra: start 1 or start 3" >&2; exit 2; }
  if [[ $(shape) == "$n" ]]; then
    for k in $(seq 1 "$n"); do alive "$k" || up=0; done
    if ((up)); then echo "cassandra: $n-node cluster already up"; return; fi
  fi
  stop_all
  # Our nodes are stopped: whatever still answers there is another cluster (another checkout's),
  # and the tests would silently use it — and never see their own `stop-node` take it down.
  for k in $(seq 1 "$n"); do
    if cql_open "$k"; then
      echo "cassandra: $NET.$k:9042 answers, but not from $HOME_DIR: another cluster holds the" \
        "port (another checkout's? run its 'scripts/cassandra.sh stop')" >&2
      exit 1
    fi
  done
  deps
  for k in $(seq 1 "$n"); do rm -rf "$(node_dir "$k")"; write_config "$k" "$n"; done
  echo "$n" >"$HOME_DIR/shape"
  for k in $(seq 1 "$n"); do launch "$k" "$n"; done
  for k in $(seq 1 "$n"); do wait_up "$k"; done
  echo "cassandra: $n-node cluster up (CQL on $(seq -s, -f "$NET.%g:9042" 1 "$n"))"
}

stop_all() {
  local k
  for k in 1 2 3; do stop_node "$k"; done
  rm -f "$HOME_DIR/shape"
}

status() {
  local n k
  n=$(shape)
  if ((n == 0)); then echo "cassandra: not running"; return 1; fi
  for k in $(seq 1 "$n"); do
    if alive "$k" && cql_open "$k"; then echo "node $k $NET.$k:9042 up (pid $(pid_of "$k"))"
    else echo "node $k $NET.$k:9042 down"; fi
  done
  echo "shape $n"
}

nodetool() {
  local k=$1; shift
  local opts
  opts=$(grep -E '^--add-(exports|opens)' "$(node_dir "$k")/conf/jvm17.options" | tr '\n' ' ')
  # shellcheck disable=SC2086
  java $opts -Xmx128M -cp "$(node_dir "$k")/conf:$LIB/*" org.apache.cassandra.tools.NodeTool \
    -h 127.0.0.1 -p $((JMX + k)) "$@"
}

du_keyspace() {
  local ks=$1 n k total=0 b
  n=$(shape)
  for k in $(seq 1 "$n"); do
    b=$(find "$(node_dir "$k")/data/data/$ks" -name '*.db' -printf '%s\n' 2>/dev/null | awk '{s+=$1} END {print s+0}')
    total=$((total + b))
  done
  echo "$total"
}

case ${1:-} in
  start) start "${2:-1}" ;;
  stop) stop_all; echo "cassandra: stopped" ;;
  stop-node) stop_node "${2:?node number}" ;;
  start-node) n=$(shape); launch "${2:?node number}" "$n"; wait_up "$2" ;;
  status) status ;;
  nodetool) shift; nodetool "$@" ;;
  du) du_keyspace "${2:?keyspace}" ;;
  deps) deps ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
