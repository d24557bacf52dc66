"""The admin API, TLS material from PKCS#12 stores, TLS to the upstream, principals and
reloads, against a real Apache Kafka 4.1.1 node and real clients.

The broker's client listener speaks only TLS and requires client certificates. kshim stands in
front of it: its Kafka listeners serve a PKCS#12 keystore (client certificates requested), its
own connections to the broker use `[upstream.tls]` with a PKCS#12 truststore and kshim's client
keystore, and its admin API listens on HTTPS with a bearer token (from `${env:...}`) or the
client certificate of User:ops. Passwords come from `${env:...}` and `${file:...}` placeholders.
Certificates and stores are made with openssl and keytool here.

  (a) The Java producer and consumer (PKCS#12 truststore, and alice's keystore for mTLS),
      confluent-kafka and kcat produce to and consume from a topic through kshim only.
  (b) The certificate is rotated with PATCH while a Java producer keeps producing on a
      connection it opened before: the producer goes on with no failure and the same
      connection, every acknowledged record is consumed afterwards, and a new `openssl
      s_client` handshake sees the new certificate's fingerprint.
  (c) Bad material (a wrong keystore password, a file that is no keystore, a store without a
      key) is refused with 400 naming the key; the certificate being served stays.
  (d) The override survives a restart of kshim.
  (e) UpdateFeatures from alice (mTLS) is applied and from bob refused with
      CLUSTER_AUTHORIZATION_FAILED; PATCH authorization.alter_cluster turns that around.
  (f) The admin API refuses reads and writes without the token, with a wrong token, and with a
      client certificate whose principal is not in admin.principals; User:ops's certificate
      and the token are accepted; health checks need nothing.
  (g) /metrics parses with prometheus_client's text parser and its counters move with traffic.
  (h) Bad input to the admin API: malformed JSON, unknown keys, wrong types, an oversized body,
      path tricks in ${file:...}, and bytes that are not HTTP; nothing is half-applied and
      nothing stored is lost.

Run: .venv/bin/python -m pytest tests/interop/test_admin_api.py -p no:cacheprovider -ra
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import kafka_env as ke
from tls_support import (
    STORE_PASSWORD,
    assert_exactly,
    export_pkcs12,
    fingerprint,
    issue,
    java,
    java_ssl,
    make_certs,
    run,
    run_python,
    s_client,
    ssl_only_broker,
    uid,
    values,
)

ADMIN_TOKEN = "admin-token-" + "7c1f0e2a"
FEATURE = "acme.widgets"
NODE_ID = 1
PRINCIPAL_RULES = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"
HTTP_TIMEOUT_S = 20


# --------------------------------------------------------------------------------------------
# certificates, the broker and kshim


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return ke.require_or_fail(make_certs, tmp_path_factory.mktemp("admin-tls"))


@pytest.fixture(scope="module")
def extra(certs) -> dict[str, tuple[Path, Path]]:
    """More certificates (name -> (PEM, key)) and their PKCS#12 stores (NAME.p12)."""
    d = certs.dir
    out = {"alice": (certs.alice, certs.alice_key)}
    for name, cn, ext in [("server2", "localhost", "server_ext"), ("broker", "localhost", "server_ext"),
                          ("kshim-client", "kshim", "client_ext"), ("bob", "bob", "client_ext"),
                          ("ops", "ops", "client_ext")]:
        out[name] = ke.require_or_fail(issue, d, name, cn, certs.ca, certs.ca_key, ext)
    for name in ("server", "server2", "broker", "kshim-client", "bob"):
        ke.require_or_fail(export_pkcs12, d, name, certs.ca)
    # A secret that the config names only by placeholder.
    (d / "secrets.properties").write_text(f"truststore.password = {STORE_PASSWORD}\n")
    return out


@pytest.fixture(scope="module")
def cluster(kafka_clusters, certs, extra):
    """One node whose client listener is TLS only, with client certificates required."""
    c = kafka_clusters.start_cluster(ssl_only_broker(certs.dir / "broker.p12", truststore=certs.truststore))
    yield c
    c.cleanup()


