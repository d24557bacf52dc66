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
import uuid


import kafka_env as ke
from test_kafka_releases import DIFFERENCES
from test_proxy_clients import SteadyTraffic, java

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

    traffic = SteadyTraffic(tmp_path, proxy.bootstrap, topic, prefix, f"g-{uuid.uuid4().hex[:8]}", timeout=300)
    steps = []
    try:
        traffic.wait_acked(200, f"starting on {FROM}")
        for node in cluster.nodes:
            cluster.stop_node(node.node_id)
            traffic.wait_acked(traffic.acked() + 100, f"node {node.node_id} was down")
            cluster.jars = ke.release_jars(TO)
            cluster.start_node(node.node_id)
            cluster.wait_brokers_registered()
            want = expected_table(cluster)
            got = ke.wait_until(lambda: (t := ke.api_versions(proxy.bootstrap).api_keys) == want and t, 30)
            assert got, (f"after node {node.node_id} moved to {TO}, kshim's ApiVersions is not the brokers' "
                         f"intersection: kshim {ke.api_versions(proxy.bootstrap).api_keys}, expected {want}")
            steps.append((node.node_id, traffic.acked(), len(want)))
            traffic.wait_acked(traffic.acked() + 100, f"node {node.node_id} was back on {TO}")
        prod = traffic.stop()
    except BaseException:
        traffic.abandon()
        raise

    acked_vals = prod["acked"]
    print(f"rolling upgrade: {len(acked_vals)} acknowledged, {len(prod['failed'])} failed; steps {steps}")
    cons = traffic.consumed(acked_vals)
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
