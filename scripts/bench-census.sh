#!/usr/bin/env bash
# What the client census costs: ApiVersions and forwarded Produce throughput with the census on
# and off, in one run against one Apache Kafka 4.1.1 node. The driver is
# tests/tools/census_bench.py; its docstring says how each figure is measured.
#
#   bash scripts/bench-census.sh                 # builds, then 4 produce rounds per leg
#   bash scripts/bench-census.sh --no-build --rounds 5
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ "${1:-}" == "--no-build" ]]; then
    shift
else
    # kshim and the one example it runs (each example is a whole-program link of its own).
    cargo build --release --bin kshim --example api_versions_bench
fi
exec timeout 1800 .venv/bin/python tests/tools/census_bench.py "$@"
