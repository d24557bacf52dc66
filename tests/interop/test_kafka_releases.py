"""kshim and the Kafka releases other than the suite's 4.1.1: one node each of 4.0.2, 4.2.2,
4.3.2 and 4.4.0, started once for the module.

In front of each, what kshim's ApiVersions offers is the broker's own table, apart from a
short list of deliberate differences, each with its reason. In front of 4.4.0: ApiVersions
v5 (KIP-1242) gets from kshim the answer the broker gives for every combination of
ClusterId and NodeId, and an API that kshim's Kafka library does not know
(StreamsGroupDescribe, key 89) goes through kshim to the broker and back. A standalone
kshim told to be 4.1 or 4.4 is described by that release's kafka-features.sh as a freshly
formatted node of the release.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys

import pytest

import kafka_env as ke

RELEASE = "4.4.0"

# key -> (kshim's range, why it differs from the broker's). Everything else must be equal.
DIFFERENCES = {
    18: ((0, 5), "kshim answers ApiVersions itself, v5 (KIP-1242) included, whatever the release"),
    57: ((0, 2), "kshim answers UpdateFeatures itself"),
    55: ((0, 1), "DescribeQuorum v2 lists controller listeners"),
}

OLDER_RELEASES = ["4.0.2", "4.2.2", "4.3.2"]


@pytest.fixture(scope="module")
def release_brokers(kafka_clusters):
    """One node per release, started on first use and kept for the module."""
    started: dict[str, ke.KafkaCluster] = {}

    def get(release: str) -> ke.KafkaCluster:
        if release not in started:
            started[release] = kafka_clusters.start(1, jars=ke.release_jars(release))
        return started[release]

    return get


# Formatted as Kafka's quickstart formats a node (--standalone), as a standalone kshim presents
# one: kraft.version 1. Its own inter-broker traffic (the share coordinator's persister talks
# to the node itself) goes over a listener of its own, so that the client listener sees
# nothing but the clients and kshim.
@pytest.fixture(scope="module")
def broker(kafka_clusters):
    return kafka_clusters.start(1, jars=ke.release_jars(RELEASE), dynamic_quorum=True, separate_inter_broker=True)


@pytest.fixture(scope="module")
def broker_4_1(kafka_clusters):
    return kafka_clusters.start(1, dynamic_quorum=True)


@pytest.fixture
def proxy(kshim_factory, broker):
    return kshim_factory(upstream=broker.bootstrap)


def api_table_differences(broker_bootstrap: str, proxy_bootstrap: str) -> dict:
    theirs = ke.api_versions(broker_bootstrap).api_keys
    # Until kshim has read the brokers' table it offers only its own APIs.
    def brokers_apis_offered():
        table = ke.api_versions(proxy_bootstrap).api_keys
        return table if len(table) > 2 else None

    ours = ke.wait_until(brokers_apis_offered, 15)
    assert ours, "kshim never offered the brokers' APIs"
    differences = {}
    for key in sorted(set(theirs) | set(ours)):
        expected = DIFFERENCES[key][0] if key in DIFFERENCES else theirs.get(key)
        if ours.get(key) != expected:
            differences[key] = {"broker": theirs.get(key), "kshim": ours.get(key), "expected": expected}
    return differences


@pytest.mark.parametrize("release", OLDER_RELEASES)
def test_kshim_offers_each_releases_apis(release, release_brokers, kshim_factory):
    broker = release_brokers(release)
    proxy = kshim_factory(upstream=broker.bootstrap)
    differences = api_table_differences(broker.bootstrap, proxy.bootstrap)
    assert not differences, f"kshim's ApiVersions differs from the {release} broker's: {differences}"


def test_kshim_offers_the_4_4_brokers_apis(broker, proxy):
    theirs = ke.api_versions(broker.bootstrap).api_keys
    assert {88, 89} <= set(theirs), f"a {RELEASE} broker offers the Streams group APIs: {sorted(theirs)}"
    differences = api_table_differences(broker.bootstrap, proxy.bootstrap)
    assert not differences, f"kshim's ApiVersions differs from the {RELEASE} broker's: {differences}"
    # The cap is said, once, with its reason.
    said = "DescribeQuorum is offered at v0-v1 of the brokers' v0-v2: DescribeQuorum v2 is not served"
    assert ke.wait_until(lambda: said in proxy.log_text(), 10), ke.tail(proxy.log_path, 20)


def streams_group_describe(group: str, correlation_id: int) -> bytes:
    """StreamsGroupDescribe v0 (key 89): header v2, GroupIds, IncludeAuthorizedOperations."""
    client_id = b"kshim-interop"
    header = struct.pack(">hhih", 89, 0, correlation_id, len(client_id)) + client_id + b"\x00"
    body = ke.encode_uvarint(2) + ke.encode_compact_string(group) + b"\x00" + b"\x00"
    return header + body


def describe_answer(frame: bytes) -> tuple[int, int, str]:
    """The correlation id, and the first group's error code and id."""
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    pos = 5  # correlation id, header tags (none)
    pos += 4  # ThrottleTimeMs
    count, pos = ke._uvarint(frame, pos)
    assert count == 2, f"one group in the answer, got {count - 1}"
    (error_code,) = struct.unpack_from(">h", frame, pos)
    pos += 2
    length, pos = ke._uvarint(frame, pos)  # ErrorMessage, nullable
    pos += max(length - 1, 0)
    group, pos = ke._compact_str(frame, pos)
    return correlation_id, error_code, group


