"""TLS on kshim's client-facing listeners, in front of a real Apache Kafka 4.1.1 node.

kshim runs in proxy mode with a `[tls]` table: its bootstrap listener and its per-broker
listener speak TLS to the clients, while kshim talks plaintext to the broker. Certificates are
made with openssl for this module: a CA, a server certificate it signed (subjectAltName
DNS:localhost, IP:127.0.0.1), a client certificate it signed (CN=alice), an unrelated
self-signed CA with a client certificate of its own (CN=mallory), a key that does not belong to
the server certificate, and PKCS12 trust and key stores for Java. What is tested:

  (a) TLS without client authentication: kafka-python, confluent-kafka, kcat and the Java
      producer/consumer each produce 50 distinct records to a topic of their own through kshim
      and consume exactly those back through kshim; the brokers each client is told about are
      kshim's per-broker listener only (never the broker's own port).
  (b) A plaintext Kafka client (kafka-python with security_protocol PLAINTEXT, and a bare
      ApiVersions request on a socket) gets no Kafka answer from the TLS port, and kshim goes on
      serving TLS clients afterwards.
  (c) `openssl s_client` verifies kshim's certificate against the CA (Verify return code 0) on
      both listeners, with TLS 1.2 and TLS 1.3, and the certificate it is shown is server.pem
      (same SHA-256 fingerprint).
  (d) client_auth = "required": confluent-kafka, kafka-python and the Java Admin client with
      alice's certificate produce/consume (or describe the cluster); without a certificate, and
      with mallory's certificate (another CA), the clients get nothing, on either listener.
      client_auth = "requested": a client without a certificate is served, alice is served,
      mallory's untrusted certificate is refused.
  (e) protocols = ["TLSv1.3"]: a TLS 1.2 handshake fails, TLS 1.3 works; cipher_suites limits
      the suites kshim negotiates, for TLS 1.3 and TLS 1.2.
  (f) kshim refuses to start (non-zero exit within 15 s, stderr naming the problem) on a key
      that does not match the certificate, a missing or unparsable certificate, a missing key
      or CA file, client_auth without ca, an unknown client_auth value, an unknown protocol or
      cipher suite name. Keys in PKCS#1 and SEC1 (EC) form, and EC PKCS#8, are accepted.

Run: .venv/bin/python -m pytest tests/interop/test_proxy_tls.py -p no:cacheprovider -ra
(KSHIM_KEEP_TMP=1 keeps the broker and kshim directories and logs.)
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import time
from pathlib import Path

import pytest

import kafka_env as ke
from tls_support import *  # noqa: F403 (the shared TLS helpers)

REFUSAL_LIMIT_S = 15

# Topics made at module setup (on the broker itself): name -> partitions.
TOPICS = {
    "kafka-python": 2,
    "confluent": 2,
    "kcat": 2,
    "java": 2,
    "mtls-confluent": 2,
    "mtls-kafka-python": 2,
}


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return ke.require_or_fail(make_certs, tmp_path_factory.mktemp("tls-material"))


@pytest.fixture(scope="module")
def cluster(kafka_broker):
    """The shared broker; this module's topics carry a suffix of their own."""
    return kafka_broker


@pytest.fixture(scope="module")
def topics(cluster) -> dict[str, str]:
    suffix = uid()
    names = {name: f"tls-{name}-{suffix}" for name in TOPICS}
    args = ["admin", "--bootstrap", cluster.bootstrap]
    for name, parts in TOPICS.items():
        args += ["--create", f"{names[name]}:{parts}:1"]
    out = java(*args, props={})
    bad = {k: v for k, v in out["created"].items() if v != "ok"}
    assert not bad, f"creating the test topics failed: {bad}"
    return names


@pytest.fixture(scope="module")
def tls_proxy(cluster, certs, kshim_binary, request):
    """kshim with TLS on its listeners, no client authentication."""
    proxy = new_tls_proxy(cluster, kshim_binary, tls_table(certs))
    yield proxy
    stop_tls_proxy(proxy, request)


