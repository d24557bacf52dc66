"""Every broker on one TLS port, told apart by the server name (SNI): kshim in front of the
shared three-node cluster with `upstream.listeners.sni_host`.

The names are under kafka.kshim.test, which no resolver knows. The client processes resolve
them to 127.0.0.1 through a getaddrinfo() of this suite's own, loaded with LD_PRELOAD
(tests/interop/native/test_resolver.c, built here), so that every client (the Java clients,
librdkafka, kafka-python) still connects by name, sends that name in its ClientHello and checks
the certificate against it, as with a wildcard DNS record, and nothing on the machine changes.
"""

import json
import subprocess
import uuid

import pytest

import kafka_env as ke
import tls_support as tls

DOMAIN = "kafka.kshim.test"
PATTERN = "broker-{node_id}." + DOMAIN
RECORDS = 30

KAFKA_PYTHON = r"""
import json, sys
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

bootstrap, cafile, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
common = dict(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=cafile,
              ssl_check_hostname=True, request_timeout_ms=20000)
producer = KafkaProducer(acks="all", **common)
for i in range(n):
    producer.send(topic, f"kp-{i}".encode(), partition=i % 3)
producer.flush(30)
producer.close()
consumer = KafkaConsumer(consumer_timeout_ms=15000, **common)
partitions = [TopicPartition(topic, p) for p in range(3)]
consumer.assign(partitions)
consumer.seek_to_beginning(*partitions)
got = []
for m in consumer:
    if m.value.startswith(b"kp-"):
        got.append(m.value.decode())
    if len(got) >= n:
        break
brokers = sorted(f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers())
consumer.close()
print(json.dumps({"brokers": brokers, "got": sorted(got)}))
"""

CONFLUENT_KAFKA = r"""
import json, sys
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, cafile, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
common = {"bootstrap.servers": bootstrap, "security.protocol": "ssl", "ssl.ca.location": cafile,
          "ssl.endpoint.identification.algorithm": "https"}
p = Producer({**common, "acks": "all"})
errors = []
for i in range(n):
    p.produce(topic, f"ck-{i}".encode(), partition=i % 3,
              on_delivery=lambda err, msg: err and errors.append(str(err)))
p.flush(30)
brokers = sorted(f"{b.host}:{b.port}" for b in p.list_topics(timeout=20).brokers.values())
c = Consumer({**common, "group.id": "sni-unused", "enable.auto.commit": False})
c.assign([TopicPartition(topic, part, -2) for part in range(3)])
got = []
for _ in range(150):
    m = c.poll(0.2)
    if m is not None and m.error() is None and m.value().startswith(b"ck-"):
        got.append(m.value().decode())
    if len(got) >= n:
        break
c.close()
print(json.dumps({"brokers": brokers, "got": sorted(got), "errors": errors}))
"""


@pytest.fixture(scope="module")
def resolver(tmp_path_factory) -> dict:
    """The environment that makes a client process resolve DOMAIN's names to 127.0.0.1."""
    return tls.loopback_resolver(tmp_path_factory.mktemp("sni-resolver"), DOMAIN)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    made = tls.make_certs(tmp_path_factory.mktemp("sni-certs"))
    cert, key = tls.name_certificate(made, DOMAIN)
    return made, cert, key


def sni_config(broker: str, cert, key, port: int) -> str:
    return f"""
advertised_listener = "{DOMAIN}:{port}"

[tls]
certificate = "{cert}"
key = "{key}"

[upstream]
bootstrap = "{broker}"
refresh_interval_ms = 1000

[upstream.listeners]
sni_host = "{PATTERN}"
"""


def s_client(port: int, ca, server_name: str | None) -> subprocess.CompletedProcess:
    name = ["-servername", server_name] if server_name else ["-noservername"]
    return tls.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *name, "-CAfile", ca,
                    "-verify_return_error", "-brief"], timeout=20, input="")


