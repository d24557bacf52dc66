#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test.
#
#   scripts/test.sh            the gate, everything:
#     1. scripts/install-deps.sh  (Debian packages, Python venv, Kafka jars, Go clients)
#     2. the shared Kafka brokers start in the background (tests/interop/brokers.py), while
#     3. cargo test --no-run      builds kshim, the tests and the examples they run
#     4. cargo test --release     (unit, property, fixture, bad-input, fuzz-smoke and crash tests;
#                                 the test harnesses at opt-level 0, see scripts/test-rustc)
#     5. scripts/fuzz.sh          (builds the libFuzzer targets, kshim instrumented and every other
#                                 crate the one step 3 built, and runs each 5 s from its seeds), at
#                                 the lowest CPU priority beside step 6, whose tests mostly wait on
#                                 brokers and client JVMs; its output goes to build/test-times/fuzz.log
#                                 and is printed when it ends
#     6. pytest tests/interop     (real Kafka clusters and real clients, kshim standalone and in front),
#                                 in two pytest-xdist workers; beside them, scripts/soak.sh --quick,
#                                 whose report test_soak.py checks
#   scripts/test.sh --quick    for every small change, a few minutes: steps 3 and 4, then the
#                              interop tests that need no Kafka broker
#
# Other arguments go to pytest. Every step is bounded in time; any failure stops the run
# with a non-zero exit. The time of each stage (and of each interop module) is printed at
# the end, failed or not.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

QUICK=0
if [ "${1:-}" = "--quick" ]; then
  QUICK=1
  shift
fi

# The interop tests run in two pytest-xdist workers: the tests of each shared cluster are one
# group, which one worker runs one test at a time, and every other module runs whole in one
# worker with the clusters of its own (conftest.py). KSHIM_PYTEST_PARALLEL="" runs them one
# at a time in a single process.
PARALLEL="${KSHIM_PYTEST_PARALLEL--n 2 --dist loadgroup}"

