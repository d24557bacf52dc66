#!/usr/bin/env python3
"""Where a forwarder's time goes: `perf stat` on one or more kshim binaries while the same Java
ProducerPerformance run (1 KiB and 64 KiB records, acks=1) goes through each, in one run, in
front of one Kafka 4.1.1 broker.

For each binary and record size it prints, per MiB of records forwarded: context switches,
futex calls, recvfrom/read and sendto/write/writev calls, and CPU milliseconds, and the
producer's MB/s. The first binary is the baseline the others are compared to.

    .venv/bin/python tests/tools/forward_perf.py target/release/kshim [OTHER_KSHIM ...]

Needs `perf` with access to syscall tracepoints (run as root). Every process started here is
stopped by its PID.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))

import kafka_env as ke  # noqa: E402

MIB = 1 << 20
EVENTS = {
    "context switches": ["context-switches"],
    "futex": ["syscalls:sys_enter_futex"],
    "reads": ["syscalls:sys_enter_recvfrom", "syscalls:sys_enter_read"],
    "writes": ["syscalls:sys_enter_sendto", "syscalls:sys_enter_write", "syscalls:sys_enter_writev"],
    "epoll_wait": ["syscalls:sys_enter_epoll_wait"],
}


def producer(bootstrap: str, topic: str, size: int, records: int) -> float:
    out = subprocess.run(
        ke.java_command([
            "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "enable.idempotence=false",
        ]),
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    final = re.findall(r"(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)", out)
    if not final:
        raise SystemExit(f"ProducerPerformance printed no summary:\n{out[-2000:]}")
    return float(final[-1][1])


def perf_counters(perf_pid: int) -> int:
    """How many perf event descriptors the perf process holds (0 while they cannot be read)."""
    try:
        return sum(os.readlink(fd) == "anon_inode:[perf_event]" for fd in Path(f"/proc/{perf_pid}/fd").iterdir())
    except OSError:
        return 0


def measure(pid: int, run) -> tuple[dict[str, float], float, float]:
    events = [e for group in EVENTS.values() for e in group] + ["task-clock"]
    # perf has attached once it holds a counter for each event on each thread of `pid`.
    want = len(events) * len(os.listdir(f"/proc/{pid}/task"))
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-p", str(pid), "-e", ",".join(events)],
                            stderr=subprocess.PIPE, text=True)
    if not ke.wait_until(lambda: perf_counters(perf.pid) >= want, 10):
        perf.kill()
        raise SystemExit(f"perf stat did not attach to pid {pid} within 10 s:\n{perf.communicate()[1][-2000:]}")
    try:
        mbs = run()
    finally:
        perf.send_signal(2)
        _, err = perf.communicate(timeout=30)
    counts: dict[str, float] = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            counts[parts[2]] = float(parts[0])
    grouped = {name: sum(counts.get(e, 0.0) for e in group) for name, group in EVENTS.items()}
    return grouped, counts.get("task-clock", 0.0), mbs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--records-1k", type=int, default=200_000)
    parser.add_argument("--records-64k", type=int, default=6_000)
    args = parser.parse_args()
    cluster = ke.KafkaCluster(1).start()
    procs = []
    try:
        for b in args.binaries:
            procs.append(ke.KshimProcess("", binary=Path(b).resolve(), upstream=cluster.bootstrap,
                                         rust_log="warn").start())
        rows = []
        for size, records in ((1024, args.records_1k), (65536, args.records_64k)):
            topic = f"perf-{size}"
            producer(cluster.bootstrap, topic, size, 1000)  # creates the topic, warms the broker
            for b, proc in zip(args.binaries, procs):
                producer(proc.bootstrap, topic, size, max(records // 10, 100))  # warm-up
                grouped, cpu_ms, mbs = measure(proc.pid, lambda: producer(proc.bootstrap, topic, size, records))
                mib = size * records / MIB
                rows.append((size, b, {k: v / mib for k, v in grouped.items()}, cpu_ms / mib, mbs))
        print("| records | binary | MB/s | CPU ms/MiB | " + " | ".join(f"{k}/MiB" for k in EVENTS) + " |")
        print("|---|---|---:|---:|" + "---:|" * len(EVENTS))
        for size, b, per, cpu, mbs in rows:
            print(f"| {size // 1024} KiB | {b} | {mbs:.1f} | {cpu:.1f} | "
                  + " | ".join(f"{per[k]:.1f}" for k in EVENTS) + " |")
    finally:
        for p in procs:
            p.cleanup()
        cluster.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