@pytest.fixture(scope="module")
def mtls_proxy(cluster, certs, kshim_binary, request):
    """kshim that requires a client certificate issued by the test CA."""
    proxy = new_tls_proxy(cluster, kshim_binary, tls_table(certs, client_auth="required", ca=certs.ca))
    yield proxy
    stop_tls_proxy(proxy, request)


# --------------------------------------------------------------------------------------------
# (a) TLS without client authentication: every client through kshim


def test_kafka_python_over_tls(cluster, topics, certs, tls_proxy):
    topic, prefix = topics["kafka-python"], f"kp-{uid()}"
    out = run_python(KP_PRODUCE_CONSUME, tls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(kp_ssl(certs)))
    assert_exactly(out["acked"], values(prefix), "kafka-python acknowledged")
    assert_exactly(out["records"], values(prefix), "kafka-python consumer")
    assert_only_kshim(out["brokers"], tls_proxy, cluster, "kafka-python describe_cluster")


def test_confluent_kafka_over_tls(cluster, topics, certs, tls_proxy):
    topic, prefix = topics["confluent"], f"ck-{uid()}"
    out = run_python(CK_PRODUCE_CONSUME, tls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(ck_ssl(certs)))
    assert out["failed"] == [] and out["unflushed"] == 0, out
    assert_exactly(out["acked"], values(prefix), "confluent-kafka acknowledged")
    assert_exactly(out["records"], values(prefix), "confluent-kafka consumer")
    assert_only_kshim(out["brokers"], tls_proxy, cluster, "confluent-kafka list_topics().brokers")
    assert not [e for e in out["errors"] if re.search(r"SSL handshake|certificate|alert", e)], out["errors"]


def test_kcat_over_tls(cluster, topics, certs, tls_proxy):
    kcat = ke.require_or_fail(require_tool, "kcat")
    topic, prefix = topics["kcat"], f"kcat-{uid()}"
    sec = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs.ca}"]
    want = values(prefix)
    res = run([kcat, "-P", "-b", tls_proxy.bootstrap, "-t", topic, *sec, "-X", "acks=all",
               "-X", "message.timeout.ms=30000"], input="\n".join(want) + "\n")
    assert res.returncode == 0 and "ERROR" not in res.stderr and "Delivery failed" not in res.stderr, str(res)
    res = run([kcat, "-C", "-b", tls_proxy.bootstrap, "-t", topic, *sec, "-o", "beginning", "-e", "-q",
               "-f", "%s\\n"])
    assert res.returncode == 0, str(res)
    assert_exactly([line for line in res.stdout.splitlines() if line], want, "kcat consumer")
    res = run([kcat, "-L", "-J", "-b", tls_proxy.bootstrap, "-t", topic, *sec], timeout=30)
    assert res.returncode == 0, str(res)
    md = json.loads(res.stdout)
    brokers = [[b["id"], *ke.split_hostport(b["name"])] for b in md["brokers"]]
    assert_only_kshim(brokers, tls_proxy, cluster, "kcat -L")


def test_java_producer_consumer_over_tls(cluster, topics, certs, tls_proxy):
    topic, prefix = topics["java"], f"java-{uid()}"
    props = java_ssl(certs)
    out = java("produce", "--bootstrap", tls_proxy.bootstrap, "--topic", topic, "--count", N, "--prefix", prefix,
               "--idempotent", props=props)
    assert out["failed"] == [], out["failed"][:5]
    assert_exactly(out["acked"], values(prefix), "Java producer acknowledged")
    got = java("consume", "--bootstrap", tls_proxy.bootstrap, "--topic", topic, "--group", f"g-{uid()}",
               "--count", N, props=props)
    assert_exactly([r["value"] for r in got["records"]], values(prefix), "Java consumer")
    adm = java("admin", "--bootstrap", tls_proxy.bootstrap, "--describe-topic", topic, props=props)
    nodes = [[n["id"], n["host"], n["port"]] for n in adm["cluster"]["nodes"]]
    assert_only_kshim(nodes, tls_proxy, cluster, "Java Admin describeCluster")
    for part in adm["topics"][topic]:
        assert part["leader"] == f"127.0.0.1:{tls_proxy.broker_port}", part


# --------------------------------------------------------------------------------------------
# (b) plaintext against the TLS port


