"""Clients that misbehave cost kshim its stated bounds and no more, and never delay a
well-behaved client beside them (docs/security.md, "What one peer can hold").

- A connection that writes requests back to back and never reads: ApiVersions standalone, in
  plaintext and TLS, and Metadata v12 and Fetch forwarded to a real Apache Kafka node. kshim
  stops reading it once its client has left `max_unsent_response_bytes` of answers untaken
  (counted in `kshim_connections_muted_total`), so its RSS and heap stay flat while the client
  writes; the connection is closed after `connections_max_idle_ms` and counted as
  `write_stalled`.
- A client that reads its answers a little at a time holds no more than one that never reads.
- Many connections from one address, each pipelining without reading, hold their bounds each.
- Ten 100 MiB Produce frames at once into a kshim in a 256 MiB memory cgroup: slowed, not killed.
- A storm of TLS connections past the handshake queue: refused at once and counted, none left
  to time out or half-open.
- Requests trickled a byte at a time: cut off at `frame_read_timeout_ms`.

Beside each, a well-behaved client times an ApiVersions every 5 ms: its p99 stays under 10 ms
where kshim has the machine to itself (KSHIM_HOSTILE_SECONDS=30, the long run, or
KSHIM_HOSTILE_STRICT=1), and within its own loaded p99 plus a margin inside the test command
(STRICT below says why).
"""
from __future__ import annotations

import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import struct
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import kafka_env
import tls_support

MIB = 1 << 20
TOKEN = "hostile-" + uuid.uuid4().hex
# How long the hostile client writes once kshim has stopped reading it, and the idle timeout
# that then closes it. KSHIM_HOSTILE_SECONDS=30 is the long run (docs/security.md).
WRITE_SECONDS = float(os.environ.get("KSHIM_HOSTILE_SECONDS", "1"))
MAX_WRITE_SECONDS = 20.0 + WRITE_SECONDS
IDLE_MS = int(WRITE_SECONDS * 1000) + 2500
# What kshim may grow by while a client pipelines: its bound (1 MiB), the socket's and the
# allocator's pages, and what the first connections warm up.
RSS_GROWTH_LIMIT_MIB = 8
HEAP_GROWTH_LIMIT_MIB = 3
P99_LIMIT_S = 0.010
# The well-behaved client's p99 must stay under P99_LIMIT_S beside every hostile peer. That is
# decided where kshim has the machine to itself: the long run (KSHIM_HOSTILE_SECONDS) or
# KSHIM_HOSTILE_STRICT=1. Inside the test command two test workers, the soak and the fuzzers
# share the two cores with kshim, and a client alone waits 10-30 ms for a core now and then
# with no hostile peer at all (measured: a p99 of 9.2 ms alone); there the check is that the
# hostile peer does not make it wait much longer than that: a peer holding a runtime thread
# for long would.
STRICT = bool(os.environ.get("KSHIM_HOSTILE_STRICT") or os.environ.get("KSHIM_HOSTILE_SECONDS"))
LOADED_MARGIN_S = 0.050


def admin_table(port: int) -> str:
    return f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken = "{TOKEN}"\n'


def metrics_text(admin: kafka_env.AdminApi) -> str:
    status, text = admin.call("GET", "/metrics")
    assert status == 200, text
    return str(text)


def metric(admin: kafka_env.AdminApi, name: str, labels: str = "") -> float:
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", metrics_text(admin), re.M)
    assert found, f"{name}{labels} not in /metrics"
    return float(found.group(1))


def status_mib(pid: int, field: str) -> float:
    """A size from /proc/PID/status (VmRSS, VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


def rss_mib(pid: int) -> float:
    return status_mib(pid, "VmRSS")


class Pipeliner(threading.Thread):
    """Writes `frame` (size prefix included) back to back for `seconds` and reads nothing, or
    with `read_per_second`, that many bytes a second in small reads. The socket is non-blocking,
    so that a write the kernel takes in part goes on where it stopped."""

    def __init__(self, sock: socket.socket, frame: bytes, seconds: float, read_per_second: int = 0):
        super().__init__(daemon=True)
        self.sock = sock
        self.frame_len = len(frame)
        self.chunk = memoryview(frame * max(1, 65536 // len(frame)))
        self.seconds = seconds
        self.read_per_second = read_per_second
        self.stop = threading.Event()
        self.written = 0
        self.taken = 0
        self.error: str | None = None

    @property
    def sent(self) -> int:
        """Requests written whole."""
        return self.written // self.frame_len

    def run(self) -> None:
        self.sock.setblocking(False)
        deadline = time.monotonic() + self.seconds
        next_read = time.monotonic()
        offset = 0
        try:
            while time.monotonic() < deadline and not self.stop.is_set():
                try:
                    n = self.sock.send(self.chunk[offset:offset + 16384])
                    self.written += n
                    offset = (offset + n) % len(self.chunk)
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    time.sleep(0.01)
                if self.read_per_second and time.monotonic() >= next_read:
                    next_read += 0.1
                    try:
                        self.taken += len(self.sock.recv(self.read_per_second // 10))
                    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        pass
        except OSError as e:
            self.error = f"{type(e).__name__}: {e}"


PROBE = r"""
import json, os, socket, ssl, struct, sys, time
host, port, seconds, cafile = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
frame = bytes.fromhex(sys.argv[5])
# It stops early once this file exists, if one is named.
stop = sys.argv[6] if len(sys.argv) > 6 else ""
raw = socket.create_connection((host, port), timeout=5)
if cafile:
    context = ssl.create_default_context(cafile=cafile)
    context.check_hostname = False
    raw = context.wrap_socket(raw, server_hostname=host)
