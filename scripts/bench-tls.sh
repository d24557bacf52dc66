#!/usr/bin/env bash
# TLS benchmark: full TLS handshakes per second, TLS produce throughput, and the cost of a
# certificate reload through the admin API, for kshim and for one Apache Kafka 4.1.1 node's
# own SSL listener, measured in the same run with the two alternating. The driver is
# tests/tools/tls_bench.py (its docstring says what each part measures); the handshake and
# reload load comes from examples/tls_bench/ (rustls, session resumption off).
#
#   bash scripts/bench-tls.sh                       # everything, default sizes (~3.5 min on 2 cores)
#   bash scripts/bench-tls.sh --parts handshakes    # one or more of handshakes,produce,reload
#   BENCH_ROUNDS=5 bash scripts/bench-tls.sh
#   bash scripts/bench-tls.sh --no-build            # use target/release/{kshim,examples/tls_bench}
#   bash scripts/bench-tls.sh --help                # every option of the driver
#
# Other knobs: BENCH_HS_CONCURRENCY (default 1,8), BENCH_HS_ROUNDS, BENCH_HS_SECS,
# BENCH_RECORDS (1 KiB records per produce leg), BENCH_RELOADS, BENCH_WINDOW_PAIRS,
# BENCH_WINDOW_SECS, BENCH_RELOAD_EVERY_MS, BENCH_MAX_SECS (hard cap, default 900),
# KSHIM_BIN / TLS_BENCH_BIN (other binaries), KSHIM_BENCH_KEEP_TMP=1 (keep logs, configs, certs).
#
# Prints tables with kshim/broker ratios measured in the same run. Nothing is judged: the exit
# status is 0 whenever the benchmark ran, non-zero only when something failed to run. The
# broker, both kshims and every client are stopped by their PIDs however the run ends.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

JARS="${KSHIM_KAFKA_JARS:-$ROOT/build/kafka-jars}"
KAFKA_VERSION="4.1.1"
PY="$ROOT/.venv/bin/python"
KSHIM_BIN="${KSHIM_BIN:-$ROOT/target/release/kshim}"
TLS_BENCH_BIN="${TLS_BENCH_BIN:-$ROOT/target/release/examples/tls_bench}"
BUILD_TIMEOUT_S=1200

die() { printf 'bench-tls: FAILED: %s\n' "$*" >&2; exit 1; }
step() { printf '==> %s\n' "$*" >&2; }

build=1
driver_args=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) exec "$PY" "$ROOT/tests/tools/tls_bench.py" --help ;;
    --no-build) build=0 ;;
    *) driver_args+=("$arg") ;;
  esac
done

# ---------------------------------------------------------------------------- prerequisites
for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-server-$KAFKA_VERSION.jar" \
           "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar"; do
  [ -f "$JARS/$jar" ] || die "$JARS/$jar is missing: the Kafka $KAFKA_VERSION broker and tools are not installed. Run: bash scripts/install-deps.sh"
done
command -v java >/dev/null 2>&1 || die "java is not on PATH (a JDK 17+ runs the broker and ProducerPerformance). Run: bash scripts/install-deps.sh"
command -v keytool >/dev/null 2>&1 || die "keytool is not on PATH (it makes the PKCS#12 truststore; it comes with the JDK). Run: bash scripts/install-deps.sh"
command -v openssl >/dev/null 2>&1 || die "openssl is not on PATH (it makes the CA, the certificates and the keystores)"
[ -x "$PY" ] || die "$PY is missing (the driver needs the project's venv with kafka-python). Run: bash scripts/install-deps.sh"
"$PY" -c 'import kafka, pytest' 2>/dev/null || die "kafka-python or pytest is not installed in .venv. Run: bash scripts/install-deps.sh"

# ---------------------------------------------------------------------------- build
if [ "$build" -eq 1 ]; then
  command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH (pass --no-build to use the binaries as they are)"
  step "cargo build --release --bin kshim --example tls_bench"
  timeout "$BUILD_TIMEOUT_S" cargo build --release --quiet --bin kshim --example tls_bench \
    || die "cargo build --release failed or took longer than ${BUILD_TIMEOUT_S}s"
fi
[ -x "$KSHIM_BIN" ] || die "$KSHIM_BIN is missing or not executable (build it with cargo build --release, or set KSHIM_BIN)"
[ -x "$TLS_BENCH_BIN" ] || die "$TLS_BENCH_BIN is missing (build it with cargo build --release --example tls_bench, or set TLS_BENCH_BIN)"
# The benchmark needs kshim's TLS listeners, TLS to the upstream and the admin API.
help_text="$(timeout 10 "$KSHIM_BIN" serve --help 2>&1)" || die "$KSHIM_BIN serve --help failed: $help_text"
grep -q -- '--upstream' <<<"$help_text" \
  || die "$KSHIM_BIN has no proxy mode (serve --help does not mention --upstream)"

# ---------------------------------------------------------------------------- run
# exec: the driver gets Ctrl-C and SIGTERM itself and stops everything it started by PID.
exec "$PY" "$ROOT/tests/tools/tls_bench.py" --kshim-bin "$KSHIM_BIN" --bench-bin "$TLS_BENCH_BIN" \
  ${driver_args[@]+"${driver_args[@]}"}