def test_plaintext_client_gets_no_answer(cluster, certs, tls_proxy):
    for port in tls_proxy.ports:
        probe = plaintext_probe(port)
        assert not probe["answered"], f"a plaintext ApiVersions request on TLS port {port} was answered: {probe}"
    # kafka-python in plaintext, bounded by bootstrap_timeout_ms
    out = kp_probe(tls_proxy.bootstrap, {"security_protocol": "PLAINTEXT"})
    assert out["ok"] is False, f"kafka-python in plaintext got the cluster's brokers from a TLS port: {out}"
    assert tls_proxy.kshim.alive(), "kshim exited after plaintext clients"
    # ...and kshim goes on serving TLS clients, on both listeners.
    for port in tls_proxy.ports:
        assert_exchange_ok(port, certs, f"TLS after plaintext clients (port {port})")
    out = ck_probe(tls_proxy.bootstrap, ck_ssl(certs))
    assert out["ok"], f"confluent-kafka over TLS after the plaintext clients: {out}"
    assert_only_kshim(out["brokers"], tls_proxy, cluster, "confluent-kafka after the plaintext clients")


# --------------------------------------------------------------------------------------------
# (c) the certificate kshim shows


def test_s_client_verifies_server_certificate(certs, tls_proxy):
    want = fingerprint(certs.server.read_text())
    for port in tls_proxy.ports:
        res = s_client(port, certs, "-verify_return_error")
        assert res.rc == 0 and res.verified, f"s_client on {port}: {res}"
        assert fingerprint(res.stdout) == want, f"port {port} shows another certificate than server.pem:\n{res}"
        for flag, proto in (("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")):
            res = s_client(port, certs, flag, "-verify_return_error", "-verify_ip", "127.0.0.1")
            assert res.completed and res.verified and res.negotiated[0] == proto, (
                f"{flag} with the default protocols on {port}: {res}")
        # Python's ssl: both versions, and a Kafka answer behind the handshake.
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            out = assert_exchange_ok(port, certs, f"{version.name} on {port}", minimum=version, maximum=version)
            assert out["version"] == version.name.replace("_", "."), out


# --------------------------------------------------------------------------------------------
# (d) client certificates


def test_mtls_clients_with_certificate(cluster, topics, certs, mtls_proxy):
    topic, prefix = topics["mtls-confluent"], f"mck-{uid()}"
    out = run_python(CK_PRODUCE_CONSUME, mtls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(ck_ssl(certs, certs.alice, certs.alice_key)))
    assert out["failed"] == [] and out["unflushed"] == 0, out
    assert_exactly(out["acked"], values(prefix), "confluent-kafka (alice) acknowledged")
    assert_exactly(out["records"], values(prefix), "confluent-kafka (alice) consumer")
    assert_only_kshim(out["brokers"], mtls_proxy, cluster, "confluent-kafka (alice)")

    topic, prefix = topics["mtls-kafka-python"], f"mkp-{uid()}"
    out = run_python(KP_PRODUCE_CONSUME, mtls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(kp_ssl(certs, certs.alice, certs.alice_key)))
    assert_exactly(out["acked"], values(prefix), "kafka-python (alice) acknowledged")
    assert_exactly(out["records"], values(prefix), "kafka-python (alice) consumer")
    assert_only_kshim(out["brokers"], mtls_proxy, cluster, "kafka-python (alice)")

    adm = java("admin", "--bootstrap", mtls_proxy.bootstrap, "--describe-topic", topic,
               props=java_ssl(certs, certs.alice_keystore))
    assert_only_kshim([[n["id"], n["host"], n["port"]] for n in adm["cluster"]["nodes"]], mtls_proxy, cluster,
                      "Java Admin (alice keystore)")
    for port in mtls_proxy.ports:
        assert_exchange_ok(port, certs, f"alice on {port}", cert=certs.alice, key=certs.alice_key)


