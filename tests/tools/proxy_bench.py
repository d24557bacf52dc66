#!/usr/bin/env python3
"""Forwarding benchmark: the same Kafka clients against one broker, directly and through three
forwarders (kshim, Kroxylicious, a plain TCP relay), measured in one run.

Started by scripts/bench-proxy.sh, which builds kshim and checks the prerequisites first.

One Apache Kafka 4.1.1 KRaft node runs for the whole benchmark, and in front of it, each for
the whole run, one process per forwarding leg:

  direct        the broker's own PLAINTEXT listener
  kshim         `kshim serve` in proxy mode, upstream = the PLAINTEXT listener; it hands out a
                listener of its own per broker (port_base = 0)
  kroxylicious  Kroxylicious 0.12.0 (KROXYLICIOUS_VERSION below): its runtime library
                io.kroxylicious:kroxylicious-runtime, started by a main of our own
                (tests/tools/kroxylicious/KroxyliciousMain.java: parse the YAML configuration,
                start the proxy, stop it on SIGTERM), with one virtual cluster, no filters, and
                port-per-broker networking (a `gateways` entry with `portIdentifiesNode`: a
                bootstrap port on 127.0.0.1, then one port per node id; 0.12 binds these on
                every interface, it has no bind address for them); upstream = the PLAINTEXT
                listener. `java` is the process measured: heap capped at 512 MiB (-Xmx, the
                broker's cap too) and -XX:+ExitOnOutOfMemoryError, as its start script adds;
                logging by slf4j-simple at the levels of its own log4j2.yaml (WARN, INFO for
                io.kroxylicious)
  relay         socat, one per broker port (here one), fork per connection, TCP_NODELAY both
                ways and a 128 KiB transfer buffer: the floor for anything that forwards bytes
                without reading them. It cannot rewrite the broker addresses in Metadata, so
                the broker gets a second listener for it: RELAY://127.0.0.1:B2, advertised as
                127.0.0.1:R, where R is the relay's own port (socat R -> B2). Clients that
                bootstrap at R are told that the broker is at R and stay on the relay.

With --tls, every client speaks TLS (RSA 2048 leaves from one CA, made with openssl and keytool):
direct is the broker's SSL listener; kshim and Kroxylicious speak TLS to the clients (with the same
PKCS#12 key store: kshim's certificate) and to that SSL listener (trusting the CA's PKCS#12 trust
store); the relay carries the clients' TLS, unread, to an SSL RELAY listener of its own; the broker
replicates, and topics are made, over a plaintext INTERNAL listener. After the rounds,
examples/tls_bench measures full handshakes per second (new connection, handshake without
resumption, one ApiVersions, close) against each leg, with the server's CPU per handshake.

Before measuring, each forwarding leg is checked: Metadata through it must name only its own
ports, never the broker's, so that no leg can bypass its forwarder.

Kroxylicious comes from Maven Central: on first use, mvn resolves
io.kroxylicious:kroxylicious-runtime:VERSION and its runtime dependencies (with slf4j-simple; see
tests/tools/kroxylicious/pom.xml) into build/kroxylicious/VERSION/libs/ (strict checksums,
bounded by MVN_TIMEOUT_S), and javac compiles KroxyliciousMain.java against them into
build/kroxylicious/VERSION/classes/; each is redone only when the pom or the main changes. The
binary distribution (kroxylicious-app) is not used: it does not resolve on these machines, and
KROXYLICIOUS_HOME is not read. The report names the version the JVM loaded (KroxyliciousMain
prints it from the runtime jar; a version other than VERSION fails the run). When Kroxylicious
cannot be had and --legs was not given, the run goes on without that leg and says so in the
report.

Every round runs, for 1 KiB and for 64 KiB records, each selected leg in turn; the leg order is
reversed every other round so that a slow patch of this noisy machine does not always land on
the same leg:

  produce   org.apache.kafka.tools.ProducerPerformance, unthrottled, a fixed record count, once
            with acks=1 and once with acks=all: MB/s
  consume   org.apache.kafka.tools.ConsumerPerformance over the first 2 x that count of the
            round's records (the same bytes for every leg): its fetch.* MB/s, which leave out
            the group join
  latency   tests/tools/LatencyProbe.java --rate: records sent on a fixed schedule, 1000/s of
            1 KiB or 200/s of 64 KiB (moderate: about 3 % and 14 % of what one unthrottled
            producer pushes on this machine),
            linger.ms=0, for BENCH_LATENCY_SECS after one unmeasured second, acks=1 and then
            acks=all: microsecond p50/p99 from send() to the acknowledgement. The progress
            line also gives the sends that went out more than one slot late (the sender was
            held up: a busy machine, not the leg, may have set those figures)

Proxy CPU: utime + stime of the proxy's process from /proc/PID/stat, read before and after each
produce and consume run, divided by the record bytes that run moved (s per GiB). For the relay
the figure covers the socat listener, the forked children it has reaped (cutime + cstime of
the listener) and the children still alive (their own utime + stime), read as one consistent
snapshot (re-read when a child is reaped in between); so no child's CPU is lost when it exits.

Peak memory: VmHWM (peak RSS) of the kshim and Kroxylicious processes after the throughput
rounds. The relay is a tree of processes that share pages, so its figure is the highest sum of
PSS (smaps_rollup) over the listener and its children, sampled every 0.5 s during its legs.

Idle memory per connection: after the rounds, N connections (--idle-connections, default
10,000, or as many as the open-file hard limit allows at two descriptors per connection when
that is fewer) are opened to each forwarder's per-broker address, each sends ApiVersions and a
Metadata request and reads both answers (which makes every forwarder open its upstream side),
and are then left idle. The growth of the forwarder's memory (sum of PSS over its processes,
2 s after the last connection) divided by N is the figure; the number of upstream connections
the forwarder holds to the broker is counted from /proc/net/tcp. Kernel socket buffers are not
in any process's memory and are left out for every leg. The open-file limit is raised to fit.

The report has a table per record size with each leg's median over the rounds, kshim's ratio
(or, for latency, difference) to each other leg, a memory table, and one line per goal:
throughput >= 0.97 x direct and >= Kroxylicious; added ack p99 <= 1 ms and <= Kroxylicious's;
CPU per GiB <= 1.5 x the relay and <= 0.5 x Kroxylicious; idle memory per connection <= the
relay's. The goals are informational.

Exit status: 0 once the report is printed, whatever it says; 1 with the error when anything
failed to run; 130/143 when interrupted. Every process started here is stopped by its PID.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))

import kafka_env as ke  # noqa: E402  (needs the path above)

LATENCY_PROBE_SRC = Path(__file__).resolve().parent / "LatencyProbe.java"

LEGS = ("direct", "kshim", "kroxylicious", "relay")
PROXY_LEGS = LEGS[1:]

GOAL_RATIO = 0.97
GOAL_ADDED_P99_MS = 1.0
GOAL_CPU_VS_RELAY = 1.5
GOAL_CPU_VS_KROXYLICIOUS = 0.5
# The tools' MB is 2^20 bytes; GB here is 2^30 so that CPU s/GB and MB/s use one unit system.
MIB = 1 << 20
GIB = 1 << 30
TOOL_TIMEOUT_S = 180.0
CLIENT_HEAP = "-Xmx512m"
BROKER_HEAP = "512m"
TLS_BROKER_HEAP = "1536m"
# Idle connections are opened in batches of 200; with TLS, the broker's handshakes for a batch can
# take longer than kshim's default 5 s per upstream exchange.
UPSTREAM_PATIENCE = {"connect_timeout_ms": 30_000}
# The admin API of a kshim started with admin=True (for /metrics); its token goes by environment.
ADMIN_TOKEN_ENV = "KSHIM_BENCH_ADMIN_TOKEN"
ADMIN_TOKEN = "bench-" + os.urandom(8).hex()
CLK_TCK = os.sysconf("SC_CLK_TCK")

KROXYLICIOUS_VERSION = "0.12.0"
KROXYLICIOUS_ARTIFACT = f"io.kroxylicious:kroxylicious-runtime:{KROXYLICIOUS_VERSION}"
# pom.xml (what mvn resolves) and KroxyliciousMain.java (our main, started as the JVM's main class).
KROXYLICIOUS_PROJECT = Path(__file__).resolve().parent / "kroxylicious"
KROXYLICIOUS_MAIN_CLASS = "KroxyliciousMain"
# libs/ (the runtime and its dependencies) and classes/ (the compiled main), each with a stamp.
KROXYLICIOUS_DIR = REPO_ROOT / "build" / "kroxylicious" / KROXYLICIOUS_VERSION
KROXYLICIOUS_HEAP = "512m"
JAVAC_TIMEOUT_S = 120
KROXYLICIOUS_START_TIMEOUT_S = 90.0
MVN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
MVN_TIMEOUT_S = 600

RELAY_BUFFER = 128 * 1024
MEMORY_SAMPLE_S = 0.5
IDLE_SETTLE_S = 2.0
IDLE_BATCH = 200
IDLE_CONNS_DEFAULT = 10_000
# Descriptors a forwarder, the broker or this driver needs besides the idle connections
# (kshim keeps about 2,300 back for its own use and lowers max_connections to fit).
FD_HEADROOM = 2560
CPU_CHECK_MIN_BYTES = 256 * MIB


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
        "--legs",
        help=f"comma-separated legs to run, of {','.join(LEGS)} (default: all; without this "
        "option a Kroxylicious that cannot be had is left out with a notice, with it the run fails)",
    )
    p.add_argument(
        "--direct-only",
        action="store_true",
        help="measure only the direct-to-broker leg (for checking the benchmark itself); same as --legs direct",
    )
    p.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 3))
    p.add_argument(
        "--records-1k",
        type=int,
        default=env_int("BENCH_RECORDS_1K", 150_000),
        help="records per 1 KiB produce run (~4 s on 2 cores)",
    )
    p.add_argument(
        "--records-64k",
        type=int,
        default=env_int("BENCH_RECORDS_64K", 5_000),
        help="records per 64 KiB produce run (~4 s on 2 cores)",
    )
    p.add_argument(
        "--latency-seconds",
        type=int,
        default=env_int("BENCH_LATENCY_SECS", 4),
        help="measured seconds per acks setting of each latency run (one more second of warm-up)",
    )
    p.add_argument("--latency-rate-1k", type=int, default=env_int("BENCH_LATENCY_RATE_1K", 1000),
                   help="1 KiB records per second in the latency runs")
    p.add_argument("--latency-rate-64k", type=int, default=env_int("BENCH_LATENCY_RATE_64K", 200),
                   help="64 KiB records per second in the latency runs")
    p.add_argument(
        "--idle-connections",
        type=int,
        default=env_int("BENCH_IDLE_CONNS", -1),
        help=f"idle connections opened to each forwarder for the memory-per-connection figure (0: skip; "
        f"default {IDLE_CONNS_DEFAULT:,}, or fewer when the open-file hard limit does not allow that many)",
    )
    p.add_argument("--partitions", type=int, default=env_int("BENCH_PARTITIONS", 1))
    p.add_argument(
        "--max-seconds",
        type=int,
        default=env_int("BENCH_MAX_SECS", 0),
        help="give up (exit 1) when the run would go on past this (default: 1800, or 3600 with --tls, "
        "whose every leg took 1,743 s on a quiet day and over 1,800 on a slower one)",
    )
    p.add_argument("--keep-tmp", action="store_true", default=bool(os.environ.get("KSHIM_BENCH_KEEP_TMP")))
    p.add_argument(
        "--study",
        choices=("all", "latency"),
        default="all",
        help="latency: only the ack-latency runs (1 KiB, acks=1 and all), --rounds of them per leg, "
        "with the distribution of each round and a CDF plot (--plots), to tell a leg's tail from "
        "the machine's noise",
    )
    p.add_argument(
        "--pin",
        default=os.environ.get("BENCH_PIN", ""),
        help="CPU affinity of the broker, the forwarders and the client JVMs, e.g. "
        "'broker=0,proxy=1,client=1' (CPU lists as taskset takes them; default: none)",
    )
    p.add_argument("--plots", type=Path, help="directory for PNG plots and their data")
    p.add_argument(
        "--tls",
        action="store_true",
        help="TLS on both sides: clients speak TLS to every leg; direct is the broker's SSL listener, kshim "
        "and Kroxylicious speak TLS to the clients and to that listener, the relay carries the clients' TLS "
        "to an SSL listener of its own; adds full handshakes per second (examples/tls_bench)",
    )
    p.add_argument("--tls-bench-bin", type=Path,
                   default=REPO_ROOT / "target" / "release" / "examples" / "tls_bench")
    p.add_argument("--handshake-concurrency", default=os.environ.get("BENCH_HS_CONCURRENCY", "1,16"),
                   help="concurrent connecting clients of the handshake runs (--tls)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.max_seconds < 0:
        p.error("--max-seconds must be 0 (the default for the run) or more")
    args.max_seconds = args.max_seconds or (3600 if args.tls else 1800)
    if args.idle_connections < -1:
        p.error("--idle-connections must be 0 or more")
    if args.latency_seconds < 1 or args.latency_rate_1k < 1 or args.latency_rate_64k < 1:
        p.error("--latency-seconds and the latency rates must be at least 1")
    if args.direct_only and args.legs:
        p.error("--direct-only and --legs exclude each other")
    args.legs_explicit = bool(args.legs) or args.direct_only
    if args.direct_only:
        legs = ["direct"]
    elif args.legs:
        legs = [leg.strip() for leg in args.legs.split(",") if leg.strip()]
        unknown = [leg for leg in legs if leg not in LEGS]
        if unknown or not legs:
            p.error(f"--legs: unknown leg(s) {unknown or args.legs!r}; choose from {','.join(LEGS)}")
    else:
        legs = list(LEGS)
    args.legs = [leg for leg in LEGS if leg in legs]  # one canonical order
    try:
        args.pin = parse_pin(args.pin)
    except ValueError as e:
        p.error(f"--pin: {e}")
    try:
        args.handshake_concurrency = [int(c) for c in args.handshake_concurrency.split(",") if c.strip()]
    except ValueError:
        p.error("--handshake-concurrency takes comma-separated integers")
    return args


def parse_pin(spec: str) -> dict[str, set[int]]:
    """'broker=0,proxy=1-2,client=3' -> {"broker": {0}, "proxy": {1, 2}, "client": {3}}."""
    out: dict[str, set[int]] = {}
    for part in re.split(r",(?=[a-z]+=)", spec.strip()) if spec.strip() else []:
        role, _, cpus = part.partition("=")
        if role not in ("broker", "proxy", "client"):
            raise ValueError(f"unknown role {role!r}; use broker, proxy and client")
        chosen: set[int] = set()
        for item in cpus.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"bad CPU list {cpus!r} for {role}")
            chosen.update(range(int(lo), int(hi or lo) + 1))
        missing = chosen - os.sched_getaffinity(0)
        if missing:
            raise ValueError(f"CPU(s) {sorted(missing)} for {role} are not available here")
        out[role] = chosen
    return out


def pin_process(pid: int, cpus: set[int] | None) -> None:
    """Sets the affinity of every thread of `pid` (and of the threads it starts later, which
    inherit it) to `cpus`."""
    if not cpus:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):
            pass


# --------------------------------------------------------------------------------------------
# processes: CPU, memory and sockets from /proc


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (index 0 = state), or None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may hold spaces and parentheses; the fields after the last ')' do not.
    return stat[stat.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a whole process (all its threads), in seconds."""
    fields = _stat_fields(pid)
    if fields is None:
        raise BenchError(f"process {pid} is gone; cannot read its CPU time")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def children(pid: int) -> list[int]:
    """PIDs of the live (or not yet reaped) children of `pid`."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of `pid`, of the children it has reaped (cutime + cstime) and of its children
    still there (their utime + stime). Re-read when a child is reaped between the reads, which
    would move its time from one term to the other."""
    for _ in range(50):
        before = _stat_fields(pid)
        if before is None:
            raise BenchError(f"process {pid} is gone; cannot read its CPU time")
        live = 0
        for child in children(pid):
            f = _stat_fields(child)
            if f is not None:
                live += int(f[11]) + int(f[12])
        after = _stat_fields(pid)
        if after is None:
            raise BenchError(f"process {pid} is gone; cannot read its CPU time")
        if before[13:15] == after[13:15]:
            own = int(after[11]) + int(after[12])
            reaped = int(after[13]) + int(after[14])  # fields 16 and 17: cutime, cstime
            return (own + reaped + live) / CLK_TCK
        time.sleep(0.01)
    raise BenchError(f"no consistent CPU reading of process {pid} and its children in 50 tries")


