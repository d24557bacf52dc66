#!/usr/bin/env bash
# Forwarding benchmark: produce and consume throughput, acknowledgement latency at a fixed
# rate, forwarder CPU per GB, peak memory and memory per idle connection, against one Apache
# Kafka 4.1.1 node (KRaft), in four legs measured in the same run: the broker directly, kshim
# in proxy mode, Kroxylicious 0.12.0 (no filters) and a plain socat TCP relay, the legs alternating
# over several rounds. The driver is tests/tools/proxy_bench.py; its docstring says how each
# figure is measured and how the relay leg gets past the broker's advertised address.
#
#   bash scripts/bench-proxy.sh                  # 3 rounds, 1 KiB and 64 KiB records, acks=1 and all
#   BENCH_ROUNDS=5 bash scripts/bench-proxy.sh
#   bash scripts/bench-proxy.sh --legs direct,kshim,relay   # pick legs (default: all four)
#   bash scripts/bench-proxy.sh --direct-only    # the broker leg alone, to check the benchmark
#   bash scripts/bench-proxy.sh --no-build       # use target/release/kshim as it is
#   bash scripts/bench-proxy.sh --help           # every option of the driver
#   bash scripts/bench-proxy.sh --study latency --legs direct,kshim,relay --rounds 10 \
#        --latency-seconds 10 --pin broker=0,proxy=1,client=1 --plots /tmp/lat
#                                                # ack latency only: the tail, round by round, and a CDF plot
#   bash scripts/bench-proxy.sh --tls            # every leg with TLS on both sides, and handshakes per second
#   bash scripts/bench-proxy.sh --study metadata --plots docs/img
#                                                # 3 brokers, 100 to 10,000 partitions: Metadata latency through kshim
#                                                # against direct, kshim's CPU and allocations per request
#   bash scripts/bench-proxy.sh --study connections --plots docs/img
#                                                # idle connections (plaintext and TLS): memory per connection;
#                                                # a storm of new TLS connections beside connected clients
#   (--study metadata and --study connections are run by tests/tools/scale_bench.py; --help there)
#   bash scripts/bench-proxy.sh --study network --no-build
#                                                # across a network: direct, kshim and socat behind links of
#                                                # tests/interop/netlab.py (RTT 20 ms plaintext; RTT 1 ms plaintext
#                                                # and TLS), in a namespace whose loopback has MTU 1500 (root);
#                                                # produce, round-trip-bound produce, consume (about 8 minutes on 2 cores)
#   BENCH_ROUNDS=5 bash scripts/bench-proxy.sh --study network --conditions wan
#                                                # one condition of wan, lan, lan-tls; --legs direct,kshim,relay too
#   (--study network is run by tests/tools/net_bench.py; knobs BENCH_NET_RECORDS_WAN, BENCH_NET_RECORDS_LAN,
#    BENCH_NET_CONSUME, BENCH_NET_MTU (0: the host's loopback); --help there)
#
# Other knobs: BENCH_RECORDS_1K, BENCH_RECORDS_64K (records per produce run),
# BENCH_LATENCY_SECS, BENCH_LATENCY_RATE_1K, BENCH_LATENCY_RATE_64K (latency runs),
# BENCH_IDLE_CONNS (idle connections per forwarder, default 10000; 0 skips that test),
# BENCH_PARTITIONS, BENCH_MAX_SECS (hard cap, default 1800 s, 3600 with --tls), KSHIM_BIN (another kshim binary),
# KSHIM_BENCH_KEEP_TMP=1 (keep logs and configs).
#
# Kroxylicious: the driver resolves io.kroxylicious:kroxylicious-runtime:0.12.0 and its runtime
# dependencies from Maven Central with mvn on first use (tests/tools/kroxylicious/pom.xml) into
# build/kroxylicious/0.12.0/, compiles our own main, tests/tools/kroxylicious/KroxyliciousMain.java,
# against them, and runs it as `java -Xmx512m ... KroxyliciousMain kroxylicious.yaml`. Its binary
# distribution (kroxylicious-app) does not resolve on these machines and is not used; nor is
# KROXYLICIOUS_HOME. Without --legs, a Kroxylicious that cannot be had is left out with a notice.
#
# Prints a table per record size of medians per leg with kshim's ratio to each other leg, a
# memory table and one line per goal. The goals are informational: the exit status is 0
# whenever the benchmark ran, non-zero only when something failed to run. The broker, every
# forwarder and every client JVM are stopped by their PIDs however the run ends.
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
legs="direct,kshim,kroxylicious,relay"
driver="proxy_bench.py"
examples=()
driver_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) exec "$PY" "$ROOT/tests/tools/proxy_bench.py" --help ;;
    --tls) examples+=(tls_bench); driver_args+=("$1") ;;
    --study) [ $# -ge 2 ] || die "--study needs a value: latency, metadata, connections or network"
             case "$2" in
               network) driver="net_bench.py"; legs="direct,kshim,relay" ;;
               metadata) driver="scale_bench.py"; examples+=(metadata_bench) ;;
               connections) driver="scale_bench.py"; examples+=(tls_bench); legs="kshim,relay" ;;
             esac
             driver_args+=("$1" "$2"); shift ;;
    --no-build) build=0 ;;
    --direct-only) legs="direct"; driver_args+=("$1") ;;
    --legs) [ $# -ge 2 ] || die "--legs needs a value, e.g. --legs direct,kshim,relay"
            legs="$2"; driver_args+=("$1" "$2"); shift ;;
    --legs=*) legs="${1#--legs=}"; driver_args+=("$1") ;;
    *) driver_args+=("$1") ;;
  esac
  shift
