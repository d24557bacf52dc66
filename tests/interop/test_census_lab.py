"""The client census and the discovery lab, with real clients through kshim in front of a real
Apache Kafka 4.1.1 node.

- Java, kafka-python, confluent-kafka, kcat and franz-go each appear in the census under
  the software name and version they send, with the API versions they used; the same shows in
  `kshim clients list/show` and in the Prometheus series.
- `impact --kafka-version 4.0` names the clients forced onto a version Kafka 4.0 removed (a
  confluent-kafka client the lab offers only Produce v0-v2, and kafka-python configured with
  api_version 0.10) and none of the modern ones.
- A lab scenario serves kcat a feature epoch that goes back; kafka-python on the same kshim
  reads the true one.
- A lab scenario answers UpdateFeatures with NOT_CONTROLLER twice; kafka-features.sh (the Java
  Admin client) retries and the change lands.
- 100,000 distinct fake client software names leave the census within its cap.
- A scenario with `release = "4.0"` presents Kafka 4.0 in front of the 4.1.1 node: 4.0's API
  ranges and levels, a 4.1-only Produce version refused as a 4.0 broker refuses it, and
  kafka-python served.

Run: .venv/bin/python -m pytest tests/interop/test_census_lab.py -p no:cacheprovider -ra
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import kafka_env as ke

REPO = Path(__file__).resolve().parents[2]
PROXY_CLIENTS_SRC = REPO / "tests" / "interop" / "java" / "ProxyClients.java"
GO_CLIENT = REPO / "build" / "bin" / "kshim-go-client"
TOKEN = "census-token"
KSHIM_FEATURE = "kshim.census.version"
TIMEOUT = 60


def uid() -> str:
    return uuid.uuid4().hex[:8]


def run(cmd, timeout=TIMEOUT, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def python_json(code: str, *args: str) -> dict:
    res = run([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL)
    lines = [l for l in res.stdout.splitlines() if l.startswith("{")]
    assert res.returncode == 0 and lines, f"rc={res.returncode}\n{res.stdout}\n{res.stderr[-4000:]}"
    return json.loads(lines[-1])


class Census:
    """The kshim under test, its admin API and the topic the clients write to."""

    def __init__(self, kshim: ke.KshimProcess, admin_port: int, topic: str):
        self.kshim = kshim
        self.bootstrap = kshim.bootstrap
        self.admin = ke.AdminApi(admin_port, TOKEN)
        self.admin_url = f"http://127.0.0.1:{admin_port}"
        self.topic = topic

    def clients(self, query: str = "") -> list[dict]:
        status, body = self.admin.get(f"/admin/clients{query}")
        assert status == 200, body
        return body["clients"]

    def by_software(self, name: str | None, version: str | None = None) -> dict:
        matches = [c for c in self.clients() if c["software_name"] == name
                   and (version is None or c["software_version"] == version)]
        assert len(matches) == 1, f"{name}/{version}: {[(c['software_name'], c['software_version']) for c in self.clients()]}"
        return matches[0]

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        res = run([self.kshim.binary, "clients", "--admin", self.admin_url, "--token", TOKEN, *args])
        assert res.returncode == 0, res.stderr
        return res


def config(admin_port: int) -> str:
    return f"""
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"

[features.ownership]
kshim_owned = ["kshim.*"]

[features.supported]
"{KSHIM_FEATURE}" = {{ min = 1, max = 5 }}

[features.bootstrap]
"{KSHIM_FEATURE}" = 1
"""

def start_census(broker, binary, extra: str = "") -> Census:
    admin_port = ke.free_port()
    kshim = ke.start_or_fail(ke.KshimProcess(config(admin_port) + extra, upstream=broker.bootstrap, binary=binary))
    assert ke.wait_until(lambda: ke.port_accepts("127.0.0.1", admin_port), 20), "admin API"
    assert ke.wait_until(lambda: 0 in ke.api_versions(kshim.bootstrap).api_keys, 30), "kshim sees the broker"
    topic = f"census-{uid()}"
    python_json(r"""
