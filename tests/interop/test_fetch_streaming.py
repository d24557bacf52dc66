"""Large answers that kshim does not hold whole or copy whole (forwarding.md).

- A Fetch answer passed on while it arrives, against the shared three-node Kafka cluster: one
  Fetch v17 through kshim's listener for broker A asks for a partition A leads (with a few
  hundred KiB of records) and one that broker B leads. Broker A answers the first with its
  records and the second with NOT_LEADER_OR_FOLLOWER and B's address in NodeEndpoints
  (KIP-951), after the records, at the end of the answer. The client must get every record
  byte, a frame whose size is right, and B at kshim's address, never the broker's.
- A Metadata answer whose topics take more than 64 KiB after its brokers, against the shared
  single node: kshim rewrites the brokers at its head and passes the topics on in the block
  they were read into, so the answer leaves in two parts under one size prefix. The client
  must get the broker's bytes after the brokers exactly, and the broker at kshim's address.
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


def read_node(buf: bytes, pos: int) -> tuple[int, str, int, int]:
    """A flexible node entry (id, host, port, rack, tags), as Metadata's brokers and Fetch's
    NodeEndpoints lay it out: (node id, host, port, the position after it)."""
    node_id = struct.unpack_from(">i", buf, pos)[0]
    host, pos = ke._compact_str(buf, pos + 4)
    port = struct.unpack_from(">i", buf, pos)[0]
    rack_len, pos = uvarint(buf, pos + 4)
    return node_id, host, port, skip_tags(buf, pos + max(rack_len - 1, 0))


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
                node_id, host, port, q = read_node(inner, q)
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
            brokers, topic_id, leaders = ke.metadata_v12_topic(kshim.bootstrap, topic)
            return leaders == {0: a, 1: b}
        assert ke.wait_until(led, 30, 0.5), f"leaders {leaders}, wanted {{0: {a}, 1: {b}}}"
        assert brokers[b] == ("127.0.0.1", ports[b]), brokers

        # Records into partition 0, at broker A through kshim.
        batch = ke.record_batch(RECORDS, RECORD_BYTES)
        produced = ke.exchange(f"127.0.0.1:{ports[a]}", ke.produce_v7(3, topic, 1, batch)[4:], 20)
        assert struct.unpack_from(">ihq", produced, 4 + 4 + 2 + len(topic) + 4)[1] == 0, "produce error"

        with socket.create_connection(("127.0.0.1", ports[a]), timeout=20) as sock:
            sock.sendall(ke.fetch_v17(7, topic_id, [0, 1]))
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


def metadata_v12_topics(names: list[str]) -> bytes:
    """A Metadata v12 request (without its size prefix) for `names`, none auto-created."""
    header = struct.pack(">hhih", 3, 12, 5, 6) + b"stream" + b"\x00"
    body = ke.encode_uvarint(len(names) + 1)
    for name in names:
        body += bytes(16) + ke.encode_compact_string(name) + b"\x00"
    return header + body + b"\x00\x00\x00"  # no auto-creation, no authorized operations, no tags


def after_brokers(resp: bytes) -> tuple[dict[int, tuple[str, int]], int]:
    """A Metadata v12 answer's brokers, and where what follows them (the cluster id) starts."""
    pos = skip_tags(resp, 4) + 4  # correlation id, header tags, throttle
    n, pos = uvarint(resp, pos)
    brokers = {}
    for _ in range(n - 1):
        node_id, host, port, pos = read_node(resp, pos)
        brokers[node_id] = (host, port)
    return brokers, pos


def topic_errors(resp: bytes) -> list[int]:
    """The error code of every topic of a Metadata v12 answer, in order."""
    _, pos = after_brokers(resp)
    cluster_len, pos = uvarint(resp, pos)
    pos += max(cluster_len - 1, 0) + 4  # cluster id, controller id
    errors = []
    n, pos = uvarint(resp, pos)
    for _ in range(n - 1):
        errors.append(struct.unpack_from(">h", resp, pos)[0])
        name_len, pos = uvarint(resp, pos + 2)
        pos += max(name_len - 1, 0) + 16 + 1  # name, topic id, is_internal
        partitions, pos = uvarint(resp, pos)
        for _ in range(max(partitions - 1, 0)):
            pos += 2 + 4 + 4 + 4  # error, index, leader, leader epoch
            for _ in range(3):  # replicas, isr, offline replicas
                count, pos = uvarint(resp, pos)
                pos += 4 * max(count - 1, 0)
            pos = skip_tags(resp, pos)
        pos = skip_tags(resp, pos + 4)  # authorized operations
    return errors


def test_a_large_metadata_answer_passes_on_what_follows_its_brokers_as_the_broker_sent_it(kafka_broker,
                                                                                          kshim_factory):
    from kafka.admin import KafkaAdminClient, NewTopic

    # 300 topics with names of about 230 bytes: some 90 KiB of topics after the broker.
    prefix = f"big-metadata-{uuid.uuid4().hex[:8]}-"
    names = [f"{prefix}{i:03d}-" + "x" * 200 for i in range(300)]
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names])
        request = metadata_v12_topics(names)

        def all_known() -> bool:
            return topic_errors(ke.exchange(kafka_broker.bootstrap, request, 10)) == [0] * len(names)
        assert ke.wait_until(all_known, 30, 0.5), "the topics were not all known within 30 s"

        kshim = kshim_factory(upstream=kafka_broker.bootstrap)
        direct = ke.exchange(kafka_broker.bootstrap, request, 10)
        via = ke.exchange(kshim.bootstrap, request, 10)
        direct_brokers, direct_at = after_brokers(direct)
        via_brokers, via_at = after_brokers(via)
        assert len(direct) - direct_at > 64 * 1024, "the answer is too small to be passed on in two parts"
        assert via[via_at:] == direct[direct_at:], "the topics did not come through byte for byte"
        assert via[:4] == direct[:4], "correlation id"
        listening = kshim.listening_ports()
        for node_id, (host, port) in via_brokers.items():
            assert port in listening and port != direct_brokers[node_id][1], (node_id, host, port)
    finally:
        try:
            admin.delete_topics(names)
        finally:
            admin.close()
