"""A rolling upgrade from Kafka 4.1.1 to 4.4.0 behind kshim.

Three combined nodes start on 4.1.1. While a Java 4.1.1 producer (idempotent, acks=all) and
consumer run through kshim against a topic with RF 3 and min.insync.replicas 2, the nodes are
moved to 4.4.0 one at a time (stopped, started on the 4.4.0 jars over the same data). After
each step, kshim's ApiVersions is the intersection of the brokers' tables (apart from the keys
kshim answers or caps itself, as in test_kafka_releases); no acknowledged record is lost.
Then `kshim features upgrade --release-version 4.4` through kshim finalizes metadata.version
4.4-IV2 on the cluster.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

import kafka_env as ke
from test_kafka_releases import DIFFERENCES
from test_proxy_clients import java, java_background, last_json

FROM, TO = "4.1.1", "4.4.0"


def intersection(tables: list[dict[int, tuple[int, int]]]) -> dict[int, tuple[int, int]]:
    """The API table every broker serves: each key all offer, at the versions all offer."""
    keys = set.intersection(*(set(t) for t in tables))
    out = {}
    for key in keys:
        lo, hi = max(t[key][0] for t in tables), min(t[key][1] for t in tables)
        if lo <= hi:
            out[key] = (lo, hi)
    return out


def expected_table(cluster: ke.KafkaCluster) -> dict[int, tuple[int, int]]:
    table = intersection([ke.api_versions(n.probe_bootstrap).api_keys for n in cluster.nodes])
    for key, (ours, _) in DIFFERENCES.items():
        if key in table or key in (18, 57):
            table[key] = ours
    return table


def test_a_rolling_upgrade_behind_kshim_loses_nothing(kafka_clusters, kshim_factory, kshim_binary, tmp_path):
    cluster = kafka_clusters.start(3, separate_inter_broker=True)
    proxy = kshim_factory(upstream=cluster.bootstrap)
    topic, prefix = f"rolling-{uuid.uuid4().hex[:8]}", f"rolling-{uuid.uuid4().hex[:8]}"
    created = java("admin", "--bootstrap", cluster.internal_bootstrap,
                   "--create", f"{topic}:3:3:min.insync.replicas=2")["created"]
    assert created == {topic: "ok"}, created

    stop_file, progress, expect = tmp_path / "stop", tmp_path / "progress", tmp_path / "expect"
    producer = java_background(
        tmp_path, "producer", "produce", "--bootstrap", proxy.bootstrap, "--topic", topic,
        "--count", "1", "--prefix", prefix, "--idempotent", "--interval-ms", "5",
        "--until-file", stop_file, "--progress-file", progress,
        "--prop", "delivery.timeout.ms=120000", "--prop", "request.timeout.ms=10000",
        "--prop", "linger.ms=5", timeout=300)
    consumer = java_background(
        tmp_path, "consumer", "consume", "--bootstrap", proxy.bootstrap, "--topic", topic,
        "--group", f"g-{uuid.uuid4().hex[:8]}", "--expect-file", expect, "--drain-ms", "2000", timeout=340)

    def acked() -> int:
        try:
            return int(progress.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_acked(n: int, what: str, timeout: float = 90) -> int:
        deadline = time.monotonic() + timeout
        while acked() < n:
            if not producer.alive():
                pytest.fail(f"producer exited while {what}:\n{ke.tail(producer.stderr_path)}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"acknowledged count stuck at {acked()} (< {n}) while {what}\n"
                            f"{ke.tail(producer.stderr_path)}", pytrace=False)
            time.sleep(0.2)
        return acked()

    steps = []
    try:
        wait_acked(200, f"starting on {FROM}")
        for node in cluster.nodes:
            cluster.stop_node(node.node_id)
            wait_acked(acked() + 100, f"node {node.node_id} was down")
            cluster.jars = ke.release_jars(TO)
            cluster.start_node(node.node_id)
            cluster.wait_brokers_registered()
            want = expected_table(cluster)
            got = ke.wait_until(lambda: (t := ke.api_versions(proxy.bootstrap).api_keys) == want and t, 30)
            assert got, (f"after node {node.node_id} moved to {TO}, kshim's ApiVersions is not the brokers' "
                         f"intersection: kshim {ke.api_versions(proxy.bootstrap).api_keys}, expected {want}")
            steps.append((node.node_id, acked(), len(want)))
            wait_acked(acked() + 100, f"node {node.node_id} was back on {TO}")
        stop_file.touch()
        prod = last_json(producer.wait(timeout=150), "background producer")
    finally:
        stop_file.touch()
        if producer.alive():
            producer.stop()

    acked_vals = prod["acked"]
    print(f"rolling upgrade: {len(acked_vals)} acknowledged, {len(prod['failed'])} failed; steps {steps}")
    expect.write_text("\n".join(acked_vals) + "\n")
    try:
        cons = last_json(consumer.wait(timeout=150), "background consumer")
    finally:
        consumer.stop()
    missing = sorted(set(acked_vals) - {r["value"] for r in cons["records"]})
    assert not missing, f"{len(missing)} acknowledged records never consumed: {missing[:10]}"

    # Every node runs 4.4.0: the new release is finalized through kshim.
    cp = subprocess.run([str(kshim_binary), "features", "--bootstrap-server", proxy.bootstrap,
                         "upgrade", "--release-version", "4.4"],
                        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, f"{cp.stdout}{cp.stderr}"
    assert "metadata.version was upgraded to 33." in cp.stdout, cp.stdout
    finalized = ke.wait_until(
        lambda: (f := ke.api_versions(proxy.bootstrap).finalized).get("metadata.version") == (33, 33) and f, 15)
    assert finalized, ke.api_versions(proxy.bootstrap).finalized
    direct = ke.api_versions(cluster.nodes[0].probe_bootstrap).finalized
    assert direct["metadata.version"] == (33, 33), direct