raw.settimeout(5)
def exact(n):
    out = b""
    while len(out) < n:
        chunk = raw.recv(n - len(out))
        if not chunk:
            raise SystemExit("closed")
        out += chunk
    return out
# Connected: a test that starts others after it waits for this line.
print("connected", flush=True)
latencies = []
deadline = time.monotonic() + seconds
while time.monotonic() < deadline and not (stop and os.path.exists(stop)):
    started = time.perf_counter()
    raw.sendall(frame)
    (size,) = struct.unpack(">i", exact(4))
    exact(size)
    latencies.append(time.perf_counter() - started)
    time.sleep(0.005)
print(json.dumps(latencies))
"""


class LatencyProbe:
    """A well-behaved client in a process of its own (the test's threads share one
    interpreter lock): one connection, one ApiVersions v3 every 5 ms, each timed."""

    def __init__(self, bootstrap: str, seconds: float, cafile: Path | None = None):
        host, port = kafka_env.split_hostport(bootstrap)
        frame = kafka_env.api_versions_request(3, ("well-behaved", "1"))
        frame = struct.pack(">i", len(frame)) + frame
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE, host, str(port), str(seconds), str(cafile or ""), frame.hex()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.seconds = seconds
        self.latencies: list[float] = []

    def p99(self) -> float:
        out, err = self.proc.communicate(timeout=self.seconds + 30)
        assert self.proc.returncode == 0, f"the well-behaved client failed: {err[-2000:]}"
        self.latencies = json.loads(out.strip().splitlines()[-1])
        # A loaded machine answers fewer in the time (44 in 1.5 s were seen on CI).
        assert len(self.latencies) >= 20, f"only {len(self.latencies)} answers"
        return statistics.quantiles(self.latencies, n=100)[98]


def assert_answered_promptly(p99: float, alone: float | None, what: str) -> None:
    """The well-behaved client's p99 beside a hostile peer (`alone`: its p99 without one,
    measured just before), judged as STRICT says."""
    shown = f"{what}: a well-behaved client's ApiVersions p99 was {p99 * 1000:.1f} ms beside it"
    if alone is not None:
        shown += f" ({alone * 1000:.1f} ms alone)"
    if STRICT:
        assert p99 <= P99_LIMIT_S, shown
    else:
        assert p99 <= max(P99_LIMIT_S, 3 * (alone or 0.0)) + LOADED_MARGIN_S, shown


def quiet_p99(bootstrap: str, cafile: Path | None = None) -> float:
    return LatencyProbe(bootstrap, 1.5, cafile).p99()


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether kshim has closed the connection, seen without reading what waits in it: the
    socket's TCP state (tcp_info's first byte) is CLOSE (7, after a reset) or CLOSE_WAIT (8,
    after a FIN)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] in (7, 8)


def hold_without_reading(proc: kafka_env.KshimProcess, admin: kafka_env.AdminApi, frame: bytes, what: str,
                         *, cafile: Path | None = None, read_per_second: int = 0, forwarded: bool = False,
                         answer_mib: float = 0.0) -> None:
    """The whole check for one kind of request: see the module's docstring. A `forwarded`
    hostile client keeps the broker busy too (a JVM answering thousands of requests a second
    until kshim stops reading), so inside the test command the other client's latency measures
    the machine more than kshim: it is judged in the strict runs only, as is the closing, which
    the standalone cases check on every run. `answer_mib`: the size of one answer, which the
    bound lets through once more (and the response reader may hold one more while it reads)."""
    host, port = kafka_env.split_hostport(proc.bootstrap)
    baseline_p99 = quiet_p99(proc.bootstrap, cafile)
    muted_before = metric(admin, "kshim_connections_muted_total")
    stalled_before = metric(admin, "kshim_connections_closed_total", '{reason="write_stalled"}')
    rss_before = rss_mib(proc.pid)
    heap_before = metric(admin, "kshim_heap_allocated_bytes")
    raw = socket.create_connection((host, port), timeout=5)
    # A small receive buffer, so that what the kernel holds for the client is not what it reads.
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    context = client_tls(cafile)
    sock = context.wrap_socket(raw, server_hostname=host) if context else raw
    # It writes until kshim has stopped reading it and for WRITE_SECONDS more: the kernel's
    # socket buffers (megabytes on loopback) take a slow upstream's answers first.
    hostile = Pipeliner(sock, frame, MAX_WRITE_SECONDS, read_per_second)
    probe = LatencyProbe(proc.bootstrap, WRITE_SECONDS, cafile)
    hostile.start()
    rss_peak = rss_before
    heap_peak = heap_before
    muted_at = None
    while hostile.is_alive():
        rss_peak = max(rss_peak, rss_mib(proc.pid))
        heap_peak = max(heap_peak, metric(admin, "kshim_heap_allocated_bytes"))
        if muted_at is None and metric(admin, "kshim_connections_muted_total") > muted_before:
            muted_at = time.monotonic()
        if muted_at is not None and time.monotonic() > muted_at + WRITE_SECONDS:
            hostile.stop.set()
        time.sleep(0.2)
    assert hostile.error is None, f"{what}: the hostile client failed while writing: {hostile.error}"
    p99 = probe.p99()
    rss_growth = rss_peak - rss_before
    heap_growth = (heap_peak - heap_before) / MIB
    print(f"{what}: {hostile.sent} requests written, {hostile.taken} bytes read; kshim's RSS "
          f"+{rss_growth:.1f} MiB, heap +{heap_growth:.2f} MiB; the other client's p99 "
          f"{p99 * 1000:.2f} ms (alone {baseline_p99 * 1000:.2f} ms)", file=sys.stderr)
    assert metric(admin, "kshim_connections_muted_total") > muted_before, f"{what}: never muted"
    assert rss_growth <= RSS_GROWTH_LIMIT_MIB, f"{what}: kshim's RSS grew by {rss_growth:.1f} MiB"
    heap_limit = HEAP_GROWTH_LIMIT_MIB + 2 * answer_mib
    assert heap_growth <= heap_limit, f"{what}: kshim's heap grew by {heap_growth:.2f} MiB (limit {heap_limit})"
    if STRICT or not forwarded:
        assert_answered_promptly(p99, baseline_p99, what)
    if read_per_second or (forwarded and not STRICT):
        sock.close()
        return
    # Nothing taken for connections_max_idle_ms: closed, and counted.
    assert kafka_env.wait_until(
        lambda: metric(admin, "kshim_connections_closed_total", '{reason="write_stalled"}') > stalled_before,
        timeout=IDLE_MS / 1000 + 5), f"{what}: not closed as write_stalled after the idle timeout"
    assert kafka_env.wait_until(lambda: closed_by_peer(sock), timeout=5), f"{what}: still open"
    sock.close()
    assert kafka_env.wait_until(lambda: metric(admin, "kshim_heap_allocated_bytes") < heap_before + MIB,
                                timeout=5), f"{what}: the heap did not come back"


def api_versions_frame() -> bytes:
    frame = kafka_env.api_versions_request(3, ("hostile", "1"))
    return struct.pack(">i", len(frame)) + frame


def client_tls(cafile: Path | None) -> ssl.SSLContext | None:
    if cafile is None:
        return None
    context = ssl.create_default_context(cafile=str(cafile))
    context.check_hostname = False
    return context


def standalone(kshim_factory, extra: str = "", cafile: Path | None = None,
               ) -> tuple[kafka_env.KshimProcess, kafka_env.AdminApi]:
    admin_port = kafka_env.free_port()
    proc = kshim_factory(f"connections_max_idle_ms = {IDLE_MS}\n{extra}" + admin_table(admin_port))
    admin = kafka_env.AdminApi(admin_port, TOKEN)
    assert kafka_env.wait_until(lambda: kafka_env.port_accepts("127.0.0.1", admin_port), timeout=10)
    # Warm up: the first connections fill kshim's tables and the allocator's first pages.
    for _ in range(20):
        kafka_env.api_versions(proc.bootstrap, tls=client_tls(cafile))
    return proc, admin


def test_a_client_that_never_reads_api_versions_holds_its_bound(kshim_factory):
    proc, admin = standalone(kshim_factory)
    hold_without_reading(proc, admin, api_versions_frame(), "ApiVersions, plaintext")
    # A client that reads a little at a time holds no more than one that never reads.
    hold_without_reading(proc, admin, api_versions_frame(), "ApiVersions, read at 20 KB/s",
                         read_per_second=20_000)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tls_support.Certs:
    return tls_support.make_certs(tmp_path_factory.mktemp("hostile-certs"))


def test_a_client_that_never_reads_over_tls_holds_its_bound(kshim_factory, certs):
    proc, admin = standalone(kshim_factory, tls_support.tls_table(certs), certs.ca)
    hold_without_reading(proc, admin, api_versions_frame(), "ApiVersions, TLS", cafile=certs.ca)


# A TLS stream handed over one network segment at a time (1,448 bytes: a 1,500-byte MTU less
# the IP and TCP headers and timestamps), against the same stream in 64 KiB writes.
SEGMENT = 1448
STREAM_MIB = int(os.environ.get("KSHIM_TLS_STREAM_MIB", "64"))
# What the segmented stream may cost kshim beyond the other: at most 4 MiB more peak memory,
# and at most 1.5x the CPU. The CPU is judged where kshim has the machine to itself (STRICT):
# inside the test command, where the fuzzers and the soak share the two cores, the writer is
# slowed now and then, kshim then wakes for every segment, and a wake-up per segment costs about
# twice the CPU per byte (measured alone: 2.0-2.25x with a writer paced to one segment a read,
# 1.0-1.3x with pieces back to back); there it is printed.
SEGMENTED_PEAK_MIB = 4.0
SEGMENTED_CPU_RATIO = 1.5


def metadata_request(correlation_id: int, topics: int) -> bytes:
    """A Metadata v12 request (size prefix included) for `topics` made-up topics of 200
    characters: about 13 KiB, answered by a standalone kshim with as many unknown topics."""
    header = struct.pack(">hhih", 3, 12, correlation_id, 6) + b"stress" + b"\x00"
    entries = b"".join(bytes(16) + kafka_env.encode_compact_string(f"t{i:03d}" + "x" * 196) + b"\x00"
                       for i in range(topics))
    body = kafka_env.encode_uvarint(topics + 1) + entries + b"\x00\x00\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stream_tls(bootstrap: str, cafile: Path, piece: int, total: int) -> int:
    """Writes `total` bytes of pipelined Metadata requests over TLS, in records of 16 KiB written
    to the socket `piece` bytes at a time (TCP_NODELAY: each write is its own segment), reading
    the answers as they come. Returns the answers read whole."""
    import select
    host, port = kafka_env.split_hostport(bootstrap)
    context = ssl.create_default_context(cafile=str(cafile))
    context.check_hostname = False
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            data = sock.recv(65536)
            assert data, "kshim closed the connection during the handshake"
            incoming.write(data)
    sock.sendall(outgoing.read())
    sock.setblocking(False)
    block = b"".join(metadata_request(i, 60) for i in range(64))
    requests_per_block = 64
    sent = 0
    wanted = 0
    pending = bytearray()
    answers = bytearray()
    answered = 0
    deadline = time.monotonic() + 120

    def encrypt_ahead() -> None:
        """Records are encrypted ahead of the socket, so that pieces run across their
        boundaries as segments of a stream do."""
        nonlocal sent, wanted, pending
        while len(pending) < 65536 and sent < total:
            at = sent % len(block)
            chunk = block[at:at + 16384]
            tls.write(chunk)
            sent += len(chunk)
            if at + len(chunk) == len(block):
                wanted += requests_per_block
            pending += outgoing.read()

    while (sent < total or pending or answered < wanted) and time.monotonic() < deadline:
        encrypt_ahead()
        readable, writable, _ = select.select([sock], [sock] if pending else [], [], 0.05)
        # Pieces back to back, as segments arrive at line rate on a real link (a 1,448-byte
        # segment every 1.2 microseconds at 10 Gbit/s).
        while writable and pending:
            try:
                n = sock.send(pending[:piece])
                del pending[:n]
            except BlockingIOError:
                break
            encrypt_ahead()
        if readable:
            data = sock.recv(1 << 18)
            assert data, "kshim closed the connection"
            incoming.write(data)
            while True:
                try:
                    answers += tls.read(1 << 18)
                except ssl.SSLWantReadError:
                    break
            while len(answers) >= 4:
                (size,) = struct.unpack_from(">i", answers, 0)
                if len(answers) < 4 + size:
                    break
                del answers[:4 + size]
                answered += 1
    sock.close()
    assert answered >= wanted, f"{answered} answers of {wanted}"
    return answered


def test_a_tls_stream_cut_into_network_segments_costs_what_large_pieces_do(kshim_factory, certs):
    """The same STREAM_MIB of TLS, once written in 64 KiB pieces and once in 1,448-byte ones,
    each into a kshim of its own: kshim's read buffer for ciphertext keeps its bound however
    the stream is cut (src/tls/stream.rs), so the segmented stream's peak heap and CPU are about
    the other's. Its resident memory is held to twice the heap's margin: what the allocator keeps
    between its releases (once a second) differs between runs by a few MiB either way."""
    total = STREAM_MIB * MIB
    costs = {}
    for piece in (65536, SEGMENT):
        proc, admin = standalone(kshim_factory, tls_support.tls_table(certs), certs.ca)
        stream_tls(proc.bootstrap, certs.ca, piece, 4 * MIB)  # warm-up: the allocator's pages
        # The peak from here on: writing 5 to clear_refs resets VmHWM to the current RSS.
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")
        heap_before = metric(admin, "kshim_heap_allocated_bytes")
        before_rss, before_cpu = rss_mib(proc.pid), cpu_seconds(proc.pid)
        heap_peak = [heap_before]
        streaming = threading.Event()

        def sample() -> None:
            while not streaming.is_set():
                heap_peak[0] = max(heap_peak[0], metric(admin, "kshim_heap_allocated_bytes"))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            answered = stream_tls(proc.bootstrap, certs.ca, piece, total)
        finally:
            streaming.set()
            sampler.join()
        costs[piece] = ((heap_peak[0] - heap_before) / MIB, status_mib(proc.pid, "VmHWM") - before_rss,
                        cpu_seconds(proc.pid) - before_cpu)
        print(f"{STREAM_MIB} MiB of TLS in {piece}-byte pieces: {answered} answers; kshim's peak heap "
              f"+{costs[piece][0]:.1f} MiB, RSS +{costs[piece][1]:.1f} MiB, {costs[piece][2]:.2f} CPU s",
              file=sys.stderr)
        proc.stop()
    (large_heap, large_rss, large_cpu) = costs[65536]
    (segment_heap, segment_rss, segment_cpu) = costs[SEGMENT]
    ratio = segment_cpu / max(large_cpu, 0.01)
    print(f"segmented against large: heap {segment_heap - large_heap:+.1f} MiB, RSS "
          f"{segment_rss - large_rss:+.1f} MiB, CPU {ratio:.2f}x", file=sys.stderr)
    assert segment_heap <= large_heap + SEGMENTED_PEAK_MIB, costs
    assert segment_rss <= large_rss + 2 * SEGMENTED_PEAK_MIB, costs
    if STRICT:
        assert ratio <= SEGMENTED_CPU_RATIO, costs


@pytest.fixture(scope="module")
def filled_topic(kafka_broker) -> str:
    """A topic on the shared broker with 4 MiB of records in partition 0."""
    topic = "hostile-" + uuid.uuid4().hex[:8]
    host, port = kafka_env.split_hostport(kafka_broker.bootstrap)
    with socket.create_connection((host, port), timeout=10) as sock:
        deadline = time.monotonic() + 30
        batch = kafka_env.record_batch(256, 1024)
        correlation_id = 0
        written = 0
        while written < 16:
            correlation_id += 1
            sock.sendall(kafka_env.metadata_v12(correlation_id, topic))
            kafka_env.read_frame(sock)
            correlation_id += 1
            sock.sendall(kafka_env.produce_v7(correlation_id, topic, 1, batch))
            response = kafka_env.read_frame(sock)
            name_len = struct.unpack(">h", response[8:10])[0]
            pos = 10 + name_len + 4
            code = struct.unpack(">h", response[pos + 4:pos + 6])[0]
            if code == 0:
                written += 1
            else:
                assert time.monotonic() < deadline, f"Produce to {topic} still fails with error {code}"
                time.sleep(0.3)
    return topic


# Metadata fills kshim's socket buffers slowly (a broker answers some 9,000 a second), so it runs
# in the strict and long runs only; Fetch answers of 1 MiB take the same path in seconds. Both
# Fetch versions are passed on while they arrive (forwarding.md); v17's answers have their
# top-level tagged fields held back and rewritten at the end, v12's go on as they are.
@pytest.mark.parametrize("api", ["Fetch v12", "Fetch v17"] + (["Metadata v12"] if STRICT else []))
def test_a_client_that_never_reads_forwarded_answers_holds_its_bound(kshim_factory, kafka_broker, filled_topic,
                                                                       api):
    admin_port = kafka_env.free_port()
    proc = kshim_factory(f"connections_max_idle_ms = {IDLE_MS}\n" + admin_table(admin_port),
                         upstream=kafka_broker.bootstrap)
    admin = kafka_env.AdminApi(admin_port, TOKEN)
    assert kafka_env.wait_until(lambda: kafka_env.port_accepts("127.0.0.1", admin_port), timeout=10)
    if api.startswith("Metadata"):
        frame = kafka_env.metadata_v12(7)
    elif api == "Fetch v17":
        _, topic_id, _ = kafka_env.metadata_v12_topic(kafka_broker.bootstrap, filled_topic)
        frame = kafka_env.fetch_v17(7, topic_id, [0], MIB)
    else:
        # Each answer carries 1 MiB of records.
        frame = kafka_env.fetch_v12(7, filled_topic, MIB)
    host, port = kafka_env.split_hostport(proc.bootstrap)
    with socket.create_connection((host, port), timeout=10) as warm:
        for _ in range(20):
            warm.sendall(frame)
            kafka_env.read_frame(warm)
    hold_without_reading(proc, admin, frame, f"{api}, forwarded", forwarded=True,
                         answer_mib=1.0 if api.startswith("Fetch") else 0.0)
    assert kafka_env.wait_until(lambda: metric(admin, "kshim_queued_response_bytes") == 0, timeout=10)


def test_many_connections_from_one_address_hold_their_bounds_each(kshim_factory):
    proc, admin = standalone(kshim_factory)
    host, port = kafka_env.split_hostport(proc.bootstrap)
    rss_before = rss_mib(proc.pid)
    socks = []
    hostile = []
    for _ in range(50):
        s = socket.create_connection((host, port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        socks.append(s)
        hostile.append(Pipeliner(s, api_versions_frame(), 3.0))
    for h in hostile:
        h.start()
    probe = LatencyProbe(proc.bootstrap, 3.0)
    rss_peak = rss_before
    while any(h.is_alive() for h in hostile):
        rss_peak = max(rss_peak, rss_mib(proc.pid))
        time.sleep(0.2)
    growth = rss_peak - rss_before
    p99 = probe.p99()
    print(f"50 connections pipelining from one address: kshim's RSS +{growth:.1f} MiB, another client's "
          f"p99 {p99 * 1000:.2f} ms", file=sys.stderr)
    for s in socks:
        s.close()
    # 50 bounds of 1 MiB plus one answer each; small answers cost a quarter more than their bytes
    # in the allocator's blocks and the outbox's entries (1.27 MiB a connection measured).
    assert growth <= 50 * 1.5 + RSS_GROWTH_LIMIT_MIB, f"kshim's RSS grew by {growth:.1f} MiB"
    assert metric(admin, "kshim_connections_muted_total") >= 50
    assert_answered_promptly(p99, None, "50 pipelining connections")


# ---------------------------------------------------------------------------
# A memory limit that kshim is not told about
# ---------------------------------------------------------------------------

CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_LIMIT = 256 * MIB
BIG_FRAMES = 10
BIG_FRAME_BODY = 100 * MIB - 64 * 1024


class MemoryCgroup:
    """A cgroup v1 memory cgroup of the test's own, limited to `limit` bytes (swap included).
    Fails, saying why, where the machine does not let the test make one."""

    def __init__(self, limit: int):
        self.path = CGROUP_V1 / f"kshim-test-{uuid.uuid4().hex[:8]}"
        try:
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            swap = self.path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(limit))
        except OSError as e:
            pytest.fail(f"this machine does not let the test make a memory cgroup under {CGROUP_V1} "
                        f"(needs root and cgroup v1's memory controller): {e}")

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def wrapper(self, directory: Path, binary: Path) -> Path:
        """A script that joins the cgroup and then becomes kshim."""
        script = directory / "kshim-in-cgroup"
        script.write_text(f"#!/bin/sh\necho $$ > {self.path}/cgroup.procs\nexec {binary} \"$@\"\n")
        script.chmod(0o755)
        return script

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def test_big_frames_in_a_small_container_are_slowed_not_killed(kshim_binary, kafka_broker, tmp_path: Path):
    cgroup = MemoryCgroup(CGROUP_LIMIT)
    proc = None
    try:
        admin_port = kafka_env.free_port()
        proc = kafka_env.KshimProcess("frame_read_timeout_ms = 120000\n" + admin_table(admin_port),
                                      upstream=kafka_broker.bootstrap,
                                      binary=cgroup.wrapper(tmp_path, kshim_binary))
        kafka_env.start_or_fail(proc)
        admin = kafka_env.AdminApi(admin_port, TOKEN)
        assert kafka_env.wait_until(lambda: kafka_env.port_accepts("127.0.0.1", admin_port), timeout=10)
        # The default budget follows the cgroup's limit: a quarter of 256 MiB, at least one frame.
        assert metric(admin, "kshim_queued_request_bytes_max") == 100 * MIB
        assert "the memory cgroup's limit" in proc.log_text()
        # Ten clients each send one Produce (acks=1) of 100 MiB at once; the broker refuses the
        # records (they are not a record batch), but each client must get its answer.
        frame = kafka_env.produce_v7(1, "hostile-big", 1, bytes(BIG_FRAME_BODY))
        host, port = kafka_env.split_hostport(proc.bootstrap)
        answers: list[str] = []

        def client() -> None:
            try:
                with socket.create_connection((host, port), timeout=120) as sock:
                    sock.sendall(frame)
                    kafka_env.read_frame(sock)
                    answers.append("answered")
            except (OSError, kafka_env.EnvError) as e:
                answers.append(f"{type(e).__name__}: {e}")

        clients = [threading.Thread(target=client, daemon=True) for _ in range(BIG_FRAMES)]
        for c in clients:
            c.start()
        peak_budget = 0.0
        while any(c.is_alive() for c in clients):
            assert proc.alive(), f"kshim died: {kafka_env.tail(proc.log_path)}"
            peak_budget = max(peak_budget, metric(admin, "kshim_queued_request_bytes"))
            time.sleep(0.1)
        hwm = int(cgroup.read("memory.max_usage_in_bytes"))
        oom = cgroup.read("memory.oom_control")
        print(f"{BIG_FRAMES} Produce frames of 100 MiB in a {CGROUP_LIMIT // MIB} MiB cgroup: the cgroup's peak "
              f"{hwm / MIB:.0f} MiB, kshim's peak RSS {status_mib(proc.pid, 'VmHWM'):.0f} MiB, at most "
              f"{peak_budget / MIB:.0f} MiB of frames held, "
              f"{metric(admin, 'kshim_frame_budget_waits_total'):.0f} waits", file=sys.stderr)
        assert proc.alive(), "kshim was killed"
        assert answers == ["answered"] * BIG_FRAMES, answers
        assert "oom_kill 0" in oom, oom
        assert hwm < CGROUP_LIMIT, f"the cgroup reached {hwm / MIB:.0f} MiB"
        assert metric(admin, "kshim_frame_budget_waits_total") >= BIG_FRAMES - 1, "the frames never waited"
        # A 100 MiB frame held is most of the ceiling (128 MiB here): kshim may have shed load
        # while it was, refusing new connections; once the frames are gone it takes them again.
        assert kafka_env.wait_until(lambda: metric(admin, "kshim_memory_shedding") == 0, timeout=15)
        assert kafka_env.api_versions(proc.bootstrap).error_code == 0
    finally:
        if proc is not None:
            proc.cleanup()
        cgroup.remove()


# ---------------------------------------------------------------------------
# Many clients that never read, all at once
# ---------------------------------------------------------------------------

FLOOD_CONNECTIONS = int(os.environ.get("KSHIM_FLOOD_CONNECTIONS", "2000"))
FLOOD_REQUESTS = 4000
# How long the flood writes once no connection takes more.
FLOOD_STALL_S = 3.0
# How long the connections stay open once written: kshim reads and answers what the kernel
# took from them (megabytes each on loopback) meanwhile.
FLOOD_HOLD_S = 10.0
FLOOD_MAX_S = 60.0

def flood(host: str, port: int, connections: int, requests: int, watch) -> tuple[int, int, int]:
    """Opens `connections` connections, each writing `requests` ApiVersions v3 back to back and
    reading nothing, until every one has written them all or none has taken a byte for
    FLOOD_STALL_S, and holds them open up to FLOOD_HOLD_S more, while kshim answers what it
    read. `watch()` is called between rounds; once the connections are written, the hold ends
    when it returns true. Returns (connections opened, refused or closed by kshim, requests
    written whole)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < connections + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, connections + 256), hard))
    frame = api_versions_frame()
    blob = frame * requests
    socks: list[socket.socket] = []
    refused = 0
    try:
        for _ in range(connections):
            try:
                sock = socket.create_connection((host, port), timeout=5)
            except OSError:
                refused += 1
                continue
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.setblocking(False)
            socks.append(sock)
        offsets = [0] * len(socks)
        live = set(range(len(socks)))
        deadline = time.monotonic() + FLOOD_MAX_S
        last_progress = time.monotonic()
        while live and time.monotonic() < deadline and time.monotonic() < last_progress + FLOOD_STALL_S:
            for i in list(live):
                try:
                    n = socks[i].send(memoryview(blob)[offsets[i]:offsets[i] + 65536])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    refused += 1
                    live.discard(i)
                    continue
                if n:
                    offsets[i] += n
                    last_progress = time.monotonic()
                if offsets[i] >= len(blob):
                    live.discard(i)
            watch()
            time.sleep(0.02)
        written = sum(o // len(frame) for o in offsets)
        hold = time.monotonic() + FLOOD_HOLD_S
        while time.monotonic() < hold and not watch():
            time.sleep(0.1)
        return len(socks), refused, written
    finally:
        for sock in socks:
            sock.close()


def test_thousands_of_clients_that_never_read_cannot_get_kshim_killed(kshim_binary, tmp_path: Path):
    """FLOOD_CONNECTIONS connections that each pipeline FLOOD_REQUESTS ApiVersions v3 and read
    nothing, against a standalone kshim in a 256 MiB memory cgroup (its default ceiling: half
    of that). Each connection's own bound is 1 MiB of answers, 2 GiB in all: kshim must shed
    instead (docs/security.md, "What all peers together can hold"), and a client connected
    before them must get every answer within a second."""
    cgroup = MemoryCgroup(CGROUP_LIMIT)
    proc = None
    probe = None
    try:
        admin_port = kafka_env.free_port()
        proc = kafka_env.KshimProcess("connections_max_idle_ms = 600000\n" + admin_table(admin_port),
                                      binary=cgroup.wrapper(tmp_path, kshim_binary))
        kafka_env.start_or_fail(proc)
        admin = kafka_env.AdminApi(admin_port, TOKEN)
        assert kafka_env.wait_until(lambda: kafka_env.port_accepts("127.0.0.1", admin_port), timeout=10)
        assert metric(admin, "kshim_memory_ceiling_bytes") == CGROUP_LIMIT // 2
        host, port = kafka_env.split_hostport(proc.bootstrap)
        request = kafka_env.api_versions_request(3, ("well-behaved", "1"))
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, host, str(port), str(FLOOD_MAX_S + 15), "",
             (struct.pack(">i", len(request)) + request).hex(), str(tmp_path / "stop")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        assert probe.stdout is not None and probe.stdout.readline().strip() == "connected"
        seen = {"rss": 0.0, "unready": "", "asked": 0.0, "shedding_at": 0.0}

        def watch() -> bool:
            """Samples kshim; true once it has said it sheds load and held for 2 s since."""
            try:
                seen["rss"] = max(seen["rss"], rss_mib(proc.pid))
            except (AssertionError, OSError):
                pytest.fail(f"kshim was killed: {cgroup.read('memory.oom_control')}")
            if not seen["unready"] and time.monotonic() > seen["asked"] + 0.5:
                seen["asked"] = time.monotonic()
                status, text = admin.call("GET", "/readyz")
                if status == 503:
                    seen["unready"] = str(text)
                    seen["shedding_at"] = time.monotonic()
            return bool(seen["unready"]) and time.monotonic() > seen["shedding_at"] + 2.0

        started = time.monotonic()
        opened, refused_here, written = flood(host, port, FLOOD_CONNECTIONS, FLOOD_REQUESTS, watch)
        took = time.monotonic() - started
        hwm = int(cgroup.read("memory.max_usage_in_bytes"))
        oom = cgroup.read("memory.oom_control")
        shed = metric(admin, "kshim_connections_shed_total")
        episodes = metric(admin, "kshim_memory_shedding_total")
        refused = metric(admin, "kshim_connections_refused_total", '{reason="memory"}')
        (tmp_path / "stop").touch()
        out, err = probe.communicate(timeout=30)
        latencies = json.loads(out.strip().splitlines()[-1]) if out.strip() else []
        print(f"{opened} connections opened ({refused_here} refused or closed), {written} requests written "
              f"in {took:.1f} s; kshim's peak RSS {status_mib(proc.pid, 'VmHWM'):.0f} MiB, the cgroup's "
              f"{hwm / MIB:.0f} MiB of {CGROUP_LIMIT // MIB}; shedding began {episodes:.0f} times, "
              f"{shed:.0f} connections stopped, {refused:.0f} refused; the well-behaved client's "
              f"{len(latencies)} answers took at most {max(latencies or [0]) * 1000:.0f} ms; kshim's "
              f"RSS seen at most {seen['rss']:.0f} MiB", file=sys.stderr)
        assert proc.alive(), f"kshim was killed: {kafka_env.tail(proc.log_path)}"
        assert "oom_kill 0" in oom, oom
        assert hwm < CGROUP_LIMIT, f"the cgroup reached {hwm / MIB:.0f} MiB"
        assert status_mib(proc.pid, "VmHWM") < CGROUP_LIMIT / MIB
        assert episodes >= 1, "kshim never shed load: the flood did not reach its ceiling"
        assert shed + refused > 0
        assert "shedding load" in seen["unready"], f"/readyz never said it was shedding: {seen['unready']}"
        assert len(latencies) >= 20, f"the well-behaved client got {len(latencies)} answers: {err[-2000:]}"
        assert max(latencies) < 1.0, f"an answer to the well-behaved client took {max(latencies):.2f} s"
        # Once the flood's connections are gone, kshim is ready again and takes new clients.
        assert kafka_env.wait_until(lambda: metric(admin, "kshim_memory_shedding") == 0, timeout=15), \
            f"still shedding: {admin.call('GET', '/readyz')}"
        status, ready = admin.call("GET", "/readyz")
        assert status == 200, ready
        assert kafka_env.api_versions(proc.bootstrap).error_code == 0
    finally:
        if probe is not None and probe.poll() is None:
            probe.kill()
        if proc is not None:
            proc.cleanup()
        cgroup.remove()


# ---------------------------------------------------------------------------
# A storm of TLS handshakes
# ---------------------------------------------------------------------------

STORM_CONNECTIONS = 3000
STORM_CONCURRENCY = 1000
STORM_SILENT = 100
# Four addresses storm, a fifth holds silent sockets (every 127.x address is loopback).
STORM_FROM = "127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5"
SILENT_FROM = "127.0.0.9"
# tls_handshake_timeout_ms, shorter than the default 10 s so that the silent sockets are let go
# sooner.
HANDSHAKE_DEADLINE_S = 3


def refused(admin: kafka_env.AdminApi) -> dict[str, float]:
    return {reason: metric(admin, "kshim_connections_refused_total", f'{{reason="{reason}"}}')
            for reason in ("handshake_queue", "tls_handshake")}


def socket_descriptors(pid: int) -> int:
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return count


def test_a_tls_handshake_storm_is_refused_at_once_past_the_queue(kshim_factory, certs):
    proc, admin = standalone(kshim_factory, f"tls_handshake_timeout_ms = {HANDSHAKE_DEADLINE_S * 1000}\n"
                             + tls_support.tls_table(certs), certs.ca)
    sockets_before = socket_descriptors(proc.pid)
    before = refused(admin)
    bench = Path(kafka_env.require_kshim_binary()).parent / "examples" / "tls_bench"
    assert bench.is_file(), f"{bench} is missing: `cargo build --release --example tls_bench` builds it (scripts/test.sh does)"
    cp = subprocess.run(
        [str(bench), "storm", "--ca", str(certs.ca), "--target", proc.bootstrap,
         "--connections", str(STORM_CONNECTIONS), "--concurrency", str(STORM_CONCURRENCY),
         "--storm-from", STORM_FROM, "--silent", str(STORM_SILENT), "--silent-from", SILENT_FROM,
         "--silent-wait-ms", str((HANDSHAKE_DEADLINE_S + 5) * 1000), "--timeout-ms", "15000",
         "--probe-clients", "2"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr[-3000:]
    report = json.loads(cp.stdout.strip().splitlines()[-1])
    after = refused(admin)
    counted = sum(after.values()) - sum(before.values())
    probe = report["probe"]
    print(f"TLS storm: {STORM_CONNECTIONS} connections {STORM_CONCURRENCY} at a time from 4 addresses, "
          f"{STORM_SILENT} silent from a fifth: {report['completed']} served, {report['refused']} refused "
          f"({after['handshake_queue'] - before['handshake_queue']:.0f} by the queue), {report['timed_out']} "
          f"timed out, in {report['storm_seconds']:.1f} s; silent ones closed after at most "
          f"{report['silent_slowest_close_ms']:.0f} ms; connected clients p99 {probe['p99_ms']:.2f} ms "
          f"(max {probe['max_ms']:.1f})", file=sys.stderr)
    assert not probe["errors"], probe["errors"]
    assert_answered_promptly(probe["p99_ms"] / 1000, None, "a TLS handshake storm")
    assert report["completed"] > 0, report
    assert report["completed"] + report["refused"] + report["timed_out"] == STORM_CONNECTIONS
    assert report["timed_out"] == 0, "a handshake was left to time out instead of refused at once"
    assert after["handshake_queue"] > before["handshake_queue"], "the queue never refused a connection"
    # Every connection that was not served was counted, the silent ones included.
    assert counted == report["refused"] + STORM_SILENT, (report, before, after)
    assert report["silent_closed_by_server"] == STORM_SILENT, "silent connections left open"
    assert report["silent_slowest_close_ms"] <= (HANDSHAKE_DEADLINE_S + 1) * 1000
    # Nothing left half-open: no handshake pending, no socket beyond the listener's and the probes'.
    assert metric(admin, "kshim_tls_handshakes_pending") == 0
    assert kafka_env.wait_until(lambda: socket_descriptors(proc.pid) <= sockets_before, timeout=5), (
        f"{socket_descriptors(proc.pid)} sockets open, {sockets_before} before the storm")


def test_requests_trickled_a_byte_at_a_time_are_cut_off(kshim_factory):
    """Slowloris on requests: 100 connections each announce a 64 KiB frame and send a byte of
    it every 200 ms. They hold the budget for their frames only (kshim's RSS stays flat), a
    well-behaved client is answered as before, and each is closed at frame_read_timeout_ms."""
    proc, admin = standalone(kshim_factory, "frame_read_timeout_ms = 3000\n")
    host, port = kafka_env.split_hostport(proc.bootstrap)
    rss_before = rss_mib(proc.pid)
    cut_before = metric(admin, "kshim_connections_closed_total", '{reason="frame_timeout"}')
    socks = []
    for _ in range(100):
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(struct.pack(">i", 64 * 1024) + b"\x00\x12")
        socks.append(s)
    probe = LatencyProbe(proc.bootstrap, 3.0)
    deadline = time.monotonic() + 6
    open_socks = list(socks)
    rss_peak = rss_before
    while open_socks and time.monotonic() < deadline:
        for s in list(open_socks):
            try:
                s.send(b"\x00")
            except OSError:
                open_socks.remove(s)
        rss_peak = max(rss_peak, rss_mib(proc.pid))
        time.sleep(0.2)
    p99 = probe.p99()
    cut = metric(admin, "kshim_connections_closed_total", '{reason="frame_timeout"}') - cut_before
    print(f"slowloris: 100 trickling connections, kshim's RSS +{rss_peak - rss_before:.1f} MiB, {cut:.0f} cut off; "
          f"another client's p99 {p99 * 1000:.2f} ms", file=sys.stderr)
    for s in socks:
        s.close()
    assert cut == 100, f"{cut} of 100 trickling connections were cut off"
    assert rss_peak - rss_before <= RSS_GROWTH_LIMIT_MIB, f"kshim's RSS grew by {rss_peak - rss_before:.1f} MiB"
    assert_answered_promptly(p99, None, "100 trickling connections")
