"""Real Kafka clients against kshim (standalone discovery mode) and, as a control, against a
real Apache Kafka 4.1.1 broker.

Clients: kafka-python 3.0.12, confluent-kafka (librdkafka 2.x), kcat (Debian's, librdkafka
2.0.2) and franz-go (the `kshim-go-probe` program in tests/interop/go). Each one connects to
kshim with the KIP-584 draft tags ON and completes Metadata; where a client exposes finalized
features, they must equal what kshim was configured with.

Also here: replay of the captured client frames in protocol-fixtures/ against kshim, the
recording proxy in tests/tools/capture_proxy.py, and a characterisation of how Debian kcat's
librdkafka 2.0.2 skips unknown tagged fields in an ApiVersions v3 response.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

import kafka_env

REPO = Path(__file__).resolve().parents[2]
GO_DIR = REPO / "tests" / "interop" / "go"
GO_PROBE = REPO / "build" / "bin" / "kshim-go-probe"
FIXTURES = REPO / "protocol-fixtures"
CAPTURE_PROXY = REPO / "tests" / "tools" / "capture_proxy.py"

CLIENT_TIMEOUT_S = 60

# What the feature-configured kshim is told. Levels >= 1 are finalized; group.version and
# transaction.version mirror Kafka 4.1; kshim.interop.version is a kshim-only feature whose
# supported minimum is 1, so it is listed in every ApiVersions v3+ response.
SUPPORTED = {
    "metadata.version": (7, 27),
    "group.version": (0, 1),
    "transaction.version": (0, 2),
    "kshim.interop.version": (1, 5),
}
FINALIZED = {
    "metadata.version": 27,
    "group.version": 1,
    "transaction.version": 2,
    "kshim.interop.version": 3,
}

DRAFT_TAGS = [10000, 10001, 10002]


# --------------------------------------------------------------------------------------------
# helpers


def features_config() -> str:
    return kafka_env.kshim_feature_config(FINALIZED, SUPPORTED)


def cluster_id_of(proc) -> str:
    return tomllib.loads(proc.config_text)["cluster_id"]


def run(cmd, timeout=CLIENT_TIMEOUT_S, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, **kw,
    )


def run_python(code: str, *args: str, timeout=CLIENT_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a client in its own interpreter so a hung client is bounded by `timeout`."""
    return run([sys.executable, "-c", code, *args], timeout=timeout)


def json_out(res: subprocess.CompletedProcess):
    assert res.returncode == 0, f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def finalized_expected() -> dict[str, int]:
    return {name: level for name, level in FINALIZED.items() if level >= 1}


