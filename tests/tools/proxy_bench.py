#!/usr/bin/env python3
"""Forwarding benchmark: the same Kafka clients against a real broker, directly and through kshim.

Started by scripts/bench-proxy.sh, which builds kshim and checks the prerequisites first.

One Apache Kafka 4.1.1 KRaft node and one `kshim serve` in proxy mode in front of it run for
the whole benchmark. For every round and record size, each leg ("direct" = the broker's own
listener, "kshim" = kshim's listener) runs in turn, and the order of the two legs flips every
round so that a slow patch of this noisy machine does not always land on the same leg:

  produce    org.apache.kafka.tools.ProducerPerformance, acks=all, unthrottled, a fixed record
             count: throughput, and the tool's latency percentiles (whole milliseconds; under
             saturation they are queueing time in the producer's buffer)
  consume    org.apache.kafka.tools.ConsumerPerformance over everything both produce legs of
             the round wrote; its fetch.* figures, which leave out the group join
  latency    tests/tools/LatencyProbe.java: one record in flight, acks=all; microsecond
             percentiles of the producer's acknowledgement and of produce-to-consume

kshim's CPU time (utime + stime from /proc/PID/stat) is read before and after each of its
produce and consume legs and divided by the record bytes that leg moved.

The printed table holds medians over the rounds; kshim/direct and the added latency are
computed from those two medians, so they agree with the columns beside them. The per-round
range next to them (each round's own ratio or difference, its two legs back to back) shows how
much of a verdict is machine noise.

Exit status: 0 once the table is printed, whatever it says; 1 with the error when anything
failed to run; 130/143 when interrupted. Every process started here is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))

import kafka_env as ke  # noqa: E402  (needs the path above)

LATENCY_PROBE_SRC = Path(__file__).resolve().parent / "LatencyProbe.java"

GOAL_RATIO = 0.95
GOAL_ADDED_P99_MS = 1.0
# The tools' MB is 2^20 bytes; GB here is 2^30 so that CPU s/GB and MB/s use one unit system.
MIB = 1 << 20
GIB = 1 << 30
TOOL_TIMEOUT_S = 180.0
CLIENT_HEAP = "-Xmx512m"
BROKER_HEAP = "512m"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """Something the benchmark needs did not run or did not behave."""


def log(msg: str) -> None:
    print(f"==> {msg}", file=sys.stderr, flush=True)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"proxy_bench: {name}={raw!r} is not an integer")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kshim-bin", type=Path, default=ke.kshim_binary())
    p.add_argument(
        "--direct-only",
        action="store_true",
        help="measure only the direct-to-broker leg (for checking the benchmark itself)",
    )
    p.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 3))
    p.add_argument(
        "--records-1k",
        type=int,
        default=env_int("BENCH_RECORDS_1K", 250_000),
        help="records per 1 KiB produce leg (~5 s on 2 cores)",
    )
    p.add_argument(
        "--records-64k",
        type=int,
        default=env_int("BENCH_RECORDS_64K", 8_000),
        help="records per 64 KiB produce leg (~5 s on 2 cores)",
    )
    p.add_argument(
        "--latency-records",
        type=int,
        default=env_int("BENCH_LATENCY_RECORDS", 4_000),
        help="measured records per latency leg, one in flight (~1.5 ms each)",
    )
    p.add_argument("--latency-warmup", type=int, default=env_int("BENCH_LATENCY_WARMUP", 400))
    p.add_argument("--partitions", type=int, default=env_int("BENCH_PARTITIONS", 1))
    p.add_argument(
        "--max-seconds",
        type=int,
        default=env_int("BENCH_MAX_SECS", 900),
        help="give up (exit 1) when the run would go on past this",
    )
    p.add_argument("--keep-tmp", action="store_true", default=bool(os.environ.get("KSHIM_BENCH_KEEP_TMP")))
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


# --------------------------------------------------------------------------------------------
# processes


def cpu_seconds(pid: int) -> float:
    """utime + stime of a whole process (all its threads), in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        raise BenchError(f"process {pid} is gone; cannot read its CPU time")
    # comm (field 2) may hold spaces and parentheses; the fields after the last ')' do not.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


