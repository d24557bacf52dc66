#!/usr/bin/env python3
"""Where a forwarder's time goes: `perf stat` on one or more kshim binaries, and with --relay on
the byte relay of scripts/bench-proxy.sh (socat, 128 KiB buffer, TCP_NODELAY both ways), while the
same Java ProducerPerformance run (1 KiB and 64 KiB records) goes through each, in one run, in
front of one Kafka 4.1.1 broker.

For each forwarder and record size it prints, per MiB of records forwarded: context switches, page
faults, futex calls, recvfrom/read and sendto/write/writev calls, waits (epoll_wait and
epoll_pwait, select, pselect6, poll and ppoll), and CPU milliseconds; the producer's MB/s, its
Produce requests per MiB and the forwarder's CPU microseconds per request. A forwarder that answers
sooner can make the producer send smaller requests, and so more of them per MiB: CPU per request
tells a costlier forwarder from one that is handed more requests.

    .venv/bin/python tests/tools/forward_perf.py target/release/kshim [OTHER_KSHIM ...]
    .venv/bin/python tests/tools/forward_perf.py --relay --acks all target/release/kshim
    .venv/bin/python tests/tools/forward_perf.py --relay \
        --relay-command 'my-relay 127.0.0.1:{port} 127.0.0.1:{target}' target/release/kshim

--relay-command (repeatable) measures another relay beside socat: the command, with {port} where
it listens and {target} the broker port it forwards to, is split on spaces and run under perf.

Needs `perf` with access to syscall tracepoints (run as root). Every process started here is
stopped by its PID.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_env as ke  # noqa: E402
import proxy_bench as pb  # noqa: E402  (the relay leg's socat and broker listeners)

MIB = 1 << 20
EVENTS = {
    "context switches": ["context-switches"],
    "page faults": ["page-faults"],
    "futex": ["syscalls:sys_enter_futex"],
    "reads": ["syscalls:sys_enter_recvfrom", "syscalls:sys_enter_read"],
    "writes": ["syscalls:sys_enter_sendto", "syscalls:sys_enter_write", "syscalls:sys_enter_writev"],
    "waits": ["syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait", "syscalls:sys_enter_select",
              "syscalls:sys_enter_pselect6", "syscalls:sys_enter_poll", "syscalls:sys_enter_ppoll"],
}


def producer(bootstrap: str, topic: str, size: int, records: int, acks: str = "1") -> tuple[float, float]:
    """The producer's MB/s and the requests it sent (Produce, and the few Metadata and ApiVersions)."""
    out = subprocess.run(
        ke.java_command([
            "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}", "enable.idempotence=false",
            "--print-metrics",
        ]),
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    final = re.findall(r"(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)", out)
    if not final:
        raise SystemExit(f"ProducerPerformance printed no summary:\n{out[-2000:]}")
    requests = re.search(r"^producer-metrics:request-total:\{[^}]*\}\s*:\s*([\d.]+)", out, re.M)
    if not requests:
        raise SystemExit(f"ProducerPerformance printed no request-total metric:\n{out[-2000:]}")
    return float(final[-1][1]), float(requests.group(1))


def perf_counters(perf_pid: int) -> int:
    """How many perf event descriptors the perf process holds (0 while they cannot be read)."""
    try:
        return sum(os.readlink(fd) == "anon_inode:[perf_event]" for fd in Path(f"/proc/{perf_pid}/fd").iterdir())
    except OSError:
        return 0


EVENT_LIST = [e for group in EVENTS.values() for e in group] + ["task-clock"]


def measure(pid: int, run) -> tuple[dict[str, float], float, tuple[float, float]]:
    """Counts per event group, CPU ms, and what `run` returned (MB/s and requests)."""
    # perf has attached once it holds a counter for each event on each thread of `pid`.
    want = len(EVENT_LIST) * len(os.listdir(f"/proc/{pid}/task"))
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-p", str(pid), "-e", ",".join(EVENT_LIST)],
                            stderr=subprocess.PIPE, text=True)
    if not ke.wait_until(lambda: perf_counters(perf.pid) >= want, 10):
        perf.kill()
        raise SystemExit(f"perf stat did not attach to pid {pid} within 10 s:\n{perf.communicate()[1][-2000:]}")
    try:
        result = run()
    finally:
        perf.send_signal(2)
        _, err = perf.communicate(timeout=30)
    return (*parse_counts(err), result)


