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

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import kafka_env as ke

PROXY_CLIENTS_SRC = ke.INTEROP_DIR / "java" / "ProxyClients.java"
N = 50  # records per client
CLIENT_TIMEOUT_S = 60
OPENSSL_TIMEOUT_S = 20
REFUSAL_LIMIT_S = 15
STORE_PASSWORD = "kshim-interop"
NODE_ID = 1

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
# certificates


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path
    ca_key: Path
    server: Path
    server_key: Path  # PKCS#8
    server_key_pkcs1: Path
    other_key: Path  # an RSA key that is not server.pem's
    alice: Path
    alice_key: Path
    mallory_ca: Path
    mallory: Path
    mallory_key: Path
    ec_server: Path
    ec_server_key_sec1: Path
    ec_server_key_pkcs8: Path
    truststore: Path  # PKCS12, the CA
    alice_keystore: Path  # PKCS12, alice's key and chain
    mallory_keystore: Path


OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = placeholder

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[ec_server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise ke.EnvError(f"`{name}` is not on PATH; the TLS interop tests need it")
    return path


def run_tool(cmd, *, cwd: Path | None = None, timeout: float = OPENSSL_TIMEOUT_S, input_text: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    try:
        cp = subprocess.run(cmd, cwd=str(cwd) if cwd else None, capture_output=True, text=True, timeout=timeout,
                            input=input_text if input_text is not None else "")
    except subprocess.TimeoutExpired as e:
        raise ke.EnvError(f"timed out after {timeout}s: {' '.join(cmd)}\nstdout:{e.stdout}\nstderr:{e.stderr}")
    if check and cp.returncode != 0:
        raise ke.EnvError(f"failed (rc={cp.returncode}): {' '.join(cmd)}\nstdout:{cp.stdout}\nstderr:{cp.stderr}")
    return cp


def make_certs(d: Path) -> Certs:
    """Every certificate, key and store the module uses, made with openssl and keytool in `d`."""
    openssl = require_tool("openssl")
    keytool = require_tool("keytool")
    d.mkdir(parents=True, exist_ok=True)
    cnf = d / "openssl.cnf"
    cnf.write_text(OPENSSL_CNF)

    def ossl(*args):
        return run_tool([openssl, *args], cwd=d)

    def serial() -> str:
        return "0x" + secrets.token_hex(8)

    def self_signed_ca(name: str, cn: str) -> tuple[Path, Path]:
        ossl("req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "7",
             "-config", cnf, "-extensions", "ca_ext", "-subj", f"/CN={cn}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem")
        return d / f"{name}.pem", d / f"{name}.key"

    def leaf(name: str, cn: str, ca: Path, ca_key: Path, ext: str, key: Path | None = None) -> tuple[Path, Path]:
        if key is None:
            ossl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{name}.key")
            key = d / f"{name}.key"
        ossl("req", "-new", "-key", key, "-config", cnf, "-subj", f"/CN={cn}", "-out", f"{name}.csr")
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", ca, "-CAkey", ca_key, "-set_serial", serial(),
             "-days", "7", "-sha256", "-extfile", cnf, "-extensions", ext, "-out", f"{name}.pem")
        return d / f"{name}.pem", key

    ca, ca_key = self_signed_ca("ca", "kshim interop CA")
    server, server_key = leaf("server", "localhost", ca, ca_key, "server_ext")
    ossl("rsa", "-in", server_key, "-traditional", "-out", "server.pkcs1.key")
    ossl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "other.key")
    alice, alice_key = leaf("alice", "alice", ca, ca_key, "client_ext")
    mallory_ca, mallory_ca_key = self_signed_ca("mallory-ca", "mallory CA")
    mallory, mallory_key = leaf("mallory", "mallory", mallory_ca, mallory_ca_key, "client_ext")
    ossl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ec-server.sec1.key")
    ossl("pkcs8", "-topk8", "-nocrypt", "-in", "ec-server.sec1.key", "-out", "ec-server.pkcs8.key")
    ec_server, _ = leaf("ec-server", "localhost", ca, ca_key, "ec_server_ext", key=d / "ec-server.sec1.key")

    truststore = d / "truststore.p12"
    run_tool([keytool, "-importcert", "-noprompt", "-alias", "kshim-interop-ca", "-file", ca,
              "-keystore", truststore, "-storetype", "PKCS12", "-storepass", STORE_PASSWORD], cwd=d, timeout=60)
    for name, chain in (("alice", ca), ("mallory", mallory_ca)):
        ossl("pkcs12", "-export", "-in", f"{name}.pem", "-inkey", f"{name}.key", "-certfile", chain,
             "-name", name, "-out", f"{name}.p12", "-passout", f"pass:{STORE_PASSWORD}")

    certs = Certs(
        dir=d, ca=ca, ca_key=ca_key, server=server, server_key=server_key,
        server_key_pkcs1=d / "server.pkcs1.key", other_key=d / "other.key",
        alice=alice, alice_key=alice_key, mallory_ca=mallory_ca, mallory=mallory, mallory_key=mallory_key,
        ec_server=ec_server, ec_server_key_sec1=d / "ec-server.sec1.key",
        ec_server_key_pkcs8=d / "ec-server.pkcs8.key",
        truststore=truststore, alice_keystore=d / "alice.p12", mallory_keystore=d / "mallory.p12",
    )
    # What the tests rely on, checked once: the chains verify, the odd key really is another key.
    run_tool([openssl, "verify", "-CAfile", ca, server, alice, ec_server])
    bad = run_tool([openssl, "verify", "-CAfile", ca, mallory], check=False)
    if bad.returncode == 0:
        raise ke.EnvError(f"mallory's certificate verifies against the test CA:\n{bad.stdout}")
    if public_key(server) == public_key(certs.other_key, key=True):
        raise ke.EnvError("other.key is the server key")
    if not public_key(server) == public_key(server_key, key=True) == public_key(certs.server_key_pkcs1, key=True):
        raise ke.EnvError("server.key (or its PKCS#1 form) does not belong to server.pem")
    if public_key(ec_server) != public_key(certs.ec_server_key_pkcs8, key=True):
        raise ke.EnvError("ec-server.pkcs8.key does not belong to ec-server.pem")
    head = {p: p.read_text().splitlines()[0] for p in (server_key, certs.server_key_pkcs1,
                                                        certs.ec_server_key_sec1, certs.ec_server_key_pkcs8)}
    want = {server_key: "PRIVATE KEY", certs.server_key_pkcs1: "RSA PRIVATE KEY",
            certs.ec_server_key_sec1: "EC PRIVATE KEY", certs.ec_server_key_pkcs8: "PRIVATE KEY"}
    for p, kind in want.items():
        if head[p] != f"-----BEGIN {kind}-----":
            raise ke.EnvError(f"{p} starts with {head[p]!r}, not a {kind}")
    return certs


