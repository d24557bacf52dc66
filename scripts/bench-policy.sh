#!/usr/bin/env bash
# Policy benchmark: the latency a checked CreateTopics and IncrementalAlterConfigs adds through
# kshim, against the broker directly and against kshim without policies, in the same run; and
# the in-process cost of the checks next to the broker's own work. The driver is
# tests/tools/policy_bench.py; the measuring program is examples/policy_bench.rs (its header
# says what each leg does).
#
#   bash scripts/bench-policy.sh                 # 3 rounds (~2-3 min)
#   bash scripts/bench-policy.sh --rounds 5
#   bash scripts/bench-policy.sh --no-build      # use target/release as it is
#
# Exit status: 0 once the tables are printed, non-zero when something failed to run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
die() { printf 'bench-policy: FAILED: %s\n' "$*" >&2; exit 1; }

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
  timeout 1200 cargo build --release --bin kshim --example policy_bench || die "cargo build failed"
fi
exec timeout 1200 "$PY" "$ROOT/tests/tools/policy_bench.py" "${args[@]}"