def _kib_field(path: str, name: str) -> int | None:
    try:
        text = Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    m = re.search(rf"^{name}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else None


def pss_kib(pids: list[int]) -> int:
    """Sum of the proportional set sizes of `pids`: pages shared among them count once."""
    return sum(_kib_field(f"/proc/{p}/smaps_rollup", "Pss") or 0 for p in pids)


def hwm_kib(pid: int) -> int | None:
    """Peak resident set size of one process."""
    return _kib_field(f"/proc/{pid}/status", "VmHWM")


def upstream_links(pids: list[int], port: int) -> int:
    """Established TCP connections that these processes hold to local port `port`."""
    inodes: set[str] = set()
    for p in pids:
        inodes |= ke._socket_inodes(p)
    return sum(1 for _lport, _rport, inode in ke.established_to({port}) if inode in inodes)


def raise_open_file_limit(need: int) -> int:
    """Raises this process's open-file limit (inherited by everything it starts) to `need`,
    the hard limit too when allowed; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))
    except (ValueError, OSError):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class ToolRunner:
    """Runs one Java tool at a time, each in its own session so that only this driver stops it."""

    def __init__(self, log_dir: Path, deadline: float, cpus: set[int] | None = None):
        self.log_dir = log_dir
        self.deadline = deadline
        self.cpus = cpus  # the client JVMs' affinity (--pin client=...)
        self.seq = 0
        self.last_wall_s = 0.0  # wall time of the latest tool run, JVM start included

    def java(self, name: str, main_and_args: list[str], extra_classpath: list[Path] = ()) -> str:
        pin = ["taskset", "-c", ",".join(map(str, sorted(self.cpus)))] if self.cpus else []
        cmd = [
            *pin,
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


# --------------------------------------------------------------------------------------------
# raw Kafka requests: ApiVersions and Metadata


CLIENT_ID = b"kshim-proxy-bench"


def api_versions_frame(correlation: int) -> bytes:
    """ApiVersions v3 request, size prefix included."""
    header = struct.pack(">hhih", 18, 3, correlation, len(CLIENT_ID)) + CLIENT_ID + b"\x00"
    body = ke.encode_compact_string(CLIENT_ID.decode()) + ke.encode_compact_string("0") + b"\x00"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def metadata_frame(version: int, correlation: int) -> bytes:
    """Metadata request for no topics (v4-v12), size prefix included."""
    flexible = version >= 9
    frame = struct.pack(">hhih", 3, version, correlation, len(CLIENT_ID)) + CLIENT_ID
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
    return struct.pack(">i", len(frame)) + frame


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


def metadata_version(bootstrap: str, version_range: tuple[int, int] | None) -> int:
    if version_range is None:
        raise BenchError(f"{bootstrap} does not advertise Metadata (API key 3) in ApiVersions")
    version = min(version_range[1], 12)
    if version < max(version_range[0], 4):
        raise BenchError(f"{bootstrap} advertises Metadata {version_range}, none of v4-v12")
    return version


def metadata_brokers(bootstrap: str, version_range: tuple[int, int] | None,
                     tls: ssl.SSLContext | None = None) -> list[tuple[str, int]]:
    """(host, port) of every broker in a Metadata answer for no topics."""
    return [(host, port) for _, host, port in metadata_nodes(bootstrap, version_range, tls)]


def metadata_nodes(bootstrap: str, version_range: tuple[int, int] | None,
                   tls: ssl.SSLContext | None = None) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every broker in a Metadata answer for no topics (over TLS with
    `tls`)."""
    version = metadata_version(bootstrap, version_range)
    flexible = version >= 9
    try:
        resp = ke.exchange(bootstrap, metadata_frame(version, 7)[4:], 5.0, tls)
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
        (node_id,) = struct.unpack_from(">i", resp, pos)
        pos += 4
        host_name, pos = _read_str(resp, pos, flexible)
        (broker_port,) = struct.unpack_from(">i", resp, pos)
        pos += 4
        _, pos = _read_str(resp, pos, flexible)  # rack
        if flexible:
            pos = ke._skip_tags(resp, pos)
        brokers.append((node_id, host_name or "", broker_port))
    return brokers


def wait_routed(leg: str, bootstrap: str, alive, log_path: Path, bypass_ports: set[int],
                timeout: float, tls: ssl.SSLContext | None = None) -> list[tuple[str, int]]:
    """Waits until `bootstrap` answers ApiVersions and a Metadata that names only addresses other
    than `bypass_ports` (the broker's own), over TLS with `tls`; returns the brokers it names."""
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        if not alive():
            raise BenchError(f"{leg} exited during startup\n--- {log_path}:\n{ke.tail(log_path)}")
        try:
            info = ke.api_versions(bootstrap, timeout=2.0, tls=tls)
            if info.error_code != 0:
                last = f"ApiVersions error {info.error_code}"
            else:
                brokers = metadata_brokers(bootstrap, info.api_keys.get(3), tls)
                bypass = [b for b in brokers if b[1] in bypass_ports]
                if not brokers:
                    last = f"Metadata through {leg} lists no brokers yet"
                elif bypass:
                    # Clients would connect straight to the broker after bootstrapping, and
                    # the leg would measure the broker alone.
                    raise BenchError(
                        f"Metadata through {leg} advertises the broker's own address {bypass}; "
                        f"{leg} is not rewriting broker addresses, so its leg would bypass it"
                    )
                else:
                    return brokers
        except (OSError, ssl.SSLError, ke.EnvError, struct.error, IndexError, ValueError) as e:
            last = repr(e)
        time.sleep(0.2)
    raise BenchError(
        f"{leg} on {bootstrap} did not answer ApiVersions and Metadata within {timeout:.0f}s "
        f"({last})\n--- {log_path}:\n{ke.tail(log_path)}"
    )


# --------------------------------------------------------------------------------------------
# TLS (--tls)


@dataclass
class TlsMaterial:
    """One CA; RSA 2048 leaves for the broker and for kshim (localhost, 127.0.0.1); how each
    party is configured with them."""

    certs: object  # tls_support.Certs
    broker_store: Path
    kshim_store: Path
    client_config: Path  # the Java clients' security properties
    context: ssl.SSLContext  # the driver's own probes

    def broker_properties(self) -> dict[str, str]:
        from tls_support import STORE_PASSWORD

        return {
            "ssl.keystore.location": str(self.broker_store),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": STORE_PASSWORD,
            "ssl.key.password": STORE_PASSWORD,
            "ssl.client.auth": "none",
        }

    def kshim_toml(self) -> str:
        """TLS to the clients and to the broker's SSL listener."""
        from tls_support import STORE_PASSWORD

        q = json.dumps
        return (f"\n[tls]\nkeystore = {q(str(self.kshim_store))}\nkeystore_password = {q(STORE_PASSWORD)}\n"
                f"\n[upstream.tls]\ntruststore = {q(str(self.certs.truststore))}\n"
                f"truststore_password = {q(STORE_PASSWORD)}\n")


def make_tls_material(d: Path) -> TlsMaterial:
    from tls_support import STORE_PASSWORD, export_pkcs12, issue, make_certs

    certs = make_certs(d)
    issue(d, "broker", "localhost", certs.ca, certs.ca_key, "server_ext")
    for name in ("server", "broker"):
        export_pkcs12(d, name, certs.ca)
    client_config = d / "client-ssl.properties"
    client_config.write_text(
        "security.protocol=SSL\n"
        f"ssl.truststore.location={certs.truststore}\n"
        "ssl.truststore.type=PKCS12\n"
        f"ssl.truststore.password={STORE_PASSWORD}\n"
    )
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(certs.ca))
    return TlsMaterial(certs, d / "broker.p12", d / "server.p12", client_config, context)