def public_key(path: Path, *, key: bool = False) -> str:
    openssl = require_tool("openssl")
    if key:
        return run_tool([openssl, "pkey", "-in", path, "-pubout"]).stdout
    return run_tool([openssl, "x509", "-in", path, "-noout", "-pubkey"]).stdout


def fingerprint(pem_text: str) -> str:
    """SHA-256 fingerprint of the first certificate in `pem_text` (openssl x509 skips other text)."""
    out = run_tool([require_tool("openssl"), "x509", "-noout", "-fingerprint", "-sha256"], input_text=pem_text).stdout
    m = re.search(r"Fingerprint=([0-9A-F:]+)", out, re.I)
    if not m:
        raise ke.EnvError(f"no fingerprint in {out!r}")
    return m.group(1).upper()


# --------------------------------------------------------------------------------------------
# kshim with [tls]


def toml_value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def tls_table(certs: Certs, **items) -> str:
    """A [tls] table: certificate and key default to server.pem/server.key; an item given as
    None is left out."""
    values = {"certificate": certs.server, "key": certs.server_key}
    values.update(items)
    lines = ["[tls]"] + [f"{k} = {toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


@dataclass
class TlsProxy:
    kshim: ke.KshimProcess
    broker_port: int  # kshim's listener for node 1

    @property
    def bootstrap(self) -> str:
        return self.kshim.bootstrap

    @property
    def port(self) -> int:
        return self.kshim.port

    @property
    def ports(self) -> list[int]:
        return [self.kshim.port, self.broker_port]


def new_tls_proxy(cluster: ke.KafkaCluster, binary: Path, config_toml: str) -> TlsProxy:
    broker_port = ke.free_port()
    try:
        proc = ke.KshimProcess(config_toml, upstream=cluster.bootstrap, listener_ports={NODE_ID: broker_port},
                               binary=binary)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    # KshimProcess.start() waits for the ports to accept TCP connections only (no Kafka request),
    # which is what a TLS listener allows.
    ke.start_or_fail(proc)
    return TlsProxy(proc, broker_port)


@contextlib.contextmanager
def one_test_proxy(cluster: ke.KafkaCluster, binary: Path, config_toml: str):
    """A kshim for one test; its log tail goes to the (captured) stderr when the test fails."""
    proxy = new_tls_proxy(cluster, binary, config_toml)
    try:
        yield proxy
    except BaseException:
        sys.stderr.write(f"\n--- {proxy.kshim.log_path} (last lines)\n{ke.tail(proxy.kshim.log_path, 40)}\n")
        raise
    finally:
        proxy.kshim.cleanup()


def module_failed(request) -> bool:
    return any(getattr(i, "rep_call", None) is not None and i.rep_call.failed
               for i in request.session.items if i.module is request.module)


def stop_tls_proxy(proxy: TlsProxy, request) -> None:
    if module_failed(request) or os.environ.get("KSHIM_KEEP_TMP"):
        sys.stderr.write(f"\n--- {proxy.kshim.log_path} (last lines)\n{ke.tail(proxy.kshim.log_path, 60)}\n")
    proxy.kshim.cleanup()


# --------------------------------------------------------------------------------------------
# helpers


def uid() -> str:
    return uuid.uuid4().hex[:8]


def values(prefix: str, n: int = N) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def run(cmd, timeout: float = CLIENT_TIMEOUT_S, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {timeout}s: {cmd}\nstdout:\n{e.stdout}\nstderr:\n{e.stderr}", pytrace=False)


def last_json(res: subprocess.CompletedProcess, what: str, *, allow_error: bool = False) -> dict:
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{what}: no JSON on stdout (rc={res.returncode})\nstdout:\n{res.stdout}\nstderr:\n{res.stderr[-6000:]}"
    out = json.loads(lines[-1])
    if not allow_error:
        assert res.returncode == 0 and "error" not in out, (
            f"{what} failed (rc={res.returncode}): {out.get('error')}\nstderr:\n{res.stderr[-6000:]}")
    return out


def run_python(code: str, *args, timeout: float = CLIENT_TIMEOUT_S, allow_error: bool = False) -> dict:
    res = run([sys.executable, "-c", code, *args], timeout=timeout, stdin=subprocess.DEVNULL)
    return last_json(res, "python client", allow_error=allow_error)


def assert_exactly(got: list[str], want: list[str], what: str) -> None:
    """`got` is `want` with nothing lost, nothing added and nothing twice."""
    dups = sorted(v for v, c in Counter(got).items() if c > 1)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not (dups or missing or extra), (
        f"{what}: {len(got)} consumed for {len(want)} produced; missing {len(missing)} {missing[:10]}, "
        f"unexpected {len(extra)} {extra[:10]}, duplicated {len(dups)} {dups[:10]}")


def assert_only_kshim(brokers: list, proxy: TlsProxy, cluster: ke.KafkaCluster, what: str) -> None:
    """The brokers a client was told about ([id, host, port]) are kshim's listener for node 1."""
    got = sorted(tuple(b) for b in brokers)
    assert got == [(NODE_ID, "127.0.0.1", proxy.broker_port)], (
        f"{what}: brokers {got}; expected only kshim's listener 127.0.0.1:{proxy.broker_port} "
        f"(the broker itself is on {cluster.nodes[0].port})")
    listening = proxy.kshim.listening_ports()
    assert proxy.broker_port in listening, f"kshim does not listen on {proxy.broker_port}: {sorted(listening)}"


# ---- a Kafka exchange over TLS with Python's ssl module


def api_versions_frame(correlation_id: int = 1) -> bytes:
    """ApiVersions v3 (flexible header v2), client software kshim-interop 0."""
    client_id = b"kshim-interop"
    header = struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00"
    body = bytes([len(client_id) + 1]) + client_id + bytes([2]) + b"0" + b"\x00"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def decode_api_versions(resp: bytes) -> tuple[int, int, set[int]]:
    """(correlation id, error code, api keys) of an ApiVersions v3 response body."""
    (corr, err) = struct.unpack_from(">ih", resp, 0)
    n, pos = ke._uvarint(resp, 6)
    keys = set()
    for _ in range(max(n - 1, 0)):
        (key,) = struct.unpack_from(">h", resp, pos)
        keys.add(key)
        pos = ke._skip_tags(resp, pos + 6)
    return corr, err, keys


def recv_exact(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def tls_exchange(port: int, certs: Certs, *, cert: Path | None = None, key: Path | None = None,
                 minimum: ssl.TLSVersion | None = None, maximum: ssl.TLSVersion | None = None,
                 timeout: float = 10.0) -> dict:
    """TLS handshake with kshim (server name localhost, verified against the CA), then an
    ApiVersions request. {"ok": True, "version", "cipher", "error_code", "api_keys"} or
    {"ok": False, "stage": "connect"|"handshake"|"exchange", "error"}."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(certs.ca))
    if minimum:
        ctx.minimum_version = minimum
    if maximum:
        ctx.maximum_version = maximum
    if cert:
        ctx.load_cert_chain(str(cert), str(key))
    stage = "connect"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            raw.settimeout(timeout)
            stage = "handshake"
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                stage = "exchange"
                version, cipher = s.version(), s.cipher()[0]
                s.sendall(api_versions_frame(7))
                (size,) = struct.unpack(">i", recv_exact(s, 4))
                corr, err, keys = decode_api_versions(recv_exact(s, size))
                if corr != 7:
                    return {"ok": False, "stage": stage, "error": f"correlation id {corr}, not 7"}
                return {"ok": True, "version": version, "cipher": cipher, "error_code": err,
                        "api_keys": sorted(keys)}
    except (OSError, ssl.SSLError, struct.error, IndexError, ConnectionError) as e:
        return {"ok": False, "stage": stage, "error": f"{type(e).__name__}: {e}"}


def assert_exchange_ok(port: int, certs: Certs, what: str, **kw) -> dict:
    out = tls_exchange(port, certs, **kw)
    assert out["ok"], f"{what}: no Kafka answer over TLS on {port}: {out}"
    assert out["error_code"] == 0 and {0, 1, 3, 18} <= set(out["api_keys"]), f"{what}: {out}"
    return out


def plaintext_probe(port: int, timeout: float = 5.0) -> dict:
    """A plaintext ApiVersions request on a socket; what came back, and how it ended."""
    data, how = b"", "closed"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(api_versions_frame(1))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and len(data) < 65536:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            else:
                how = "open"
    except socket.timeout:
        how = "timeout"
    except OSError as e:
        how = f"{type(e).__name__}: {e}"
    answered = False
    if len(data) >= 10:
        (size,) = struct.unpack_from(">i", data, 0)
        if size == len(data) - 4:
            try:
                corr, err, _ = decode_api_versions(data[4:])
                answered = corr == 1
            except (struct.error, IndexError):
                pass
    return {"answered": answered, "bytes": data[:64].hex(), "length": len(data), "ended": how}


# ---- openssl s_client


@dataclass
class SClient:
    rc: int
    stdout: str
    stderr: str

    @property
    def verified(self) -> bool:
        return "Verify return code: 0 (ok)" in self.stdout

    @property
    def negotiated(self) -> tuple[str, str] | None:
        """(protocol, cipher) s_client reports, else None. s_client reports them also when the
        server refused the handshake in its last flight (a TLS 1.2 client certificate it does
        not accept); `completed` tells whether the handshake went through."""
        m = re.search(r"^New, (TLSv[\d.]+), Cipher is (\S+)", self.stdout, re.M)
        return (m.group(1), m.group(2)) if m else None

    @property
    def completed(self) -> bool:
        return self.rc == 0 and self.negotiated is not None

    def __str__(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-2000:]}"


def s_client(port: int, certs: Certs, *extra) -> SClient:
    """`openssl s_client -connect 127.0.0.1:PORT -servername localhost -CAfile ca.pem EXTRA </dev/null`."""
    cmd = [require_tool("openssl"), "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
           "-CAfile", str(certs.ca), *[str(e) for e in extra]]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=OPENSSL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"openssl s_client timed out: {cmd}\n{e.stdout}\n{e.stderr}", pytrace=False)
    return SClient(cp.returncode, cp.stdout, cp.stderr)


# ---- client programs


KP_PRODUCE_CONSUME = r"""
import json, sys, time
from kafka import KafkaProducer, KafkaConsumer, KafkaAdminClient
bootstrap, topic, group, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sec = json.loads(sys.argv[6])
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000, max_block_ms=30000, **sec)
vals = [f"{prefix}-{i}" for i in range(n)]
futs = [(v, p.send(topic, v.encode())) for v in vals]
p.flush(timeout=20)
acked = [v for v, f in futs if f.get(timeout=5) is not None]
p.close(timeout=5)
a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000, **sec)
brokers = sorted([b["broker_id"], b["host"], b["port"]] for b in a.describe_cluster()["brokers"])
a.close()
c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, request_timeout_ms=20000, **sec)
got, deadline, drain = [], time.time() + 30, None
while time.time() < deadline and (drain is None or time.time() < drain):
    for tp, recs in c.poll(timeout_ms=500).items():
        got += [r.value.decode() for r in recs]
    if drain is None and len(got) >= n:
        drain = time.time() + 2