class ToolRunner:
    """Runs one Java tool at a time, each in its own session so that only this driver stops it."""

    def __init__(self, log_dir: Path, deadline: float):
        self.log_dir = log_dir
        self.deadline = deadline
        self.seq = 0
        self.last_wall_s = 0.0  # wall time of the latest tool run, JVM start included

    def java(self, name: str, main_and_args: list[str], extra_classpath: list[Path] = ()) -> str:
        cmd = [
            "java",
            CLIENT_HEAP,
            f"-Dlog4j2.configurationFile={ke.TOOLS_LOG4J}",
            "-cp",
            ke.classpath(*extra_classpath),
            *main_and_args,
        ]
        return self.run(name, cmd)

    def run(self, name: str, cmd: list[str]) -> str:
        left = self.deadline - time.monotonic()
        if left < 10:
            raise BenchError(f"out of time before {name}: the run is capped at --max-seconds")
        timeout = min(TOOL_TIMEOUT_S, left)
        self.seq += 1
        out_path = self.log_dir / f"{self.seq:03d}-{name}.out"
        err_path = self.log_dir / f"{self.seq:03d}-{name}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=str(REPO_ROOT),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        ke._register(proc)  # the atexit hook of kafka_env then stops it too
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=timeout)
            self.last_wall_s = time.monotonic() - t0
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"{name} did not finish within {timeout:.0f}s\n"
                f"--- {err_path}:\n{ke.tail(err_path, 20)}\n--- {out_path}:\n{ke.tail(out_path, 20)}"
            )
        finally:
            ke.stop_process(proc, timeout=10)
        stdout = out_path.read_text(errors="replace")
        if rc != 0:
            raise BenchError(
                f"{name} exited with status {rc}: {' '.join(cmd)}\n"
                f"--- {err_path}:\n{ke.tail(err_path, 30)}\n--- {out_path}:\n{ke.tail(out_path, 10)}"
            )
        return stdout


@dataclass
class Endpoint:
    leg: str  # "direct" or "kshim"
    bootstrap: str
    pid: int | None  # the kshim process whose CPU is counted; None for the direct leg


class KshimProxy:
    """`kshim serve --config FILE` in proxy mode in front of one upstream cluster."""

    def __init__(self, binary: Path, workdir: Path, upstream: str):
        workdir.mkdir(parents=True, exist_ok=True)
        # A private copy: the binary in target/release may be rebuilt while the run goes on.
        self.binary = workdir / "kshim"
        shutil.copy2(binary, self.binary)
        self.workdir = workdir
        self.port = ke.free_port()
        self.config_path = workdir / "kshim.toml"
        self.log_path = workdir / "kshim.log"
        data_dir = workdir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f'listen = "127.0.0.1:{self.port}"\n'
            f"data_dir = {json.dumps(str(data_dir))}\n"
            "\n[upstream]\n"
            f'bootstrap = "{upstream}"\n'
            "\n[upstream.listeners]\n"
            "port_base = 0\n"
        )
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, broker_port: int, timeout: float = ke.KSHIM_START_TIMEOUT_S) -> None:
        cmd = [str(self.binary), "serve", "--config", str(self.config_path)]
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")  # the log is a file, read back into error messages
        self.proc = ke._spawn(cmd, cwd=self.workdir, log_path=self.log_path, env=env)
        deadline = time.monotonic() + timeout
        last = "no attempt"
        while time.monotonic() < deadline:
            if not self.alive():
                raise BenchError(
                    f"kshim exited with status {self.proc.returncode} during startup\n"
                    f"--- {self.log_path}:\n{ke.tail(self.log_path)}"
                )
            try:
                info = ke.api_versions(self.bootstrap, timeout=2.0)
                if info.error_code != 0:
                    last = f"ApiVersions error {info.error_code}"
                else:
                    brokers = metadata_brokers(self.bootstrap, info.api_keys.get(3))
                    bypass = [b for b in brokers if b[1] == broker_port]
                    if not brokers:
                        last = "Metadata through kshim lists no brokers yet"
                    elif bypass:
                        # Clients would connect straight to the broker after bootstrapping, and
                        # the "kshim" leg would measure the broker alone.
                        raise BenchError(
                            f"Metadata through kshim advertises the broker's own address {bypass}; "
                            "kshim is not rewriting broker addresses, so its leg would bypass it"
                        )
                    else:
                        self.advertised = brokers
                        return
            except (OSError, ke.EnvError, struct.error, IndexError, ValueError) as e:
                last = repr(e)
            time.sleep(0.2)
        raise BenchError(
            f"kshim on {self.bootstrap} did not answer ApiVersions and Metadata within {timeout}s "
            f"({last})\n--- {self.log_path}:\n{ke.tail(self.log_path)}"
        )

    def stop(self) -> None:
        ke.stop_process(self.proc)


