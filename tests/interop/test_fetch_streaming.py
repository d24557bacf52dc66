"""A Fetch answer that kshim passes on while it arrives (forwarding.md), against the shared
three-node Kafka cluster: one Fetch v17 through kshim's listener for broker A asks for a
partition A leads (with a few hundred KiB of records) and one that broker B leads. Broker A
answers the first with its records and the second with NOT_LEADER_OR_FOLLOWER and B's address
in NodeEndpoints (KIP-951), after the records, at the end of the answer. The client must get
every record byte, a frame whose size is right, and B at kshim's address, never the broker's.
"""

from __future__ import annotations

import socket
import struct
import uuid

import pytest

import kafka_env as ke

NOT_LEADER_OR_FOLLOWER = 6
RECORD_BYTES = 1024
RECORDS = 300  # about 300 KiB: far over the 64 KiB from which kshim streams


def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    return ke._uvarint(buf, pos)


def skip_tags(buf: bytes, pos: int) -> int:
    return ke._skip_tags(buf, pos)


def metadata_v12_topic(bootstrap: str, topic: str) -> tuple[dict[int, tuple[str, int]], bytes, dict[int, int]]:
    """(brokers {id: (host, port)}, the topic's id, {partition: leader}) from Metadata v12."""
    resp = ke.exchange(bootstrap, ke.metadata_v12(1, topic)[4:], 10)
    pos = 4
    pos = skip_tags(resp, pos)
    pos += 4  # throttle
    n, pos = uvarint(resp, pos)
    brokers = {}
    for _ in range(n - 1):
        node_id = struct.unpack_from(">i", resp, pos)[0]
        host, pos = ke._compact_str(resp, pos + 4)
        port = struct.unpack_from(">i", resp, pos)[0]
        pos += 4
        rack_len, pos = uvarint(resp, pos)
        pos += max(rack_len - 1, 0)
        pos = skip_tags(resp, pos)
        brokers[node_id] = (host, port)
    cluster_len, pos = uvarint(resp, pos)
    pos += max(cluster_len - 1, 0) + 4  # cluster id, controller id
    n, pos = uvarint(resp, pos)
    assert n == 2, "one topic asked for"
    error = struct.unpack_from(">h", resp, pos)[0]
    assert error == 0, f"Metadata error {error} for {topic}"
    _, pos = ke._compact_str(resp, pos + 2)
    topic_id = resp[pos:pos + 16]
    pos += 16 + 1  # topic id, is_internal
    n, pos = uvarint(resp, pos)
    leaders = {}
    for _ in range(n - 1):
        _err, index, leader = struct.unpack_from(">hii", resp, pos)
        leaders[index] = leader
        pos += 2 + 4 + 4 + 4  # error, index, leader, leader epoch
        for _ in range(3):  # replicas, isr, offline replicas
            count, pos = uvarint(resp, pos)
            pos += 4 * max(count - 1, 0)
        pos = skip_tags(resp, pos)
    return brokers, topic_id, leaders


def fetch_v17(topic_id: bytes, partitions: list[int]) -> bytes:
    """A Fetch v17 request (topic ids; no session, no wait), size prefix included."""
    header = struct.pack(">hhih", 1, 17, 7, 6) + b"stream" + b"\x00"
    body = struct.pack(">iiibii", 0, 1, 8 << 20, 0, 0, -1)  # max wait, min and max bytes, ...
    body += ke.encode_uvarint(2) + topic_id + ke.encode_uvarint(len(partitions) + 1)
    for p in partitions:
        # partition, leader epoch, fetch offset, last fetched epoch, log start, max bytes, tags
        body += struct.pack(">iiqiqi", p, -1, 0, -1, -1, 1 << 20) + b"\x00"
    body += b"\x00"  # topic tags
    body += b"\x01" + b"\x01" + b"\x00"  # no forgotten topics, empty rack id, no tags
    return struct.pack(">i", len(header) + len(body)) + header + body