def kshim_config(certs, admin_port: int) -> str:
    d = certs.dir
    secrets = d / "secrets.properties"
    return f"""
[tls]
keystore = "{d / 'server.p12'}"
keystore_password = "${{env:KSHIM_TEST_KEYSTORE_PASSWORD}}"
truststore = "{certs.truststore}"
truststore_password = "${{file:{secrets}:truststore.password}}"
client_auth = "requested"
principal_mapping_rules = '{PRINCIPAL_RULES}'

[authorization]
alter_cluster = ["User:alice"]

[features.ownership]
kshim_owned = ["acme.*"]

[features.supported]
"{FEATURE}" = {{ min = 1, max = 4 }}

[features.bootstrap]
"{FEATURE}" = 1

[config_providers]
file_allowed_paths = ["{d}"]

[admin]
listen = "127.0.0.1:{admin_port}"
token = "${{env:KSHIM_TEST_ADMIN_TOKEN}}"
principals = ["User:ops"]

[admin.tls]
certificate = "{certs.server}"
key = "{certs.server_key}"
client_auth = "requested"
ca = "{certs.ca}"
principal_mapping_rules = '{PRINCIPAL_RULES}'
"""


def upstream_tls(certs, cluster) -> str:
    d = certs.dir
    return f"""
[upstream]
bootstrap = "{cluster.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
[upstream.listeners.ports]
"{NODE_ID}" = {cluster.kshim_node_port}
[upstream.tls]
truststore = "{certs.truststore}"
truststore_password = "${{file:{d / 'secrets.properties'}:truststore.password}}"
keystore = "{d / 'kshim-client.p12'}"
keystore_password = "${{env:KSHIM_TEST_KEYSTORE_PASSWORD}}"
"""


class Admin:
    """HTTPS calls to kshim's admin API, verified against the test CA."""

    def __init__(self, certs, extra: dict, port: int):
        self.certs = certs
        self.extra = extra
        self.port = port

    def call(self, method: str, path: str, *, body=None, token: str | None = ADMIN_TOKEN,
             cert: str | None = None, raw: bytes | None = None) -> tuple[int, object]:
        ctx = ssl.create_default_context(cafile=str(self.certs.ca))
        if cert:
            pem, key = self.extra[cert]
            ctx.load_cert_chain(str(pem), str(key))
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=HTTP_TIMEOUT_S) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text


@pytest.fixture(scope="module")
def kshim(cluster, certs, extra, kshim_binary):
    admin_port, node_port = ke.free_ports(2)
    cluster.kshim_node_port = node_port
    config = kshim_config(certs, admin_port) + upstream_tls(certs, cluster)
    proc = ke.KshimProcess(config, upstream=cluster.bootstrap, listener_ports={NODE_ID: node_port},
                           binary=kshim_binary, env={"KSHIM_TEST_KEYSTORE_PASSWORD": STORE_PASSWORD,
                                                     "KSHIM_TEST_ADMIN_TOKEN": ADMIN_TOKEN})
    ke.start_or_fail(proc)
    proc.admin = Admin(certs, extra, admin_port)
    proc.node_port = node_port
    wait_ready(proc)
    yield proc
    proc.cleanup()


def wait_ready(proc, timeout: float = 30):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            status, body = proc.admin.call("GET", "/readyz", token=None)
            if status == 200:
                return
            last = (status, body)
        except OSError as e:
            last = repr(e)
        time.sleep(0.3)
    pytest.fail(f"kshim's /readyz did not turn 200 within {timeout}s: {last}\n{ke.tail(proc.log_path)}",
                pytrace=False)


def served_fingerprint(port: int, certs) -> str:
    res = s_client(port, certs, "-verify_return_error")
    assert res.rc == 0 and res.verified, str(res)
    return fingerprint(res.stdout)


def topic(name: str) -> str:
    return f"admin-{name}-{uid()}"


def create_topic(cluster, name: str) -> None:
    """On the broker itself, over its plaintext inter-broker listener."""
    out = java("admin", "--bootstrap", cluster.internal_bootstrap, "--create", f"{name}:2:1", props={})
    assert out["created"][name] == "ok", out


# --------------------------------------------------------------------------------------------
# (a) real clients through kshim, TLS on both sides


