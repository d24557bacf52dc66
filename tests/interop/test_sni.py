"""Every broker on one TLS port, told apart by the server name (SNI): kshim in front of the
shared Kafka node with `upstream.listeners.sni_host`.

The names are under kafka.kshim.test, which no resolver knows: the client process maps them
to 127.0.0.1 itself (kafka-python resolves through socket.getaddrinfo, which the client script
wraps), so that the client still connects by name, sends that name in its ClientHello and
checks the certificate against it, as it would with a wildcard DNS record.
"""

import json
import subprocess
import uuid

import pytest

import kafka_env as ke
import tls_support as tls

DOMAIN = "kafka.kshim.test"
PATTERN = "broker-{node_id}." + DOMAIN
SNI_EXT = f"""
[sni_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:{DOMAIN}, DNS:*.{DOMAIN}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

CLIENT = r"""
import json, socket, sys
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

bootstrap, cafile, topic, n, domain = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
resolve = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    # Names under the test domain are kshim on loopback; the name itself stays the client's.
    if isinstance(host, str) and (host == domain or host.endswith("." + domain)):
        host = "127.0.0.1"
    return resolve(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo

common = dict(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=cafile,
              ssl_check_hostname=True, request_timeout_ms=20000)
admin = KafkaAdminClient(**common)
admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
brokers = sorted(f"{b['host']}:{b['port']}" for b in admin.describe_cluster()["brokers"])
admin.close()
producer = KafkaProducer(acks="all", **common)
for i in range(n):
    producer.send(topic, f"v{i}".encode())
producer.flush(30)
producer.close()
consumer = KafkaConsumer(consumer_timeout_ms=15000, auto_offset_reset="earliest", **common)
partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
consumer.assign(partitions)
consumer.seek_to_beginning(*partitions)
got = []
for m in consumer:
    got.append(m.value.decode())
    if len(got) >= n:
        break
metadata = sorted(f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers())
consumer.close()
print(json.dumps({"brokers": brokers, "metadata": metadata, "got": sorted(got)}))
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sni-certs")
    made = tls.make_certs(d)
    (d / "openssl.cnf").write_text(tls.OPENSSL_CNF + SNI_EXT)
    cert, key = tls.issue(d, "sni", DOMAIN, made.ca, made.ca_key, "sni_ext")
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


def test_every_broker_is_served_on_one_port_by_its_tls_server_name(kafka_broker, kshim_binary, certs, tmp_path):
    """kafka-python bootstraps from kafka.kshim.test:PORT, learns broker-N.kafka.kshim.test:PORT
    (the same port) from Metadata and DescribeCluster, checks the wildcard certificate against
    each name, and produces and consumes through it; names that route nowhere (none, an
    unknown broker, another domain) get the unrecognized_name alert and are logged."""
    made, cert, key = certs
    port = ke.free_port()
    kshim = ke.KshimProcess(sni_config(kafka_broker.bootstrap, cert, key, port), binary=kshim_binary,
                            upstream=kafka_broker.bootstrap, port=port, workdir=tmp_path / "kshim")
    kshim.start()
    try:
        topic = "sni-" + uuid.uuid4().hex[:6]
        out = tls.run_python(CLIENT, f"{DOMAIN}:{port}", made.ca, topic, "20", DOMAIN, timeout=120)
        names = sorted(f"broker-{n.node_id}.{DOMAIN}:{port}" for n in kafka_broker.nodes)
        assert out["brokers"] == names, out
        assert out["metadata"] == names, out
        assert out["got"] == sorted(f"v{i}" for i in range(20)), out

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