@pytest.mark.parametrize("who", ["no-certificate", "mallory"])
def test_mtls_refuses_clients_without_trusted_certificate(certs, mtls_proxy, who):
    cert, key = (None, None) if who == "no-certificate" else (certs.mallory, certs.mallory_key)
    out = ck_probe(mtls_proxy.bootstrap, ck_ssl(certs, cert, key))
    assert out["ok"] is False, f"confluent-kafka ({who}) got metadata from kshim with client_auth=required: {out}"
    out = kp_probe(mtls_proxy.bootstrap, kp_ssl(certs, cert, key))
    assert out["ok"] is False, f"kafka-python ({who}) got the brokers from kshim with client_auth=required: {out}"
    for port in mtls_proxy.ports:
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            got = tls_exchange(port, certs, cert=cert, key=key, minimum=version, maximum=version)
            assert got["ok"] is False, f"{who}, {version.name}: a Kafka answer on {port}: {got}"
    # openssl s_client: in TLS 1.2 the server refuses the handshake itself.
    args = ["-cert", cert, "-key", key] if cert else []
    res = s_client(mtls_proxy.port, certs, "-tls1_2", *args)
    assert res.rc != 0, f"s_client -tls1_2 ({who}) went through: {res}"
    assert "alert" in res.stderr, f"s_client -tls1_2 ({who}) reports no alert from kshim: {res}"
    out = java("admin", "--bootstrap", mtls_proxy.bootstrap,
               props={**java_ssl(certs, None if cert is None else certs.mallory_keystore),
                      # Refused: it gives up after 3 s of retrying.
                      "default.api.timeout.ms": "3000", "request.timeout.ms": "2000"},
               timeout=40, allow_error=True)
    assert "error" in out, f"Java Admin ({who}) described the cluster: {out}"


def test_client_auth_requested(cluster, certs, kshim_binary):
    """client_auth = "requested": served with or without a certificate; an untrusted
    certificate is refused."""
    with one_test_proxy(cluster, kshim_binary, tls_table(certs, client_auth="requested", ca=certs.ca)) as proxy:
        for port in proxy.ports:
            assert_exchange_ok(port, certs, f"requested, no certificate, port {port}")
            assert_exchange_ok(port, certs, f"requested, alice, port {port}", cert=certs.alice, key=certs.alice_key)
            got = tls_exchange(port, certs, cert=certs.mallory, key=certs.mallory_key)
            assert got["ok"] is False, f"requested: mallory's untrusted certificate was accepted on {port}: {got}"
        out = ck_probe(proxy.bootstrap, ck_ssl(certs))
        assert out["ok"], out
        assert_only_kshim(out["brokers"], proxy, cluster, "confluent-kafka, requested, no certificate")


# --------------------------------------------------------------------------------------------
# (e) protocols and cipher suites


def test_tls13_only(cluster, certs, kshim_binary, tls_proxy):
    with one_test_proxy(cluster, kshim_binary, tls_table(certs, protocols=["TLSv1.3"])) as proxy:
        for port in proxy.ports:
            res = s_client(port, certs, "-tls1_2")
            assert not res.completed, f"TLS 1.2 handshake with protocols=[TLSv1.3] on {port}: {res}"
            res = s_client(port, certs, "-tls1_3", "-verify_return_error")
            assert res.completed and res.verified and res.negotiated[0] == "TLSv1.3", str(res)
            got = tls_exchange(port, certs, maximum=ssl.TLSVersion.TLSv1_2)
            assert got["ok"] is False and got["stage"] == "handshake", got
            assert_exchange_ok(port, certs, f"TLS 1.3 on {port}", minimum=ssl.TLSVersion.TLSv1_3)
        out = ck_probe(proxy.bootstrap, ck_ssl(certs))
        assert out["ok"], out
        assert_only_kshim(out["brokers"], proxy, cluster, "confluent-kafka, TLS 1.3 only")
        # The control: the kshim with the default protocols does TLS 1.2.
        res = s_client(tls_proxy.port, certs, "-tls1_2")
        assert res.completed and res.negotiated[0] == "TLSv1.2", str(res)