c.close()
print(json.dumps({"acked": acked, "records": got, "brokers": brokers}))
"""

# kafka-python: can it get the cluster's brokers at all? (bounded by bootstrap_timeout_ms)
KP_PROBE = r"""
import json, sys, time
from kafka import KafkaAdminClient
bootstrap, sec = sys.argv[1], json.loads(sys.argv[2])
t0 = time.time()
try:
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000, bootstrap_timeout_ms=5000,
                         reconnect_backoff_max_ms=500, **sec)
    brokers = a.describe_cluster()["brokers"]
    a.close()
    print(json.dumps({"ok": True, "brokers": [[b["broker_id"], b["host"], b["port"]] for b in brokers],
                      "seconds": time.time() - t0}))
except Exception as e:
    print(json.dumps({"ok": False, "exception": type(e).__name__, "message": str(e)[:500], "seconds": time.time() - t0}))
"""

CK_PRODUCE_CONSUME = r"""
import json, sys, time
from confluent_kafka import Producer, Consumer
bootstrap, topic, group, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sec = json.loads(sys.argv[6])
acked, failed, errors = [], [], []
def done(err, msg):
    (failed if err else acked).append(str(err) if err else msg.value().decode())
def on_error(err):
    errors.append(str(err))
p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
              "message.timeout.ms": 20000, "error_cb": on_error, **sec})
