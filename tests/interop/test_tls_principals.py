"""Principals from client certificates, and who may finalize features.

A standalone kshim serves TLS with client authentication required. A connection's principal is
its certificate's subject (RFC 2253, as Kafka's default SSL principal builder writes it) mapped
by `principal_mapping_rules` (the syntax of Kafka's ssl.principal.mapping.rules). Only
`User:alice` holds ALTER on CLUSTER. kafka-python's admin client, over TLS with alice's and
then bob's certificate, sends UpdateFeatures: alice's is applied, bob's is refused with
CLUSTER_AUTHORIZATION_FAILED and logged with his principal and address; a client without a
certificate gets no connection at all. Certificates are made with openssl here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FEATURE = "acme.widgets"

UPDATE = r"""
import json, sys
from kafka.admin import KafkaAdminClient
from kafka.admin._cluster import UpdateFeatureType
import kafka.errors as Errors
bootstrap, ca, cert, key, level = sys.argv[1:6]
ssl = {"security_protocol": "SSL", "ssl_cafile": ca}
if cert != "-":
    ssl.update(ssl_certfile=cert, ssl_keyfile=key)
out = {}
try:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, **ssl)
except Errors.KafkaError as e:
    print(json.dumps({"connect_error": type(e).__name__, "message": str(e)}))
    sys.exit(0)
try:
    try:
        out["result"] = a.update_features({sys.argv[6]: (UpdateFeatureType.UPGRADE, int(level))})
    except Errors.KafkaError as e:
        out["error"] = type(e).__name__
        out["message"] = str(e)
    f = a.describe_features()
    out["finalized"] = {n: i["finalized"][1] for n, i in f.items() if "finalized" in i}
finally:
    a.close()
print(json.dumps(out, default=str))
"""


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.fail(f"openssl {' '.join(args)} failed: {r.stderr}", pytrace=False)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tls-principals")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=kshim-test-ca", cwd=d)
    # X.509 v3 with extensions: rustls (webpki) refuses v1 certificates, which
    # `openssl x509 -req` makes when no extensions are given.
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    (d / "client.ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for name, subject, ext in [("server", "/CN=localhost", "server.ext"),
                               ("alice", "/C=DE/O=Acme/CN=alice", "client.ext"),
                               ("bob", "/C=DE/O=Acme/CN=bob", "client.ext")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subject, cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", ext, cwd=d)
    return d


@pytest.fixture(scope="module")
def kshim(certs, kshim_binary, tmp_path_factory):
    import kafka_env

    config = f"""
[features.supported]
"metadata.version" = {{ min = 7, max = 27 }}
"{FEATURE}" = {{ min = 1, max = 4 }}

[features.bootstrap]
"metadata.version" = 27
"{FEATURE}" = 1

[authorization]
alter_cluster = ["User:alice"]

[tls]
certificate = "{certs / 'server.pem'}"
key = "{certs / 'server.key'}"
client_auth = "required"
ca = "{certs / 'ca.pem'}"
principal_mapping_rules = 'RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT'
"""
    proc = kafka_env.KshimProcess(config, binary=kshim_binary, rust_log="info,kshim::server=debug")
    kafka_env.start_or_fail(proc)
    yield proc
    proc.stop()
    proc.cleanup()


def update(kshim, certs: Path, who: str | None, level: int) -> dict:
    cert = str(certs / f"{who}.pem") if who else "-"
    key = str(certs / f"{who}.key") if who else "-"
    r = subprocess.run([sys.executable, "-c", UPDATE, kshim.bootstrap, str(certs / "ca.pem"), cert, key,
                        str(level), FEATURE], capture_output=True, text=True, timeout=90)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and lines, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(lines[-1])


def test_an_authorized_principal_finalizes_and_another_is_refused(kshim, certs):
    alice = update(kshim, certs, "alice", 2)
    assert "error" not in alice and "connect_error" not in alice, alice
    assert alice["finalized"][FEATURE] == 2, alice

    bob = update(kshim, certs, "bob", 3)
    assert bob.get("error") == "ClusterAuthorizationFailedError", bob
    assert bob["finalized"][FEATURE] == 2, "bob's update must not apply"
    log = kshim.log_text()
    refusals = [line for line in log.splitlines() if "no ALTER on CLUSTER" in line]
    assert refusals and "principal=User:bob" in refusals[-1] and "peer=127.0.0.1:" in refusals[-1], refusals
    assert "principal=User:alice" in log, "alice's TLS connection is logged with her principal"


def test_a_client_without_a_certificate_gets_no_connection(kshim, certs):
    anonymous = update(kshim, certs, None, 4)
    assert "connect_error" in anonymous or anonymous.get("error"), anonymous
    assert anonymous.get("finalized", {}).get(FEATURE) in (None, 2), anonymous
    alice = update(kshim, certs, "alice", 2)
    assert alice["finalized"][FEATURE] == 2, "kshim still serves authenticated clients"
