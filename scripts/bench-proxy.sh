#!/usr/bin/env bash
# Forwarding benchmark: produce, consume and end-to-end latency of real Kafka clients
# against one Apache Kafka 4.1.1 node (KRaft), directly and through kshim in proxy mode,
# measured in the same run with legs alternating over several rounds. The driver is
# tests/tools/proxy_bench.py; its docstring says what each leg measures.
#
#   bash scripts/bench-proxy.sh                  # 3 rounds, 1 KiB and 64 KiB records (~6-8 min)
#   BENCH_ROUNDS=5 bash scripts/bench-proxy.sh
#   bash scripts/bench-proxy.sh --direct-only    # the broker leg alone, to check the benchmark
#   bash scripts/bench-proxy.sh --no-build       # use target/release/kshim as it is
#   bash scripts/bench-proxy.sh --help           # every option of the driver
#
# Other knobs: BENCH_RECORDS_1K, BENCH_RECORDS_64K (records per produce leg),
# BENCH_LATENCY_RECORDS, BENCH_PARTITIONS, BENCH_MAX_SECS (hard cap, default 900),
# KSHIM_BIN (another kshim binary), KSHIM_BENCH_KEEP_TMP=1 (keep logs and configs).
#
# Prints a table of medians with kshim/direct ratios, added latency, kshim CPU s/GB and a
# goal line (throughput ratio >= 0.95, added p99 <= 1 ms). The goal is informational: the
# exit status is 0 whenever the benchmark ran, non-zero only when something failed to run.
# The broker, kshim and every client JVM are stopped by their PIDs however the run ends.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

JARS="${KSHIM_KAFKA_JARS:-$ROOT/build/kafka-jars}"
KAFKA_VERSION="4.1.1"
PY="$ROOT/.venv/bin/python"
KSHIM_BIN="${KSHIM_BIN:-$ROOT/target/release/kshim}"
BUILD_TIMEOUT_S=1200

die() { printf 'bench-proxy: FAILED: %s\n' "$*" >&2; exit 1; }
step() { printf '==> %s\n' "$*" >&2; }

build=1
direct_only=0
driver_args=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) exec "$PY" "$ROOT/tests/tools/proxy_bench.py" --help ;;
    --no-build) build=0 ;;
    --direct-only) direct_only=1; driver_args+=("$arg") ;;
    *) driver_args+=("$arg") ;;
  esac
done

# ---------------------------------------------------------------------------- prerequisites
for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-server-$KAFKA_VERSION.jar" \
           "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar"; do
  [ -f "$JARS/$jar" ] || die "$JARS/$jar is missing: the Kafka $KAFKA_VERSION broker and tools are not installed. Run: bash scripts/install-deps.sh"
done
command -v java >/dev/null 2>&1 || die "java is not on PATH (a JDK 17+ runs the broker and the clients). Run: bash scripts/install-deps.sh"
command -v javac >/dev/null 2>&1 || die "javac is not on PATH (it compiles tests/tools/LatencyProbe.java). Run: bash scripts/install-deps.sh"
[ -x "$PY" ] || die "$PY is missing (the driver needs the project's venv with kafka-python). Run: bash scripts/install-deps.sh"
"$PY" -c 'import kafka' 2>/dev/null || die "kafka-python is not installed in .venv. Run: bash scripts/install-deps.sh"

# ---------------------------------------------------------------------------- kshim
if [ "$direct_only" -eq 0 ]; then
  if [ "$build" -eq 1 ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH (pass --no-build to use $KSHIM_BIN as it is)"
    step "cargo build --release --bin kshim"
    timeout "$BUILD_TIMEOUT_S" cargo build --release --quiet --bin kshim \
      || die "cargo build --release failed or took longer than ${BUILD_TIMEOUT_S}s"
  fi
  [ -x "$KSHIM_BIN" ] || die "$KSHIM_BIN is missing or not executable (build it with cargo build --release, or set KSHIM_BIN)"
  # Proxy mode is what is measured; a kshim without it would only answer discovery RPCs.
  help_text="$(timeout 10 "$KSHIM_BIN" serve --help 2>&1)" || die "$KSHIM_BIN serve --help failed: $help_text"
  grep -q -- '--upstream' <<<"$help_text" \
    || die "$KSHIM_BIN has no proxy mode yet (serve --help does not mention --upstream). Run with --direct-only to check the broker leg alone."
fi

# ---------------------------------------------------------------------------- run
# exec: the driver gets Ctrl-C and SIGTERM itself and stops everything it started by PID.
exec "$PY" "$ROOT/tests/tools/proxy_bench.py" --kshim-bin "$KSHIM_BIN" ${driver_args[@]+"${driver_args[@]}"}
