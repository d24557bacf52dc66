"""The forwarding path under stress, kshim in front of a real Apache Kafka 4.1.1 node.

- acks=0 flood into a paused broker: a client offering 400 MiB of acks=0 Produce to a broker
  stopped with SIGSTOP gets only what the sockets and kshim's bounded upstream queue hold;
  kshim's peak RSS grows by less than 32 MiB, and once the broker resumes the same connection
  is answered again.
- A broker paused for 6 s under a steady acks=all producer (confluent-kafka): every record the
  producer saw acknowledged is in the topic, and records sent after the pause are acknowledged
  through the same kshim, which needed no help.
- A silent upstream (a listener that accepts and never answers): 20 client connections whose
  forwarded requests are never answered give back every upstream connection and descriptor: the
  ten clients that leave at once free their upstream links at once, the ten that stay are closed
  after upstream.request_timeout_ms.
- kshim keeps a client's pipeline full across a round trip: with a 100 ms link between kshim and
  the broker (the network lab, tests/interop/netlab.py), eight acks=1 Produce requests sent at
  once on one connection are all answered in a fraction of the time the same eight take one at
  a time, measured on that connection just before.
- 100 connections each announcing a 90 MiB frame and sending as much of it as kshim takes stay
  within max_queued_request_bytes (256 MiB): kshim's peak RSS grows by less than that budget plus
  48 MiB, the budget gauge never exceeds it, frames are seen waiting, and everything is given
  back once the clients leave.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest

import kafka_env
import netlab

MIB = 1 << 20
ADMIN_TOKEN = "stress-token"


@pytest.fixture(scope="module")
def pausable_broker(kafka_clusters):
    """A broker of these tests' own: they stop it with SIGSTOP. Its LAB listener (extra port 0)
    is advertised at extra port 1, where a network lab link to it listens."""
    cluster = kafka_clusters.start(1, extra_ports=2, listener_overrides={
        "listeners": "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},LAB://127.0.0.1:{extra0}",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:{port},LAB://127.0.0.1:{extra1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,LAB:PLAINTEXT",
    })
    yield cluster
    pid = cluster.node(1).pid
    if pid:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    cluster.cleanup()


class paused:
    """SIGSTOP for the block's duration; SIGCONT however it ends."""

    def __init__(self, pid: int):
        self.pid = pid

    def __enter__(self):
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc):
        os.kill(self.pid, signal.SIGCONT)


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def with_admin(config: str, admin_port: int) -> str:
    return f"""{config}
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{ADMIN_TOKEN}"
"""


def metric(admin: kafka_env.AdminApi, name: str, labels: str = "") -> float:
    status, text = admin.call("GET", "/metrics")
    assert status == 200, text
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", re.M)
    found = pattern.search(text if isinstance(text, str) else str(text))
    assert found, f"{name}{labels} not in /metrics"
    return float(found.group(1))


# ---------------------------------------------------------------------------
# Raw Produce frames
# ---------------------------------------------------------------------------

record_batch, produce_v7, read_frame = kafka_env.record_batch, kafka_env.produce_v7, kafka_env.read_frame
metadata_v12 = kafka_env.metadata_v12


def produce_error(sock: socket.socket, topic: str, correlation_id: int) -> int:
    """Sends one acks=1 Produce and returns its partition error code."""
    sock.sendall(produce_v7(correlation_id, topic, 1, record_batch(1, 10)))
    response = read_frame(sock)
    got_id, topics = struct.unpack(">ii", response[:8])
    assert got_id == correlation_id and topics == 1
    name_len = struct.unpack(">h", response[8:10])[0]
    pos = 10 + name_len + 4  # topic name, partition count
    return struct.unpack(">h", response[pos + 4:pos + 6])[0]