uvarint = kafka_env.encode_uvarint


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def compact_str(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


def roundtrip(bootstrap: str, frame: bytes, timeout: float = 10.0) -> bytes:
    """Send one whole frame (size prefix included); return the response frame without prefix."""
    host, port = kafka_env.split_hostport(bootstrap)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(frame)
        (size,) = struct.unpack(">i", recv_exact(s, 4))
        return recv_exact(s, size)


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise AssertionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def client_software(frame: bytes) -> tuple[str, str]:
    """ClientSoftwareName/Version of a whole ApiVersions v3+ request frame."""
    (n,) = struct.unpack_from(">h", frame, 12)
    pos = 14 + max(n, 0)
    _, pos = read_uvarint(frame, pos)  # header tagged fields (count 0)
    ln, pos = read_uvarint(frame, pos)
    name = frame[pos:pos + ln - 1].decode()
    pos += ln - 1
    lv, pos = read_uvarint(frame, pos)
    return name, frame[pos:pos + lv - 1].decode()


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def kcat_bin() -> str:
    path = shutil.which("kcat")
    if not path:
        pytest.fail("kcat is not installed: apt-get install -y kcat", pytrace=False)
    return path


@pytest.fixture(scope="session")
def kcat_librdkafka(kcat_bin) -> tuple[int, int, int]:
    res = run([kcat_bin, "-V"], timeout=10)
    m = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", res.stdout + res.stderr)
    assert m, f"cannot read librdkafka version from `kcat -V`:\n{res.stdout}{res.stderr}"
    return tuple(int(x) for x in m.groups())


@pytest.fixture(scope="session")
def go_probe() -> Path:
    go = shutil.which("go")
    if not go:
        pytest.fail("Go toolchain not found; it is needed to build build/bin/kshim-go-probe", pytrace=False)
    GO_PROBE.parent.mkdir(parents=True, exist_ok=True)
    res = run([go, "build", "-o", GO_PROBE, "./cmd/kshim-go-probe"], timeout=600, cwd=GO_DIR)
    if res.returncode != 0:
        pytest.fail(f"go build of kshim-go-probe failed:\n{res.stdout}\n{res.stderr}", pytrace=False)
    return GO_PROBE


@pytest.fixture
def kshim_features(kshim_factory):
    """A standalone kshim configured with SUPPORTED/FINALIZED, draft tags on."""
    return kshim_factory(features_config(), draft_tags=True)


# --------------------------------------------------------------------------------------------
# kafka-python

KP_DESCRIBE = r"""
import json, sys
from kafka.admin import KafkaAdminClient
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=15000)
try:
    f = a.describe_features()
    c = a.describe_cluster()
    t = a.list_topics()
finally:
    a.close()
print(json.dumps({"features": f, "cluster": c, "topics": t}))
"""


def kp_describe(bootstrap: str) -> dict:
    return json_out(run_python(KP_DESCRIBE, bootstrap))


def finalized_from_kp(features: dict) -> tuple[dict[str, int], set]:
    levels, epochs = {}, set()
    for name, info in features.items():
        if "finalized" in info:
            lo, hi = info["finalized"]
            assert lo == hi, f"{name}: finalized min {lo} != max {hi}"
            levels[name] = hi
            epochs.add(info["finalized_epoch"])
    return levels, epochs


def test_kafka_python_describe_features_and_cluster_kshim(kshim_features):
    out = kp_describe(kshim_features.bootstrap)
    levels, epochs = finalized_from_kp(out["features"])
    assert levels == finalized_expected()
    supported = {n: tuple(i["supported"]) for n, i in out["features"].items() if "supported" in i}
    assert supported == SUPPORTED
    # The epoch kafka-python reports is the one on the wire (decoded independently here).
    wire = kafka_env.api_versions(kshim_features.bootstrap)
    assert wire.finalized_epoch is not None and wire.finalized_epoch >= 0
    assert epochs == {wire.finalized_epoch}

    cluster = out["cluster"]
    host, port = kafka_env.split_hostport(kshim_features.bootstrap)
    assert cluster["cluster_id"] == cluster_id_of(kshim_features)
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, host, port)]
    assert out["topics"] == []


def test_kafka_python_describe_features_broker_control(kafka_broker):
    out = kp_describe(kafka_broker.bootstrap)
    levels, epochs = finalized_from_kp(out["features"])
    wire = kafka_env.api_versions(kafka_broker.bootstrap)
    assert levels == {n: hi for n, (lo, hi) in wire.finalized.items()}
    assert "metadata.version" in levels
    assert len(epochs) == 1 and min(epochs) >= 0
    assert out["cluster"]["controller_id"] == 1


KP_UPDATE = r"""
import json, sys
from kafka.admin import KafkaAdminClient
from kafka.admin._cluster import UpdateFeatureType
import kafka.errors as Errors
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=15000)
steps = json.loads(sys.argv[2])
out = []
try:
    for feature, level, utype, validate_only in steps:
        try:
            r = a.update_features({feature: (UpdateFeatureType[utype], level)}, validate_only=validate_only)
            res = {"result": r}
        except Errors.KafkaError as e:
            res = {"error": type(e).__name__, "errno": getattr(e, "errno", None), "message": str(e)}
        f = a.describe_features()
        res["finalized"] = {n: i["finalized"][1] for n, i in f.items() if "finalized" in i}
        res["epochs"] = sorted({i["finalized_epoch"] for i in f.values() if "finalized" in i})
        out.append(res)
finally:
    a.close()
print(json.dumps(out))
"""


