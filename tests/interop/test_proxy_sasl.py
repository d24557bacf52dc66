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
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

import kafka_env

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SCRAM_USER = ("carol", "carol-secret")
SCRAM_512_USER = ("dave", "dave-secret")
FEATURE = "acme.widgets"

CLIENT = r"""
import json, sys
from kafka import KafkaConsumer, KafkaProducer
bootstrap, user, password, topic, bootstrap_timeout_ms = sys.argv[1:5] + [int(sys.argv[5])]
auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username=user, sasl_plain_password=password,
            bootstrap_timeout_ms=bootstrap_timeout_ms)
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
    got = []
    for m in c:
        got.append(m.value.decode())
        if len(got) >= len(sent):
            break
    # Anything beyond what was sent arrives with the records before it.
    got += [m.value.decode() for batch in c.poll(timeout_ms=300).values() for m in batch]
    c.close()
    print(json.dumps({"sent": len(sent), "got": sorted(got) == sorted(sent), "n": len(got)}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


@pytest.fixture(scope="module")
def sasl_broker(kafka_clusters):
    cluster = kafka_clusters.start(
        1,
        extra_ports=1,
        listener_overrides={
            "listeners": "SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},REPLICATION://127.0.0.1:{extra0}",
            "advertised.listeners": "SASL_PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{extra0}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        },
        format_args=[
            "--add-scram", f"SCRAM-SHA-256=[name={SCRAM_USER[0]},password={SCRAM_USER[1]}]",
            "--add-scram", f"SCRAM-SHA-512=[name={SCRAM_512_USER[0]},password={SCRAM_512_USER[1]}]",
        ],
        extra_properties={
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            # Re-authentication (KIP-368) allowed; ten minutes, so no client here is made to.
            "connections.max.reauth.ms": "600000",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        },
    )
    yield cluster
    cluster.cleanup()


def proxy_toml(broker, mechanism: str, user: tuple[str, str], extra: str = "") -> str:
    """kshim in front of `broker`, its own connections authenticated as `user`."""
    return f"""
[upstream]
bootstrap = "{broker.bootstrap}"
refresh_interval_ms = 1000
[upstream.listeners]
port_base = 0
[upstream.sasl]
mechanism = "{mechanism}"
username = "{user[0]}"
password = "{user[1]}"
""" + extra


@pytest.fixture
def proxy(kshim_factory, sasl_broker):
    return kshim_factory(proxy_toml(sasl_broker, "PLAIN", ("admin", "admin-secret")))


def run_client(bootstrap: str, user: str, password: str, topic: str, bootstrap_timeout_ms: int = 30000) -> dict:
    cp = subprocess.run(
        [sys.executable, "-c", CLIENT, bootstrap, user, password, topic, str(bootstrap_timeout_ms)],
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
    # Expected never to get past bootstrap: give up after 5 s, not the default 30.
    via = run_client(proxy.bootstrap, "alice", "wrong", "sasl-bad", bootstrap_timeout_ms=5000)
    direct = run_client(sasl_broker.bootstrap, "alice", "wrong", "sasl-bad", bootstrap_timeout_ms=5000)
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


def test_sighup_with_a_changed_sasl_password_is_reported_as_restart_only(kshim_factory, sasl_broker):
    """kshim's own credentials ([upstream.sasl]) are read at startup: a SIGHUP after the
    password in the file changed warns that the change needs a restart, naming an upstream
    key. Neither password is logged."""
    rotated = "rotated-" + "secret"
    proc = kshim_factory(
        f"""
