"""The soak: a kshim cluster in front of Kafka under mixed client load for a given time, with
faults on a seeded schedule, invariants checked throughout, and a report with plots.

Run through scripts/soak.sh (see docs/operations.md, "Soak"). On one machine it starts:
  - three Kafka brokers (KRaft, combined nodes) of the newest release kshim supports;
  - three kshim instances sharing state ([cluster]), TLS with client certificates required on
    their listeners, each with its admin API;
  - the client load (tests/interop/java/Soak.java): an idempotent acks=all producer of keyed
    records, two consumers of one KIP-848 group checking order and loss, a share consumer, an
    Admin client creating and deleting topics, and a latency probe sent both through kshim and
    to the brokers directly;
  - from this process: short-lived TLS connections (ApiVersions, Metadata, close) at a steady
    rate, an UpdateFeatures of a kshim-owned feature every 10 s at a random instance, and a
    sampler of every instance's features, epoch, memory, descriptors and metrics.

Faults, one at a time, in a seeded order printed at the start: a kshim killed (SIGKILL) and
restarted; the state-topic writer stopped (SIGSTOP) and resumed; a rolling restart of the
brokers; the state-topic partition leader stopped and restarted; the listener certificate
rotated through the admin API; a config PATCH; the listener truststore (client CAs) changed; a
flood of new connections at ten times the usual rate; and the network kinds of soak_net.py,
over the network lab's links: an instance cut from every broker, or from the state partition's
leader only, or hearing nothing from them; a client's link cut without a reset; one broker's
links slowed.

The history checker (history.py) judges what the kshim cluster promises from the whole run's
record, stored as history.json.

Writes to --out: summary.md (the invariants, the faults, the figures), summary.json, and PNG
plots. Exit 0 when every invariant held, 1 when one did not, 2 when the soak could not run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import re
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
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import history  # noqa: E402
import kafka_env as ke  # noqa: E402
import netlab  # noqa: E402
import soak_net  # noqa: E402
import tls_support as ts  # noqa: E402

RELEASE = "4.4.0"
FEATURE = "kshim.soak.version"
MAX_LEVEL = 8
TOKEN = "soak-" + "admin"
SOAK_SRC = ke.INTEROP_DIR / "java" / "Soak.java"
SOAK_DEBUG_LOG4J = ke.INTEROP_DIR / "log4j2-soak-debug.properties"
INSTANCES = 3
BROKERS = 3
PROCESS_KINDS = ["kshim_kill", "writer_pause", "broker_roll", "state_leader_stop", "cert_rotate", "config_patch",
                 "truststore_change", "client_flood"]
KINDS = PROCESS_KINDS + soak_net.NETWORK_KINDS
# The network kinds of a quick run: the two that test what the kshim cluster promises when an
# instance loses its brokers, or the state partition's leader alone, while its clients stay.
QUICK_NETWORK_KINDS = ["kshim_cut_from_brokers", "kshim_cut_from_state_leader"]
CHURN_PER_MIN = 500
UPDATE_EVERY_S = 10.0
CONVERGE_S = 5.0
MEMORY_GROWTH_LIMIT = 0.05
# What glibc keeps after a load has come and gone, however often the free pages are handed back:
# the arenas of the threads that allocated under load and their stacks. A leak grows with the
# load's length; this does not.
ARENA_ALLOWANCE_KIB = 2048
# The size of a glibc arena reservation: for the breakdown of anonymous memory.
GLIBC_ARENA_SIZE = 64 << 20
# An idle instance keeps its connections to the brokers for the cluster's state: to the state
# partition's leader, the transaction coordinator and the group coordinator, each of which may
# be any broker, and to the brokers its clients last used. Where these leaders are after the
# faults decides how many there are; a leak grows past this bound.
UPSTREAM_PER_BROKER = 4
P99_MARGIN_MS = 2.0
# The end-to-end rule is judged in quiet windows: the bulk producer pauses while the probes go
# on, so that the comparison is of the two paths and not of two waits for a saturated core (at
# 5 MiB/s with --pin, the brokers, the clients and the driver fill CPU 0, and both paths' p99 is
# a second of queueing, where 2 ms cannot be seen). In a window the Admin client's topics, the
# short-lived connections and the UpdateFeatures pause too: with them, both paths' p99 was
# 70-250 ms of the brokers' work for them, where a 5% histogram bucket is wider than 2 ms. The
# windows come after the full load and its faults (in the first minutes the brokers' JIT
# compilers alone fill CPU 0, load or not), each after QUIET_GAP_S at the full rate; each
# window's first QUIET_SETTLE_S, while the brokers and the consumers finish the producer's
# backlog, are not counted.
QUIET_S = 50.0
QUIET_GAP_S = 30.0
QUIET_SETTLE_S = 20.0
QUIET_FILE = "load.quiet"  # in the report directory: Soak.java's --quiet-file
# kshim's own time per request and per response (kshim_own_time_seconds, both legs), outside
# fault windows: what kshim itself adds, whatever the brokers and the clients wait for.
OWN_P99_MS = 1.0
OWN_P999_MS = 5.0


@dataclass
class Profile:
    """How long, how much, and how long each fault lasts."""
    seconds: int  # how long the load runs; with back_to_back, the longest it may run
    records_per_s: int
    linger_ms: int  # the bulk producer's
    probe_per_s: int
    warmup_s: int  # no fault before; memory is measured from here
    tail_s: int  # no fault starts after seconds - tail_s
    repeats: int  # each fault kind this many times
    kill_down_s: float
    pause_s: float
    leader_stop_s: float
    flood_s: float
    cut_s: float  # how long a network cut lasts
    slow_s: float  # how long a broker's links are slow
    grace_s: float  # after a fault heals, clients may still be recovering for this long
    # At least this long between one fault's healing and the next fault. 10 s in a full run:
    # with 20 s, the 26 faults of 30 minutes at 5 MiB/s (a broker roll 100-200 s, a stopped state
    # leader 110 s back in sync) left the last one no time.
    gap_s: float
    # Each fault as soon as the last one healed, the longest kinds first, and the load ends tail_s
    # after the last one healed: a quick run takes what its faults take on this machine (a
    # broker roll is 50 s on a quiet machine and 75 s beside the test command), within `seconds`.
    back_to_back: bool = False
    kinds: tuple = tuple(KINDS)  # the fault kinds, each `repeats` times
    # How many times the bulk producer pauses for QUIET_S once the full load has run `seconds`
    # and its faults have healed: the windows in which the end-to-end rule is judged.
    quiet_windows: int = 0
    # Whether the end-to-end latency invariant (the ack p99 against direct) decides the outcome:
    # it needs a machine that is not saturated, and a three-minute run beside other work (the
    # test command) cannot tell 1-2 ms from the clients' and brokers' waiting for a core. There
    # it is reported as advisory. kshim's own time decides every run.
    judge_performance: bool = True
    # kshim's threads (but its TLS handshake threads) at a real-time priority (SCHED_FIFO 1), so
    # that a thread woken by a socket runs at once and kshim's own time is its work and its wait
    # for its own threads, not the wait for a core the other processes hold (--realtime; root or
    # CAP_SYS_NICE). No run needs it: beside the test command, kshim's own time at the default
    # priority was 10-25 ms at p99, nearly all of it the wait for one of two cores, so a run
    # that has no core for kshim (neither --pin nor --realtime) reports the own-time rule
    # without deciding by it.
    kshim_realtime: bool = False
    lean_brokers: bool = False  # the brokers' JVM: C1 and the serial collector (see new_kafka)
    bulk_direct: bool = False  # the bulk producer writes to the brokers, not through kshim
    # The bulk producer's network client and internals at DEBUG (producer-debug.log), and kshim's
    # connections and upstream links at DEBUG in its log: to follow a batch through a fault.
    debug_producer: bool = False


def profile(minutes: float, quick: bool, mbps: float | None, lean_brokers: bool = False) -> Profile:
    if quick:
        return Profile(seconds=300, records_per_s=int((mbps or 0.125) * 1024), linger_ms=20, probe_per_s=20,
                       warmup_s=20,
                       tail_s=15, repeats=1, kill_down_s=2, pause_s=10, leader_stop_s=10, flood_s=10,
                       cut_s=10, slow_s=10, grace_s=10, gap_s=3, back_to_back=True, judge_performance=False,
                       lean_brokers=True, kinds=tuple(PROCESS_KINDS + QUICK_NETWORK_KINDS))
    seconds = int(minutes * 60)
    return Profile(seconds=seconds, records_per_s=int((mbps or 5) * 1024), linger_ms=5, probe_per_s=100,
                   warmup_s=min(300, seconds // 6), tail_s=60, repeats=2, kill_down_s=5, pause_s=20,
                   leader_stop_s=30, flood_s=20, cut_s=20, slow_s=30, grace_s=15, gap_s=10, lean_brokers=lean_brokers,
                   quiet_windows=2)


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# Kafka wire: Metadata v12 (the state partition's leader, the in-sync replicas), on one
# connection kept open


class Reader:
    def __init__(self, buf: bytes, pos: int = 0):
        self.buf, self.pos = buf, pos

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        value, self.pos = ke._uvarint(self.buf, self.pos)
        return value

    def string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def array(self, item):
        n = self.uvarint() - 1
        return [] if n < 0 else [item(self) for _ in range(n)]

    def tags(self) -> None:
        self.pos = ke._skip_tags(self.buf, self.pos)


def metadata_request(topics: list[str] | None, correlation_id: int = 1) -> bytes:
    client = b"kshim-soak"
    frame = struct.pack(">hhih", 3, 12, correlation_id, len(client)) + client + b"\x00"
    if topics is None:
        frame += b"\x00"
    else:
        frame += ke.encode_uvarint(len(topics) + 1)
        for t in topics:
            frame += b"\x00" * 16 + ke.encode_compact_string(t) + b"\x00"
    return frame + b"\x00\x00\x00"


def parse_metadata(resp: bytes) -> dict:
    """{"brokers": {id: (host, port)}, "partitions": {(topic, p): (leader, replicas, isr)}}."""
    r = Reader(resp, 4)
    r.tags()
    r.take(">i")

    def broker(r: Reader):
        node, host, port = r.take(">i"), r.string(), r.take(">i")
        r.string()
        r.tags()
        return node, (host, port)

    brokers = dict(r.array(broker))
    r.string()
    r.take(">i")
    partitions = {}

    def topic(r: Reader):
        r.take(">h")
        name = r.string()
        r.pos += 17  # topic id, is_internal

        def partition(r: Reader):
            r.take(">h")
            index, leader = r.take(">i"), r.take(">i")
            r.take(">i")
            replicas = r.array(lambda r: r.take(">i"))
            isr = r.array(lambda r: r.take(">i"))
            r.array(lambda r: r.take(">i"))
            r.tags()
            partitions[(name, index)] = (leader, replicas, isr)

        r.array(partition)
        r.take(">i")
        r.tags()

    r.array(topic)
    return {"brokers": brokers, "partitions": partitions}


class Connection:
    """One Kafka connection, TLS with `tls`, opened again after any failure."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None = None, timeout: float = 3.0):
        self.host, self.port, self.tls, self.timeout = host, port, tls, timeout
        self.sock = None
        self.correlation = 0

    def request(self, frame: bytes) -> bytes:
        try:
            if self.sock is None:
                raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
                self.sock = self.tls.wrap_socket(raw, server_hostname=self.host) if self.tls else raw
                self.sock.settimeout(self.timeout)
            self.correlation += 1
            frame = frame[:4] + struct.pack(">i", self.correlation) + frame[8:]
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", ke._recv_exact(self.sock, 4))
            resp = ke._recv_exact(self.sock, size)
            if struct.unpack_from(">i", resp)[0] != self.correlation:
                raise ke.EnvError("correlation id mismatch")
            return resp
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None