def test_kafka_python_update_features_kshim(kshim_features, go_probe):
    steps = [
        ["group.version", 0, "SAFE_DOWNGRADE", False],   # 1 -> 0 (disable)
        ["group.version", 1, "UPGRADE", False],          # 0 -> 1
        ["group.version", 9, "UPGRADE", False],          # beyond the supported range
        ["group.version", 0, "SAFE_DOWNGRADE", True],    # validate only
        ["kshim.interop.version", 5, "UPGRADE", False],  # 3 -> 5
    ]
    start = kafka_env.api_versions(kshim_features.bootstrap).finalized_epoch
    out = json_out(run_python(KP_UPDATE, kshim_features.bootstrap, json.dumps(steps)))
    expected = finalized_expected()

    down, up, bad, dry, custom = out
    assert down["result"] == {"group.version": "OK"}
    assert down["finalized"] == {k: v for k, v in expected.items() if k != "group.version"}
    assert down["epochs"][0] > start

    assert up["result"] == {"group.version": "OK"}
    assert up["finalized"] == expected
    assert up["epochs"][0] > down["epochs"][0]

    assert bad["error"] == "InvalidUpdateVersionError" and bad["errno"] == 95
    assert "Invalid update version 9 for feature group.version" in bad["message"]
    assert bad["finalized"] == expected and bad["epochs"] == up["epochs"]

    assert dry["result"] == {"group.version": "OK"}
    assert dry["finalized"] == expected and dry["epochs"] == up["epochs"]

    assert custom["result"] == {"kshim.interop.version": "OK"}
    assert custom["finalized"] == dict(expected, **{"kshim.interop.version": 5})
    assert custom["epochs"][0] > up["epochs"][0]

    # Another client sees the same snapshot.
    probe = json_out(run([go_probe, "--bootstrap", kshim_features.bootstrap]))
    assert {f["name"]: f["level"] for f in probe["finalized_features"]} == custom["finalized"]
    assert {f["epoch"] for f in probe["finalized_features"]} == set(custom["epochs"])


KP_PINNED = r"""
import json, sys
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import UpdateFeaturesRequest
K = UpdateFeaturesRequest.FeatureUpdateKey
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=15000)
out = []
try:
    for ver, feature, level, allow_downgrade, utype, validate_only in json.loads(sys.argv[2]):
        req = UpdateFeaturesRequest(
            timeout_ms=15000, validate_only=validate_only, min_version=ver, max_version=ver,
            feature_updates=[K(feature=feature, max_version_level=level,
                               allow_downgrade=allow_downgrade, upgrade_type=utype)])
        r = a._manager.run(a._send_request_to_controller, req, lambda r: [], False)
        out.append({"version": r.version, "error_code": r.error_code, "error_message": r.error_message,
                    "results": [[x.feature, x.error_code] for x in (r.results or [])]})
    f = a.describe_features()
finally:
    a.close()
print(json.dumps({"responses": out,
                  "finalized": {n: i["finalized"][1] for n, i in f.items() if "finalized" in i}}))
"""


