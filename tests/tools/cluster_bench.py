#!/usr/bin/env python3
"""kshim cluster benchmark: what sharing the feature state through Kafka costs, measured in one
run against a baseline in the same run. Started by scripts/bench-cluster.sh.

One three-broker Apache Kafka 4.1.1 cluster; in front of it three kshim instances of one kshim
cluster (A, B, C) and one kshim without [cluster] ("file": its state in its data directory
alone), all with the same features. For each round:

  update latency   UpdateFeatures v1 (a kshim-owned feature toggled between levels 1 and 2),
                   one request at a time, alternating between "file" and A: the time from
                   sending the request to its answer. A answers only once its change is
                   committed to the state topic and A itself serves it; "file" once its state
                   file is fsynced and served.
  convergence      for every change at A: the time from A's answer (and from sending the
                   request) until B and C both serve the new epoch, read by polling their
                   ApiVersions v4 over open connections.
  ApiVersions      target/release/examples/api_versions_bench, closed loop, against "file" (the
                   baseline) and A: cluster mode must not cost the hot path anything (goal:
                   ratio >= 0.95).

Every process started here is stopped by its PID when the run ends. Exit status: 0 once the
tables are printed, 1 when something failed to run.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))

import kafka_env as ke  # noqa: E402

API_BENCH = REPO_ROOT / "target" / "release" / "examples" / "api_versions_bench"
FEATURE = "kshim.bench.version"
UPGRADE, SAFE_DOWNGRADE = 1, 2


def features_toml(extra: str = "") -> str:
    return f"""
