#!/usr/bin/env python3
"""Scale benchmark: what kshim costs as a cluster grows to many partitions (--study metadata) and
as it holds many connections (--study connections), each against the broker or a relay measured
in the same run.

Started by scripts/bench-proxy.sh (`--study metadata`, `--study connections`), which builds kshim
and examples/metadata_bench.rs and examples/tls_bench/ first.

metadata   Three Apache Kafka 4.1.1 KRaft nodes and one kshim in front of them (port per broker,
           its admin API on for /metrics). Topics of 10 partitions (replication factor
           --replicas) are added in steps until the cluster holds each of --partition-steps
           partitions (default 100, 1,000, 10,000). At every step examples/metadata_bench.rs asks
           Metadata v12 for all topics, with 1 client (--rounds-one rounds) and with 200 clients
           at once (--rounds-many rounds), of the broker directly ("direct": node 1's own
           listener) and through kshim (kshim's listener for node 1), the two alternating round
           by round. Figures per step: p50/p99 of both and kshim's added latency; kshim's CPU per
           request (utime + stime from /proc over the run, divided by the requests kshim
           forwarded); kshim's allocations per request (`kshim_heap_allocations_total` from
           /metrics, the same way, less one scrape of /metrics and what kshim allocates per
           second while idle times the run's length, both measured just before; kshim's periodic
           read of the cluster is set to once an hour so that it does not land in a run); the
           answer's size. A plot of each against
           partitions (--plots).

connections  One Apache Kafka 4.1.1 node with a PLAINTEXT and an SSL listener; kshim in front,
           plaintext to plaintext and TLS to TLS; and the plain socat relay of proxy_bench.py.
           N idle connections (--connections; at most what the open-file hard limit allows, two
           descriptors per connection) are opened to each, each with one ApiVersions and one
           Metadata answered (so a forwarder has opened its upstream side), then left idle: the
           forwarder's memory growth per connection (PSS). Then a storm of new TLS connections
           (examples/tls_bench/ handshakes: connect, full handshake, ApiVersions, close; at each
           --storm-concurrency) against kshim and the broker's SSL listener, while 50 clients
           already connected over TLS ask ApiVersions 20 times a second each: handshakes per
           second, failed handshakes, and the connected clients' ApiVersions p50/p99/max during
           the storm.

Exit status: 0 once the report is printed, whatever it says; 1 with the error when anything
failed to run; 130/143 when interrupted. Every process started here is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS_DIR))

import proxy_bench as pb  # noqa: E402  (puts tests/interop on the path, imports kafka_env)
from proxy_bench import BenchError, env_int, log  # noqa: E402

import kafka_env as ke  # noqa: E402

REPO_ROOT = pb.REPO_ROOT
PARTITIONS_PER_TOPIC = 10
MANY_CLIENTS = 200
# Topics created per CreateTopics request.
CREATE_BATCH = 100
METADATA_VERSION = 12
# What kshim allocates per second while idle is measured over this long before each run.
IDLE_WINDOW_S = 3.0
REFRESH_INTERVAL_MS = 3_600_000

# Stop functions of what run() started, newest last; called in reverse order at exit.
resources: list = []


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", choices=("metadata", "connections"), required=True)
    p.add_argument("--kshim-bin", type=Path, default=ke.kshim_binary())
    p.add_argument("--metadata-bench-bin", type=Path,
                   default=REPO_ROOT / "target" / "release" / "examples" / "metadata_bench")
    p.add_argument("--tls-bench-bin", type=Path,
                   default=REPO_ROOT / "target" / "release" / "examples" / "tls_bench")
    p.add_argument("--partition-steps", default=os.environ.get("BENCH_PARTITION_STEPS", "100,1000,10000"),
                   help="total partitions of each step, ascending, each a multiple of 10")
    p.add_argument("--replicas", type=int, default=env_int("BENCH_REPLICAS", 3),
                   help="replication factor of the topics (1-3)")
    p.add_argument("--rounds-one", type=int, default=env_int("BENCH_ROUNDS_ONE", 100),
                   help="rounds of one client's Metadata per target and step")
    p.add_argument("--rounds-many", type=int, default=env_int("BENCH_ROUNDS_MANY", 5),
                   help=f"rounds of {MANY_CLIENTS} clients' Metadata at once per target and step")
    p.add_argument("--connections", type=int, default=env_int("BENCH_IDLE_CONNS", 50_000),
                   help="idle connections per forwarder (fewer when the open-file hard limit does not allow that many)")
    p.add_argument("--storm-concurrency", default=os.environ.get("BENCH_STORM_CONCURRENCY", "16,64,256"),
                   help="concurrent connecting clients of each storm")
    p.add_argument("--storm-seconds", type=int, default=env_int("BENCH_STORM_SECS", 5))
    p.add_argument("--plots", type=Path, help="directory for PNG plots and their data")
    p.add_argument("--max-seconds", type=int, default=env_int("BENCH_MAX_SECS", 1800))
    p.add_argument("--keep-tmp", action="store_true", default=bool(os.environ.get("KSHIM_BENCH_KEEP_TMP")))
    args = p.parse_args(argv)
    try:
        args.partition_steps = [int(x) for x in args.partition_steps.split(",") if x.strip()]
        args.storm_concurrency = [int(x) for x in args.storm_concurrency.split(",") if x.strip()]
    except ValueError:
        p.error("--partition-steps and --storm-concurrency take comma-separated integers")
    steps = args.partition_steps
    if not steps or steps != sorted(steps) or any(s < PARTITIONS_PER_TOPIC or s % PARTITIONS_PER_TOPIC for s in steps):
        p.error(f"--partition-steps must ascend, each a multiple of {PARTITIONS_PER_TOPIC}")
    if not 1 <= args.replicas <= 3:
        p.error("--replicas must be 1, 2 or 3")
    if args.rounds_one < 1 or args.rounds_many < 1 or args.connections < 1 or args.storm_seconds < 1:
        p.error("rounds, --connections and --storm-seconds must be at least 1")
    if not args.storm_concurrency or min(args.storm_concurrency) < 1:
        p.error("--storm-concurrency must be positive")
    return args


def _require_binary(path: Path, what: str) -> Path:
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BenchError(f"{path} is missing: build it with `cargo build --release --example {what}` "
                         "(scripts/bench-proxy.sh does)")
    return path


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


# --------------------------------------------------------------------------------------------
# metadata


def add_topics(bootstrap: str, first: int, count: int, replicas: int, deadline: float) -> None:
    """Creates topics scale-FIRST .. scale-(FIRST+COUNT-1) of 10 partitions each and waits until
    every partition has a leader."""
    from kafka.admin import NewTopic

    admin = pb.admin_client(bootstrap)
    try:
        names = [f"scale-{i:05d}" for i in range(first, first + count)]
        for start in range(0, len(names), CREATE_BATCH):
            batch = names[start : start + CREATE_BATCH]
            res = admin.create_topics([NewTopic(n, PARTITIONS_PER_TOPIC, replicas) for n in batch],
                                      timeout_ms=120_000)
            errors = [t for t in res.get("topics", []) if t.get("error_code")]
            if errors:
                raise BenchError(f"CreateTopics failed: {errors[:3]}")
            if time.monotonic() > deadline:
                raise BenchError("out of time creating topics")
        pb.wait_leaders(admin, names, PARTITIONS_PER_TOPIC, deadline)
    finally:
        admin.close()


def wait_same_metadata(bench_bin: Path, log_dir: Path, brokers: list[str], deadline: float) -> int:
    """Waits until every broker's Metadata for all topics has the same size twice in a row (the
    new topics have reached every broker); that size."""
    last = None
    while time.monotonic() < deadline:
        try:
            out = pb.run_program([str(bench_bin), *[f"--target=b{i}={b}" for i, b in enumerate(brokers)],
                                  "--clients=1", "--rounds=1"], log_dir, "metadata-settle", 120)
        except BenchError as e:
            if "the cluster changed" not in str(e):
                raise
            last = None
            time.sleep(0.5)
            continue
        sizes = {json.loads(line)["response_bytes"] for line in out.splitlines() if line.strip()}
        if len(sizes) == 1:
            size = sizes.pop()
            if size == last:
                return size
            last = size
        else:
            last = None
        time.sleep(0.5)
    raise BenchError("the brokers did not agree on the topics' Metadata in time")


def allocs(metrics: dict[str, float]) -> float:
    return metrics["kshim_heap_allocations_total"]


def metadata_study(args, workdir: Path, kshim_bin: Path, log_dir: Path, deadline: float, started: float) -> int:
    bench_bin = _require_binary(args.metadata_bench_bin, "metadata_bench")
    # Every partition is a log with open files on each of its replicas' brokers.
    pb.raise_open_file_limit(20_000)
    log("starting Apache Kafka 4.1.1: 3 KRaft nodes (broker+controller)")
    cluster = ke.KafkaCluster(3, workdir=workdir / "kafka", heap="768m",
                              extra_properties={"num.partitions": "1"})
    pb.start_cluster(cluster, resources)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
    # The cluster does not change while a step is measured, and kshim's periodic read of it would
    # count among the requests' allocations.
    kshim = pb.KshimProxy(kshim_bin, workdir / "kshim", bootstrap, 4096, admin=True,
                          upstream_settings={"refresh_interval_ms": REFRESH_INTERVAL_MS})
    resources.append(kshim.stop)
    log(f"starting kshim on {kshim.bootstrap}, upstream {bootstrap}")
    kshim.start()
    node = cluster.nodes[0]
    info = ke.api_versions(kshim.bootstrap, timeout=5.0)
    via_kshim = {nid: f"{h}:{p}" for nid, h, p in pb.metadata_nodes(kshim.bootstrap, info.api_keys.get(3))}
    if node.node_id not in via_kshim:
        raise BenchError(f"kshim does not name node {node.node_id}: {via_kshim}")
    targets = {"direct": node.bootstrap, "kshim": via_kshim[node.node_id]}
    log(f"direct {targets['direct']} (node {node.node_id}); kshim {targets['kshim']} (its listener for that node)")

    def check_alive() -> None:
        for n in cluster.nodes:
            if not n.alive():
                raise BenchError(f"broker {n.node_id} exited\n--- {n.log_path}:\n{ke.tail(n.log_path)}")
        if not kshim.alive():
            raise BenchError(f"kshim exited\n--- {kshim.log_path}:\n{ke.tail(kshim.log_path)}")

    rows = []
    topics = 0
    for partitions in args.partition_steps:
        want = partitions // PARTITIONS_PER_TOPIC
        t0 = time.monotonic()
        add_topics(node.bootstrap, topics, want - topics, args.replicas, deadline)
        topics = want
        size = wait_same_metadata(bench_bin, log_dir, [n.bootstrap for n in cluster.nodes], deadline)
        log(f"{partitions:,} partitions in {topics:,} topics (made in {time.monotonic() - t0:.0f}s); "
            f"Metadata v{METADATA_VERSION} answer {size:,} bytes")
        check_alive()
        row = {"partitions": partitions, "topics": topics, "response_bytes": size}
        for clients, rounds in ((1, args.rounds_one), (MANY_CLIENTS, args.rounds_many)):
            # What one /metrics scrape allocates (two back to back), and what kshim allocates and
            # spends per second while nobody asks it anything (its timers): both are taken off
            # the run's figures, which span one scrape and the run's wall time.
            m0 = kshim.metrics()
            m1, c1 = kshim.metrics(), kshim.cpu()
            scrape = allocs(m1) - allocs(m0)
            time.sleep(IDLE_WINDOW_S)
            m2, c2 = kshim.metrics(), kshim.cpu()
            idle_allocs_per_s = max(0.0, allocs(m2) - allocs(m1) - scrape) / IDLE_WINDOW_S
            idle_cpu_per_s = (c2 - c1) / IDLE_WINDOW_S
            t0 = time.monotonic()
            out = pb.run_program([str(bench_bin), *[f"--target={k}={v}" for k, v in targets.items()],
                                  f"--clients={clients}", f"--rounds={rounds}", f"--version={METADATA_VERSION}"],
                                 log_dir, f"metadata-{partitions}-{clients}", max(60.0, deadline - time.monotonic()))
            wall = time.monotonic() - t0
            m3, c3 = kshim.metrics(), kshim.cpu()
            check_alive()
            results = {r["target"]: r for r in map(json.loads, filter(str.strip, out.splitlines()))}
            if results["direct"]["response_bytes"] != results["kshim"]["response_bytes"]:
                # Same node, same topics: only the broker addresses differ, and kshim's are
                # 127.0.0.1 with ports of as many digits, give or take one per broker.
                diff = abs(results["direct"]["response_bytes"] - results["kshim"]["response_bytes"])
                if diff > 3 * 8:
                    raise BenchError(f"the answers through kshim and direct differ by {diff} bytes")
            requests = clients * (rounds + 1)  # the unmeasured round went through kshim too
            run_allocs = allocs(m3) - allocs(m2) - scrape - idle_allocs_per_s * wall
            cpu = c3 - c2 - idle_cpu_per_s * wall
            lat = {leg: [us / 1000 for us in results[leg]["latencies_us"]] for leg in ("direct", "kshim")}
            key = "one" if clients == 1 else "many"
            for leg in ("direct", "kshim"):
                row[f"{key}_{leg}_p50"] = statistics.median(lat[leg])
                row[f"{key}_{leg}_p99"] = percentile(lat[leg], 99)
            row[f"{key}_latencies_ms"] = lat  # every request's, for the plot's JSON
            row[f"{key}_allocs_per_request"] = run_allocs / requests
            row[f"{key}_cpu_ms_per_request"] = 1000 * cpu / requests
            log(f"  {clients} client(s) x {rounds} rounds: p99 direct {row[f'{key}_direct_p99']:.2f} ms, "
                f"kshim {row[f'{key}_kshim_p99']:.2f} ms; kshim {row[f'{key}_allocs_per_request']:.1f} allocations "
                f"and {row[f'{key}_cpu_ms_per_request']:.3f} ms CPU per request")
        rows.append(row)
    print_metadata_report(args, rows, time.monotonic() - started)
    if args.plots:
        plot_metadata(args.plots, rows)
    return 0


def print_metadata_report(args, rows: list[dict], elapsed: float) -> None:
    print()
    print(f"Metadata at scale: Apache Kafka 4.1.1, 3 KRaft nodes; topics of {PARTITIONS_PER_TOPIC} partitions, "
          f"replication factor {args.replicas}; Metadata v{METADATA_VERSION} for all topics, node 1 directly "
          f"and through kshim's listener for node 1, alternating round by round; "
          f"{args.rounds_one} rounds of 1 client, {args.rounds_many} rounds of {MANY_CLIENTS} clients at once.")
    print()
    print("| partitions | answer | clients | p50 direct | p50 kshim | p99 direct | p99 kshim | added p99 | "
          "kshim allocations / request | kshim CPU ms / request |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        for key, clients in (("one", 1), ("many", MANY_CLIENTS)):
            d99, k99 = r[f"{key}_direct_p99"], r[f"{key}_kshim_p99"]
            print(f"| {r['partitions']:,} | {r['response_bytes'] / 1024:,.0f} KiB | {clients} | "
                  f"{r[f'{key}_direct_p50']:.2f} | {r[f'{key}_kshim_p50']:.2f} | {d99:.2f} | {k99:.2f} | "
                  f"{k99 - d99:+.2f} ms ({100 * (k99 - d99) / d99:+.0f}%) | "
                  f"{r[f'{key}_allocs_per_request']:.1f} | {r[f'{key}_cpu_ms_per_request']:.3f} |")
    last = rows[-1]
    first = rows[0]
    d99, k99 = last["many_direct_p99"], last["many_kshim_p99"]
    print()
    print("Goals (informational):")
    print(f"- {'PASS' if k99 <= 1.2 * d99 else 'MISS'}: with {last['partitions']:,} partitions and {MANY_CLIENTS} "
          f"clients, kshim adds {100 * (k99 - d99) / d99:+.0f}% to direct's p99 (at most +20%)")
    growth = last["many_allocs_per_request"] - first["many_allocs_per_request"]
    print(f"- {'PASS' if growth <= 2 else 'MISS'}: allocations per Metadata request from {first['partitions']:,} to "
          f"{last['partitions']:,} partitions: {first['many_allocs_per_request']:.1f} -> "
          f"{last['many_allocs_per_request']:.1f} (they must not grow with partitions)")
    print(f"Total run time {elapsed:.0f}s.")


def plot_metadata(out: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "metadata-scale.json").write_text(json.dumps(rows, indent=1))
    x = [r["partitions"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    for key, clients, style in (("one", 1, "o-"), ("many", MANY_CLIENTS, "s-")):
        ax.plot(x, [r[f"{key}_direct_p99"] for r in rows], style, color="tab:gray", label=f"direct, {clients} client(s)")
        ax.plot(x, [r[f"{key}_kshim_p99"] for r in rows], style, color="tab:blue", label=f"kshim, {clients} client(s)")
    ax.set(xscale="log", yscale="log", xlabel="partitions", ylabel="Metadata p99 (ms)", title="Latency p99")
    ax.legend(fontsize=8)
    for ax, figure, unit, title in ((axes[1], "allocs_per_request", "allocations per request",
                                     "kshim allocations / request"),
                                    (axes[2], "cpu_ms_per_request", "ms", "kshim CPU / request")):
        for key, clients, style in (("one", 1, "o-"), ("many", MANY_CLIENTS, "s-")):
            ax.plot(x, [r[f"{key}_{figure}"] for r in rows], style, label=f"{clients} client(s)")
        ax.set(xscale="log", xlabel="partitions", ylabel=unit, title=title)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "metadata-scale.png", dpi=110)
    plt.close(fig)
    log(f"plot: {out / 'metadata-scale.png'}")


# --------------------------------------------------------------------------------------------
# entry point


def run(args, workdir: Path, started: float) -> int:
    ke.require_jars()
    kshim_bin = ke.require_kshim_binary(args.kshim_bin)
    log_dir = workdir / "logs"
    log_dir.mkdir()
    study = metadata_study if args.study == "metadata" else connections_study
    return study(args, workdir, kshim_bin, log_dir, started + args.max_seconds, started)


# --------------------------------------------------------------------------------------------
# connections

PROBE_CLIENTS = 50

PROBE_INTERVAL_S = 0.05
STORM_WARMUP_S = 5


class ApiVersionsProbe:
    """PROBE_CLIENTS connections, opened over TLS before a storm, each asking ApiVersions once every
    PROBE_INTERVAL_S in turn while it lasts: how long clients already connected wait."""

    def __init__(self, host: str, port: int, tls):
        self.socks = []
        for _ in range(PROBE_CLIENTS):
            raw = socket.create_connection((host, port), timeout=10)
            s = tls.wrap_socket(raw, server_hostname=host)
            s.settimeout(10)
            self.socks.append(s)
        self.latencies_ms: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        correlation = 0
        while not self._stop.is_set():
            tick = time.monotonic()
            for s in self.socks:
                correlation += 1
                t0 = time.perf_counter()
                try:
                    s.sendall(pb.api_versions_frame(correlation))
                    (size,) = struct.unpack(">i", ke._recv_exact(s, 4))
                    body = ke._recv_exact(s, size)
                except (OSError, ke.EnvError) as e:
                    self.failures.append(repr(e))
                    continue
                self.latencies_ms.append((time.perf_counter() - t0) * 1000)
                if struct.unpack_from(">i", body)[0] != correlation:
                    self.failures.append(f"correlation id {struct.unpack_from('>i', body)[0]}, not {correlation}")
            self._stop.wait(max(0.0, PROBE_INTERVAL_S - (time.monotonic() - tick)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)
        for s in self.socks:
            s.close()


def connections_study(args, workdir: Path, kshim_bin: Path, log_dir: Path, deadline: float,
                       started: float) -> int:
    tls_bench = _require_binary(args.tls_bench_bin, "tls_bench")
    # A forwarding connection holds two descriptors in a forwarder (its client side and its
    # upstream side), and kshim caps its connections to fit its open-file limit on that count.
    have = pb.raise_open_file_limit(2 * args.connections + pb.FD_HEADROOM)
    n = min(args.connections, (have - pb.FD_HEADROOM) // 2)
    notes = []
    if n < args.connections:
        notes.append(f"Idle connections: {n:,}, not {args.connections:,}: the open-file hard limit here is "
                     f"{have:,} per process, and a process cannot raise it (no CAP_SYS_RESOURCE).")
        log(notes[-1])
    log("making certificates (openssl, keytool): a CA and RSA 2048 leaves for the broker and kshim")
    tls = pb.make_tls_material(workdir / "certs")
    log("starting Apache Kafka 4.1.1 (KRaft; PLAINTEXT, SSL and RELAY client listeners)")
    # extra0: SSL; extra1: RELAY (plaintext, advertised as the relay's port extra2).
    # The broker's SSL listener holds about 50 KiB of heap per connection (its engine's buffers).
    cluster = ke.KafkaCluster(
        1, workdir=workdir / "kafka", heap=pb.TLS_BROKER_HEAP, separate_inter_broker=True, extra_ports=3,
        listener_overrides={
            "listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{extra0},RELAY://127.0.0.1:{extra1},"
                         "INTERNAL://127.0.0.1:{internal_port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{extra0},"
                                    "RELAY://127.0.0.1:{extra2},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,RELAY:PLAINTEXT,INTERNAL:PLAINTEXT,"
                                              "CONTROLLER:PLAINTEXT",
        },
        extra_properties=tls.broker_properties(),
    )
    pb.start_cluster(cluster, resources)
    broker = cluster.nodes[0]
    ssl_port, relay_listener, relay_port = broker.extra_ports
    started_count = {"n": 0}

    def start(name: str):
        """A fresh forwarder: each figure starts from a process that has held no connections."""
        started_count["n"] += 1
        d = workdir / f"{name}-{started_count['n']}"
        if name == "relay":
            f = pb.SocatRelay(d, relay_port, relay_listener)
        elif name == "kshim":
            f = pb.KshimProxy(kshim_bin, d, broker.bootstrap, n + 1024, admin=True,
                              upstream_settings=pb.UPSTREAM_PATIENCE)
        else:
            f = pb.KshimProxy(kshim_bin, d, f"127.0.0.1:{ssl_port}", n + 1024, admin=True,
                              extra_toml=tls.kshim_toml(), upstream_settings=pb.UPSTREAM_PATIENCE)
            f.tls = tls.context
        resources.append(f.stop)
        if name == "relay":
            f.start({broker.port, ssl_port, relay_listener})
        else:
            f.start()
        log(f"{name} {f.describe()} hands out brokers {f.advertised}")
        return f

    def check_alive(f) -> None:
        if not broker.alive():
            raise BenchError(f"the broker exited\n--- {broker.log_path}:\n{ke.tail(broker.log_path)}")
        if not f.alive():
            raise BenchError(f"{f.leg} exited\n--- {f.log_path}:\n{ke.tail(f.log_path)}")

    idle = []
    for name, metadata in (("kshim", False), ("kshim-tls", False), ("kshim", True), ("kshim-tls", True),
                           ("relay", True)):
        what = "ApiVersions and Metadata" if metadata else "ApiVersions"
        f = start(name)
        log(f"idle connections: {n:,} to {name}, each answered {what}")
        # Answered ApiVersions alone, which kshim answers itself, a connection has no upstream side.
        sample = None
        if isinstance(f, pb.KshimProxy):
            def sample(f=f):
                return {"heap": f.metrics()["kshim_heap_allocated_bytes"] / 1024}
        m = pb.idle_memory(f, n, deadline, metadata=metadata, sample=sample)
        check_alive(f)
        f.stop()
        m.update(forwarder=name, answered=what)
        idle.append(m)
        heap = f", heap {m['heap_per_conn']:.1f} KiB" if "heap_per_conn" in m else ""
        log(f"{name}: {m['per_conn_kib']:.1f} KiB per idle connection{heap} ({what}), {m['links']} upstream links, "
            f"opened in {m['open_s']:.1f}s")

    storms = []
    secure = start("kshim-tls")
    ssl_target = ("direct", f"127.0.0.1:{ssl_port}", broker.pid)
    kshim_host, kshim_port = secure.advertised[0]
    for concurrency in args.storm_concurrency:
        for name, addr, pid in (ssl_target, ("kshim-tls", f"{kshim_host}:{kshim_port}", secure.pid)):
            host, port = ke.split_hostport(addr)
            cmd = [str(tls_bench), "handshakes", f"--ca={tls.certs.ca}", f"--target={name}={addr}",
                   f"--pid={name}={pid}", f"--concurrency={concurrency}", "--rounds=1",
                   f"--duration-secs={args.storm_seconds}", f"--warmup-secs={STORM_WARMUP_S}",
                   f"--baseline={name}"]
            log(f"storm: {concurrency} clients connecting to {name} ({addr}) for {args.storm_seconds}s, "
                f"{PROBE_CLIENTS} connected clients asking ApiVersions")
            with ApiVersionsProbe(host, port, tls.context) as probe:
                out = pb.run_program(cmd, log_dir, f"storm-{name}-{concurrency}",
                                  STORM_WARMUP_S + args.storm_seconds + 120)
            check_alive(secure)
            rate, failed = parse_handshakes(out, name)
            lat = probe.latencies_ms
            if not lat:
                raise BenchError(f"the ApiVersions probe got no answer from {name} during the storm: {probe.failures[:3]}")
            storms.append({"target": name, "concurrency": concurrency, "handshakes_per_s": rate, "failed": failed,
                           "probe_p50": statistics.median(lat), "probe_p99": percentile(lat, 99),
                           "probe_max": max(lat), "probe_n": len(lat), "probe_failures": len(probe.failures)})
            s_ = storms[-1]
            log(f"  {rate:,.0f} handshakes/s, {failed} failed; connected clients' ApiVersions p99 "
                f"{s_['probe_p99']:.2f} ms, max {s_['probe_max']:.2f} ms")
    print_connections_report(idle, storms, notes, time.monotonic() - started)
    if args.plots:
        plot_connections(args.plots, idle, storms)
    return 0


def parse_handshakes(out: str, name: str) -> tuple[float, int]:
    """Handshakes/s (median) and failed handshakes of `name` from tls_bench's first table."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 9 and cells[1] == name and cells[0].isdigit():
            return float(cells[2].replace(",", "")), int(cells[8])
    raise BenchError(f"tls_bench printed no handshake row for {name}:\n{out[-1500:]}")