import json, sys
from kafka.admin import KafkaAdminClient, NewTopic
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=20000)
a.create_topics([NewTopic(sys.argv[2], 1, 1)])
a.close()
print(json.dumps({"ok": True}))
""", kshim.bootstrap, topic)
    return Census(kshim, admin_port, topic)


@pytest.fixture(scope="module")
def census(kafka_broker, kshim_binary):
    """kshim in front of the broker, after Java, kafka-python, confluent-kafka, kcat and
    franz-go have each produced through it (`.versions`: what the Python clients report)."""
    c = start_census(kafka_broker, kshim_binary)
    try:
        c.versions = modern_clients(c)
        yield c
    finally:
        c.kshim.stop()


def kcat() -> str:
    path = shutil.which("kcat")
    if not path:
        pytest.fail("kcat is not installed; run: bash scripts/install-deps.sh", pytrace=False)
    return path


def kcat_software() -> tuple[str, str]:
    """What kcat sends as its client software: librdkafka's defaults."""
    out = run([kcat(), "-V"]).stdout
    version = out.split("librdkafka ", 1)[1].split()[0]
    return "librdkafka", version


def used(client: dict, api_key: int) -> set[int]:
    return {a["version"] for a in client["apis"] if a["api_key"] == api_key}


KP_PRODUCE = r"""
import json, sys, kafka
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=sys.argv[1], acks="all")
for i in range(10):
    p.send(sys.argv[2], f"kp-{i}".encode()).get(timeout=20)
p.close()
print(json.dumps({"version": kafka.__version__}))
"""


def modern_clients(census: Census) -> dict:
    """Java, kafka-python, confluent-kafka, kcat and franz-go each produce through `census`; the
    software versions the Python clients report."""
    b, topic = census.bootstrap, census.topic
    # Java (the producer of the Kafka 4.1.1 clients)
    classes = ke.compile_java(PROXY_CLIENTS_SRC)
    res = ke.run_java(["ProxyClients", "produce", "--bootstrap", b, "--topic", topic, "--count", "20",
                       "--prefix", f"java-{uid()}", "--idempotent", "--timeout-ms", "50000"],
                      extra_classpath=[classes], timeout=TIMEOUT, log_config=ke.CLIENTS_LOG4J)
    assert res.rc == 0, res.stderr[-3000:]
    # kafka-python
    kp = python_json(KP_PRODUCE, b, topic)
    # confluent-kafka
    ck = python_json(r"""
import json, sys, confluent_kafka
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all"})
for i in range(10):
    p.produce(sys.argv[2], f"ck-{i}".encode())
left = p.flush(20)
print(json.dumps({"left": left, "version": confluent_kafka.__version__, "lib": confluent_kafka.libversion()[0]}))
""", b, topic)
    assert ck["left"] == 0
    # kcat
    res = run([kcat(), "-P", "-b", b, "-t", topic, "-X", "message.timeout.ms=20000"], input="k1\nk2\nk3\n")
    assert res.returncode == 0 and "ERROR" not in res.stderr, res.stderr
    # franz-go
    if not GO_CLIENT.exists():
        pytest.fail(f"{GO_CLIENT} is missing; run: bash scripts/install-deps.sh", pytrace=False)
    res = run([GO_CLIENT, "--bootstrap", b, "--topic", topic, "--timeout", "45s", "produce", "--count", "10",
               "--prefix", f"franz-{uid()}"])
    assert res.returncode == 0, res.stderr[-3000:]

    return {"kafka-python": kp["version"], "confluent": f"{ck['version']}-rdkafka-{ck['lib']}"}