# --------------------------------------------------------------------------------------------
# a minimal Metadata client: which broker addresses does an endpoint hand out?


def _read_str(buf: bytes, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n, pos = ke._uvarint(buf, pos)
        n -= 1
    else:
        (n,) = struct.unpack_from(">h", buf, pos)
        pos += 2
    if n < 0:
        return None, pos
    return buf[pos : pos + n].decode(), pos + n


def metadata_brokers(bootstrap: str, version_range: tuple[int, int] | None) -> list[tuple[str, int]]:
    """(host, port) of every broker in a Metadata answer for no topics."""
    if version_range is None:
        raise BenchError(f"{bootstrap} does not advertise Metadata (API key 3) in ApiVersions")
    version = min(version_range[1], 12)
    if version < max(version_range[0], 4):
        raise BenchError(f"{bootstrap} advertises Metadata {version_range}, none of v4-v12")
    flexible = version >= 9
    client_id = b"kshim-proxy-bench"
    frame = struct.pack(">hhih", 3, version, 7, len(client_id)) + client_id
    if flexible:
        frame += b"\x00"  # request header v2 tags
        frame += b"\x01"  # topics: empty compact array (0 topics, not null = all)
    else:
        frame += struct.pack(">i", 0)
    frame += b"\x00"  # allow_auto_topic_creation
    if 8 <= version <= 10:
        frame += b"\x00"  # include_cluster_authorized_operations
    if version >= 8:
        frame += b"\x00"  # include_topic_authorized_operations
    if flexible:
        frame += b"\x00"
    host, port = ke.split_hostport(bootstrap)
    try:
        with socket.create_connection((host, port), timeout=5.0) as sock:
            sock.settimeout(5.0)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
            resp = ke._recv_exact(sock, size)
    except (OSError, ke.EnvError) as e:
        raise ke.EnvError(f"Metadata v{version} to {bootstrap}: {e}")
    (correlation,) = struct.unpack_from(">i", resp, 0)
    if correlation != 7:
        raise BenchError(f"Metadata answer from {bootstrap} has correlation id {correlation}, not 7")
    pos = 4
    if flexible:
        pos = ke._skip_tags(resp, pos)
    pos += 4  # throttle_time_ms
    if flexible:
        count, pos = ke._uvarint(resp, pos)
        count -= 1
    else:
        (count,) = struct.unpack_from(">i", resp, pos)
        pos += 4
    brokers = []
    for _ in range(max(count, 0)):
        pos += 4  # node_id
        host_name, pos = _read_str(resp, pos, flexible)
        (broker_port,) = struct.unpack_from(">i", resp, pos)
        pos += 4
        _, pos = _read_str(resp, pos, flexible)  # rack
        if flexible:
            pos = ke._skip_tags(resp, pos)
        brokers.append((host_name or "", broker_port))
    return brokers


# --------------------------------------------------------------------------------------------
# the three measurements

PRODUCER_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th"
)


def produce(tools: ToolRunner, ep: Endpoint, topic: str, size: int, records: int) -> dict:
    cpu0 = cpu_seconds(ep.pid) if ep.pid else None
    out = tools.java(
        f"produce-{ep.leg}-{size}",
        [
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic,
            "--num-records", str(records),
            "--record-size", str(size),
            "--throughput", "-1",
            "--producer-props",
            f"bootstrap.servers={ep.bootstrap}",
            "acks=all",
            f"client.id=bench-produce-{ep.leg}",
        ],
    )
    cpu1 = cpu_seconds(ep.pid) if ep.pid else None
    finals = PRODUCER_FINAL.findall(out)
    if not finals:
        raise BenchError(f"ProducerPerformance printed no final summary for {topic} via {ep.leg}:\n{out[-2000:]}")
    sent, rps, mbps, _avg, _max, p50, _p95, p99, _p999 = finals[-1]
    if int(sent) != records:
        raise BenchError(f"ProducerPerformance acknowledged {sent} of {records} records via {ep.leg}")
    moved = records * size
    return {
        "prod_mbs": float(mbps),
        "prod_msgs": float(rps),
        "prod_p50": float(p50),
        "prod_p99": float(p99),
        "cpu_prod": None if cpu0 is None else (cpu1 - cpu0) / (moved / GIB),
        "cpu_prod_s": None if cpu0 is None else cpu1 - cpu0,
    }


