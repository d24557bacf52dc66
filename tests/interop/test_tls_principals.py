"""Principals from client certificates, and who may finalize features.

A standalone kshim serves TLS with client authentication required. A connection's principal is
its certificate's subject (RFC 2253, as Kafka's default SSL principal builder writes it) mapped
by `principal_mapping_rules` (the syntax of Kafka's ssl.principal.mapping.rules). Only
`User:alice` holds ALTER on CLUSTER. kafka-python's admin client, over TLS with alice's and
then bob's certificate, sends UpdateFeatures: alice's is applied, bob's is refused with
CLUSTER_AUTHORIZATION_FAILED and logged with his principal and address; a client without a
certificate gets no connection at all. Certificates are made with openssl here.

On SIGHUP kshim reads its config file again: a new certificate is used by new handshakes
(checked with `openssl s_client`) while a connection made before keeps working, and broken
material (a key that does not fit the certificate) is refused with the current certificate
still served.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
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
else:
    # Expected to get no connection: give up after 5 s, not the default 30.
    ssl.update(bootstrap_timeout_ms=5000)
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
                               ("server2", "/CN=localhost", "server.ext"),
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


def fingerprint_of(pem: Path) -> str:
    r = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", str(pem)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split("=", 1)[1]


def served_fingerprint(kshim, certs: Path) -> str:
    r = subprocess.run(["openssl", "s_client", "-connect", kshim.bootstrap, "-CAfile", str(certs / "ca.pem"),
                        "-cert", str(certs / "alice.pem"), "-key", str(certs / "alice.key")],
                       input="", capture_output=True, text=True, timeout=30)
    assert "Verify return code: 0" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    x = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256"], input=r.stdout,
                       capture_output=True, text=True, timeout=30)
    return x.stdout.strip().split("=", 1)[1]


def api_versions_over(sock: ssl.SSLSocket, correlation_id: int) -> int:
    """Sends ApiVersions v0 on an open TLS socket; returns the response's error code."""
    client = b"tls-test"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    sock.sendall(struct.pack(">i", len(body)) + body)
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    size = struct.unpack(">i", exactly(4))[0]
    data = exactly(size)
    assert struct.unpack(">i", data[:4])[0] == correlation_id
    return struct.unpack(">h", data[4:6])[0]


RELOADED = " reloaded applied="
REFUSED = "not reloaded, nothing changed"


def hang_up_and_wait(kshim, marker: str, count: int, timeout: float = 15.0) -> None:
    os.kill(kshim.pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if kshim.log_text().count(marker) >= count:
            return
        time.sleep(0.1)
    pytest.fail(f"kshim did not log {marker!r} after SIGHUP:\n{kshim.log_text()[-3000:]}", pytrace=False)


def test_sighup_rotates_the_certificate_for_new_handshakes_only(kshim, certs):
    first, second = fingerprint_of(certs / "server.pem"), fingerprint_of(certs / "server2.pem")
    assert first != second
    assert served_fingerprint(kshim, certs) == first

    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    context.load_cert_chain(str(certs / "alice.pem"), str(certs / "alice.key"))
    host, port = kshim.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as old:
            assert api_versions_over(old, 1) == 0
            original = kshim.config_path.read_text()
            try:
                kshim.config_path.write_text(original.replace("server.pem", "server2.pem").replace("server.key", "server2.key"))
                hang_up_and_wait(kshim, RELOADED, 1)
                assert served_fingerprint(kshim, certs) == second, "new handshakes use the new certificate"
                assert api_versions_over(old, 2) == 0, "a connection made before the reload keeps working"
                assert old.getpeercert(binary_form=True) is not None

                # A key that does not fit: refused, and the current certificate stays.
                kshim.config_path.write_text(original.replace("server.pem", "server2.pem"))
                hang_up_and_wait(kshim, REFUSED, 1)
                assert "does not fit" in kshim.log_text()
                assert served_fingerprint(kshim, certs) == second
                assert api_versions_over(old, 3) == 0
            finally:
                kshim.config_path.write_text(original)
                hang_up_and_wait(kshim, RELOADED, 2)
    assert served_fingerprint(kshim, certs) == first