def produce_until_ok(bootstrap: str, topic: str, timeout: float) -> socket.socket:
    """A connection through kshim on which an acks=1 Produce to `topic` succeeded (the topic
    is created on first use, so the first attempts may be refused)."""
    host, port = kafka_env.split_hostport(bootstrap)
    deadline = time.monotonic() + timeout
    correlation_id = 1
    while True:
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(metadata_v12(correlation_id, topic))
        read_frame(sock)
        correlation_id += 1
        code = produce_error(sock, topic, correlation_id)
        if code == 0:
            return sock
        sock.close()
        assert time.monotonic() < deadline, f"Produce to {topic} still fails with error {code}"
        correlation_id += 1
        time.sleep(0.5)


# ---------------------------------------------------------------------------
# acks=0 flood into a paused broker
# ---------------------------------------------------------------------------


def test_an_acks_zero_flood_into_a_paused_broker_is_held_back(kshim_factory, pausable_broker):
    broker = pausable_broker
    proc = kshim_factory(f'[upstream]\nbootstrap = "{broker.bootstrap}"\n', upstream=broker.bootstrap)
    # The bootstrap listener forwards to the one broker; this connection opens the link.
    topic = f"flood-{uuid.uuid4().hex[:8]}"
    sock = produce_until_ok(proc.bootstrap, topic, timeout=30)
    batch = record_batch(60, 1000)
    offered_limit = 400 * MIB
    frames = [produce_v7(100 + i, topic, 0, batch) for i in range(8)]
    before = status_kib(proc.pid, "VmHWM")
    offered = 0
    with paused(broker.node(1).pid):
        sock.setblocking(False)
        pending = memoryview(b"")
        last_progress = time.monotonic()
        deadline = time.monotonic() + 20
        i = 0
        # Offer up to 400 MiB; stop once nothing has been taken for 3 s.
        while offered < offered_limit and time.monotonic() < deadline:
            if not pending:
                pending = memoryview(frames[i % len(frames)])
                i += 1
            try:
                n = sock.send(pending)
                pending = pending[n:]
                offered += n
                last_progress = time.monotonic()
            except BlockingIOError:
                if time.monotonic() - last_progress > 3:
                    break
                time.sleep(0.01)
        peak = status_kib(proc.pid, "VmHWM")
        growth_mib = (peak - before) / 1024
        assert offered < 100 * MIB, f"kshim took {offered / MIB:.0f} MiB from a client of a paused broker"
        assert growth_mib < 32, f"kshim's peak RSS grew by {growth_mib:.1f} MiB"
        sock.setblocking(True)
        # The partly sent frame is finished, so the connection stays usable after the pause.
        writer = threading.Thread(target=sock.sendall, args=(bytes(pending),), daemon=True)
        writer.start()
    writer.join(timeout=60)
    assert not writer.is_alive(), "kshim did not take the rest of the flood once the broker resumed"
    sock.settimeout(60)
    assert produce_error(sock, topic, 99_999) == 0
    sock.close()
    print(f"acks=0 flood: offered {offered / MIB:.1f} MiB while the broker was stopped; "
          f"kshim peak RSS grew by {growth_mib:.1f} MiB", file=sys.stderr)


# ---------------------------------------------------------------------------
# A broker paused for 6 s under a steady acks=all producer
# ---------------------------------------------------------------------------

STEADY_PRODUCER = r"""
import json, sys, time
from confluent_kafka import Producer
bootstrap, topic, seconds, rate = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
acked, failed = [], []
def done(err, msg):
    (failed if err else acked).append((int(msg.value()), time.time()))
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
              "linger.ms": 5, "request.timeout.ms": 30000, "message.timeout.ms": 90000})
start = time.time(); i = 0
while time.time() - start < seconds:
    p.produce(topic, str(i).encode(), on_delivery=done); i += 1
    p.poll(0)
    time.sleep(1.0 / rate)
left = p.flush(120)
print(json.dumps({"sent": i, "acked": acked, "failed": len(failed), "unflushed": left}))
"""

