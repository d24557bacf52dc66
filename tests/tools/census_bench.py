#!/usr/bin/env python3
"""What the client census costs on the request path: two kshim processes from the same binary in
front of one Kafka 4.1.1 broker, one with the census on (the default) and one with
`[census] enabled = false`, measured in the same run.

- ApiVersions (answered by kshim itself): the closed-loop `api_versions_bench` example at 1, 16
  and 64 connections, census off as the baseline.
- Forwarded Produce: Java ProducerPerformance (1 KiB records, acks=1, no idempotence) through
  each kshim, after one unmeasured run of the same size through each; then the two alternate
  over several rounds in ABBA order (so that neither is always first); the median MB/s of each
  and kshim's CPU milliseconds per MiB (from /proc/PID/stat).

Prints the tables and the ratios census-on / census-off (the goal: >= 0.97x). Every process
started here is stopped by its PID.

    .venv/bin/python tests/tools/census_bench.py [--rounds 3] [--records 300000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_env as ke  # noqa: E402
from forward_perf import producer  # noqa: E402

MIB = 1 << 20
BENCH = REPO_ROOT / "target" / "release" / "examples" / "api_versions_bench"


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks * 1000.0 / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records", type=int, default=300_000, help="1 KiB records per produce run")
    parser.add_argument("--duration-secs", type=int, default=4, help="per ApiVersions round")
    args = parser.parse_args()
    if not BENCH.exists():
        raise SystemExit(f"{BENCH} is missing: cargo build --release --example api_versions_bench")
    cluster = ke.KafkaCluster(1).start()
    legs = {}
    try:
        legs["census-on"] = ke.KshimProcess("", upstream=cluster.bootstrap, rust_log="warn").start()
        legs["census-off"] = ke.KshimProcess("[census]\nenabled = false\n", upstream=cluster.bootstrap,
                                            rust_log="warn").start()
        for proc in legs.values():
            ke.wait_until(lambda: 0 in ke.api_versions(proc.bootstrap).api_keys, 30)

        print("## ApiVersions v4, closed loop (answered by kshim)\n", flush=True)
        subprocess.run([str(BENCH), *[a for name, p in legs.items() for a in ("--target", f"{name}={p.bootstrap}")],
                        "--baseline", "census-off", "--connections", "1,16,64",
                        "--duration-secs", str(args.duration_secs), "--warmup-secs", "1"], check=True)

        print("\n## Forwarded Produce, 1 KiB records, acks=1\n", flush=True)
        topic = "census-bench"
        producer(cluster.bootstrap, topic, 1024, 1000)  # creates the topic
        for proc in legs.values():
            producer(proc.bootstrap, topic, 1024, args.records)  # warm-up, not counted
        mbs = {name: [] for name in legs}
        cpu = {name: [] for name in legs}
        order = list(legs)
        for r in range(args.rounds):
            for name in (order if r % 4 in (0, 3) else order[::-1]):
                proc = legs[name]
                before = cpu_ms(proc.pid)
                mbs[name].append(producer(proc.bootstrap, topic, 1024, args.records)[0])
                cpu[name].append((cpu_ms(proc.pid) - before) / (args.records * 1024 / MIB))
        print("| leg | MB/s per round | median MB/s | median CPU ms/MiB |")
        print("|---|---|---:|---:|")
        for name in legs:
            rounds = ", ".join(f"{v:.1f}" for v in mbs[name])
            print(f"| {name} | {rounds} | {statistics.median(mbs[name]):.1f} | {statistics.median(cpu[name]):.2f} |")
        ratio = statistics.median(mbs["census-on"]) / statistics.median(mbs["census-off"])
        cpu_ratio = statistics.median(cpu["census-on"]) / statistics.median(cpu["census-off"])
        print(f"\nProduce throughput census-on / census-off: {ratio:.3f}x (goal >= 0.97x); "
              f"CPU per MiB: {cpu_ratio:.3f}x")
    finally:
        for p in legs.values():
            p.cleanup()
        cluster.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
