#!/usr/bin/env bash
# ApiVersions v4 benchmark: a standalone kshim against a real Apache Kafka 4.1.1
# broker (KRaft, combined broker+controller), both on free loopback ports, measured
# in the same run by examples/api_versions_bench.rs.
#
#   bash scripts/bench.sh                      # 1,16,256 connections, 1 s warm-up + 5 s each
#   BENCH_CONNECTIONS=1,64 BENCH_DURATION_SECS=10 bash scripts/bench.sh
#   bash scripts/bench.sh --client-threads 1   # extra arguments go to the benchmark
#
# Needs the Kafka jars in build/kafka-jars (bash scripts/install-deps.sh), a JDK 17+,
# python3 and cargo. Every step is bounded in time; both servers are stopped by
# their PIDs when the script exits, however it exits. KSHIM_BENCH_KEEP_TMP=1 keeps
# the temporary directory (logs, configs) for inspection.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

JARS="${KSHIM_KAFKA_JARS:-$ROOT/build/kafka-jars}"
KAFKA_VERSION="4.1.1"
CONNECTIONS="${BENCH_CONNECTIONS:-1,16,256}"
DURATION_SECS="${BENCH_DURATION_SECS:-5}"
WARMUP_SECS="${BENCH_WARMUP_SECS:-1}"
BROKER_HEAP="${BENCH_BROKER_HEAP:-1g}"
BUILD_TIMEOUT_S=1200
FORMAT_TIMEOUT_S=120
START_TIMEOUT_S=90
STOP_TIMEOUT_S=20

die() { printf 'bench: FAILED: %s\n' "$*" >&2; exit 1; }
step() { printf '==> %s\n' "$*" >&2; }

# ---------------------------------------------------------------------------- prerequisites
for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-server-$KAFKA_VERSION.jar" \
           "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar"; do
  [ -f "$JARS/$jar" ] || die "$JARS/$jar is missing: the Kafka $KAFKA_VERSION jars are not installed. Run: bash scripts/install-deps.sh"
done
command -v java >/dev/null 2>&1 || die "java is not on PATH (a JDK 17+ runs the broker). Run: bash scripts/install-deps.sh"
command -v python3 >/dev/null 2>&1 || die "python3 is not on PATH (needed to pick free ports and probe the broker)"
command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH"

# ---------------------------------------------------------------------------- cleanup
TMP="$(mktemp -d "${TMPDIR:-/tmp}/kshim-bench.XXXXXX")"
BROKER_PID=""
KSHIM_PID=""

