"""kshim's create-topic policy and feature-gated config validators, in front of real Apache Kafka 4.1.1.

kshim (proxy mode) checks CreateTopics against `[policy.create_topic]` and checks topic and
broker config values against `[[policy.validators]]`, a validator being in force once its
feature's finalized level reaches the validator's level (for one key, the highest registered
level not above the current one wins). What is tested here:

  (a) a Java Admin batch CreateTopics through kshim: every topic that breaks a policy rule fails
      with PolicyViolationException naming the rule, a topic that breaks a validator fails with
      InvalidConfigurationException naming the validator, its feature and its level, and the
      valid topics in the same request are created (listed through kshim and on the broker
      itself), the refused ones never reach the broker; what the broker itself refuses in the
      same request comes back as the broker says it. The refused topics are accepted by the
      broker itself (validateOnly, straight to it), so the refusals are kshim's. validateOnly
      through kshim creates nothing; a batch kshim refuses whole is answered too.
  (b) IncrementalAlterConfigs (Java Admin) and the legacy AlterConfigs (v0 and v2; the Java
      Admin no longer has alterConfigs in 4.x, so it is sent over a socket; and librdkafka's
      alter_configs), for topic, broker and cluster-default broker resources: a refused
      resource gets kshim's error and message and is left alone on the broker, the other
      resources of the same request are applied.
  (c) kafka-topics.sh --create and kafka-configs.sh --alter, refused with kshim's message.
  (d) the audit: raising metadata.version through kshim (kafka-features.sh upgrade, also with
      --dry-run, and the Admin API) is refused while a topic or a broker (static config) holds a
      value the validators of the target level reject, the refusal naming every violator (also
      a topic made straight on the broker); once they are fixed the upgrade goes through, and
      the new level's validator is then in force. Lowering the level is audited the same way,
      and a level changed straight on the broker is followed.
  (e) `kshim config check` over server.properties files.
  (f) a malformed [policy] makes `kshim serve` exit at startup, naming every error.

Every check of what the broker holds asks the broker directly, not kshim.

Kafka 4.1 refuses segment.bytes / log.segment.bytes below 1 MiB, so the sizes are scaled: the
level-26 validator requires at least 3 MiB; 1 MiB (topic) and 2 MiB (broker) break it.

Run: .venv/bin/python -m pytest tests/interop/test_proxy_policy.py -p no:cacheprovider -ra
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import kafka_env as ke

POLICY_ADMIN_SRC = ke.INTEROP_DIR / "java" / "PolicyAdmin.java"
TOOL_TIMEOUT_S = 90

# Kafka error codes
NONE = 0
INVALID_CONFIG = 40
POLICY_VIOLATION = 44
# AlterConfigs resource types
TOPIC, BROKER = 2, 4

MIN_SEGMENT = 3145728  # what the level-26 validator requires
BAD_TOPIC_SEGMENT = "1048576"
BAD_BROKER_SEGMENT = "2097152"
GOOD_SEGMENT = "4194304"
RETENTION = "86400000"  # inside the policy's retention.ms range

CREATE_TOPIC_POLICY = r"""
[policy.create_topic]
min_partitions = 1
max_partitions = 10
min_replication_factor = 1
max_replication_factor = 1
allow_replica_assignment = false
allowed_names = ["[a-z][a-z0-9._-]*"]
denied_names = ["tmp\\..*"]
required_configs = ["retention.ms"]
forbidden_configs = ["unclean.leader.election.enable"]

[policy.create_topic.configs."retention.ms"]
min = 3600000
max = 604800000

[policy.create_topic.configs."cleanup.policy"]
allowed = ["delete", "compact"]
"""

SEGMENT_VALIDATOR_26 = """
[[policy.validators]]
key = "log.segment.bytes"
feature = "metadata.version"
level = 26
min = 3145728
"""

# For the cluster of (a)-(c), which stays at metadata.version 25: a looser segment rule from
# level 20 (in force), the level-26 rule (not in force yet) and a pattern rule from level 1.
POLICY_AT_25 = CREATE_TOPIC_POLICY + """
[[policy.validators]]
key = "log.segment.bytes"
feature = "metadata.version"
level = 20
min = 1572864
""" + SEGMENT_VALIDATOR_26 + """
[[policy.validators]]
key = "compression.type"
feature = "metadata.version"
level = 1
pattern = "producer|zstd|lz4"
"""

# For the audit of (d): the level-26 rule of the scenario, and a looser one from level 27, so
# that lowering 27 -> 26 has something to audit.
POLICY_AUDIT = CREATE_TOPIC_POLICY + SEGMENT_VALIDATOR_26 + """
[[policy.validators]]
key = "log.segment.bytes"
feature = "metadata.version"
level = 27
min = 1048576
"""


# --------------------------------------------------------------------------------------------
# helpers


def uid() -> str:
    return uuid.uuid4().hex[:6]


def policy_admin(*steps, timeout: float = TOOL_TIMEOUT_S) -> list[dict]:
    """Run PolicyAdmin with the given steps (each a list: command, bootstrap, args...) in one
    JVM; returns its JSON lines. Anything but a complete run fails the test."""
    classes = ke.require_or_fail(ke.compile_java, POLICY_ADMIN_SRC)
    args: list[str] = []
    for i, step in enumerate(steps):
        if i:
            args.append("--")
        args += [str(a) for a in step]
    try:
        res = ke.run_java(
            ["PolicyAdmin", "--timeout-ms", str(int((timeout - 10) * 1000)), *args],
            extra_classpath=[classes],
            timeout=timeout,
            log_config=ke.CLIENTS_LOG4J,
        )
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    lines = res.json_lines()
    fatal = [line for line in lines if "fatal" in line]
    assert res.rc == 0 and not fatal, (
        f"PolicyAdmin failed rc={res.rc} {fatal}\nargs: {args}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr[-4000:]}"
    )
    return lines


def by_step(lines: list[dict], step: int, key: str) -> dict[str, dict]:
    return {line[key]: line for line in lines if line["step"] == step}


def assert_ok(line: dict) -> None:
    assert line["ok"] is True, f"expected success: {line}"


def has_level(message: str, level: int) -> bool:
    return re.search(rf"(?<![0-9]){level}(?![0-9])", message) is not None


def assert_policy_refusal(line: dict, rule: str) -> None:
    assert line["ok"] is False, f"expected a create-topic policy refusal ({rule}): {line}"
    assert line["error"] == "PolicyViolationException", line
    assert "create-topic policy" in line["message"], line
    assert rule in line["message"], f"the message does not name the rule {rule!r}: {line}"


def assert_validator_refusal(line: dict, key: str, feature: str, level: int) -> None:
    assert line["ok"] is False, f"expected a validator refusal ({key}): {line}"
    assert line["error"] == "InvalidConfigurationException", line
    msg = line["message"]
    assert "validator" in msg and key in msg and feature in msg, line
    assert has_level(msg, level), f"the message does not name level {level}: {line}"


def describe_direct(broker: ke.KafkaCluster, resources: list[str], until=None, timeout: float = 15.0) -> dict[str, dict]:
    """DescribeConfigs straight to the broker; with `until`, repeated (the broker applies a
    committed change a moment after the controller answers) until until(result) holds."""
    deadline = time.monotonic() + timeout
    while True:
        lines = policy_admin(["describe-configs", broker.bootstrap, *resources])
        out = {line["resource"]: line for line in lines}
        for r in resources:
            assert out[r]["ok"] is True, out[r]
        if until is None or until(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def dynamic(described: dict[str, dict], resource: str) -> dict[str, str]:
    """The resource's own dynamic configs (per-topic, or per-broker for broker:ID)."""
    source = "DYNAMIC_TOPIC_CONFIG" if resource.startswith("topic:") else "DYNAMIC_BROKER_CONFIG"
    return {k: v["value"] for k, v in described[resource]["configs"].items() if v["source"] == source}