def measure_relay(command: list[str], port: int, run) -> tuple[dict[str, float], float, tuple[float, float]]:
    """A relay (`command`, listening on `port`) started under `perf stat` for this one run: the
    counters follow the processes it forks (socat forks one per connection), and a child's counts
    reach perf when the child ends, so the children are stopped before the relay itself."""
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-e", ",".join(EVENT_LIST), "--", *command],
                            stderr=subprocess.PIPE, text=True)
    if not ke.wait_until(lambda: ke.port_accepts("127.0.0.1", port), 10):
        perf.kill()
        raise SystemExit(f"the relay did not listen on {port} within 10 s:\n{perf.communicate()[1][-2000:]}")
    try:
        result = run()
    finally:
        relay = pb.children(perf.pid)
        _terminate([c for r in relay for c in pb.children(r)])
        time.sleep(0.5)  # the connections' processes end, and hand perf their counts
        _terminate(relay)
        _, err = perf.communicate(timeout=30)
    return (*parse_counts(err), result)


def _terminate(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def parse_counts(err: str) -> tuple[dict[str, float], float]:
    """`perf stat -x ,` output: counts per event group of EVENTS, and task-clock (CPU ms)."""
    counts: dict[str, float] = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            counts[parts[2]] = float(parts[0])
    grouped = {name: sum(counts.get(e, 0.0) for e in group) for name, group in EVENTS.items()}
    return grouped, counts.get("task-clock", 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--records-1k", type=int, default=200_000)
    parser.add_argument("--records-64k", type=int, default=6_000)
    parser.add_argument("--acks", choices=["1", "all"], default="1")
    parser.add_argument("--relay", action="store_true", help="measure the socat relay too, first")
    parser.add_argument("--relay-command", action="append", default=[], metavar="CMD",
                        help="measure this relay too ({port}: where it listens, {target}: the broker)")
    args = parser.parse_args()
    relays = []  # (label, the command for a listening port and a broker port)
    if args.relay:
        socat = shutil.which("socat")
        if socat is None:
            raise SystemExit(f"socat is not on PATH (the relay leg needs it). Run: {ke.INSTALL_HINT}")
        relays.append(("relay (socat)", lambda port, target: pb.relay_command(socat, port, target)))
    for template in args.relay_command:
        # Its name, and its own options (those without a placeholder): two runs of one relay differ there.
        words = template.split()
        label = f"relay ({' '.join([Path(words[0]).name] + [w for w in words[1:] if '{' not in w])})"
        relays.append((label, lambda port, target, t=template: t.format(port=port, target=target).split()))
    # The relay cannot rewrite Metadata: the broker advertises the relay's port on a listener of
    # its own, as in scripts/bench-proxy.sh.
    cluster = ke.KafkaCluster(1, listener_overrides=pb.listener_overrides(False, bool(relays)),
                              extra_ports=2 if relays else 0).start()
    procs = []
    try:
        for b in args.binaries:
            procs.append(ke.KshimProcess("", binary=Path(b).resolve(), upstream=cluster.bootstrap,
                                         rust_log="warn").start())
        rows = []
        for size, records in ((1024, args.records_1k), (65536, args.records_64k)):
            topic = f"perf-{size}"
            mib = size * records / MIB
            producer(cluster.bootstrap, topic, size, 1000)  # creates the topic, warms the broker
            for label, command in relays:
                target, port = cluster.nodes[0].extra_ports
                relay = command(port, target)
                warm = max(records // 10, 100)
                measure_relay(relay, port, lambda: producer(f"127.0.0.1:{port}", topic, size, warm, args.acks))
                grouped, cpu_ms, result = measure_relay(
                    relay, port, lambda: producer(f"127.0.0.1:{port}", topic, size, records, args.acks))
                rows.append((size, label, grouped, cpu_ms, mib, result))
            for b, proc in zip(args.binaries, procs):
                producer(proc.bootstrap, topic, size, max(records // 10, 100), args.acks)  # warm-up
                grouped, cpu_ms, result = measure(
                    proc.pid, lambda: producer(proc.bootstrap, topic, size, records, args.acks))
                rows.append((size, b, grouped, cpu_ms, mib, result))
        print(f"acks={args.acks}")
        print("| records | forwarder | MB/s | requests/MiB | CPU µs/request | CPU ms/MiB | "
              + " | ".join(f"{k}/MiB" for k in EVENTS) + " |")
        print("|---|---|---:|---:|---:|---:|" + "---:|" * len(EVENTS))
        for size, b, grouped, cpu_ms, mib, (mbs, requests) in rows:
            print(f"| {size // 1024} KiB | {b} | {mbs:.1f} | {requests / mib:.1f} | {1000 * cpu_ms / requests:.1f} | "
                  f"{cpu_ms / mib:.1f} | " + " | ".join(f"{grouped[k] / mib:.1f}" for k in EVENTS) + " |")
    finally:
        for p in procs:
            p.cleanup()
        cluster.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
