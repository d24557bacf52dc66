"""SASL through kshim, against a real Apache Kafka 4.1.1 node whose client listener requires
SASL/PLAIN.

Client connections carry their own authentication: kshim answers ApiVersions and forwards
SaslHandshake and SaslAuthenticate unchanged on the client's own upstream connection, so the
broker authenticates each client itself. kshim's own connections (discovery) authenticate
with the credentials in `[upstream.sasl]`.

Once the broker accepts a client's authentication, kshim knows the client's principal
(User:NAME, for PLAIN and SCRAM-SHA-256 here), and UpdateFeatures is authorized against it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import kafka_env

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SCRAM_USER = ("carol", "carol-secret")
FEATURE = "acme.widgets"

CLIENT = r"""
import json, sys
from kafka import KafkaConsumer, KafkaProducer
bootstrap, user, password, topic = sys.argv[1:5]
auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username=user, sasl_plain_password=password)
try:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000,
                      max_block_ms=15000, **auth)
    sent = [f"sasl-{i}" for i in range(100)]
    for v in sent:
        p.send(topic, v.encode())
    p.flush(timeout=30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      group_id="sasl-group", consumer_timeout_ms=10000, **auth)
    got = [m.value.decode() for m in c]
    c.close()
    print(json.dumps({"sent": len(sent), "got": sorted(got) == sorted(sent), "n": len(got)}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


@pytest.fixture(scope="module")
def sasl_broker(kafka_jars):
    cluster = kafka_env.KafkaCluster(
        1,
        extra_ports=1,
        listener_overrides={
            "listeners": "SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},REPLICATION://127.0.0.1:{extra0}",
            "advertised.listeners": "SASL_PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{extra0}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        },
        format_args=["--add-scram", f"SCRAM-SHA-256=[name={SCRAM_USER[0]},password={SCRAM_USER[1]}]"],
        extra_properties={
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        },
    )
    c = kafka_env.start_or_fail(cluster)
    yield c
    c.cleanup()


@pytest.fixture
def proxy(kshim_factory, sasl_broker):
    return kshim_factory(
        f"""
[upstream]
bootstrap = "{sasl_broker.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
[upstream.sasl]
mechanism = "PLAIN"
username = "admin"
password = "admin-secret"
"""
    )


def run_client(bootstrap: str, user: str, password: str, topic: str) -> dict:
    cp = subprocess.run(
        [sys.executable, "-c", CLIENT, bootstrap, user, password, topic],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    lines = [line for line in cp.stdout.splitlines() if line.startswith("{")]
    assert lines, f"client printed nothing (rc={cp.returncode})\n{cp.stdout}\n{cp.stderr[-4000:]}"
    return json.loads(lines[-1])


def test_clients_authenticate_through_kshim(proxy, sasl_broker):
    out = run_client(proxy.bootstrap, "alice", "alice-secret", "sasl-ok")
    assert out.get("got") is True and out["n"] == 100, out
    # kshim found the cluster with its own credentials: the per-broker listener exists.
    assert "broker 1 (" in proxy.log_path.read_text()


def test_a_wrong_password_fails_as_it_does_against_the_broker(proxy, sasl_broker):
    via = run_client(proxy.bootstrap, "alice", "wrong", "sasl-bad")
    direct = run_client(sasl_broker.bootstrap, "alice", "wrong", "sasl-bad")
    assert "error" in via and "error" in direct, (via, direct)
    assert via["error"] == direct["error"], (via, direct)
    assert proxy.alive()


def test_kshim_discovery_needs_its_own_credentials(kshim_factory, sasl_broker):
    proc = kshim_factory(
        f"""
[upstream]
bootstrap = "{sasl_broker.bootstrap}"
refresh_interval_ms = 500
[upstream.listeners]
port_base = 0
[upstream.sasl]
username = "admin"
password = "not-the-password"
"""
    )
    info = kafka_env.api_versions(proc.bootstrap)
    assert set(info.api_keys) == {18, 57}, "nothing discovered, so only kshim's own APIs"
    assert "SASL/PLAIN authentication as admin failed" in proc.log_path.read_text()


def update_as(bootstrap: str, mechanism: str, user: str, password: str, level: int) -> dict:
    client = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
              "sasl_plain_username": user, "sasl_plain_password": password}
    return kafka_env.require_or_fail(kafka_env.kafka_python_update_features, bootstrap, client, FEATURE, level)


def test_the_sasl_principal_is_authorized(kshim_factory, sasl_broker):
    """alice (PLAIN) and carol (SCRAM-SHA-256) hold ALTER on CLUSTER, bob (PLAIN) does not."""
    proc = kshim_factory(
        f"""
[upstream]
bootstrap = "{sasl_broker.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
[upstream.sasl]
username = "admin"
password = "admin-secret"
[authorization]
alter_cluster = ["User:alice", "User:{SCRAM_USER[0]}"]
[features.ownership]
kshim_owned = ["acme.*"]
[features.supported]
"{FEATURE}" = {{ min = 1, max = 4 }}
[features.bootstrap]
"{FEATURE}" = 1
""",
        rust_log="info,kshim::server=debug",
    )
    alice = update_as(proc.bootstrap, "PLAIN", "alice", "alice-secret", 2)
    assert alice.get("result") == "ok" and alice["finalized"][FEATURE] == 2, alice
    bob = update_as(proc.bootstrap, "PLAIN", "bob", "bob-secret", 3)
    assert bob.get("error") == "ClusterAuthorizationFailedError" and bob["finalized"][FEATURE] == 2, bob
    carol = update_as(proc.bootstrap, "SCRAM-SHA-256", *SCRAM_USER, 3)
    assert carol.get("result") == "ok" and carol["finalized"][FEATURE] == 3, carol
    log = proc.log_path.read_text()
    refusals = [line for line in log.splitlines() if "no ALTER on CLUSTER" in line]
    assert refusals and all("principal=User:bob" in line for line in refusals), refusals
    for name in ("alice", "bob", SCRAM_USER[0]):
        assert f"principal=User:{name}" in log and "SASL authentication accepted" in log, name
    # A wrong SCRAM password: the broker refuses the exchange (kafka-python keeps retrying until
    # its bootstrap timeout), so nothing is authorized and nothing changes.
    wrong = update_as(proc.bootstrap, "SCRAM-SHA-256", SCRAM_USER[0], "not-it", 4)
    assert "error" in wrong and "result" not in wrong, wrong
    again = update_as(proc.bootstrap, "PLAIN", "alice", "alice-secret", 3)
    assert again.get("result") == "ok" and again["finalized"][FEATURE] == 3, again