def test_kafka_python_update_features_v0_v1_kshim(kshim_features):
    """UpdateFeatures v0 and v1 as kafka-python's protocol classes encode them."""
    steps = [
        [0, "kshim.interop.version", 4, False, 1, False],  # v0 upgrade 3 -> 4
        [1, "kshim.interop.version", 5, False, 1, False],  # v1 UPGRADE 4 -> 5
        [1, "kshim.interop.version", 2, True, 2, True],    # v1 SAFE_DOWNGRADE, validate only
        [1, "kshim.interop.version", 3, True, 2, False],   # v1 SAFE_DOWNGRADE 5 -> 3
        [1, "kshim.interop.version", 4, False, 2, False],  # a higher level with a downgrade type
        [0, "group.version", 9, False, 1, False],          # v0 unsupported level
    ]
    out = json_out(run_python(KP_PINNED, kshim_features.bootstrap, json.dumps(steps)))
    r = out["responses"]
    for i in range(4):
        assert r[i]["version"] == steps[i][0]
        assert r[i]["error_code"] == 0, r[i]
        assert r[i]["results"] == [["kshim.interop.version", 0]], r[i]
    assert r[4]["error_code"] == 95, r[4]
    assert "Invalid update version 4 for feature kshim.interop.version" in r[4]["error_message"]
    assert r[5]["version"] == 0 and r[5]["error_code"] == 95, r[5]
    assert r[5]["error_message"].startswith(
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 9 for feature group.version.")
    assert out["finalized"] == dict(finalized_expected(), **{"kshim.interop.version": 3})


# --------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)

CK_META = r"""
import json, sys, confluent_kafka
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": sys.argv[1], "socket.timeout.ms": 10000})
md = a.list_topics(timeout=15)
out = {"libversion": confluent_kafka.libversion()[0],
       "brokers": sorted([b.id, b.host, b.port] for b in md.brokers.values()),
       "controller_id": md.controller_id, "cluster_id": md.cluster_id,
       "topics": sorted(md.topics)}
if sys.argv[2] == "describe-cluster":
    dc = a.describe_cluster(request_timeout=15).result()
    out["describe_cluster"] = {"cluster_id": dc.cluster_id, "controller": dc.controller.id,
                               "nodes": sorted([n.id, n.host, n.port] for n in dc.nodes)}
if len(sys.argv) > 3:
    t = a.list_topics(topic=sys.argv[3], timeout=15).topics[sys.argv[3]]
    out["topic_error"] = t.error.name() if t.error else None
print(json.dumps(out))
"""


def test_confluent_kafka_metadata_kshim(kshim_features):
    out = json_out(run_python(CK_META, kshim_features.bootstrap, "describe-cluster", "kshim-no-such-topic"))
    host, port = kafka_env.split_hostport(kshim_features.bootstrap)
    assert out["libversion"].startswith("2.")
    assert out["brokers"] == [[1, host, port]]
    assert out["controller_id"] == 1
    assert out["cluster_id"] == cluster_id_of(kshim_features)
    assert out["topics"] == []
    assert out["describe_cluster"] == {
        "cluster_id": cluster_id_of(kshim_features), "controller": 1, "nodes": [[1, host, port]]}
    assert out["topic_error"] == "UNKNOWN_TOPIC_OR_PART"


def test_confluent_kafka_metadata_broker_control(kafka_broker):
    out = json_out(run_python(CK_META, kafka_broker.bootstrap, "describe-cluster"))
    host, port = kafka_env.split_hostport(kafka_broker.bootstrap)
    assert [1, host, port] in out["brokers"]
    assert out["describe_cluster"]["controller"] == out["controller_id"]


# --------------------------------------------------------------------------------------------
# kcat (Debian)


@pytest.mark.parametrize("draft_tags", [True, False], ids=["draft-tags-on", "draft-tags-off"])
def test_kcat_list_kshim(kcat_bin, kshim_factory, draft_tags):
    proc = kshim_factory(features_config(), draft_tags=draft_tags)
    host, port = kafka_env.split_hostport(proc.bootstrap)
    res = run([kcat_bin, "-L", "-b", proc.bootstrap, "-m", "15"], timeout=30)
    assert res.returncode == 0, res.stderr
    assert " 1 brokers:" in res.stdout
    assert f"broker 1 at {host}:{port} (controller)" in res.stdout
    assert "Read underflow" not in res.stderr

    res = run([kcat_bin, "-L", "-J", "-b", proc.bootstrap, "-m", "15"], timeout=30)
    assert res.returncode == 0, res.stderr
    md = json.loads(res.stdout)
    assert md["controllerid"] == 1
    assert md["brokers"] == [{"id": 1, "name": f"{host}:{port}"}]
    assert md["originating_broker"]["id"] == 1
    assert md["topics"] == []


def test_kcat_list_broker_control(kcat_bin, kafka_broker):
    res = run([kcat_bin, "-L", "-J", "-b", kafka_broker.bootstrap, "-m", "15"], timeout=30)
    assert res.returncode == 0, res.stderr
    md = json.loads(res.stdout)
    assert md["controllerid"] == 1
    assert {"id": 1, "name": kafka_broker.bootstrap} in md["brokers"]


# --------------------------------------------------------------------------------------------
# franz-go


def test_franz_go_probe_kshim_draft_tags_on(go_probe, kshim_features):
    out = json_out(run([go_probe, "--bootstrap", kshim_features.bootstrap, "--topic", "kshim-nope"]))
    host, port = kafka_env.split_hostport(kshim_features.bootstrap)
    assert out["brokers"] == [{"node_id": 1, "host": host, "port": port}]
    assert out["controller"] == 1
    assert out["cluster_id"] == cluster_id_of(kshim_features)
    assert out["topics"] == [{"name": "kshim-nope",
                              "error": "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition."}]
    assert out["api_versions_version"] == 5  # franz-go asks v5 first, which kshim speaks (KIP-1242)
    assert {f["name"]: f["level"] for f in out["finalized_features"]} == finalized_expected()
    wire = kafka_env.api_versions(kshim_features.bootstrap)
    assert {f["epoch"] for f in out["finalized_features"]} == {wire.finalized_epoch}
    assert out["finalized_epoch"] == wire.finalized_epoch
    assert {f["name"]: (f["min_version"], f["max_version"]) for f in out["supported_features"]} == SUPPORTED
    # kmsg knows tags 0-3 only; the draft layout shows up as its unknown tags.
    assert out["unknown_tags"] == DRAFT_TAGS


def test_franz_go_probe_kshim_draft_tags_off(go_probe, kshim_factory):
    proc = kshim_factory(features_config(), draft_tags=False)
    out = json_out(run([go_probe, "--bootstrap", proc.bootstrap]))
    assert {f["name"]: f["level"] for f in out["finalized_features"]} == finalized_expected()
    assert out["unknown_tags"] == []


def test_franz_go_probe_default_kshim(go_probe, kshim):
    out = json_out(run([go_probe, "--bootstrap", kshim.bootstrap]))
    wire = kafka_env.api_versions(kshim.bootstrap)
    assert {f["name"]: f["level"] for f in out["finalized_features"]} == {
        n: hi for n, (lo, hi) in wire.finalized.items()}
    assert out["unknown_tags"] == DRAFT_TAGS
    assert out["controller"] == 1 and [b["node_id"] for b in out["brokers"]] == [1]


def test_franz_go_probe_broker_control(go_probe, kafka_broker):
    out = json_out(run([go_probe, "--bootstrap", kafka_broker.bootstrap]))
    wire = kafka_env.api_versions(kafka_broker.bootstrap)
    assert {f["name"]: f["level"] for f in out["finalized_features"]} == {
        n: hi for n, (lo, hi) in wire.finalized.items()}
    assert out["unknown_tags"] == []
    assert out["api_versions_version"] == 4


def test_franz_go_probe_fails_without_server(go_probe):
    port = kafka_env.free_port()
    res = run([go_probe, "--bootstrap", f"127.0.0.1:{port}", "--timeout", "3s"], timeout=30)
    assert res.returncode != 0
    assert "kshim-go-probe:" in res.stderr


# --------------------------------------------------------------------------------------------
# captured client frames replayed against kshim


def manifest() -> list[dict]:
    return json.loads((FIXTURES / "manifest.json").read_text())


def apiversions_request_fixtures() -> list[dict]:
    return [e for e in manifest() if e["direction"] == "request" and e["api_key"] == 18]


@pytest.mark.parametrize("entry", apiversions_request_fixtures(), ids=lambda e: e["file"])
def test_replay_client_apiversions_request(kshim_features, entry):
    frame = (FIXTURES / entry["file"]).read_bytes()
    resp = roundtrip(kshim_features.bootstrap, frame)
    (corr, err) = struct.unpack_from(">ih", resp, 0)
    assert corr == entry["correlation_id"]
    # v5 requests (Java 4.4, franz-go) are answered as Kafka 4.4 answers them: they
    # name no node (ClusterId null, NodeId -1), so in full.
    assert err == 0
    if entry["api_version"] >= 3:
        n, pos = read_uvarint(resp, 6)
        keys = {}
        for _ in range(n - 1):
            k, lo, hi = struct.unpack_from(">hhh", resp, pos)
            _, pos = read_uvarint(resp, pos + 6)  # element tag count (0)
            keys[k] = (lo, hi)
    else:
        (n,) = struct.unpack_from(">i", resp, 6)
        keys = {k: (lo, hi) for k, lo, hi in (struct.unpack_from(">hhh", resp, 10 + 6 * i) for i in range(n))}
    assert keys[18] == (0, 5)
    assert keys[57] == (0, 2)
    assert keys[3][1] >= 12
    assert keys[60][0] == 0


def test_replay_java_update_features_invalid_level(kshim_features):
    e = next(x for x in manifest() if x["file"] == "updatefeatures-v2-req-java-4.1.1-invalid-level.bin")
    resp = roundtrip(kshim_features.bootstrap, (FIXTURES / e["file"]).read_bytes())
    corr, = struct.unpack_from(">i", resp, 0)
    assert corr == e["correlation_id"]
    _, pos = read_uvarint(resp, 4)  # response header v1 tagged fields
    throttle, err = struct.unpack_from(">ih", resp, pos)
    ln, pos = read_uvarint(resp, pos + 6)
    message = resp[pos:pos + ln - 1].decode()
    assert err == 95
    assert message.startswith("The update failed for all features since the following feature had an "
                              "error: Invalid update version 9 for feature group.version.")
    after = kafka_env.api_versions(kshim_features.bootstrap)
    assert after.finalized["group.version"] == (1, 1)


# --------------------------------------------------------------------------------------------
# the recording proxy, in front of kshim


def test_capture_proxy_records_kafka_python_handshake(kshim_features, tmp_path):
    out_dir = tmp_path / "frames"
    proxy = subprocess.Popen(
        [sys.executable, str(CAPTURE_PROXY), "--listen", "127.0.0.1:0",
         "--target", kshim_features.bootstrap, "--out", str(out_dir), "--seconds", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        line = proxy.stdout.readline()
        assert line.startswith("LISTENING "), line
        addr = line.split()[1]
        kp_describe(addr)
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=10)
    index = [json.loads(l) for l in (out_dir / "frames.jsonl").read_text().splitlines()]
    reqs = [e for e in index if e["direction"] == "request" and e["api_key"] == 18]
    assert reqs, index
    first = reqs[0]
    assert first["file"] == "req-018-v%d-%04d.bin" % (first["api_version"], first["seq"])
    frame = (out_dir / first["file"]).read_bytes()
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert client_software(frame) == ("kafka-python", "3.0.12")
    resp = [e for e in index if e["direction"] == "response" and e["seq"] == first["seq"]]
    assert len(resp) == 1 and resp[0]["header_version"] == 0
    assert resp[0]["file"] == "resp-018-v%d-%04d.bin" % (first["api_version"], first["seq"])
    rframe = (out_dir / resp[0]["file"]).read_bytes()
    assert struct.unpack_from(">i", rframe, 4)[0] == first["correlation_id"]


def test_fixture_client_software_names():
    """The ClientSoftwareName/Version each client sent, as captured in protocol-fixtures/."""
    got = {e["file"]: client_software((FIXTURES / e["file"]).read_bytes())
           for e in apiversions_request_fixtures() if e["api_version"] >= 3}
    assert got == {
        "apiversions-v4-req-java-4.1.1.bin": ("apache-kafka-java", "4.1.1"),
        "apiversions-v5-req-java-4.4.0.bin": ("apache-kafka-java", "4.4.0"),
        "apiversions-v4-req-java-4.4.0-retry.bin": ("apache-kafka-java", "4.4.0"),
        "apiversions-v4-req-kafka-python-3.0.12.bin": ("kafka-python", "3.0.12"),
        "apiversions-v4-req-kafka-python-3.0.12-describe-features.bin": ("kafka-python", "3.0.12"),
        "apiversions-v3-req-confluent-kafka-2.16.1.bin": ("confluent-kafka-python", "2.16.1-rdkafka-2.16.0"),
        "apiversions-v3-req-kcat-1.7.1-librdkafka-2.0.2.bin": ("librdkafka", "2.0.2"),
        "apiversions-v5-req-franz-go-1.22.3.bin": ("kgo", "v1.22.3"),
        "apiversions-v4-req-franz-go-1.22.3-retry.bin": ("kgo", "v1.22.3"),
    }


# --------------------------------------------------------------------------------------------
# librdkafka and unknown tagged fields: a fake one-node server


class FakeApiVersionsServer:
    """Answers ApiVersions (v0-3 advertised) and Metadata (v0-4) only, with chosen tags."""

    def __init__(self, tags: list[tuple[int, bytes]]):
        self.tags = tags
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=5)
        self.sock.close()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _apiversions(self, version: int) -> bytes:
        keys = [(18, 0, 3), (3, 0, 4)]
        body = struct.pack(">h", 0)
        if version >= 3:
            body += uvarint(len(keys) + 1) + b"".join(struct.pack(">hhh", *k) + b"\x00" for k in keys)
        else:
            body += struct.pack(">i", len(keys)) + b"".join(struct.pack(">hhh", *k) for k in keys)
        if version >= 1:
            body += struct.pack(">i", 0)
        if version >= 3:
            body += uvarint(len(self.tags)) + b"".join(
                uvarint(t) + uvarint(len(d)) + d for t, d in self.tags)
        return body

    def _metadata(self, version: int) -> bytes:
        host = b"127.0.0.1"
        body = struct.pack(">i", 0) if version >= 3 else b""
        body += struct.pack(">ii", 1, 1) + struct.pack(">h", len(host)) + host + struct.pack(">i", self.port)
        if version >= 1:
            body += struct.pack(">h", -1)
        if version >= 2:
            body += struct.pack(">h", 4) + b"fake"
        if version >= 1:
            body += struct.pack(">i", 1)
        return body + struct.pack(">i", 0)

    def _serve(self):
        while not self.stop_event.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        conn.settimeout(5)
        try:
            while not self.stop_event.is_set():
                (size,) = struct.unpack(">i", recv_exact(conn, 4))
                req = recv_exact(conn, size)
                key, ver, corr = struct.unpack_from(">hhi", req)
                if key == 18:
                    body = self._apiversions(ver)
                elif key == 3:
                    body = self._metadata(ver)
                else:
                    return
                resp = struct.pack(">i", corr) + body
                conn.sendall(struct.pack(">i", len(resp)) + resp)
        except (OSError, AssertionError):
            pass
        finally:
            conn.close()


def feature_tags(epoch: int, draft: bool) -> list[tuple[int, bytes]]:
    """Tags 0-2 as Kafka 4.1 encodes them; with `draft`, also 10000-10002 in the draft layout."""
    supported = uvarint(2) + compact_str("group.version") + struct.pack(">hh", 1, 1) + b"\x00"
    finalized = uvarint(2) + compact_str("group.version") + struct.pack(">hh", 1, 1) + b"\x00"
    tags = [(0, supported), (1, struct.pack(">q", epoch)), (2, finalized)]
    if draft:
        d_supported = uvarint(2) + compact_str("group.version") + struct.pack(">qq", 1, 1) + b"\x00"
        d_finalized = uvarint(2) + compact_str("group.version") + struct.pack(">qq", 1, 1) + b"\x00"
        tags += [(10000, d_supported), (10001, struct.pack(">q", epoch)), (10002, d_finalized)]
    return tags


def kcat_list(kcat_bin: str, bootstrap: str) -> subprocess.CompletedProcess:
    return run([kcat_bin, "-L", "-b", bootstrap, "-m", "4"], timeout=30)


def test_kcat_skips_one_large_unknown_tag(kcat_bin):
    """A single 300-byte tag 10000 after tags 0-2 does not disturb kcat."""
    with FakeApiVersionsServer(feature_tags(7, draft=False) + [(10000, b"\xab" * 300)]) as srv:
        res = kcat_list(kcat_bin, srv.bootstrap)
    assert res.returncode == 0, res.stderr
    assert f"broker 1 at {srv.bootstrap} (controller)" in res.stdout


@pytest.mark.parametrize("epoch", [7, 255, 25600])
def test_kcat_draft_layout_small_epochs(kcat_bin, epoch):
    with FakeApiVersionsServer(feature_tags(epoch, draft=True)) as srv:
        res = kcat_list(kcat_bin, srv.bootstrap)
    assert res.returncode == 0, res.stderr
    assert f"broker 1 at {srv.bootstrap} (controller)" in res.stdout


@pytest.mark.parametrize("epoch", [32512, 40000])
def test_kcat_draft_layout_epoch_misparse(kcat_bin, kcat_librdkafka, epoch):
    """librdkafka 2.0.x skips len-1 bytes per unknown tag. With six tags (0-2 and 10000-10002)
    the misaligned walk reaches the FinalizedFeaturesEpoch bytes, and an epoch whose second
    lowest byte is large makes it read a length past the end: ApiVersions fails with
    "Read underflow" and `kcat -L` fails. With tags 0-2 alone the same epoch is harmless."""
    with FakeApiVersionsServer(feature_tags(epoch, draft=False)) as srv:
        res = kcat_list(kcat_bin, srv.bootstrap)
    assert res.returncode == 0, res.stderr
    with FakeApiVersionsServer(feature_tags(epoch, draft=True)) as srv:
        res = kcat_list(kcat_bin, srv.bootstrap)
    if kcat_librdkafka[:2] == (2, 0):
        assert res.returncode != 0
        assert "Read underflow" in res.stderr
    else:
        assert res.returncode == 0, res.stderr


def test_confluent_kafka_draft_layout_epoch_ok():
    """librdkafka 2.16 (confluent-kafka) parses the same six-tag layout that trips 2.0.2."""
    with FakeApiVersionsServer(feature_tags(40000, draft=True)) as srv:
        out = json_out(run_python(CK_META, srv.bootstrap, "metadata-only"))
    assert out["brokers"] == [[1, "127.0.0.1", srv.port]]
