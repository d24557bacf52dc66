"""Processes for the interop tests: real Apache Kafka (KRaft) nodes, kshim, and Java tools.

Everything here is bounded in time and every process is stopped by its own PID.
Processes that are still alive when the interpreter exits are stopped by an atexit hook,
so a failing or interrupted test run leaves nothing behind.

Layout assumptions (all relative to the repository root):
  build/kafka-jars/        jars copied by scripts/install-deps.sh from tests/java/pom.xml
  target/release/kshim     the binary under test (in cargo's target directory; override with KSHIM_BIN)
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
INTEROP_DIR = Path(__file__).resolve().parent
JARS_DIR = Path(os.environ.get("KSHIM_KAFKA_JARS", REPO_ROOT / "build" / "kafka-jars"))
BROKER_LOG4J = INTEROP_DIR / "log4j2-broker.properties"
TOOLS_LOG4J = INTEROP_DIR / "log4j2-tools.properties"
CLIENTS_LOG4J = INTEROP_DIR / "log4j2-clients.properties"
FEATURE_INTEROP_SRC = INTEROP_DIR / "java" / "FeatureInterop.java"
INSTALL_HINT = "bash scripts/install-deps.sh"

KAFKA_START_TIMEOUT_S = float(os.environ.get("KSHIM_KAFKA_START_TIMEOUT", "90"))
KSHIM_START_TIMEOUT_S = float(os.environ.get("KSHIM_START_TIMEOUT", "20"))
STOP_TIMEOUT_S = 20.0
JAVA_TOOL_TIMEOUT_S = 120.0


class EnvError(RuntimeError):
    """The test environment is missing something or a process misbehaved."""


# --------------------------------------------------------------------------------------------
# process bookkeeping


_live_lock = threading.Lock()
_live: dict[int, subprocess.Popen] = {}


def _register(proc: subprocess.Popen) -> None:
    with _live_lock:
        _live[proc.pid] = proc


def _unregister(proc: subprocess.Popen) -> None:
    with _live_lock:
        _live.pop(proc.pid, None)


def stop_process(proc: subprocess.Popen | None, timeout: float = STOP_TIMEOUT_S,
                 sig: int = signal.SIGTERM) -> int | None:
    """Signal the process by its PID (SIGTERM unless `sig` says otherwise), then SIGKILL it if
    it has not exited within `timeout`."""
    if proc is None:
        return None
    try:
        if proc.poll() is None:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        return proc.returncode
    finally:
        _unregister(proc)


class ForeignProcess:
    """A process of this test run that another of its processes started (a shared broker of
    tests/interop/brokers.py), with the part of Popen's interface the harness uses; signalled
    by its PID, and waited for by polling, as it is not this process's child."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError, ProcessLookupError):
            state = "X"
        if state in ("Z", "X"):
            self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.1)
        return self.returncode


def _exit_on_sigterm(signum, frame) -> None:
    # Python ends on SIGTERM without running atexit hooks; `timeout` and CI stop a run so.
    raise SystemExit(128 + signum)


if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


@atexit.register
def _stop_all_live() -> None:
    # Whatever is left at exit is thrown away with its temp directory: no graceful stop.
    with _live_lock:
        procs = list(_live.values())
    for proc in procs:
        try:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


def _spawn(cmd: Sequence[str], *, cwd: Path, log_path: Path, env: dict | None = None,
           outlive_this_process: bool = False) -> subprocess.Popen:
    log = open(log_path, "ab")
    try:
        proc = subprocess.Popen(
            list(cmd),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            # Own session: a Ctrl-C in the terminal reaches pytest, which then stops this by PID.
            start_new_session=True,
        )
    finally:
        log.close()
    if not outlive_this_process:
        _register(proc)
    return proc


def tail(path: Path, lines: int = 40) -> str:
    try:
        data = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"<{path} does not exist>"
    return "\n".join(data[-lines:])


# --------------------------------------------------------------------------------------------
# ports


def _listener_port_range() -> range | None:
    """Where the tests' listeners take their ports: below the kernel's ephemeral range. A port
    that bind(0) found free is an ephemeral port, which any connection on the machine may take
    as its source port before the listener binds it (the test command runs two pytest workers,
    the soak and the shared brokers at once: it happened). None when the range leaves too
    little room below it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(10000, low) if low >= 20000 else None


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Ports this process handed out, and when: a port is free until its listener binds it, so two
# threads that start clusters side by side (the shared brokers, and the broker that writes
# their class-data archive) could be handed the same one. Not again within PORT_HELD_S.
_HANDED_OUT: dict[int, float] = {}
_HANDED_OUT_LOCK = threading.Lock()
PORT_HELD_S = 120.0


def free_ports(count: int, following: int = 0) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago, each with the `following`
    ports after it free too (kshim's per-broker listeners default to the listen port + 1 + the
    node id), none handed out by this process in the last PORT_HELD_S. Drawn at random below the
    ephemeral range, so that no connection takes one."""
    ports: list[int] = []
    span = _listener_port_range()
    rng = random.Random()
    with _HANDED_OUT_LOCK:
        now = time.monotonic()
        for port, at in list(_HANDED_OUT.items()):
            if now - at > PORT_HELD_S:
                del _HANDED_OUT[port]
        while len(ports) < count:
            if span is None:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
            else:
                port = rng.randrange(span.start, span.stop - following)
            wanted = range(port, port + following + 1)
            if not any(q in _HANDED_OUT for q in wanted) and all(_bindable(q) for q in wanted):
                ports.append(port)
                _HANDED_OUT.update(dict.fromkeys(wanted, now))
    return ports


def free_port(following: int = 0) -> int:
    return free_ports(1, following)[0]