def test_an_api_newer_than_kshims_library_goes_through(broker, proxy):
    ke.wait_until(lambda: 89 in ke.api_versions(proxy.bootstrap).api_keys, 10)
    direct = describe_answer(ke.exchange(broker.bootstrap, streams_group_describe("no-such-app", 7), 10))
    through = describe_answer(ke.exchange(proxy.bootstrap, streams_group_describe("no-such-app", 8), 10))
    assert direct[0] == 7 and through[0] == 8
    assert direct[1:] == through[1:], f"broker {direct}, through kshim {through}"
    assert direct[1] != 0, "a group that does not exist is an error"


def v5_answer(bootstrap: str, cluster_id: str | None, node_id: int) -> tuple[int, int]:
    """The error code and the number of API keys of the answer."""
    frame = ke.exchange(bootstrap, ke.api_versions_request(5, intended=(cluster_id, node_id)), 10)
    (error_code,) = struct.unpack_from(">h", frame, 4)
    count, _ = ke._uvarint(frame, 6)
    return error_code, count - 1


def test_api_versions_v5_is_answered_as_the_4_4_broker_answers(broker, proxy):
    """kshim's listener for node 1 against node 1 itself: the same cluster id, the same node."""
    listeners = ke.wait_until(lambda: ke.metadata_brokers(proxy.bootstrap), 10)
    node_id, host, port = listeners[0]
    through = f"{host}:{port}"
    cluster = broker.cluster_id
    cases = {
        "names no node": (None, -1),
        "names only the cluster": (cluster, -1),
        "names only the node": (None, node_id),
        "names this node": (cluster, node_id),
        "names another cluster": ("AAAAAAAAAAAAAAAAAAAAAA", node_id),
        "names another node": (cluster, node_id + 7),
    }
    seen = {}
    for case, (cluster_id, node) in cases.items():
        direct = v5_answer(broker.bootstrap, cluster_id, node)
        ours = v5_answer(through, cluster_id, node)
        seen[case] = direct[0]
        # The broker lists its APIs, kshim its own table: compare the error and
        # whether a table came at all.
        assert (ours[0], ours[1] > 0) == (direct[0], direct[1] > 0), f"{case}: broker {direct}, kshim {ours}"
    # INVALID_REQUEST for half an identity, REBOOTSTRAP_REQUIRED for another one.
    assert seen == {"names no node": 0, "names only the cluster": 42, "names only the node": 42,
                    "names this node": 0, "names another cluster": 129, "names another node": 129}