for i in range(n):
    p.produce(topic, value=f"{prefix}-{i}".encode(), on_delivery=done)
    p.poll(0)
left = p.flush(25)
md = p.list_topics(timeout=10)
brokers = sorted([b.id, b.host, b.port] for b in md.brokers.values())
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "error_cb": on_error, **sec})
c.subscribe([topic])
got, deadline, drain = [], time.time() + 30, None
while time.time() < deadline and (drain is None or time.time() < drain):
    m = c.poll(0.5)
    if m is None:
        pass
    elif m.error():
        errors.append(str(m.error()))
    else:
        got.append(m.value().decode())
    if drain is None and len(got) >= n:
        drain = time.time() + 2
c.close()
print(json.dumps({"acked": acked, "failed": failed, "unflushed": left, "brokers": brokers,
                  "records": got, "errors": errors}))
"""

# confluent-kafka: can it get the cluster's metadata at all?
CK_PROBE = r"""
import json, sys, time
from confluent_kafka.admin import AdminClient
bootstrap, sec = sys.argv[1], json.loads(sys.argv[2])
errors = []
a = AdminClient({"bootstrap.servers": bootstrap, "error_cb": lambda e: errors.append(str(e)),
                 "reconnect.backoff.max.ms": 500, **sec})
t0 = time.time()
try:
    md = a.list_topics(timeout=5)
    print(json.dumps({"ok": True, "brokers": sorted([b.id, b.host, b.port] for b in md.brokers.values()),
                      "errors": errors, "seconds": time.time() - t0}))