[upstream]
bootstrap = "{sasl_broker.bootstrap}"
refresh_interval_ms = 500
[upstream.listeners]
port_base = 0
[upstream.sasl]
mechanism = "PLAIN"
username = "admin"
password = "admin-secret"
""",
        rust_log="info",
    )
    assert wait_until_true(lambda: 0 in kafka_env.api_versions(proc.bootstrap).api_keys, 30), "nothing discovered"
    text = proc.config_path.read_text()
    assert text.count('password = "admin-secret"') == 1, text
    proc.config_path.write_text(text.replace('password = "admin-secret"', f'password = "{rotated}"'))
    mark = len(proc.log_text())
    os.kill(proc.pid, signal.SIGHUP)

    def after() -> list[str]:
        return [line for line in proc.log_text()[mark:].splitlines() if "SIGHUP" in line]

    assert wait_until_true(lambda: any("reloaded" in line for line in after()), 15), (
        f"kshim did not reload on SIGHUP: {after()}\n{kafka_env.tail(proc.log_path)}")
    wait_until_true(lambda: any("need a restart" in line for line in after()), 2)
    lines = after()
    warnings = [line for line in lines if "SIGHUP: these changes need a restart and were not applied" in line]
    assert len(warnings) == 1, f"no restart warning after the SIGHUP: {lines}"
    keys = re.search(r"keys=\[(.*?)\]", warnings[0])
    named = re.findall(r'"([^"]+)"', keys.group(1)) if keys else []
    assert any(k.startswith("upstream") for k in named), f"the warning names no upstream key: {warnings[0]}"
    assert proc.alive()
    log = proc.log_text()
    assert "admin-secret" not in log and rotated not in log, "a password is in kshim's log"


def wait_until_true(check, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return True
        except (OSError, kafka_env.EnvError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def update_as(bootstrap: str, mechanism: str, user: str, password: str, level: int,
              bootstrap_timeout_ms: int = 30000) -> dict:
    client = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
              "sasl_plain_username": user, "sasl_plain_password": password,
              "bootstrap_timeout_ms": bootstrap_timeout_ms}
    return kafka_env.require_or_fail(kafka_env.kafka_python_update_features, bootstrap, client, FEATURE, level)


def authorizing(kshim_factory, sasl_broker, alter_cluster: list[str]):
    """kshim in front of the SASL broker, owning FEATURE at level 1, with ALTER on CLUSTER for
    `alter_cluster` only."""
    allowed = ", ".join(f'"{p}"' for p in alter_cluster)
    return kshim_factory(
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
alter_cluster = [{allowed}]
[features.ownership]
kshim_owned = ["acme.*"]
[features.supported]
"{FEATURE}" = {{ min = 1, max = 4 }}
[features.bootstrap]
"{FEATURE}" = 1
""",
        rust_log="info,kshim::server=debug,kshim::handlers::session=debug",
    )


def test_the_sasl_principal_is_authorized(kshim_factory, sasl_broker):
    """alice (PLAIN) and carol (SCRAM-SHA-256) hold ALTER on CLUSTER, bob (PLAIN) does not."""
    proc = authorizing(kshim_factory, sasl_broker, ["User:alice", f"User:{SCRAM_USER[0]}"])
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
    # its bootstrap timeout, 5 s here), so nothing is authorized and nothing changes.
    wrong = update_as(proc.bootstrap, "SCRAM-SHA-256", SCRAM_USER[0], "not-it", 4, bootstrap_timeout_ms=5000)
    assert "error" in wrong and "result" not in wrong, wrong
    again = update_as(proc.bootstrap, "PLAIN", "alice", "alice-secret", 3)
    assert again.get("result") == "ok" and again["finalized"][FEATURE] == 3, again


# --------------------------------------------------------------------------------------------
# The identity takeover: a client that logged in as bob names alice in a later SaslAuthenticate.
# kshim must keep bob as the principal, whatever the broker answers to the second exchange.

class RawKafka:
    """Kafka requests over one plain socket, written by hand so that they can be pipelined."""

    def __init__(self, bootstrap: str):
        host, port = kafka_env.split_hostport(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.settimeout(10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def frame(self, api_key: int, version: int, body: bytes, flexible: bool) -> bytes:
        self.correlation += 1
        client_id = b"takeover"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client_id)) + client_id
        if flexible:
            header += b"\x00"
        payload = header + body
        return struct.pack(">i", len(payload)) + payload

    def handshake(self, mechanism: str = "PLAIN") -> bytes:
        m = mechanism.encode()
        return self.frame(17, 1, struct.pack(">h", len(m)) + m, flexible=False)

    def authenticate(self, user: str, password: str) -> bytes:
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        return self.frame(36, 2, bytes([len(token) + 1]) + token + b"\x00", flexible=True)

    def update_features(self, feature: str, level: int) -> bytes:
        name = feature.encode()
        update = bytes([len(name) + 1]) + name + struct.pack(">hb", level, 1) + b"\x00"
        body = struct.pack(">i", 10000) + bytes([2]) + update + b"\x00" + b"\x00"
        return self.frame(57, 1, body, flexible=True)

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def login(self, user: str, password: str) -> None:
        """A PLAIN handshake and authentication, each waiting for its successful answer."""
        self.send(self.handshake())
        assert self.answer(flexible=False) == (self.correlation, 0)
        self.send(self.authenticate(user, password))
        assert self.answer(flexible=True) == (self.correlation, 0)

    def answer(self, flexible: bool) -> tuple[int, int] | None:
        """(correlation id, error code) of the next response; None once kshim closed the socket."""
        try:
            (size,) = struct.unpack(">i", kafka_env._recv_exact(self.sock, 4))
            resp = kafka_env._recv_exact(self.sock, size)
        except (kafka_env.EnvError, ConnectionResetError):
            return None
        (correlation,) = struct.unpack_from(">i", resp, 0)
        pos = kafka_env._skip_tags(resp, 4) if flexible else 4
        (code,) = struct.unpack_from(">h", resp, pos)
        return correlation, code


