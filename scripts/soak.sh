#!/usr/bin/env bash
# The soak: a kshim cluster in front of Kafka under mixed client load, with faults on a seeded
# schedule, invariants checked throughout, and a report with plots (docs/operations.md, "Soak").
#
#   scripts/soak.sh                 30 minutes, every fault kind twice
#   scripts/soak.sh --minutes 120   longer
#   scripts/soak.sh --quick         every fault kind once, shorter and back to back; the load ends
#                                   15 s after the last fault healed (about 3 minutes, at most 5)
#   options: --mbps N (bulk load, MiB/s), --seed N (repeat a schedule), --out DIR (report),
#            --kinds A,B (only these fault kinds), --pin (kshim on the last CPU, brokers and
#            clients on the others), --realtime (kshim's threads at SCHED_FIFO 1: no run needs it),
#            --bulk-direct (the bulk producer writes to the brokers, not through kshim)
#
# Installs what is missing (scripts/install-deps.sh) and builds kshim (cargo build --release)
# first, unless KSHIM_BIN names the binary to soak. Exit 0 when every invariant held, 1 when one did not, 2 when the soak could not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ ! -x .venv/bin/python ] || [ ! -d build/kafka-jars-4.4.0 ] \
    || ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
  bash scripts/install-deps.sh
fi
# KSHIM_BIN names a kshim binary to soak instead (the test command's own build).
[ -n "${KSHIM_BIN:-}" ] || cargo build --release --quiet --bin kshim
exec .venv/bin/python tests/interop/soak.py "$@"