def parse_fetch_v17(frame: bytes) -> tuple[dict[int, tuple[int, int]], list[tuple[int, str, int]], set[int]]:
    """({partition: (error, record bytes)}, NodeEndpoints [(id, host, port)], top-level tags);
    fails unless the frame is read exactly to its end."""
    assert struct.unpack_from(">i", frame, 0)[0] == 7, "correlation id"
    pos = skip_tags(frame, 4)
    pos += 4 + 2 + 4  # throttle, error, session
    partitions = {}
    n, pos = uvarint(frame, pos)
    for _ in range(n - 1):
        pos += 16
        np_, pos = uvarint(frame, pos)
        for _ in range(np_ - 1):
            index, error = struct.unpack_from(">ih", frame, pos)
            pos += 4 + 2 + 8 + 8 + 8
            na, pos = uvarint(frame, pos)
            for _ in range(max(na - 1, 0)):
                pos = skip_tags(frame, pos + 16)
            pos += 4  # preferred read replica
            size, pos = uvarint(frame, pos)
            pos += max(size - 1, 0)
            pos = skip_tags(frame, pos)
            partitions[index] = (error, max(size - 1, 0))
        pos = skip_tags(frame, pos)
    endpoints, tags = [], set()
    count, pos = uvarint(frame, pos)
    for _ in range(count):
        tag, pos = uvarint(frame, pos)
        size, pos = uvarint(frame, pos)
        tags.add(tag)
        if tag == 0:
            inner = frame[pos:pos + size]
            m, q = uvarint(inner, 0)
            for _ in range(m - 1):
                node_id = struct.unpack_from(">i", inner, q)[0]
                host, q = ke._compact_str(inner, q + 4)
                port = struct.unpack_from(">i", inner, q)[0]
                rack_len, q = uvarint(inner, q + 4)
                q = skip_tags(inner, q + max(rack_len - 1, 0))
                endpoints.append((node_id, host, port))
        pos += size
    assert pos == len(frame), f"the answer ends at {pos}, its frame at {len(frame)}"
    return partitions, endpoints, tags


def test_a_fetch_answer_passed_on_while_it_arrives_names_the_new_leader_at_kshim(kafka_trio):
    cluster = kafka_trio
    a, b = cluster.nodes[0].node_id, cluster.nodes[1].node_id
    topic = f"streamed-{uuid.uuid4().hex[:8]}"
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.internal_bootstrap, request_timeout_ms=20000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [a], 1: [b]})])
    finally:
        admin.close()
    ports = dict(zip((n.node_id for n in cluster.nodes), ke.free_ports(len(cluster.nodes))))
    kshim = ke.start_or_fail(ke.KshimProcess(upstream=cluster.bootstrap, listener_ports=ports,
                                             refresh_interval_ms=1000))
    try:
        brokers, topic_id, leaders = {}, b"", {}

        def led() -> bool:
            nonlocal brokers, topic_id, leaders
            brokers, topic_id, leaders = metadata_v12_topic(kshim.bootstrap, topic)
            return leaders == {0: a, 1: b}
        assert ke.wait_until(led, 30, 0.5), f"leaders {leaders}, wanted {{0: {a}, 1: {b}}}"
        assert brokers[b] == ("127.0.0.1", ports[b]), brokers

        # Records into partition 0, at broker A through kshim.
        batch = ke.record_batch(RECORDS, RECORD_BYTES)
        produced = ke.exchange(f"127.0.0.1:{ports[a]}", ke.produce_v7(3, topic, 1, batch)[4:], 20)
        assert struct.unpack_from(">ihq", produced, 4 + 4 + 2 + len(topic) + 4)[1] == 0, "produce error"

        with socket.create_connection(("127.0.0.1", ports[a]), timeout=20) as sock:
            sock.sendall(fetch_v17(topic_id, [0, 1]))
            frame = ke.read_frame(sock)
        partitions, endpoints, tags = parse_fetch_v17(frame)
        print(f"answer of {len(frame)} bytes: partitions {partitions}, NodeEndpoints {endpoints}, tags {tags}")
        assert partitions[0][0] == 0 and partitions[0][1] >= len(batch), partitions
        assert partitions[1][0] == NOT_LEADER_OR_FOLLOWER, partitions
        broker_ports = {n.port for n in cluster.nodes}
        assert all(port not in broker_ports for _, _, port in endpoints), endpoints
        if endpoints:
            assert endpoints == [(b, "127.0.0.1", ports[b])], endpoints
        else:
            # kshim's address did not fit where the broker's was: left out, and padded.
            assert 127 in tags, tags
        log = kshim.log_path.read_text()
        assert "does not decode" not in log
    finally:
        kshim.cleanup()
