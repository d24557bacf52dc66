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
    cargo build --release --bins --examples
fi
exec timeout 1800 .venv/bin/python tests/tools/census_bench.py "$@"