def test_cipher_suites(cluster, certs, kshim_binary, tls_proxy):
    suites = ["TLS13_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]
    with one_test_proxy(cluster, kshim_binary, tls_table(certs, cipher_suites=suites)) as proxy:
        # The control: the kshim with the default suites negotiates the ones refused below.
        res = s_client(tls_proxy.port, certs, "-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384")
        assert res.completed and res.negotiated == ("TLSv1.3", "TLS_AES_256_GCM_SHA384"), str(res)
        res = s_client(tls_proxy.port, certs, "-tls1_2", "-cipher", "ECDHE-RSA-AES256-GCM-SHA384")
        assert res.completed and res.negotiated == ("TLSv1.2", "ECDHE-RSA-AES256-GCM-SHA384"), str(res)
        for port in proxy.ports:
            res = s_client(port, certs, "-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384")
            assert not res.completed, f"a suite outside cipher_suites was negotiated on {port}: {res}"
            res = s_client(port, certs, "-tls1_2", "-cipher", "ECDHE-RSA-AES256-GCM-SHA384")
            assert not res.completed, f"a suite outside cipher_suites was negotiated on {port}: {res}"
            res = s_client(port, certs, "-tls1_3", "-verify_return_error")
            assert res.completed and res.verified and res.negotiated == ("TLSv1.3", "TLS_AES_128_GCM_SHA256"), str(res)
            res = s_client(port, certs, "-tls1_2", "-verify_return_error")
            assert res.completed and res.verified and res.negotiated == ("TLSv1.2", "ECDHE-RSA-AES128-GCM-SHA256"), str(res)
        out = ck_probe(proxy.bootstrap, ck_ssl(certs))
        assert out["ok"], out


# --------------------------------------------------------------------------------------------
# (f) key formats, and what kshim refuses to start with


@pytest.mark.parametrize("form", ["rsa-pkcs1", "ec-sec1", "ec-pkcs8"])
def test_key_formats(cluster, certs, kshim_binary, form):
    cert, key = {
        "rsa-pkcs1": (certs.server, certs.server_key_pkcs1),
        "ec-sec1": (certs.ec_server, certs.ec_server_key_sec1),
        "ec-pkcs8": (certs.ec_server, certs.ec_server_key_pkcs8),
    }[form]
    with one_test_proxy(cluster, kshim_binary, tls_table(certs, certificate=cert, key=key)) as proxy:
        want = fingerprint(cert.read_text())
        for port in proxy.ports:
            res = s_client(port, certs, "-verify_return_error")
            assert res.rc == 0 and res.verified, str(res)
            assert fingerprint(res.stdout) == want, str(res)
            assert_exchange_ok(port, certs, f"{form} on {port}")


def refusal_cases(certs: Certs, scratch: Path) -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> ([tls] table, words stderr must hold (regular expressions, any case, as whole words),
    exact strings stderr must hold)."""
    missing = scratch / "no-such-file.pem"
    not_pem = scratch / "not-pem.pem"
    not_pem.write_text("this is not a certificate\n")
    bad_der = scratch / "bad-der.pem"
    bad_der.write_text("-----BEGIN CERTIFICATE-----\n" + "TUlJQm9ndXNjZXJ0aWZpY2F0ZWRhdGFoZXJl" * 2
                       + "\n-----END CERTIFICATE-----\n")
    return {
        "mismatched key": (tls_table(certs, key=certs.other_key), ["key"], [str(certs.other_key)]),
        "missing certificate file": (tls_table(certs, certificate=missing), ["certificate"], [str(missing)]),
        "certificate not PEM": (tls_table(certs, certificate=not_pem), ["certificate"], [str(not_pem)]),
        "certificate not DER": (tls_table(certs, certificate=bad_der), ["certificate"], [str(bad_der)]),
        "missing key file": (tls_table(certs, key=missing), ["key"], [str(missing)]),
        "client_auth required without ca": (tls_table(certs, client_auth="required"), ["ca"], []),
        "client_auth requested without ca": (tls_table(certs, client_auth="requested"), ["ca"], []),
        "missing ca file": (tls_table(certs, client_auth="required", ca=missing), ["ca"], [str(missing)]),
        "unknown client_auth": (tls_table(certs, client_auth="sometimes"), ["client_auth"], ["sometimes"]),
        "unknown protocol": (tls_table(certs, protocols=["TLSv1.1"]), ["protocols?"], ["TLSv1.1"]),
        "unknown cipher suite": (tls_table(certs, cipher_suites=["TLS13_AES_512_GCM_SHA999"]), ["cipher"],
                                 ["TLS13_AES_512_GCM_SHA999"]),
    }


REFUSALS = ["mismatched key", "missing certificate file", "certificate not PEM", "certificate not DER",
            "missing key file", "client_auth required without ca", "client_auth requested without ca",
            "missing ca file", "unknown client_auth", "unknown protocol", "unknown cipher suite"]


@pytest.mark.parametrize("case", REFUSALS)
def test_refuses_to_start(cluster, certs, kshim_binary, tmp_path, case):
    scratch = tmp_path / "files"
    scratch.mkdir()
    table, words, exact = refusal_cases(certs, scratch)[case]
    port, broker_port = ke.free_ports(2)
    data = tmp_path / "data"
    data.mkdir()
    cfg = tmp_path / "kshim.toml"
    cfg.write_text(ke.compose_upstream_config(table, port=port, data_dir=data, upstream=cluster.bootstrap,
                                              refresh_interval_ms=1000, port_base=None,
                                              listener_ports={NODE_ID: broker_port}))
    cmd = [str(kshim_binary), "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--data-dir", str(data)]
    started = time.monotonic()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=REFUSAL_LIMIT_S + 5, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{case}: kshim did not exit within {REFUSAL_LIMIT_S + 5}s (it was stopped)\nconfig:\n{table}\n"
                    f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}", pytrace=False)
    took = time.monotonic() - started
    shown = f"{case}: rc={res.returncode} after {took:.1f}s\nconfig:\n{table}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    assert res.returncode != 0, shown
    assert took < REFUSAL_LIMIT_S, shown
    assert not ke.port_accepts("127.0.0.1", port) and not ke.port_accepts("127.0.0.1", broker_port), (
        f"something listens on kshim's ports after the refusal\n{shown}")
    # Where a word is checked, the paths of the files are taken out first (they hold "ca", "key").
    text = res.stderr
    for p in sorted({str(certs.dir), str(tmp_path)}, key=len, reverse=True):
        text = text.replace(p, "<dir>")
    for w in words:
        assert re.search(rf"(?<![a-z]){w}(?![a-z])", text, re.I), f"stderr does not name {w!r}\n{shown}"
    for s in exact:
        assert s in res.stderr, f"stderr does not name {s!r}\n{shown}"


def test_a_self_signed_server_certificate_in_the_truststore_is_trusted(tmp_path, kshim_factory, kshim_binary):
    """A server certificate made with `openssl req -x509` (CA:TRUE, signed by itself) and put
    in the client's truststore as it is: Java's clients trust it, and so do `kshim features`
    and kshim's own upstream connections (one TLS client). A truststore without it is
    refused by both tools."""
    ossl = lambda *args: run_tool([require_tool("openssl"), *args], cwd=tmp_path)  # noqa: E731, F405
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "7", "-subj", "/CN=localhost",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", "self.key", "-out", "self.pem")
    other_certs = make_certs(tmp_path / "other")  # noqa: F405
    proc = kshim_factory(f'[tls]\ncertificate = "{tmp_path / "self.pem"}"\nkey = "{tmp_path / "self.key"}"\n')

    def properties(truststore: Path) -> Path:
        config = tmp_path / f"{truststore.stem}.properties"
        config.write_text(f"security.protocol=SSL\nssl.truststore.location={truststore}\nssl.truststore.type=PEM\n")
        return config

    def kshim_describe(config: Path):
        cp = subprocess.run([str(kshim_binary), "features", "--bootstrap-server", proc.bootstrap,
                             "--command-config", str(config), "describe"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        return cp.returncode, cp.stdout, cp.stderr

    trusting = properties(tmp_path / "self.pem")
    ours = kshim_describe(trusting)
    theirs = ke.run_feature_command(proc.bootstrap, "describe", command_config=trusting,
                                    jars=ke.release_jars("4.4.0"), timeout=60)
    assert ours[0] == 0 and theirs[0] == 0, f"kshim features: {ours}\nkafka-features.sh: {theirs}"
    assert ours[1] == theirs[1], f"kshim features:\n{ours[1]}\nkafka-features.sh:\n{theirs[1]}"
    rc, _, err = kshim_describe(properties(other_certs.ca))
    assert rc == 1 and "certificate" in err.lower(), err