def test_java_clients_with_pkcs12_stores(cluster, certs, kshim):
    t = topic("java")
    create_topic(cluster, t)
    for who, keystore in (("trust-only", None), ("alice-mtls", certs.alice_keystore)):
        props = java_ssl(certs, keystore)
        prod = java("produce", "--bootstrap", kshim.bootstrap, "--topic", t, "--count", 50, "--prefix", who,
                    props=props)
        assert not prod["failed"] and len(prod["acked"]) == 50, prod
    cons = java("consume", "--bootstrap", kshim.bootstrap, "--topic", t, "--group", f"g-{uid()}",
                "--count", 100, "--drain-ms", "1500", props=java_ssl(certs, certs.alice_keystore))
    assert_exactly([r["value"] for r in cons["records"]], values("trust-only") + values("alice-mtls"),
                   "Java consumer over mTLS")


CK_ROUND_TRIP = r"""
import json, sys, time
from confluent_kafka import Producer, Consumer
bootstrap, topic, sec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
acked, errors = [], []
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000,
              "error_cb": lambda e: errors.append(str(e)), **sec})
for i in range(50):
    p.produce(topic, value=f"ck-{i}".encode(),
              on_delivery=lambda err, m: None if err else acked.append(m.value().decode()))
p.flush(25)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-" + topic, "auto.offset.reset": "earliest",
              "error_cb": lambda e: errors.append(str(e)), **sec})
c.subscribe([topic])
got, deadline = [], time.time() + 30
while time.time() < deadline and len(got) < 50:
    m = c.poll(0.5)
    if m is not None and not m.error():
        got.append(m.value().decode())
c.close()
print(json.dumps({"acked": acked, "records": got, "errors": errors}))
"""


def test_confluent_kafka_and_kcat(cluster, certs, kshim):
    t = topic("librdkafka")
    create_topic(cluster, t)
    sec = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca)}
    out = run_python(CK_ROUND_TRIP, kshim.bootstrap, t, json.dumps(sec))
    assert sorted(out["acked"]) == sorted(values("ck")), out
    assert_exactly(out["records"], values("ck"), "confluent-kafka")

    kt = topic("kcat")
    create_topic(cluster, kt)
    ssl_args = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs.ca}",
                "-X", f"ssl.certificate.location={certs.alice}", "-X", f"ssl.key.location={certs.alice_key}"]
    lines = "\n".join(values("kcat")) + "\n"
    res = run(["kcat", "-P", "-b", kshim.bootstrap, "-t", kt, *ssl_args], input=lines)
    assert res.returncode == 0, res.stderr
    res = run(["kcat", "-C", "-b", kshim.bootstrap, "-t", kt, "-o", "beginning", "-e", "-q", *ssl_args])
    assert res.returncode == 0, res.stderr
    assert_exactly(res.stdout.split(), values("kcat"), "kcat over mTLS")


# --------------------------------------------------------------------------------------------
# (b) rotation while a producer keeps producing; (c) bad material; (d) restart


def producer_connections(pid: int, port: int) -> set[int]:
    """Local ports of process `pid`'s established connections to `port`."""
    mine = ke._socket_inodes(pid)
    return {lport for lport, _, inode in ke.established_to({port}) if inode in mine}