# Kafka's sasl.server.max.receive.size, kshim's max_unauthenticated_frame_bytes by default.
UNAUTHENTICATED_MAX = 512 * 1024


def test_a_client_that_has_not_authenticated_cannot_send_a_large_frame(proxy):
    """In front of brokers that require SASL, a frame of more than 512 KiB from a client that has
    not authenticated is refused from its size prefix: the connection closes at once, before any
    of its body is read or held (not after frame_read_timeout_ms, waiting for the rest). Once the
    client has authenticated, the same frame is read and answered."""
    frame = kafka_env.produce_v7(1, "sasl-large", 1, bytes(UNAUTHENTICATED_MAX + 4096))
    raw = RawKafka(proxy.bootstrap)
    try:
        # The size prefix and a little of the body; the rest never comes.
        raw.send(frame[:1024])
        started = time.monotonic()
        assert raw.answer(flexible=False) is None, "kshim answered a frame it should have refused"
        assert time.monotonic() - started < 5, "the connection stayed open, waiting for the frame"
    finally:
        raw.close()
    # A frame at the cap is read before authentication (ApiVersions is far below it).
    assert kafka_env.api_versions(proxy.bootstrap).error_code == 0
    raw = RawKafka(proxy.bootstrap)
    try:
        raw.login("alice", "alice-secret")
        raw.send(frame)
        answer = kafka_env.read_frame(raw.sock)
        assert struct.unpack_from(">i", answer, 0)[0] == 1, "not the Produce request's answer"
    finally:
        raw.close()


def update_features_answer(raw: RawKafka) -> int | None:
    """UpdateFeatures v1's top-level error code (after ThrottleTimeMs), or None if closed."""
    try:
        (size,) = struct.unpack(">i", kafka_env._recv_exact(raw.sock, 4))
        resp = kafka_env._recv_exact(raw.sock, size)
    except (kafka_env.EnvError, ConnectionResetError):
        return None
    pos = kafka_env._skip_tags(resp, 4)
    (code,) = struct.unpack_from(">h", resp, pos + 4)
    return code


@pytest.fixture
def guarded(kshim_factory, sasl_broker):
    return authorizing(kshim_factory, sasl_broker, ["User:alice"])


def level_of(bootstrap: str) -> int:
    return kafka_env.api_versions(bootstrap).finalized.get(FEATURE, (0, 0))[1]


def test_a_pipelined_second_login_cannot_take_another_identity(guarded):
    raw = RawKafka(guarded.bootstrap)
    raw.send(raw.handshake())
    assert raw.answer(flexible=False) == (1, 0)
    # bob's valid login, then at once alice's with a wrong password, then the privileged request.
    raw.send(raw.authenticate("bob", "bob-secret"), raw.authenticate("alice", "wrong"),
             raw.update_features(FEATURE, 2))
    answers = []
    while (a := raw.answer(flexible=True)) is not None:
        answers.append(a)
    raw.close()
    # kshim closes the connection at the pipelined SaslAuthenticate: nothing after it is answered.
    assert answers in ([], [(2, 0)]), answers
    assert level_of(guarded.bootstrap) == 1
    log = guarded.log_path.read_text()
    assert "principal=User:alice" not in log
    assert "SASL requests must wait for their answers" in log