stop_pid() { # NAME PID: SIGTERM, wait, then SIGKILL; only this PID
  local name="$1" pid="$2" waited=0
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((STOP_TIMEOUT_S * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    printf 'bench: %s (pid %s) ignored SIGTERM for %ss; sending SIGKILL\n' "$name" "$pid" "$STOP_TIMEOUT_S" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid kshim "$KSHIM_PID"
  stop_pid broker "$BROKER_PID"
  if [ "$rc" -ne 0 ]; then
    for log in "$TMP/broker/console.log" "$TMP/broker/server.log" "$TMP/kshim.log"; do
      if [ -s "$log" ]; then
        printf -- '--- last lines of %s\n' "$log" >&2
        tail -n 20 "$log" >&2
      fi
    done
  fi
  if [ -n "${KSHIM_BENCH_KEEP_TMP:-}" ]; then
    printf 'bench: kept %s\n' "$TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------- build
step "cargo build --release (kshim and the api_versions_bench example)"
timeout "$BUILD_TIMEOUT_S" cargo build --release --quiet --bin kshim --example api_versions_bench \
  || die "cargo build --release failed or took longer than ${BUILD_TIMEOUT_S}s"
KSHIM_BIN="$ROOT/target/release/kshim"
BENCH_BIN="$ROOT/target/release/examples/api_versions_bench"

# ---------------------------------------------------------------------------- ports
read -r BROKER_PORT CONTROLLER_PORT KSHIM_PORT < <(python3 - <<'EOF'
import socket
socks = []
for _ in range(3):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
)
[ -n "${KSHIM_PORT:-}" ] || die "could not pick free loopback ports"

# ---------------------------------------------------------------------------- broker
BROKER_DIR="$TMP/broker"
mkdir -p "$BROKER_DIR/data"
cat > "$BROKER_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$BROKER_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF

step "formatting the broker's storage (kafka.tools.StorageTool)"
timeout "$FORMAT_TIMEOUT_S" java -Xmx256m \
  -Dlog4j2.configurationFile="$ROOT/tests/interop/log4j2-tools.properties" \
  -cp "$JARS/*" kafka.tools.StorageTool format -t AAAAAAAAAAAAAAAAAAAAAA -c "$BROKER_DIR/server.properties" \
  > "$BROKER_DIR/format.log" 2>&1 \
  || { cat "$BROKER_DIR/format.log" >&2; die "StorageTool format failed"; }

step "starting Apache Kafka $KAFKA_VERSION on 127.0.0.1:$BROKER_PORT (controller 127.0.0.1:$CONTROLLER_PORT)"
java "-Xmx$BROKER_HEAP" "-Xms$BROKER_HEAP" -XX:+UseG1GC -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="$ROOT/tests/interop/log4j2-broker.properties" \
  -Dkafka.logs.dir="$BROKER_DIR" \
  -cp "$JARS/*" kafka.Kafka "$BROKER_DIR/server.properties" \
  < /dev/null > "$BROKER_DIR/console.log" 2>&1 &
BROKER_PID=$!

# ---------------------------------------------------------------------------- kshim
step "starting kshim on 127.0.0.1:$KSHIM_PORT"
mkdir -p "$TMP/kshim-data"
"$KSHIM_BIN" serve --listen "127.0.0.1:$KSHIM_PORT" --data-dir "$TMP/kshim-data" \
  < /dev/null > "$TMP/kshim.log" 2>&1 &
KSHIM_PID=$!

# ---------------------------------------------------------------------------- readiness
# Both must answer ApiVersions, and the broker must have finalized metadata.version
# (the same test of readiness as tests/interop/kafka_env.py).
wait_ready() { # NAME PID PORT NEED_METADATA_VERSION
  local name="$1" pid="$2" port="$3" need_mv="$4"
  local deadline=$((SECONDS + START_TIMEOUT_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    kill -0 "$pid" 2>/dev/null || die "$name (pid $pid) exited during startup"
    if PYTHONPATH="$ROOT/tests/interop" timeout 5 python3 - "$port" "$need_mv" <<'EOF' 2>/dev/null
import sys
from kafka_env import api_versions
info = api_versions(f"127.0.0.1:{sys.argv[1]}", timeout=2.0)
ok = info.error_code == 0 and 18 in info.api_keys
if sys.argv[2] == "1":
    ok = ok and "metadata.version" in info.finalized
sys.exit(0 if ok else 1)
EOF
    then
      return 0
    fi
    sleep 0.5
  done
  die "$name did not answer ApiVersions on 127.0.0.1:$port within ${START_TIMEOUT_S}s"
}
wait_ready kshim "$KSHIM_PID" "$KSHIM_PORT" 0
wait_ready broker "$BROKER_PID" "$BROKER_PORT" 1
step "both servers answer; broker pid $BROKER_PID, kshim pid $KSHIM_PID"
# Let the broker finish its post-startup work before the clock starts.
sleep 2

# ---------------------------------------------------------------------------- benchmark
n_counts=$(awk -F, '{print NF}' <<<"$CONNECTIONS")
# 2 targets x counts x (warm-up + duration), plus room for connection set-up.
BENCH_TIMEOUT_S=$((2 * n_counts * (WARMUP_SECS + DURATION_SECS) + 60))
step "benchmark: connections $CONNECTIONS, ${WARMUP_SECS}s warm-up + ${DURATION_SECS}s per round (at most ${BENCH_TIMEOUT_S}s)"
set +e
timeout "$BENCH_TIMEOUT_S" "$BENCH_BIN" \
  --target "kshim=127.0.0.1:$KSHIM_PORT" \
  --target "broker=127.0.0.1:$BROKER_PORT" \
  --baseline broker \
  --connections "$CONNECTIONS" \
  --duration-secs "$DURATION_SECS" \
  --warmup-secs "$WARMUP_SECS" \
  "$@"
bench_rc=$?
set -e
kill -0 "$KSHIM_PID" 2>/dev/null || die "kshim exited during the benchmark"
kill -0 "$BROKER_PID" 2>/dev/null || die "the broker exited during the benchmark"
[ "$bench_rc" -eq 0 ] || die "api_versions_bench exited with status $bench_rc"