[features.ownership]
kshim_owned = ["kshim.*"]
[features.supported]
"{FEATURE}" = {{ min = 0, max = 3 }}
[features.bootstrap]
"{FEATURE}" = 1
{extra}"""


def cluster_toml(cluster_id: str, instance: str) -> str:
    return f'node_id = 1\n[cluster]\nid = "{cluster_id}"\ninstance_id = "{instance}"\n' + features_toml()


class Poller:
    """ApiVersions v4 over one open connection: the finalized epoch, quickly."""

    def __init__(self, bootstrap: str):
        host, port = ke.split_hostport(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client_id = b"kshim-bench"
        header = struct.pack(">hhih", 18, 4, 1, len(client_id)) + client_id + b"\x00"
        body = bytes([len(b"kshim-bench") + 1]) + b"kshim-bench" + bytes([2]) + b"1" + b"\x00"
        frame = header + body
        self.frame = struct.pack(">i", len(frame)) + frame

    def epoch(self) -> int:
        self.sock.sendall(self.frame)
        (size,) = struct.unpack(">i", ke._recv_exact(self.sock, 4))
        resp = ke._recv_exact(self.sock, size)
        # Walk to the tagged fields as kafka_env.api_versions does, reading only tag 1.
        pos = 6
        n, pos = ke._uvarint(resp, pos)
        for _ in range(n - 1):
            pos = ke._skip_tags(resp, pos + 6)
        pos += 4
        ntags, pos = ke._uvarint(resp, pos)
        for _ in range(ntags):
            tag, pos = ke._uvarint(resp, pos)
            size, pos = ke._uvarint(resp, pos)
            if tag == 1:
                return struct.unpack_from(">q", resp, pos)[0]
            pos += size
        return -1

    def close(self) -> None:
        self.sock.close()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def toggle(bootstrap: str, level: int) -> tuple[int, float]:
    """Moves FEATURE from `level` to the other of 1 and 2; (new level, seconds)."""
    target = 2 if level == 1 else 1
    kind = UPGRADE if target > level else SAFE_DOWNGRADE
    start = time.perf_counter()
    code, message = ke.raw_update_features(bootstrap, FEATURE, target, kind)
    took = time.perf_counter() - start
    if code != 0:
        raise ke.EnvError(f"UpdateFeatures at {bootstrap} failed: {code} {message}")
    return target, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=100, help="updates per target per round")
    parser.add_argument("--api-seconds", type=int, default=3)
    args = parser.parse_args()
    if not API_BENCH.exists():
        raise SystemExit(f"{API_BENCH} is missing: cargo build --release --example api_versions_bench")
    kafka = ke.KafkaCluster(3)
    made: list[ke.KshimProcess] = []
    pollers: list[Poller] = []
    try:
        kafka.start()
        kafka.wait_brokers_registered()
        cid = "bench-" + uuid.uuid4().hex[:6]

        def start(toml: str) -> ke.KshimProcess:
            proc = ke.KshimProcess(toml, upstream=kafka.bootstrap, rust_log="warn")
            made.append(proc)
            return proc.start()

        file_kshim = start(features_toml())
        a, b, c = (start(cluster_toml(cid, f"kshim-{n}")) for n in "abc")
        for proc in (file_kshim, a, b, c):
            deadline = time.monotonic() + 60
            while ke.api_versions(proc.bootstrap, version=4).finalized.get(FEATURE) is None:
                if time.monotonic() > deadline:
                    raise ke.EnvError(f"{proc.bootstrap} serves no {FEATURE}")
                time.sleep(0.2)
        pollers = [Poller(b.bootstrap), Poller(c.bootstrap)]
        update = {"file": [], "cluster": []}
        after_ack, after_send = [], []
        levels = {"file": 1, "cluster": 1}
        for r in range(args.rounds):
            for i in range(args.updates):
                for name, proc in (("file", file_kshim), ("cluster", a)) if i % 2 == 0 else (("cluster", a), ("file", file_kshim)):
                    sent = time.perf_counter()
                    levels[name], took = toggle(proc.bootstrap, levels[name])
                    update[name].append(took)
                    if name != "cluster":
                        continue
                    acked = time.perf_counter()
                    want = ke.api_versions(a.bootstrap, version=4).finalized_epoch
                    pending = list(pollers)
                    while pending:
                        pending = [p for p in pending if p.epoch() < want]
                        if time.perf_counter() - acked > 10:
                            raise ke.EnvError("B and C did not converge within 10 s")
                    done = time.perf_counter()
                    after_ack.append(done - acked)
                    after_send.append(done - sent)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

        ms = 1000.0
        print("\n### UpdateFeatures latency (one at a time, alternating)\n")
        print("| store | n | p50 ms | p99 ms | mean ms |")
        print("|---|---:|---:|---:|---:|")
        for name in ("file", "cluster"):
            v = update[name]
            print(f"| {name} | {len(v)} | {pct(v, 50) * ms:.1f} | {pct(v, 99) * ms:.1f} | {statistics.mean(v) * ms:.1f} |")
        ratio = pct(update["cluster"], 50) / pct(update["file"], 50)
        print(f"\ncluster/file p50: {ratio:.2f}x")
        print("\n### Convergence: a change at A served by B and C\n")
        print("| measured from | n | p50 ms | p99 ms | max ms |")
        print("|---|---:|---:|---:|---:|")
        for label, v in (("A's answer", after_ack), ("the request to A", after_send)):
            print(f"| {label} | {len(v)} | {pct(v, 50) * ms:.1f} | {pct(v, 99) * ms:.1f} | {max(v) * ms:.1f} |")
        p99 = pct(after_send, 99) * ms
        print(f"\ngoal: served by all within 1000 ms p99 (aim 200 ms): {p99:.1f} ms -> "
              f"{'met' if p99 <= 1000 else 'NOT met'}{' (aim met)' if p99 <= 200 else ''}")
        for p in pollers:
            p.close()
        pollers = []
        # Twice, in both orders, so that neither target always runs first.
        for order in (("file", "cluster"), ("cluster", "file")):
            print(f"\n### ApiVersions v4 per instance, cluster mode against the file store ({' then '.join(order)})\n",
                  flush=True)
            address = {"file": file_kshim.bootstrap, "cluster": a.bootstrap}
            cmd = [str(API_BENCH), "--baseline", "file", "--connections", "1,16",
                   "--duration-secs", str(args.api_seconds)]
            for name in order:
                cmd += ["--target", f"{name}={address[name]}"]
            rc = subprocess.run(cmd, timeout=300).returncode
            if rc != 0:
                return rc
        return 0
    finally:
        for p in pollers:
            p.close()
        for proc in made:
            proc.cleanup()
        kafka.cleanup()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ke.EnvError as e:
        print(f"cluster_bench: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