def handshakes(args, tls: TlsMaterial, broker, proxies: dict, log_dir: Path, deadline: float) -> str:
    """examples/tls_bench handshakes against the broker's SSL listener and every forwarder's
    per-broker address: new connections with a full handshake and one ApiVersions each; its
    tables (handshakes/s, p50/p99, the server's CPU per handshake)."""
    targets = [f"--target=direct={broker.bootstrap}", f"--pid=direct={broker.pid}"]
    for leg, p in proxies.items():
        host, port = p.advertised[0]
        targets += [f"--target={leg}={host}:{port}", f"--pid={leg}={p.pid}"]
    levels = args.handshake_concurrency
    expected = len(levels) * 3 * (len(proxies) + 1) * 4 + 15 * (len(proxies) + 1)
    timeout = min(expected * 1.5 + 60, deadline - time.monotonic())
    if timeout < expected:
        raise BenchError("out of time before the handshake runs: the run is capped at --max-seconds")
    cmd = [str(args.tls_bench_bin), "handshakes", f"--ca={tls.certs.ca}", *targets,
           f"--concurrency={','.join(map(str, levels))}", "--rounds=3", "--duration-secs=4",
           "--warmup-secs=15", "--baseline=direct"]
    log(f"handshakes: {' '.join(cmd[1:])}")
    return run_program(cmd, log_dir, "handshakes", timeout)


def run_program(cmd: list[str], log_dir: Path, name: str, timeout: float,
                env: dict[str, str] | None = None) -> str:
    """Runs a load generator (with `env` added to the environment) in its own session, stdout
    and stderr to files, stopped by its PID however it ends; its stdout, or BenchError with the
    tail of both."""
    out_path, err_path = log_dir / f"{name}.out", log_dir / f"{name}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    ke._register(proc)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{name} did not finish within {timeout:.0f}s\n--- {err_path}:\n{ke.tail(err_path, 20)}")
    finally:
        ke.stop_process(proc, timeout=10)
    if rc != 0:
        raise BenchError(f"{name} exited with status {rc}: {' '.join(cmd)}\n"
                         f"--- {err_path}:\n{ke.tail(err_path, 30)}\n--- {out_path}:\n{ke.tail(out_path, 10)}")
    return out_path.read_text(errors="replace")


# --------------------------------------------------------------------------------------------
# the forwarders