def effective(described: dict[str, dict], resource: str, key: str) -> str | None:
    entry = described[resource]["configs"].get(key)
    return None if entry is None else entry["value"]


def topics_direct(broker: ke.KafkaCluster, want: set[str], timeout: float = 15.0) -> set[str]:
    """The broker's own topic list, once it shows every topic of `want` (or the timeout)."""
    return topics_at(broker.bootstrap, want, timeout)


def topics_at(bootstrap: str, want: set[str], timeout: float = 15.0) -> set[str]:
    """ListTopics at `bootstrap`, repeated until it shows every topic of `want` (a new topic
    reaches the broker's metadata a moment after the controller has answered)."""
    deadline = time.monotonic() + timeout
    while True:
        names = set(policy_admin(["topics", bootstrap])[0]["topics"])
        if want <= names or time.monotonic() > deadline:
            return names
        time.sleep(0.5)


def finalized_direct(broker: ke.KafkaCluster) -> dict[str, int]:
    return policy_admin(["features", broker.bootstrap])[0]["finalized"]


def feature_command(bootstrap: str, *args: str) -> tuple[int, str]:
    try:
        rc, out, err = ke.run_feature_command(bootstrap, *args)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    return rc, out + err


def tool(*args: str, timeout: float = TOOL_TIMEOUT_S) -> ke.JavaResult:
    try:
        return ke.run_java([str(a) for a in args], timeout=timeout)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)


# ---- the legacy AlterConfigs request (API key 33), which the Java Admin of 4.x cannot send


_uvarint_bytes = ke.encode_uvarint


def _string(s: str, compact: bool) -> bytes:
    b = s.encode()
    return (_uvarint_bytes(len(b) + 1) if compact else struct.pack(">h", len(b))) + b


def _nullable_string(s: str | None, compact: bool) -> bytes:
    if s is None:
        return b"\x00" if compact else struct.pack(">h", -1)
    return _string(s, compact)