done
has_leg() { [[ ",$legs," == *",$1,"* ]]; }

# ---------------------------------------------------------------------------- prerequisites
for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-server-$KAFKA_VERSION.jar" \
           "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar"; do
  [ -f "$JARS/$jar" ] || die "$JARS/$jar is missing: the Kafka $KAFKA_VERSION broker and tools are not installed. Run: bash scripts/install-deps.sh"
done
command -v java >/dev/null 2>&1 || die "java is not on PATH (a JDK 17+ runs the broker and the clients). Run: bash scripts/install-deps.sh"
command -v javac >/dev/null 2>&1 || die "javac is not on PATH (it compiles tests/tools/LatencyProbe.java). Run: bash scripts/install-deps.sh"
[ -x "$PY" ] || die "$PY is missing (the driver needs the project's venv with kafka-python). Run: bash scripts/install-deps.sh"
"$PY" -c 'import kafka' 2>/dev/null || die "kafka-python is not installed in .venv. Run: bash scripts/install-deps.sh"

if has_leg relay; then
  command -v socat >/dev/null 2>&1 || die "socat is not on PATH (the relay leg runs it). Run: bash scripts/install-deps.sh, or leave the leg out with --legs"
fi

if [ "$driver" = net_bench.py ]; then
  [ -x "$ROOT/build/bin/toxiproxy-server" ] || die "build/bin/toxiproxy-server is missing (the network lab's links). Run: bash scripts/install-deps.sh"
fi

# ---------------------------------------------------------------------------- kshim
if has_leg kshim; then
  if [ "$build" -eq 1 ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH (pass --no-build to use $KSHIM_BIN as it is)"
    step "cargo build --release --bin kshim ${examples[*]/#/--example }"
    timeout "$BUILD_TIMEOUT_S" cargo build --release --quiet --bin kshim ${examples[@]/#/--example } \
      || die "cargo build --release failed or took longer than ${BUILD_TIMEOUT_S}s"
  fi
  [ -x "$KSHIM_BIN" ] || die "$KSHIM_BIN is missing or not executable (build it with cargo build --release, or set KSHIM_BIN)"
  # Proxy mode is what is measured; a kshim without it would only answer discovery RPCs.
  help_text="$(timeout 10 "$KSHIM_BIN" serve --help 2>&1)" || die "$KSHIM_BIN serve --help failed: $help_text"
  grep -q -- '--upstream' <<<"$help_text" \
    || die "$KSHIM_BIN has no proxy mode yet (serve --help does not mention --upstream). Leave the kshim leg out with --legs, or run --direct-only."
fi

# ---------------------------------------------------------------------------- run
# exec: the driver gets Ctrl-C and SIGTERM itself and stops everything it started by PID.
exec "$PY" "$ROOT/tests/tools/$driver" --kshim-bin "$KSHIM_BIN" ${driver_args[@]+"${driver_args[@]}"}