def test_a_later_login_is_refused_and_the_first_identity_stays(guarded):
    raw = RawKafka(guarded.bootstrap)
    raw.login("bob", "bob-secret")
    # Without a new SaslHandshake, kshim answers ILLEGAL_SASL_STATE itself, as the broker would.
    raw.send(raw.authenticate("alice", "wrong"))
    assert raw.answer(flexible=True) == (3, 34)
    raw.send(raw.update_features(FEATURE, 2))
    assert update_features_answer(raw) == 31, "bob is still bob: CLUSTER_AUTHORIZATION_FAILED"
    # Re-authentication (KIP-368) as bob goes through and leaves bob as bob ...
    raw.login("bob", "bob-secret")
    raw.send(raw.update_features(FEATURE, 2))
    assert update_features_answer(raw) == 31
    # ... and one naming alice, with her own valid password, closes the connection. (Brokers
    # refuse re-authentications less than a second apart.)
    time.sleep(1.2)
    raw.send(raw.handshake())
    assert raw.answer(flexible=False) == (8, 0)
    raw.send(raw.authenticate("alice", "alice-secret"))
    assert raw.answer(flexible=True) is None, "kshim closes a re-authentication that changes the user"
    raw.close()
    assert level_of(guarded.bootstrap) == 1
    assert "principal=User:alice" not in guarded.log_path.read_text()


def test_alice_herself_is_still_authorized(guarded):
    """The same raw client, logged in as alice: the refusals above are not the client's doing."""
    raw = RawKafka(guarded.bootstrap)
    raw.login("alice", "alice-secret")
    raw.send(raw.update_features(FEATURE, 2))
    assert update_features_answer(raw) == 0
    raw.close()
    assert level_of(guarded.bootstrap) == 2


# --------------------------------------------------------------------------------------------
# kshim features over TLS and SASL, beside kafka-features.sh with the same --command-config


EPOCH = re.compile(r"Epoch: \d+")


def command_config(path, protocol: str, mechanism: str | None = None, user: tuple[str, str] | None = None,
                   trust: str = "", extra: str = ""):
    module = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
              "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
              "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
    lines = [f"security.protocol={protocol}", trust]
    if mechanism:
        lines += [f"sasl.mechanism={mechanism}",
                  f'sasl.jaas.config={module[mechanism]} required username="{user[0]}" password="{user[1]}";']
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def kshim_features(binary, bootstrap: str, *args, config=None):
    cmd = [str(binary), "features", "--bootstrap-server", bootstrap]
    if config is not None:
        cmd += ["--command-config", str(config)]
    cp = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return cp.returncode, cp.stdout, cp.stderr.replace("kshim: ", "")


def both_tools(binary, bootstrap: str, config, *args):
    ours = kshim_features(binary, bootstrap, *args, config=config)
    # `kshim features` speaks as the newest release's tool.
    theirs = kafka_env.run_feature_command(bootstrap, *args, command_config=config,
                                           jars=kafka_env.release_jars("4.4.0"))
    mask = lambda r: (r[0], EPOCH.sub("Epoch: <N>", r[1]), r[2])  # noqa: E731
    return mask(ours), mask(theirs)


@pytest.fixture(scope="module")
def tls_sasl_proxy(sasl_broker, kshim_binary, tmp_path_factory):
    """kshim with TLS on its listeners in front of the SASL broker; its own connections use
    SCRAM-SHA-512; only User:admin may change features."""
    import tls_support

    certs = kafka_env.require_or_fail(tls_support.make_certs, tmp_path_factory.mktemp("certs"))
    proc = kafka_env.KshimProcess(
        proxy_toml(sasl_broker, "SCRAM-SHA-512", SCRAM_512_USER,
                   '[authorization]\nalter_cluster = ["User:admin"]\n' + tls_support.tls_table(certs)),
        binary=kshim_binary,
    )
    kafka_env.start_or_fail(proc)
    yield proc, certs
    proc.cleanup()