def test_every_client_appears_with_its_software_and_api_versions(census):
    versions = census.versions
    java = census.by_software("apache-kafka-java", "4.1.1")
    kafka_python = census.by_software("kafka-python", versions["kafka-python"])
    confluent = census.by_software("confluent-kafka-python", versions["confluent"])
    kcat_client = census.by_software(*kcat_software())
    franz = census.by_software("kgo")
    assert franz["software_version"], franz
    for client in (java, kafka_python, confluent, kcat_client, franz):
        who = client["software_name"]
        assert client["principal"] == "User:ANONYMOUS" and client["security"] == "PLAINTEXT", client
        assert client["addresses"] == ["127.0.0.1"], client
        assert used(client, 0), f"{who} produced, but no Produce is counted: {client['apis']}"
        assert used(client, 3), f"{who}: no Metadata counted"
        assert client["served"] is None or client["served"]["epoch"] >= 0, client
        assert client["connections_total"] >= 1
    # Modern clients use modern versions: Produce v9+ (flexible), ApiVersions v3+ served.
    for client in (java, kafka_python, confluent, franz):
        assert min(used(client, 0)) >= 9, (client["software_name"], client["apis"])
        assert client["served"]["api_versions_version"] >= 3
    assert max(used(java, 0)) == 13, java["apis"]  # Kafka 4.1's Produce
    for client in (java, kafka_python, confluent, kcat_client, franz):
        assert used(client, 18), f"{client['software_name']}: its ApiVersions counts under it"

    # Filters.
    assert [c["software_name"] for c in census.clients("?software=kgo")] == ["kgo"]
    assert all(c["software_name"] == "apache-kafka-java" for c in census.clients("?software=apache-kafka-java/4.1.1"))
    assert {c["software_name"] for c in census.clients("?api_key=Produce")} >= {
        "apache-kafka-java", "kafka-python", "confluent-kafka-python", "kgo"}

    # The CLI, as a table and as JSON.
    table = census.cli("list").stdout
    for name in ("apache-kafka-java", "kafka-python", "confluent-kafka-python", kcat_software()[0], "kgo"):
        assert name in table, table
    shown = json.loads(census.cli("show", "--software", "kgo", "--output", "json").stdout)
    assert shown["clients"][0]["software_name"] == "kgo"
    assert "Produce" in census.cli("show", "--software", "kgo").stdout

    # Prometheus series by software and API.
    status, text = census.admin.get("/metrics")
    assert status == 200
    assert 'kshim_client_requests_total{software_name="apache-kafka-java",software_version="4.1.1",api_key="0",api_version="13"}' in text
    assert "kshim_census_clients " in text


MODERN = ("apache-kafka-java", "kafka-python", "confluent-kafka-python", "librdkafka", "kgo")


def test_impact_names_the_client_forced_onto_a_removed_version_only(census):
    """kafka-python configured for a 0.10 broker sends ApiVersions v0 (so no software name) and
    Produce v2, which Kafka 4.0 removed (the 4.1 broker refuses it too). The modern clients,
    already in the census, use nothing 4.0 removed. (A lab scenario offering Produce v0-v2 forces
    no modern client down: kafka-python 3, librdkafka 2.0 and 2.16 all refuse to produce below
    v3, so the impact report is tested with the configured old client.)"""
    assert {c["software_name"] for c in census.clients()} >= set(MODERN)
    out = python_json(r"""
import json, sys
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=sys.argv[1], api_version=(0, 10, 0), max_block_ms=5000,
                  request_timeout_ms=3000, retries=0)
try:
    p.send(sys.argv[2], b"old").get(timeout=8)
    outcome = "acked"
except Exception as e:
    outcome = f"{type(e).__name__}: {e}"
p.close(timeout=2)
print(json.dumps({"outcome": outcome}))
""", census.bootstrap, census.topic)
    assert out["outcome"] != "acked", "Kafka 4.1 does not take Produce v2"
    unnamed = census.by_software(None)
    assert 2 in used(unnamed, 0) and 0 in used(unnamed, 18), unnamed["apis"]

    status, report = census.admin.get("/admin/clients/impact?kafka_version=4.0")
    assert status == 200, report
    assert [a["software_name"] for a in report["affected"]] == [None], report["affected"]
    (old,) = report["affected"]
    assert old["addresses"] == ["127.0.0.1"] and old["principal"] == "User:ANONYMOUS"
    assert {(u["api"], u["version"], u["served_min"]) for u in old["apis"]} == {("Produce", 2, 3)}, old
    assert report["clients_checked"] >= len(MODERN) + 1
    # The same from the CLI.
    text = census.cli("impact", "--kafka-version", "4.0").stdout
    assert "1 of" in text and "Produce v2 (serves v3-v12" in text, text
    assert not any(name in text for name in MODERN), text
    status, report = census.admin.get("/admin/clients/impact?kafka_version=3.9")
    assert status == 200 and report["affected"] == [], [a["apis"] for a in report["affected"]]
    status, body = census.admin.get("/admin/clients/impact?kafka_version=2.8")
    assert status == 400 and "known: 3.0" in body["error"], body