TIMES_DIR="$ROOT/build/test-times"
mkdir -p "$TIMES_DIR"
rm -rf "${TIMES_DIR:?}"/*  # the last run's times and logs, the soak's report directory included
STAGES="$TIMES_DIR/stages.tsv"
MODULES="$TIMES_DIR/interop-modules.tsv"
RUN_STARTED=$SECONDS
POOL_PID=""
FUZZ_PID=""
SOAK_PID=""

step() { printf '\n==> %s\n' "$*"; }

# The CPU seconds the whole machine has spent busy since boot (every core; /proc/stat's
# user, nice, system, irq, softirq and steal). The gate runs alone on its machine, so the
# difference across a stage is that stage's CPU cost, background work included: with two
# cores, a stage whose CPU is close to twice its wall time is bound by the CPU.
busy_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%d", ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat
}

RUN_CPU_STARTED=$(busy_cpu)

# record NAME WALL CPU RC: one line of the summary.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$([ "$4" -eq 0 ] && echo ok || echo "FAILED ($4)")" >>"$STAGES"
}

# stage NAME COMMAND...: runs the command, records its wall and CPU time, stops the run on
# failure.
stage() {
  local name="$1"
  shift
  step "$name"
  local started=$SECONDS cpu_started rc=0
  cpu_started=$(busy_cpu)
  "$@" || rc=$?
  record "$name" "$((SECONDS - started))" "$(($(busy_cpu) - cpu_started))" $rc
  return $rc
}

summary() {
  local rc=$?
  local pid
  for pid in "$FUZZ_PID" "$SOAK_PID"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [ -n "$POOL_PID" ] && kill -0 "$POOL_PID" 2>/dev/null; then
    kill -TERM "$POOL_PID" 2>/dev/null || true
    wait "$POOL_PID" 2>/dev/null || true
  fi
  printf '\n==> stage times (wall seconds; CPU seconds the machine spent during the stage, %s cores)\n' "$(nproc)"
  [ -f "$STAGES" ] && awk -F'\t' '{ printf "  %-58s %5d s %6s CPU-s  %s\n", $1, $2, $3, $4 }' "$STAGES"
  if [ -s "$MODULES" ]; then
    printf '  interop modules (setup, tests and teardown; the two workers overlap):\n'
    sort -t$'\t' -k2,2nr "$MODULES" | awk -F'\t' '{ printf "    %-56s %5d s  %s tests\n", $1, $2, $3 }'
  fi
  printf '  %-58s %5d s %6d CPU-s  %s\n' "total" "$((SECONDS - RUN_STARTED))" "$(($(busy_cpu) - RUN_CPU_STARTED))" \
    "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")"
  exit $rc
}
trap summary EXIT

stage "installing dependencies" bash scripts/install-deps.sh

if [ $QUICK -eq 0 ]; then
  # The shared brokers boot while cargo builds; pytest attaches to them through the state
  # file and waits for their readiness there. They stop with this script (trap above), and
  # by themselves after a lifetime bound if this script is killed.
  step "starting the shared Kafka brokers in the background (log: build/test-times/brokers.log)"
  .venv/bin/python tests/interop/brokers.py serve --state "$TIMES_DIR/brokers.json" \
    --lifetime 3600 >"$TIMES_DIR/brokers.log" 2>&1 &
  POOL_PID=$!
  export KSHIM_SHARED_BROKERS="$TIMES_DIR/brokers.json"
fi

# The kshim binary, the test targets and the two examples the interop tests run (differential,
# tls_bench; the benchmarks' scripts build their own), into the directory cargo chooses
# (CARGO_TARGET_DIR, a cargo config's build.target-dir, or ./target): the interop tests, the soak
# and the fuzz script look there (KSHIM_TARGET_DIR).
# Test harnesses compile at opt-level 0, the code they test at opt-level 3 (scripts/test-rustc
# says why). Every cargo command here runs with it, so that none rebuilds what another built.
export RUSTC_WORKSPACE_WRAPPER="$ROOT/scripts/test-rustc"
# Cargo's default release settings, not Cargo.toml's whole-program link (scripts/test-profile.sh
# says why).
. "$ROOT/scripts/test-profile.sh"
build_all() {
  timeout 1500 cargo test --release --no-run --lib --bins --tests &&
    timeout 900 cargo build --release --example differential --example tls_bench
}
stage "building kshim, its examples and tests" build_all
KSHIM_TARGET_DIR="$(scripts/cargo-target-dir)"
export KSHIM_TARGET_DIR
export KSHIM_BIN="${KSHIM_BIN:-$KSHIM_TARGET_DIR/release/kshim}"
stage "Rust tests" timeout 900 cargo test --release --lib --bins --tests

if [ $QUICK -eq 1 ]; then
  export KSHIM_QUICK=1
  stage "interop tests that need no broker" \
    timeout 600 .venv/bin/python -m pytest tests/interop -p no:cacheprovider -ra $PARALLEL \
    -m "not broker" --module-times "$MODULES" "$@"
  exit 0
fi

# The fuzzing runs in its own process group (set -m), so that the summary can stop all of it.
FUZZ_LOG="$TIMES_DIR/fuzz.log"
FUZZ_STAGE="coverage-guided fuzzing, 5 s per target (beside the interop tests)"
step "$FUZZ_STAGE: started in the background (log: build/test-times/fuzz.log)"
fuzz_started=$SECONDS
set -m
env FUZZ_SECONDS=5 timeout 1200 nice -n 19 \
  /usr/bin/time -f '%U %S' -o "$TIMES_DIR/fuzz.cpu" bash scripts/fuzz.sh >"$FUZZ_LOG" 2>&1 &
FUZZ_PID=$!
set +m

# The soak's quick run (scripts/soak.sh --quick: three brokers of its own, three kshim
# instances, the client load and every kind of fault, about four minutes) starts with the
# interop tests, in its own process group, so that it is never the last thing the run waits
# for; tests/interop/test_soak.py checks its report (KSHIM_SOAK_RUN).
SOAK_DIR="$TIMES_DIR/soak"
rm -rf "$SOAK_DIR"
mkdir -p "$SOAK_DIR"
step "the soak's quick run: started in the background (log: build/test-times/soak/log)"
set -m
# The subshell inherits `set -e`: its status is taken with `||`, so that a soak that fails
# still writes it (test_soak.py then reports the broken invariant, not a soak that never ended).
( soak_rc=0; timeout 900 bash scripts/soak.sh --quick --out "$SOAK_DIR/report" \
    >"$SOAK_DIR/log" 2>&1 || soak_rc=$?; echo "$soak_rc" >"$SOAK_DIR/exit" ) &
SOAK_PID=$!
set +m
export KSHIM_SOAK_RUN="$SOAK_DIR"

stage "interop tests against Apache Kafka and real clients" \
  timeout 2400 .venv/bin/python -m pytest tests/interop -p no:cacheprovider -ra $PARALLEL \
  --durations=15 --module-times "$MODULES" "$@"

step "$FUZZ_STAGE: waiting for it to end"
fuzz_rc=0
wait "$FUZZ_PID" || fuzz_rc=$?
FUZZ_PID=""
cat "$FUZZ_LOG"
# The fuzzing's own CPU time (its build and its runs), which the interop stage's figure
# includes.
record "$FUZZ_STAGE" "$((SECONDS - fuzz_started))" \
  "$(awk '/^[0-9.]+ [0-9.]+$/ { printf "%d", $1 + $2 }' "$TIMES_DIR/fuzz.cpu" 2>/dev/null)" $fuzz_rc
[ $fuzz_rc -eq 0 ] || exit $fuzz_rc
