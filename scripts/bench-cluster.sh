#!/usr/bin/env bash
# kshim cluster benchmark: UpdateFeatures latency with the state shared through Kafka against
# the file store, how fast a change at one instance is served by the others, and ApiVersions
# throughput per instance in cluster mode against the file store, all in one run. The driver is
# tests/tools/cluster_bench.py; its docstring says what each part measures.
#
#   bash scripts/bench-cluster.sh                 # 3 rounds of 100 updates per store (~2 min)
#   bash scripts/bench-cluster.sh --rounds 5 --updates 200
#   bash scripts/bench-cluster.sh --no-build      # use target/release as it is
#
# Exit status: 0 once the tables are printed, non-zero when something failed to run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
die() { printf 'bench-cluster: FAILED: %s\n' "$*" >&2; exit 1; }

build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    *) args+=("$a") ;;
  esac
done
[ -x "$PY" ] || die "$PY is missing. Run: bash scripts/install-deps.sh"
ls "${KSHIM_KAFKA_JARS:-$ROOT/build/kafka-jars}"/kafka_2.13-*.jar >/dev/null 2>&1 \
  || die "the Kafka jars are missing. Run: bash scripts/install-deps.sh"
if [ "$build" -eq 1 ]; then
  # kshim and the one example it runs (each example is a whole-program link of its own).
  timeout 1200 cargo build --release --bin kshim --example api_versions_bench || die "cargo build failed"
fi
exec timeout 1200 "$PY" "$ROOT/tests/tools/cluster_bench.py" "${args[@]}"