# --------------------------------------------------------------------------------------------
# The system under soak


def instance_config(n: int, admin_port: int, certs: ts.Certs, trust: Path) -> str:
    return f"""
node_id = 1
[tls]
certificate = "{certs.server}"
key = "{certs.server_key}"
ca = "{trust}"
client_auth = "required"
[cluster]
id = "soak"
instance_id = "kshim-{n}"
[features.ownership]
kshim_owned = ["kshim.*"]
[features.supported]
"{FEATURE}" = {{ min = 0, max = {MAX_LEVEL} }}
[features.bootstrap]
"{FEATURE}" = 1
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"
"""


class Instance:
    def __init__(self, n: int, kshim: ke.KshimProcess, admin_port: int):
        self.name = f"kshim-{n}"
        self.kshim = kshim
        self.admin = ke.AdminApi(admin_port, TOKEN)

    @property
    def bootstrap(self) -> str:
        return self.kshim.bootstrap

    def ready(self) -> bool:
        try:
            return self.admin.call("GET", "/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def patch(self, body: dict) -> tuple[int, object]:
        return self.admin.call("PATCH", "/admin/config", body, timeout=40)


def client_context(certs: ts.Certs) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.alice), str(certs.alice_key))
    return ctx


def peer_fingerprint(port: int, certs: ts.Certs) -> str | None:
    import hashlib

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as raw:
            with client_context(certs).wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()
    except (OSError, ssl.SSLError):
        return None


def pem_fingerprint(pem: Path) -> str:
    import hashlib

    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.read_text())).hexdigest()


# --------------------------------------------------------------------------------------------
# Background activity