CONSUME_ALL = r"""
import json, sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "stress-check", "enable.auto.commit": False,
              "auto.offset.reset": "earliest"})
c.assign([TopicPartition(topic, 0, 0)])
seen, empty = [], 0
while len(seen) < want and empty < 20:
    m = c.poll(1.0)
    if m is None:
        empty += 1
        continue
    if m.error() or not m.value().isdigit():  # the record that made the topic
        continue
    seen.append(int(m.value()))
c.close()
print(json.dumps(seen))
"""


def run_python(script: str, *args: str, timeout: float) -> str:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_paused_broker_loses_no_acknowledged_record(kshim_factory, pausable_broker):
    broker = pausable_broker
    proc = kshim_factory(f'[upstream]\nbootstrap = "{broker.bootstrap}"\n', upstream=broker.bootstrap)
    topic = f"paused-{uuid.uuid4().hex[:8]}"
    produce_until_ok(proc.bootstrap, topic, timeout=30).close()
    producer = subprocess.Popen([sys.executable, "-c", STEADY_PRODUCER, proc.bootstrap, topic, "14", "100"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The schedule of the 14 s run: 3 s of steady load, the broker paused for 6 s (some 600
        # records sent into the pause, well inside the producer's 30 s request timeout), 5 s more.
        time.sleep(3)
        paused_at = time.time()
        with paused(broker.node(1).pid):
            time.sleep(6)
        resumed_at = time.time()
        out, err = producer.communicate(timeout=200)
    finally:
        kafka_env.stop_process(producer)
    assert producer.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    acked = {seq for seq, _ in result["acked"]}
    after_pause = [seq for seq, at in result["acked"] if at > resumed_at + 1]
    assert result["sent"] > 800 and acked, result["sent"]
    assert any(at < paused_at for _, at in result["acked"]), "no record was acknowledged before the pause"
    assert after_pause, "no record was acknowledged after the broker resumed"
    seen = json.loads(run_python(CONSUME_ALL, proc.bootstrap, topic, str(len(acked)), timeout=120))
    lost = acked - set(seen)
    assert not lost, f"{len(lost)} acknowledged records are missing, e.g. {sorted(lost)[:10]}"
    assert proc.alive()
    print(f"paused broker: {result['sent']} sent, {len(acked)} acknowledged ({len(after_pause)} after the "
          f"pause of {resumed_at - paused_at:.1f} s), {result['failed']} failed, 0 lost", file=sys.stderr)


# ---------------------------------------------------------------------------
# A pipeline across a round trip
# ---------------------------------------------------------------------------

PIPELINE_RTT_MS = 100
PIPELINE_DEPTH = 8


def test_kshim_keeps_a_pipeline_full_across_a_round_trip(kshim_factory, pausable_broker, tmp_path):
    node = pausable_broker.node(1)
    with netlab.Lab(tmp_path / "lab") as lab:
        # kshim reaches the broker only over the link: the LAB listener advertises the link.
        link = lab.link("kshim-to-broker", f"127.0.0.1:{node.extra_ports[0]}", listen_port=node.extra_ports[1])
        proc = kshim_factory(f'[upstream]\nbootstrap = "{link.address}"\n', upstream=link.address)
        topic = f"pipeline-{uuid.uuid4().hex[:8]}"
        sock = produce_until_ok(proc.bootstrap, topic, timeout=30)
        link.shape(rtt_ms=PIPELINE_RTT_MS)
        with sock:
            sock.settimeout(30)
            started = time.monotonic()
            for i in range(PIPELINE_DEPTH):
                assert produce_error(sock, topic, 100 + i) == 0
            one_at_a_time = time.monotonic() - started
            started = time.monotonic()
            sock.sendall(b"".join(produce_v7(200 + i, topic, 1, record_batch(1, 10)) for i in range(PIPELINE_DEPTH)))
            answered = [struct.unpack(">i", read_frame(sock)[:4])[0] for _ in range(PIPELINE_DEPTH)]
            pipelined = time.monotonic() - started
    assert answered == [200 + i for i in range(PIPELINE_DEPTH)], answered
    assert one_at_a_time >= PIPELINE_DEPTH * PIPELINE_RTT_MS / 1000 * 0.9, \
        f"{PIPELINE_DEPTH} requests one at a time took {one_at_a_time:.3f} s: the link did not delay them"
    assert pipelined < one_at_a_time / 3, (
        f"{PIPELINE_DEPTH} pipelined requests took {pipelined:.3f} s, one at a time {one_at_a_time:.3f} s: "
        f"kshim does not keep the pipeline full across a {PIPELINE_RTT_MS} ms round trip")
    print(f"pipeline across {PIPELINE_RTT_MS} ms: {PIPELINE_DEPTH} requests one at a time {one_at_a_time:.3f} s, "
          f"pipelined {pipelined:.3f} s", file=sys.stderr)


# ---------------------------------------------------------------------------
# A silent upstream
# ---------------------------------------------------------------------------


class SilentListener:
    """Accepts connections and never answers. Tells the connections apart by the client id and
    correlation id of the first request each carries."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns: list[dict] = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.server.settimeout(0.2)
        while not self.stopping:
            try:
                conn, _ = self.server.accept()
            except (socket.timeout, OSError):
                continue
            conn.setblocking(False)
            with self.lock:
                self.conns.append({"sock": conn, "head": b"", "open": True})

    def open_requests(self) -> set[tuple[str, int]]:
        """(client id, correlation id) of the first request of every connection still open
        (connections with no whole request header yet show as ("?", -1))."""
        with self.lock:
            found = set()
            for c in self.conns:
                if not c["open"]:
                    continue
                try:
                    while True:
                        chunk = c["sock"].recv(65536)
                        if not chunk:
                            c["open"] = False
                            c["sock"].close()
                            break
                        if len(c["head"]) < 64:
                            c["head"] += chunk[:64]
                except BlockingIOError:
                    pass
                except OSError:
                    c["open"] = False
                    c["sock"].close()
                if c["open"]:
                    found.add(self._first_request(c["head"]))
            return found

    @staticmethod
    def _first_request(head: bytes) -> tuple[str, int]:
        if len(head) < 14:
            return ("?", -1)
        correlation_id, name_len = struct.unpack(">ih", head[8:14])
        return (head[14:14 + max(name_len, 0)].decode(errors="replace"), correlation_id)

    def forwarded(self) -> set[int]:
        """Correlation ids of the test clients' requests on connections still open."""
        return {cid for name, cid in self.open_requests() if name == "stress"}

    def close(self):
        self.stopping = True
        self.thread.join(timeout=2)
        self.server.close()
        for c in self.conns:
            if c["open"]:
                c["sock"].close()


def test_a_silent_upstream_gives_back_every_descriptor(kshim_factory):
    silent = SilentListener()
    try:
        upstream = f"127.0.0.1:{silent.port}"
        proc = kshim_factory(
            f'[upstream]\nbootstrap = "{upstream}"\nrequest_timeout_ms = 4000\nconnect_timeout_ms = 1000\n',
            upstream=upstream,
            rust_log="info",
        )
        fds_before = open_fds(proc.pid)
        host, port = kafka_env.split_hostport(proc.bootstrap)
        leaving, staying = {}, {}
        for cid in range(1, 21):
            sock = socket.create_connection((host, port), timeout=5)
            sock.sendall(metadata_v12(cid))
            (leaving if cid % 2 else staying)[cid] = sock
        everyone = set(leaving) | set(staying)
        assert kafka_env.wait_until(lambda: silent.forwarded() == everyone, timeout=10), silent.forwarded()
        sent_at = time.monotonic()
        for sock in leaving.values():
            sock.close()
        # The clients that left take their upstream links with them, well before the deadline.
        assert kafka_env.wait_until(lambda: silent.forwarded() == set(staying), timeout=1.5), silent.forwarded()
        assert time.monotonic() - sent_at < 3.5
        # The ones that stay are closed at the deadline, with their links.
        for sock in staying.values():
            sock.settimeout(10)
            assert sock.recv(1) == b"", "kshim answered a request the upstream never answered"
            sock.close()
        assert time.monotonic() - sent_at >= 3.0
        assert kafka_env.wait_until(lambda: not silent.forwarded(), timeout=5), silent.forwarded()
        assert kafka_env.wait_until(lambda: open_fds(proc.pid) <= fds_before, timeout=5), open_fds(proc.pid)
        log = proc.log_path.read_text()
        closed = log.count("did not answer a forwarded request within")
        assert closed == len(staying), f"{closed} connections logged as closed for an unanswered request"
    finally:
        silent.close()


# ---------------------------------------------------------------------------
# The global frame budget
# ---------------------------------------------------------------------------


def test_partial_frames_stay_within_the_global_budget(kshim_factory, kafka_broker):
    budget = 256 * MIB
    admin_port = kafka_env.free_port()
    proc = kshim_factory(
        with_admin(
            f"max_queued_request_bytes = {budget}\nframe_read_timeout_ms = 30000\n"
            f'[upstream]\nbootstrap = "{kafka_broker.bootstrap}"\n',
            admin_port,
        ),
        upstream=kafka_broker.bootstrap,
    )
    admin = kafka_env.AdminApi(admin_port, ADMIN_TOKEN)
    assert kafka_env.wait_until(lambda: kafka_env.port_accepts("127.0.0.1", admin_port), timeout=10)
    assert metric(admin, "kshim_queued_request_bytes_max") == budget
    before = status_kib(proc.pid, "VmHWM")
    host, port = kafka_env.split_hostport(proc.bootstrap)
    announced = 90 * MIB
    payload = memoryview(bytes(4 * MIB))
    socks = []
    for _ in range(100):
        s = socket.create_connection((host, port), timeout=5)
        s.setblocking(False)
        s.send(struct.pack(">i", announced))
        socks.append([s, 0])
    highest = 0.0
    try:
        # Each client sends as much of its frame (never all of it) as kshim will take.
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            moved = 0
            for entry in socks:
                s, sent = entry
                room = announced - 1 - sent
                if room <= 0:
                    continue
                try:
                    n = s.send(payload[: min(room, len(payload))])
                    entry[1] += n
                    moved += n
                except BlockingIOError:
                    pass
            if moved == 0:
                highest = max(highest, metric(admin, "kshim_queued_request_bytes"))
                time.sleep(0.05)
        highest = max(highest, metric(admin, "kshim_queued_request_bytes"))
        peak = status_kib(proc.pid, "VmHWM")
        growth = (peak - before) * 1024
        taken = sum(sent for _, sent in socks)
        assert highest <= budget, highest
        assert highest >= 2 * announced, f"only {highest / MIB:.0f} MiB of the budget was used"
        assert metric(admin, "kshim_frame_budget_waits_total") >= 90
        assert growth < budget + 48 * MIB, f"kshim's peak RSS grew by {growth / MIB:.0f} MiB"
    finally:
        for s, _ in socks:
            s.close()
    assert kafka_env.wait_until(lambda: metric(admin, "kshim_queued_request_bytes") == 0, timeout=10)
    assert kafka_env.api_versions(proc.bootstrap).error_code == 0
    print(f"global budget: 100 clients offered {taken / MIB:.0f} MiB of 90 MiB frames; kshim held at most "
          f"{highest / MIB:.0f} MiB (budget {budget / MIB:.0f} MiB), peak RSS grew by {growth / MIB:.0f} MiB",
          file=sys.stderr)
