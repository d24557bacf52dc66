#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test.
#   1. scripts/install-deps.sh  (Debian packages, Python venv, Kafka 4.1.1 jars, Go modules, cargo-fuzz)
#   2. cargo test --release     (unit, property, fixture, bad-input, fuzz-smoke and crash tests)
#   3. scripts/fuzz.sh          (builds the cargo-fuzz targets, runs each 5 s from its seeds)
#   4. pytest tests/interop     (real Kafka 4.1.1 clusters and real clients, kshim standalone and in front)
# Every step is bounded in time; any failure stops the run with a non-zero exit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==> %s\n' "$*"; }

step "installing dependencies"
bash scripts/install-deps.sh

step "building kshim and its tools"
timeout 1500 cargo build --release --bins --examples

step "Rust tests"
timeout 1500 cargo test --release

step "coverage-guided fuzzing of every parser of untrusted input, 5 s per target"
FUZZ_SECONDS=5 timeout 1200 bash scripts/fuzz.sh

step "interop tests against Apache Kafka 4.1.1 and real clients"
timeout 2400 .venv/bin/python -m pytest tests/interop -p no:cacheprovider -ra "$@"