def test_every_broker_is_served_on_one_port_by_its_tls_server_name(kafka_trio, kshim_binary, certs, resolver,
                                                                   tmp_path):
    """The Java clients, librdkafka and kafka-python bootstrap from kafka.kshim.test:PORT, learn
    broker-N.kafka.kshim.test:PORT (one port for all three brokers) from Metadata and
    DescribeCluster, check the wildcard certificate against each name, and produce to and
    consume from partitions led by every broker. Names that route nowhere (none, an unknown
    broker, a non-canonical node id, another domain) get the unrecognized_name alert and are
    logged."""
    made, cert, key = certs
    port = ke.free_port()
    kshim = ke.KshimProcess(sni_config(kafka_trio.bootstrap, cert, key, port), binary=kshim_binary,
                            upstream=kafka_trio.bootstrap, port=port, workdir=tmp_path / "kshim")
    kshim.start()
    try:
        bootstrap = f"{DOMAIN}:{port}"
        names = sorted(f"broker-{n.node_id}.{DOMAIN}:{port}" for n in kafka_trio.nodes)
        topic = "sni-" + uuid.uuid4().hex[:6]
        props = tls.java_ssl(made)
        admin = tls.java("admin", "--bootstrap", bootstrap, "--create", f"{topic}:3:3", "--describe-topic", topic,
                         props=props, env=resolver)
        assert admin["created"] == {topic: "ok"}, admin
        assert sorted(f"{n['host']}:{n['port']}" for n in admin["cluster"]["nodes"]) == names, admin["cluster"]
        leaders = {p["leader"] for p in admin["topics"][topic]}
        assert leaders == set(names), f"the partitions' leaders are not every broker: {admin['topics'][topic]}"

        kp = tls.run_python(KAFKA_PYTHON, bootstrap, made.ca, topic, str(RECORDS), timeout=120, env=resolver)
        assert kp["brokers"] == names and kp["got"] == sorted(f"kp-{i}" for i in range(RECORDS)), kp
        ck = tls.run_python(CONFLUENT_KAFKA, bootstrap, made.ca, topic, str(RECORDS), timeout=120, env=resolver)
        assert ck["brokers"] == names and ck["errors"] == [], ck
        assert ck["got"] == sorted(f"ck-{i}" for i in range(RECORDS)), ck
        produced = tls.java("produce", "--bootstrap", bootstrap, "--topic", topic, "--count", RECORDS,
                            "--prefix", "java", props=props, env=resolver)
        assert len(produced["acked"]) == RECORDS and not produced["failed"], produced
        consumed = tls.java("consume", "--bootstrap", bootstrap, "--topic", topic, "--group", "sni-" + topic,
                            "--count", 3 * RECORDS, props=props, env=resolver, timeout=90)
        values = sorted(r["value"] for r in consumed["records"])
        want = sorted([f"kp-{i}" for i in range(RECORDS)] + [f"ck-{i}" for i in range(RECORDS)]
                      + [f"java-{i}" for i in range(RECORDS)])
        assert values == want, f"{len(values)} records, {len(set(values) - set(want))} unexpected"
        assert {r["partition"] for r in consumed["records"]} == {0, 1, 2}

        for name in [f"broker-1.{DOMAIN}", DOMAIN]:
            ok = s_client(port, made.ca, name)
            assert ok.returncode == 0 and "Verification: OK" in ok.stderr + ok.stdout, (name, ok.stderr)
        for name in [None, f"broker-99.{DOMAIN}", "kafka.example.org", f"broker-01.{DOMAIN}"]:
            refused = s_client(port, made.ca, name)
            text = refused.stdout + refused.stderr
            assert refused.returncode != 0 and "unrecognized name" in text, (name, text[-2000:])
        log = kshim.log_path.read_text()
        for shown in ["no server name", f'server name "broker-99.{DOMAIN}"', 'server name "kafka.example.org"']:
            assert f"TLS connection refused (unrecognized_name): {shown}" in log, ke.tail(kshim.log_path)
    finally:
        kshim.stop()


