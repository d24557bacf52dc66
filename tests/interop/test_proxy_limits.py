"""What one client may hold of kshim, in front of a real Apache Kafka 4.1.1 node: connections
per address, idle connections, and exact re-encoding of a request that kshim narrows.

- `max_connections_per_ip`: real clients (kafka-python) are served while raw sockets hold some
  of the address's places; once the raw sockets hold them all, a new client is refused, and it
  is served again once they are released.
- `connections_max_idle_ms`: idle sockets are closed while a producer sending every 300 ms
  loses nothing.
- An idle connection (one ApiVersions answered, then a second without traffic) holds at most
  3.6 KiB of kshim's heap (`kshim_heap_allocated_bytes`, over 1,000 of them), with 100
  per-address overrides configured.
- A CreateTopics v5 request whose kept topic carries a tagged field numbered 2^31 + 5, with a
  second topic the policy refuses: the request kshim sends on is the client's own bytes minus the
  refused topic, and the broker creates the kept one.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
import uuid

import kafka_env

PRODUCE_CONSUME = r"""
import json, sys
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
bootstrap, topic, count, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
expect, give_up_ms = int(sys.argv[5]), int(sys.argv[6])
try:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=8000,
                      max_block_ms=give_up_ms, bootstrap_timeout_ms=give_up_ms)
    failures = 0
    for i in range(count):
        try:
            p.send(topic, f"v{i}".encode()).get(timeout=10)
        except KafkaError:
            failures += 1
        if pause:
            import time; time.sleep(pause)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=8000)
    got = 0
    for _ in c:
        got += 1
        if got >= expect:
            break
    # Anything beyond what was expected arrives with the records before it.
    got += sum(len(batch) for batch in c.poll(timeout_ms=300).values())
    c.close()
    print(json.dumps({"sent": count, "failures": failures, "got": got}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


def produce_consume(bootstrap: str, topic: str, count: int = 20, pause: float = 0.0, *,
                    expect: int | None = None, give_up_ms: int = 8000) -> dict:
    """Produces `count` records, then consumes the topic from its start until `expect` records
    (default `count`) have come, or 8 s pass without one. The producer gives up on its
    bootstrap or on a metadata fetch after `give_up_ms`."""
    cp = subprocess.run(
        [sys.executable, "-c", PRODUCE_CONSUME, bootstrap, topic, str(count), str(pause),
         str(count if expect is None else expect), str(give_up_ms)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    lines = [line for line in cp.stdout.splitlines() if line.startswith("{")]
    assert lines, f"client printed nothing (rc={cp.returncode})\n{cp.stdout}\n{cp.stderr[-3000:]}"
    return json.loads(lines[-1])


API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, 0)


def hold(bootstrap: str, n: int, timeout: float = 15.0) -> list[socket.socket]:
    """`n` connections that kshim has let in (each has had an ApiVersions answered). A place
    still held by a client that just left frees up a moment later, so refusals are retried."""
    host, port = kafka_env.split_hostport(bootstrap)
    held: list[socket.socket] = []
    deadline = time.monotonic() + timeout
    while len(held) < n:
        assert time.monotonic() < deadline, f"only {len(held)} of {n} connections let in"
        s = socket.create_connection((host, port), timeout=5)
        try:
            s.sendall(API_VERSIONS_V0)
            (size,) = struct.unpack(">i", kafka_env._recv_exact(s, 4))
            kafka_env._recv_exact(s, size)
            held.append(s)
        except (kafka_env.EnvError, OSError):
            s.close()
            time.sleep(0.1)
    return held


def closed_by_kshim(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_per_address_limit_serves_real_clients_and_refuses_the_rest(kshim_factory, kafka_broker):
    proc = kshim_factory(
        f"""
max_connections_per_ip = 12
[upstream]
bootstrap = "{kafka_broker.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
"""
    )
    topic = f"limits-{uuid.uuid4().hex[:8]}"
    held = hold(proc.bootstrap, 6)
    served = produce_consume(proc.bootstrap, topic)
    assert served.get("failures") == 0 and served.get("got") == 20, served
    # Every place taken: the next connection is closed at once.
    held += hold(proc.bootstrap, 6)
    host, port = kafka_env.split_hostport(proc.bootstrap)
    extra = socket.create_connection((host, port), timeout=5)
    assert closed_by_kshim(extra, 3.0), "the 13th connection was not refused"
    refused = produce_consume(proc.bootstrap, topic, count=1, give_up_ms=3000)
    assert "error" in refused or refused.get("failures") == 1, refused
    for s in held:
        s.close()
    again = produce_consume(proc.bootstrap, topic, expect=40)
    assert again.get("failures") == 0 and again.get("got") == 40, again
    assert proc.alive()


def test_idle_connections_are_closed_and_a_steady_producer_loses_nothing(kshim_factory, kafka_broker):
    proc = kshim_factory(
        f"""
connections_max_idle_ms = 1500
[upstream]
bootstrap = "{kafka_broker.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
"""
    )
    idle = hold(proc.bootstrap, 5)
    started = time.monotonic()
    out = produce_consume(proc.bootstrap, f"idle-{uuid.uuid4().hex[:8]}", count=15, pause=0.3)
    assert out.get("failures") == 0 and out.get("got") == 15, out
    for s in idle:
        assert closed_by_kshim(s, max(0.1, 8.0 - (time.monotonic() - started))), "an idle socket stayed open"
        s.close()


# --------------------------------------------------------------------------------------------
# CreateTopics v5, written by hand


uvarint = kafka_env.encode_uvarint
compact = kafka_env.encode_compact_string


def creatable_topic(name: str, tags: bytes) -> bytes:
    return compact(name) + struct.pack(">ih", 1, 1) + b"\x01" + b"\x01" + tags


def create_topics_v5(correlation: int, topics: list[bytes]) -> bytes:
    client_id = b"tags"
    header = struct.pack(">hhih", 19, 5, correlation, len(client_id)) + client_id + b"\x00"
    body = uvarint(len(topics) + 1) + b"".join(topics) + struct.pack(">ib", 15000, 0) + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def create_topics_results(resp: bytes) -> dict[str, int]:
    """Topic name -> error code, from a CreateTopics v5 response (without its size)."""
    pos = kafka_env._skip_tags(resp, 4) + 4  # header tags, ThrottleTimeMs
    n, pos = kafka_env._uvarint(resp, pos)
    out = {}
    for _ in range(n - 1):
        name, pos = kafka_env._compact_str(resp, pos)
        (code,) = struct.unpack_from(">h", resp, pos)
        pos += 2
        length, pos = kafka_env._uvarint(resp, pos)  # ErrorMessage
        pos += max(0, length - 1)
        pos += 4 + 2  # NumPartitions, ReplicationFactor
        configs, pos = kafka_env._uvarint(resp, pos)
        for _ in range(max(0, configs - 1)):
            _, pos = kafka_env._compact_str(resp, pos)
            length, pos = kafka_env._uvarint(resp, pos)
            pos += max(0, length - 1) + 1 + 1 + 1  # value, ReadOnly, ConfigSource, IsSensitive
            pos = kafka_env._skip_tags(resp, pos)
        pos = kafka_env._skip_tags(resp, pos)
        out[name] = code
    return out


def test_a_narrowed_request_keeps_tags_of_any_number(kshim_factory, kafka_broker):
    proc = kshim_factory(
        f"""
[upstream]
bootstrap = "{kafka_broker.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
[policy.create_topic]
denied_names = ["refused\\\\..*"]
"""
    )
    u = uuid.uuid4().hex[:8]
    kept, refused = f"kept.{u}", f"refused.{u}"
    # One tagged field, number 2^31 + 5, one byte long; unknown to the broker, which keeps it.
    big_tag = b"\x01" + uvarint(0x8000_0005) + b"\x01" + b"x"
    frame = create_topics_v5(7, [creatable_topic(refused, b"\x00"), creatable_topic(kept, big_tag)])
    host, port = kafka_env.split_hostport(proc.bootstrap)
    with socket.create_connection((host, port), timeout=20) as s:
        s.settimeout(20)
        s.sendall(frame)
        (size,) = struct.unpack(">i", kafka_env._recv_exact(s, 4))
        resp = kafka_env._recv_exact(s, size)
    assert struct.unpack_from(">i", resp, 0)[0] == 7
    results = create_topics_results(resp)
    assert results == {refused: 44, kept: 0}, results
    # On the broker itself: the kept topic exists, the refused one does not.
    listed = subprocess.run(
        [sys.executable, "-c", TOPICS, kafka_broker.bootstrap, kept],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    topics = set(json.loads(listed.stdout.strip().splitlines()[-1]))
    assert kept in topics and refused not in topics, (listed.stdout, listed.stderr[-2000:])


TOPICS = r"""
import json, sys, time
from kafka import KafkaConsumer
bootstrap, want = sys.argv[1], sys.argv[2]
c = KafkaConsumer(bootstrap_servers=bootstrap)
deadline = time.monotonic() + 20
while True:
    topics = c.topics()
    if want in topics or time.monotonic() > deadline:
        break
    time.sleep(0.3)
c.close()
print(json.dumps(sorted(topics)))
"""


# An idle connection answered ApiVersions holds 3.3 KiB of kshim's heap once it has been idle
# for a second and freed the room its queues kept from the exchange (4.0 KiB before that); it
# held 9.7 KiB while the connection task kept room for every stage of a connection (the TLS
# handshake among them) for its whole lifetime, and 9.5 when the handshake's state was kept in
# it until it started.
IDLE_HEAP_LIMIT_KIB = 3.6
IDLE_CONNECTIONS = 1000


def test_an_idle_connection_holds_little_of_kshims_heap(kshim_factory):
    token = "limits-" + uuid.uuid4().hex
    admin_port = kafka_env.free_port()
    # 100 per-address overrides: shared by every connection, never copied into each (they cost
    # 4 KiB a copy, more than an idle connection's whole share).
    overrides = ", ".join(f'"10.9.{i // 250}.{i % 250 + 1}" = 5' for i in range(100))
    proc = kshim_factory(f'max_connections_per_ip = {IDLE_CONNECTIONS + 100}\n'
                         f'max_connections_per_ip_overrides = {{ {overrides} }}\n'
                         f'[admin]\nlisten = "127.0.0.1:{admin_port}"\ntoken = "${{env:KSHIM_TEST_TOKEN}}"\n',
                         env={"KSHIM_TEST_TOKEN": token})
    admin = kafka_env.AdminApi(admin_port, token)

    def heap() -> float:
        status, text = admin.call("GET", "/metrics")
        assert status == 200, text
        line = next(l for l in text.splitlines() if l.startswith("kshim_heap_allocated_bytes "))
        return float(line.split()[1])

    # The first connections fill kshim's first tables and pages; measure from a warm start.
    for s in hold(proc.bootstrap, 50):
        s.close()
    before = heap()
    held = hold(proc.bootstrap, IDLE_CONNECTIONS, timeout=60)
    try:
        # An idle connection frees its queues' room after a second without traffic.
        per_connection = float("inf")
        deadline = time.monotonic() + 10
        while per_connection > IDLE_HEAP_LIMIT_KIB and time.monotonic() < deadline:
            time.sleep(0.5)
            per_connection = (heap() - before) / IDLE_CONNECTIONS / 1024
    finally:
        for s in held:
            s.close()
    assert 0 < per_connection <= IDLE_HEAP_LIMIT_KIB, (
        f"an idle connection holds {per_connection:.2f} KiB of kshim's heap (at most {IDLE_HEAP_LIMIT_KIB})")
