"""kshim in front of a real Apache Kafka 4.1.1 node: the merged feature view and who owns what.

Upstream-owned features (those the broker advertises) are mirrored from the broker, and
UpdateFeatures for them is sent on to it; kshim-owned features (configured names or prefixes,
and features the broker does not know) stay in kshim's store, bounded by every upstream
broker that advertises them too. A request that mixes both kinds is refused whole. The epoch
clients see never goes back. With the upstream away kshim keeps answering ApiVersions from
what it last saw, and recovers by itself.

Every check here talks to the real broker as well, so that "the same as the broker" is
measured, not assumed.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import time

import pytest

import kafka_env

KSHIM_FEATURE = "kshim.interop.version"

# kshim supports share.version 0-3 itself and claims it, so that the broker (which supports
# only 0-1) is the supporter that bounds it.
PROXY_CONFIG = f"""
[upstream]
refresh_interval_ms = 500
connect_timeout_ms = 2000
[upstream.listeners]
port_base = 0

[features.ownership]
kshim_owned = ["kshim.*", "share.version"]

[features.supported]
"metadata.version" = {{ min = 7, max = 27 }}
"group.version" = {{ min = 0, max = 1 }}
"transaction.version" = {{ min = 0, max = 2 }}
"share.version" = {{ min = 0, max = 3 }}
"{KSHIM_FEATURE}" = {{ min = 1, max = 5 }}