def test_feature_impact_names_the_clients_that_use_the_feature(census):
    # The Java consumer with the KIP-848 protocol uses ConsumerGroupHeartbeat: group.version 1.
    classes = ke.compile_java(PROXY_CLIENTS_SRC)
    res = ke.run_java(["ProxyClients", "consume", "--bootstrap", census.bootstrap, "--topic", census.topic,
                       "--group", f"g-{uid()}", "--max-records", "3", "--protocol", "consumer",
                       "--timeout-ms", "50000"],
                      extra_classpath=[classes], timeout=TIMEOUT, log_config=ke.CLIENTS_LOG4J)
    assert res.rc == 0, res.stderr[-3000:]
    status, report = census.admin.get("/admin/clients/impact?feature=group.version=0")
    assert status == 200, report
    breaking = {c["software_name"]: c for c in report["would_break"]}
    assert "apache-kafka-java" in breaking, report
    assert {a["api"] for a in breaking["apache-kafka-java"]["apis"]} == {"ConsumerGroupHeartbeat"}
    status, report = census.admin.get("/admin/clients/impact?feature=group.version=1")
    assert report["would_break"] == [] and "apache-kafka-java" in {c["software_name"] for c in report["depend_on_it"]}
    # The broker finalizes group.version 1, so no client was served less.
    assert report["served_lower"] == [], report["served_lower"]
    status, report = census.admin.get("/admin/clients/impact?feature=kshim.census.version=3")
    assert {c["served_level"] for c in report["served_lower"]} <= {1, 2} and report["served_lower"], report
    text = census.cli("impact", "--feature", "group.version=0").stdout
    assert "ConsumerGroupHeartbeat v" in text and "needs level 1" in text, text


def test_transaction_version_impact_names_transactional_producers_only(census):
    """Produce v12+ needs transaction.version 2 only for transactional batches: a Java 4.4
    idempotent producer (Produce v13 while the broker finalizes 2) is not listed as breaking
    at transaction.version=1; a Java 4.1.1 transactional producer (EndTxn) is."""
    jars = ke.release_jars("4.4.0")
    clients_44 = ke.compile_java(REPO / "tests" / "interop" / "java" / "Kafka44Clients.java", jars=jars)
    res = ke.run_java(["Kafka44Clients", "produce", "--bootstrap", census.bootstrap, "--topic", census.topic,
                       "--count", "3", "--timeout-ms", "40000"],
                      extra_classpath=[clients_44], jars=jars, timeout=TIMEOUT, log_config=ke.CLIENTS_LOG4J)
    assert res.rc == 0, res.stderr[-3000:]
    classes = ke.compile_java(PROXY_CLIENTS_SRC)
    res = ke.run_java(["ProxyClients", "produce", "--bootstrap", census.bootstrap, "--topic", census.topic,
                       "--count", "4", "--prefix", "txn", "--transactional-id", f"txn-{uid()}",
                       "--txn-plan", "commit=4", "--timeout-ms", "40000"],
                      extra_classpath=[classes], timeout=TIMEOUT, log_config=ke.CLIENTS_LOG4J)
    assert res.rc == 0, res.stderr[-3000:]
    status, report = census.admin.get("/admin/clients/impact?feature=transaction.version=1")
    assert status == 200, report
    breaking = {(c["software_name"], c["software_version"]): c for c in report["would_break"]}
    assert ("apache-kafka-java", "4.1.1") in breaking, report
    assert {a["api"] for a in breaking[("apache-kafka-java", "4.1.1")]["apis"]} >= {"Produce", "EndTxn"}
    assert ("apache-kafka-java", "4.4.0") not in breaking, report
    used = census.by_software("apache-kafka-java", "4.4.0")["apis"]
    assert any(a["api"] == "Produce" and a["version"] >= 12 for a in used), used