def port_accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def split_hostport(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


# --------------------------------------------------------------------------------------------
# a minimal ApiVersions v3 client, used to know when a node really answers


def encode_uvarint(n: int) -> bytes:
    """An unsigned varint, as Kafka's flexible versions write lengths, counts and tags."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_compact_string(s: str) -> bytes:
    raw = s.encode()
    return encode_uvarint(len(raw) + 1) + raw


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _compact_str(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = _uvarint(buf, pos)
    n -= 1
    return buf[pos : pos + n].decode(), pos + n


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


@dataclass
class ApiVersionsInfo:
    error_code: int
    api_keys: dict[int, tuple[int, int]]
    supported: dict[str, tuple[int, int]] = field(default_factory=dict)
    finalized: dict[str, tuple[int, int]] = field(default_factory=dict)
    finalized_epoch: int | None = None
    # Tagged fields other than 0-2, raw: tag -> bytes.
    other_tags: dict[int, bytes] = field(default_factory=dict)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EnvError("connection closed mid-response")
        out += chunk
    return bytes(out)


def exchange(bootstrap: str, frame: bytes, timeout: float, tls: "ssl.SSLContext | None" = None) -> bytes:
    """Sends one request frame (without its size) on a new connection, through TLS with `tls`;
    returns the response frame (without its size)."""
    host, port = split_hostport(bootstrap)
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls else raw
        with sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            return _recv_exact(sock, size)


def api_versions_request(version: int = 3, software: tuple[str, str] = ("kshim-interop", "0"),
                         correlation_id: int = 1,
                         intended: tuple[str | None, int] = (None, -1)) -> bytes:
    """An ApiVersions v3-v5 request frame (without its size) naming `software`; v5 also
    names the (ClusterId, NodeId) the client means to reach (KIP-1242)."""
    client_id = b"kshim-interop"
    header = struct.pack(">hhih", 18, version, correlation_id, len(client_id)) + client_id + b"\x00"
    body = encode_compact_string(software[0]) + encode_compact_string(software[1])
    if version >= 5:
        cluster_id, node_id = intended
        body += b"\x00" if cluster_id is None else encode_compact_string(cluster_id)
        body += struct.pack(">i", node_id)
    return header + body + b"\x00"


# Raw request frames, for tests that need bytes no client would send.


def record_batch(count: int, value_size: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30)
    now_ms = int(time.time() * 1000)
    for i in range(count):
        builder.append(i, timestamp=now_ms, key=None, value=b"x" * value_size, headers=[])
    return bytes(builder.build())


def produce_v7(correlation_id: int, topic: str, acks: int, batch: bytes) -> bytes:
    """A Produce v7 request frame, size prefix included."""
    client = b"stress"
    body = struct.pack(">hhih", 0, 7, correlation_id, len(client)) + client
    body += struct.pack(">hhi", -1, acks, 30000)  # null transactional id, acks, timeout
    body += struct.pack(">ih", 1, len(topic)) + topic.encode()
    body += struct.pack(">iii", 1, 0, len(batch)) + batch
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return _recv_exact(sock, size)


def metadata_v12(correlation_id: int, topic: str | None = None) -> bytes:
    """A Metadata v12 request, size prefix included: for every topic, or for `topic`,
    which the broker creates if it does not exist."""
    header = struct.pack(">hhih", 3, 12, correlation_id, 6) + b"stress" + b"\x00"
    if topic is None:
        # Null topic array, no auto-creation, no authorized operations, no tags.
        body = b"\x00\x00\x00\x00"
    else:
        entry = bytes(16) + encode_compact_string(topic) + b"\x00"
        body = encode_uvarint(2) + entry + b"\x01\x00\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def fetch_v12(correlation_id: int, topic: str, partition_max_bytes: int, offset: int = 0) -> bytes:
    """A Fetch v12 request for one partition (0) of `topic` from `offset`, with no fetch
    session and no wait, size prefix included."""
    header = struct.pack(">hhih", 1, 12, correlation_id, 6) + b"stress" + b"\x00"
    # replica id, max wait, min bytes, max bytes, isolation level, session id and epoch
    body = struct.pack(">iiiibii", -1, 0, 0, partition_max_bytes, 0, 0, -1)
    partition = struct.pack(">iiqiqi", 0, -1, offset, -1, -1, partition_max_bytes) + b"\x00"
    body += encode_uvarint(2) + encode_compact_string(topic) + encode_uvarint(2) + partition + b"\x00"
    body += b"\x01" + b"\x01" + b"\x00"  # no forgotten topics, empty rack id, no tags
    return struct.pack(">i", len(header) + len(body)) + header + body


def metadata_v12_topic(bootstrap: str, topic: str) -> tuple[dict[int, tuple[str, int]], bytes, dict[int, int]]:
    """(brokers {id: (host, port)}, the topic's id, {partition: leader}) from Metadata v12."""
    resp = exchange(bootstrap, metadata_v12(1, topic)[4:], 10)
    pos = 4
    pos = _skip_tags(resp, pos)
    pos += 4  # throttle
    n, pos = _uvarint(resp, pos)
    brokers = {}
    for _ in range(n - 1):
        node_id = struct.unpack_from(">i", resp, pos)[0]
        host, pos = _compact_str(resp, pos + 4)
        port = struct.unpack_from(">i", resp, pos)[0]
        pos += 4
        rack_len, pos = _uvarint(resp, pos)
        pos += max(rack_len - 1, 0)
        pos = _skip_tags(resp, pos)
        brokers[node_id] = (host, port)
    cluster_len, pos = _uvarint(resp, pos)
    pos += max(cluster_len - 1, 0) + 4  # cluster id, controller id
    n, pos = _uvarint(resp, pos)
    assert n == 2, "one topic asked for"
    error = struct.unpack_from(">h", resp, pos)[0]
    assert error == 0, f"Metadata error {error} for {topic}"
    _, pos = _compact_str(resp, pos + 2)
    topic_id = resp[pos:pos + 16]
    pos += 16 + 1  # topic id, is_internal
    n, pos = _uvarint(resp, pos)
    leaders = {}
    for _ in range(n - 1):
        _err, index, leader = struct.unpack_from(">hii", resp, pos)
        leaders[index] = leader
        pos += 2 + 4 + 4 + 4  # error, index, leader, leader epoch
        for _ in range(3):  # replicas, isr, offline replicas
            count, pos = _uvarint(resp, pos)
            pos += 4 * max(count - 1, 0)
        pos = _skip_tags(resp, pos)
    return brokers, topic_id, leaders


def fetch_v17(correlation_id: int, topic_id: bytes, partitions: list[int],
              partition_max_bytes: int = 1 << 20) -> bytes:
    """A Fetch v17 request (topic ids; no session, no wait) from offset 0 of `partitions`,
    size prefix included."""
    header = struct.pack(">hhih", 1, 17, correlation_id, 6) + b"stream" + b"\x00"
    body = struct.pack(">iiibii", 0, 1, 8 << 20, 0, 0, -1)  # max wait, min and max bytes, ...
    body += encode_uvarint(2) + topic_id + encode_uvarint(len(partitions) + 1)
    for p in partitions:
        # partition, leader epoch, fetch offset, last fetched epoch, log start, max bytes, tags
        body += struct.pack(">iiqiqi", p, -1, 0, -1, -1, partition_max_bytes) + b"\x00"
    body += b"\x00"  # topic tags
    body += b"\x01" + b"\x01" + b"\x00"  # no forgotten topics, empty rack id, no tags
    return struct.pack(">i", len(header) + len(body)) + header + body


def api_versions(bootstrap: str, timeout: float = 5.0, version: int = 3,
                 software: tuple[str, str] = ("kshim-interop", "0"),
                 tls: "ssl.SSLContext | None" = None) -> ApiVersionsInfo:
    """Send ApiVersions v3 (or v4: the same layout, but supported features whose min is 0 are
    listed too) naming `software`, and decode the response, including the feature tags 0-2."""
    if version not in (3, 4):
        raise ValueError("api_versions speaks ApiVersions v3 and v4 only")
    return parse_api_versions(exchange(bootstrap, api_versions_request(version, software), timeout, tls))


def parse_api_versions(resp: bytes) -> ApiVersionsInfo:
    """An ApiVersions v3 or v4 response frame (without its size), decoded."""
    pos = 4  # correlation id; the ApiVersions response header is always v0
    (error_code,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    if error_code != 0:
        return ApiVersionsInfo(error_code, {})
    n, pos = _uvarint(resp, pos)
    keys = {}
    for _ in range(n - 1):
        key, lo, hi = struct.unpack_from(">hhh", resp, pos)
        pos = _skip_tags(resp, pos + 6)
        keys[key] = (lo, hi)
    pos += 4  # throttle time
    info = ApiVersionsInfo(error_code, keys)
    ntags, pos = _uvarint(resp, pos)
    for _ in range(ntags):
        tag, pos = _uvarint(resp, pos)
        size, pos = _uvarint(resp, pos)
        end = pos + size
        if tag == 0:
            m, p = _uvarint(resp, pos)
            for _ in range(m - 1):
                name, p = _compact_str(resp, p)
                lo, hi = struct.unpack_from(">hh", resp, p)
                p = _skip_tags(resp, p + 4)
                info.supported[name] = (lo, hi)
        elif tag == 1:
            (info.finalized_epoch,) = struct.unpack_from(">q", resp, pos)
        elif tag == 2:
            m, p = _uvarint(resp, pos)
            for _ in range(m - 1):
                name, p = _compact_str(resp, p)
                hi, lo = struct.unpack_from(">hh", resp, p)
                p = _skip_tags(resp, p + 4)
                info.finalized[name] = (lo, hi)
        else:
            info.other_tags[tag] = resp[pos:end]
        pos = end
    return info


def wait_until(check, timeout: float, interval: float = 0.1):
    """check() until it returns something true, or the timeout; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def raw_update_features(bootstrap: str, feature: str, level: int, upgrade_type: int = 1,
                        validate_only: bool = False, timeout: float = 40.0,
                        tls: "ssl.SSLContext | None" = None) -> tuple[int, str]:
    """One UpdateFeatures v1 request on a raw socket (upgrade_type 1 UPGRADE, 2 SAFE_DOWNGRADE):
    (top-level error code, error message or "")."""
    client_id = b"kshim-interop"
    header = struct.pack(">hhih", 57, 1, 7, len(client_id)) + client_id + b"\x00"
    body = struct.pack(">i", 30000) + encode_uvarint(2)
    body += encode_compact_string(feature) + struct.pack(">hb", level, upgrade_type) + b"\x00"
    body += bytes([1 if validate_only else 0]) + b"\x00"
    resp = exchange(bootstrap, header + body, timeout, tls)
    pos = 4 + 1 + 4  # correlation id, empty header tags, throttle time
    (code,) = struct.unpack_from(">h", resp, pos)
    n, pos = _uvarint(resp, pos + 2)
    message = resp[pos:pos + n - 1].decode() if n else ""
    return code, message


class AdminApi:
    """kshim's admin API over plain HTTP on loopback, with a bearer token."""

    def __init__(self, port: int, token: str):
        self.port = port
        self.token = token

    def call(self, method: str, path: str, body: object | None = None, timeout: float = 40) -> tuple[int, object]:
        """(status, parsed JSON, or the text when the answer is not JSON)."""
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def get(self, path: str) -> tuple[int, object]:
        return self.call("GET", path)


# --------------------------------------------------------------------------------------------
# Java


def release_jars(release: str) -> Path:
    """The jars of another Kafka release's broker (scripts/install-deps.sh fetches them)."""
    return REPO_ROOT / "build" / f"kafka-jars-{release}"


def require_jars(jars: Path | None = None) -> Path:
    """The Kafka jars directory, or a loud failure naming the command that installs it."""
    jars_dir = jars or JARS_DIR
    found = list(jars_dir.glob("kafka_2.13-*.jar")) + list(jars_dir.glob("kafka-tools-*.jar"))
    if len(found) < 2 or not list(jars_dir.glob("kafka-clients-*.jar")):
        raise EnvError(
            f"Kafka jars are missing from {jars_dir} (need kafka_2.13, kafka-tools, kafka-clients). "
            f"Run: {INSTALL_HINT}"
        )
    if shutil.which("java") is None:
        raise EnvError("`java` is not on PATH; a JDK 17+ is needed to run Kafka and the Java clients")
    return jars_dir


def classpath(*extra: os.PathLike | str, jars: Path | None = None) -> str:
    # The Kafka jars first: the class-data archive below holds for any classpath it starts.
    return os.pathsep.join([str(require_jars(jars) / "*"), *(str(e) for e in extra)])


# --------------------------------------------------------------------------------------------
# class-data sharing for the tool, client and broker JVMs
#
# The suite starts several hundred short-lived JVMs (the Admin client, kafka-features.sh, the
# producers and consumers) and about forty brokers; loading and verifying Kafka's classes is
# most of what each start costs. A dynamic CDS archive of those classes, written once per
# kind, set of jars and JDK, makes a tool's start about a third cheaper and a broker's start
# about half (1.8-2.1 CPU-seconds instead of 3.3-3.9, ready in 5 s instead of 6-8). It is only
# an optimisation: if one cannot be written, the JVMs run without it.

CDS_DIR = REPO_ROOT / "build" / "cds"
# A lock per archive: writing the broker archive formats a broker, whose threads ask for the
# tools' archive meanwhile.
_cds_guard = threading.Lock()
_cds_locks: dict[tuple[str, Path], threading.Lock] = {}
_cds_archives: dict[tuple[str, Path], Path | None] = {}


def _cds_key(jars: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    version = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    h.update(version.stderr.encode())
    return h.hexdigest()[:16]


def _class_archive(kind: str, jars: Path, write) -> Path | None:
    """The archive of `kind` for `jars`, written by `write(path)` for the first caller (of any
    process of this run: a file lock keeps the others waiting for it)."""
    with _cds_guard:
        lock = _cds_locks.setdefault((kind, jars), threading.Lock())
    with lock:
        if (kind, jars) in _cds_archives:
            return _cds_archives[(kind, jars)]
        name = f"{kind}-{_cds_key(jars)}.jsa"
        import fcntl

        CDS_DIR.mkdir(parents=True, exist_ok=True)
        archive = CDS_DIR / name
        with open(CDS_DIR / f".lock-{name}", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            if not archive.exists():
                tmp = archive.with_suffix(f".tmp{os.getpid()}")
                try:
                    write(tmp)
                except (EnvError, OSError, subprocess.SubprocessError) as e:
                    sys.stderr.write(f"note: no {kind} class-data archive ({e}); its JVMs start without one\n")
                if tmp.exists() and tmp.stat().st_size > 0:
                    os.replace(tmp, archive)
                else:
                    tmp.unlink(missing_ok=True)
                    sys.stderr.write(f"note: no {kind} class-data archive written; its JVMs start without one\n")
        _cds_archives[(kind, jars)] = archive if archive.exists() else None
        return _cds_archives[(kind, jars)]


def tools_cds_archive() -> Path | None:
    """The archive for tool and client JVMs of the suite's jars."""
    return _class_archive("tools", require_jars(), _write_tools_archive)


def _write_tools_archive(tmp: Path) -> None:
    # The workload: kafka-features.sh describing an address where nobody listens, which
    # loads the tools, the Admin client and the network layer, then gives up after 1.5 s.
    config = CDS_DIR / "dump-client.properties"
    config.write_text("default.api.timeout.ms=1500\nrequest.timeout.ms=1000\n")
    cmd = ["java", f"-XX:ArchiveClassesAtExit={tmp}", *_QUIET_CDS, "-Xmx256m", "-XX:+UseSerialGC",
           "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={TOOLS_LOG4J}", "-cp", classpath(),
           "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", f"127.0.0.1:{free_port()}",
           "--command-config", str(config), "describe"]
    try:
        subprocess.run(cmd, capture_output=True, timeout=JAVA_TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass


def broker_cds_archive(jars: Path) -> Path | None:
    """The archive for broker JVMs of `jars`: written by a broker of its own, started until it
    answers and shut down (a JVM writes the archive as it exits), which costs about one broker's
    start (5 CPU-seconds) once per run."""

    def write(tmp: Path) -> None:
        cluster = KafkaCluster(1, jars=jars, class_archive=False,
                               jvm_options=[*TEST_BROKER_JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={tmp}", *_QUIET_CDS])
        try:
            cluster.start()
            proc = cluster.nodes[0].proc
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S * 4)
        except subprocess.TimeoutExpired:
            raise EnvError("the broker that writes the archive did not shut down in time")
        finally:
            cluster.cleanup()

    return _class_archive("broker", jars, write)


# A JVM that cannot map the archive says so on stdout; kshim's tests compare tools' output.
_QUIET_CDS = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def cds_args() -> list[str]:
    archive = tools_cds_archive()
    return [f"-XX:SharedArchiveFile={archive}", *_QUIET_CDS] if archive else []


def _filter_noise(text: str) -> str:
    """The text without SLF4J's lines, byte for byte otherwise (a missing final newline
    stays missing: Kafka's tools print their command-line errors without one)."""
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not line.startswith("SLF4J:") and not line.startswith("SLF4J(")
    )


@dataclass
class JavaResult:
    rc: int
    stdout: str
    stderr: str

    def __iter__(self):  # allows `rc, out, err = run_...(...)`
        return iter((self.rc, self.stdout, self.stderr))

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]


def java_command(
    main_and_args: Sequence[str],
    *,
    extra_classpath: Iterable[os.PathLike | str] = (),
    jvm_args: Sequence[str] = (),
    log_config: Path = TOOLS_LOG4J,
    jars: Path | None = None,
) -> list[str]:
    """`jars`: another release's jars (`release_jars`), without the class-data archive."""
    return [
        "java",
        *(cds_args() if jars is None else []),
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={log_config}",
        *jvm_args,
        "-cp",
        classpath(*extra_classpath, jars=jars),
        *main_and_args,
    ]


class BackgroundJava:
    """A Java tool running in the background, stdout and stderr in files of their own;
    registered for the atexit cleanup and stopped by PID."""

    def __init__(self, main_and_args: Sequence[str], *, workdir: Path, name: str,
                 extra_classpath: Iterable[os.PathLike | str] = (), log_config: Path = TOOLS_LOG4J,
                 jars: Path | None = None, jvm_args: Sequence[str] = ()):
        self.stdout_path = Path(workdir) / f"{name}.out"
        self.stderr_path = Path(workdir) / f"{name}.err"
        cmd = java_command(main_and_args, extra_classpath=extra_classpath, log_config=log_config, jars=jars,
                           jvm_args=jvm_args)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,
            )
        _register(self.proc)

    def wait(self, timeout: float) -> JavaResult:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(self.proc, timeout=5)
            raise EnvError(
                f"background Java tool did not finish within {timeout}s\n"
                f"stdout:\n{tail(self.stdout_path)}\nstderr:\n{tail(self.stderr_path)}"
            )
        _unregister(self.proc)
        return JavaResult(
            self.proc.returncode,
            _filter_noise(self.stdout_path.read_text(errors="replace")),
            _filter_noise(self.stderr_path.read_text(errors="replace")),
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_process(self.proc, timeout=5)


def run_java(
    main_and_args: Sequence[str],
    *,
    extra_classpath: Iterable[os.PathLike | str] = (),
    jvm_args: Sequence[str] = (),
    timeout: float = JAVA_TOOL_TIMEOUT_S,
    input_text: str | None = None,
    log_config: Path = TOOLS_LOG4J,
    jars: Path | None = None,
    env: dict[str, str] | None = None,
) -> JavaResult:
    """Run `java -cp 'build/kafka-jars/*' MAIN ARGS...`; SLF4J noise is filtered from the output.

    `main_and_args[0]` may be a class name or a single-file `.java` source; `env` is added to
    the environment.
    """
    cmd = java_command(main_and_args, extra_classpath=extra_classpath, jvm_args=jvm_args, log_config=log_config,
                       jars=jars)
    try:
        cp = subprocess.run(
            cmd,
            cwd=str(REPO_ROOT),
            input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired as e:
        raise EnvError(f"timed out after {timeout}s: {' '.join(cmd)}\nstdout:{e.stdout}\nstderr:{e.stderr}")
    return JavaResult(cp.returncode, _filter_noise(cp.stdout), _filter_noise(cp.stderr))


_compiled_lock = threading.Lock()
_compiled: dict[tuple[Path, Path | None], Path] = {}


def compile_java(source: Path, jars: Path | None = None) -> Path:
    """Compile a single-file program once per process (against the suite's 4.1.1 jars, or
    another release's `jars`); returns the classes directory."""
    source = Path(source).resolve()
    key = (source, jars)
    with _compiled_lock:
        if key in _compiled:
            return _compiled[key]
        out = Path(tempfile.mkdtemp(prefix="kshim-javac-"))
        atexit.register(shutil.rmtree, out, True)
        try:
            cp = subprocess.run(
                ["javac", "-nowarn", "-d", str(out), "-cp", classpath(jars=jars), str(source)],
                capture_output=True,
                text=True,
                timeout=JAVA_TOOL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise EnvError(f"javac timed out on {source}")
        if cp.returncode != 0:
            raise EnvError(f"javac failed on {source}:\n{cp.stdout}\n{cp.stderr}")
        _compiled[key] = out
        return out


class JvmServer:
    """A long-lived JVM that reads one command per line on stdin (its arguments separated by
    tabs) and answers on stdout: a command costs milliseconds there, a JVM start about a
    second (several on a busy machine). Started on first use; a command that times out or
    finds the JVM gone takes it down, and the next one starts a new one. Subclasses give the
    command line (`command`) and read the answer (`run`, holding `lock`)."""

    name = "JVM"

    def __init__(self):
        self.lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stderr_path: Path | None = None
        self._lines: "queue.Queue[str | None]" = queue.Queue()

    def command(self) -> list[str]:
        raise NotImplementedError

    def send(self, args: Sequence[str]) -> None:
        """Sends one command (hold `lock` until its answer is read)."""
        for a in args:
            if "\t" in a or "\n" in a:
                raise EnvError(f"{self.name} argument with a tab or newline: {a!r}")
        self.ensure_started()
        try:
            self._proc.stdin.write("\t".join(args) + "\n")
            self._proc.stdin.flush()
        except OSError as e:
            self._stop()
            raise EnvError(f"the {self.name} JVM is gone: {e}\n{tail(self._stderr_path)}")

    def ensure_started(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def next_line(self, args: Sequence[str], deadline: float, so_far: str = "") -> str:
        """The next line of the answer to `args`, by `deadline` (time.monotonic())."""
        try:
            line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self._stop()
            raise EnvError(f"{self.name} {' '.join(args)} did not finish in time; output so far:\n{so_far}")
        if line is None:
            self._stop()
            raise EnvError(f"the {self.name} JVM exited during {' '.join(args)}\n{tail(self._stderr_path)}")
        return line

    def stderr_size(self) -> int:
        return self._stderr_path.stat().st_size

    def stderr_since(self, mark: int) -> str:
        with open(self._stderr_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def _start(self) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="kshim-jvm-server-"))
        atexit.register(shutil.rmtree, workdir, True)
        self._stderr_path = workdir / "stderr"
        with open(self._stderr_path, "wb") as err:
            self._proc = subprocess.Popen(self.command(), cwd=str(REPO_ROOT), stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        _register(self._proc)
        lines: queue.Queue = queue.Queue()
        self._lines = lines
        stdout = self._proc.stdout

        def pump() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True, name=f"{self.name}-stdout").start()

    def _stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc, timeout=5)
        self._proc = None


class FeatureInteropServer(JvmServer):
    """tests/interop/java/FeatureInterop.java --serve: each command's output lines, then
    {"__exit__": RC}."""

    name = "FeatureInterop"

    def command(self) -> list[str]:
        return java_command(["FeatureInterop", "--serve"], extra_classpath=[compile_java(FEATURE_INTEROP_SRC)])

    def run(self, args: Sequence[str], timeout: float) -> JavaResult:
        with self.lock:
            self.ensure_started()
            stderr_mark = self.stderr_size()
            self.send(args)
            out: list[str] = []
            deadline = time.monotonic() + timeout
            while True:
                line = self.next_line(args, deadline, "".join(out))
                if line.startswith('{"__exit__":'):
                    rc = json.loads(line)["__exit__"]
                    break
                out.append(line)
            return JavaResult(rc, _filter_noise("".join(out)), _filter_noise(self.stderr_since(stderr_mark)))


_feature_interop = FeatureInteropServer()


def run_feature_interop(bootstrap: str, *args: str, timeout: float = JAVA_TOOL_TIMEOUT_S) -> JavaResult:
    """Run tests/interop/java/FeatureInterop.java against `bootstrap` (in this process's
    FeatureInterop JVM)."""
    return _feature_interop.run(["--bootstrap", bootstrap, *args], timeout)


def describe_features(bootstrap: str, *extra: str) -> dict:
    """{"finalized": {name: {"min", "max"}}, "finalized_epoch": int|None, "supported": {...}}."""
    res = run_feature_interop(bootstrap, "describe", *extra)
    lines = res.json_lines()
    if res.rc != 0 or len(lines) != 1:
        raise EnvError(f"FeatureInterop describe failed rc={res.rc}\nstdout:{res.stdout}\nstderr:{res.stderr}")
    return lines[0]


def update_features(
    bootstrap: str,
    updates: Sequence[tuple[str, int, str]],
    *,
    validate_only: bool = False,
    extra: Sequence[str] = (),
) -> dict[str, dict]:
    """Apply [(feature, level, UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE)]; returns per-feature results."""
    args = ["update"]
    for name, level, upgrade_type in updates:
        args += ["--feature", f"{name}={level}", "--type", upgrade_type]
    if validate_only:
        args.append("--validate-only")
    res = run_feature_interop(bootstrap, *args, *extra)
    lines = res.json_lines()
    if res.rc != 0 or len(lines) != len(updates):
        raise EnvError(f"FeatureInterop update failed rc={res.rc}\nstdout:{res.stdout}\nstderr:{res.stderr}")
    return {line["feature"]: line for line in lines}


class ToolServer(JvmServer):
    """A Kafka tool's commands in one JVM (tests/interop/java/ToolServer.java, which calls the
    tool's mainNoExit with stdout and stderr captured): one JSON line per command."""

    def __init__(self, tool_class: str, jars: Path | None):
        super().__init__()
        self.tool_class, self.jars = tool_class, jars
        self.name = tool_class.rsplit(".", 1)[-1]

    def command(self) -> list[str]:
        classes = compile_java(TOOL_SERVER_SRC, jars=self.jars)
        return java_command(["ToolServer", self.tool_class], extra_classpath=[classes], jars=self.jars)

    def run(self, args: Sequence[str], timeout: float) -> JavaResult:
        with self.lock:
            self.send(args)
            answer = json.loads(self.next_line(args, time.monotonic() + timeout))
        out = base64.b64decode(answer["out"]).decode(errors="replace")
        err = base64.b64decode(answer["err"]).decode(errors="replace")
        return JavaResult(answer["exit"], _filter_noise(out) if out else "", _filter_noise(err) if err else "")


TOOL_SERVER_SRC = INTEROP_DIR / "java" / "ToolServer.java"
_tool_servers: dict[tuple[str, Path | None], ToolServer] = {}
_tool_servers_lock = threading.Lock()


def tool_server(tool_class: str, jars: Path | None = None) -> ToolServer:
    with _tool_servers_lock:
        key = (tool_class, jars)
        if key not in _tool_servers:
            _tool_servers[key] = ToolServer(tool_class, jars)
        return _tool_servers[key]


def run_feature_command(
    bootstrap: str, *args: str, command_config: Path | None = None, timeout: float = JAVA_TOOL_TIMEOUT_S,
    jars: Path | None = None,
) -> tuple[int, str, str]:
    """`kafka-features.sh --bootstrap-server B ARGS...` (of the release whose `jars` are
    given, 4.1.1 by default), in that release's tool JVM; returns (rc, stdout, stderr)."""
    cmd = ["--bootstrap-server", bootstrap]
    if command_config is not None:
        cmd += ["--command-config", str(command_config)]
    res = tool_server("org.apache.kafka.tools.FeatureCommand", jars).run([*cmd, *args], timeout)
    return res.rc, res.stdout, res.stderr


# --------------------------------------------------------------------------------------------
# real Kafka


_KAFKA_PYTHON_UPDATE = r"""
import json, sys
from kafka.admin import KafkaAdminClient
from kafka.admin._cluster import UpdateFeatureType
import kafka.errors as Errors
bootstrap, kwargs, feature, level = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
try:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, **kwargs)
except Errors.KafkaError as e:
    print(json.dumps({"error": type(e).__name__}))
    sys.exit(0)
out = {}
try:
    try:
        a.update_features({feature: (UpdateFeatureType.UPGRADE, level)})
        out["result"] = "ok"
    except Errors.KafkaError as e:
        out["error"] = type(e).__name__
    f = a.describe_features()
    out["finalized"] = {n: i["finalized"][1] for n, i in f.items() if "finalized" in i}
finally:
    a.close()
print(json.dumps(out))
"""


def kafka_python_update_features(bootstrap: str, client: dict, feature: str, level: int, timeout: float = 90) -> dict:
    """kafka-python's KafkaAdminClient (with `client`'s keyword arguments, e.g. its security
    settings) upgrades `feature` to `level`, then describes the features:
    {"result": "ok"} or {"error": exception class name}, and {"finalized": {name: level}}."""
    import sys

    cp = subprocess.run([sys.executable, "-c", _KAFKA_PYTHON_UPDATE, bootstrap, json.dumps(client), feature,
                         str(level)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    lines = [line for line in cp.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise EnvError(f"kafka-python UpdateFeatures printed nothing (rc={cp.returncode})\n{cp.stdout}\n"
                       f"{cp.stderr[-4000:]}")
    return json.loads(lines[-1])


def new_cluster_id() -> str:
    """A random cluster id as Kafka's Uuid.randomUuid makes them: never starting with "-",
    which kafka-storage's argument parser would read as an option (1 id in 64 otherwise)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    properties_path: Path
    log_path: Path  # INFO log written by log4j2
    console_path: Path  # stdout/stderr of the JVM
    extra_ports: list[int] = field(default_factory=list)  # for listeners a test adds
    proc: subprocess.Popen | None = None
    # Listener for inter-broker traffic when the cluster keeps it off the client listener.
    internal_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def internal_bootstrap(self) -> str | None:
        return None if self.internal_port is None else f"127.0.0.1:{self.internal_port}"

    @property
    def probe_bootstrap(self) -> str:
        """Where the harness itself talks to the node: never the client listener when there is
        another one, so that the client listener only ever sees the clients under test."""
        return self.internal_bootstrap or self.bootstrap

    @property
    def connections_log_path(self) -> Path:
        """DEBUG lines of the socket acceptors: one per accepted connection, on any listener."""
        return self.dir / "connections.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# Kafka 4.1.1's kafka.network.Acceptor (logger kafka.network.DataPlaneAcceptor) logs at DEBUG:
#   Accepted connection from /127.0.0.1:54321 on /127.0.0.1:9092 and assigned it to processor 3, ...
_ACCEPTED_RE = re.compile(
    r"Accepted connection from /?(?P<rhost>[^\s:/]*):(?P<rport>\d+) on /?(?P<lhost>[^\s:/]*):(?P<lport>\d+)"
)


@dataclass(frozen=True)
class AcceptedConnection:
    node_id: int
    remote_host: str
    remote_port: int
    local_port: int
    line: str

    def __str__(self) -> str:
        return f"node {self.node_id} accepted {self.remote_host}:{self.remote_port} on :{self.local_port}"


def metadata_brokers(bootstrap: str, timeout: float = 5.0) -> list[tuple[int, str, int]]:
    """Metadata v1 for no topics; returns the live brokers [(node_id, host, port)]."""
    host, port = split_hostport(bootstrap)
    client_id = b"kshim-interop"
    frame = struct.pack(">hhih", 3, 1, 7, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        resp = _recv_exact(sock, size)
    pos = 4
    (n,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    brokers = []
    for _ in range(n):
        node_id, hlen = struct.unpack_from(">ih", resp, pos)
        pos += 6
        bhost = resp[pos : pos + hlen].decode()
        pos += hlen
        (bport, rlen) = struct.unpack_from(">ih", resp, pos)
        pos += 6 + max(rlen, 0)
        brokers.append((node_id, bhost, bport))
    return brokers


# A test broker lives minutes and carries little traffic: the C1 compiler alone and the serial
# collector make a three-node cluster ready in 8 s on 9 CPU-seconds (12 s and 18 with the JVM's
# defaults, G1 and C2) and idle on half the CPU. A broker under hours of load (the soak) runs
# with the JVM's defaults instead: `jvm_options=()`.
TEST_BROKER_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class KafkaCluster:
    """N combined broker+controller KRaft nodes on loopback, in their own temp directory.

    `format_args` go to `kafka.tools.StorageTool format`, e.g. ["--release-version", "4.0-IV3"]
    or ["--feature", "group.version=0"]. `extra_properties` are added to every server.properties.
    `listener_overrides` are properties whose values are str.format()ed per node with {port},
    {controller_port}, {node_id} and {extra0}, {extra1}, ... (`extra_ports` more free ports per node).
    With `separate_inter_broker`, brokers replicate over an INTERNAL listener of their own
    ({internal_port}), and the harness's readiness probes use it too: the PLAINTEXT client
    listener then sees nothing but the clients (or proxies) under test. With `dynamic_quorum`
    (one node), the node is formatted as Kafka's quickstart formats one, `--standalone` with
    `controller.quorum.bootstrap.servers`, which finalizes kraft.version 1; otherwise the
    voters are static (`controller.quorum.voters`) and kraft.version stays 0. `jvm_options`
    replace the test brokers' cheap JIT and collector settings (TEST_BROKER_JVM_OPTIONS).
    `class_archive`: whether the nodes start from a class-data archive of their jars
    (broker_cds_archive); by default only with the suite's jars, whose brokers a run starts
    dozens of times (writing one costs about as much as three starts save).
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        workdir: Path | None = None,
        format_args: Sequence[str] = (),
        extra_properties: dict[str, str] | None = None,
        listener_overrides: dict[str, str] | None = None,
        extra_ports: int = 0,
        heap: str = "768m",
        separate_inter_broker: bool = False,
        jars: Path | None = None,
        dynamic_quorum: bool = False,
        jvm_options: Sequence[str] = TEST_BROKER_JVM_OPTIONS,
        class_archive: bool | None = None,
    ):
        # Another release's broker: its own jars (release_jars), not the suite's 4.1.1.
        self.jars = require_jars(jars)
        self.class_archive = self.jars == require_jars() if class_archive is None else class_archive
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        if dynamic_quorum and nodes != 1:
            raise ValueError("dynamic_quorum formats one node with --standalone")
        self.dynamic_quorum = dynamic_quorum
        self.cluster_id = new_cluster_id()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kshim-kafka-"))
        self.format_args = list(format_args)
        self.extra_properties = dict(extra_properties or {})
        self.listener_overrides = dict(listener_overrides or {})
        self.heap = heap
        self.jvm_options = list(jvm_options)
        self.separate_inter_broker = separate_inter_broker
        self.attached = False
        self.on_node_started = None
        internal = 1 if separate_inter_broker else 0
        per_node = 2 + extra_ports + internal
        ports = free_ports(per_node * nodes)
        self.nodes = [
            KafkaNode(
                node_id=i + 1,
                port=ports[per_node * i],
                controller_port=ports[per_node * i + 1],
                extra_ports=ports[per_node * i + 2 : per_node * i + 2 + extra_ports],
                internal_port=ports[per_node * (i + 1) - 1] if internal else None,
                dir=self.workdir / f"node{i + 1}",
                properties_path=self.workdir / f"node{i + 1}" / "server.properties",
                log_path=self.workdir / f"node{i + 1}" / "server.log",
                console_path=self.workdir / f"node{i + 1}" / "console.log",
            )
            for i in range(nodes)
        ]

    # -- public

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def log_path(self) -> Path:
        return self.nodes[0].log_path

    def start(self, timeout: float = KAFKA_START_TIMEOUT_S) -> "KafkaCluster":
        if os.environ.get("KSHIM_QUICK"):
            raise EnvError(
                "this test starts a Kafka broker, but the quick tier (scripts/test.sh --quick) runs "
                "only tests that need none: take it through a broker fixture of conftest.py "
                "(kafka_broker, kafka_trio, kafka_cluster), which marks it `broker`"
            )
        try:
            for node in self.nodes:
                self._write_properties(node)
            # One StorageTool JVM per node, side by side: a few seconds each.
            errors = []
            threads = [threading.Thread(target=self._format_into, args=(node, errors)) for node in self.nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            for node in self.nodes:
                self._launch(node)
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                self._wait_ready(node, deadline, timeout)
        except BaseException:
            self.kill()
            raise
        return self

    @property
    def internal_bootstrap(self) -> str:
        """The inter-broker listeners (the client listeners when there are no separate ones)."""
        return ",".join(n.probe_bootstrap for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id}")

    def stop(self) -> None:
        self._refuse_if_attached("stop")
        # Signal every node first so that their controlled shutdowns overlap.
        self._signal_every_node(signal.SIGTERM)
        for node in self.nodes:
            stop_process(node.proc)

    def _signal_every_node(self, sig: int) -> None:
        for node in self.nodes:
            if node.alive():
                try:
                    os.kill(node.proc.pid, sig)
                except ProcessLookupError:
                    pass

    def stop_node(self, node_id: int, *, kill: bool = False, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Stop one node by its PID: SIGTERM (a controlled shutdown) or, with `kill`, SIGKILL."""
        node = self.node(node_id)
        if kill and node.alive():
            try:
                os.kill(node.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return stop_process(node.proc, timeout=timeout)

    def start_node(self, node_id: int, timeout: float = KAFKA_START_TIMEOUT_S) -> KafkaNode:
        """Start a stopped node again, on the same ports and data, and wait until it answers."""
        node = self.node(node_id)
        if node.alive():
            raise EnvError(f"Kafka node {node_id} is already running")
        # The listener ports were the node's a moment ago; the JVM binds with SO_REUSEADDR,
        # but wait for the kernel to let go of them anyway so that a bind error is not a race.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            port_accepts("127.0.0.1", p, timeout=0.2) for p in (node.port, node.controller_port)
        ):
            time.sleep(0.2)
        self._launch(node)
        self._wait_ready(node, time.monotonic() + timeout, timeout)
        return node

    def restart_node(self, node_id: int, *, kill: bool = False, timeout: float = KAFKA_START_TIMEOUT_S) -> KafkaNode:
        self.stop_node(node_id, kill=kill)
        return self.start_node(node_id, timeout=timeout)

    def wait_brokers_registered(self, node_ids: Iterable[int] | None = None, timeout: float = 60.0) -> None:
        """Wait until every node's Metadata lists all of `node_ids` (default: every node) as
        live brokers; a restarted node is unfenced only some time after it answers."""
        want = set(node_ids if node_ids is not None else (n.node_id for n in self.nodes))
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                seen = [set(b[0] for b in metadata_brokers(n.probe_bootstrap)) for n in self.nodes if n.alive()]
                if seen and all(want <= s for s in seen):
                    return
                last = seen
            except (OSError, EnvError, struct.error, IndexError) as e:
                last = repr(e)
            time.sleep(0.5)
        raise EnvError(f"brokers {sorted(want)} not all registered within {timeout}s (last: {last})")

    # -- accepted connections on the client listener

    def connection_marks(self) -> dict[int, int]:
        """Current size of every node's connections.log, for `accepted_connections(since=...)`."""
        marks = {}
        for n in self.nodes:
            try:
                marks[n.node_id] = n.connections_log_path.stat().st_size
            except FileNotFoundError:
                marks[n.node_id] = 0
        return marks

    def accepted_connections(self, since: dict[int, int] | None = None) -> list["AcceptedConnection"]:
        """Connections each node accepted on its client (PLAINTEXT) listener, after `since`."""
        out = []
        for n in self.nodes:
            start = (since or {}).get(n.node_id, 0)
            try:
                with open(n.connections_log_path, "rb") as f:
                    f.seek(start)
                    data = f.read().decode(errors="replace")
            except FileNotFoundError:
                continue
            for line in data.splitlines():
                m = _ACCEPTED_RE.search(line)
                if m and int(m.group("lport")) == n.port:
                    out.append(
                        AcceptedConnection(n.node_id, m.group("rhost"), int(m.group("rport")), int(m.group("lport")), line)
                    )
        return out

    def kill(self) -> None:
        """SIGKILL every node: for a cluster whose data is thrown away, a controlled shutdown
        (seconds per node, longer on a loaded machine) buys nothing."""
        self._signal_every_node(signal.SIGKILL)
        for node in self.nodes:
            stop_process(node.proc, timeout=10)

    def cleanup(self) -> None:
        if self.attached:
            return  # the process that started it stops it
        self.kill()
        if self._own_workdir and not os.environ.get("KSHIM_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- handing a started cluster to another process

    def state(self) -> dict:
        """What another process needs to use this running cluster (see `attach`)."""
        return {
            "cluster_id": self.cluster_id,
            "workdir": str(self.workdir),
            "separate_inter_broker": self.separate_inter_broker,
            "heap": self.heap,
            "jvm_options": self.jvm_options,
            "nodes": [
                {
                    "node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
                    "extra_ports": n.extra_ports, "internal_port": n.internal_port, "dir": str(n.dir),
                    "pid": n.pid,
                }
                for n in self.nodes
            ],
        }

    @classmethod
    def attach(cls, state: dict) -> "KafkaCluster":
        """A running cluster started by another process (tests/interop/brokers.py serve).
        `cleanup` leaves it alone, and stopping it whole is refused; a test may stop and
        start single nodes, and must leave them running (conftest's `kafka_trio_faults`)."""
        self = cls.__new__(cls)
        self.cluster_id = state["cluster_id"]
        self._own_workdir = False
        self.workdir = Path(state["workdir"])
        self.format_args = []
        self.extra_properties = {}
        self.listener_overrides = {}
        self.heap = state["heap"]
        self.jvm_options = list(state["jvm_options"])
        self.separate_inter_broker = state["separate_inter_broker"]
        self.jars = require_jars()
        self.class_archive = True
        self.attached = True
        self.on_node_started = None
        self.nodes = []
        for n in state["nodes"]:
            d = Path(n["dir"])
            node = KafkaNode(
                node_id=n["node_id"], port=n["port"], controller_port=n["controller_port"], dir=d,
                properties_path=d / "server.properties", log_path=d / "server.log",
                console_path=d / "console.log", extra_ports=list(n["extra_ports"]),
                internal_port=n["internal_port"],
            )
            node.proc = ForeignProcess(n["pid"])
            self.nodes.append(node)
        return self

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

    # -- internals

    def _refuse_if_attached(self, what: str) -> None:
        if self.attached:
            raise EnvError(f"a test tried to {what} a shared cluster ({self.bootstrap})")

    def _voters(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)

    def _write_properties(self, node: KafkaNode) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": str(min(3, len(self.nodes))),
            "transaction.state.log.replication.factor": str(min(3, len(self.nodes))),
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": str(min(3, len(self.nodes))),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        if self.dynamic_quorum:
            props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{node.controller_port}"
        else:
            props["controller.quorum.voters"] = self._voters()
        if node.internal_port is not None:
            props["listeners"] = (
                f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port},"
                f"CONTROLLER://127.0.0.1:{node.controller_port}"
            )
            props["advertised.listeners"] = (
                f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port}"
            )
            props["inter.broker.listener.name"] = "INTERNAL"
            props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
        names = {f"extra{i}": p for i, p in enumerate(node.extra_ports)}
        for key, value in self.listener_overrides.items():
            props[key] = value.format(
                port=node.port,
                controller_port=node.controller_port,
                node_id=node.node_id,
                internal_port=node.internal_port,
                **names,
            )
        props.update(self.extra_properties)
        node.properties_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _format_into(self, node: KafkaNode, errors: list) -> None:
        try:
            self._format(node)
        except EnvError as e:
            errors.append(e)

    def _format(self, node: KafkaNode) -> None:
        # A tool's JVM: C1 alone, the serial collector and, with the default jars, the tools'
        # class-data archive (a format is about a second of class loading, which C2 and G1's
        # threads only add to): 1.1 CPU-seconds a node instead of 1.7.
        cmd = [
            "java",
            "-Xmx256m",
            *TEST_BROKER_JVM_OPTIONS,
            *(cds_args() if self.jars == require_jars() else []),
            f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
            "-cp",
            classpath(jars=self.jars),
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id,
            "-c",
            str(node.properties_path),
            *(["--standalone"] if self.dynamic_quorum else []),
            *self.format_args,
        ]
        try:
            cp = subprocess.run(cmd, capture_output=True, text=True, timeout=JAVA_TOOL_TIMEOUT_S, cwd=str(node.dir))
        except subprocess.TimeoutExpired:
            raise EnvError(f"StorageTool format timed out for node {node.node_id}")
        (node.dir / "format.log").write_text(cp.stdout + cp.stderr)
        if cp.returncode != 0:
            raise EnvError(f"StorageTool format failed (rc={cp.returncode}):\n{cp.stdout}\n{cp.stderr}")

    def _launch(self, node: KafkaNode) -> None:
        archive = broker_cds_archive(self.jars) if self.class_archive else None
        cmd = [
            "java",
            f"-Xmx{self.heap}",
            "-Xms128m",
            *self.jvm_options,
            *([f"-XX:SharedArchiveFile={archive}", *_QUIET_CDS] if archive else []),
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={BROKER_LOG4J}",
            f"-Dkafka.logs.dir={node.dir}",
            "-cp",
            classpath(jars=self.jars),
            "kafka.Kafka",
            str(node.properties_path),
        ]
        # A node of a shared cluster started again here belongs to the process that shares
        # the cluster, which stops it by the PID it is told (tests/interop/brokers.py).
        node.proc = _spawn(cmd, cwd=node.dir, log_path=node.console_path, outlive_this_process=self.attached)
        if self.on_node_started is not None:
            self.on_node_started(node)

    def _wait_ready(self, node: KafkaNode, deadline: float, timeout: float) -> None:
        last_err = "no attempt"
        while time.monotonic() < deadline:
            if not node.alive():
                raise EnvError(
                    f"Kafka node {node.node_id} exited with rc={node.proc.returncode} during startup\n"
                    f"--- {node.console_path}:\n{tail(node.console_path)}\n--- {node.log_path}:\n{tail(node.log_path)}"
                )
            try:
                info = api_versions(node.probe_bootstrap, timeout=2.0)
                if info.error_code == 0 and "metadata.version" in info.finalized:
                    return
                last_err = f"ApiVersions error={info.error_code} finalized={info.finalized}"
            except (OSError, EnvError, struct.error, IndexError) as e:
                last_err = repr(e)
            time.sleep(0.5)
        raise EnvError(
            f"Kafka node {node.node_id} on {node.probe_bootstrap} did not answer within {timeout}s ({last_err})\n"
            f"--- {node.log_path} (last lines):\n{tail(node.log_path)}\n--- {node.console_path}:\n{tail(node.console_path)}"
        )


def start_kafka(nodes: int = 1, **kwargs) -> KafkaCluster:
    """Start a KRaft cluster of `nodes` combined nodes; call `.cleanup()` when done."""
    return KafkaCluster(nodes, **kwargs).start()


class TcpRelay:
    """A TCP relay on loopback: each accepted client gets its own connection to `target`
    (from the local address `source` when given), opened with `header(client, target port)`
    when `header` is set (a load balancer's PROXY protocol header), and bytes are pumped both
    ways. While `refusing` is set, accepted clients are closed at once (a target that is away).
    `client` is the address `header` is told."""

    def __init__(self, target: tuple[str, int], source: str | None = None):
        self.target = target
        self.source = source
        self.header = None
        self.refusing = False
        self.client = ("192.0.2.10", 40000)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(
                    self.target, timeout=5, source_address=(self.source, 0) if self.source else None)
                upstream.settimeout(None)
                if self.header is not None:
                    upstream.sendall(self.header(self.client, self.target[1]))
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


# --------------------------------------------------------------------------------------------
# the librdkafka mock cluster

MOCK_CLUSTER_SRC = INTEROP_DIR / "mock_cluster.py"


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    except (FileNotFoundError, PermissionError):
        pass
    return out


def tcp_sockets() -> list[tuple[int, int, str, str]]:
    """Every TCP socket of the machine's /proc/net/tcp and tcp6:
    [(local_port, remote_port, state, inode)], the state as the table's hex column ("01" is
    established)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9:
                out.append((int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16), cols[3], cols[9]))
    return out


def established_to(ports: set[int], state: str | None = "01") -> list[tuple[int, int, str]]:
    """Established loopback TCP sockets whose remote port is in `ports`:
    [(local_port, remote_port, inode)], i.e. the client ends of connections to those ports.
    `state=None` takes them in any state (closing ones too).

    A socket whose local port is a listening one is the server end of another connection, left
    out: its client's ephemeral port can be one of `ports` when the client connects from
    another loopback address (the connection storms come from 127.0.0.2 and up) than the one a
    listener holds that port on."""
    sockets = tcp_sockets()
    listening = {local for local, _, st, _ in sockets if st == "0A"}
    return [(local, remote, inode) for local, remote, st, inode in sockets
            if remote in ports and local not in listening and (state is None or st == state)]


class MockCluster:
    """A librdkafka mock cluster (confluent-kafka's `test.mock.num.brokers`) in a helper
    process of its own, stopped by PID. `.bootstrap` is the mock's broker list."""

    def __init__(self, brokers: int = 3, *, workdir: Path | None = None, lifetime_s: float = 1200):
        self.brokers = brokers
        self.lifetime_s = lifetime_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kshim-mock-"))
        self.log_path = self.workdir / "mock.log"
        self.proc: subprocess.Popen | None = None
        self.bootstrap: str | None = None

    @property
    def ports(self) -> set[int]:
        return {split_hostport(b)[1] for b in (self.bootstrap or "").split(",") if b}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30) -> "MockCluster":
        import sys

        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise EnvError(f"confluent-kafka is not installed in {sys.executable}; run: {INSTALL_HINT}")
        cmd = [sys.executable, str(MOCK_CLUSTER_SRC), "--brokers", str(self.brokers), "--seconds", str(self.lifetime_s)]
        self.proc = _spawn(cmd, cwd=self.workdir, log_path=self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith("MOCK_BOOTSTRAP "):
                    self.bootstrap = line.split()[1]
                    if all(port_accepts(*split_hostport(b)) for b in self.bootstrap.split(",")):
                        return self
            if not self.alive():
                raise EnvError(f"mock cluster helper exited rc={self.proc.returncode}\n{tail(self.log_path)}")
            time.sleep(0.1)
        self.stop()
        raise EnvError(f"mock cluster did not announce its bootstrap within {timeout}s\n{tail(self.log_path)}")

    def own_socket_inodes(self) -> set[str]:
        return _socket_inodes(self.proc.pid) if self.alive() else set()

    def stop(self) -> None:
        stop_process(self.proc)

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir and not os.environ.get("KSHIM_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)


class ConnectionSampler:
    """Samples, every `interval` seconds in a thread, the client ends of established
    connections to `ports` (a server that does not log its accepts, like the mock cluster).
    `own_inodes`, if given, names the sockets of a process whose connections are expected
    (the mock's own client); it is asked when a connection is first seen, since such a
    connection may be gone by the time the test looks."""

    def __init__(self, ports: set[int], interval: float = 0.02, own_inodes=None):
        self.ports = set(ports)
        self.interval = interval
        self.own_inodes = own_inodes
        self.seen: dict[tuple[int, int], str] = {}
        self.owned: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            new = [c for c in established_to(self.ports) if (c[0], c[1]) not in self.seen]
            if new and self.own_inodes is not None:
                self.owned |= self.own_inodes() & {inode for _, _, inode in new}
            for lport, rport, inode in new:
                self.seen.setdefault((lport, rport), inode)
            self._stop.wait(self.interval)

    def __enter__(self) -> "ConnectionSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# --------------------------------------------------------------------------------------------
# kshim


_target_dir: Path | None = None


def target_dir() -> Path:
    """Where cargo builds: $KSHIM_TARGET_DIR (the test command sets it), else what cargo says
    (CARGO_TARGET_DIR or a cargo config's build.target-dir), else ./target."""
    global _target_dir
    if os.environ.get("KSHIM_TARGET_DIR"):
        return Path(os.environ["KSHIM_TARGET_DIR"])
    if _target_dir is None:
        try:
            out = subprocess.run([str(REPO_ROOT / "scripts" / "cargo-target-dir")], capture_output=True,
                                 text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        _target_dir = Path(out) if out else REPO_ROOT / "target"
    return _target_dir


def kshim_binary() -> Path:
    return Path(os.environ.get("KSHIM_BIN") or target_dir() / "release" / "kshim")


def require_kshim_binary(path: Path | None = None) -> Path:
    path = Path(path or kshim_binary())
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EnvError(
            f"kshim binary not found or not executable at {path}. "
            "Build it with `cargo build --release` in the repository root, or set KSHIM_BIN."
        )
    return path


def _toml_top_level_keys(config_toml: str) -> set[str]:
    try:
        return set(tomllib.loads(config_toml).keys())
    except tomllib.TOMLDecodeError as e:
        raise EnvError(f"kshim test config is not valid TOML: {e}\n{config_toml}")


def compose_kshim_config(config_toml: str, *, port: int, data_dir: Path, draft_tags: bool,
                         kafka_release: str | None = "4.1") -> str:
    """The test's TOML plus the keys every test kshim needs, unless the test set them itself.

    `kafka_release`: the release a standalone kshim presents. The suite's standalone
    expectations were written against a Kafka 4.1.1 broker, hence "4.1"; None leaves kshim's
    default (the newest release), which the documentation's examples show and
    test_kafka_releases checks against a 4.4.0 broker."""
    keys = _toml_top_level_keys(config_toml)
    head = []
    defaults = {
        "listen": f'"127.0.0.1:{port}"',
        "advertised_listener": f'"127.0.0.1:{port}"',
        "data_dir": json.dumps(str(data_dir)),
        "node_id": "1",
        "cluster_id": json.dumps(new_cluster_id()),
    }
    if kafka_release is not None:
        defaults["kafka_release"] = json.dumps(kafka_release)
    for key, value in defaults.items():
        if key not in keys:
            head.append(f"{key} = {value}")
    tail_parts = []
    if "discovery" not in keys:
        tail_parts.append(f"[discovery]\ndraft_tags = {'true' if draft_tags else 'false'}\n")
    return "\n".join(head) + "\n\n" + config_toml.strip() + "\n\n" + "\n".join(tail_parts)


def compose_upstream_config(
    config_toml: str,
    *,
    port: int,
    data_dir: Path,
    upstream: str | None,
    refresh_interval_ms: int | None,
    port_base: int | None,
    listener_ports: dict[int, int] | None,
) -> str:
    """The test's TOML plus listen, data_dir and an [upstream] table (proxy mode).

    `upstream` None leaves the broker list to `kshim serve --upstream`."""
    keys = _toml_top_level_keys(config_toml)
    head = []
    if "listen" not in keys:
        head.append(f'listen = "127.0.0.1:{port}"')
    if "data_dir" not in keys:
        head.append(f"data_dir = {json.dumps(str(data_dir))}")
    parts = ["\n".join(head), config_toml.strip()]
    if "upstream" not in keys:
        up = ["[upstream]"]
        if upstream is not None:
            up.append(f"bootstrap = {json.dumps(upstream)}")
        if refresh_interval_ms is not None:
            up.append(f"refresh_interval_ms = {int(refresh_interval_ms)}")
        if port_base is not None or listener_ports:
            up += ["", "[upstream.listeners]"]
            if port_base is not None:
                up.append(f"port_base = {int(port_base)}")
            if listener_ports:
                up += ["", "[upstream.listeners.ports]"]
                up += [f'"{node_id}" = {p}' for node_id, p in sorted(listener_ports.items())]
        if len(up) > 1:  # no empty [upstream] table: the brokers may all come from --upstream
            parts.append("\n".join(up))
    return "\n\n".join(p for p in parts if p) + "\n"


# kshim (RUST_LOG=...,kshim::upstream=debug) logs every upstream TCP connection it opens as
#   ... upstream connection from 127.0.0.1:LOCALPORT to 127.0.0.1:BROKERPORT ...
_UPSTREAM_CONN_RE = re.compile(
    r"upstream connection from (?P<lhost>[^\s:]+):(?P<lport>\d+) to (?P<rhost>[^\s:]+):(?P<rport>\d+)"
)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
UPSTREAM_RUST_LOG = "info,kshim::upstream=debug"


@dataclass(frozen=True)
class UpstreamConnection:
    local_host: str
    local_port: int
    remote_host: str
    remote_port: int


def listening_ports(pid: int) -> set[int]:
    """TCP ports process `pid` is listening on (from /proc; IPv4 and IPv6)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except FileNotFoundError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            # cols: sl local_address rem_address st ... inode; st 0A = LISTEN
            if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class KshimProcess:
    """One `kshim serve` process with its own config file, data dir, port and log file.

    Without `upstream`, a standalone (discovery) kshim, configured as before. With
    `upstream="HOST:PORT,..."`, a proxy in front of those brokers: the config gets an
    [upstream] table (or, with `upstream_via_cli`, the brokers go on `--upstream`), and kshim
    runs with RUST_LOG=`rust_log` so that its upstream connections are logged.
    `listener_ports` {node_id: port} pins the per-node listeners; `port_base` 0 lets kshim
    pick an ephemeral port per node. `host` and `port` are the bootstrap listener's (default
    127.0.0.1 and a free port). `stop()` sends SIGINT, which skips the drain of SIGTERM.
    """

    def __init__(
        self,
        config_toml: str = "",
        *,
        draft_tags: bool = True,
        workdir: Path | None = None,
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
        upstream: str | None = None,
        upstream_via_cli: bool = False,
        refresh_interval_ms: int | None = 1000,
        port_base: int | None = 0,
        listener_ports: dict[int, int] | None = None,
        rust_log: str | None = None,
        env: dict[str, str] | None = None,
        kafka_release: str | None = "4.1",
        host: str = "127.0.0.1",
        port: int | None = None,
    ):
        self.binary = require_kshim_binary(binary)
        self.host = host
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kshim-"))
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Without port_base, kshim listens for node N on the listen port + 1 + N (nodes 1-3 here).
        self.port = port or free_port(following=4 if upstream is not None and port_base is None else 0)
        self.config_path = self.workdir / "kshim.toml"
        self.upstream = upstream
        self.listener_ports = dict(listener_ports or {})
        if upstream is None:
            self.config_text = compose_kshim_config(
                config_toml, port=self.port, data_dir=self.data_dir, draft_tags=draft_tags,
                kafka_release=kafka_release,
            )
        else:
            self.config_text = compose_upstream_config(
                config_toml,
                port=self.port,
                data_dir=self.data_dir,
                upstream=None if upstream_via_cli else upstream,
                refresh_interval_ms=refresh_interval_ms,
                port_base=port_base,
                listener_ports=self.listener_ports,
            )
        self.config_path.write_text(self.config_text)
        self.log_path = self.workdir / "kshim.log"
        self.extra_args = list(extra_args)
        if upstream is not None and upstream_via_cli:
            self.extra_args += ["--upstream", upstream]
        self.rust_log = rust_log if rust_log is not None else (UPSTREAM_RUST_LOG if upstream else None)
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = KSHIM_START_TIMEOUT_S) -> "KshimProcess":
        if self.alive():
            raise EnvError("kshim already running")
        cmd = [
            str(self.binary),
            "serve",
            "--config",
            str(self.config_path),
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
            *self.extra_args,
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start {' '.join(cmd)}\n".encode())
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        if self.rust_log is not None:
            env["RUST_LOG"] = self.rust_log
            env["NO_COLOR"] = "1"
        env.update(self.extra_env)
        self.proc = _spawn(cmd, cwd=self.workdir, log_path=self.log_path, env=env)
        deadline = time.monotonic() + timeout
        # Ready once its bootstrap, every pinned per-node listener and the admin API accept.
        addresses = [(self.host, p) for p in (self.port, *self.listener_ports.values())]
        addresses += self._admin_address()
        while time.monotonic() < deadline:
            if not self.alive():
                rc = self.proc.returncode
                raise EnvError(f"kshim exited with rc={rc} during startup\n--- {self.log_path}:\n{tail(self.log_path)}")
            if all(port_accepts(h, p, timeout=0.5) for h, p in addresses):
                return self
            time.sleep(0.1)
        self.stop()
        raise EnvError(f"kshim did not accept on {self.bootstrap} within {timeout}s\n{tail(self.log_path)}")

    def stop(self) -> int | None:
        """SIGINT: kshim stops without the drain SIGTERM starts with (shutdown_delay_ms),
        which no test waits for unless it asks (test_drain.py)."""
        return stop_process(self.proc, sig=signal.SIGINT)

    def _admin_address(self) -> list[tuple[str, int]]:
        """The admin API's fixed address, when the config gives one (it binds after the Kafka
        listener, so a test that calls it at once would otherwise race it)."""
        try:
            listen = tomllib.loads(self.config_text).get("admin", {}).get("listen")
        except tomllib.TOMLDecodeError:
            return []
        host, _, port = listen.rpartition(":") if isinstance(listen, str) else ("", "", "")
        host = "127.0.0.1" if host in ("", "0.0.0.0", "[::]") else host.strip("[]")
        return [(host, int(port))] if port.isdigit() and int(port) != 0 else []

    def log_text(self) -> str:
        try:
            return _ANSI_RE.sub("", self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return ""

    def upstream_connections(self) -> list[UpstreamConnection]:
        """Every upstream connection kshim has logged so far (all of its runs)."""
        return [
            UpstreamConnection(m.group("lhost"), int(m.group("lport")), m.group("rhost"), int(m.group("rport")))
            for m in _UPSTREAM_CONN_RE.finditer(self.log_text())
        ]

    def upstream_local_ports(self) -> set[int]:
        """kshim-side local ports of its upstream connections, from its log."""
        return {c.local_port for c in self.upstream_connections()}

    def listening_ports(self) -> set[int]:
        """Ports the running kshim process listens on: bootstrap plus one per upstream node."""
        return listening_ports(self.proc.pid) if self.alive() else set()

    def restart(self, timeout: float = KSHIM_START_TIMEOUT_S) -> "KshimProcess":
        self.stop()
        # The port was ours a moment ago; wait briefly for the kernel to let it go.
        deadline = time.monotonic() + 10
        while port_accepts("127.0.0.1", self.port, timeout=0.2) and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.start(timeout)

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir and not os.environ.get("KSHIM_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)


def kshim_feature_config(
    finalized: dict[str, int],
    supported: dict[str, tuple[int, int]],
    extra: str = "",
) -> str:
    """A kshim config whose supported ranges and bootstrap levels are exactly the given ones."""
    lines = [extra.strip(), "", "[features.supported]"]
    for name, (lo, hi) in sorted(supported.items()):
        lines.append(f'"{name}" = {{ min = {lo}, max = {hi} }}')
    lines += ["", "[features.bootstrap]"]
    # A supported feature that is not finalized is disabled (level 0); say so explicitly, since
    # kshim otherwise finalizes every supported feature at its max level on first start.
    levels = {name: 0 for name in supported}
    levels.update(finalized)
    for name, level in sorted(levels.items()):
        lines.append(f'"{name}" = {level}')
    return "\n".join(lines).strip() + "\n"


# --------------------------------------------------------------------------------------------
# pytest glue: environment problems fail the test loudly, never skip it


def start_or_fail(thing):
    """`thing.start()`; on EnvError clean it up and fail the current test with the error."""
    import pytest

    try:
        return thing.start()
    except EnvError as e:
        msg = str(e)
    thing.cleanup()
    pytest.fail(msg, pytrace=False)


def require_or_fail(check, *args):
    """`check(*args)`; on EnvError fail the current test with the error."""
    import pytest

    try:
        return check(*args)
    except EnvError as e:
        msg = str(e)
    pytest.fail(msg, pytrace=False)