def consume(tools: ToolRunner, ep: Endpoint, topic: str, size: int, messages: int, group: str) -> dict:
    cpu0 = cpu_seconds(ep.pid) if ep.pid else None
    out = tools.java(
        f"consume-{ep.leg}-{size}",
        [
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server", ep.bootstrap,
            "--topic", topic,
            "--messages", str(messages),
            "--group", group,
            "--timeout", "30000",
        ],
    )
    cpu1 = cpu_seconds(ep.pid) if ep.pid else None
    if "WARNING: Exiting before consuming" in out:
        raise BenchError(f"ConsumerPerformance stopped early on {topic} via {ep.leg}:\n{out[-2000:]}")
    # start.time, end.time, MB, MB.sec, nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms,
    # fetch.MB.sec, fetch.nMsg.sec
    rows = [l.split(", ") for l in out.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", l)]
    if not rows or len(rows[-1]) != 10:
        raise BenchError(f"ConsumerPerformance printed no result line for {topic} via {ep.leg}:\n{out[-2000:]}")
    row = rows[-1]
    consumed_mb, consumed_n = float(row[2]), int(row[4])
    if consumed_n < messages:
        raise BenchError(f"ConsumerPerformance read {consumed_n} of {messages} records via {ep.leg}")
    moved = consumed_mb * MIB
    return {
        "cons_mbs": float(row[8]),
        "cons_msgs": float(row[9]),
        "cpu_cons": None if cpu0 is None else (cpu1 - cpu0) / (moved / GIB),
        "cpu_cons_s": None if cpu0 is None else cpu1 - cpu0,
    }


def latency(tools: ToolRunner, probe_classes: Path, ep: Endpoint, topic: str, size: int, args) -> dict:
    out = tools.java(
        f"latency-{ep.leg}-{size}",
        [
            "LatencyProbe",
            "--bootstrap", ep.bootstrap,
            "--topic", topic,
            "--records", str(args.latency_records),
            "--warmup", str(args.latency_warmup),
            "--record-size", str(size),
        ],
        extra_classpath=[probe_classes],
    )
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        raise BenchError(f"LatencyProbe printed no result via {ep.leg}:\n{out[-2000:]}")
    r = json.loads(lines[0])
    return {
        "ack_p50": r["ack_p50_us"] / 1000,
        "ack_p99": r["ack_p99_us"] / 1000,
        "e2e_p50": r["e2e_p50_us"] / 1000,
        "e2e_p99": r["e2e_p99_us"] / 1000,
    }


# --------------------------------------------------------------------------------------------
# topics


def admin_client(bootstrap: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kshim-proxy-bench", request_timeout_ms=30000)


def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    try:
        res = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
        errors = [t for t in res.get("topics", []) if t.get("error_code")]
        if errors:
            raise BenchError(f"CreateTopics failed: {errors}")
        # The first leg should not pay for leader election; wait until every partition has a leader.
        deadline = time.monotonic() + 30
        while True:
            described = admin.describe_topics(names)
            ready = all(
                t.get("error_code") == 0
                and len(t.get("partitions", [])) == partitions
                and all(p.get("leader_id", -1) >= 0 for p in t["partitions"])
                for t in described
            )
            if ready:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"topics {names} have no leaders after 30s: {described}")
            time.sleep(0.2)
    finally:
        admin.close()


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = admin_client(bootstrap)
    try:
        admin.delete_topics(names)
    finally:
        admin.close()


# --------------------------------------------------------------------------------------------
# the run


SIZES = [(1024, "1 KiB"), (65536, "64 KiB")]


def run(args: argparse.Namespace, workdir: Path, started: float) -> int:
    deadline = started + args.max_seconds
    ke.require_jars()
    if shutil.which("javac") is None:
        raise BenchError("`javac` is not on PATH (it compiles tests/tools/LatencyProbe.java). "
                         f"Run: {ke.INSTALL_HINT}")
    records_for = {1024: args.records_1k, 65536: args.records_64k}
    log_dir = workdir / "logs"
    log_dir.mkdir()
    tools = ToolRunner(log_dir, deadline)

    log("compiling tests/tools/LatencyProbe.java")
    probe_classes = ke.compile_java(LATENCY_PROBE_SRC)

    log("starting Apache Kafka 4.1.1 (KRaft, broker+controller)")
    cluster = ke.KafkaCluster(1, workdir=workdir / "kafka", heap=BROKER_HEAP)
    resources.append(cluster.stop)
    try:
        cluster.start()
    except ke.EnvError as e:
        raise BenchError(str(e))
    broker = cluster.nodes[0]
    legs = [Endpoint("direct", broker.bootstrap, None)]
    log(f"broker on {broker.bootstrap} (pid {broker.pid})")

    if not args.direct_only:
        kshim = KshimProxy(ke.require_kshim_binary(args.kshim_bin), workdir / "kshim", broker.bootstrap)
        resources.append(kshim.stop)
        log(f"starting kshim on {kshim.bootstrap}, upstream {broker.bootstrap}")
        kshim.start(broker.port)
        log(f"kshim pid {kshim.proc.pid} hands out brokers {kshim.advertised}")
        legs.append(Endpoint("kshim", kshim.bootstrap, kshim.proc.pid))

    def check_alive() -> None:
        if not broker.alive():
            raise BenchError(f"the broker exited\n--- {broker.log_path}:\n{ke.tail(broker.log_path)}")
        if not args.direct_only and not kshim.alive():
            raise BenchError(
                f"kshim exited with status {kshim.proc.returncode}\n--- {kshim.log_path}:\n{ke.tail(kshim.log_path)}"
            )

    round_topics = {(r, s): f"bench-{s}-r{r}" for r in range(1, args.rounds + 1) for s, _ in SIZES}
    latency_topics = {s: f"bench-latency-{s}" for s, _ in SIZES}
    warm_topics = {s: f"bench-warmup-{s}" for s, _ in SIZES}
    create_topics(
        broker.bootstrap,
        [*round_topics.values(), *latency_topics.values(), *warm_topics.values()],
        args.partitions,
    )

    # Fresh JVMs, a cold broker and a fresh kshim: the first minute is slower than the rest.
    # One short produce and consume per leg and size, unmeasured, before round 1.
    for size, label in SIZES:
        warm_records = max(records_for[size] // 5, 1)
        for ep in legs:
            log(f"warm-up {label} via {ep.leg}")
            produce(tools, ep, warm_topics[size], size, warm_records)
            consume(tools, ep, warm_topics[size], size, warm_records, f"bench-warmup-{ep.leg}-{size}")
            check_alive()
    delete_topics(broker.bootstrap, list(warm_topics.values()))

    results: dict[tuple[int, str], list[dict]] = {(s, ep.leg): [] for s, _ in SIZES for ep in legs}
    for rnd in range(1, args.rounds + 1):
        order = legs if rnd % 2 == 1 else list(reversed(legs))
        for size, label in SIZES:
            topic = round_topics[(rnd, size)]
            records = records_for[size]
            row = {ep.leg: {"round": rnd} for ep in order}
            for ep in order:
                row[ep.leg].update(produce(tools, ep, topic, size, records))
                check_alive()
                log(f"round {rnd}/{args.rounds} {label} produce {ep.leg}: {row[ep.leg]['prod_mbs']:.1f} MB/s ({tools.last_wall_s:.0f}s)")
            for ep in order:
                # Both produce legs wrote to this topic: read all of it.
                row[ep.leg].update(consume(tools, ep, topic, size, records * len(legs), f"bench-{ep.leg}-{size}-r{rnd}"))
                check_alive()
                log(f"round {rnd}/{args.rounds} {label} consume {ep.leg}: {row[ep.leg]['cons_mbs']:.1f} MB/s ({tools.last_wall_s:.0f}s)")
            for ep in order:
                row[ep.leg].update(latency(tools, probe_classes, ep, latency_topics[size], size, args))
                check_alive()
                log(
                    f"round {rnd}/{args.rounds} {label} latency {ep.leg}: "
                    f"e2e p50 {row[ep.leg]['e2e_p50']:.3f} ms, p99 {row[ep.leg]['e2e_p99']:.3f} ms ({tools.last_wall_s:.0f}s)"
                )
            if not args.direct_only:
                for key in ("cpu_prod_s", "cpu_cons_s"):
                    # A leg that moved hundreds of MB through kshim and cost it no CPU tick
                    # did not go through kshim.
                    if row["kshim"][key] <= 0:
                        raise BenchError(f"kshim used no CPU during round {rnd} {label} ({key}); "
                                         "the kshim leg did not pass through it")
            for ep in legs:
                results[(size, ep.leg)].append(row[ep.leg])
            delete_topics(broker.bootstrap, [topic])

    print_report(args, results, [ep.leg for ep in legs], time.monotonic() - started)
    return 0


# --------------------------------------------------------------------------------------------
# report

# (key, label, kind): kind "throughput" is judged by ratio, "p99" by added ms, "info" not at all.
METRICS = [
    ("prod_mbs", "produce MB/s", "throughput", "cpu_prod"),
    ("prod_msgs", "produce msgs/s", "throughput", None),
    ("prod_p50", "produce p50 ms, saturated [a]", "info", None),
    ("prod_p99", "produce p99 ms, saturated [a]", "info", None),
    ("ack_p50", "produce p50 ms, 1 in flight [b]", "info", None),
    ("ack_p99", "produce p99 ms, 1 in flight [b]", "p99", None),
    ("cons_mbs", "consume MB/s", "throughput", "cpu_cons"),
    ("cons_msgs", "consume msgs/s", "throughput", None),
    ("e2e_p50", "end-to-end p50 ms [b]", "info", None),
    ("e2e_p99", "end-to-end p99 ms [b]", "p99", None),
]


def fmt(v: float | None, kind: str, key: str) -> str:
    if v is None:
        return "—"
    if kind == "throughput" or key.startswith("prod_p"):
        # ProducerPerformance's percentiles are whole milliseconds; no false precision.
        return f"{v:,.1f}"
    return f"{v:.3f}"


def print_report(args, results, legs: list[str], elapsed: float) -> None:
    have_kshim = "kshim" in legs
    med = statistics.median

    print()
    print("Per round (every leg is one fresh client run):")
    print()
    print("| round | size | leg | produce MB/s | produce p99 ms | ack p99 ms | consume MB/s | e2e p50 ms | e2e p99 ms | kshim CPU s produce/consume |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for size, label in SIZES:
        for i in range(args.rounds):
            for leg in legs:
                r = results[(size, leg)][i]
                cpu = f"{r['cpu_prod_s']:.2f} / {r['cpu_cons_s']:.2f}" if leg == "kshim" else "—"
                print(
                    f"| {r['round']} | {label} | {leg} | {r['prod_mbs']:.1f} | {r['prod_p99']:.0f} | "
                    f"{r['ack_p99']:.3f} | {r['cons_mbs']:.1f} | {r['e2e_p50']:.3f} | {r['e2e_p99']:.3f} | {cpu} |"
                )

    print()
    print(f"Forwarding benchmark: Apache Kafka 4.1.1, 1 node, {args.partitions} partition(s), acks=all; "
          f"median of {args.rounds} round(s), legs alternating")
    print()
    print("| size | metric | direct | via kshim | kshim/direct | added ms | per-round range | goal | kshim CPU s/GB |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    passed = judged = 0
    misses = []
    for size, label in SIZES:
        direct_rows = results[(size, "direct")]
        kshim_rows = results.get((size, "kshim"), [])
        for key, name, kind, cpu_key in METRICS:
            d = med(r[key] for r in direct_rows)
            k = ratio = added = cpu = None
            goal = spread = "—"
            coarse = key.startswith("prod_p")
            if have_kshim:
                k = med(r[key] for r in kshim_rows)
                pairs = list(zip(direct_rows, kshim_rows))
                if kind == "throughput":
                    ratio = k / d if d > 0 else float("nan")
                    per_round = [kr[key] / dr[key] for dr, kr in pairs if dr[key] > 0]
                    spread = f"{min(per_round):.2f}–{max(per_round):.2f}x" if per_round else "—"
                    ok = ratio >= GOAL_RATIO
                    goal = f"{'PASS' if ok else 'MISS'} (≥ {GOAL_RATIO})"
                else:
                    added = k - d
                    per_round = [kr[key] - dr[key] for dr, kr in pairs]
                    digits = 0 if coarse else 2
                    spread = f"{min(per_round):+.{digits}f}…{max(per_round):+.{digits}f}"
                    if kind == "p99":
                        ok = added <= GOAL_ADDED_P99_MS
                        goal = f"{'PASS' if ok else 'MISS'} (≤ {GOAL_ADDED_P99_MS:g} ms)"
                if kind in ("throughput", "p99"):
                    judged += 1
                    passed += ok
                    if not ok:
                        misses.append(f"{label} {name.split(' [')[0]}")
                if cpu_key:
                    cpu = med(r[cpu_key] for r in kshim_rows)
            print(
                f"| {label} | {name} | {fmt(d, kind, key)} | {fmt(k, kind, key)} | "
                f"{'—' if ratio is None else f'{ratio:.3f}x'} | "
                f"{'—' if added is None else f'{added:+.1f}' if coarse else f'{added:+.3f}'} | {spread} | {goal} | "
                f"{'—' if cpu is None else f'{cpu:.2f}'} |"
            )
    print()
    print("[a] ProducerPerformance, unthrottled: whole milliseconds, mostly time queued in the producer's")
    print("    32 MiB buffer (about buffer / throughput), so it follows the throughput ratio; not judged.")
    print("[b] tests/tools/LatencyProbe.java: one record in flight, acks=all, linger.ms=0; time to the")
    print("    producer's acknowledgement, and to the consumer's poll returning it.")
    print("MB = 2^20 bytes, GB = 2^30 bytes of record payload; consume figures leave out the group join.")
    print("kshim/direct and added ms compare the two medians; per-round range: each round's own value,")
    print("its two legs back to back. kshim CPU is its utime+stime during its produce or consume legs.")
    print()
    if have_kshim:
        verdict = "PASS" if passed == judged else "MISS"
        print(
            f"Goal (informational): throughput ratio ≥ {GOAL_RATIO} and added p99 ≤ {GOAL_ADDED_P99_MS:g} ms: "
            f"{verdict}, {passed}/{judged} rows pass" + (f"; MISS: {', '.join(misses)}" if misses else "")
        )
    else:
        print("Goal not judged: kshim's leg was not run (--direct-only).")
    print(f"Total run time {elapsed:.0f}s.")


# --------------------------------------------------------------------------------------------
# entry point

# Stop functions of what run() started, newest last; called in reverse order at exit.
resources: list = []


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(signum)


def guarded_run(name: str, args: argparse.Namespace, run_fn, stops: list) -> int:
    """`run_fn(args, workdir, started)` in a fresh work directory, with everything in `stops` (and
    every process kafka_env started) stopped however the run ends; the exit status."""
    started = time.monotonic()
    # SIGTERM and SIGHUP would otherwise end the interpreter without running the cleanup
    # below, leaving the broker and kshim running (they are in sessions of their own).
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    workdir = Path(tempfile.mkdtemp(prefix=f"kshim-{name.replace('_', '-')}-"))
    rc = 1
    try:
        rc = run_fn(args, workdir, started)
    except (BenchError, ke.EnvError) as e:
        print(f"{name}: FAILED: {e}", file=sys.stderr)
    except KeyboardInterrupt as e:
        signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        print(f"{name}: interrupted by signal {signum}; stopping everything", file=sys.stderr)
        rc = 128 + int(signum)
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for stop in reversed(stops):
            try:
                stop()
            except Exception as e:  # noqa: BLE001 - keep stopping the rest
                print(f"{name}: while stopping: {e!r}", file=sys.stderr)
        ke._stop_all_live()
        if args.keep_tmp:
            print(f"{name}: kept {workdir}", file=sys.stderr)
        elif rc != 0:
            # Keep the logs of a failed run, not the gigabytes of topic data.
            shutil.rmtree(workdir / "kafka" / "node1" / "data", ignore_errors=True)
            print(f"{name}: logs of the failed run are in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return rc


def main(argv: list[str]) -> int:
    return guarded_run("proxy_bench", parse_args(argv), run, resources)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