class Forwarder:
    """What the measurements need of a forwarding leg: its process(es), and where it listens."""

    leg = "?"
    proc: subprocess.Popen | None = None
    log_path: Path
    upstream_port: int  # the broker port it connects to
    advertised: list[tuple[str, int]] = []
    # With --tls: how a client reaches it (the CA the certificates chain to).
    tls: ssl.SSLContext | None = None

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> list[int]:
        return [self.proc.pid, *children(self.proc.pid)] if self.alive() else []

    def cpu(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def memory_kib(self) -> int:
        return pss_kib(self.pids())

    def peak_kib(self) -> int | None:
        return hwm_kib(self.proc.pid)

    def describe(self) -> str:
        return f"pid {self.proc.pid}"

    def stop(self) -> None:
        ke.stop_process(self.proc)


class KshimProxy(Forwarder):
    """`kshim serve --config FILE` in proxy mode in front of one upstream cluster."""

    leg = "kshim"

    def __init__(self, binary: Path, workdir: Path, upstream: str, max_connections: int, *,
                 admin: bool = False, extra_toml: str = "", upstream_settings: dict[str, int] | None = None):
        """`admin`: an admin API on a port of its own, for /metrics (`metrics()`); `extra_toml`:
        more tables ([tls], [upstream.tls]) appended to the config; `upstream_settings`: more
        keys of [upstream] (refresh_interval_ms, connect_timeout_ms)."""
        workdir.mkdir(parents=True, exist_ok=True)
        # A private copy: the binary in target/release may be rebuilt while the run goes on.
        self.binary = workdir / "kshim"
        shutil.copy2(binary, self.binary)
        self.workdir = workdir
        self.port = ke.free_port()
        self.upstream_port = ke.split_hostport(upstream)[1]
        self.config_path = workdir / "kshim.toml"
        self.log_path = workdir / "kshim.log"
        data_dir = workdir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f'listen = "127.0.0.1:{self.port}"\n'
            f"data_dir = {json.dumps(str(data_dir))}\n"
            # The idle-connection test holds this many from one address.
            f"max_connections = {max_connections}\n"
            f"max_connections_per_ip = {max_connections}\n"
            "\n[upstream]\n"
            f'bootstrap = "{upstream}"\n'
            + "".join(f"{k} = {v}\n" for k, v in (upstream_settings or {}).items())
            +             "\n[upstream.listeners]\n"
            "port_base = 0\n"
            + extra_toml
        )
        self.admin_port = None
        if admin:
            self.admin_port = ke.free_port()
            with self.config_path.open("a") as f:
                f.write(f'\n[admin]\nlisten = "127.0.0.1:{self.admin_port}"\n'
                        f'token = "${{env:{ADMIN_TOKEN_ENV}}}"\n')

    def metrics(self) -> dict[str, float]:
        """The series of the admin API's /metrics without labels, by name."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}/metrics",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if line and not line.startswith("#") and "{" not in name:
                out[name] = float(value)
        return out

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [str(self.binary), "serve", "--config", str(self.config_path)]
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")  # the log is a file, read back into error messages
        env[ADMIN_TOKEN_ENV] = ADMIN_TOKEN
        self.proc = ke._spawn(cmd, cwd=self.workdir, log_path=self.log_path, env=env)
        self.advertised = wait_routed(self.leg, self.bootstrap, self.alive, self.log_path,
                                      {self.upstream_port}, ke.KSHIM_START_TIMEOUT_S, self.tls)


class KroxyliciousProxy(Forwarder):
    """Kroxylicious (kroxylicious-runtime, started by tests/tools/kroxylicious/KroxyliciousMain.java
    in a JVM of its own): one virtual cluster, no filters, port-per-broker networking (a gateway
    with `portIdentifiesNode`: a bootstrap port, then one port per node id). With `tls`: TLS to
    the clients (kshim's certificate) and to the broker's SSL listener (trusting the CA)."""

    leg = "kroxylicious"

    def __init__(self, runtime: "KroxyliciousRuntime", workdir: Path, upstream: str, node_ids: list[int],
                 tls: TlsMaterial | None = None):
        workdir.mkdir(parents=True, exist_ok=True)
        self.runtime = runtime
        self.workdir = workdir
        self.upstream_port = ke.split_hostport(upstream)[1]
        self.version_line = ""  # what KroxyliciousMain says it loaded
        lo, hi = min(node_ids), max(node_ids)
        self.port, self.node_start_port = self._ports(hi - lo + 1)
        self.config_path = workdir / "kroxylicious.yaml"
        self.log_path = workdir / "kroxylicious.log"
        self.config_path.write_text(kroxylicious_config(upstream, self.port, self.node_start_port, lo, hi, tls))

    @staticmethod
    def _ports(nodes: int) -> tuple[int, int]:
        """A bootstrap port and the first of `nodes` consecutive free ports after it. Kroxylicious
        0.12 binds its gateway ports on every interface (portIdentifiesNode has no bind address),
        so each must be free on all of them."""
        for _ in range(50):
            base = ke.free_port()
            if base + nodes >= 65535:
                continue
            if all(not ke.port_accepts("127.0.0.1", base + i, timeout=0.2) and _bindable(base + i, "")
                   for i in range(0, nodes + 1)):
                return base, base + 1
        raise BenchError(f"found no {nodes + 1} consecutive free ports for Kroxylicious")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        java = shutil.which("java")
        if java is None:
            raise BenchError(f"java is not on PATH (it runs Kroxylicious). Run: {ke.INSTALL_HINT}")
        # java itself is the process: the PID measured is the JVM's. -XX:+ExitOnOutOfMemoryError is
        # what kroxylicious-start.sh adds; the heap is capped like the broker's.
        cmd = [java, f"-Xmx{KROXYLICIOUS_HEAP}", "-XX:+ExitOnOutOfMemoryError",
               "-cp", self.runtime.classpath, KROXYLICIOUS_MAIN_CLASS, str(self.config_path)]
        self.proc = ke._spawn(cmd, cwd=self.workdir, log_path=self.log_path, env=dict(os.environ))
        self.advertised = wait_routed(self.leg, self.bootstrap, self.alive, self.log_path,
                                      {self.upstream_port}, KROXYLICIOUS_START_TIMEOUT_S, self.tls)
        comm = Path(f"/proc/{self.proc.pid}/comm").read_text().strip()
        if comm != "java":
            raise BenchError(f"Kroxylicious pid {self.proc.pid} is {comm!r}, not the JVM: its CPU would not be counted")
        # KroxyliciousMain's first line: the version of the kroxylicious-runtime jar it loaded.
        m = re.search(r"^KroxyliciousMain: kroxylicious-runtime (\S+)(.*)$",
                      self.log_path.read_text(errors="replace"), re.M)
        if m is None:
            raise BenchError(f"Kroxylicious started but did not say which version it loaded\n"
                             f"--- {self.log_path}:\n{ke.tail(self.log_path)}")
        if m.group(1) != KROXYLICIOUS_VERSION:
            raise BenchError(f"Kroxylicious {m.group(1)} was loaded, not {KROXYLICIOUS_VERSION}: {m.group(0)}")
        self.version_line = f"{m.group(1)}{m.group(2)}"

    def describe(self) -> str:
        return f"pid {self.proc.pid}, Kroxylicious {self.version_line}"


def kroxylicious_config(upstream: str, port: int, node_start_port: int, lo: int, hi: int,
                        tls: TlsMaterial | None) -> str:
    """Kroxylicious 0.12.0 configuration (YAML): `virtualClusters` as a list, one gateway with
    `portIdentifiesNode` on 127.0.0.1 (bootstrap `port`, node ids lo..hi at node_start_port..),
    no filters, no management endpoint. With `tls`: the gateway's `tls.key` is kshim's PKCS#12
    store (RSA 2048, localhost and 127.0.0.1) and the target cluster's `tls.trust` the CA's."""
    from tls_support import STORE_PASSWORD

    q = json.dumps  # a JSON string is a YAML double-quoted scalar
    lines = [
        "virtualClusters:",
        "  - name: bench",
        "    targetCluster:",
        f"      bootstrapServers: {q(upstream)}",
    ]
    if tls:
        lines += [
            "      tls:",
            "        trust:",
            f"          storeFile: {q(str(tls.certs.truststore))}",
            "          storePassword:",
            f"            password: {q(STORE_PASSWORD)}",
            "          storeType: PKCS12",
        ]
    lines += [
        "    gateways:",
        "      - name: bench",
        "        portIdentifiesNode:",
        f"          bootstrapAddress: {q(f'127.0.0.1:{port}')}",
        f"          nodeStartPort: {node_start_port}",
        "          nodeIdRanges:",
        "            - name: brokers",
        f"              start: {lo}",
        f"              end: {hi}",
    ]
    if tls:
        lines += [
            "        tls:",
            "          key:",
            f"            storeFile: {q(str(tls.kshim_store))}",
            "            storePassword:",
            f"              password: {q(STORE_PASSWORD)}",
            "            storeType: PKCS12",
        ]
    lines += [
        "    logNetwork: false",
        "    logFrames: false",
    ]
    return "\n".join(lines) + "\n"


def _bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether `port` can be bound on `host` ("" for every interface) now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def relay_command(socat: str, port: int, target_port: int, bind: str = "127.0.0.1") -> list[str]:
    """The relay leg's socat: listens on `bind`:`port`, forks per connection, forwards to
    127.0.0.1:`target_port`."""
    return [
        socat,
        "-b", str(RELAY_BUFFER),
        f"TCP4-LISTEN:{port},bind={bind},reuseaddr,fork,backlog=4096,nodelay",
        f"TCP4:127.0.0.1:{target_port},nodelay",
    ]


class SocatRelay(Forwarder):
    """socat R -> B2, a process forked per connection; the broker advertises R on B2."""

    leg = "relay"

    def __init__(self, workdir: Path, port: int, target_port: int, bind: str = "127.0.0.1"):
        """`bind`: the address socat listens on (tests/tools/net_bench.py puts a link of the
        network lab on 127.0.0.1:`port` in front of it)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.port = port
        self.bind = bind
        self.upstream_port = target_port
        self.log_path = workdir / "socat.log"
        self.peak_pss_kib = 0
        self._sampling = threading.Event()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, bypass_ports: set[int]) -> None:
        socat = shutil.which("socat")
        if socat is None:
            raise BenchError(f"socat is not on PATH (the relay leg needs it). Run: {ke.INSTALL_HINT}")
        self.proc = ke._spawn(relay_command(socat, self.port, self.upstream_port, self.bind), cwd=self.workdir,
                              log_path=self.log_path)
        self.advertised = wait_routed(self.leg, self.bootstrap, self.alive, self.log_path, bypass_ports, 20.0,
                                      self.tls)
        if any(port != self.port for _, port in self.advertised):
            raise BenchError(f"through the relay the broker advertises {self.advertised}, not port {self.port}")
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            if self._sampling.is_set() and self.alive():
                self.peak_pss_kib = max(self.peak_pss_kib, self.memory_kib())
            self._stop.wait(MEMORY_SAMPLE_S)

    def sampling(self, on: bool) -> None:
        (self._sampling.set if on else self._sampling.clear)()

    def peak_kib(self) -> int | None:
        return self.peak_pss_kib or None

    def describe(self) -> str:
        return f"pid {self.proc.pid}, {self.port} -> {self.upstream_port}"

    def stop(self) -> None:
        self._stop.set()
        kids = children(self.proc.pid) if self.alive() else []
        ke.stop_process(self.proc)
        # The forked children outlive the listener while their connections last: stop each by PID.
        for kid in kids:
            try:
                os.kill(kid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{k}").exists() for k in kids):
            time.sleep(0.1)
        for kid in kids:
            try:
                os.kill(kid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --------------------------------------------------------------------------------------------
# Kroxylicious: where it comes from


@dataclass
class KroxyliciousRuntime:
    """Kroxylicious as the kroxylicious leg runs it: the runtime's jars and our compiled main."""

    libs: Path  # kroxylicious-runtime-VERSION.jar and its runtime dependencies
    classes: Path  # KroxyliciousMain.class

    @property
    def classpath(self) -> str:
        return f"{self.classes}{os.pathsep}{self.libs}{os.sep}*"

    def describe(self) -> str:
        return f"{KROXYLICIOUS_ARTIFACT} (Maven Central) in {self.libs.parent}, started by {KROXYLICIOUS_MAIN_CLASS}"


def _stamp(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _stamped(d: Path, stamp: str) -> bool:
    f = d / ".stamp"
    return f.is_file() and f.read_text().strip() == stamp


def _replace_dir(tmp: Path, dest: Path, stamp: str) -> None:
    """Puts the finished `tmp` in place of `dest`, stamped."""
    (tmp / ".stamp").write_text(stamp + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def resolve_kroxylicious() -> KroxyliciousRuntime:
    """Kroxylicious KROXYLICIOUS_VERSION from build/kroxylicious/VERSION/: libs/ resolved from Maven
    Central with mvn (tests/tools/kroxylicious/pom.xml: kroxylicious-runtime, its runtime
    dependencies and slf4j-simple) and classes/ (KroxyliciousMain.java compiled against them), each
    redone only when its inputs changed."""
    pom = KROXYLICIOUS_PROJECT / "pom.xml"
    main_src = KROXYLICIOUS_PROJECT / f"{KROXYLICIOUS_MAIN_CLASS}.java"
    for f in (pom, main_src):
        if not f.is_file():
            raise BenchError(f"{f} is missing (the kroxylicious leg needs it)")
    libs, classes = KROXYLICIOUS_DIR / "libs", KROXYLICIOUS_DIR / "classes"
    libs_stamp = _stamp(KROXYLICIOUS_VERSION.encode(), pom.read_bytes())
    runtime_jar = f"kroxylicious-runtime-{KROXYLICIOUS_VERSION}.jar"
    if not (_stamped(libs, libs_stamp) and (libs / runtime_jar).is_file()):
        if shutil.which("mvn") is None:
            raise BenchError(f"mvn is not on PATH; it resolves {KROXYLICIOUS_ARTIFACT} and its dependencies "
                             f"from Maven Central. Run: {ke.INSTALL_HINT}")
        KROXYLICIOUS_DIR.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="libs-", dir=KROXYLICIOUS_DIR))
        try:
            log(f"resolving {KROXYLICIOUS_ARTIFACT} and its runtime dependencies with mvn (first use)")
            # -C: strict checksums (every jar must match the checksum published beside it);
            # -U: ask again even when an earlier attempt found nothing.
            cmd = ["mvn", "-B", "-C", "-U", "-Dstyle.color=never", "-f", str(pom),
                   f"-Dkroxylicious.version={KROXYLICIOUS_VERSION}",
                   f"{MVN_DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={tmp}"]
            try:
                cp = subprocess.run(cmd, cwd=str(KROXYLICIOUS_DIR), stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise BenchError(f"mvn did not resolve {KROXYLICIOUS_ARTIFACT} within {MVN_TIMEOUT_S}s: {' '.join(cmd)}")
            if cp.returncode != 0 or not (tmp / runtime_jar).is_file():
                text = re.sub(r"\x1b\[[0-9;]*m", "", cp.stdout + cp.stderr)
                errors = [l.strip() for l in text.splitlines() if l.startswith("[ERROR]") and l.strip() != "[ERROR]"]
                raise BenchError(
                    f"mvn could not resolve {KROXYLICIOUS_ARTIFACT} and its dependencies "
                    f"({'; '.join(errors[:3]) if errors else f'exit status {cp.returncode}'}): {' '.join(cmd)}"
                )
            _replace_dir(tmp, libs, libs_stamp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    classes_stamp = _stamp(libs_stamp.encode(), main_src.read_bytes())
    if not (_stamped(classes, classes_stamp) and (classes / f"{KROXYLICIOUS_MAIN_CLASS}.class").is_file()):
        javac = shutil.which("javac")
        if javac is None:
            raise BenchError(f"javac is not on PATH (it compiles {main_src.name}). Run: {ke.INSTALL_HINT}")
        tmp = Path(tempfile.mkdtemp(prefix="classes-", dir=KROXYLICIOUS_DIR))
        try:
            log(f"compiling {main_src.relative_to(REPO_ROOT)} against kroxylicious-runtime {KROXYLICIOUS_VERSION}")
            cmd = [javac, "-nowarn", "--release", "17", "-d", str(tmp), "-cp", f"{libs}{os.sep}*", str(main_src)]
            try:
                cp = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=JAVAC_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise BenchError(f"javac did not compile {main_src} within {JAVAC_TIMEOUT_S}s")
            if cp.returncode != 0:
                raise BenchError(f"javac failed on {main_src}:\n{cp.stdout}{cp.stderr}")
            _replace_dir(tmp, classes, classes_stamp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return KroxyliciousRuntime(libs, classes)


# --------------------------------------------------------------------------------------------
# the measurements

PRODUCER_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th"
)


@dataclass
class Endpoint:
    leg: str
    bootstrap: str
    proxy: Forwarder | None  # None for the direct leg
    # With --tls: the clients' security properties (a Java properties file).
    client_config: Path | None = None

    def config_args(self, option: str) -> list[str]:
        return [option, str(self.client_config)] if self.client_config else []

    def cpu(self) -> float | None:
        return self.proxy.cpu() if self.proxy else None


def _cpu_per_gib(cpu0: float | None, cpu1: float | None, moved: float) -> tuple[float | None, float | None]:
    if cpu0 is None or cpu1 is None:
        return None, None
    return (cpu1 - cpu0) / (moved / GIB), cpu1 - cpu0


def produce(tools: ToolRunner, ep: Endpoint, topic: str, size: int, records: int, acks: str,
            props: dict[str, str] | None = None, request_latency: bool = False) -> dict:
    """`props`: more producer properties, after (and so over) the ones set here;
    `request_latency`: also the producer's request-latency-avg (ms), from its metrics."""
    cpu0 = ep.cpu()
    out = tools.java(
        f"produce-{ep.leg}-{size}-acks{acks}",
        [
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic,
            "--num-records", str(records),
            "--record-size", str(size),
            "--throughput", "-1",
            *(["--print-metrics"] if request_latency else []),
            "--producer-props",
            f"bootstrap.servers={ep.bootstrap}",
            f"acks={acks}",
            # The idempotent producer (the default) insists on acks=all.
            f"enable.idempotence={'true' if acks == 'all' else 'false'}",
            f"client.id=bench-produce-{ep.leg}",
            *(f"{k}={v}" for k, v in (props or {}).items()),
            *ep.config_args("--producer.config"),
        ],
    )
    cpu1 = ep.cpu()
    finals = PRODUCER_FINAL.findall(out)
    if not finals:
        raise BenchError(f"ProducerPerformance printed no final summary for {topic} via {ep.leg}:\n{out[-2000:]}")
    sent, rps, mbps, _avg, _max, _p50, _p95, _p99, _p999 = finals[-1]
    if int(sent) != records:
        raise BenchError(f"ProducerPerformance acknowledged {sent} of {records} records via {ep.leg}")
    per_gib, secs = _cpu_per_gib(cpu0, cpu1, records * size)
    out_keys = {f"prod_mbs_{acks}": float(mbps), f"cpu_prod_{acks}": per_gib, f"cpu_prod_{acks}_s": secs}
    if request_latency:
        m = re.search(r"^producer-metrics:request-latency-avg:\{[^}]*\}\s*:\s*([\d.]+)", out, re.M)
        out_keys["request_latency_ms"] = float(m.group(1)) if m else None
    return out_keys


def consume(tools: ToolRunner, ep: Endpoint, topic: str, size: int, messages: int, group: str) -> dict:
    cpu0 = ep.cpu()
    out = tools.java(
        f"consume-{ep.leg}-{size}",
        [
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server", ep.bootstrap,
            "--topic", topic,
            "--messages", str(messages),
            "--group", group,
            "--timeout", "30000",
            *ep.config_args("--consumer.config"),
        ],
    )
    cpu1 = ep.cpu()
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
    per_gib, secs = _cpu_per_gib(cpu0, cpu1, consumed_mb * MIB)
    return {"cons_mbs": float(row[8]), "cpu_cons": per_gib, "cpu_cons_s": secs}


def latency(tools: ToolRunner, probe_classes: Path, ep: Endpoint, topic: str, size: int, rate: int, seconds: int) -> dict:
    out = tools.java(
        f"latency-{ep.leg}-{size}",
        [
            "LatencyProbe",
            "--bootstrap", ep.bootstrap,
            "--topic", topic,
            "--records", str(rate * seconds),
            "--warmup", str(rate),
            "--record-size", str(size),
            "--rate", str(rate),
            "--acks", "1,all",
            *ep.config_args("--config"),
        ],
        extra_classpath=[probe_classes],
    )
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        raise BenchError(f"LatencyProbe printed no result via {ep.leg}:\n{out[-2000:]}")
    r = json.loads(lines[0])
    res = {}
    for acks in ("1", "all"):
        a = r[f"acks_{acks}"]
        res[f"ack_p50_{acks}"] = a["p50_us"] / 1000
        res[f"ack_p99_{acks}"] = a["p99_us"] / 1000
        res[f"late_{acks}"] = a["late_sends"]
        res[f"quantiles_{acks}"] = a["quantiles_us"]
    return res


def _recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
    return ke._recv_exact(sock, size)


def idle_memory(proxy: Forwarder, n: int, deadline: float, metadata: bool = True,
                sample=None) -> dict:
    """Opens `n` connections to the forwarder's first per-broker address, each with one
    ApiVersions and one Metadata answered (without `metadata`: ApiVersions alone), leaves them
    idle, and measures the memory growth. `sample()`, called before the connections open and
    again while they are all open, returns figures whose growth per connection is added."""
    host, port = proxy.advertised[0]
    info = ke.api_versions(f"{host}:{port}", timeout=5.0, tls=proxy.tls)
    version = metadata_version(f"{host}:{port}", info.api_keys.get(3))
    # Connections of the last client runs may still be closing: start from a steady count.
    links0, steady_since = upstream_links(proxy.pids(), proxy.upstream_port), time.monotonic()
    settle_deadline = time.monotonic() + 20
    while time.monotonic() - steady_since < 1.0 and time.monotonic() < settle_deadline:
        time.sleep(0.25)
        now = upstream_links(proxy.pids(), proxy.upstream_port)
        if now != links0:
            links0, steady_since = now, time.monotonic()
    mem0 = proxy.memory_kib()
    extra0 = sample() if sample else {}
    socks: list[socket.socket] = []
    t0 = time.monotonic()
    try:
        for start in range(0, n, IDLE_BATCH):
            if time.monotonic() > deadline:
                raise BenchError(f"out of time opening idle connections to {proxy.leg} ({len(socks)} of {n})")
            batch = []
            for i in range(start, min(n, start + IDLE_BATCH)):
                try:
                    s = socket.create_connection((host, port), timeout=30)
                except OSError as e:
                    raise BenchError(f"idle connection {i + 1} of {n} to {proxy.leg} at {host}:{port}: {e}")
                s.settimeout(30)
                # Closed with a reset: no TIME_WAIT left behind to crowd the ephemeral ports.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                if proxy.tls:
                    try:
                        s = proxy.tls.wrap_socket(s, server_hostname=host)
                    except (OSError, ssl.SSLError) as e:
                        s.close()
                        raise BenchError(f"idle connection {i + 1} of {n} to {proxy.leg}: TLS handshake: {e}")
                socks.append(s)
                s.sendall(api_versions_frame(1) + (metadata_frame(version, 2) if metadata else b""))
                batch.append(s)
            for i, s in enumerate(batch, start):
                try:
                    corr = [struct.unpack_from(">i", _recv_frame(s))[0] for _ in range(2 if metadata else 1)]
                except (OSError, ke.EnvError) as e:
                    raise BenchError(f"idle connection {i + 1} of {n} to {proxy.leg}: no answer ({e})\n"
                                     f"--- {proxy.log_path}:\n{ke.tail(proxy.log_path)}")
                if corr != [1, 2][: len(corr)]:
                    raise BenchError(f"idle connection {i + 1} to {proxy.leg}: answers with correlation ids {corr}")
        opened_s = time.monotonic() - t0
        time.sleep(IDLE_SETTLE_S)
        if not proxy.alive():
            raise BenchError(f"{proxy.leg} exited holding {n} idle connections\n--- {proxy.log_path}:\n{ke.tail(proxy.log_path)}")
        mem1 = proxy.memory_kib()
        extra1 = sample() if sample else {}
        links1 = upstream_links(proxy.pids(), proxy.upstream_port)
        procs = len(proxy.pids())
    finally:
        for s in socks:
            s.close()
    # Let the forwarder drop the upstream side before the next one is measured.
    ke.wait_until(lambda: upstream_links(proxy.pids(), proxy.upstream_port) <= links0, timeout=60, interval=0.5)
    return {
        **{f"{k}_per_conn": (extra1[k] - extra0[k]) / n for k in extra0},
        "conns": n,
        "growth_kib": mem1 - mem0,
        "per_conn_kib": (mem1 - mem0) / n,
        "links": links1 - links0,
        "procs": procs,
        "open_s": opened_s,
    }


# --------------------------------------------------------------------------------------------
# topics


def admin_client(bootstrap: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kshim-proxy-bench", request_timeout_ms=30000)


def listener_overrides(tls: bool, relay: bool) -> dict[str, str]:
    """The broker's listeners (KafkaCluster listener_overrides; empty: its defaults). With TLS,
    clients (and kshim, and the relay's clients) speak TLS to the broker, which replicates and is
    probed and administered over a plaintext INTERNAL listener. With the relay, extra0 is the
    broker's RELAY listener and extra1 the relay's own port, which RELAY advertises."""
    if tls:
        overrides = {
            "listeners": "SSL://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": "SSL://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "SSL:SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT,RELAY:SSL",
        }
    elif relay:
        overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,RELAY:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    else:
        return {}
    if relay:
        overrides["listeners"] += ",RELAY://127.0.0.1:{extra0}"
        overrides["advertised.listeners"] += ",RELAY://127.0.0.1:{extra1}"
    return overrides


def start_cluster(cluster: ke.KafkaCluster, stops: list) -> None:
    """Starts `cluster`, its stop first put in `stops`; a cluster that does not start is a
    BenchError."""
    stops.append(cluster.stop)
    try:
        cluster.start()
    except ke.EnvError as e:
        raise BenchError(str(e))


def wait_leaders(admin, names: list[str], partitions: int, deadline: float) -> None:
    """Waits until every partition of the topics `names` (each of `partitions`) has a leader."""
    while True:
        described = admin.describe_topics(names)
        pending = [t.get("name", t.get("topic")) for t in described
                   if t.get("error_code") or len(t.get("partitions", [])) != partitions
                   or any(p.get("leader_id", -1) < 0 for p in t["partitions"])]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{len(pending)} topics have partitions without a leader in time, e.g. {pending[:3]}")
        time.sleep(0.2)


def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    try:
        res = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
        errors = [t for t in res.get("topics", []) if t.get("error_code")]
        if errors:
            raise BenchError(f"CreateTopics failed: {errors}")
        # The first leg should not pay for leader election; wait until every partition has a leader.
        wait_leaders(admin, names, partitions, time.monotonic() + 30)
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
ACKS = ("1", "all")


def _cpu_note(row: dict, key: str) -> str:
    return "" if row.get(key) is None else f", proxy CPU {row[key]:.2f}s"


def run(args: argparse.Namespace, workdir: Path, started: float) -> int:
    deadline = started + args.max_seconds
    ke.require_jars()
    if shutil.which("javac") is None:
        raise BenchError("`javac` is not on PATH (it compiles tests/tools/LatencyProbe.java). "
                         f"Run: {ke.INSTALL_HINT}")
    notes: list[str] = []
    legs = list(args.legs)
    kroxylicious = None
    if "kroxylicious" in legs:
        if os.environ.get("KROXYLICIOUS_HOME"):
            notes.append(f"KROXYLICIOUS_HOME is not read any more: the kroxylicious leg runs {KROXYLICIOUS_ARTIFACT} "
                         f"from Maven Central, started by tests/tools/kroxylicious/{KROXYLICIOUS_MAIN_CLASS}.java.")
            log(notes[-1])
        try:
            kroxylicious = resolve_kroxylicious()
        except BenchError as e:
            if args.legs_explicit:
                raise
            legs.remove("kroxylicious")
            notes.append(f"The kroxylicious leg was not run: {e}")
            log(f"leaving out the kroxylicious leg: {e}")
    if "relay" in legs and shutil.which("socat") is None:
        raise BenchError(f"socat is not on PATH (the relay leg needs it). Run: {ke.INSTALL_HINT}")
    tls = None
    if args.tls:
        if not args.tls_bench_bin.is_file():
            raise BenchError(f"{args.tls_bench_bin} is missing (it measures the handshakes of --tls): "
                             "cargo build --release --example tls_bench (scripts/bench-proxy.sh does)")
        log("making certificates (openssl, keytool): a CA and RSA 2048 leaves for the broker and the forwarders")
        tls = make_tls_material(workdir / "certs")
    proxies_run = [leg for leg in legs if leg != "direct"]
    idle_n = 0
    if proxies_run and args.idle_connections != 0 and args.study == "all":
        # A forwarder holds two descriptors per connection (client side and upstream side).
        want = IDLE_CONNS_DEFAULT if args.idle_connections < 0 else args.idle_connections
        have = raise_open_file_limit(2 * want + FD_HEADROOM)
        idle_n = min(want, (have - FD_HEADROOM) // 2)
        if idle_n < want:
            if args.idle_connections > 0:
                raise BenchError(f"the open-file limit is {have} and cannot be raised to {2 * want + FD_HEADROOM} for "
                                 f"{want} idle connections; pass at most {idle_n} to --idle-connections (BENCH_IDLE_CONNS)")
            notes.append(f"Idle connections: {idle_n:,} instead of {want:,}, as many as the open-file hard limit "
                         f"({have:,}) allows with two descriptors per connection.")
            log(notes[-1])
    records_for = {1024: args.records_1k, 65536: args.records_64k}
    rate_for = {1024: args.latency_rate_1k, 65536: args.latency_rate_64k}
    log_dir = workdir / "logs"
    log_dir.mkdir()
    tools = ToolRunner(log_dir, deadline, args.pin.get("client"))

    log("compiling tests/tools/LatencyProbe.java")
    probe_classes = ke.compile_java(LATENCY_PROBE_SRC)

    log(f"starting Apache Kafka 4.1.1 (KRaft, broker+controller{'; SSL client listeners' if tls else ''})")
    overrides = listener_overrides(bool(tls), "relay" in legs)
    extra_properties = tls.broker_properties() if tls else {}
    # An SSL listener holds about 50 KiB of heap per connection (its engine's buffers): the idle
    # connections need room.
    cluster = ke.KafkaCluster(1, workdir=workdir / "kafka", heap=TLS_BROKER_HEAP if tls else BROKER_HEAP,
                              separate_inter_broker=bool(tls),
                              listener_overrides=overrides, extra_ports=2 if "relay" in legs else 0,
                              extra_properties=extra_properties)
    start_cluster(cluster, resources)
    broker = cluster.nodes[0]
    pin_process(broker.pid, args.pin.get("broker"))
    log(f"broker on {broker.bootstrap} (pid {broker.pid})")
    # Topics are made and deleted over plaintext.
    admin_bootstrap = broker.internal_bootstrap if tls else broker.bootstrap
    client_config = tls.client_config if tls else None

    endpoints: list[Endpoint] = []
    proxies: dict[str, Forwarder] = {}
    for leg in legs:
        if leg == "direct":
            endpoints.append(Endpoint("direct", broker.bootstrap, None, client_config))
            continue
        if leg == "kshim":
            p: Forwarder = KshimProxy(ke.require_kshim_binary(args.kshim_bin), workdir / "kshim",
                                      broker.bootstrap, max(idle_n, 1000) + 1024,
                                      extra_toml=tls.kshim_toml() if tls else "",
                                      upstream_settings=UPSTREAM_PATIENCE if tls else None)
            p.tls = tls.context if tls else None
            resources.append(p.stop)
            log(f"starting kshim on {p.bootstrap}, upstream {broker.bootstrap}")
            p.start()
        elif leg == "kroxylicious":
            p = KroxyliciousProxy(kroxylicious, workdir / "kroxylicious", broker.bootstrap, [broker.node_id], tls)
            p.tls = tls.context if tls else None
            resources.append(p.stop)
            log(f"starting Kroxylicious {KROXYLICIOUS_VERSION} ({KROXYLICIOUS_MAIN_CLASS}) on {p.bootstrap}, "
                f"upstream {broker.bootstrap}{' (TLS both sides)' if tls else ''}")
            p.start()
        else:
            relay_listener, relay_port = broker.extra_ports
            p = SocatRelay(workdir / "relay", relay_port, relay_listener)
            p.tls = tls.context if tls else None
            resources.append(p.stop)
            log(f"starting socat relay {relay_port} -> {relay_listener} (the broker's RELAY listener)")
            p.start({broker.port, relay_listener})
        pin_process(p.proc.pid, args.pin.get("proxy"))
        log(f"{leg} {p.describe()} hands out brokers {p.advertised}")
        proxies[leg] = p
        endpoints.append(Endpoint(leg, p.bootstrap, p, client_config))

    def check_alive() -> None:
        if not broker.alive():
            raise BenchError(f"the broker exited\n--- {broker.log_path}:\n{ke.tail(broker.log_path)}")
        for leg, p in proxies.items():
            if not p.alive():
                raise BenchError(f"{leg} exited with status {p.proc.returncode}\n--- {p.log_path}:\n{ke.tail(p.log_path)}")

    def relay_sampling(ep: Endpoint, on: bool) -> None:
        if isinstance(ep.proxy, SocatRelay):
            ep.proxy.sampling(on)

    if args.study == "latency":
        if "kroxylicious" in proxies:
            notes.append(f"Kroxylicious {proxies['kroxylicious'].version_line}; {kroxylicious.describe()}")
        return latency_study(args, tools, probe_classes, admin_bootstrap, endpoints, check_alive, notes,
                             time.monotonic() - started)

    round_topics = {(r, s): f"bench-{s}-r{r}" for r in range(1, args.rounds + 1) for s, _ in SIZES}
    latency_topics = {s: f"bench-latency-{s}" for s, _ in SIZES}
    warm_topics = {s: f"bench-warmup-{s}" for s, _ in SIZES}
    create_topics(
        admin_bootstrap,
        [*round_topics.values(), *latency_topics.values(), *warm_topics.values()],
        args.partitions,
    )

    # Fresh JVMs, a cold broker and fresh forwarders: the first minute is slower than the rest.
    # One short produce and consume per leg and size, unmeasured, before round 1.
    for size, label in SIZES:
        warm_records = max(records_for[size] // 5, 1)
        for ep in endpoints:
            log(f"warm-up {label} via {ep.leg}")
            produce(tools, ep, warm_topics[size], size, warm_records, "all")
            consume(tools, ep, warm_topics[size], size, warm_records, f"bench-warmup-{ep.leg}-{size}")
            check_alive()
    delete_topics(admin_bootstrap, list(warm_topics.values()))

    results: dict[tuple[int, str], list[dict]] = {(s, ep.leg): [] for s, _ in SIZES for ep in endpoints}
    for rnd in range(1, args.rounds + 1):
        order = endpoints if rnd % 2 == 1 else list(reversed(endpoints))
        for size, label in SIZES:
            topic = round_topics[(rnd, size)]
            records = records_for[size]
            row = {ep.leg: {"round": rnd} for ep in order}
            for acks in ACKS:
                for ep in order:
                    relay_sampling(ep, True)
                    row[ep.leg].update(produce(tools, ep, topic, size, records, acks))
                    relay_sampling(ep, False)
                    check_alive()
                    log(f"round {rnd}/{args.rounds} {label} produce acks={acks} {ep.leg}: "
                        f"{row[ep.leg][f'prod_mbs_{acks}']:.1f} MB/s{_cpu_note(row[ep.leg], f'cpu_prod_{acks}_s')} "
                        f"({tools.last_wall_s:.0f}s)")
            for ep in order:
                # Every leg reads the same first 2 x records of the round's topic.
                relay_sampling(ep, True)
                row[ep.leg].update(consume(tools, ep, topic, size, 2 * records, f"bench-{ep.leg}-{size}-r{rnd}"))
                relay_sampling(ep, False)
                check_alive()
                log(f"round {rnd}/{args.rounds} {label} consume {ep.leg}: {row[ep.leg]['cons_mbs']:.1f} MB/s"
                    f"{_cpu_note(row[ep.leg], 'cpu_cons_s')} ({tools.last_wall_s:.0f}s)")
            for ep in order:
                row[ep.leg].update(latency(tools, probe_classes, ep, latency_topics[size], size,
                                           rate_for[size], args.latency_seconds))
                check_alive()
                log(
                    f"round {rnd}/{args.rounds} {label} latency {ep.leg}: ack p99 "
                    f"{row[ep.leg]['ack_p99_1']:.3f} ms (acks=1), {row[ep.leg]['ack_p99_all']:.3f} ms (acks=all); "
                    f"sends more than one slot late: {row[ep.leg]['late_1']}, {row[ep.leg]['late_all']} "
                    f"({tools.last_wall_s:.0f}s)"
                )
            for leg in proxies:
                for key, moved in (("cpu_prod_1_s", records * size), ("cpu_prod_all_s", records * size),
                                   ("cpu_cons_s", 2 * records * size)):
                    # A run that moved hundreds of MB through a forwarder and cost it no CPU
                    # tick (10 ms) did not go through it. Small trial runs may take less.
                    if moved >= CPU_CHECK_MIN_BYTES and row[leg][key] <= 0:
                        raise BenchError(f"{leg} used no CPU during round {rnd} {label} ({key}); "
                                         f"the {leg} leg did not pass through it")
            for ep in endpoints:
                results[(size, ep.leg)].append(row[ep.leg])
            delete_topics(admin_bootstrap, [topic])

    memory = {leg: {"peak_kib": p.peak_kib()} for leg, p in proxies.items()}
    if idle_n:
        for leg, p in proxies.items():
            log(f"idle connections: {idle_n} to {leg} at {p.advertised[0][0]}:{p.advertised[0][1]}")
            memory[leg].update(idle_memory(p, idle_n, deadline))
            check_alive()
            m = memory[leg]
            log(f"{leg}: {m['per_conn_kib']:.1f} KiB per idle connection, {m['links']} upstream links, "
                f"opened in {m['open_s']:.1f}s")

    hs_tables = handshakes(args, tls, broker, proxies, log_dir, deadline) if tls else ""
    if tls:
        notes.append("TLS on both sides (RSA 2048 leaves, TLS 1.3 where both ends offer it): clients to the "
                     "broker's SSL listener (direct), to kshim and to Kroxylicious, which speak TLS to that "
                     "listener, and to the relay, which carries the clients' TLS to an SSL listener of its own.")
    kroxylicious_info = None
    if "kroxylicious" in proxies:
        kroxylicious_info = f"{proxies['kroxylicious'].version_line}; {kroxylicious.describe()}"
    print_report(args, results, [ep.leg for ep in endpoints], memory, idle_n, notes,
                 kroxylicious_info, time.monotonic() - started)
    if args.plots:
        prefix = "tls-" if tls else "plaintext-"
        legs_run = [ep.leg for ep in endpoints]
        plot_forwarding(args.plots, results, legs_run, prefix)
        plot_latency_study(args.plots, {leg: results[(1024, leg)] for leg in legs_run}, legs_run,
                           args.latency_rate_1k, prefix)
    if hs_tables:
        print()
        print("Full TLS handshakes (examples/tls_bench: connect, handshake without resumption, one ApiVersions, "
              "close; 3 rounds of 4 s per concurrency; the server's CPU per handshake from /proc):")
        print()
        print(hs_tables)
    return 0


# --------------------------------------------------------------------------------------------
# the latency study (--study latency)

STUDY_SIZE = 1024
# The goal of the study: kshim adds no more at p99 than the relay, the floor of forwarding, and
# none of its rounds is worse than direct's worst round by more than this.
STUDY_WORST_ROUND_MARGIN_MS = 1.0


def latency_study(args, tools: ToolRunner, probe_classes: Path, broker_bootstrap: str, endpoints: list,
                  check_alive, notes: list[str], setup_s: float) -> int:
    """Only the ack-latency runs of 1 KiB records, --rounds per leg in alternating order after one
    unmeasured run per leg, with each round's distribution kept: a per-round table, the spread
    of the rounds' p99, and a CDF plot per acks setting."""
    started = time.monotonic()
    topic = "bench-latency-study"
    create_topics(broker_bootstrap, [topic], args.partitions)
    rate = args.latency_rate_1k
    for ep in endpoints:
        log(f"unmeasured latency run via {ep.leg}")
        latency(tools, probe_classes, ep, topic, STUDY_SIZE, rate, 2)
        check_alive()
    rounds: dict[str, list[dict]] = {ep.leg: [] for ep in endpoints}
    for rnd in range(1, args.rounds + 1):
        order = endpoints if rnd % 2 == 1 else list(reversed(endpoints))
        for ep in order:
            r = latency(tools, probe_classes, ep, topic, STUDY_SIZE, rate, args.latency_seconds)
            check_alive()
            rounds[ep.leg].append(r)
            log(f"round {rnd}/{args.rounds} {ep.leg}: ack p50/p99 {r['ack_p50_1']:.3f}/{r['ack_p99_1']:.3f} ms "
                f"(acks=1), {r['ack_p50_all']:.3f}/{r['ack_p99_all']:.3f} ms (acks=all); late sends "
                f"{r['late_1']}, {r['late_all']}")
    legs = [ep.leg for ep in endpoints]
    print()
    print(f"Latency study: Apache Kafka 4.1.1, 1 node; {STUDY_SIZE} B records at {rate}/s, linger.ms=0, "
          f"{args.latency_seconds} s per run; {args.rounds} rounds per leg, alternating; legs: {', '.join(legs)}; "
          f"affinity: {format_pin(args.pin)}")
    for note in notes:
        print(note)
    for acks in ACKS:
        print()
        print(f"acks={acks}: ack latency in ms, over the rounds (median; best and worst round)")
        print()
        print("| leg | p50 | p99 median | p99 best | p99 worst | p99.9 median | max median | added p99 vs direct |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for leg in legs:
            rows = rounds[leg]
            p99 = [r[f"ack_p99_{acks}"] for r in rows]
            p999 = [_quantile(r[f"quantiles_{acks}"], 0.999) for r in rows]
            mx = [_quantile(r[f"quantiles_{acks}"], 1.0) for r in rows]
            added = "—"
            if "direct" in rounds and leg != "direct":
                added = f"{statistics.median(p99) - statistics.median(r[f'ack_p99_{acks}'] for r in rounds['direct']):+.3f}"
            print(f"| {leg} | {statistics.median(r[f'ack_p50_{acks}'] for r in rows):.3f} | "
                  f"{statistics.median(p99):.3f} | {min(p99):.3f} | {max(p99):.3f} | "
                  f"{statistics.median(p999):.3f} | {statistics.median(mx):.3f} | {added} |")
    print()
    print("Per round, ack p99 ms (acks=1 / acks=all):")
    print()
    print("| round | " + " | ".join(legs) + " |")
    print("|---:|" + "---:|" * len(legs))
    for i in range(args.rounds):
        print(f"| {i + 1} | " + " | ".join(
            f"{rounds[leg][i]['ack_p99_1']:.3f} / {rounds[leg][i]['ack_p99_all']:.3f}" for leg in legs) + " |")
    if "kshim" in rounds and "direct" in rounds:
        print()
        print("Goals (informational):")
        for acks in ACKS:
            med = {leg: statistics.median(r[f"ack_p99_{acks}"] for r in rounds[leg]) for leg in legs}
            checks = []
            if "relay" in med:
                checks.append((f"added p99 {med['kshim'] - med['direct']:+.3f} ms ≤ the relay's "
                               f"{med['relay'] - med['direct']:+.3f} ms",
                               med["kshim"] - med["direct"] <= med["relay"] - med["direct"]))
            worst_direct = max(r[f"ack_p99_{acks}"] for r in rounds["direct"])
            worst_kshim = max(r[f"ack_p99_{acks}"] for r in rounds["kshim"])
            checks.append((f"worst kshim round {worst_kshim:.3f} ms ≤ worst direct round {worst_direct:.3f} ms "
                           f"+ {STUDY_WORST_ROUND_MARGIN_MS:g} ms",
                           worst_kshim <= worst_direct + STUDY_WORST_ROUND_MARGIN_MS))
            for what, ok in checks:
                print(f"- acks={acks}: {'PASS' if ok else 'MISS'}: {what}")
    if args.plots:
        plot_latency_study(args.plots, rounds, legs, rate)
    print(f"Total run time {setup_s + time.monotonic() - started:.0f}s.")
    return 0


def format_pin(pin: dict[str, set[int]]) -> str:
    if not pin:
        return "none (the scheduler's)"
    return ", ".join(f"{role} on CPU {','.join(map(str, sorted(cpus)))}" for role, cpus in pin.items())


def _quantile(quantiles: list, q: float) -> float:
    """The value at quantile q of LatencyProbe's [q, microseconds] list, in ms."""
    return next(us for qq, us in quantiles if qq >= q - 1e-9) / 1000


def plot_latency_study(out: Path, rounds: dict[str, list[dict]], legs: list[str], rate: int,
                       prefix: str = "") -> None:
    """PREFIXack-latency-cdf.png: per acks setting, each round's distribution as a thin line and the
    median over rounds of each quantile as a thick one, per leg, on a log latency axis with the
    tail (1 - q) stretched; and latency-study.json with the figures drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{prefix}latency-study.json").write_text(json.dumps(rounds, indent=1))
    colors = {"direct": "tab:gray", "kshim": "tab:blue", "kroxylicious": "tab:orange", "relay": "tab:green"}
    fig, axes = plt.subplots(1, len(ACKS), figsize=(12, 5), sharey=True)
    for ax, acks in zip(axes, ACKS):
        for leg in legs:
            runs = [r[f"quantiles_{acks}"] for r in rounds[leg]]
            qs = [q for q, _ in runs[0]]
            tail = [1 - q if q < 1 else 1e-4 for q in qs]
            for qv in runs:
                ax.plot([us / 1000 for _, us in qv], tail, color=colors.get(leg), alpha=0.2, linewidth=0.7)
            med = [statistics.median(qv[i][1] for qv in runs) / 1000 for i in range(len(qs))]
            ax.plot(med, tail, color=colors.get(leg), linewidth=2, label=leg)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.invert_yaxis()
        ax.set_yticks([0.5, 0.1, 0.01, 0.001])
        ax.set_yticklabels(["p50", "p90", "p99", "p99.9"])
        ax.set_xlabel("ack latency, ms")
        ax.set_title(f"acks={acks}, 1 KiB at {rate}/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{prefix}ack-latency-cdf.png", dpi=110)
    plt.close(fig)
    log(f"plots: {out / f'{prefix}ack-latency-cdf.png'}")


def plot_forwarding(out: Path, results: dict, legs: list[str], prefix: str) -> None:
    """PREFIXthroughput.png: per record size, each leg's median MB/s (produce acks=1, acks=all,
    consume) and each forwarder's CPU s/GB; PREFIXforwarding.json with every round's figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{prefix}forwarding.json").write_text(json.dumps(
        {f"{size}/{leg}": rows for (size, leg), rows in results.items()}, indent=1))
    colors = {"direct": "tab:gray", "kshim": "tab:blue", "kroxylicious": "tab:orange", "relay": "tab:green"}
    fig, axes = plt.subplots(2, len(SIZES), figsize=(12, 8))
    for col, (size, label) in enumerate(SIZES):
        for row, (keys, unit, legs_here) in enumerate((
                (["prod_mbs_1", "prod_mbs_all", "cons_mbs"], "MB/s (median)", legs),
                (["cpu_prod_1", "cpu_prod_all", "cpu_cons"], "forwarder CPU s per GB", [l for l in legs if l != "direct"]))):
            ax = axes[row][col]
            width = 0.8 / max(len(legs_here), 1)
            for i, leg in enumerate(legs_here):
                vals = [_med(results[(size, leg)], k) or 0 for k in keys]
                ax.bar([x + i * width for x in range(len(keys))], vals, width, label=leg, color=colors.get(leg))
            ax.set_xticks([x + width * (len(legs_here) - 1) / 2 for x in range(len(keys))],
                          ["produce acks=1", "produce acks=all", "consume"])
            ax.set(ylabel=unit, title=f"{label} records")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{prefix}throughput.png", dpi=110)
    plt.close(fig)
    log(f"plots: {out / f'{prefix}throughput.png'}")


# --------------------------------------------------------------------------------------------
# report

# (key, label, kind): "tput" is judged by ratio (higher is better), "lat" by difference (lower
# is better), "cpu" by ratio (lower is better); "lat_info" is shown like "lat" but not judged.
METRICS = [
    ("prod_mbs_1", "produce MB/s, acks=1", "tput"),
    ("prod_mbs_all", "produce MB/s, acks=all", "tput"),
    ("cons_mbs", "consume MB/s", "tput"),
    ("ack_p50_1", "ack p50 ms, acks=1 [a]", "lat_info"),
    ("ack_p99_1", "ack p99 ms, acks=1 [a]", "lat"),
    ("ack_p50_all", "ack p50 ms, acks=all [a]", "lat_info"),
    ("ack_p99_all", "ack p99 ms, acks=all [a]", "lat"),
    ("cpu_prod_1", "proxy CPU s/GB, produce acks=1 [b]", "cpu"),
    ("cpu_prod_all", "proxy CPU s/GB, produce acks=all [b]", "cpu"),
    ("cpu_cons", "proxy CPU s/GB, consume [b]", "cpu"),
]


def _med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _fmt_value(v: float | None, kind: str) -> str:
    if v is None:
        return "—"
    return f"{v:,.1f}" if kind == "tput" else f"{v:.2f}" if kind == "cpu" else f"{v:.3f}"


def _compare(k: float | None, other: float | None, kind: str) -> str:
    if k is None or other is None:
        return "—"
    if kind in ("lat", "lat_info"):
        return f"{k - other:+.3f}"
    return f"{k / other:.3f}x" if other > 0 else "—"


class Goal:
    """One goal line: every check is (what, passed or None when a leg it needs did not run)."""

    def __init__(self, text: str):
        self.text = text
        self.checks: list[tuple[str, bool | None]] = []

    def add(self, what: str, ok: bool | None) -> None:
        self.checks.append((what, ok))

    def line(self) -> str:
        judged = [(w, ok) for w, ok in self.checks if ok is not None]
        skipped = len(self.checks) - len(judged)
        if not self.checks:
            return f"- {self.text}: not judged (not measured in this run)"
        if not judged:
            return f"- {self.text}: not judged (a leg it compares with did not run)"
        misses = [w for w, ok in judged if not ok]
        verdict = "PASS" if not misses else "MISS"
        out = f"- {self.text}: {verdict}, {len(judged) - len(misses)}/{len(judged)} checks pass"
        if skipped:
            out += f" ({skipped} not judged: a leg they compare with did not run)"
        if misses:
            out += "; MISS: " + "; ".join(misses)
        return out


def print_report(args, results, legs: list[str], memory: dict, idle_n: int, notes: list[str],
                 kroxylicious_info: str | None, elapsed: float) -> None:
    have_kshim = "kshim" in legs
    others = [leg for leg in legs if leg != "kshim"]

    print()
    print("Per round (every figure is one fresh client run; proxy CPU in seconds, produce acks=1 / acks=all / consume):")
    print()
    print("| round | size | leg | produce MB/s acks=1 | produce MB/s acks=all | consume MB/s | ack p99 ms acks=1 | ack p99 ms acks=all | proxy CPU s |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for size, label in SIZES:
        for i in range(args.rounds):
            for leg in legs:
                r = results[(size, leg)][i]
                cpu = "—" if r.get("cpu_cons_s") is None else (
                    f"{r['cpu_prod_1_s']:.2f} / {r['cpu_prod_all_s']:.2f} / {r['cpu_cons_s']:.2f}")
                print(
                    f"| {r['round']} | {label} | {leg} | {r['prod_mbs_1']:.1f} | {r['prod_mbs_all']:.1f} | "
                    f"{r['cons_mbs']:.1f} | {r['ack_p99_1']:.3f} | {r['ack_p99_all']:.3f} | {cpu} |"
                )

    print()
    print(f"Forwarding benchmark: Apache Kafka 4.1.1, 1 node, {args.partitions} partition(s); "
          f"median of {args.rounds} round(s), legs alternating; legs: {', '.join(legs)}")
    if "kroxylicious" in legs:
        print(f"Kroxylicious {kroxylicious_info}")
    for note in notes:
        print(note)

    throughput = Goal(f"throughput ≥ {GOAL_RATIO} x direct and ≥ Kroxylicious in every row")
    latency_goal = Goal(f"added ack p99 ≤ {GOAL_ADDED_P99_MS:g} ms and ≤ Kroxylicious's")
    cpu_goal = Goal(f"proxy CPU per GB ≤ {GOAL_CPU_VS_RELAY} x the relay and ≤ {GOAL_CPU_VS_KROXYLICIOUS} x Kroxylicious")
    memory_goal = Goal("idle memory per forwarding connection ≤ the relay's")

    for size, label in SIZES:
        med = {leg: {key: _med(results[(size, leg)], key) for key, _, _ in METRICS} for leg in legs}
        print()
        print(f"{label} records (rates for [a]: {args.latency_rate_1k if size == 1024 else args.latency_rate_64k} records/s):")
        print()
        head = ["metric", *legs]
        # Each round's own ratio to the legs that set the bar: direct, and the relay, which does
        # nothing and so is the most a forwarder can reach on a machine whose cores it shares.
        per_round = [b for b in ("direct", "relay") if b in legs] if have_kshim else []
        if have_kshim:
            head += [f"kshim vs {o}" for o in others]
            head += [f"kshim vs {b}, per round" for b in per_round]
        print("| " + " | ".join(head) + " |")
        print("|---|" + "---:|" * (len(head) - 1))
        for key, name, kind in METRICS:
            cells = [name, *(_fmt_value(med[leg][key], kind) for leg in legs)]
            if have_kshim:
                k = med["kshim"][key]
                cells += [_compare(k, med[o][key], kind) if not (kind == "cpu" and o == "direct") else "—"
                          for o in others]
                for b in per_round:
                    pairs = [(d[key], x[key]) for d, x in zip(results[(size, b)], results[(size, "kshim")])
                             if d.get(key) is not None and x.get(key) is not None]
                    # Ratios for throughput and (against the relay) CPU; differences for latency.
                    if (kind == "tput" or (kind == "cpu" and b == "relay")) and pairs:
                        per = [x / d for d, x in pairs if d > 0]
                        cells.append(f"{min(per):.2f}–{max(per):.2f}x" if per else "—")
                    elif kind in ("lat", "lat_info") and pairs:
                        per = [x - d for d, x in pairs]
                        cells.append(f"{min(per):+.2f}…{max(per):+.2f}")
                    else:
                        cells.append("—")
            print("| " + " | ".join(cells) + " |")
            if not have_kshim:
                continue
            k = med["kshim"][key]
            d = med.get("direct", {}).get(key)
            kx = med.get("kroxylicious", {}).get(key)
            rl = med.get("relay", {}).get(key)
            short = f"{label} {name.split(' [')[0]}"
            if kind == "tput":
                throughput.add(f"{short} vs direct", None if d is None else k >= GOAL_RATIO * d)
                throughput.add(f"{short} vs Kroxylicious", None if kx is None else k >= kx)
            elif kind == "lat":
                latency_goal.add(f"{short} added vs direct", None if d is None else k - d <= GOAL_ADDED_P99_MS)
                latency_goal.add(f"{short} vs Kroxylicious", None if kx is None else k <= kx)
            elif kind == "cpu":
                cpu_goal.add(f"{short} vs relay", None if rl is None else k <= GOAL_CPU_VS_RELAY * rl)
                cpu_goal.add(f"{short} vs Kroxylicious", None if kx is None else k <= GOAL_CPU_VS_KROXYLICIOUS * kx)

    proxies = [leg for leg in legs if leg != "direct"]
    if proxies:
        print()
        print(f"Memory of the forwarders (idle: {idle_n:,} connections each, one ApiVersions and one Metadata answered on each):"
              if idle_n else "Memory of the forwarders (idle-connection test skipped: --idle-connections 0):")
        print()
        print("| forwarder | peak memory MiB [c] | processes while idle | upstream links while idle | idle growth MiB | KiB per idle connection |")
        print("|---|---:|---:|---:|---:|---:|")
        for leg in proxies:
            m = memory.get(leg, {})
            peak = m.get("peak_kib")
            cells = [leg, "—" if peak is None else f"{peak / 1024:.1f}"]
            if "conns" in m:
                cells += [str(m["procs"]), str(m["links"]), f"{m['growth_kib'] / 1024:.1f}", f"{m['per_conn_kib']:.1f}"]
            else:
                cells += ["—"] * 4
            print("| " + " | ".join(cells) + " |")
        if have_kshim and idle_n:
            rl = memory.get("relay", {}).get("per_conn_kib")
            memory_goal.add("kshim vs relay", None if rl is None else memory["kshim"]["per_conn_kib"] <= rl)

    print()
    print("[a] tests/tools/LatencyProbe.java --rate: records sent on a fixed schedule (linger.ms=0),")
    print("    timed from send() to the acknowledgement, microsecond percentiles; kshim vs X = difference in ms.")
    print("[b] utime+stime of the forwarder's processes (for the relay: socat, its reaped and its live")
    print("    children) during that run, per GB of record bytes moved; kshim vs X = ratio.")
    print("[c] kshim and Kroxylicious: VmHWM (peak RSS) after the throughput rounds; relay: the highest")
    print("    sum of PSS over socat and its children, sampled every 0.5 s during its runs.")
    print("    Idle growth: sum of PSS before and 2 s after the last connection; kernel socket buffers excluded.")
    print("MB = 2^20 bytes, GB = 2^30 bytes of record payload; consume figures leave out the group join.")
    print("Medians per leg; kshim vs X compares two medians; a per-round column gives the range of each")
    print("round's own kshim/direct or kshim/relay ratio (or difference), its legs run back to back.")
    print()
    if have_kshim:
        print("Goals (informational):")
        for goal in (throughput, latency_goal, cpu_goal, memory_goal):
            print(goal.line())
    else:
        print("Goals not judged: kshim's leg was not run.")
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