def test_config_check_refuses_sni_without_tls_and_warns_of_an_uncovering_certificate(kshim_binary, certs, tmp_path):
    """`kshim config check`: sni_host without [tls] is refused, naming the key; with a certificate
    for localhost only, the config is valid but a warning names what the certificate misses."""
    made, _, _ = certs
    plain = tmp_path / "plain.toml"
    plain.write_text(f'advertised_listener = "{DOMAIN}:9093"\n\n[upstream]\nbootstrap = "127.0.0.1:9092"\n\n'
                     f'[upstream.listeners]\nsni_host = "{PATTERN}"\n')
    res = tls.run([kshim_binary, "config", "check", "--config", plain])
    assert res.returncode == 2 and "upstream.listeners.sni_host" in res.stderr and "[tls]" in res.stderr, res.stderr
    narrow = tmp_path / "narrow.toml"
    narrow.write_text(sni_config("127.0.0.1:9092", made.server, made.server_key, 9093))
    res = tls.run([kshim_binary, "config", "check", "--config", narrow])
    assert res.returncode == 0, res.stderr
    assert "warning: upstream.listeners.sni_host: the certificate does not name" in res.stderr, res.stderr
    assert f"*.{DOMAIN}" in res.stderr, res.stderr


def api_versions_by_name(port: int, ca, server_name: str, check_hostname: bool = True) -> int:
    """An ApiVersions exchange over TLS to 127.0.0.1:`port` asking for `server_name` (checked
    against the certificate unless `check_hostname` is off); its error code."""
    import socket
    import ssl
    import struct

    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = check_hostname
    with socket.create_connection(("127.0.0.1", port), timeout=15) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as sock:
            frame = ke.api_versions_request(3)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
            return ke.parse_api_versions(ke._recv_exact(sock, size)).error_code


def test_a_broker_not_seen_yet_is_served_after_one_refresh(kafka_trio, kshim_binary, certs, tmp_path):
    """kshim starts while the cluster is away (its bootstrap is a relay that refuses) and
    refreshes its view only every ten minutes, so it knows no broker. Once the cluster is back,
    a client asking for broker-2 by name, before any periodic refresh, is served after the one
    refresh its name asks for, as is a name with a trailing dot; a broker that does not exist
    is refused (unrecognized_name) after that refresh, and logged once."""
    made, cert, key = certs
    relay = ke.TcpRelay(("127.0.0.1", kafka_trio.nodes[0].port))
    relay.refusing = True
    port = ke.free_port()
    config = sni_config(f"127.0.0.1:{relay.port}", cert, key, port).replace(
        "refresh_interval_ms = 1000", "refresh_interval_ms = 600000")
    kshim = ke.KshimProcess(config, binary=kshim_binary, upstream=f"127.0.0.1:{relay.port}", port=port,
                            workdir=tmp_path / "kshim")
    kshim.start()
    try:
        assert ke.wait_until(lambda: "no upstream broker reachable" in kshim.log_text(), timeout=20), \
            ke.tail(kshim.log_path)
        relay.refusing = False
        assert api_versions_by_name(port, made.ca, f"broker-2.{DOMAIN}") == 0
        # Python's own hostname check does not take the trailing dot; kshim must.
        assert api_versions_by_name(port, made.ca, f"broker-3.{DOMAIN}.", check_hostname=False) == 0
        refused = s_client(port, made.ca, f"broker-77.{DOMAIN}")
        text = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "unrecognized name" in text, text[-2000:]
        log = kshim.log_text()
        assert f'server name "broker-77.{DOMAIN}" is broker 77\'s' in log, ke.tail(kshim.log_path)
        assert "upstream reachable again" in log or "upstream has 3 broker(s)" in log, ke.tail(kshim.log_path)
    finally:
        kshim.stop()
        relay.close()