except Exception as e:
    a.poll(0.5)
    print(json.dumps({"ok": False, "exception": str(e)[:500], "errors": errors[:3], "seconds": time.time() - t0}))
"""


def kp_ssl(certs: Certs, cert: Path | None = None, key: Path | None = None) -> dict:
    sec = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    if cert:
        sec.update(ssl_certfile=str(cert), ssl_keyfile=str(key))
    return sec


def ck_ssl(certs: Certs, cert: Path | None = None, key: Path | None = None) -> dict:
    sec = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca)}
    if cert:
        sec.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    return sec


def java_ssl(certs: Certs, keystore: Path | None = None) -> dict:
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.location": str(certs.truststore),
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": STORE_PASSWORD,
    }
    if keystore:
        props.update({
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": STORE_PASSWORD,
            "ssl.key.password": STORE_PASSWORD,
        })
    return props


def java(*args, props: dict, timeout: float = CLIENT_TIMEOUT_S, allow_error: bool = False) -> dict:
    """One ProxyClients command (tests/interop/java/ProxyClients.java) with `props` for every client."""
    classes = ke.require_or_fail(ke.compile_java, PROXY_CLIENTS_SRC)
    prop_args = []
    for k, v in props.items():
        prop_args += ["--prop", f"{k}={v}"]
    try:
        res = ke.run_java(
            ["ProxyClients", *[str(a) for a in args], *prop_args, "--timeout-ms", str(int((timeout - 10) * 1000))],
            extra_classpath=[classes], timeout=timeout, log_config=ke.CLIENTS_LOG4J)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    cp = subprocess.CompletedProcess(args, res.rc, res.stdout, res.stderr)
    return last_json(cp, f"ProxyClients {args[0]}", allow_error=allow_error)


def ck_probe(bootstrap: str, sec: dict) -> dict:
    return run_python(CK_PROBE, bootstrap, json.dumps(sec), timeout=40)


def kp_probe(bootstrap: str, sec: dict) -> dict:
    return run_python(KP_PROBE, bootstrap, json.dumps(sec), timeout=40)


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return ke.require_or_fail(make_certs, tmp_path_factory.mktemp("tls-material"))


@pytest.fixture(scope="module")
def cluster(kafka_jars):
    c = ke.start_or_fail(ke.KafkaCluster(1))
    try:
        suffix = uid()
        c.topics = {name: f"tls-{name}-{suffix}" for name in TOPICS}
        args = ["admin", "--bootstrap", c.bootstrap]
        for name, parts in TOPICS.items():
            args += ["--create", f"{c.topics[name]}:{parts}:1"]
        out = java(*args, props={})
        bad = {k: v for k, v in out["created"].items() if v != "ok"}
        assert not bad, f"creating the test topics failed: {bad}"
    except BaseException:
        c.cleanup()
        raise
    yield c
    c.cleanup()


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


def test_kafka_python_over_tls(cluster, certs, tls_proxy):
    topic, prefix = cluster.topics["kafka-python"], f"kp-{uid()}"
    out = run_python(KP_PRODUCE_CONSUME, tls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(kp_ssl(certs)))
    assert_exactly(out["acked"], values(prefix), "kafka-python acknowledged")
    assert_exactly(out["records"], values(prefix), "kafka-python consumer")
    assert_only_kshim(out["brokers"], tls_proxy, cluster, "kafka-python describe_cluster")


def test_confluent_kafka_over_tls(cluster, certs, tls_proxy):
    topic, prefix = cluster.topics["confluent"], f"ck-{uid()}"
    out = run_python(CK_PRODUCE_CONSUME, tls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(ck_ssl(certs)))
    assert out["failed"] == [] and out["unflushed"] == 0, out
    assert_exactly(out["acked"], values(prefix), "confluent-kafka acknowledged")
    assert_exactly(out["records"], values(prefix), "confluent-kafka consumer")
    assert_only_kshim(out["brokers"], tls_proxy, cluster, "confluent-kafka list_topics().brokers")
    assert not [e for e in out["errors"] if re.search(r"SSL handshake|certificate|alert", e)], out["errors"]


def test_kcat_over_tls(cluster, certs, tls_proxy):
    kcat = ke.require_or_fail(require_tool, "kcat")
    topic, prefix = cluster.topics["kcat"], f"kcat-{uid()}"
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


def test_java_producer_consumer_over_tls(cluster, certs, tls_proxy):
    topic, prefix = cluster.topics["java"], f"java-{uid()}"
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


def test_mtls_clients_with_certificate(cluster, certs, mtls_proxy):
    topic, prefix = cluster.topics["mtls-confluent"], f"mck-{uid()}"
    out = run_python(CK_PRODUCE_CONSUME, mtls_proxy.bootstrap, topic, f"g-{uid()}", prefix, str(N),
                     json.dumps(ck_ssl(certs, certs.alice, certs.alice_key)))
    assert out["failed"] == [] and out["unflushed"] == 0, out
    assert_exactly(out["acked"], values(prefix), "confluent-kafka (alice) acknowledged")
    assert_exactly(out["records"], values(prefix), "confluent-kafka (alice) consumer")
    assert_only_kshim(out["brokers"], mtls_proxy, cluster, "confluent-kafka (alice)")

    topic, prefix = cluster.topics["mtls-kafka-python"], f"mkp-{uid()}"
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
                      "default.api.timeout.ms": "10000", "request.timeout.ms": "5000"},
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