[features.bootstrap]
"metadata.version" = 27
"group.version" = 1
"transaction.version" = 2
"share.version" = 0
"{KSHIM_FEATURE}" = 2
"""


def proxy_config(broker: kafka_env.KafkaCluster, extra: str = "") -> str:
    # The first bootstrap address has nobody listening: kshim must fall back to the next.
    dead = f"127.0.0.1:{kafka_env.free_port()}"
    return (
        f'[upstream]\nbootstrap = "{dead},{broker.bootstrap}"\n'
        + PROXY_CONFIG.replace("[upstream]\n", "", 1)
        + extra
    )


@pytest.fixture(scope="module")
def cluster(kafka_clusters):
    """A node of our own: these tests change its finalized features."""
    c = kafka_clusters.start(1)
    yield c
    c.cleanup()


@pytest.fixture
def proxy(kshim_factory, cluster):
    return kshim_factory(proxy_config(cluster))


def describe(bootstrap: str) -> dict:
    return kafka_env.require_or_fail(kafka_env.describe_features, bootstrap)


def levels(d: dict) -> dict[str, int]:
    return {name: r["max"] for name, r in d["finalized"].items()}


def test_upstream_features_are_mirrored_and_kshims_are_added(proxy, cluster):
    direct = describe(cluster.bootstrap)
    via = describe(proxy.bootstrap)
    broker_owned = {n: l for n, l in levels(direct).items() if n != "share.version"}
    assert {n: l for n, l in levels(via).items() if n in broker_owned} == broker_owned
    for name in broker_owned:
        assert via["supported"][name] == direct["supported"][name], name
    assert levels(via)[KSHIM_FEATURE] == 2
    assert KSHIM_FEATURE not in direct["supported"]
    assert via["supported"]["share.version"] == {"min": 0, "max": 3}, "kshim's own range for a feature it claims"
    assert via["finalized_epoch"] >= 1


def test_upstream_owned_update_is_forwarded_and_mirrored_before_the_answer(proxy, cluster):
    before = describe(proxy.bootstrap)
    assert levels(before)["group.version"] == 1
    out = kafka_env.update_features(proxy.bootstrap, [("group.version", 0, "SAFE_DOWNGRADE")])
    assert out["group.version"]["result"] == "ok", out
    # Answered only once the mirror shows it: the very next describe through kshim agrees.
    after = describe(proxy.bootstrap)
    assert "group.version" not in after["finalized"]
    assert "group.version" not in describe(cluster.bootstrap)["finalized"], "the broker applied it"
    assert after["finalized_epoch"] > before["finalized_epoch"]

    out = kafka_env.update_features(proxy.bootstrap, [("group.version", 1, "UPGRADE")])
    assert out["group.version"]["result"] == "ok", out
    assert levels(describe(proxy.bootstrap))["group.version"] == 1
    assert levels(describe(cluster.bootstrap))["group.version"] == 1


def test_upstream_errors_come_back_as_the_broker_gives_them(proxy, cluster):
    via = kafka_env.update_features(proxy.bootstrap, [("group.version", 7, "UPGRADE")])
    direct = kafka_env.update_features(cluster.bootstrap, [("group.version", 7, "UPGRADE")])
    assert via["group.version"]["result"] == "error"
    assert via["group.version"]["error"] == direct["group.version"]["error"]
    assert via["group.version"]["message"] == direct["group.version"]["message"]


def test_kshim_owned_update_stays_in_kshim(proxy, cluster):
    out = kafka_env.update_features(proxy.bootstrap, [(KSHIM_FEATURE, 4, "UPGRADE")])
    assert out[KSHIM_FEATURE]["result"] == "ok", out
    assert levels(describe(proxy.bootstrap))[KSHIM_FEATURE] == 4
    assert KSHIM_FEATURE not in describe(cluster.bootstrap)["finalized"]


def test_an_upstream_broker_bounds_a_kshim_owned_feature_it_advertises(proxy):
    out = kafka_env.update_features(proxy.bootstrap, [("share.version", 2, "UPGRADE")])
    assert out["share.version"]["result"] == "error", out
    assert "Broker 1 only supports versions 0-1" in out["share.version"]["message"], out
    out = kafka_env.update_features(proxy.bootstrap, [("share.version", 1, "UPGRADE")])
    assert out["share.version"]["result"] == "ok", out
    assert levels(describe(proxy.bootstrap))["share.version"] == 1


def test_a_request_mixing_both_kinds_is_refused_whole(proxy, cluster):
    before_proxy, before_broker = levels(describe(proxy.bootstrap)), levels(describe(cluster.bootstrap))
    out = kafka_env.update_features(
        proxy.bootstrap, [("group.version", 0, "SAFE_DOWNGRADE"), (KSHIM_FEATURE, 5, "UPGRADE")]
    )
    for name in ("group.version", KSHIM_FEATURE):
        assert out[name]["result"] == "error", out
        assert out[name]["error"] == "InvalidRequestException", out
        assert "mixes features owned by the upstream cluster (group.version)" in out[name]["message"]
    assert levels(describe(proxy.bootstrap)) == before_proxy
    assert levels(describe(cluster.bootstrap)) == before_broker


def test_feature_command_through_kshim_lists_what_the_broker_lists(proxy, cluster):
    rc, via, err = kafka_env.run_feature_command(proxy.bootstrap, "describe")
    assert rc == 0, err
    rc, direct, err = kafka_env.run_feature_command(cluster.bootstrap, "describe")
    assert rc == 0, err

    def without_epoch(text: str) -> dict[str, str]:
        out = {}
        for line in text.splitlines():
            fields = dict(f.split(": ", 1) for f in line.split("\t"))
            fields.pop("Epoch")
            out[fields["Feature"]] = fields
        return out

    via_lines, direct_lines = without_epoch(via), without_epoch(direct)
    for name in ("metadata.version", "group.version", "transaction.version", "kraft.version"):
        assert via_lines[name] == direct_lines[name], name
    assert KSHIM_FEATURE in via_lines
    rc, out, err = kafka_env.run_feature_command(
        proxy.bootstrap, "upgrade", "--feature", "transaction.version=2"
    )
    assert rc == 0 and "transaction.version was upgraded to 2." in out, (out, err)


def test_the_epoch_never_goes_back_across_restarts(proxy, cluster):
    first = describe(proxy.bootstrap)["finalized_epoch"]
    proxy.restart()
    second = describe(proxy.bootstrap)["finalized_epoch"]
    assert second >= first
    out = kafka_env.update_features(proxy.bootstrap, [(KSHIM_FEATURE, 1, "SAFE_DOWNGRADE")])
    assert out[KSHIM_FEATURE]["result"] == "ok", out
    third = describe(proxy.bootstrap)["finalized_epoch"]
    assert third > second


def metadata_request() -> bytes:
    """Metadata v1 for every topic: a request kshim forwards."""
    body = struct.pack(">hhih", 3, 1, 7, 4) + b"test" + struct.pack(">i", -1)
    return struct.pack(">i", len(body)) + body


def test_upstream_away_then_back(kshim_factory, cluster):
    """The whole upstream goes away: kshim stays up, answers ApiVersions from its cache (also
    after its own restart), logs it once, stays ready through the first seconds (every replica
    shares the upstream: a blip must not take them all out of the load balancer), is not ready
    (but live) once the outage outlasts upstream.unready_after_ms, and picks the upstream up
    again by itself. It stops the module's node and starts it again; last here,
    so that no other test sees it stopped should it fail."""
    c = cluster
    admin_port = kafka_env.free_port()
    token = "readiness-token"
    config = proxy_config(c, f'[admin]\nlisten = "127.0.0.1:{admin_port}"\ntoken = "{token}"\n')
    proxy = kshim_factory(config.replace("[upstream]\n", "[upstream]\nunready_after_ms = 6000\n", 1))
    admin = kafka_env.AdminApi(admin_port, token)
    assert admin.call("GET", "/readyz")[0] == 200
    seen = kafka_env.api_versions(proxy.bootstrap)
    assert seen.finalized["metadata.version"] == (27, 27)
    node = c.nodes[0]
    kafka_env.stop_process(node.proc)
    assert kafka_env.wait_until(lambda: "keeps serving ApiVersions from its cached view" in proxy.log_path.read_text(), timeout=15)
    cached = kafka_env.api_versions(proxy.bootstrap)
    assert cached.finalized == seen.finalized and cached.finalized_epoch == seen.finalized_epoch
    assert proxy.alive()
    # Ready through the first failed refreshes, saying so.
    status, ready = admin.call("GET", "/readyz")
    assert status == 200 and "ready until upstream.unready_after_ms" in ready["checks"]["upstream"], ready
    # Not ready once the upstream has been away for unready_after_ms; still live.
    assert kafka_env.wait_until(lambda: admin.call("GET", "/readyz")[0] == 503, timeout=15)
    status, ready = admin.call("GET", "/readyz")
    assert ready["checks"]["upstream_reachable"] is False and "stopped answering" in ready["checks"]["upstream"], ready
    assert admin.call("GET", "/livez") == (200, {"status": "ok"})
    # A client reconnecting in a loop against the dead broker's listener: one warning for
    # the cause, not one per attempt.
    for _ in range(6):
        kafka_env.api_versions(proxy.bootstrap)
        with socket.create_connection(("127.0.0.1", int(proxy.bootstrap.rsplit(":", 1)[1])), timeout=5) as s:
            s.sendall(metadata_request())
            s.settimeout(5)
            try:
                s.recv(4)
            except OSError:
                pass
    refused = [line for line in proxy.log_path.read_text().splitlines()
               if " WARN " in line and "upstream connection to" in line and "failed" in line]
    causes = {re.sub(r"^.*?(upstream connection to)", r"\1", line).split(" (")[0] for line in refused}
    assert refused and len(refused) == len(causes), refused

    proxy.restart()
    after_restart = kafka_env.api_versions(proxy.bootstrap)
    assert after_restart.finalized == seen.finalized, "the mirror survives a restart"
    # Until the upstream answers, a restarted kshim offers only what it serves itself, and
    # says why in its log.
    assert set(after_restart.api_keys) == {18, 57}, after_restart.api_keys
    assert kafka_env.wait_until(
        lambda: "connected while no upstream broker has answered yet" in proxy.log_path.read_text(), timeout=10)
    status, ready = admin.call("GET", "/readyz")
    assert status == 503 and ready["checks"]["upstream"] == "no upstream broker has answered yet", ready

    c._launch(node)
    c._wait_ready(node, time.monotonic() + kafka_env.KAFKA_START_TIMEOUT_S, kafka_env.KAFKA_START_TIMEOUT_S)
    # Produce (key 0) is advertised only once kshim has seen the upstream's own table.
    assert kafka_env.wait_until(lambda: 0 in kafka_env.api_versions(proxy.bootstrap).api_keys, timeout=30)
    assert kafka_env.wait_until(lambda: "upstream reachable again" in proxy.log_path.read_text()
                                or admin.call("GET", "/readyz")[0] == 200, timeout=30)
    assert kafka_env.wait_until(lambda: admin.call("GET", "/readyz")[0] == 200, timeout=30)


def test_upgrade_all_finalizes_the_features_of_both_owners(kshim_factory, cluster):
    """`kshim features upgrade --all` in front of Kafka with a kshim-owned feature: Kafka's
    features go to the cluster and kshim's stay in kshim, in two requests (one request mixing
    them is refused), both in the dry run and in the real one. Kafka's own features are the
    upstream's here: nothing claims one."""
    config = proxy_config(cluster).replace('kshim_owned = ["kshim.*", "share.version"]', 'kshim_owned = ["kshim.*"]')
    config = "\n".join(line for line in config.splitlines() if not line.startswith('"share.version"'))
    proxy = kshim_factory(config)
    kshim = str(kafka_env.require_kshim_binary())

    def upgrade_all(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([kshim, "features", "--bootstrap-server", proxy.bootstrap, "upgrade", "--all", *extra],
                              capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)

    dry = upgrade_all("--dry-run")
    assert dry.returncode == 0, (dry.stdout, dry.stderr)
    assert f"{KSHIM_FEATURE} can be upgraded to 5." in dry.stdout and "share.version can be upgraded to 1." in dry.stdout, dry.stdout
    assert levels(describe(proxy.bootstrap))[KSHIM_FEATURE] == 2, "a dry run changes nothing"
    done = upgrade_all()
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert levels(describe(cluster.bootstrap)).get("share.version") == 1, "Kafka's feature, finalized by the cluster"
    assert kafka_env.wait_until(lambda: levels(describe(proxy.bootstrap)).get(KSHIM_FEATURE) == 5, 10)
    assert KSHIM_FEATURE not in describe(cluster.bootstrap)["finalized"]