def describe_lines(text: str) -> list[str]:
    """kafka-features.sh describe's lines, the epoch (which differs from cluster to cluster)
    masked."""
    return [re.sub(r"\b-?\d+\s*$", "<epoch>", line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("release", ["4.1.1", RELEASE])
def test_a_standalone_kshim_is_the_release_it_is_told(release, broker, broker_4_1, kshim_factory):
    """kafka-features.sh of the release describes a standalone kshim with `kafka_release`
    set to it line for line as it describes a freshly formatted broker of that release."""
    broker = broker_4_1 if release == "4.1.1" else broker
    jars = None if release == "4.1.1" else ke.release_jars(release)
    minor = release.rsplit(".", 1)[0]
    kshim = kshim_factory(f'kafka_release = "{minor}"\n')
    rc, theirs, err = ke.run_feature_command(broker.bootstrap, "describe", jars=jars)
    assert rc == 0, err
    rc, ours, err = ke.run_feature_command(kshim.bootstrap, "describe", jars=jars)
    assert rc == 0, err
    assert describe_lines(ours) == describe_lines(theirs), f"kshim:\n{ours}\nbroker {release}:\n{theirs}"
    assert len(describe_lines(theirs)) >= 5, theirs


def test_before_any_broker_answers_nothing_is_finalized(kshim_factory):
    """KAFKA-19964, as a Kafka 4.4 node that has not loaded its metadata answers: in front of
    a cluster no broker of which has answered yet, kshim tells clients epoch -1 and no
    finalized features, never levels it would have to invent."""
    dead = f"127.0.0.1:{ke.free_port()}"
    proxy = kshim_factory(upstream=dead)
    info = ke.api_versions(proxy.bootstrap)
    assert info.error_code == 0
    # Epoch -1 is the tag's default, so the tag is left out (None here), as Kafka leaves it out.
    assert info.finalized_epoch in (None, -1) and info.finalized == {}, (info.finalized_epoch, info.finalized)
    # kshim's own tool says that they are unknown, not absent, and fails; the log says why.
    kshim = str(ke.require_kshim_binary())
    text = subprocess.run([kshim, "features", "--bootstrap-server", proxy.bootstrap, "describe"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert text.returncode == 1 and "are unknown: it answered epoch -1" in text.stderr, text
    doc = subprocess.run([kshim, "features", "--bootstrap-server", proxy.bootstrap, "describe", "--output", "json"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert doc.returncode == 1 and json.loads(doc.stdout)["status"] == "UNKNOWN", doc
    log = proxy.log_path.read_text()
    assert "with no feature view stored" in log and "stored feature view (epoch" not in log, log[-2000:]
    # Kafka's features are the brokers' to say: kshim bootstraps only its own, and the default
    # max_connections fitted to the open-file limit is no warning, nor standalone's.
    bootstrapped = [line for line in log.splitlines() if "bootstrapped" in line]
    assert bootstrapped and "metadata.version" not in bootstrapped[0], bootstrapped
    assert not [line for line in log.splitlines() if " WARN " in line and "max_connections" in line], log[-2000:]
    assert "kshim::standalone" not in log, log[-2000:]


CLIENTS_44 = ke.REPO_ROOT / "tests" / "interop" / "java" / "Kafka44Clients.java"


def clients_44(*args: str, timeout: float = 120) -> dict:
    """One Kafka44Clients command, compiled and run against the 4.4.0 jars."""
    jars = ke.release_jars(RELEASE)
    classes = ke.compile_java(CLIENTS_44, jars=jars)
    res = ke.run_java(["Kafka44Clients", *args, "--timeout-ms", str(int((timeout - 15) * 1000))],
                      extra_classpath=[classes], jars=jars, timeout=timeout, log_config=ke.CLIENTS_LOG4J)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.rc == 0 and lines and "error" not in json.loads(lines[-1]), (
        f"Kafka44Clients {args[0]} failed (rc={res.rc}):\n{res.stdout}\n{res.stderr[-4000:]}")
    return json.loads(lines[-1])


def stray_connections(broker: ke.KafkaCluster, proxy: ke.KshimProcess, marks: dict[int, int]) -> list:
    """Connections the broker accepted since `marks` that are not kshim's own upstream ones:
    a client that learnt the broker's address from an unrewritten response."""
    accepted = broker.accepted_connections(marks)

    def stray():
        ours = {(c.local_port, c.remote_port) for c in proxy.upstream_connections()}
        return [a for a in accepted if (a.remote_port, a.local_port) not in ours]

    # kshim may log a connection a moment after the broker accepted it.
    ke.wait_until(lambda: not stray(), 3)
    return stray()


def test_a_share_consumer_44_through_kshim(broker, proxy):
    """Admin, producer and KafkaShareConsumer 4.4 (share groups: ShareGroupHeartbeat,
    ShareFetch and ShareAcknowledge v2, rewritten) through kshim only."""
    n = 30
    marks = broker.connection_marks()
    out = clients_44("share", "--bootstrap", proxy.bootstrap, "--topic", f"share-{ke.new_cluster_id()[:8]}",
                     "--group", f"sg-{ke.new_cluster_id()[:8]}", "--count", str(n))
    assert sorted(out["consumed"]) == sorted(f"share-{i}" for i in range(n)), out
    assert not stray_connections(broker, proxy, marks), "a client reached the broker around kshim"


def test_a_streams_44_application_through_kshim(broker, proxy):
    """A Kafka Streams 4.4 application with group.protocol=streams (the Streams group APIs,
    keys 88 and 89, forwarded as bytes) upper-cases a topic into another through kshim only."""
    n = 30
    app = f"app-{ke.new_cluster_id()[:8]}"
    marks = broker.connection_marks()
    out = clients_44("streams", "--bootstrap", proxy.bootstrap, "--input", f"{app}-in", "--output", f"{app}-out",
                     "--app-id", app, "--count", str(n))
    assert out["state"] == "RUNNING", out
    assert sorted(out["output"]) == sorted(f"IN-{i}" for i in range(n)), out
    assert not stray_connections(broker, proxy, marks), "a client reached the broker around kshim"


# -- kshim lab matrix against real brokers of each release
#
# The same client command runs once through `kshim lab matrix` in front of the 4.4.0 broker
# (which presents each release in turn) and once straight against a real broker of each
# release; the pass/fail of every cell must agree. Inside the test command the matrix is
# Kafka 4.0 and 4.4 with kafka-python, and a KIP-848 consumer at group.version=0,1 on 4.4;
# KSHIM_MATRIX_FULL=1 runs every release with the five Java 4.4 clients and both non-Java
# ones, and group.version=0,1 on every release against brokers formatted at each level.

FULL_MATRIX = os.environ.get("KSHIM_MATRIX_FULL") == "1"
MATRIX_RELEASES = ["4.0", "4.1", "4.2", "4.3", "4.4"] if FULL_MATRIX else ["4.0", "4.4"]
BROKER_OF = {"4.0": "4.0.2", "4.1": "4.1.1", "4.2": "4.2.2", "4.3": "4.3.2", "4.4": "4.4.0"}
MATRIX_CLIENT = ke.REPO_ROOT / "tests" / "interop" / "matrix_client.py"


def matrix_clients() -> dict[str, list[str]]:
    """Client name -> its command, with {bootstrap} and {cell} for the matrix to fill in."""
    jars = ke.release_jars(RELEASE)
    classes = ke.compile_java(CLIENTS_44, jars=jars)

    def java(*args: str) -> list[str]:
        return ke.java_command(["Kafka44Clients", *args, "--timeout-ms", "40000"], extra_classpath=[classes],
                               jars=jars, log_config=ke.CLIENTS_LOG4J)

    python = [sys.executable, str(MATRIX_CLIENT)]
    clients = {
        "java-kip848": java("consume", "--bootstrap", "{bootstrap}", "--topic", "c848-{cell}", "--group",
                            "g848-{cell}", "--protocol", "consumer", "--count", "20"),
        "kafka-python": [*python, "kafka-python", "{bootstrap}", "py-{cell}"],
    }
    if FULL_MATRIX:
        clients |= {
            "java-producer": java("produce", "--bootstrap", "{bootstrap}", "--topic", "prod-{cell}", "--count", "20"),
            "java-classic": java("consume", "--bootstrap", "{bootstrap}", "--topic", "classic-{cell}", "--group",
                                 "gclassic-{cell}", "--protocol", "classic", "--count", "20"),
            "java-share": java("share", "--bootstrap", "{bootstrap}", "--topic", "share-{cell}", "--group",
                               "gshare-{cell}", "--count", "20"),
            "java-streams": java("streams", "--bootstrap", "{bootstrap}", "--input", "sin-{cell}", "--output",
                                 "sout-{cell}", "--app-id", "app-{cell}", "--count", "20"),
            "librdkafka": [*python, "librdkafka", "{bootstrap}", "rd-{cell}"],
        }
    return clients


def run_matrix(upstream: str, command: list[str], *extra: str, tag: str) -> dict[str, dict]:
    """`kshim lab matrix` in front of `upstream`: cell label -> its JSON outcome."""
    run = f"{tag}-{ke.new_cluster_id()[:6]}"
    argv = [str(ke.require_kshim_binary()), "lab", "matrix", "--upstream", upstream, "--output", "json",
            "--timeout", "60", "--logs", str(ke.REPO_ROOT / "build" / "test-times" / "matrix" / run), *extra,
            "--", *[a.replace("{cell}", "{cell}-" + run) for a in command]]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ke.REPO_ROOT)
    assert res.stdout.strip(), f"kshim lab matrix printed nothing (rc={res.returncode}):\n{res.stderr[-3000:]}"
    report = json.loads(res.stdout)
    failed = any(c["verdict"] == "fail" for c in report["cells"])
    assert res.returncode == (1 if failed else 0), (res.returncode, report["summary"])
    return {c["cell"]: c for c in report["cells"]}


def run_direct(bootstrap: str, command: list[str], name: str) -> tuple[bool, str]:
    """The same command straight against a broker: whether it passed, and its last lines."""
    argv = [a.replace("{bootstrap}", bootstrap).replace("{cell}", f"{name}-{ke.new_cluster_id()[:6]}")
            for a in command]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=70, cwd=ke.REPO_ROOT)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return res.returncode == 0, "\n".join((res.stdout + res.stderr).strip().splitlines()[-4:])


def real_broker(release: str, request, release_brokers) -> ke.KafkaCluster:
    """The module's broker of `release`, started on first use."""
    if release in ("4.4", "4.1"):
        return request.getfixturevalue({"4.4": "broker", "4.1": "broker_4_1"}[release])
    return release_brokers(BROKER_OF[release])


def test_lab_matrix_gives_each_release_the_outcome_of_its_real_broker(request, broker, release_brokers):
    """Every client, every release: the cell of `kshim lab matrix` in front of the 4.4.0 broker
    passes or fails as the same command does against a real broker of that release. A failed
    cell says why in one line."""
    differences = []
    table = []
    # Inside the test command, where every JVM counts, the release comparison is kafka-python's;
    # the KIP-848 consumer meets the matrix in the group.version test below.
    clients = matrix_clients() if FULL_MATRIX else {"kafka-python": matrix_clients()["kafka-python"]}
    for client, command in clients.items():
        cells = run_matrix(broker.bootstrap, command, "--releases", ",".join(MATRIX_RELEASES), tag=client)
        for release in MATRIX_RELEASES:
            cell = cells[release]
            passed, tail = run_direct(real_broker(release, request, release_brokers).bootstrap,
                                      command, f"{release}-{client}")
            table.append((client, release, cell["verdict"], "pass" if passed else "fail", cell.get("why", "")))
            if (cell["verdict"] == "pass") != passed:
                differences.append(f"{client} on {release}: matrix {cell['verdict']} ({cell.get('why', '')}; "
                                   f"{cell['output_tail'][-2:]}), real broker {'pass' if passed else 'fail'} ({tail})")
            if cell["verdict"] == "fail":
                assert cell["why"] and "\n" not in cell["why"], cell
    print("\n".join(" | ".join(row) for row in table))
    assert not differences, "\n".join(differences)


def test_lab_matrix_group_version_axis_turns_kip848_off_and_on(broker, kafka_clusters):
    """--features group.version=0,1: the KIP-848 consumer fails at 0 and passes at 1, on every
    release presented, as it does against a broker formatted at each level (the full run starts
    one per release; in the test command, 4.4's level-0 outcome is checked against the gate)."""
    command = matrix_clients()["java-kip848"]
    releases = MATRIX_RELEASES if FULL_MATRIX else ["4.4"]
    cells = run_matrix(broker.bootstrap, command, "--releases", ",".join(releases), "--features",
                       "group.version=0,1", tag="gv")
    for release in releases:
        off, on = cells[f"{release} group.version=0"], cells[f"{release} group.version=1"]
        assert on["verdict"] == "pass", on
        assert off["verdict"] == "fail" and "group.version 0 as presented" in off["why"], off
        assert off["served"].get("group.version") is None and on["served"]["group.version"] == 1, (off, on)
        if FULL_MATRIX:
            jars = None if release == "4.1" else ke.release_jars(BROKER_OF[release])
            level_0 = kafka_clusters.start(1, jars=jars, format_args=["--feature", "group.version=0"])
            try:
                passed, tail = run_direct(level_0.bootstrap, command, f"{release}-gv0")
            finally:
                level_0.cleanup()
            assert not passed, f"a {release} broker at group.version=0 served the KIP-848 consumer: {tail}"