def test_rotation_spares_the_producer_and_new_handshakes_see_the_new_certificate(cluster, certs, extra, kshim,
                                                                                 tmp_path):
    first = fingerprint(certs.server.read_text())
    second = fingerprint(extra["server2"][0].read_text())
    assert first != second
    status, answer = kshim.admin.call("DELETE", "/admin/config/tls.keystore")
    assert status in (200, 404), answer
    assert served_fingerprint(kshim.port, certs) == first
    t = topic("rotation")
    create_topic(cluster, t)
    classes = ke.require_or_fail(ke.compile_java, ke.INTEROP_DIR / "java" / "ProxyClients.java")
    stop_file, progress = tmp_path / "stop", tmp_path / "progress"
    props = []
    for k, v in java_ssl(certs, certs.alice_keystore).items():
        props += ["--prop", f"{k}={v}"]
    producer = ke.BackgroundJava(
        ["ProxyClients", "produce", "--bootstrap", kshim.bootstrap, "--topic", t, "--count", "1",
         "--prefix", "rot", "--interval-ms", "10", "--until-file", str(stop_file),
         "--progress-file", str(progress), "--timeout-ms", "120000", *props],
        workdir=tmp_path, name="producer", extra_classpath=[classes], log_config=ke.CLIENTS_LOG4J)

    def acked() -> int:
        try:
            return int(progress.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_acked(n: int, what: str, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while acked() < n:
            assert producer.alive(), f"producer exited while {what}:\n{ke.tail(producer.stderr_path)}"
            assert time.monotonic() < deadline, f"acknowledged count stuck at {acked()} while {what}"
            time.sleep(0.1)
        return acked()

    try:
        before = wait_acked(100, "starting")
        connections = producer_connections(producer.proc.pid, kshim.node_port)
        assert connections, "the producer has a TLS connection to kshim's broker listener"
        started = time.monotonic()
        status, answer = kshim.admin.call("PATCH", "/admin/config",
                                          body={"tls.keystore": str(certs.dir / "server2.p12")})
        took = time.monotonic() - started
        assert status == 200, answer
        assert answer["applied"] == ["listener TLS"], answer
        print(f"PATCH of tls.keystore answered in {took * 1000:.1f} ms with {before} records acknowledged")
        assert served_fingerprint(kshim.port, certs) == second, "a new handshake sees the new certificate"
        assert served_fingerprint(kshim.node_port, certs) == second
        after = wait_acked(acked() + 300, "after the rotation")
        assert producer_connections(producer.proc.pid, kshim.node_port) >= connections, (
            "the producer's connection from before the rotation is still open and in use")
        stop_file.touch()
        result = producer.wait(timeout=60)
    finally:
        stop_file.touch()
        if producer.alive():
            producer.stop()
    out = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    assert not out["failed"], out["failed"][:5]
    assert len(out["acked"]) >= after > before
    cons = java("consume", "--bootstrap", kshim.bootstrap, "--topic", t, "--group", f"g-{uid()}",
                "--count", len(out["acked"]), "--drain-ms", "1500", props=java_ssl(certs), timeout=90)
    assert_exactly([r["value"] for r in cons["records"]], out["acked"], "records produced across the rotation")


def test_bad_material_is_refused_and_the_current_certificate_stays(certs, kshim):
    current = served_fingerprint(kshim.port, certs)
    garbage = certs.dir / "garbage.p12"
    garbage.write_bytes(b"\x30\x82garbage-not-pkcs12" * 10)
    cases = [
        ({"tls.keystore_password": "not-the-password"}, "tls.keystore", "password"),
        ({"tls.keystore": str(garbage)}, "tls.keystore", "PKCS#12"),
        ({"tls.keystore": str(certs.truststore)}, "tls.keystore", "no private key"),
        ({"tls.keystore": str(certs.dir / "missing.p12")}, "tls.keystore", "cannot read"),
        ({"tls.client_auth": "sometimes"}, "tls.client_auth", "sometimes"),
        ({"tls.protocols": ["TLSv1.1"]}, "tls.protocols", "TLSv1.1"),
    ]
    for body, key, words in cases:
        status, answer = kshim.admin.call("PATCH", "/admin/config", body=body)
        assert status == 400, (body, answer)
        assert words in json.dumps(answer["errors"].get(key, [])), (body, answer)
        assert STORE_PASSWORD not in json.dumps(answer), "a resolved secret never shows"
    assert served_fingerprint(kshim.port, certs) == current, "the certificate being served stays"
    status, overrides = kshim.admin.call("GET", "/admin/config")
    assert status == 200 and "tls.keystore_password" not in overrides, overrides


def test_overrides_survive_a_restart(certs, extra, kshim):
    status, answer = kshim.admin.call("PATCH", "/admin/config", body={"tls.keystore": str(certs.dir / "server2.p12")})
    assert status == 200, answer
    status, before = kshim.admin.call("GET", "/admin/config")
    assert status == 200 and before.get("tls.keystore") == str(certs.dir / "server2.p12"), before
    kshim.restart()
    wait_ready(kshim)
    status, after = kshim.admin.call("GET", "/admin/config")
    assert (status, after) == (200, before)
    second = fingerprint(extra["server2"][0].read_text())
    assert served_fingerprint(kshim.port, certs) == second
    assert "stored config overrides applied" in kshim.log_text()


# --------------------------------------------------------------------------------------------
# (e) principals and authorization


def update_as(kshim, certs, extra, who: str, level: int) -> dict:
    pem, key = extra[who]
    client = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_certfile": str(pem),
              "ssl_keyfile": str(key)}
    return ke.require_or_fail(ke.kafka_python_update_features, kshim.bootstrap, client, FEATURE, level)


def test_update_features_needs_alter_on_cluster(certs, extra, kshim):
    alice = update_as(kshim, certs, extra, "alice", 2)
    assert alice.get("result") == "ok" and alice["finalized"][FEATURE] == 2, alice
    bob = update_as(kshim, certs, extra, "bob", 3)
    assert bob.get("error") == "ClusterAuthorizationFailedError" and bob["finalized"][FEATURE] == 2, bob
    refusals = [line for line in kshim.log_text().splitlines() if "no ALTER on CLUSTER" in line]
    assert refusals and "principal=User:bob" in refusals[-1], refusals[-3:]

    status, answer = kshim.admin.call("PATCH", "/admin/config", body={"authorization.alter_cluster": ["User:bob"]})
    assert status == 200 and answer["applied"] == ["authorization"], answer
    bob = update_as(kshim, certs, extra, "bob", 3)
    assert bob.get("result") == "ok" and bob["finalized"][FEATURE] == 3, bob
    alice = update_as(kshim, certs, extra, "alice", 4)
    assert alice.get("error") == "ClusterAuthorizationFailedError", alice
    status, answer = kshim.admin.call("DELETE", "/admin/config/authorization.alter_cluster")
    assert status == 200, answer
    alice = update_as(kshim, certs, extra, "alice", 4)
    assert alice.get("result") == "ok" and alice["finalized"][FEATURE] == 4, alice


# --------------------------------------------------------------------------------------------
# (f) who may use the admin API


def test_the_admin_api_needs_a_credential(kshim):
    admin = kshim.admin
    change = {"log.level": "info,kshim=debug"}
    for token, cert, want in [(None, None, 401), ("wrong-token", None, 401), (None, "bob", 403),
                              ("wrong-token", "bob", 403)]:
        for method, path, body in [("PATCH", "/admin/config", change), ("POST", "/admin/config/validate", change),
                                   ("DELETE", "/admin/config/log.level", None), ("GET", "/admin/config", None),
                                   ("GET", "/metrics", None)]:
            status, answer = admin.call(method, path, body=body, token=token, cert=cert)
            assert status == want, (method, path, token, cert, status, answer)
    status, answer = admin.call("GET", "/admin/config", token=None, cert="bob")
    assert status == 403 and "User:bob" in answer["error"], answer
    # User:ops's certificate alone is a credential; so is the token alone.
    status, answer = admin.call("POST", "/admin/config/validate", body=change, token=None, cert="ops")
    assert status == 200 and answer["valid"] is True, answer
    status, answer = admin.call("PATCH", "/admin/config", body=change, token=ADMIN_TOKEN)
    assert status == 200 and answer["applied"] == ["log level"], answer
    status, answer = admin.call("DELETE", "/admin/config/log.level", token=None, cert="ops")
    assert status == 200, answer
    for path in ("/healthz", "/readyz"):
        status, answer = admin.call("GET", path, token=None)
        assert status == 200, (path, answer)
    # Plain HTTP on the HTTPS port gets no answer.
    with socket.create_connection(("127.0.0.1", admin.port), timeout=5) as s:
        s.sendall(b"GET /admin/config HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(5)
        try:
            data = s.recv(4096)
        except (socket.timeout, ConnectionResetError):
            data = b""
    assert b"HTTP/1.1 200" not in data


# --------------------------------------------------------------------------------------------
# (g) metrics


def scrape(kshim) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    status, text = kshim.admin.call("GET", "/metrics")
    assert status == 200 and isinstance(text, str), text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def total(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == want for k, want in labels.items()))


KP_PRODUCE = r"""
import json, sys
from kafka import KafkaProducer
bootstrap, topic, ca = sys.argv[1:4]
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", security_protocol="SSL", ssl_cafile=ca,
                  linger_ms=0, request_timeout_ms=15000)
for i in range(40):
    p.send(topic, f"m-{i}".encode()).get(timeout=15)
p.close()
print(json.dumps({"sent": 40}))
"""


def test_metrics_parse_and_move_with_traffic(cluster, certs, kshim):
    t = topic("metrics")
    create_topic(cluster, t)
    before = scrape(kshim)
    run_python(KP_PRODUCE, kshim.bootstrap, t, str(certs.ca))
    bad = {"tls.protocols": ["SSLv3"]}
    status, _ = kshim.admin.call("PATCH", "/admin/config", body=bad)
    assert status == 400
    after = scrape(kshim)

    def moved(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("kshim_requests_total", api="Produce", outcome="forwarded") >= 40
    assert moved("kshim_requests_total", api="ApiVersions", outcome="answered") >= 1
    assert moved("kshim_requests_total", api="Metadata", outcome="forwarded") >= 1
    assert moved("kshim_request_duration_seconds_count", api="Produce", outcome="forwarded") >= 40
    assert moved("kshim_received_bytes_total") > 40 * 10 and moved("kshim_sent_bytes_total") > 0
    assert moved("kshim_connections_accepted_total", route="bootstrap") >= 1
    assert moved("kshim_connections_accepted_total", route="broker") >= 1
    assert moved("kshim_config_reloads_total", source="admin", result="refused") == 1
    assert total(after, "kshim_upstream_broker_up", node="1") == 1
    assert total(after, "kshim_upstream_reachable") == 1
    assert total(after, "kshim_finalized_feature_level", feature=FEATURE) >= 1
    roles = {dict(ls)["role"] for (n, ls) in after if n == "kshim_tls_certificate_expiry_timestamp_seconds"}
    assert roles == {"client", "admin", "upstream"}, roles
    assert total(after, "kshim_tls_certificate_expiry_timestamp_seconds", role="client") > time.time()


# --------------------------------------------------------------------------------------------
# (h) bad input to the admin API


def test_bad_input_gets_clear_errors_and_loses_nothing(certs, kshim):
    admin = kshim.admin
    status, stored = admin.call("GET", "/admin/config")
    assert status == 200
    served = served_fingerprint(kshim.port, certs)
    outside = Path("/tmp") / f"kshim-outside-{uid()}.properties"
    outside.write_text("password=x\n")
    try:
        cases = [
            (b"{not json", 400, "not JSON"),
            (b"[]", 400, "JSON object"),
            (b"{}", 400, "names no key"),
            (json.dumps({"listen": "0.0.0.0:1"}).encode(), 400, "needs a restart"),
            (json.dumps({"colour": "blue"}).encode(), 400, "unknown key"),
            (json.dumps({"tls.keystore": 12}).encode(), 400, "expected a string"),
            (json.dumps({"policy.create_topic.max_partitions": "ten"}).encode(), 400, "integer"),
            (json.dumps({"tls.keystore_password": "${file:../secrets.properties:x}"}).encode(), 400, "absolute"),
            (json.dumps({"tls.keystore_password": f"${{file:{certs.dir}/../x:y}}"}).encode(), 400, ". or .."),
            (json.dumps({"tls.keystore_password": f"${{file:{outside}:password}}"}).encode(), 400,
             "file_allowed_paths"),
            (json.dumps({"tls.keystore_password": "${env:KSHIM_SURELY_UNSET}"}).encode(), 400, "not set"),
            (json.dumps({"log.level": "x" * (70 * 1024)}).encode(), 413, "larger than"),
        ]
        for raw, want, words in cases:
            status, answer = admin.call("PATCH", "/admin/config", raw=raw)
            assert status == want, (raw[:80], status, answer)
            assert words in json.dumps(answer), (raw[:80], answer)
    finally:
        outside.unlink()
    # Bytes that are not TLS, and a TLS connection that sends no HTTP: the API goes on answering.
    for junk in (b"\x16\x03\x01\x00\x05hello", b"\x00" * 64):
        with socket.create_connection(("127.0.0.1", admin.port), timeout=5) as s:
            s.sendall(junk)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", admin.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            s.settimeout(5)
            reply = s.recv(4096)
            assert reply.startswith(b"HTTP/1.1 400"), reply[:100]
    status, now = admin.call("GET", "/admin/config")
    assert (status, now) == (200, stored), "nothing stored was changed or lost"
    assert served_fingerprint(kshim.port, certs) == served
    assert kshim.alive()


# --------------------------------------------------------------------------------------------
# TLS to the upstream, with and without kshim's client certificate


def test_the_broker_sees_kshims_client_certificate(cluster, certs, extra, kshim_factory):
    """The broker requires client certificates: a kshim whose [upstream.tls] has no keystore is
    refused and discovers nothing; with its keystore (PEM this time) it finds the cluster."""
    base = f"""
[upstream]
bootstrap = "{cluster.bootstrap}"
refresh_interval_ms = 500
connect_timeout_ms = 3000
[upstream.listeners]
port_base = 0
[upstream.tls]
ca = "{certs.ca}"
"""
    without = kshim_factory(base)
    with_cert = kshim_factory(base + f'certificate = "{extra["kshim-client"][0]}"\n'
                                     f'key = "{extra["kshim-client"][1]}"\n')
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and 0 not in ke.api_versions(with_cert.bootstrap).api_keys:
        time.sleep(0.3)
    assert 0 in ke.api_versions(with_cert.bootstrap).api_keys, "with its certificate kshim sees the broker"
    assert set(ke.api_versions(without.bootstrap).api_keys) == {18, 57}, "without it, nothing is discovered"
    # In TLS 1.3 the broker's verdict on kshim's (missing) certificate arrives as an alert on the
    # first read after the handshake.
    deadline = time.monotonic() + 10
    while "BadCertificate" not in without.log_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "received fatal alert: BadCertificate" in without.log_text(), without.log_text()[-2000:]


def test_kshim_clients_takes_the_command_config_of_kafka_tools(certs, extra, kshim, kshim_binary, tmp_path):
    """`kshim clients --command-config` secures the https admin API with the file's ssl.*
    settings: a PKCS12 truststore with the token, or a PEM keystore whose certificate's
    principal the admin API accepts; its sasl.* settings are said to be unused."""
    url = f"https://127.0.0.1:{kshim.admin.port}"

    def clients(config: Path, *extra_args):
        return subprocess.run([str(kshim_binary), "clients", "list", "--admin", url, "--command-config", str(config),
                               "--output", "json", *extra_args], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, env={**os.environ, "KSHIM_ADMIN_TOKEN": ""})

    p12 = tmp_path / "p12.properties"
    p12.write_text(f"security.protocol=SSL\nssl.truststore.location={certs.truststore}\n"
                   f"ssl.truststore.password={STORE_PASSWORD}\n")
    res = clients(p12, "--token", ADMIN_TOKEN)
    assert res.returncode == 0 and isinstance(json.loads(res.stdout), (list, dict)), res
    res = clients(p12)
    assert res.returncode != 0 and "pass --token or set KSHIM_ADMIN_TOKEN" in res.stderr, res
    res = clients(p12, "--token", "not-the-token")
    assert res.returncode != 0 and "is not admin.token" in res.stderr, res

    pem, key = extra["ops"]
    keystore = tmp_path / "ops-keystore.pem"
    keystore.write_text(Path(key).read_text() + Path(pem).read_text())
    ops = tmp_path / "ops.properties"
    ops.write_text(f"security.protocol=SASL_SSL\nssl.truststore.location={certs.ca}\nssl.truststore.type=PEM\n"
                   f"ssl.keystore.location={keystore}\nssl.keystore.type=PEM\nsasl.mechanism=PLAIN\n"
                   'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="ops" password="x";\n')
    res = clients(ops)
    assert res.returncode == 0, res
    assert "sasl.* settings in" in res.stderr and "are not used" in res.stderr, res.stderr