def test_kcat_is_served_an_epoch_that_goes_back_while_kafka_python_reads_the_truth(census):
    b = census.bootstrap
    name, version = kcat_software()
    res = run([kcat(), "-L", "-b", b], timeout=30)
    assert res.returncode == 0, res.stderr
    truth = census.by_software(name, version)["served"]["epoch"]
    assert truth > 1, "the broker's epoch is a metadata offset, far above 1"
    status, body = census.admin.call("PUT", "/admin/lab/scenarios/kcat-epoch-back", {
        "match": {"software_name": name, "software_version": version},
        "features": {"epoch": 1},
    })
    assert status == 200, body
    try:
        res = run([kcat(), "-L", "-b", b], timeout=30)
        assert res.returncode == 0, res.stderr
        served = census.by_software(name, version)["served"]
        assert served["epoch"] == 1 and served["scenarios"] == ["kcat-epoch-back"], served
        kp = python_json(r"""
import json, sys
from kafka.admin import KafkaAdminClient
a = KafkaAdminClient(bootstrap_servers=sys.argv[1])
f = a.describe_features()
a.close()
print(json.dumps({"epochs": sorted({v["finalized_epoch"] for v in f.values() if "finalized_epoch" in v})}))
""", b)
        assert len(kp["epochs"]) == 1 and kp["epochs"][0] >= truth, kp
        status, scenarios = census.admin.get("/admin/lab/scenarios")
        mine = [s for s in scenarios["scenarios"] if s["name"] == "kcat-epoch-back"][0]
        assert mine["matched"] >= 1 and mine["applied"]["features"] >= 1, mine
        assert "discovery lab: scenario applies to this connection" in census.kshim.log_path.read_text()
    finally:
        census.admin.call("DELETE", "/admin/lab/scenarios/kcat-epoch-back")
    res = run([kcat(), "-L", "-b", b], timeout=30)
    assert res.returncode == 0
    assert census.by_software(name, version)["served"]["epoch"] >= truth


def test_java_admin_survives_not_controller_twice(census):
    status, body = census.admin.call("PUT", "/admin/lab/scenarios/not-controller-twice", {
        "match": {"software_name": "apache-kafka-java"},
        "errors": [{"api": "UpdateFeatures", "error_code": 41, "times": 2}],
    })
    assert status == 200, body
    try:
        rc, out, err = ke.run_feature_command(census.bootstrap, "upgrade", "--feature", f"{KSHIM_FEATURE}=2")
        assert rc == 0, f"{out}\n{err}"
        assert f"{KSHIM_FEATURE} was upgraded to 2" in out, out
        status, features = census.admin.get("/admin/features")
        assert features["finalized_features"][KSHIM_FEATURE]["max_version_level"] == 2, features
        status, scenarios = census.admin.get("/admin/lab/scenarios")
        mine = [s for s in scenarios["scenarios"] if s["name"] == "not-controller-twice"][0]
        assert mine["applied"]["error"] == 2 and mine["errors_left"] == {"UpdateFeatures": 0}, mine
        java = census.by_software("apache-kafka-java", "4.1.1")
        assert java["errors"].get("UpdateFeatures: NOT_CONTROLLER (41, discovery lab)") == 2, java["errors"]
        assert used(java, 57), java["apis"]
    finally:
        census.admin.call("DELETE", "/admin/lab/scenarios/not-controller-twice")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("VmRSS missing")