def test_kshim_features_over_tls_and_sasl_prints_what_kafka_features_prints(tls_sasl_proxy, kshim_binary,
                                                                               tmp_path):
    import tls_support

    proc, certs = tls_sasl_proxy
    # kshim found the cluster through its own SCRAM-SHA-512 connection.
    assert kafka_env.wait_until(lambda: "broker 1 (" in proc.log_path.read_text(), 30), "kshim discovered the cluster"
    pem = f"ssl.truststore.location={certs.ca}\nssl.truststore.type=PEM"
    p12 = f"ssl.truststore.location={certs.truststore}\nssl.truststore.password={tls_support.STORE_PASSWORD}"
    admin = command_config(tmp_path / "admin.properties", "SASL_SSL", "PLAIN", ("admin", "admin-secret"), pem)
    carol = command_config(tmp_path / "carol.properties", "SASL_SSL", "SCRAM-SHA-256", SCRAM_USER, p12)
    dave = command_config(tmp_path / "dave.properties", "SASL_SSL", "SCRAM-SHA-512", SCRAM_512_USER, pem)

    for config, args in [
        (admin, ["describe"]),
        (carol, ["describe"]),
        (dave, ["describe"]),
        (admin, ["upgrade", "--release-version", "4.1", "--dry-run"]),
        (admin, ["upgrade", "--release-version", "4.4", "--dry-run"]),
        (admin, ["downgrade", "--feature", "metadata.version=22", "--dry-run"]),
        # Only User:admin may: carol is refused by kshim, in Kafka's words.
        (carol, ["upgrade", "--feature", "group.version=1", "--dry-run"]),
        (dave, ["disable", "--feature", "group.version", "--dry-run"]),
    ]:
        ours, theirs = both_tools(kshim_binary, proc.bootstrap, config, *args)
        assert ours == theirs, f"{config.name} {args}:\nkshim features: {ours}\nkafka-features.sh: {theirs}"
    # The refusal is really a refusal, not an empty success.
    rc, out, _ = kshim_features(kshim_binary, proc.bootstrap, "upgrade", "--feature", "group.version=1",
                                "--dry-run", config=carol)
    assert rc == 1 and "Can not upgrade group.version to 1. " in out and "User:carol needs ALTER permission" in out, out


def test_kshim_features_says_what_is_wrong_with_the_connection(tls_sasl_proxy, sasl_broker, kshim_binary, tmp_path):
    proc, certs = tls_sasl_proxy
    pem = f"ssl.truststore.location={certs.ca}\nssl.truststore.type=PEM"
    # Plaintext to a TLS listener: named as such, not as a 350 MB frame.
    for config in [None, command_config(tmp_path / "plain.properties", "SASL_PLAINTEXT", "PLAIN",
                                        ("admin", "admin-secret"))]:
        rc, out, err = kshim_features(kshim_binary, proc.bootstrap, "describe", config=config)
        assert rc == 1 and "answered with a TLS record" in err and "security.protocol=SSL" in err, err
        assert "frame size" not in err, err
    # TLS to a plaintext listener.
    ssl_config = command_config(tmp_path / "ssl.properties", "SASL_SSL", "PLAIN", ("admin", "admin-secret"), pem)
    rc, out, err = kshim_features(kshim_binary, sasl_broker.bootstrap, "describe", config=ssl_config)
    assert rc == 1 and "TLS handshake failed" in err and "plaintext listener" in err, err
    # A wrong password, for each mechanism: the broker's own reason, with who and how.
    for mechanism, user in [("PLAIN", ("admin", "nope")), ("SCRAM-SHA-256", (SCRAM_USER[0], "nope")),
                            ("SCRAM-SHA-512", (SCRAM_512_USER[0], "nope"))]:
        config = command_config(tmp_path / "bad.properties", "SASL_SSL", mechanism, user, pem)
        rc, out, err = kshim_features(kshim_binary, proc.bootstrap, "describe", config=config)
        assert rc == 1 and f"SASL/{mechanism} authentication as {user[0]} failed" in err, err
        assert "invalid credentials" in err.lower() or "authentication failed" in err.lower(), err
    # A mechanism the broker does not enable: the list it does.
    config = command_config(tmp_path / "gss.properties", "SASL_SSL", "PLAIN", ("admin", "admin-secret"), pem,
                            extra="sasl.kerberos.service.name=kafka\n")
    rc, _, err = kshim_features(kshim_binary, proc.bootstrap, "describe", config=config)
    assert rc == 1 and "sasl.kerberos.service.name: kshim does not support it" in err, err
