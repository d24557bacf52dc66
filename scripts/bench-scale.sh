#!/usr/bin/env bash
# The Metadata leg of docs/performance.md's scale model, simulated: a fake upstream (in
# examples/metadata_scale/, whose main.rs's header says what it does and measures) names 1,000
# brokers and 1,000,000 partitions, kshim starts in front of it, and Metadata for every topic is
# timed direct and through kshim in the same run. Needs no broker and no Python.
#
#   bash scripts/bench-scale.sh                       # builds, then 1 client and 10 clients
#   bash scripts/bench-scale.sh --no-build --brokers 10 --partitions 10000 --topics 100
#   CLIENTS="1" bash scripts/bench-scale.sh --rounds 10
#
# Every other argument goes to metadata_scale, once per client count in $CLIENTS (default
# "1 10"), unless the arguments give --clients themselves. Each run prints a table and one JSON
# line on stdout, and bounds itself (--deadline-s, 300 s by default).
#
# Exit status: 0 once every run passed its checks, non-zero otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
die() { printf 'bench-scale: FAILED: %s\n' "$*" >&2; exit 1; }

build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    *) args+=("$a") ;;
  esac
done
if [ "$build" -eq 1 ]; then
  timeout 1200 cargo build --release --bin kshim --example metadata_scale || die "cargo build failed"
fi
TARGET="$("$ROOT/scripts/cargo-target-dir")"
SIM="$TARGET/release/examples/metadata_scale"
KSHIM="$TARGET/release/kshim"
[ -x "$SIM" ] || die "$SIM is missing (run without --no-build)"
[ -x "$KSHIM" ] || die "$KSHIM is missing (run without --no-build)"

counts="${CLIENTS:-1 10}"
for a in "${args[@]}"; do
  case "$a" in --clients|--clients=*) counts="given" ;; esac
done
status=0
if [ "$counts" = "given" ]; then
  timeout 600 "$SIM" --kshim "$KSHIM" "${args[@]}" || status=$?
else
  for n in $counts; do
    timeout 600 "$SIM" --kshim "$KSHIM" --clients "$n" "${args[@]}" || status=$?
    echo
  done
fi
exit "$status"
