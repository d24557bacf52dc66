"""Shared by the TLS interop suites: certificates and stores made with openssl and keytool,
kshim with a [tls] table in front of a broker, TLS probes (Python's ssl, openssl s_client), and
the client programs (kafka-python, confluent-kafka, the Java clients) with their TLS settings.
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
STORE_PASSWORD = "kshim-interop"
NODE_ID = 1



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


def _openssl_in(d: Path):
    openssl = require_tool("openssl")
    cnf = d / "openssl.cnf"
    if not cnf.exists():
        cnf.write_text(OPENSSL_CNF)
    return lambda *args: run_tool([openssl, *args], cwd=d)


def issue(d: Path, name: str, cn: str, ca: Path, ca_key: Path, ext: str, key: Path | None = None) -> tuple[Path, Path]:
    """A certificate `d/NAME.pem` for CN=`cn` with the extensions `ext` of OPENSSL_CNF, signed by
    `ca`, and its key `d/NAME.key` (a new RSA key unless `key` is given)."""
    ossl = _openssl_in(d)
    if key is None:
        ossl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{name}.key")
        key = d / f"{name}.key"
    ossl("req", "-new", "-key", key, "-config", d / "openssl.cnf", "-subj", f"/CN={cn}", "-out", f"{name}.csr")
    ossl("x509", "-req", "-in", f"{name}.csr", "-CA", ca, "-CAkey", ca_key, "-set_serial",
         "0x" + secrets.token_hex(8), "-days", "7", "-sha256", "-extfile", d / "openssl.cnf", "-extensions", ext,
         "-out", f"{name}.pem")
    return d / f"{name}.pem", key


def export_pkcs12(d: Path, name: str, chain: Path, password: str = STORE_PASSWORD) -> Path:
    """`d/NAME.p12`: NAME.key with NAME.pem and the CA certificate `chain`, as openssl exports it."""
    _openssl_in(d)("pkcs12", "-export", "-in", f"{name}.pem", "-inkey", f"{name}.key", "-certfile", chain,
                   "-name", name, "-out", f"{name}.p12", "-passout", f"pass:{password}")
    return d / f"{name}.p12"


def make_certs(d: Path) -> Certs:
    """Every certificate, key and store the module uses, made with openssl and keytool in `d`."""
    openssl = require_tool("openssl")
    keytool = require_tool("keytool")
    d.mkdir(parents=True, exist_ok=True)
    cnf = d / "openssl.cnf"
    cnf.write_text(OPENSSL_CNF)
    ossl = _openssl_in(d)

    def self_signed_ca(name: str, cn: str) -> tuple[Path, Path]:
        ossl("req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "7",
             "-config", cnf, "-extensions", "ca_ext", "-subj", f"/CN={cn}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem")
        return d / f"{name}.pem", d / f"{name}.key"

    def leaf(name: str, cn: str, ca: Path, ca_key: Path, ext: str, key: Path | None = None) -> tuple[Path, Path]:
        return issue(d, name, cn, ca, ca_key, ext, key)

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
        export_pkcs12(d, name, chain)

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


def name_certificate(certs: Certs, domain: str) -> tuple[Path, Path]:
    """A server certificate from the test CA for `domain` and `*.domain`, and its key: what
    kshim presents when it routes brokers by TLS server name under `domain`."""
    d = certs.dir
    ext = f"name_ext_{domain.replace('.', '_')}"
    cnf = d / "openssl.cnf"
    if f"[{ext}]" not in cnf.read_text():
        cnf.write_text(cnf.read_text() + f"""
[{ext}]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:{domain}, DNS:*.{domain}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
""")
    return issue(d, ext, domain, certs.ca, certs.ca_key, ext)


def loopback_resolver(d: Path, domain: str) -> dict[str, str]:
    """The environment under which a client process resolves `domain` and every name under it
    to 127.0.0.1: tests/interop/native/test_resolver.c, a getaddrinfo() built into `d` and
    loaded with LD_PRELOAD. The client still connects by the name, sends it as its TLS server
    name and checks the certificate against it; nothing on the machine changes."""
    out = d / "libtest_resolver.so"
    if not out.exists():
        cc = require_tool("cc")
        run_tool([cc, "-shared", "-fPIC", "-O1", "-o", out, ke.INTEROP_DIR / "native" / "test_resolver.c", "-ldl"])
    return {"LD_PRELOAD": str(out), "KSHIM_TEST_DOMAIN": domain}


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


def run_python(code: str, *args, timeout: float = CLIENT_TIMEOUT_S, allow_error: bool = False,
               env: dict[str, str] | None = None) -> dict:
    res = run([sys.executable, "-c", code, *args], timeout=timeout, stdin=subprocess.DEVNULL,
              env=None if env is None else {**os.environ, **env})
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


def java(*args, props: dict, timeout: float = CLIENT_TIMEOUT_S, allow_error: bool = False,
         env: dict[str, str] | None = None) -> dict:
    """One ProxyClients command (tests/interop/java/ProxyClients.java) with `props` for every client;
    `env` is added to its environment."""
    classes = ke.require_or_fail(ke.compile_java, PROXY_CLIENTS_SRC)
    prop_args = []
    for k, v in props.items():
        prop_args += ["--prop", f"{k}={v}"]
    try:
        res = ke.run_java(
            ["ProxyClients", *[str(a) for a in args], *prop_args, "--timeout-ms", str(int((timeout - 10) * 1000))],
            extra_classpath=[classes], timeout=timeout, log_config=ke.CLIENTS_LOG4J, env=env)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    cp = subprocess.CompletedProcess(args, res.rc, res.stdout, res.stderr)
    return last_json(cp, f"ProxyClients {args[0]}", allow_error=allow_error)


def ck_probe(bootstrap: str, sec: dict) -> dict:
    return run_python(CK_PROBE, bootstrap, json.dumps(sec), timeout=40)


def kp_probe(bootstrap: str, sec: dict) -> dict:
    return run_python(KP_PROBE, bootstrap, json.dumps(sec), timeout=40)


def ssl_only_broker(keystore: Path, *, truststore: Path | None = None, **kwargs) -> ke.KafkaCluster:
    """One KRaft node whose client listener speaks only TLS (its certificate from the PKCS#12
    `keystore`, password STORE_PASSWORD), replicating over a plaintext INTERNAL listener that the
    harness probes too. With `truststore`, it requires client certificates that chain to it.
    Not started; `kwargs` go to KafkaCluster."""
    props = {
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.key.password": STORE_PASSWORD,
        "ssl.client.auth": "none",
    }
    if truststore is not None:
        props.update({
            "ssl.truststore.location": str(truststore),
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": STORE_PASSWORD,
            "ssl.client.auth": "required",
        })
    return ke.KafkaCluster(
        1,
        separate_inter_broker=True,
        listener_overrides={
            "listeners": "SSL://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port},"
                         "CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": "SSL://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "SSL:SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        },
        extra_properties=props,
        **kwargs,
    )