def test_census_stays_within_its_cap_under_100k_fake_clients(kshim_factory):
    admin_port = ke.free_port()
    kshim = kshim_factory(f"""
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"

[census]
max_clients = 1000
""")
    assert ke.wait_until(lambda: ke.port_accepts("127.0.0.1", admin_port), 20)
    admin = ke.AdminApi(admin_port, TOKEN)
    host, port = ke.split_hostport(kshim.bootstrap)
    total, batch, conns = 100_000, 2_000, 4

    def fake_clients(sock: socket.socket, start: int, count: int) -> None:
        frames = b"".join(
            struct.pack(">i", len(f)) + f
            for f in (ke.api_versions_request(3, (f"fake-client-{i}", "1.0"), i) for i in range(start, start + count)))
        sock.sendall(frames)
        for _ in range(count):
            (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
            ke._recv_exact(sock, size)

    socks = [socket.create_connection((host, port), timeout=30) for _ in range(conns)]
    fake_clients(socks[0], 0, 10)
    before = rss_kib(kshim.pid)
    started = time.monotonic()
    for n, start in enumerate(range(10, total, batch)):
        fake_clients(socks[n % conns], start, min(batch, total - start))
        if n % 10 == 0:
            status, body = admin.get("/admin/clients?software=nobody")
            assert body["kept"] <= 1000, body
    elapsed = time.monotonic() - started
    status, body = admin.get("/admin/clients")
    after = rss_kib(kshim.pid)
    for s in socks:
        s.close()
    assert body["kept"] <= 1000 and body["max_clients"] == 1000, {k: body[k] for k in ("kept", "evicted")}
    # Every fake client was counted, then kept or evicted (plus the unnamed first aggregate).
    assert body["kept"] + body["evicted"] >= total, {k: body[k] for k in ("kept", "evicted")}
    names = {c["software_name"] for c in body["clients"]}
    assert {f"fake-client-{total - 1 - i}" for i in range(conns)} <= names, "live connections' clients are kept"
    status, metrics = admin.get("/metrics")
    series = [l for l in metrics.splitlines() if l.startswith("kshim_client_requests_total{")]
    assert len(series) <= 21, f"{len(series)} series"
    growth = (after - before) / 1024
    print(f"100k fake clients in {elapsed:.1f} s; RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB")
    assert growth < 48, f"RSS grew {growth:.1f} MiB for a census capped at 1000 clients"


def metadata_v1(correlation_id: int) -> bytes:
    client_id = b"kshim-interop"
    return struct.pack(">hhih", 3, 1, correlation_id, len(client_id)) + client_id + struct.pack(">i", -1)


def metadata_after_hello(bootstrap: str, software: str) -> float:
    """Seconds from a Metadata v1 request to its answer, on a connection that named `software`
    in ApiVersions first."""
    host, port = ke.split_hostport(bootstrap)
    with socket.create_connection((host, port), timeout=10) as sock:
        hello = ke.api_versions_request(3, (software, "1"))
        sock.sendall(struct.pack(">i", len(hello)) + hello)
        (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
        ke._recv_exact(sock, size)
        started = time.monotonic()
        request = metadata_v1(2)
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
        (correlation,) = struct.unpack(">i", ke._recv_exact(sock, size)[:4])
        assert correlation == 2
        return time.monotonic() - started


def test_lab_delays_a_forwarded_response(census):
    """In front of the broker, a delayed Metadata goes upstream at once and its response waits."""
    status, body = census.admin.call("PUT", "/admin/lab/scenarios/slow-metadata", {
        "match": {"software_name": "probe-slow"}, "delays": [{"api": "Metadata", "ms": 300}]})
    assert status == 200, body
    try:
        assert metadata_after_hello(census.bootstrap, "probe-slow") >= 0.3
        metadata_after_hello(census.bootstrap, "probe-plain")
        mine = [s for s in census.admin.get("/admin/lab/scenarios")[1]["scenarios"] if s["name"] == "slow-metadata"][0]
        assert mine["applied"]["delay"] == 1 and mine["matched"] == 1, mine
        slow = census.by_software("probe-slow", "1")
        assert used(slow, 3) == {1}, slow["apis"]
    finally:
        census.admin.call("DELETE", "/admin/lab/scenarios/slow-metadata")


def test_lab_shapes_only_the_connections_it_matches(kshim_factory):
    """ApiVersions as a scenario shapes it, on raw connections that name their software: a
    pinned epoch and levels (merged with the real view, or replacing it), supported features
    with a min of 0 sent to v3 too, an unknown tagged field, a narrower range; and a delay. A
    connection naming other software gets the real answer, at once."""
    admin_port = ke.free_port()
    kshim = kshim_factory(f"""
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"

[[lab.scenarios]]
name = "shape"
match = {{ software_name = "probe-shape*", address = "127.0.0.0/8" }}
features = {{ epoch = 3, levels = {{ "transaction.version" = 1, "group.version" = 0 }}, min_zero_filter = false }}
tagged_fields = [{{ tag = 12345, value = "deadbeef" }}]
api_versions = {{ UpdateFeatures = [0, 0] }}

[[lab.scenarios]]
name = "only-these"
match = {{ software_name = "probe-replace" }}
features = {{ levels = {{ "transaction.version" = 1 }}, replace = true }}

[[lab.scenarios]]
name = "slow"
match = {{ software_name = "probe-slow" }}
delays = [{{ api = "Metadata", ms = 400 }}]

[[lab.scenarios]]
name = "refuse-once"
match = {{ software_name = "probe-error" }}
errors = [{{ api = "ApiVersions", error_code = 42, times = 1 }}]
""")
    assert ke.wait_until(lambda: ke.port_accepts("127.0.0.1", admin_port), 20)
    admin = ke.AdminApi(admin_port, TOKEN)
    plain = ke.api_versions(kshim.bootstrap, software=("probe-plain", "1"))
    shaped = ke.api_versions(kshim.bootstrap, software=("probe-shape-x", "1"))
    assert plain.finalized_epoch != 3 and 12345 not in plain.other_tags
    assert shaped.finalized_epoch == 3
    # Pinned levels change the features they name (0 leaves one out); the rest stay real,
    # unless the scenario replaces the whole view.
    assert shaped.finalized["transaction.version"] == (1, 1) and "group.version" not in shaped.finalized
    assert shaped.finalized["metadata.version"] == plain.finalized["metadata.version"], shaped.finalized
    replaced = ke.api_versions(kshim.bootstrap, software=("probe-replace", "1"))
    assert replaced.finalized == {"transaction.version": (1, 1)}, replaced.finalized
    assert shaped.other_tags[12345] == bytes.fromhex("deadbeef")
    assert shaped.api_keys[57] == (0, 0) and plain.api_keys[57][1] >= 1
    # The ApiVersions that names the software already meets the scenario's error, once.
    assert ke.api_versions(kshim.bootstrap, software=("probe-error", "1")).error_code == 42
    assert ke.api_versions(kshim.bootstrap, software=("probe-error", "1")).error_code == 0
    min_zero = {n for n, (lo, _) in shaped.supported.items() if lo == 0}
    assert min_zero and not {n for n, (lo, _) in plain.supported.items() if lo == 0}, (shaped.supported, plain.supported)

    assert metadata_after_hello(kshim.bootstrap, "probe-slow") >= 0.4
    metadata_after_hello(kshim.bootstrap, "probe-plain")
    status, body = admin.get("/admin/lab/scenarios")
    by_name = {s["name"]: s for s in body["scenarios"]}
    assert by_name["slow"]["applied"]["delay"] == 1 and by_name["slow"]["matched"] == 1, by_name["slow"]
    assert by_name["shape"]["matched"] == 1 and by_name["shape"]["applied"]["tagged_fields"] == 1
    status, metrics = admin.get("/metrics")
    assert 'kshim_lab_applied_total{scenario="slow",action="delay"} 1' in metrics
    # A scenario the lab cannot apply is refused with its reason, and nothing changes.
    status, body = admin.call("PUT", "/admin/lab/scenarios/bad", {"errors": [{"api": "Produce", "error_code": 6}]})
    assert status == 400 and "no top-level error code" in body["error"], body
    assert {s["name"] for s in admin.get("/admin/lab/scenarios")[1]["scenarios"]} == {"shape", "only-these", "slow", "refuse-once"}


RELEASE_CLIENT = r"""
import json, sys, uuid
from kafka import KafkaConsumer, KafkaProducer
bootstrap = sys.argv[1]
topic = "as-release-" + uuid.uuid4().hex[:8]
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=20000)
for i in range(10):
    p.send(topic, f"r{i}".encode()).get(timeout=30)
p.close()
c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000)
got = sorted(m.value.decode() for _, m in zip(range(10), c))
c.close()
print(json.dumps({"got": got}))
"""


def release_apis(minor: str) -> dict[int, tuple[int, int]]:
    """What a broker of `minor` serves, from kshim's release data."""
    data = json.loads((REPO / "data" / "kafka" / f"{minor}.json").read_text())
    out = {}
    for a in data["apis"]:
        top = a["versions"][1] - int(a["latest_version_unstable"])
        if "broker" in a["listeners"] and top >= a["versions"][0]:
            out[a["key"]] = (a["versions"][0], top)
    return out


def test_a_release_scenario_presents_kafka_4_0_in_front_of_a_newer_broker(kshim_factory, kafka_broker):
    """A scenario with release = "4.0" in front of the Kafka 4.1.1 node: ApiVersions lists what a
    4.0 broker serves (Produce up to v12, no share-group API) and the levels 4.0's
    kafka-storage format finalizes; a Produce v13, which 4.1 serves and 4.0 does not, closes the
    connection as a 4.0 broker does; ApiVersions v5 gets 4.0's UNSUPPORTED_VERSION answer (v0, with
    ApiVersions v0-v4); kafka-python produces and consumes through it."""
    kshim = kshim_factory('[[lab.scenarios]]\nname = "as-4.0"\nrelease = "4.0"\n', upstream=kafka_broker.bootstrap)
    direct = ke.api_versions(kafka_broker.bootstrap)
    assert ke.wait_until(lambda: 0 in ke.api_versions(kshim.bootstrap).api_keys, 20)
    presented = ke.api_versions(kshim.bootstrap)
    want = release_apis("4.0")
    for key, (lo, hi) in presented.api_keys.items():
        assert key in want and want[key][0] <= lo and hi <= want[key][1], (key, (lo, hi), want.get(key))
    assert presented.api_keys[0][1] == 12 and direct.api_keys[0][1] >= 13
    assert 76 in direct.api_keys and 76 not in presented.api_keys, "ShareGroupHeartbeat came with 4.1"
    data = json.loads((REPO / "data" / "kafka" / "4.0.json").read_text())
    assert presented.finalized["metadata.version"][0] == data["latest_production_metadata_version"]

    host, port = ke.split_hostport(kshim.bootstrap)
    with socket.create_connection((host, port), timeout=10) as s:
        header = struct.pack(">hhih", 0, 13, 7, 5) + b"probe" + b"\x00"
        s.sendall(struct.pack(">i", len(header)) + header)
        s.settimeout(10)
        try:
            closed = s.recv(4) == b""
        except ConnectionResetError:
            closed = True
    assert closed, "a Produce v13 was answered"

    frame = ke.api_versions_request(5, ("probe-release", "1"))
    answer = ke.exchange(kshim.bootstrap, frame, 10)
    error_code, count = struct.unpack(">hi", answer[4:10])
    key, lo, hi = struct.unpack(">hhh", answer[10:16])
    assert (error_code, count, key, lo, hi) == (35, 1, 18, 0, 4), (error_code, count, key, lo, hi)

    out = python_json(RELEASE_CLIENT, kshim.bootstrap)
    assert out["got"] == sorted(f"r{i}" for i in range(10)), out