def _read_nullable_string(buf: bytes, pos: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        n, pos = ke._uvarint(buf, pos)
        n -= 1
    else:
        (n,) = struct.unpack_from(">h", buf, pos)
        pos += 2
    if n < 0:
        return None, pos
    return buf[pos : pos + n].decode(), pos + n


def alter_configs_raw(
    bootstrap: str,
    resources: list[tuple[int, str, dict[str, str]]],
    *,
    version: int,
    validate_only: bool = False,
    timeout: float = 15.0,
) -> dict[tuple[int, str], tuple[int, str | None]]:
    """Send one AlterConfigs request (v0/v1 classic, v2 flexible) and decode the answer:
    {(resource_type, name): (error_code, error_message)}. Each resource's configs replace all of
    its dynamic configs (that is what AlterConfigs does)."""
    compact = version >= 2
    correlation = 0x5EED
    client = b"kshim-policy-raw"
    header = struct.pack(">hhih", 33, version, correlation, len(client)) + client
    if compact:
        header += b"\x00"  # header tagged fields
        body = _uvarint_bytes(len(resources) + 1)
    else:
        body = struct.pack(">i", len(resources))
    for rtype, name, configs in resources:
        body += struct.pack(">b", rtype) + _string(name, compact)
        body += _uvarint_bytes(len(configs) + 1) if compact else struct.pack(">i", len(configs))
        for key, value in configs.items():
            body += _string(key, compact) + _nullable_string(value, compact)
            if compact:
                body += b"\x00"
        if compact:
            body += b"\x00"
    body += struct.pack(">?", validate_only) + (b"\x00" if compact else b"")
    frame = header + body
    host, port = ke.split_hostport(bootstrap)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", ke._recv_exact(sock, 4))
            resp = ke._recv_exact(sock, size)
    except (OSError, ke.EnvError) as e:
        pytest.fail(f"AlterConfigs v{version} to {bootstrap}: {e!r}", pytrace=False)
    (got,) = struct.unpack_from(">i", resp, 0)
    assert got == correlation, f"AlterConfigs v{version}: correlation id {got}, sent {correlation}"
    pos = 4
    if compact:
        pos = ke._skip_tags(resp, pos)  # response header v1
    pos += 4  # throttle_time_ms
    if compact:
        n, pos = ke._uvarint(resp, pos)
        n -= 1
    else:
        (n,) = struct.unpack_from(">i", resp, pos)
        pos += 4
    out = {}
    for _ in range(n):
        (code,) = struct.unpack_from(">h", resp, pos)
        pos += 2
        message, pos = _read_nullable_string(resp, pos, compact)
        rtype = resp[pos]
        pos += 1
        name, pos = _read_nullable_string(resp, pos, compact)
        if compact:
            pos = ke._skip_tags(resp, pos)
        out[(rtype, name)] = (code, message)
    assert len(out) == len(resources), f"AlterConfigs v{version}: {len(out)} results for {len(resources)} resources: {out}"
    return out


# --------------------------------------------------------------------------------------------
# fixtures


def start_kshim(binary: Path, broker: ke.KafkaCluster, policy: str) -> ke.KshimProcess:
    proc = ke.KshimProcess(policy, binary=binary, upstream=broker.bootstrap, refresh_interval_ms=500)
    return ke.start_or_fail(proc)


def report_kshim_log(request, proc: ke.KshimProcess) -> None:
    failed = any(getattr(item, "rep_call", None) is not None and item.rep_call.failed
                 for item in request.session.items if item.module is request.module)
    if failed:
        sys.stderr.write(f"\n--- {proc.log_path} (last lines)\n{ke.tail(proc.log_path, 60)}\n")


@pytest.fixture(scope="module")
def broker(kafka_clusters):
    """One Kafka 4.1.1 node at metadata.version 25 (4.0-IV3), for (a)-(c)."""
    c = kafka_clusters.start(1, format_args=["--release-version", "4.0-IV3"])
    yield c
    c.cleanup()


@pytest.fixture(scope="module")
def proxy(kshim_binary, broker, request):
    proc = start_kshim(kshim_binary, broker, POLICY_AT_25)
    yield proc
    report_kshim_log(request, proc)
    proc.cleanup()


def test_the_cluster_is_where_the_tests_expect_it(broker, proxy):
    """metadata.version 25 on the broker, and kshim shows the same: the level-20 and level-1
    validators are in force, the level-26 one is not."""
    assert finalized_direct(broker)["metadata.version"] == 25
    assert policy_admin(["features", proxy.bootstrap])[0]["finalized"]["metadata.version"] == 25


# --------------------------------------------------------------------------------------------
# (a) CreateTopics


def test_batch_create_through_kshim(broker, proxy):
    u = uid()
    ret = f"retention.ms={RETENTION}"
    valid = {
        f"ok-a-{u}": f"ok-a-{u}:3:1:{ret}",
        # the bounds of the retention.ms range and of the partition count are allowed
        f"ok-b-{u}": f"ok-b-{u}:1:1:retention.ms=3600000,cleanup.policy=compact,delete",
        f"ok-c-{u}": f"ok-c-{u}:2:1:retention.ms=604800000,segment.bytes=2097152,compression.type=zstd",
        f"ok-d-{u}.x_y": f"ok-d-{u}.x_y:10:1:{ret}",
        # the broker's defaults for partitions and replication factor (1 and 1 here)
        f"ok-e-{u}": f"ok-e-{u}:-1:-1:{ret}",
        # the name patterns match whole names: this one contains, but is not, a denied name
        f"xtmp.{u}": f"xtmp.{u}:1:1:{ret}",
    }
    policy_refused = {
        f"big-{u}": (f"big-{u}:11:1:{ret}", "max_partitions"),
        f"tmp.{u}": (f"tmp.{u}:1:1:{ret}", "denied_names"),
        f"Caps-{u}": (f"Caps-{u}:1:1:{ret}", "allowed_names"),
        f"tail-X{u}": (f"tail-X{u}:1:1:{ret}", "allowed_names"),  # only a prefix matches
        f"forb-{u}": (f"forb-{u}:1:1:{ret},unclean.leader.election.enable=false", "forbidden_configs"),
        f"ret-lo-{u}": (f"ret-lo-{u}:1:1:retention.ms=3599999", "configs.retention.ms"),
        f"ret-hi-{u}": (f"ret-hi-{u}:1:1:retention.ms=604800001", "configs.retention.ms"),
        f"noret-{u}": (f"noret-{u}:1:1:segment.bytes=2097152", "required_configs"),
        f"cp-{u}": (f"cp-{u}:1:1:{ret},cleanup.policy=compact,bogus", "configs.cleanup.policy"),
        f"rf-{u}": (f"rf-{u}:1:2:{ret}", "max_replication_factor"),
        f"asg-{u}": (f"asg-{u}:assign=1|1:-1:{ret}", "allow_replica_assignment"),
    }
    validator_refused = {
        # level 20 is in force at 25: at least 1572864
        f"seg-{u}": (f"seg-{u}:1:1:{ret},segment.bytes={BAD_TOPIC_SEGMENT}", "segment.bytes", 20),
        f"comp-{u}": (f"comp-{u}:1:1:{ret},compression.type=gzip", "compression.type", 1),
        # a pattern matches the whole value (Kafka would refuse zstdx as well; kshim answers first)
        f"compx-{u}": (f"compx-{u}:1:1:{ret},compression.type=zstdx", "compression.type", 1),
    }
    # Topics kshim lets through but the broker refuses: its errors come back unchanged.
    existing = f"exists-{u}"
    broker_refused = {
        existing: (f"{existing}:1:1:{ret}", "TopicExistsException", f"Topic '{existing}' already exists."),
        f"mmb-{u}": (f"mmb-{u}:1:1:{ret},max.message.bytes=-5", "InvalidConfigurationException",
                     "Invalid value -5 for configuration max.message.bytes"),
    }
    assert_ok(policy_admin(["create", broker.bootstrap, f"{existing}:1:1:{ret}"])[0])
    refused = set(policy_refused) | set(validator_refused)
    specs = [*valid.values(), *(s for s, _ in policy_refused.values()), *(s for s, _, _ in validator_refused.values()),
             *(s for s, _, _ in broker_refused.values())]
    # The refusals are kshim's: the broker itself accepts every one of these (validateOnly).
    kafka_accepts = [s for name, (s, rule) in policy_refused.items() if rule not in ("max_replication_factor", "configs.cleanup.policy")]
    kafka_accepts += [s for name, (s, _, _) in validator_refused.items() if not name.startswith("compx-")]

    lines = policy_admin(
        ["create", broker.bootstrap, "--validate-only", *kafka_accepts],
        ["create", broker.bootstrap, "--validate-only", *(s for s, _, _ in broker_refused.values())],
        ["create", proxy.bootstrap, *specs],
    )
    for name, line in by_step(lines, 0, "topic").items():
        assert line["ok"] is True, f"the broker itself refuses {name}, so the test proves nothing: {line}"
    for name, line in by_step(lines, 1, "topic").items():
        _, error, text = broker_refused[name]
        assert line["ok"] is False and line["error"] == error and text in line["message"], line
    created = by_step(lines, 2, "topic")
    assert set(created) == set(valid) | refused | set(broker_refused)
    for name, (_, error, text) in broker_refused.items():
        line = created[name]
        assert line["ok"] is False and line["error"] == error and text in line["message"], line
    for name in valid:
        assert_ok(created[name])
    for name, (_, rule) in policy_refused.items():
        assert_policy_refusal(created[name], rule)
    for name, (_, key, level) in validator_refused.items():
        assert_validator_refusal(created[name], key, "metadata.version", level)

    via_kshim = topics_at(proxy.bootstrap, set(valid))
    assert set(valid) <= via_kshim, f"valid topics missing through kshim: {set(valid) - via_kshim}"
    on_broker = topics_direct(broker, set(valid))
    assert set(valid) <= on_broker, f"valid topics missing on the broker: {set(valid) - on_broker}"
    assert not refused & on_broker, f"refused topics reached the broker: {refused & on_broker}"
    assert not refused & via_kshim
    # Each refusal is logged at info with who asked, from where, with what client software.
    log = [line for line in proxy.log_path.read_text().splitlines() if "CreateTopics refused" in line]
    for name in refused:
        lines = [line for line in log if f"topic={name}" in line or f'topic="{name}"' in line]
        assert lines, f"no log line for the refusal of {name}: {log[-5:]}"
        assert all(" INFO " in line and "principal=User:ANONYMOUS" in line and "peer=127.0.0.1:" in line
                   and "software=" in line for line in lines), lines

    d = describe_direct(broker, [f"topic:ok-b-{u}", f"topic:ok-c-{u}"])
    assert dynamic(d, f"topic:ok-b-{u}") == {"retention.ms": "3600000", "cleanup.policy": "compact,delete"}
    assert dynamic(d, f"topic:ok-c-{u}") == {
        "retention.ms": "604800000", "segment.bytes": "2097152", "compression.type": "zstd"}


def test_create_validate_only_creates_nothing(broker, proxy):
    u = uid()
    good, bad, seg = f"vo-ok-{u}", f"tmp.vo-{u}", f"vo-seg-{u}"
    lines = policy_admin(
        ["create", proxy.bootstrap, "--validate-only", f"{good}:2:1:retention.ms={RETENTION}",
         f"{bad}:1:1:retention.ms={RETENTION}", f"{seg}:1:1:retention.ms={RETENTION},segment.bytes={BAD_TOPIC_SEGMENT}"],
    )
    out = by_step(lines, 0, "topic")
    assert_ok(out[good])
    assert_policy_refusal(out[bad], "denied_names")
    assert_validator_refusal(out[seg], "segment.bytes", "metadata.version", 20)
    # A batch in which kshim refuses every topic (nothing left to send on), then a real creation
    # that makes sure the broker's list is current when it is read.
    all_bad = [f"tmp.all-{u}", f"all-big-{u}"]
    marker = f"vo-marker-{u}"
    lines = policy_admin(
        ["create", proxy.bootstrap, f"{all_bad[0]}:1:1:retention.ms={RETENTION}", f"{all_bad[1]}:12:1:retention.ms={RETENTION}"],
        ["create", proxy.bootstrap, f"{marker}:1:1:retention.ms={RETENTION}"],
    )
    out = by_step(lines, 0, "topic")
    assert_policy_refusal(out[all_bad[0]], "denied_names")
    assert_policy_refusal(out[all_bad[1]], "max_partitions")
    assert_ok(lines[-1])
    on_broker = topics_direct(broker, {marker})
    assert marker in on_broker
    assert not {good, bad, seg, *all_bad} & on_broker, on_broker


# --------------------------------------------------------------------------------------------
# (b) AlterConfigs and IncrementalAlterConfigs


@pytest.fixture
def alter_topics(broker):
    """Five topics made straight on the broker, each with retention.ms set."""
    u = uid()
    names = [f"alt{i}-{u}" for i in range(1, 6)]
    lines = policy_admin(["create", broker.bootstrap, *(f"{n}:1:1:retention.ms={RETENTION}" for n in names)])
    assert all(line["ok"] for line in lines), lines
    topics_direct(broker, set(names))
    return names


def test_incremental_alter_configs_through_kshim(broker, proxy, alter_topics):
    t1, t2, t3, t4, t5 = alter_topics
    T = lambda n: f"topic:{n}"  # noqa: E731
    lines = policy_admin(
        ["incremental", proxy.bootstrap,
         f"{T(t1)}:SET:segment.bytes={BAD_TOPIC_SEGMENT}",
         f"{T(t2)}:SET:retention.ms=7200000;SET:segment.bytes=2097152",
         f"broker:1:SET:log.segment.bytes={BAD_TOPIC_SEGMENT}"],
        ["incremental", proxy.bootstrap,
         f"{T(t1)}:SET:retention.ms=1000",
         f"{T(t2)}:SET:unclean.leader.election.enable=true",
         f"{T(t3)}:DELETE:retention.ms",
         f"{T(t4)}:APPEND:cleanup.policy=bogus",
         f"{T(t5)}:APPEND:cleanup.policy=compact",
         "broker:1:SET:log.segment.bytes=2097152"],
        ["incremental", proxy.bootstrap, "--validate-only",
         f"{T(t2)}:SET:retention.ms=10800000",
         f"{T(t1)}:SET:compression.type=gzip"],
        # the cluster-wide broker default (BROKER resource "") is a broker resource too
        ["incremental", proxy.bootstrap, f"broker::SET:log.segment.bytes={BAD_TOPIC_SEGMENT}"],
    )
    first = by_step(lines, 0, "resource")
    assert_validator_refusal(first[T(t1)], "segment.bytes", "metadata.version", 20)
    assert_ok(first[T(t2)])
    assert_validator_refusal(first["broker:1"], "log.segment.bytes", "metadata.version", 20)

    second = by_step(lines, 1, "resource")
    assert_policy_refusal(second[T(t1)], "configs.retention.ms")
    assert_policy_refusal(second[T(t2)], "forbidden_configs")
    assert_policy_refusal(second[T(t3)], "required_configs")
    assert_policy_refusal(second[T(t4)], "configs.cleanup.policy")
    assert_ok(second[T(t5)])
    assert_ok(second["broker:1"])  # 2 MiB: the level-20 rule is in force, not the level-26 one

    third = by_step(lines, 2, "resource")
    assert_ok(third[T(t2)])
    assert_validator_refusal(third[T(t1)], "compression.type", "metadata.version", 1)
    assert_validator_refusal(by_step(lines, 3, "resource")["broker:"], "log.segment.bytes", "metadata.version", 20)

    resources = [T(t) for t in alter_topics] + ["broker:1", "broker:"]
    d = describe_direct(
        broker, resources,
        until=lambda d: dynamic(d, "broker:1").get("log.segment.bytes") == "2097152"
        and "cleanup.policy" in dynamic(d, T(t5)),
    )
    assert "log.segment.bytes" not in d["broker:"]["configs"], d["broker:"]
    assert dynamic(d, T(t1)) == {"retention.ms": RETENTION}, "nothing refused was applied"
    assert dynamic(d, T(t2)) == {"retention.ms": "7200000", "segment.bytes": "2097152"}, \
        "applied once, and neither the forbidden config nor the validate-only change"
    assert dynamic(d, T(t3)) == {"retention.ms": RETENTION}, "the required config was not deleted"
    assert dynamic(d, T(t4)) == {"retention.ms": RETENTION}
    # APPEND to a list config that is at its default appends to the default (Kafka's own rule).
    assert dynamic(d, T(t5)) == {"retention.ms": RETENTION, "cleanup.policy": "delete,compact"}
    assert dynamic(d, "broker:1").get("log.segment.bytes") == "2097152"


@pytest.mark.parametrize("version", [0, 2])
def test_legacy_alter_configs_through_kshim(broker, proxy, alter_topics, version):
    t1, t2, t3, t4, t5 = alter_topics
    # AlterConfigs replaces a resource's dynamic configs, so every topic keeps retention.ms.
    out = alter_configs_raw(proxy.bootstrap, [
        (TOPIC, t1, {"retention.ms": "1000"}),
        (TOPIC, t2, {"retention.ms": "43200000", "segment.bytes": "2097152"}),
        (BROKER, "1", {"log.segment.bytes": BAD_TOPIC_SEGMENT}),
        (TOPIC, t3, {"retention.ms": RETENTION, "cleanup.policy": "compact,bogus"}),
        # AlterConfigs drops what it does not name: leaving retention.ms out deletes it
        (TOPIC, t5, {"segment.bytes": "2097152"}),
    ], version=version)
    code, msg = out[(TOPIC, t1)]
    assert code == POLICY_VIOLATION and "create-topic policy" in msg and "configs.retention.ms" in msg, out
    assert out[(TOPIC, t2)] == (NONE, None), out
    code, msg = out[(BROKER, "1")]
    assert code == INVALID_CONFIG, out
    assert "validator" in msg and "log.segment.bytes" in msg and "metadata.version" in msg and has_level(msg, 20), out
    code, msg = out[(TOPIC, t3)]
    assert code == POLICY_VIOLATION and "configs.cleanup.policy" in msg, out
    code, msg = out[(TOPIC, t5)]
    assert code == POLICY_VIOLATION and "required_configs" in msg, out

    out = alter_configs_raw(proxy.bootstrap, [
        (TOPIC, t4, {"retention.ms": RETENTION, "segment.bytes": BAD_TOPIC_SEGMENT}),
        (TOPIC, t5, {"retention.ms": RETENTION, "unclean.leader.election.enable": "true"}),
        (TOPIC, t1, {"retention.ms": "21600000"}),
        (BROKER, "1", {"log.segment.bytes": str(MIN_SEGMENT)}),
    ], version=version)
    code, msg = out[(TOPIC, t4)]
    assert code == INVALID_CONFIG, out
    assert "validator" in msg and "segment.bytes" in msg and "metadata.version" in msg and has_level(msg, 20), out
    code, msg = out[(TOPIC, t5)]
    assert code == POLICY_VIOLATION and "forbidden_configs" in msg, out
    assert out[(TOPIC, t1)] == (NONE, None), out
    assert out[(BROKER, "1")] == (NONE, None), out

    # validate_only: answered, not applied
    out = alter_configs_raw(proxy.bootstrap, [
        (TOPIC, t2, {"retention.ms": "10800000"}),
        (TOPIC, t3, {"retention.ms": "1000"}),
    ], version=version, validate_only=True)
    assert out[(TOPIC, t2)] == (NONE, None), out
    assert out[(TOPIC, t3)][0] == POLICY_VIOLATION, out

    resources = [f"topic:{t}" for t in alter_topics] + ["broker:1"]
    d = describe_direct(
        broker, resources,
        until=lambda d: dynamic(d, f"topic:{t1}").get("retention.ms") == "21600000"
        and dynamic(d, "broker:1").get("log.segment.bytes") == str(MIN_SEGMENT),
    )
    assert dynamic(d, f"topic:{t1}") == {"retention.ms": "21600000"}
    assert dynamic(d, f"topic:{t2}") == {"retention.ms": "43200000", "segment.bytes": "2097152"}
    assert dynamic(d, f"topic:{t3}") == {"retention.ms": RETENTION}
    assert dynamic(d, f"topic:{t4}") == {"retention.ms": RETENTION}
    assert dynamic(d, f"topic:{t5}") == {"retention.ms": RETENTION}
    assert dynamic(d, "broker:1").get("log.segment.bytes") == str(MIN_SEGMENT)


# --------------------------------------------------------------------------------------------
# (c) kafka-topics.sh and kafka-configs.sh


TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh
CONFIG_COMMAND = "kafka.admin.ConfigCommand"  # kafka-configs.sh


def test_kafka_topics_and_kafka_configs_through_kshim(broker, proxy):
    u = uid()
    good, denied, noret = f"tool-ok-{u}", f"tmp.tool-{u}", f"tool-noret-{u}"
    base = [TOPIC_COMMAND, "--bootstrap-server", proxy.bootstrap, "--create", "--partitions", "2",
            "--replication-factor", "1"]

    res = tool(*base, "--topic", good, "--config", f"retention.ms={RETENTION}")
    assert res.rc == 0 and f"Created topic {good}." in res.stdout, res
    for name, extra, rule in ((denied, ["--config", f"retention.ms={RETENTION}"], "denied_names"),
                              (noret, [], "required_configs")):
        res = tool(*base, "--topic", name, *extra)
        text = res.stdout + res.stderr
        assert res.rc != 0, res
        assert "Error while executing topic command" in text and "create-topic policy" in text and rule in text, res

    cfg = [CONFIG_COMMAND, "--bootstrap-server", proxy.bootstrap, "--alter"]
    topic_alter = [*cfg, "--entity-type", "topics", "--entity-name", good, "--add-config"]
    res = tool(*topic_alter, "retention.ms=1000")
    text = res.stdout + res.stderr
    assert res.rc != 0 and "PolicyViolationException" in text and "configs.retention.ms" in text, res
    res = tool(*topic_alter, f"segment.bytes={BAD_TOPIC_SEGMENT}")
    text = res.stdout + res.stderr
    assert res.rc != 0 and "InvalidConfigurationException" in text, res
    assert "validator" in text and "segment.bytes" in text and "metadata.version" in text, res
    res = tool(*cfg, "--entity-type", "brokers", "--entity-name", "1", "--add-config", f"log.segment.bytes={BAD_TOPIC_SEGMENT}")
    text = res.stdout + res.stderr
    assert res.rc != 0 and "InvalidConfigurationException" in text and "log.segment.bytes" in text and "validator" in text, res
    res = tool(*topic_alter, "retention.ms=7200000")
    assert res.rc == 0 and f"Completed updating config for topic {good}." in res.stdout, res

    on_broker = topics_direct(broker, {good})
    assert good in on_broker and not {denied, noret} & on_broker, on_broker
    d = describe_direct(broker, [f"topic:{good}", "broker:1"],
                        until=lambda d: dynamic(d, f"topic:{good}").get("retention.ms") == "7200000")
    assert dynamic(d, f"topic:{good}") == {"retention.ms": "7200000"}
    assert dynamic(d, "broker:1").get("log.segment.bytes") != BAD_TOPIC_SEGMENT


# ---- librdkafka (confluent-kafka): CreateTopics and the legacy AlterConfigs from another client


CK_ADMIN = r"""
import json, sys, warnings
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

warnings.simplefilter("ignore", DeprecationWarning)  # alter_configs is the legacy API on purpose
bootstrap, good, big, existing, retention = sys.argv[1:6]
admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 15000})

def outcome(f):
    try:
        f.result(timeout=30)
        return {"ok": True}
    except KafkaException as e:
        err = e.args[0]
        return {"ok": False, "code": err.code(), "message": err.str()}

out = {}
fs = admin.create_topics([NewTopic(good, 2, 1, config={"retention.ms": retention}),
                          NewTopic(big, 11, 1, config={"retention.ms": retention})], request_timeout=30)
out["create"] = {name: outcome(f) for name, f in fs.items()}
fs = admin.alter_configs([
    ConfigResource(ResourceType.TOPIC, good, set_config={"retention.ms": "7200000"}),
    ConfigResource(ResourceType.TOPIC, existing, set_config={"retention.ms": "1000"}),
], request_timeout=30)
out["alter"] = {r.name: outcome(f) for r, f in fs.items()}
fs = admin.alter_configs([ConfigResource(ResourceType.BROKER, "1", set_config={"log.segment.bytes": "1048576"})],
                         request_timeout=30)
out["alter_broker"] = {r.name: outcome(f) for r, f in fs.items()}
print(json.dumps(out))
"""


def test_librdkafka_create_and_legacy_alter_through_kshim(broker, proxy):
    if importlib.util.find_spec("confluent_kafka") is None:
        pytest.fail(f"confluent-kafka is not installed in {sys.executable}; run: {ke.INSTALL_HINT}", pytrace=False)
    u = uid()
    good, big, existing = f"rd-ok-{u}", f"rd-big-{u}", f"rd-old-{u}"
    assert_ok(policy_admin(["create", broker.bootstrap, f"{existing}:1:1:retention.ms={RETENTION}"])[0])
    try:
        res = subprocess.run([sys.executable, "-c", CK_ADMIN, proxy.bootstrap, good, big, existing, RETENTION],
                             capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the librdkafka client did not finish: {e.stdout}\n{e.stderr}", pytrace=False)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.returncode == 0 and lines, res
    out = json.loads(lines[-1])
    assert out["create"][good] == {"ok": True}, out
    big_out = out["create"][big]
    assert big_out["code"] == POLICY_VIOLATION and "max_partitions" in big_out["message"], out
    assert out["alter"][good] == {"ok": True}, out
    old = out["alter"][existing]
    assert old["code"] == POLICY_VIOLATION and "configs.retention.ms" in old["message"], out
    b1 = out["alter_broker"]["1"]
    assert b1["code"] == INVALID_CONFIG and "validator" in b1["message"] and has_level(b1["message"], 20), out

    assert big not in topics_direct(broker, {good})
    d = describe_direct(broker, [f"topic:{good}", f"topic:{existing}", "broker:1"],
                        until=lambda d: dynamic(d, f"topic:{good}").get("retention.ms") == "7200000")
    assert dynamic(d, f"topic:{good}") == {"retention.ms": "7200000"}
    assert dynamic(d, f"topic:{existing}") == {"retention.ms": RETENTION}
    assert dynamic(d, "broker:1").get("log.segment.bytes") != BAD_TOPIC_SEGMENT


# ---- the audit sees what was made behind kshim's back (validate-only: nothing changes here)


def test_upgrade_audit_sees_topics_made_directly_on_the_broker(broker, proxy):
    """A topic created straight on the broker (no policy on the way) with a segment size the
    level-26 validator rejects: a validate-only upgrade through kshim names it."""
    name = f"behind-{uid()}"
    assert_ok(policy_admin(["create", broker.bootstrap, f"{name}:1:1:segment.bytes={BAD_BROKER_SEGMENT}"])[0])
    describe_direct(broker, [f"topic:{name}"], until=lambda d: "segment.bytes" in dynamic(d, f"topic:{name}"))
    lines = policy_admin(
        ["update-features", proxy.bootstrap, "--validate-only", "metadata.version=26"],
        ["features", broker.bootstrap],
    )
    line = lines[0]
    assert line["ok"] is False and line["error"] == "InvalidUpdateVersionException", line
    assert f"topic {name}" in line["message"] and f"segment.bytes={BAD_BROKER_SEGMENT}" in line["message"], line
    assert lines[1]["finalized"]["metadata.version"] == 25
    rc, text = feature_command(proxy.bootstrap, "upgrade", "--dry-run", "--feature", "metadata.version=26")
    assert rc != 0 and f"topic {name}" in text, text
    assert finalized_direct(broker)["metadata.version"] == 25


# --------------------------------------------------------------------------------------------
# (d) the feature-upgrade audit


def test_metadata_version_upgrade_is_audited(kafka_clusters, kshim_factory):
    cluster = kafka_clusters.start(
        1, format_args=["--release-version", "4.0-IV3"], extra_properties={"log.segment.bytes": BAD_BROKER_SEGMENT})
    try:
        audit_scenario(cluster, kshim_factory(POLICY_AUDIT, upstream=cluster.bootstrap, refresh_interval_ms=500))
    finally:
        cluster.cleanup()


def audit_scenario(cluster: ke.KafkaCluster, proxy: ke.KshimProcess) -> None:
    kb, direct = proxy.bootstrap, cluster.bootstrap
    ret = f"retention.ms={RETENTION}"

    # At 25 the level-26 validator is not in force: Kafka and kshim accept a 1 MiB segment.
    lines = policy_admin(
        ["features", direct],
        ["create", kb, f"payments:3:1:{ret},segment.bytes={BAD_TOPIC_SEGMENT}", f"ledger:1:1:{ret},segment.bytes={GOOD_SEGMENT}"],
        ["describe-configs", direct, "broker:1"],
    )
    assert lines[0]["finalized"]["metadata.version"] == 25
    created = by_step(lines, 1, "topic")
    assert_ok(created["payments"])
    assert_ok(created["ledger"])
    broker_cfg = by_step(lines, 2, "resource")["broker:1"]["configs"]["log.segment.bytes"]
    assert broker_cfg == {"value": BAD_BROKER_SEGMENT, "source": "STATIC_BROKER_CONFIG"}
    d = describe_direct(cluster, ["topic:payments"], until=lambda d: "segment.bytes" in dynamic(d, "topic:payments"))
    assert dynamic(d, "topic:payments")["segment.bytes"] == BAD_TOPIC_SEGMENT

    def assert_names_both(text: str) -> None:
        for needle in ("topic payments", f"segment.bytes={BAD_TOPIC_SEGMENT}", "broker 1",
                       f"log.segment.bytes={BAD_BROKER_SEGMENT}"):
            assert needle in text, f"{needle!r} not in the refusal:\n{text}"
        assert "ledger" not in text, f"a compliant topic is listed as a violator:\n{text}"

    # kafka-features.sh, dry run first, then for real: both refused, naming both violators.
    rc, text = feature_command(kb, "upgrade", "--dry-run", "--feature", "metadata.version=26")
    assert rc != 0 and "metadata.version" in text, text
    assert_names_both(text)
    rc, text = feature_command(kb, "upgrade", "--feature", "metadata.version=26")
    assert rc != 0 and "Could not upgrade metadata.version to 26" in text, text
    assert_names_both(text)

    # The Admin API gets INVALID_UPDATE_VERSION; nothing changed on the broker.
    lines = policy_admin(
        ["update-features", kb, "--validate-only", "metadata.version=26"],
        ["update-features", kb, "metadata.version=26"],
        ["features", direct],
    )
    for step in (0, 1):
        line = by_step(lines, step, "feature")["metadata.version"]
        assert line["ok"] is False and line["error"] == "InvalidUpdateVersionException", line
        assert_names_both(line["message"])
    assert lines[2]["finalized"]["metadata.version"] == 25, "the refused upgrade reached the broker"

    # Fix the topic only: the broker is still named, the topic no longer.
    lines = policy_admin(
        ["incremental", kb, f"topic:payments:SET:segment.bytes={GOOD_SEGMENT}"],
        ["update-features", kb, "--validate-only", "metadata.version=26"],
    )
    assert_ok(lines[0])
    line = lines[1]
    assert line["ok"] is False and line["error"] == "InvalidUpdateVersionException", line
    assert "broker 1" in line["message"] and f"log.segment.bytes={BAD_BROKER_SEGMENT}" in line["message"], line
    assert "topic payments" not in line["message"], line

    # Fix the broker with a dynamic override of its static value; now the upgrade goes through.
    assert_ok(policy_admin(["incremental", kb, f"broker:1:SET:log.segment.bytes={GOOD_SEGMENT}"])[0])
    describe_direct(cluster, ["broker:1"], until=lambda d: dynamic(d, "broker:1").get("log.segment.bytes") == GOOD_SEGMENT)
    rc, text = feature_command(kb, "upgrade", "--dry-run", "--feature", "metadata.version=26")
    assert rc == 0 and "metadata.version can be upgraded to 26." in text, text
    assert finalized_direct(cluster)["metadata.version"] == 25, "a dry run changed the level"
    rc, text = feature_command(kb, "upgrade", "--feature", "metadata.version=26")
    assert rc == 0 and "metadata.version was upgraded to 26." in text, text
    assert finalized_direct(cluster)["metadata.version"] == 26

    # At 26 the validator is in force, for alters and for creations, topic and broker.
    late_bad, late_ok = f"late-bad-{uid()}", f"late-ok-{uid()}"
    lines = policy_admin(
        ["features", kb],
        ["incremental", kb, f"topic:payments:SET:segment.bytes={BAD_TOPIC_SEGMENT}",
         f"broker:1:SET:log.segment.bytes={BAD_BROKER_SEGMENT}", f"topic:ledger:SET:segment.bytes={MIN_SEGMENT}"],
        ["create", kb, f"{late_bad}:1:1:{ret},segment.bytes={BAD_TOPIC_SEGMENT}", f"{late_ok}:1:1:{ret},segment.bytes={GOOD_SEGMENT}"],
    )
    assert lines[0]["finalized"]["metadata.version"] == 26, "kshim does not show the new level"
    alters = by_step(lines, 1, "resource")
    assert_validator_refusal(alters["topic:payments"], "segment.bytes", "metadata.version", 26)
    assert_validator_refusal(alters["broker:1"], "log.segment.bytes", "metadata.version", 26)
    assert_ok(alters["topic:ledger"])  # exactly the minimum is allowed
    creates = by_step(lines, 2, "topic")
    assert_validator_refusal(creates[late_bad], "segment.bytes", "metadata.version", 26)
    assert_ok(creates[late_ok])
    on_broker = topics_direct(cluster, {late_ok})
    assert late_ok in on_broker and late_bad not in on_broker, on_broker
    d = describe_direct(cluster, ["topic:payments", "topic:ledger", "broker:1"],
                        until=lambda d: dynamic(d, "topic:ledger").get("segment.bytes") == str(MIN_SEGMENT))
    assert dynamic(d, "topic:payments")["segment.bytes"] == GOOD_SEGMENT
    assert dynamic(d, "topic:ledger")["segment.bytes"] == str(MIN_SEGMENT)
    assert dynamic(d, "broker:1")["log.segment.bytes"] == GOOD_SEGMENT

    # Level 27 registers a looser rule (at least 1 MiB), which wins over level 26's from 27 on.
    lines = policy_admin(
        ["update-features", kb, "metadata.version=27"],
        ["incremental", kb, "topic:payments:SET:segment.bytes=2097152"],
    )
    assert_ok(lines[0])
    assert_ok(lines[1])
    assert finalized_direct(cluster)["metadata.version"] == 27
    # Lowering to 26 is audited against level 26's rule: payments (2 MiB) now breaks it.
    lines = policy_admin(
        ["update-features", kb, "--validate-only", "metadata.version=26:SAFE_DOWNGRADE"],
        ["update-features", kb, "metadata.version=26:SAFE_DOWNGRADE"],
        ["features", direct],
    )
    for step in (0, 1):
        line = by_step(lines, step, "feature")["metadata.version"]
        assert line["ok"] is False and line["error"] == "InvalidUpdateVersionException", line
        assert "topic payments" in line["message"] and "segment.bytes=2097152" in line["message"], line
        assert "broker 1" not in line["message"] and "ledger" not in line["message"], line
    assert lines[2]["finalized"]["metadata.version"] == 27

    # Lowered straight on the broker (no audit there): kshim follows the upstream's level, and
    # level 26's rule is in force again for what goes through it.
    rc, text = feature_command(direct, "downgrade", "--feature", "metadata.version=26")
    assert rc == 0 and "metadata.version was downgraded to 26." in text, text
    deadline = time.monotonic() + 15
    while policy_admin(["features", kb])[0]["finalized"]["metadata.version"] != 26:
        assert time.monotonic() < deadline, "kshim does not show the level the broker was lowered to"
        time.sleep(0.5)
    line = policy_admin(["incremental", kb, "topic:ledger:SET:segment.bytes=2097152"])[0]
    assert_validator_refusal(line, "segment.bytes", "metadata.version", 26)


# --------------------------------------------------------------------------------------------
# (e) kshim config check


CHECK_POLICY = CREATE_TOPIC_POLICY + SEGMENT_VALIDATOR_26 + """
[[policy.validators]]
key = "compression.type"
feature = "metadata.version"
level = 26
pattern = "producer|zstd|lz4"
"""

SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
log.dirs=/var/lib/kafka/data
num.partitions=3
log.segment.bytes={segment}
compression.type={compression}
"""


def run_kshim(binary: Path, *args, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"kshim {args} did not finish within {timeout}s\nstdout:{e.stdout}\nstderr:{e.stderr}", pytrace=False)


@pytest.fixture
def check_files(tmp_path):
    cfg = tmp_path / "kshim.toml"
    cfg.write_text(CHECK_POLICY)
    bad = tmp_path / "bad.properties"
    bad.write_text(SERVER_PROPERTIES.format(segment=BAD_BROKER_SEGMENT, compression="gzip"))
    good = tmp_path / "good.properties"
    good.write_text(SERVER_PROPERTIES.format(segment=GOOD_SEGMENT, compression="zstd"))
    return cfg, bad, good


def test_config_check_finds_each_violation(kshim_binary, check_files):
    cfg, bad, good = check_files
    res = run_kshim(kshim_binary, "config", "check", "--config", cfg, "--file", bad, "--feature", "metadata.version=26")
    text = res.stdout + res.stderr
    assert res.returncode == 1, res
    seg = [line for line in text.splitlines() if "log.segment.bytes" in line]
    comp = [line for line in text.splitlines() if "compression.type" in line]
    assert len(seg) == 1 and BAD_BROKER_SEGMENT in seg[0] and str(MIN_SEGMENT) in seg[0], res
    assert len(comp) == 1 and "gzip" in comp[0] and "producer|zstd|lz4" in comp[0], res
    assert "num.partitions" not in text, res

    # The repeatable --feature: another feature alongside changes nothing.
    res2 = run_kshim(kshim_binary, "config", "check", "--config", cfg, "--file", bad,
                     "--feature", "group.version=1", "--feature", "metadata.version=26")
    assert res2.returncode == 1, res2
    found = [line for line in (res2.stdout + res2.stderr).splitlines()
             if "log.segment.bytes" in line or "compression.type" in line]
    assert sorted(found) == sorted(seg + comp), (res, res2)


def test_config_check_passes_compliant_or_not_yet_gated(kshim_binary, check_files):
    cfg, bad, good = check_files
    res = run_kshim(kshim_binary, "config", "check", "--config", cfg, "--file", good, "--feature", "metadata.version=26")
    assert res.returncode == 0, res
    # At 25 the level-26 validators are not in force.
    res = run_kshim(kshim_binary, "config", "check", "--config", cfg, "--file", bad, "--feature", "metadata.version=25")
    assert res.returncode == 0, res
    assert BAD_BROKER_SEGMENT not in res.stdout + res.stderr, res
    # From 27 on the level-26 rule still holds (the highest registered level <= 27 is 26).
    res = run_kshim(kshim_binary, "config", "check", "--config", cfg, "--file", bad, "--feature", "metadata.version=27")
    assert res.returncode == 1 and BAD_BROKER_SEGMENT in res.stdout + res.stderr, res


def test_config_check_reads_properties_syntax(kshim_binary, tmp_path, check_files):
    """server.properties is read as java.util.Properties reads it: comments are not configs,
    and whitespace around the separator is not part of the key or the value."""
    cfg, _, _ = check_files
    props = tmp_path / "spaced.properties"
    props.write_text(
        "# log.segment.bytes=1024 is only a comment\n"
        "! compression.type=gzip too\n"
        "log.segment.bytes = 2097152\n"
        "compression.type=zstd\n"
    )
    res = run_kshim(kshim_binary, "config", "check", "--config", cfg, "--file", props, "--feature", "metadata.version=26")
    text = res.stdout + res.stderr
    assert res.returncode == 1, res
    lines = [line for line in text.splitlines() if "log.segment.bytes" in line]
    assert len(lines) == 1 and BAD_BROKER_SEGMENT in lines[0], res
    assert "1024" not in text.replace(BAD_BROKER_SEGMENT, "") and "gzip" not in text, res


def test_config_check_usage_errors_exit_2(kshim_binary, check_files, tmp_path):
    cfg, bad, _ = check_files
    cases = {
        "no level": ["--config", cfg, "--file", bad, "--feature", "metadata.version"],
        "level not a number": ["--config", cfg, "--file", bad, "--feature", "metadata.version=high"],
        "unknown option": ["--config", cfg, "--file", bad, "--feature", "metadata.version=26", "--bogus"],
        "no such config": ["--config", tmp_path / "nope.toml", "--file", bad, "--feature", "metadata.version=26"],
        "no such properties file": ["--config", cfg, "--file", tmp_path / "nope.properties", "--feature", "metadata.version=26"],
    }
    malformed = tmp_path / "malformed.toml"
    malformed.write_text(MALFORMED_POLICY)
    cases["malformed policy"] = ["--config", malformed, "--file", bad, "--feature", "metadata.version=26"]
    for what, args in cases.items():
        res = run_kshim(kshim_binary, "config", "check", *args)
        assert res.returncode == 2, (what, res)
    # --file is optional: the kshim config alone is checked then.
    res = run_kshim(kshim_binary, "config", "check", "--config", cfg)
    assert res.returncode == 0, res
    res = run_kshim(kshim_binary, "config", "check", "--config", malformed)
    assert res.returncode == 2 and "max_partitions" in res.stdout + res.stderr, res


# --------------------------------------------------------------------------------------------
# (f) a malformed policy stops kshim at startup


MALFORMED_POLICY = r"""
[policy.create_topic]
max_partitions = "ten"
denied_names = ["tmp\\.(unclosed"]

[policy.create_topic.configs."retention.ms"]
min = 604800000
max = 3600000

[[policy.validators]]
key = "log.segment.bytes"
level = 26
min = 3145728

[[policy.validators]]
key = "compression.type"
feature = "metadata.version"
level = 1
pattern = "zstd|(lz4"
"""


def test_malformed_policy_refuses_to_start(kshim_binary, tmp_path):
    port = ke.free_port()
    dead_upstream = f"127.0.0.1:{ke.free_port()}"
    cfg = tmp_path / "kshim.toml"
    cfg.write_text(
        f'listen = "127.0.0.1:{port}"\ndata_dir = "{tmp_path / "data"}"\n'
        + MALFORMED_POLICY
        + f'\n[upstream]\nbootstrap = "{dead_upstream}"\n'
    )
    (tmp_path / "data").mkdir()
    started = time.monotonic()
    res = run_kshim(kshim_binary, "serve", "--config", cfg, "--listen", f"127.0.0.1:{port}",
                    "--data-dir", tmp_path / "data", timeout=20)
    took = time.monotonic() - started
    assert res.returncode != 0, res
    assert took < 10, f"kshim took {took:.1f}s to give up"
    assert not ke.port_accepts("127.0.0.1", port), "something listens on the port kshim was given"
    lines = res.stderr.splitlines()

    def some_line(*needles: str) -> bool:
        return any(all(n in line for n in needles) for line in lines)

    assert some_line("max_partitions"), res.stderr
    assert some_line("denied_names"), res.stderr
    assert some_line("retention.ms"), res.stderr
    # the validator without a feature (not to be confused with the other validator's error)
    assert any("feature" in line and "compression.type" not in line
               and ("log.segment.bytes" in line or "missing" in line or "required" in line) for line in lines), res.stderr
    # the validator with an invalid pattern
    assert some_line("compression.type") or some_line("zstd|(lz4"), res.stderr