def cpu_seconds(pid: int | None) -> float:
    """User and system CPU seconds of a live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, TypeError):
        return 0.0


def idle_sample(instances: list["Instance"], broker_ports: set[int]) -> dict[str, dict]:
    """Each live instance's heap, resident memory, descriptors and open client connections, taken
    when no client is connected (before the load, and after it and the background activity).
    Descriptors are counted apart by what they are: connections to the brokers (`to_brokers`,
    how many depends on where the state partition's leader and the coordinators are), and the
    rest (`fds`)."""
    out = {}
    for i in instances:
        pid = i.kshim.pid
        if not i.kshim.alive():
            continue
        status, text = i.admin.call("GET", "/metrics", timeout=5)
        out[i.name] = {
            "heap_kib": metric_sum(text, "kshim_heap_allocated_bytes") / 1024 if status == 200 else 0.0,
            "open": metric_sum(text, "kshim_connections_open") if status == 200 else -1,
            "anon_kib": proc_status_kib(pid, "RssAnon"),
            **descriptors(pid, broker_ports),
            "fd_kinds": descriptor_kinds(pid),
            "threads": proc_status_kib(pid, "Threads"),
            "anon_by_kind": anon_breakdown(pid),
            # jemalloc's own figures: what it has handed out, and its resident pages.
            "allocator_kib": {
                "allocated": metric_sum(text, "kshim_allocator_allocated_bytes") / 1024,
                "resident": metric_sum(text, "kshim_allocator_resident_bytes") / 1024,
            } if status == 200 else {},
        }
    return out


def descriptors(pid: int, broker_ports: set[int]) -> dict[str, int]:
    """The process's open descriptors: its connections to the brokers (closing ones too), and
    the rest."""
    total = len(os.listdir(f"/proc/{pid}/fd"))
    to_brokers = len(ke._socket_inodes(pid) & {inode for _, _, inode in ke.established_to(broker_ports, None)})
    return {"fds": total - to_brokers, "to_brokers": to_brokers}


def descriptor_kinds(pid: int) -> dict[str, int]:
    """The process's descriptors counted by what they are: a TCP socket by its state and its
    remote port, a socket that no TCP table lists (closed, or not TCP) apart, anything else by
    its link with the numbers taken out. Named in a descriptor invariant that did not hold."""
    tcp = {inode: f"tcp {TCP_STATES.get(state, state)} to :{remote}" for _, remote, state, inode in ke.tcp_sockets()}
    kinds: dict[str, int] = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return kinds
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            kind = tcp.get(target[8:-1], "socket in no TCP table")
        else:
            kind = re.sub(r"\d+", "N", target)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


# /proc/net/tcp's state column.
TCP_STATES = {"01": "established", "02": "syn-sent", "06": "time-wait", "07": "closed", "08": "close-wait",
              "09": "last-ack", "0A": "listen", "04": "fin-wait-1", "05": "fin-wait-2", "0B": "closing"}


def anon_breakdown(pid: int) -> dict[str, int]:
    """Where a process's anonymous resident memory is, in KiB, from /proc/PID/smaps: the C
    library's malloc (its main heap, and its other arenas: mappings inside 64 MiB reservations),
    thread stacks (a mapping with a guard page just below it) and the rest: kshim's allocator
    (jemalloc maps its extents anywhere; its own count is in `allocator_kib`) and the binary's
    relocated data."""
    vmas = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            vmas.append({"lo": lo, "hi": hi, "perms": head[1], "path": head[5] if len(head) > 5 else "",
                         "anon": 0})
        elif head[0] == "Anonymous:" and vmas:
            vmas[-1]["anon"] = int(head[1])
    out = {"libc malloc": 0, "stacks": 0, "allocator and other": 0}
    for n, v in enumerate(vmas):
        if not v["anon"]:
            continue
        if v["path"] == "[heap]" or (v["path"] == "" and v["lo"] % GLIBC_ARENA_SIZE == 0):
            kind = "libc malloc"
        elif v["path"] == "[stack]" or (n > 0 and vmas[n - 1]["hi"] == v["lo"]
                                        and vmas[n - 1]["perms"].startswith("---")):
            kind = "stacks"
        else:
            kind = "allocator and other"
        out[kind] += v["anon"]
    return out


def proc_status_kib(pid: int, field: str) -> int:
    """A kB field of /proc/PID/status: VmRSS (all resident memory), or RssAnon (the heap, the
    allocator's arenas and stacks, without the pages of the binary's code, which grow as more of
    its paths run)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ke.EnvError(f"no {field} in /proc/{pid}/status")


# kshim's TLS session cache (rustls's default: 256 sessions, each with the client's certificate
# chain): filled before the memory baseline is taken, since it fills within the first minute of
# any load and then stays full.
TLS_SESSION_CACHE = 256


def fill_tls_session_caches(instances: list["Instance"], certs: ts.Certs) -> None:
    ctx = client_context(certs)
    for i in instances:
        for _ in range(TLS_SESSION_CACHE // 2 + 8):  # two session tickets per TLS 1.3 handshake
            c = Connection("127.0.0.1", i.kshim.port, ctx, timeout=5)
            try:
                c.request(ke.api_versions_request(3, ("kshim-soak-warmup", "0")))
            finally:
                c.close()


class Recorder:
    """Everything observed, by this process's clock (time.time())."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rounds: list[dict] = []  # feature samples: {"t", "views": {inst: [epoch, level] | None}}
        self.procs: list[dict] = []  # {"t", "inst", "pid", "rss_kib", "fds"}
        self.metrics: list[dict] = []  # {"t", "inst", "open", "refused"}
        self.churn: list[tuple[float, bool, str, float]] = []  # (start, ok, error, end)
        self.updates: list[dict] = []  # {"t", "inst", "level", "code", "message", "ms"}
        self.faults: list[dict] = []
        self.quiet: list[tuple[float, float]] = []  # (start, end) of each quiet window
        self.writer: str | None = None
        self.sticky: list[tuple[float, bool, str]] = []  # the client on its own link (soak_net.StickyClient)
        self.cpu: dict[str, float] = {}  # component -> CPU seconds of processes that ended

    def add(self, name: str, item) -> None:
        with self.lock:
            getattr(self, name).append(item)


def own_time_buckets(text: str) -> dict[str, dict[float, float]]:
    """kshim_own_time_seconds's cumulative buckets summed over every API, per leg:
    {leg: {upper bound in ms: count}}."""
    legs: dict[str, dict[float, float]] = {}
    for line in text.splitlines():
        if not line.startswith("kshim_own_time_seconds_bucket{"):
            continue
        labels, value = line[len("kshim_own_time_seconds_bucket{"):].rsplit("} ", 1)
        fields = dict(f.split("=", 1) for f in labels.split(","))
        le = fields["le"].strip('"')
        bound = math.inf if le == "+Inf" else float(le) * 1000
        into = legs.setdefault(fields["leg"].strip('"'), {})
        into[bound] = into.get(bound, 0.0) + float(value)
    return legs


def own_time_quantile(cumulative: dict[float, float], q: float) -> float | None:
    """The upper bound (ms) of the bucket holding the q-quantile of a cumulative histogram."""
    total = cumulative.get(math.inf, 0.0)
    if total <= 0:
        return None
    for bound in sorted(cumulative):
        if cumulative[bound] >= q * total:
            return bound
    return math.inf


def threads_of(pid: int | None) -> list[int]:
    """The thread ids of `pid` now (none once it has ended)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")] if pid is not None else []
    except OSError:
        return []


def pin_tasks(pid: int | None, cpus: set[int]) -> None:
    """Pins every thread of `pid` to `cpus` (threads started later inherit it)."""
    for tid in threads_of(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # the thread has ended


REALTIME_PRIORITY = 1  # the lowest SCHED_FIFO priority: above every thread at the default policy
UNPRIORITISED_THREADS = ("kshim-handshake",)  # left at their own low priority (src/server/handshake.rs)


def realtime_tasks(pid: int | None) -> None:
    """Gives the threads of `pid` at the default policy SCHED_FIFO at REALTIME_PRIORITY, but for
    UNPRIORITISED_THREADS. With SCHED_RESET_ON_FORK, so that the threads they start (the TLS
    handshake pool among them) start at the default policy; the next call takes those."""
    for tid in threads_of(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            if name in UNPRIORITISED_THREADS or os.sched_getscheduler(tid) != os.SCHED_OTHER:
                continue
            os.sched_setscheduler(tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(REALTIME_PRIORITY))
        except (ProcessLookupError, FileNotFoundError):
            pass  # the thread has ended
        except PermissionError as e:
            raise ke.EnvError(f"cannot give kshim's threads a real-time priority (this needs root or "
                              f"CAP_SYS_NICE): {e}")


class Placement:
    """Where kshim runs, so that its own time and the added latency are not time spent waiting
    for a core the brokers hold: with `pin` (--pin), the kshim instances on the last CPU, the
    brokers, the client load and this driver on the others; with `realtime`
    (Profile.kshim_realtime), kshim's threads at a real-time priority. Re-applied every second:
    restarted instances and brokers (faults) get new processes."""

    def __init__(self, kafka: ke.KafkaCluster, instances: list["Instance"], pin: bool, realtime: bool):
        cpus = sorted(os.sched_getaffinity(0))
        if pin and len(cpus) < 2:
            raise ke.EnvError(f"--pin needs two CPUs or more; this process may use {cpus}")
        self.pin, self.realtime = pin, realtime
        self.kshim_cpus, self.other_cpus = {cpus[-1]}, set(cpus[:-1])
        self.kafka, self.instances = kafka, instances
        self.java_pid: int | None = None
        self.lab_pid: int | None = None  # the network lab's links carry kshim's traffic: not on kshim's CPU
        self.stop = threading.Event()
        if pin:
            pin_tasks(os.getpid(), self.other_cpus)
        self._place()  # once here, so that a priority that cannot be had fails the run at once
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def describe(self) -> str:
        parts = []
        if self.pin:
            parts.append(f"kshim on CPU {sorted(self.kshim_cpus)}, brokers, clients, the network lab and the driver on CPU "
                         f"{sorted(self.other_cpus)}")
        if self.realtime:
            parts.append(f"kshim's threads at SCHED_FIFO {REALTIME_PRIORITY} (its TLS handshake threads "
                         f"at their own priority)")
        return "; ".join(parts)

    def _place(self) -> None:
        for i in self.instances:
            pid = i.kshim.pid if i.kshim.alive() else None
            if self.pin:
                pin_tasks(pid, self.kshim_cpus)
            if self.realtime:
                realtime_tasks(pid)
        if self.pin:
            for node in self.kafka.nodes:
                pin_tasks(node.pid, self.other_cpus)
            pin_tasks(self.java_pid, self.other_cpus)
            pin_tasks(self.lab_pid, self.other_cpus)

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self._place()
            except ke.EnvError as e:
                log(f"placing kshim: {e}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Activity:
    """Sampler, connection churn and feature updates, each a thread of its own."""

    def __init__(self, instances: list[Instance], certs: ts.Certs, rec: Recorder, seed: int):
        self.instances = instances
        self.certs = certs
        self.rec = rec
        self.rng = random.Random(seed + 1)
        self.stop = threading.Event()
        self.churn_factor = 1
        self.quiet = threading.Event()  # set: no short-lived connection and no UpdateFeatures (a quiet window)
        self.ctx = client_context(certs)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=24)
        self.threads = [threading.Thread(target=t, daemon=True, name=t.__name__)
                        for t in (self._sample_features, self._sample_processes, self._churn, self._updates)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=45)
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _sample_features(self) -> None:
        conns = {i.name: Connection("127.0.0.1", i.kshim.port, self.ctx, timeout=2) for i in self.instances}
        frame = ke.api_versions_request(4, ("kshim-soak", "0"))
        while not self.stop.wait(0.25):
            views = {}
            for i in self.instances:
                try:
                    info = ke.parse_api_versions(conns[i.name].request(frame))
                    views[i.name] = [info.finalized_epoch, info.finalized.get(FEATURE, (0, 0))[1]]
                except Exception:
                    views[i.name] = None
            self.rec.add("rounds", {"t": time.time(), "views": views})
        for c in conns.values():
            c.close()

    def _sample_processes(self) -> None:
        n = 0
        while not self.stop.wait(1.0):
            n += 1
            for i in self.instances:
                pid = i.kshim.pid
                if not i.kshim.alive() or pid is None:
                    continue
                try:
                    rss, anon = proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "RssAnon")
                    fds = len(os.listdir(f"/proc/{pid}/fd"))
                except (OSError, ValueError, ke.EnvError):
                    continue
                self.rec.add("procs", {"t": time.time(), "inst": i.name, "pid": pid, "rss_kib": rss,
                                       "anon_kib": anon, "fds": fds})
                if n % 2 == 0:
                    try:
                        status, text = i.admin.call("GET", "/metrics", timeout=2)
                    except OSError:
                        continue
                    if status == 200 and isinstance(text, str):
                        self.rec.add("metrics", {
                            "t": time.time(), "inst": i.name, "pid": pid,
                            "open": metric_sum(text, "kshim_connections_open"),
                            "refused": metric_sum(text, "kshim_connections_refused_total"),
                            "heap_kib": metric_sum(text, "kshim_heap_allocated_bytes") / 1024,
                            "own": own_time_buckets(text),
                        })

    def _one_connection(self, inst: Instance) -> None:
        t = time.time()
        try:
            c = Connection("127.0.0.1", inst.kshim.port, self.ctx, timeout=5)
            try:
                info = ke.parse_api_versions(c.request(ke.api_versions_request(3, ("kshim-soak-churn", "0"))))
                if info.error_code != 0:
                    raise ke.EnvError(f"ApiVersions error {info.error_code}")
                md = parse_metadata(c.request(metadata_request(None)))
                if len(md["brokers"]) == 0:
                    raise ke.EnvError("Metadata lists no broker")
            finally:
                c.close()
            self.rec.add("churn", (t, True, "", time.time()))
        except Exception as e:
            self.rec.add("churn", (t, False, f"{inst.name}: {type(e).__name__}: {e}", time.time()))

    def _churn(self) -> None:
        due = time.monotonic()
        while not self.stop.is_set():
            rate = CHURN_PER_MIN / 60.0 * self.churn_factor
            due += 1.0 / rate
            delay = due - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
            elif delay < -1:
                due = time.monotonic()
            if not self.quiet.is_set():
                self.pool.submit(self._one_connection, self.rng.choice(self.instances))

    def _updates(self) -> None:
        pending: concurrent.futures.Future | None = None
        while not self.stop.wait(UPDATE_EVERY_S):
            if pending is not None and not pending.done():
                continue  # the last one is still waiting (an instance is stopped): do not pile up
            if self.quiet.is_set():
                continue
            inst = self.rng.choice(self.instances)
            pending = self.pool.submit(self._update, inst, self.rng.randint(1, MAX_LEVEL))

    def _update(self, inst: Instance, level: int) -> None:
        t = time.time()
        current = None
        for r in reversed(self.rec.rounds[-8:]):
            view = r["views"].get(inst.name)
            if view:
                current = view[1]
                break
        if current == level:
            level = level % MAX_LEVEL + 1
        kind = 1 if current is None or level > current else 2
        try:
            code, message = ke.raw_update_features(inst.bootstrap, FEATURE, level, kind, timeout=30, tls=self.ctx)
        except Exception as e:
            code, message = -1, f"{type(e).__name__}: {e}"
        self.rec.add("updates", {"t": t, "inst": inst.name, "level": level, "code": code, "message": message,
                                 "ms": round((time.time() - t) * 1000, 1)})
        if code == 0:
            self.rec.writer = inst.name


# --------------------------------------------------------------------------------------------
# Faults


class Faults(soak_net.NetworkFaults):
    def __init__(self, kafka: ke.KafkaCluster, instances: list[Instance], certs: ts.Certs, files: dict,
                 activity: Activity, rec: Recorder, prof: Profile, rng: random.Random,
                 links: soak_net.Links, sticky: soak_net.StickyClient):
        self.kafka, self.instances, self.certs, self.files = kafka, instances, certs, files
        self.activity, self.rec, self.prof, self.rng = activity, rec, prof, rng
        self.links, self.sticky = links, sticky
        self.turn = {"cert_rotate": 0, "config_patch": 0, "truststore_change": 0}

    def run(self, kind: str) -> str:
        return getattr(self, kind)()

    def _wait_ready(self, inst: Instance, timeout: float = 90) -> None:
        if not ke.wait_until(inst.ready, timeout, 0.2):
            raise ke.EnvError(f"{inst.name} not ready {timeout}s after the fault\n{ke.tail(inst.kshim.log_path)}")

    def _metadata(self) -> dict:
        for node in self.kafka.nodes:
            if node.alive():
                try:
                    return parse_metadata(ke.exchange(node.probe_bootstrap,
                                                      metadata_request(["__kshim_state", "soak-data"]), 5))
                except Exception:
                    continue
        raise ke.EnvError("no broker answers Metadata")

    def _wait_in_sync(self, timeout: float = 120) -> None:
        def in_sync():
            try:
                parts = self._metadata()["partitions"]
            except ke.EnvError:
                return False
            return bool(parts) and all(len(isr) == len(replicas) and leader >= 0
                                       for leader, replicas, isr in parts.values())
        if not ke.wait_until(in_sync, timeout, 0.5):
            raise ke.EnvError(f"partitions not back in sync within {timeout}s: {self._metadata()['partitions']}")

    def _restart_broker(self, node_id: int, down_s: float = 0) -> None:
        self.rec.cpu["brokers"] = self.rec.cpu.get("brokers", 0.0) + cpu_seconds(self.kafka.node(node_id).pid)
        self.kafka.stop_node(node_id)
        if down_s:
            time.sleep(down_s)
        self.kafka.start_node(node_id)
        self.kafka.wait_brokers_registered(timeout=90)

    def kshim_kill(self) -> str:
        inst = self.rng.choice(self.instances)
        self.rec.cpu["kshim"] = self.rec.cpu.get("kshim", 0.0) + cpu_seconds(inst.kshim.pid)
        os.kill(inst.kshim.pid, signal.SIGKILL)
        inst.kshim.proc.wait(timeout=10)
        time.sleep(self.prof.kill_down_s)
        inst.kshim.start()
        self._wait_ready(inst)
        return f"{inst.name} killed, restarted after {self.prof.kill_down_s:g} s"

    def writer_pause(self) -> str:
        name = self.rec.writer or self.rng.choice(self.instances).name
        inst = next(i for i in self.instances if i.name == name)
        os.kill(inst.kshim.pid, signal.SIGSTOP)
        try:
            time.sleep(self.prof.pause_s)
        finally:
            os.kill(inst.kshim.pid, signal.SIGCONT)
        self._wait_ready(inst)
        return f"{inst.name} (the last writer) stopped for {self.prof.pause_s:g} s"

    def broker_roll(self) -> str:
        for node in self.kafka.nodes:
            self._restart_broker(node.node_id)
            self._wait_in_sync()
        return "brokers 1, 2, 3 restarted one after another, each back in sync before the next"

    def state_leader_stop(self) -> str:
        leader = self._metadata()["partitions"][("__kshim_state", 0)][0]
        self._restart_broker(leader, self.prof.leader_stop_s)
        self._wait_in_sync()
        return f"broker {leader} (leader of __kshim_state) stopped for {self.prof.leader_stop_s:g} s"

    def _patch_everywhere(self, body: dict, what: str) -> str:
        inst = self.rng.choice(self.instances)
        status, doc = inst.patch(body)
        if status != 200:
            raise ke.EnvError(f"PATCH {body} at {inst.name}: {status} {doc}")
        self.rec.writer = inst.name

        def everywhere():
            for i in self.instances:
                status, config = i.admin.get("/admin/config")
                if status != 200 or any(config.get(k) != v for k, v in body.items()):
                    return False
            return True
        if not ke.wait_until(everywhere, 30, 0.2):
            raise ke.EnvError(f"{what}: not applied by every instance within 30 s")
        return f"{what} at {inst.name}"

    def cert_rotate(self) -> str:
        self.turn["cert_rotate"] += 1
        cert, key = self.files["server_certs"][self.turn["cert_rotate"] % 2]
        detail = self._patch_everywhere({"tls.certificate": str(cert), "tls.key": str(key)},
                                        f"listener certificate -> {cert.name}")
        want = pem_fingerprint(cert)
        if not ke.wait_until(lambda: all(peer_fingerprint(i.kshim.port, self.certs) == want
                                         for i in self.instances), 30, 0.2):
            raise ke.EnvError(f"not every instance presents {cert.name} within 30 s")
        return detail + ", presented by every instance"

    def config_patch(self) -> str:
        self.turn["config_patch"] += 1
        level = ["info", "info,kshim::cluster=debug"][self.turn["config_patch"] % 2]
        return self._patch_everywhere({"log.level": level}, f"log.level -> {level}")

    def truststore_change(self) -> str:
        self.turn["truststore_change"] += 1
        bundle = self.files["trust"][self.turn["truststore_change"] % 2]
        return self._patch_everywhere({"tls.ca": str(bundle)}, f"client CA bundle -> {bundle.name}")

    def client_flood(self) -> str:
        self.activity.churn_factor = 10
        try:
            time.sleep(self.prof.flood_s)
        finally:
            self.activity.churn_factor = 1
        return f"{CHURN_PER_MIN * 10} new TLS connections per minute for {self.prof.flood_s:g} s"


def plan(prof: Profile, seed: int) -> list[tuple[float, str]]:
    """(planned second, kind): every kind `repeats` times in a seeded order, spread evenly over
    the time between the warm-up and the tail, each shifted by a seeded jitter."""
    rng = random.Random(seed)
    kinds = []
    for _ in range(prof.repeats):
        batch = list(prof.kinds)
        rng.shuffle(batch)
        kinds += batch
    if prof.back_to_back:
        # The kinds that restart brokers take most of the time: they go first, so that the
        # short ones fill what is left.
        kinds.sort(key=lambda k: k not in ("broker_roll", "state_leader_stop"))
        return [(float(prof.warmup_s), k) for k in kinds]
    span = prof.seconds - prof.tail_s - prof.warmup_s
    step = span / len(kinds)
    return [(round(prof.warmup_s + i * step + rng.uniform(0, step * 0.25), 1), k) for i, k in enumerate(kinds)]


# --------------------------------------------------------------------------------------------
# Evaluation


def windows(rec: Recorder, grace: float) -> list[tuple[float, float]]:
    return [(f["at"], f["healed"] + grace) for f in rec.faults if f.get("healed")] + \
           [(f["at"], f["at"] + 3600) for f in rec.faults if not f.get("healed")]


def inside(t: float, wins: list[tuple[float, float]]) -> bool:
    return any(a <= t <= b for a, b in wins)


def overlaps(start: float, end: float, wins: list[tuple[float, float]]) -> bool:
    """Whether something that ran from `start` to `end` ran in part inside a window (a connection
    made just before a fault began can be broken by it)."""
    return any(start <= b and a <= end for a, b in wins)


def bucket_ms(b: int) -> float:
    return math.exp((b + 1) / 20) / 1000.0


def percentile(hist: dict[int, int], q: float) -> float | None:
    total = sum(hist.values())
    if total == 0:
        return None
    want = q * total
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= want:
            return bucket_ms(b)
    return bucket_ms(max(hist))


def merge(into: dict[int, int], h: dict) -> None:
    for k, v in h.items():
        into[int(k)] = into.get(int(k), 0) + v


def evaluate(rec: Recorder, ticks: list[dict], errors: list[dict], final: dict, prof: Profile, t0: float,
             planned: list, kshim_logs: dict[str, str], idle_before: dict, idle_after: dict, checked: dict,
             own_core: bool) -> dict:
    """The invariants: the history checker's verdicts (`checked`, tests/interop/history.py) and the
    soak's own. `own_core`: kshim had a core of its own (--pin) or a real-time priority, without
    which kshim's own time is mostly the wait for a core and is reported, not judged."""
    inv = {}
    wins = windows(rec, prof.grace_s)

    def hold(name: str, held: bool, detail: str) -> None:
        inv[name] = {"held": bool(held), "detail": detail}

    ran = [f for f in rec.faults if f.get("healed")]
    failed = [f for f in rec.faults if not f.get("healed")]
    hold("faults_ran", not failed and len(rec.faults) == len(planned),
         f"{len(ran)} of {len(planned)} planned faults ran and healed"
         + (f"; failed: {[(f['kind'], f.get('error', '')[:200]) for f in failed]}" if failed else "")
         + (f"; not started (no time left): {len(planned) - len(rec.faults)}" if len(rec.faults) < len(planned) else ""))

    lost = final.get("lost")
    hold("no_acknowledged_record_lost", lost == 0,
         f"{final.get('acked', 0)} acknowledged, {lost} not consumed" +
         (f" (e.g. {final.get('lost_sample')})" if lost else "") +
         # A send that failed may still have been written: the consumers tell.
         f"; {final.get('written_unacknowledged', 0)} consumed whose send failed")
    ooo = final.get("out_of_order")
    hold("per_key_order", ooo == 0, f"{ooo} records out of order per key" +
         (f" (e.g. {final.get('out_of_order_sample')})" if ooo else ""))

    # What the kshim cluster promises, from the whole history (history.py).
    inv.update(checked)

    # Memory and descriptors. Under load they follow the clients an instance holds (clients
    # move to the others when one is killed, and a consumer's connection buffers fetches), so
    # growth under load is judged against its named cause: with every client gone after the
    # load, each instance's heap, anonymous resident memory and descriptors must be back where
    # they were before it (a leak stays), within MEMORY_GROWTH_LIMIT (and 256 KiB of heap, 2
    # descriptors, and ARENA_ALLOWANCE_KIB of anonymous memory). The baseline is taken once the
    # TLS session cache is full.
    notes, bad = [], []

    def where(sample: dict) -> str:
        parts = [f"{k} {v / 1024:.1f}" for k, v in sample["anon_by_kind"].items()]
        parts += [f"jemalloc {k} {v / 1024:.1f}" for k, v in sample.get("allocator_kib", {}).items()]
        return ", ".join(parts)
    for name, before in sorted(idle_before.items()):
        after = idle_after.get(name)
        if after is None:
            bad.append(f"{name}: not sampled after the load")
            continue
        heap_ok = after["heap_kib"] <= before["heap_kib"] * (1 + MEMORY_GROWTH_LIMIT) + 256
        anon_ok = after["anon_kib"] <= before["anon_kib"] * (1 + MEMORY_GROWTH_LIMIT) + ARENA_ALLOWANCE_KIB
        fds_ok = after["fds"] <= before["fds"] + 2 and after["to_brokers"] <= UPSTREAM_PER_BROKER * BROKERS
        note = (f"{name} idle before -> after the load: heap {before['heap_kib'] / 1024:.2f} -> "
                f"{after['heap_kib'] / 1024:.2f} MiB, anonymous resident {before['anon_kib'] / 1024:.1f} -> "
                f"{after['anon_kib'] / 1024:.1f} MiB ({where(before)} -> {where(after)}), descriptors "
                f"{before['fds']} -> {after['fds']} and to the brokers {before['to_brokers']} -> "
                f"{after['to_brokers']} (bound: {UPSTREAM_PER_BROKER} a broker), threads {before['threads']} -> {after['threads']}")
        if not fds_ok:
            grew = {k: after["fd_kinds"].get(k, 0) - before["fd_kinds"].get(k, 0)
                    for k in set(before["fd_kinds"]) | set(after["fd_kinds"])}
            note += " (descriptors that came: " + (", ".join(
                f"{n} {k}" for k, n in sorted(grew.items()) if n > 0) or "none by kind") + ")"
        notes.append(note)
        if not (heap_ok and anon_ok and fds_ok):
            bad.append(note)
    by_pid: dict[int, list[dict]] = {}
    for p in rec.procs:
        by_pid.setdefault(p["pid"], []).append(p)
    for pid, samples in by_pid.items():
        base_from = max(samples[0]["t"], t0) + prof.warmup_s
        end_t = samples[-1]["t"]
        if end_t - base_from < 60:
            continue
        base = [s for s in samples if base_from <= s["t"] <= base_from + 30]
        end = [s for s in samples if s["t"] >= end_t - 30]
        conns = [m for m in rec.metrics if m["pid"] == pid]

        def median(rows, key):
            return statistics.median([r[key] for r in rows] or [0])
        c_base = [m for m in conns if base_from <= m["t"] <= base_from + 30]
        c_end = [m for m in conns if m["t"] >= end_t - 30]
        rss0, rss1 = median(base, "rss_kib"), median(end, "rss_kib")
        notes.append(
            f"{samples[0]['inst']} pid {pid} under load, {end_t - base_from:.0f} s from the warm-up: resident "
            f"{rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB ({(rss1 - rss0) / max(rss0, 1):+.1%}), heap "
            f"{median(c_base, 'heap_kib') / 1024:.2f} -> {median(c_end, 'heap_kib') / 1024:.2f} MiB, descriptors "
            f"{median(base, 'fds'):.0f} -> {median(end, 'fds'):.0f}, client connections "
            f"{median(c_base, 'open'):.0f} -> {median(c_end, 'open'):.0f}")
    hold("memory_and_descriptors_flat", not bad and bool(idle_before), "; ".join(notes))

    # Healthy clients outside fault windows.
    out_churn = [c for c in rec.churn if not overlaps(c[0], c[3], wins)]
    out_sticky = [r for r in rec.sticky if not inside(r[0], wins)]
    sticky_failed = [r for r in out_sticky if not r[1]]
    churn_failed = [c for c in out_churn if not c[1]]
    out_errors = [e for e in errors if not inside(e["t"] / 1000, wins)]
    out_updates = [u for u in rec.updates if not overlaps(u["t"], u["t"] + u["ms"] / 1000, wins) and u["code"] != 0]
    refused = 0
    by_inst: dict[int, list[dict]] = {}
    for m in rec.metrics:
        by_inst.setdefault(m["pid"], []).append(m)
    for samples in by_inst.values():
        for a, b in zip(samples, samples[1:]):
            if not inside(a["t"], wins) and not inside(b["t"], wins) and b["refused"] > a["refused"]:
                refused += int(b["refused"] - a["refused"])
    detail = (f"outside fault windows: {len(out_churn)} short-lived connections, {len(churn_failed)} failed; "
              f"{len(out_errors)} client errors; {len(out_updates)} UpdateFeatures failed; "
              f"{refused} connections refused by kshim; {len(out_sticky)} requests of the client on its own link, "
              f"{len(sticky_failed)} failed")
    if sticky_failed:
        detail += f"; e.g. {sticky_failed[:3]}"
    if churn_failed:
        detail += f"; e.g. {churn_failed[:3]}"
    if out_errors:
        detail += f"; e.g. {[(e['what'], e['error'][:160]) for e in out_errors[:3]]}"
    if out_updates:
        detail += f"; e.g. {out_updates[:3]}"
    hold("healthy_clients_served_outside_faults",
         not churn_failed and not out_errors and not out_updates and refused == 0 and len(out_churn) > 0
         and not sticky_failed and len(out_sticky) > 0, detail)

    def probe_acks(keep) -> tuple[dict, dict]:
        """The probes' ack histograms of the seconds outside fault windows that `keep` keeps."""
        via, direct = {}, {}
        for tick in ticks:
            t = tick["t"] / 1000
            if keep(t) and not inside(t - 1, wins) and not inside(t, wins):
                merge(via, tick["via"])
                merge(direct, tick["direct"])
        return via, direct

    def p99s(via: dict, direct: dict) -> str:
        pv, pd = percentile(via, 0.99), percentile(direct, 0.99)
        return (f"through kshim {pv if pv is None else round(pv, 2)} ms, direct {pd if pd is None else round(pd, 2)}"
                f" ms ({sum(via.values())} and {sum(direct.values())} acks)")

    loaded = probe_acks(lambda t: not overlaps(t - 1, t, rec.quiet))
    if prof.quiet_windows:
        counted = [(a + QUIET_SETTLE_S, b) for a, b in rec.quiet]
        via, direct = probe_acks(lambda t: any(a <= t - 1 and t <= b for a, b in counted))
        where = (f"in {len(rec.quiet)} of {prof.quiet_windows} quiet windows after the load (everything but the "
                 f"probes paused {QUIET_S:g} s; the first {QUIET_SETTLE_S:g} s of each not counted)")
    else:
        via, direct = loaded
        where = "outside fault windows"
    pv, pd = percentile(via, 0.99), percentile(direct, 0.99)
    ok = (pv is not None and pd is not None and pv - pd <= P99_MARGIN_MS
          and len(rec.quiet) == prof.quiet_windows)
    detail = f"probe ack p99 {where}: {p99s(via, direct)}; limit +{P99_MARGIN_MS:g} ms"
    if prof.quiet_windows:
        detail += f". Under the load, outside faults (not judged): {p99s(*loaded)}"
    hold("ack_p99_within_2ms_of_direct", ok, detail)

    # kshim's own time: the growth of each instance's histograms between two samples of the
    # same process, both outside fault windows.
    own: dict[str, dict[float, float]] = {}
    by_proc: dict[int, list[dict]] = {}
    for m in rec.metrics:
        by_proc.setdefault(m["pid"], []).append(m)
    for samples in by_proc.values():
        for a, b in zip(samples, samples[1:]):
            if inside(a["t"], wins) or inside(b["t"], wins):
                continue
            for leg, buckets in b.get("own", {}).items():
                into = own.setdefault(leg, {})
                for bound, n in buckets.items():
                    into[bound] = into.get(bound, 0.0) + n - a.get("own", {}).get(leg, {}).get(bound, 0.0)
    quantiles = {leg: (own_time_quantile(h, 0.99), own_time_quantile(h, 0.999), int(h.get(math.inf, 0)))
                 for leg, h in sorted(own.items())}
    own_ok = set(quantiles) == {"request", "response"} and all(
        n > 0 and p99 <= OWN_P99_MS and p999 <= OWN_P999_MS for p99, p999, n in quantiles.values())
    hold("kshim_own_time_within_1ms_p99", own_ok,
         "kshim_own_time_seconds outside fault windows, every API: " + "; ".join(
             f"{leg} p99 <= {p99:g} ms, p99.9 <= {p999:g} ms ({n} observations)"
             for leg, (p99, p999, n) in quantiles.items()) +
         f" (limits: p99 {OWN_P99_MS:g} ms, p99.9 {OWN_P999_MS:g} ms; a quantile is its bucket's upper bound)"
         if quantiles else "no own-time histogram was sampled")

    panics = {n: text.count("panicked at") for n, text in kshim_logs.items()}
    hold("no_panic", not any(panics.values()), f"'panicked at' in the kshim logs: {panics}")
    if not prof.judge_performance:
        for name in ADVISORY_IN_QUICK:
            inv[name]["advisory"] = True
    if not own_core:
        inv["kshim_own_time_within_1ms_p99"]["advisory"] = True
        inv["kshim_own_time_within_1ms_p99"]["detail"] += (
            " (reported, not judged: kshim had no core of its own, neither --pin nor --realtime)")
    return inv


# Invariants reported but not deciding a --quick run (see Profile.judge_performance): the test
# command runs it beside the interop tests, where every client and broker waits for one of two
# cores. kshim's own time is judged where kshim has a core (see Profile.kshim_realtime).
ADVISORY_IN_QUICK = ("ack_p99_within_2ms_of_direct",)


def decided(inv: dict) -> bool:
    """Whether every invariant that decides the outcome held."""
    return all(v["held"] for v in inv.values() if not v.get("advisory"))


# --------------------------------------------------------------------------------------------
# Report


def plots(out: Path, rec: Recorder, ticks: list[dict], t0: float, grace: float) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def bands(ax) -> None:
        for f in rec.faults:
            end = f.get("healed") or f["at"] + 5
            ax.axvspan(f["at"] - t0, end - t0, color="tab:red", alpha=0.12, lw=0)
            ax.text(f["at"] - t0, 1.0, f["kind"].replace("_", " "), transform=ax.get_xaxis_transform(),
                    rotation=90, fontsize=6, va="top", ha="right", color="tab:red")
        for a, b in rec.quiet:
            ax.axvspan(a - t0, b - t0, color="tab:green", alpha=0.12, lw=0)
            ax.text(a - t0, 1.0, "quiet", transform=ax.get_xaxis_transform(),
                    rotation=90, fontsize=6, va="top", ha="right", color="tab:green")

    def save(fig, ax, name: str, title: str, ylabel: str) -> None:
        bands(ax)
        ax.set_title(title)
        ax.set_xlabel("seconds since the load started")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)

    ts_ = [t["t"] / 1000 - t0 for t in ticks]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.plot(ts_, [t["acked"] for t in ticks], lw=0.8, label="acknowledged records/s (through kshim)")
    ax.plot(ts_, [t["consumed"] for t in ticks], lw=0.8, label="consumed records/s (KIP-848 group)")
    ax.plot(ts_, [t["share"] for t in ticks], lw=0.8, label="share consumer records/s")
    save(fig, ax, "throughput.png", "Throughput", "records/s")

    fig, ax = plt.subplots(figsize=(11, 3.6))
    for key, label in (("via", "probe through kshim"), ("direct", "probe direct"), ("bulk", "bulk producer")):
        p50 = [percentile({int(k): v for k, v in t[key].items()}, 0.5) for t in ticks]
        p99 = [percentile({int(k): v for k, v in t[key].items()}, 0.99) for t in ticks]
        line, = ax.plot(ts_, p99, lw=0.8, label=f"{label} p99")
        ax.plot(ts_, p50, lw=0.8, ls="--", color=line.get_color(), label=f"{label} p50")
    ax.set_yscale("log")
    save(fig, ax, "latency.png", "Ack latency, acks=all (per second)", "ms")

    for name, key, title, ylabel, scale in (("memory.png", "rss_kib", "Memory per instance: resident, and the heap kshim holds", "MiB", 1024),
                                            ("descriptors.png", "fds", "Open descriptors per instance", "count", 1)):
        fig, ax = plt.subplots(figsize=(11, 3.6))
        for inst in sorted({p["inst"] for p in rec.procs}):
            pts = [p for p in rec.procs if p["inst"] == inst]
            line, = ax.plot([p["t"] - t0 for p in pts], [p[key] / scale for p in pts], lw=0.8,
                            label=f"{inst} resident" if key == "rss_kib" else inst)
            if key == "rss_kib":
                heap = [m for m in rec.metrics if m["inst"] == inst]
                ax.plot([m["t"] - t0 for m in heap], [m["heap_kib"] / scale for m in heap], lw=0.8, ls="--",
                        color=line.get_color(), label=f"{inst} heap")
        save(fig, ax, name, title, ylabel)

    fig, ax = plt.subplots(figsize=(11, 3.6))
    for inst in sorted({m["inst"] for m in rec.metrics}):
        pts = [m for m in rec.metrics if m["inst"] == inst]
        ax.plot([m["t"] - t0 for m in pts], [m["open"] for m in pts], lw=0.8, label=f"{inst} open client connections")
    churn_s: dict[int, int] = {}
    for c in rec.churn:
        churn_s[int(c[0] - t0)] = churn_s.get(int(c[0] - t0), 0) + 1
    xs = sorted(churn_s)
    ax.plot(xs, [churn_s[x] for x in xs], lw=0.6, color="grey", label="new short-lived connections/s")
    save(fig, ax, "connections.png", "Connections", "count")

    fig, ax = plt.subplots(figsize=(11, 3.6))
    for inst in sorted({n for r in rec.rounds for n in r["views"]}):
        pts = [(r["t"] - t0, r["views"][inst][0]) for r in rec.rounds if r["views"].get(inst)]
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", lw=0.8, label=inst)
    save(fig, ax, "epochs.png", "Finalized-features epoch served by each instance", "epoch")
    return names


def write_report(out: Path, summary: dict, pngs: list[str], meta: dict) -> None:
    lines = [f"# kshim soak: {'PASS' if decided(summary['invariants']) else 'FAIL'}", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "## Invariants", "", "| invariant | held | detail |", "|---|---|---|"]
    for name, v in summary["invariants"].items():
        held = "yes" if v["held"] else "no (advisory in a --quick run)" if v.get("advisory") else "**no**"
        lines.append(f"| {name} | {held} | {v['detail'].replace('|', '/')} |")
    lines += ["", "## Faults", "", "| kind | at s | healed s | converged s after | what |", "|---|---:|---:|---:|---|"]
    for f in summary["faults"]:
        lines.append(f"| {f['kind']} | {f['at_s']} | {f['healed_s']} | {f.get('converged_s')} | "
                     f"{(f.get('detail') or f.get('error', ''))[:200].replace('|', '/')} |")
    bands = "Fault windows are drawn as red bands"
    if summary.get("quiet_windows_s"):
        bands += ", quiet windows as green ones"
    lines += ["", "## Plots", "", bands + ".", ""]
    lines += [f"![{p}]({p})" for p in pngs]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------


def read_java(path: Path) -> tuple[list[dict], list[dict], dict]:
    ticks, errors, final = [], [], {}
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = doc.get("kind")
            if kind == "tick":
                ticks.append(doc)
            elif kind == "error":
                errors.append(doc)
            elif kind == "final":
                final = doc
    return ticks, errors, final


def tls_files(out: Path) -> tuple[ts.Certs, dict]:
    """The certificates, and what the TLS faults swap: two listener certificates of one CA, and
    two client-CA bundles (the clients' CA alone, and with a second CA added)."""
    # Made anew on each run: a report directory given again must not keep the last run's.
    shutil.rmtree(out / "certs", ignore_errors=True)
    certs = ts.make_certs(out / "certs")
    server_b = ts.issue(certs.dir, "server-b", "localhost", certs.ca, certs.ca_key, "server_ext")
    trust_a = certs.dir / "clients-ca.pem"
    trust_a.write_text(certs.ca.read_text())
    trust_b = certs.dir / "clients-ca-and-partner-ca.pem"
    trust_b.write_text(certs.ca.read_text() + certs.mallory_ca.read_text())
    return certs, {"server_certs": [(certs.server, certs.server_key), server_b], "trust": [trust_a, trust_b]}


def new_kafka(out: Path, lean: bool) -> ke.KafkaCluster:
    # By default the brokers run as in production (the JVM's default compiler and collector).
    # Lean brokers (the C1 compiler, the serial collector) cost half the CPU: the three minutes
    # of --quick are over before C2 would pay off, and on a small machine they leave the
    # latency probes a core (--lean-brokers).
    # Each run formats new brokers, even in a report directory given again.
    shutil.rmtree(out / "kafka", ignore_errors=True)
    extra_ports, listeners = soak_net.broker_listeners(INSTANCES)
    return ke.KafkaCluster(
        BROKERS, jars=ke.release_jars(RELEASE), workdir=out / "kafka", separate_inter_broker=True, heap="1g",
        extra_ports=extra_ports, listener_overrides=listeners,
        jvm_options=ke.TEST_BROKER_JVM_OPTIONS if lean else (), class_archive=lean,
        extra_properties={
            "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000",
            "group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000",
            "transaction.state.log.min.isr": "2", "log.retention.check.interval.ms": "30000",
        })


def start_instances(links: soak_net.Links, certs: ts.Certs, trust: Path, out: Path,
                    debug: bool = False) -> list[Instance]:
    instances = []
    rust_log = "info,kshim::server::connection=debug,kshim::upstream=debug" if debug else "info"
    for n in range(1, INSTANCES + 1):
        admin_port = ke.free_port()
        ports = dict(zip((1, 2, 3), ke.free_ports(3)))
        k = ke.KshimProcess(instance_config(n, admin_port, certs, trust), upstream=links.upstream(n),
                            listener_ports=ports, rust_log=rust_log, workdir=out / f"kshim-{n}")
        instances.append(Instance(n, k, admin_port))
        k.start()
    for i in instances:
        if not ke.wait_until(i.ready, 90, 0.2):
            raise ke.EnvError(f"{i.name} not ready\n{ke.tail(i.kshim.log_path)}")
    return instances


def start_load(prof: Profile, quick: bool, kafka: ke.KafkaCluster, instances: list[Instance], certs: ts.Certs,
               out: Path, stop_file: Path) -> tuple[ke.BackgroundJava, float]:
    """The Java client load, and the moment its first second began (time.time()). The load ends
    after prof.seconds, or once `stop_file` exists."""
    jars = ke.release_jars(RELEASE)
    classes = ke.compile_java(SOAK_SRC, jars=jars)
    props = ts.java_ssl(certs, keystore=certs.alice_keystore)
    prop_args = [a for k, v in props.items() for a in ("--prop", f"{k}={v}")]
    java = ke.BackgroundJava(
        ["Soak", "--bootstrap", ",".join(i.bootstrap for i in instances), "--direct", kafka.bootstrap,
         "--seconds", str(prof.seconds + (3600 if prof.quiet_windows else 0)), "--records-per-s", str(prof.records_per_s),
         "--linger-ms", str(prof.linger_ms), "--probe-per-s", str(prof.probe_per_s),
         "--stop-file", str(stop_file), "--quiet-file", str(out / QUIET_FILE), "--bulk-direct", str(prof.bulk_direct).lower(), *prop_args],
        workdir=out, name="clients", extra_classpath=[classes], jars=jars,
        log_config=SOAK_DEBUG_LOG4J if prof.debug_producer else ke.CLIENTS_LOG4J,
        jvm_args=(["-Xmx1g"] if quick else ["-Xmx1g", "-XX:TieredStopAtLevel=4"])
        + ([f"-Dkshim.producerDebugLog={out / 'producer-debug.log'}"] if prof.debug_producer else []))
    if not ke.wait_until(lambda: read_java(java.stdout_path)[0] or not java.alive(), 120, 0.2) or not java.alive():
        raise ke.EnvError(f"the client load did not start\n{ke.tail(java.stdout_path)}\n{ke.tail(java.stderr_path)}")
    return java, read_java(java.stdout_path)[0][0]["t"] / 1000 - 1


def run_quiet_windows(prof: Profile, quiet_file: Path, activity: "Activity", rec: Recorder) -> None:
    """The quiet windows (Profile.quiet_windows), each after QUIET_GAP_S at the full rate: while
    `quiet_file` exists the bulk producer and the Admin client pause, and so does `activity`."""
    for _ in range(prof.quiet_windows):
        time.sleep(QUIET_GAP_S)
        quiet_file.touch()
        activity.quiet.set()
        start = time.time()
        log(f"quiet window: everything but the probes pauses for {QUIET_S:g} s")
        try:
            time.sleep(QUIET_S)
        finally:
            quiet_file.unlink(missing_ok=True)
            activity.quiet.clear()
        rec.add("quiet", (start, time.time()))


def run_faults(faults: Faults, planned: list, prof: Profile, t0: float) -> None:
    """Each planned fault at its time, or once the one before has healed and `gap_s` passed. A
    full run's load goes on after its faults (the quiet windows come after them), so every
    planned fault runs, however late the slow ones before it make it; a run whose load ends at a
    set time keeps its last `tail_s` free of faults."""
    next_free = t0
    last_start = math.inf if prof.quiet_windows else prof.seconds - prof.tail_s
    for at, kind in planned:
        start = max(t0 + at, next_free)
        if start > t0 + last_start:
            log(f"no time left for {kind}")
            continue
        time.sleep(max(0.0, start - time.time()))
        fault = {"kind": kind, "at": time.time()}
        faults.rec.faults.append(fault)
        log(f"fault: {kind}")
        try:
            fault["detail"] = faults.run(kind)
            fault["healed"] = time.time()
            log(f"  healed after {fault['healed'] - fault['at']:.1f} s: {fault['detail']}")
        except Exception as e:
            fault["error"] = f"{type(e).__name__}: {e}"
            log(f"  FAILED: {fault['error']}")
            traceback.print_exc()
        next_free = time.time() + prof.gap_s


def report(out: Path, prof: Profile, seed: int, t0: float, load_s: float, rec: Recorder, inv: dict, final: dict,
           ticks: list[dict], cpu: dict, pinned: str | None) -> dict:
    """Writes summary.json, samples.json, the plots and summary.md; returns the summary."""
    summary = {
        "acked": final.get("acked", 0), "lost": final.get("lost"), "out_of_order": final.get("out_of_order"),
        "written_unacknowledged": final.get("written_unacknowledged"),
        "faults": [{"kind": f["kind"], "at_s": round(f["at"] - t0, 1),
                    "healed_s": round(f["healed"] - t0, 1) if f.get("healed") else None,
                    **({"converged_s": f.get("converged_s")} if "converged_s" in f else {}),
                    **({"detail": f["detail"]} if "detail" in f else {"error": f.get("error", "")})}
                   for f in rec.faults],
        "quiet_windows_s": [[round(a - t0, 1), round(b - t0, 1)] for a, b in rec.quiet],
        "invariants": inv,
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    pngs = plots(out, rec, ticks, t0, prof.grace_s)
    commit = os.popen(f"git -C {ke.REPO_ROOT} rev-parse --short HEAD 2>/dev/null").read().strip()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "commit": commit or "unknown",
            "duration": f"{load_s:.0f} s", "seed": seed,
            "load": f"{prof.records_per_s} records/s of 1 KiB (acks=all, idempotent, linger {prof.linger_ms} ms) "
                    f"{'to the brokers directly' if prof.bulk_direct else 'through kshim over TLS'}; probe {prof.probe_per_s}/s through kshim and direct; "
                    f"{CHURN_PER_MIN} short-lived connections/min; UpdateFeatures every {UPDATE_EVERY_S:g} s"
                    + "".join(f"; everything but the probes paused at {a - t0:.0f}-{b - t0:.0f} s" for a, b in rec.quiet),
            "Kafka": f"{RELEASE}, three combined KRaft nodes"
                     + (" (lean JVM: C1 compiler, serial collector)" if prof.lean_brokers else ""),
            "placement": pinned or "default (every process on every CPU, at the default priority)",
            "acknowledged": summary["acked"],
            "UpdateFeatures": f"{sum(1 for u in rec.updates if u['code'] == 0)} of {len(rec.updates)} succeeded",
            "CPU seconds (start to the end of the load)": ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())}
    write_report(out, summary, pngs, meta)
    return summary


def run(args) -> int:
    prof = replace(profile(args.minutes, args.quick, args.mbps, args.lean_brokers), bulk_direct=args.bulk_direct,
                   debug_producer=args.debug_producer, kshim_realtime=args.realtime)
    if args.kinds:
        unknown = set(args.kinds.split(",")) - set(KINDS)
        if unknown:
            print(f"soak: unknown fault kinds {sorted(unknown)}; the kinds are {', '.join(KINDS)}", file=sys.stderr)
            return 2
        prof = replace(prof, kinds=tuple(args.kinds.split(",")))
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kshim-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    planned = plan(prof, seed)
    log(f"report directory: {out}")
    log(f"seed {seed}; {prof.seconds} s; {prof.records_per_s} records/s of 1 KiB; faults planned "
        f"(second: kind): {', '.join(f'{s:g}: {k}' for s, k in planned)}")
    (out / "plan.json").write_text(json.dumps({"seed": seed, "profile": prof.__dict__, "planned": planned}, indent=1))

    certs, files = tls_files(out)
    rec = Recorder()
    kafka = new_kafka(out, prof.lean_brokers)
    instances: list[Instance] = []
    activity = java = placement = lab = sticky = tail = None
    try:
        lab = netlab.Lab(out / "netlab")
        links = soak_net.Links(lab, kafka, INSTANCES)
        log(f"starting three Kafka {RELEASE} brokers")
        kafka.start()
        kafka.wait_brokers_registered()
        log("starting three kshim instances, each reaching the brokers over links of its own")
        instances = start_instances(links, certs, files["trust"][0], out, prof.debug_producer)
        tail = history.StateTail(lambda: [n.probe_bootstrap for n in kafka.nodes if n.alive()]).start()
        if args.pin or prof.kshim_realtime:
            placement = Placement(kafka, instances, args.pin, prof.kshim_realtime)
            placement.lab_pid = lab.proc.pid
            log(f"placed: {placement.describe()}")
        fill_tls_session_caches(instances, certs)
        time.sleep(12)  # as before the sample after the load (below)
        broker_ports = {ke.split_hostport(b)[1] for b in kafka.bootstrap.split(",")}
        idle_before = idle_sample(instances, broker_ports)
        stop_file = out / "load.stop"
        stop_file.unlink(missing_ok=True)
        java, t0 = start_load(prof, args.quick, kafka, instances, certs, out, stop_file)
        if placement is not None:
            placement.java_pid = java.proc.pid
        log("client load running")
        activity = Activity(instances, certs, rec, seed)
        activity.start()
        links.client = lab.link("client-to-kshim-1", instances[0].bootstrap)
        sticky = soak_net.StickyClient(links.client, activity.ctx, Connection).start()
        run_faults(Faults(kafka, instances, certs, files, activity, rec, prof, random.Random(seed + 2), links, sticky),
                   planned, prof, t0)

        # The last fault may heal after the load ended: the sampler keeps going long enough
        # to see whether the instances agree again.
        last_heal = max((f.get("healed", 0) for f in rec.faults), default=0)
        time.sleep(max(0.0, last_heal + CONVERGE_S + 1 - time.time()))
        load_end = t0 + prof.seconds
        if prof.back_to_back:
            load_end = min(load_end, max(last_heal, t0 + prof.warmup_s) + prof.tail_s)
            time.sleep(max(0.0, load_end - time.time()))
            stop_file.touch()
        elif prof.quiet_windows:
            # The full load ran its time, and tail_s more after the last fault healed: the quiet
            # windows, then the end.
            time.sleep(max(0.0, max(load_end, last_heal + prof.tail_s) - time.time()))
            run_quiet_windows(prof, out / QUIET_FILE, activity, rec)
            stop_file.touch()
            load_end = time.time()
        log("waiting for the client load to end and to check what it consumed")
        # What each part cost, up to the end of the load (the drain's consuming excluded).
        ke.wait_until(lambda: time.time() > load_end or not java.alive(), max(0.0, load_end - time.time()) + 60, 0.5)
        load_end = min(time.time(), load_end)
        cpu = {
            "brokers": rec.cpu.get("brokers", 0.0) + sum(cpu_seconds(n.pid) for n in kafka.nodes),
            "kshim": rec.cpu.get("kshim", 0.0) + sum(cpu_seconds(i.kshim.pid) for i in instances),
            "client JVM": cpu_seconds(java.proc.pid),
            "this driver": sum(os.times()[:2]),
        }
        res = java.wait(400)
        activity.close()
        activity = None
        sticky.close()
        rec.sticky = sticky.results
        state_complete = tail.catch_up()
        tail.close()
        # Every client has left: the instances' connections to the clients must be closed, and
        # each runtime thread must have gone idle and handed its free memory back (at most every
        # 10 s), before the idle sample.
        ke.wait_until(lambda: all(v["open"] == 0 for v in idle_sample(instances, broker_ports).values()), 30, 0.5)
        time.sleep(12)
        idle_after = idle_sample(instances, broker_ports)
        for i in instances:
            # Where the anonymous memory of each instance is, mapping by mapping, for a reader
            # of a memory invariant that did not hold.
            if i.kshim.alive():
                shutil.copyfile(f"/proc/{i.kshim.pid}/smaps", out / f"smaps-{i.name}-idle-after.txt")
                # And what each descriptor is, for a descriptor count that did not come back.
                try:
                    fds = sorted(os.listdir(f"/proc/{i.kshim.pid}/fd"), key=int)
                    (out / f"fds-{i.name}-idle-after.txt").write_text("".join(
                        f"{fd} {os.readlink(f'/proc/{i.kshim.pid}/fd/{fd}')}\n" for fd in fds))
                    shutil.copyfile(f"/proc/{i.kshim.pid}/net/tcp", out / f"tcp-{i.name}-idle-after.txt")
                except OSError:
                    pass
        ticks, errors, final = read_java(java.stdout_path)
        if not final:
            raise ke.EnvError(f"the client load ended without its final line (rc {res.rc})\n{res.stderr[-3000:]}")
        if "error" in final:
            raise ke.EnvError(f"the client load failed: {final['error']}")
        # Every sample, first: what the evaluation reads, kept even if it fails.
        (out / "samples.json").write_text(json.dumps({
            "t0": t0, "rounds": rec.rounds, "procs": rec.procs, "metrics": rec.metrics, "updates": rec.updates,
            "churn_failures": [c for c in rec.churn if not c[1]], "idle_before": idle_before,
            "idle_after": idle_after}))
        hist = {"feature": FEATURE, "cluster_id": "soak", "converge_s": CONVERGE_S, "state": tail.batches,
                "state_complete": state_complete, "updates": rec.updates, "rounds": rec.rounds,
                "faults": rec.faults, "lab_events": lab.events}
        (out / "history.json").write_text(json.dumps(hist))
        inv = evaluate(rec, ticks, errors, final, prof, t0, planned, {i.name: i.kshim.log_text() for i in instances},
                       idle_before, idle_after, history.check(hist), own_core=bool(placement))
        report(out, prof, seed, t0, load_end - t0, rec, inv, final, ticks, cpu, placement.describe() if placement else None)
        held = decided(inv)
        for name, v in inv.items():
            log(f"{'held  ' if v['held'] else 'not held (advisory)' if v.get('advisory') else 'BROKEN'} "
                f"{name}: {v['detail']}")
        log(f"report: {out / 'summary.md'} ({'every invariant held' if held else 'an invariant did not hold'})")
        return 0 if held else 1
    finally:
        if placement is not None:
            placement.close()
        if activity is not None:
            activity.close()
        for part in (sticky, tail, lab):
            if part is not None:
                part.close()
        if java is not None and java.alive():
            java.stop()
        for i in instances:
            if i.kshim.alive():
                os.kill(i.kshim.pid, signal.SIGCONT)  # a writer stopped when the soak was interrupted
            i.kshim.stop()
        kafka.stop()
        for node in kafka.nodes:  # the brokers' logs stay with the report, their data does not
            shutil.rmtree(node.dir / "data", ignore_errors=True)
        log(f"report directory: {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30, help="how long the load runs (default 30)")
    ap.add_argument("--quick", action="store_true",
                    help="every fault kind once, shorter and back to back: about 3 minutes, at most 5")
    ap.add_argument("--mbps", type=float, help="bulk load in MiB/s (default 5; 0.125 with --quick)")
    ap.add_argument("--lean-brokers", action="store_true",
                    help="brokers with the C1 compiler and the serial collector, half the CPU (always with --quick)")
    ap.add_argument("--kinds", help="only these fault kinds, comma-separated (default: every kind; with --quick, "
                                    "every process kind and two network kinds)")
    ap.add_argument("--realtime", action="store_true",
                    help="kshim's threads at SCHED_FIFO 1 (root or CAP_SYS_NICE): its own time without the wait "
                         "for a core the other processes hold; no run needs it")
    ap.add_argument("--pin", action="store_true",
                    help="kshim on the last CPU, the brokers, the clients, the network lab and this driver on the others")
    ap.add_argument("--bulk-direct", action="store_true",
                    help="the bulk producer writes to the brokers directly (every other client still goes "
                         "through kshim): tells the producer's own behaviour under the faults from kshim's")
    ap.add_argument("--debug-producer", action="store_true",
                    help="the bulk producer's network client and internals at DEBUG (producer-debug.log), and "
                         "kshim's connections and upstream links at DEBUG in its log")
    ap.add_argument("--seed", type=int, help="the fault schedule's seed (default: random, printed)")
    ap.add_argument("--out", help="the report directory (default: a new temporary directory)")
    args = ap.parse_args()
    try:
        return run(args)
    except ke.EnvError as e:
        log(f"the soak could not run: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