def print_connections_report(idle: list[dict], storms: list[dict], notes: list[str], elapsed: float) -> None:
    print()
    print("Connections at scale: Apache Kafka 4.1.1, 1 KRaft node; kshim plaintext to plaintext, kshim-tls TLS to "
          "TLS (RSA 2048), the socat relay (a process per connection). Memory is the growth of the forwarder's "
          "PSS (all its processes) 2 s after the last connection, divided by the connections; kernel socket "
          "buffers are in no process and left out.")
    for note in notes:
        print(note)
    print()
    print("| forwarder | connections | each answered | memory (PSS) per connection | of it, kshim's heap | "
          "upstream links | opened in |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for m in idle:
        heap = f"{m['heap_per_conn']:.1f} KiB" if "heap_per_conn" in m else "—"
        print(f"| {m['forwarder']} | {m['conns']:,} | {m['answered']} | {m['per_conn_kib']:.1f} KiB | {heap} | "
              f"{m['links']:,} | {m['open_s']:.0f} s |")
    print()
    print(f"Storms of new TLS connections (connect, full handshake, ApiVersions, close; {STORM_WARMUP_S} s unmeasured "
          f"first), with {PROBE_CLIENTS} clients already connected over TLS asking ApiVersions every "
          f"{PROBE_INTERVAL_S * 1000:.0f} ms each, one after another:")
    print()
    print("| target | connecting clients | handshakes/s | failed | connected clients' ApiVersions p50 | p99 | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for st in storms:
        print(f"| {st['target']} | {st['concurrency']} | {st['handshakes_per_s']:,.0f} | {st['failed']} | "
              f"{st['probe_p50']:.2f} ms | {st['probe_p99']:.2f} ms | {st['probe_max']:.2f} ms |")
    print()
    print("Goals (informational):")
    tls_linked = [m for m in idle if m["forwarder"] == "kshim-tls" and m["answered"].endswith("Metadata")]
    if tls_linked:
        per = tls_linked[0]["per_conn_kib"]
        print(f"- {'PASS' if per <= 16 else 'MISS'}: an idle TLS connection (both sides) costs kshim {per:.1f} KiB "
              "(at most 16 KiB)")
    kshim_storms = [st for st in storms if st["target"] == "kshim-tls"]
    if kshim_storms:
        worst = max(st["probe_p99"] for st in kshim_storms)
        print(f"- {'PASS' if worst < 10 else 'MISS'}: during the storms, connected clients' ApiVersions p99 at most "
              f"{worst:.2f} ms (under 10 ms)")
    print(f"Total run time {elapsed:.0f}s.")


def plot_connections(out: Path, idle: list[dict], storms: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "connections.json").write_text(json.dumps({"idle": idle, "storms": storms}, indent=1))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    labels = [f"{m['forwarder']}\n{m['answered'].replace(' and ', '+')}\n{m['conns']:,}" for m in idle]
    ax.bar(range(len(idle)), [m["per_conn_kib"] for m in idle], color="tab:blue")
    ax.set_xticks(range(len(idle)), labels, fontsize=7)
    ax.set(ylabel="KiB per idle connection", title="Memory per idle connection")
    ax = axes[1]
    for target in sorted({st["target"] for st in storms}):
        rows = [st for st in storms if st["target"] == target]
        ax.plot([st["concurrency"] for st in rows], [st["handshakes_per_s"] for st in rows], "o-", label=f"{target}: handshakes/s")
    ax.set(xscale="log", xlabel="connecting clients", ylabel="handshakes/s", title="TLS connection storm")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "connections.png", dpi=110)
    plt.close(fig)
    log(f"plot: {out / 'connections.png'}")


def main(argv: list[str]) -> int:
    return pb.guarded_run("scale_bench", parse_args(argv), run, resources)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
