"""What kshim reports about features in front of a cluster is true, also while brokers stall,
lag, restart or race.

  (a) The epoch rule: kshim accepts a mirrored upstream feature view only if its upstream
      FinalizedFeaturesEpoch is at least the last one it accepted. When the only broker that
      answers is one that fell behind (the quorum is gone, so it cannot catch up), its older
      view is ignored and counted (`kshim_upstream_feature_views_ignored_total`): the level
      clients see never goes back, and kshim's epoch never decreases, moves only when the
      snapshot clients see changes, and moves whenever its finalized levels do. An
      upstream-owned upgrade through kshim reaches the cluster itself.
  (b) Apache Kafka's feature names belong to the upstream: kshim serves a supported range or
      a finalized level for them only as the upstream advertises and finalizes them (unless
      `kshim_owned` claims them), in front of librdkafka's mock cluster (which advertises no
      features at all) as in front of Kafka 4.1.1 with group.version left unfinalized.
  (c) Runtime protection: a broker that comes back no longer supporting a level kshim
      finalized for a Kafka feature kshim owns is reported on every surface (one log line, the
      `kshim_feature_incompatibilities` gauge, /readyz, /admin/features), and a further
      upgrade of that feature is refused naming the broker; once the broker supports the level
      again the report clears.
  (d) The upgrade audit must see every broker: with a broker that does not answer but is still
      registered, an audited upgrade is refused with FEATURE_UPDATE_FAILED naming the broker.
  (e) CreateTopics racing an audited upgrade cannot leave the cluster at the new level with a
      topic config that level's validator forbids.

Brokers are paused with SIGSTOP and resumed with SIGCONT, by PID, always in a finally; each
test that pauses waits for the whole cluster to be healthy again before it ends. What a
broker holds is asked of the broker itself.

The 3-node cluster is formatted with group.version=0 and runs with broker.session.timeout.ms
at two minutes, so that a paused broker stays registered (and listed in Metadata) for the
whole of a test. The 1-node cluster runs with unstable.feature.versions.enable=true: Kafka
4.1.1 then advertises streams.version 0-1 (and metadata.version 7-29). Without the flag it
does not advertise streams.version at all (a broker leaves out every feature whose highest
version is 0), which in Kafka's terms means it supports level 0 only; share.version is 0-1
either way. Restarting it without the flag takes streams.version 1 away from under kshim.

Run: .venv/bin/python -m pytest tests/interop/test_feature_truth.py -p no:cacheprovider -ra
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass

import pytest

import kafka_env as ke

ADMIN_TOKEN = "feature-truth-" + "3f9a61"
KAFKA_FEATURES = (
    "metadata.version",
    "kraft.version",
    "group.version",
    "transaction.version",
    "share.version",
    "eligible.leader.replicas.version",
    "streams.version",
)
KSHIM_FEATURE = "kshim.interop.version"
AUDIT_FEATURE = "kshim.audit.version"
UNSTABLE = "unstable.feature.versions.enable"

# Kafka error codes and UpdateFeatures upgrade types
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_UPDATE_VERSION = 95
FEATURE_UPDATE_FAILED = 96
UPGRADE, SAFE_DOWNGRADE = 1, 2

REFRESH_MS = 200
CONNECT_TIMEOUT_MS = 1000
BAD_SEGMENT = "1048576"  # Kafka's own minimum; the level-2 validator asks for 2 MiB
MIN_SEGMENT = 2097152
RACES = 50


def uid() -> str:
    return uuid.uuid4().hex[:6]


def poll(fetch, good, timeout: float, interval: float = 0.5):
    """fetch() until good(value), or the timeout; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if good(value) or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def features(bootstrap: str) -> ke.ApiVersionsInfo:
    """ApiVersions v4, so that supported features whose min is 0 are listed too."""
    info = ke.api_versions(bootstrap, version=4)
    assert info.error_code == NONE, f"ApiVersions v4 to {bootstrap}: error {info.error_code}"
    return info


def level(info: ke.ApiVersionsInfo, name: str) -> int:
    return info.finalized.get(name, (0, 0))[1]


def discovered(proxy: ke.KshimProcess) -> bool:
    """kshim has seen the upstream's own API table (Produce is advertised only then)."""
    try:
        return 0 in ke.api_versions(proxy.bootstrap).api_keys
    except (OSError, ke.EnvError):
        return False


def wait_discovered(proxy: ke.KshimProcess, timeout: float = 30) -> None:
    assert ke.wait_until(lambda: discovered(proxy), timeout), (
        f"kshim did not discover the upstream within {timeout}s\n{ke.tail(proxy.log_path)}"
    )


# --------------------------------------------------------------------------------------------
# kshim's admin API (plain HTTP on loopback, bearer token)


class Admin(ke.AdminApi):
    def __init__(self, port: int):
        super().__init__(port, ADMIN_TOKEN)

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        from prometheus_client.parser import text_string_to_metric_families

        status, text = self.get("/metrics")
        assert status == 200 and isinstance(text, str), (status, text)
        return [(s.name, dict(s.labels), s.value)
                for family in text_string_to_metric_families(text) for s in family.samples]

    def metric(self, name: str, **labels: str) -> float | None:
        """The sum of `name`'s samples that carry `labels`; None when kshim exports none."""
        values = [v for n, ls, v in self.metrics() if n == name and all(ls.get(k) == w for k, w in labels.items())]
        return sum(values) if values else None

    def brokers_up(self) -> dict[str, float]:
        return {ls["node"]: v for n, ls, v in self.metrics() if n == "kshim_upstream_broker_up"}


def admin_config(port: int) -> str:
    return f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken = "{ADMIN_TOKEN}"\n'


def upstream_config(bootstrap: str) -> str:
    addresses = json.dumps(bootstrap.split(","))
    return f"""
[upstream]
bootstrap = {addresses}
refresh_interval_ms = {REFRESH_MS}
connect_timeout_ms = {CONNECT_TIMEOUT_MS}
[upstream.listeners]
port_base = 0
"""


def start_proxy(kshim_factory, upstream: str, features_toml: str) -> ke.KshimProcess:
    """kshim in front of `upstream` with an admin API (`.admin`), once it has discovered it."""
    admin_port = ke.free_port()
    proxy = kshim_factory(upstream_config(upstream) + features_toml + admin_config(admin_port), upstream=upstream)
    proxy.admin = Admin(admin_port)
    wait_discovered(proxy)
    return proxy


AUDITED = f"""
[features.ownership]
kshim_owned = ["kshim.*"]
[features.supported]
"{AUDIT_FEATURE}" = {{ min = 0, max = 2 }}
[features.bootstrap]
"{AUDIT_FEATURE}" = 1

[[policy.validators]]
key = "log.segment.bytes"
feature = "{AUDIT_FEATURE}"
level = 2
min = {MIN_SEGMENT}
"""


# --------------------------------------------------------------------------------------------
# raw Kafka requests, one socket each, so that races are decided by kshim and not by a client


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _compact(s: str) -> bytes:
    b = s.encode()
    return ke.encode_uvarint(len(b) + 1) + b


class Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def compact_string(self) -> str | None:
        n, self.pos = ke._uvarint(self.buf, self.pos)
        if n == 0:
            return None
        s = self.buf[self.pos : self.pos + n - 1].decode()
        self.pos += n - 1
        return s

    def uvarint(self) -> int:
        n, self.pos = ke._uvarint(self.buf, self.pos)
        return n

    def tags(self) -> None:
        self.pos = ke._skip_tags(self.buf, self.pos)


class Raw:
    """Sequential Kafka requests on one connection."""

    def __init__(self, bootstrap: str, timeout: float = 30):
        self.sock = socket.create_connection(ke.split_hostport(bootstrap), timeout=timeout)
        self.sock.settimeout(timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, body: bytes, flexible: bool) -> Reader:
        self.correlation += 1
        client = b"feature-truth"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client)) + client
        if flexible:
            header += b"\x00"
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", ke._recv_exact(self.sock, 4))
        r = Reader(ke._recv_exact(self.sock, size))
        got = r.take(">i")
        assert got == self.correlation, f"correlation id {got}, sent {self.correlation}"
        if flexible:
            r.tags()
        return r

    def update_feature(self, feature: str, level: int, upgrade_type: int = UPGRADE,
                       timeout_ms: int = 20000, validate_only: bool = False) -> tuple[int, str | None]:
        """UpdateFeatures v1 for one feature: (error code, message), top-level error first."""
        update = _compact(feature) + struct.pack(">hb", level, upgrade_type) + b"\x00"
        body = struct.pack(">i", timeout_ms) + ke.encode_uvarint(2) + update + struct.pack(">?", validate_only) + b"\x00"
        r = self.call(57, 1, body, flexible=True)
        r.take(">i")  # throttle
        code, message = r.take(">h"), r.compact_string()
        if code != NONE:
            return code, message
        for _ in range(r.uvarint() - 1):
            r.compact_string()
            fcode, fmessage = r.take(">h"), r.compact_string()
            r.tags()
            if fcode != NONE:
                return fcode, fmessage
        return NONE, message

    def create_topic(self, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
        """CreateTopics v4, one topic of one partition and one replica."""
        body = struct.pack(">i", 1) + _str(name) + struct.pack(">ihi", 1, 1, 0)
        body += struct.pack(">i", len(configs))
        for k, v in configs.items():
            body += _str(k) + _str(v)
        body += struct.pack(">i?", 30000, False)
        r = self.call(19, 4, body, flexible=False)
        r.take(">i")
        assert r.take(">i") == 1
        r.string()
        return r.take(">h"), r.string()

    def topic_config(self, topic: str, key: str) -> tuple[int, str | None]:
        """DescribeConfigs v1 of one topic key: (error code, value)."""
        body = struct.pack(">ib", 1, 2) + _str(topic) + struct.pack(">i", 1) + _str(key) + struct.pack(">?", False)
        r = self.call(32, 1, body, flexible=False)
        r.take(">i")
        assert r.take(">i") == 1
        code = r.take(">h")
        r.string()
        r.take(">b")
        r.string()
        value = None
        for _ in range(r.take(">i")):
            name, v = r.string(), r.string()
            r.take(">?b?")
            for _ in range(r.take(">i")):
                r.string(), r.string(), r.take(">b")
            if name == key:
                value = v
        return code, value

    def delete_topic(self, topic: str) -> int:
        """DeleteTopics v3 of one topic: its error code."""
        body = struct.pack(">i", 1) + _str(topic) + struct.pack(">i", 30000)
        r = self.call(20, 3, body, flexible=False)
        r.take(">i")
        assert r.take(">i") == 1
        r.string()
        return r.take(">h")


# --------------------------------------------------------------------------------------------
# pausing brokers


def signal_nodes(cluster: ke.KafkaCluster, sig: int, *node_ids: int) -> None:
    for nid in node_ids:
        node = cluster.node(nid)
        assert node.alive(), f"Kafka node {nid} is not running"
        os.kill(node.pid, sig)


def update_once(bootstrap: str, feature: str, level: int, upgrade_type: int = UPGRADE,
                socket_timeout: float = 30, **kwargs) -> tuple[int, str | None]:
    raw = Raw(bootstrap, timeout=socket_timeout)
    try:
        return raw.update_feature(feature, level, upgrade_type, **kwargs)
    finally:
        raw.close()


def wait_active_controller(broker: str, feature: str, level: int, timeout: float = 60) -> None:
    """A ValidateOnly UpdateFeatures straight to a broker succeeds only once the broker
    reaches an active controller (after a paused controller's successor is elected, and the
    broker's request to the paused one has timed out: controller.socket.timeout.ms)."""
    def probe():
        try:
            return update_once(broker, feature, level, timeout_ms=5000, validate_only=True, socket_timeout=10)
        except (OSError, ke.EnvError) as e:
            return (-1, repr(e))
    answer = poll(probe, lambda a: a[0] == NONE, timeout)
    assert answer[0] == NONE, f"{broker} reaches no active controller: {answer}"


def resume_all_and_wait_healthy(cluster: ke.KafkaCluster, timeout: float = 120) -> None:
    """SIGCONT every node, then wait until every broker is registered everywhere and every
    node reports the same finalized features (the ones that were paused have caught up)."""
    for node in cluster.nodes:
        if node.alive():
            os.kill(node.pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    ke.require_or_fail(cluster.wait_brokers_registered, None, timeout)

    def same_view():
        try:
            views = [features(n.bootstrap).finalized for n in cluster.nodes]
        except (OSError, ke.EnvError, AssertionError):
            return False
        return all(v == views[0] for v in views)

    assert ke.wait_until(same_view, max(5.0, deadline - time.monotonic()), 0.5), (
        "the nodes do not agree on the finalized features after the pause: "
        + repr({n.node_id: features(n.bootstrap).finalized for n in cluster.nodes})
    )


@dataclass(frozen=True)
class Sample:
    t: float
    epoch: int | None
    finalized: tuple
    supported: tuple

    def level(self, name: str) -> int:
        return dict(self.finalized).get(name, (0, 0))[1]


class FeatureSampler:
    """ApiVersions v4 through kshim at 20 Hz in a thread, for the whole of a test."""

    def __init__(self, bootstrap: str, interval: float = 0.05):
        self.bootstrap = bootstrap
        self.interval = interval
        self.samples: list[Sample] = []
        self.errors: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = round(time.monotonic() - self.t0, 2)
            try:
                info = ke.api_versions(self.bootstrap, version=4)
                self.samples.append(Sample(t, info.finalized_epoch, tuple(sorted(info.finalized.items())),
                                           tuple(sorted(info.supported.items()))))
            except (OSError, ke.EnvError, struct.error, IndexError) as e:
                self.errors.append((t, repr(e)))
            self._stop.wait(self.interval)

    def mark(self, what: str) -> str:
        return f"{what} at t={time.monotonic() - self.t0:.2f}s"

    def __enter__(self) -> "FeatureSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def excerpt(samples: list[Sample], name: str, around: int | None = None, width: int = 4) -> str:
    """(t, epoch, level of `name`) for the samples where either changed, or around one index."""
    if around is not None:
        picked = samples[max(0, around - width) : around + width + 1]
    else:
        picked = [s for i, s in enumerate(samples)
                  if i == 0 or (s.epoch, s.level(name)) != (samples[i - 1].epoch, samples[i - 1].level(name))]
    return ", ".join(f"(t={s.t} epoch={s.epoch} {name}={s.level(name)})" for s in picked[:40])


# --------------------------------------------------------------------------------------------
# (b) librdkafka's mock cluster advertises no features: kshim serves none of Kafka's


DECLARED_KAFKA_NAMES = f"""
[features.ownership]
kshim_owned = ["kshim.*"]
[features.supported]
"metadata.version" = {{ min = 7, max = 27 }}
"group.version" = {{ min = 0, max = 1 }}
"transaction.version" = {{ min = 0, max = 2 }}
"share.version" = {{ min = 0, max = 1 }}
"eligible.leader.replicas.version" = {{ min = 0, max = 1 }}
"kraft.version" = {{ min = 0, max = 1 }}
"{KSHIM_FEATURE}" = {{ min = 1, max = 5 }}
[features.bootstrap]
"metadata.version" = 27
"group.version" = 1
"transaction.version" = 2
"{KSHIM_FEATURE}" = 2
"""

DEFAULT_FEATURES = """
[features.ownership]
kshim_owned = ["kshim.*"]
"""


@pytest.fixture(scope="class")
def mock(librdkafka_mock):
    return librdkafka_mock


class TestMockCluster:
    @pytest.mark.parametrize("config", ["default features", "Kafka's names declared"])
    def test_kafka_features_the_mock_does_not_advertise_are_not_served(self, kshim_factory, mock, config):
        """In front of the mock (which answers ApiVersions only up to v2, so it advertises and
        finalizes no feature), kshim's ApiVersions lists none of Apache Kafka's feature names,
        whether kshim's own supported set is its default (Kafka 4.1's) or declares them; a
        feature kshim owns by name is still served."""
        first = mock.bootstrap.split(",")[0]
        assert ke.api_versions(first).error_code == 35, "the mock answers ApiVersions v3 now: read what it advertises"
        toml = DEFAULT_FEATURES if config == "default features" else DECLARED_KAFKA_NAMES
        proxy = start_proxy(kshim_factory, mock.bootstrap, toml)
        via = features(proxy.bootstrap)
        served = {
            "supported": {n: r for n, r in via.supported.items() if n in KAFKA_FEATURES},
            "finalized": {n: r for n, r in via.finalized.items() if n in KAFKA_FEATURES},
        }
        assert served == {"supported": {}, "finalized": {}}, f"kshim serves Kafka features the mock never advertised: {served}"
        if config != "default features":
            assert via.supported.get(KSHIM_FEATURE) == (1, 5), via.supported
            assert level(via, KSHIM_FEATURE) == 2, via.finalized


# --------------------------------------------------------------------------------------------
# the 3-node cluster: (b), (a) and (d)


@pytest.fixture(scope="class")
def three_nodes(kafka_clusters):
    """Three combined nodes, group.version left unfinalized; a paused broker stays registered
    for two minutes, and a broker gives up on a request to a paused controller after 5 s (not
    30). Class-scoped: gone before the 1-node cluster starts."""
    c = kafka_clusters.start(
        3,
        format_args=["--feature", "group.version=0"],
        extra_properties={"broker.session.timeout.ms": "120000", "controller.socket.timeout.ms": "5000"},
    )
    try:
        ke.require_or_fail(c.wait_brokers_registered, None, 90)
        yield c
    finally:
        c.cleanup()


class TestThreeNodes:
    @pytest.fixture
    def cluster(self, three_nodes):
        return three_nodes

    def test_an_unfinalized_kafka_feature_is_shown_as_the_brokers_show_it(self, cluster, kshim_factory):
        """group.version, formatted at 0: every broker advertises 0-1 and none finalizes it;
        kshim (with its default supported set, which has group.version 0-1 finalized at 1 when
        kshim owns it) shows exactly the brokers' supported ranges and finalized levels for
        every Kafka feature name."""
        direct = {n.node_id: features(n.bootstrap) for n in cluster.nodes}
        for info in direct.values():
            assert info.supported.get("group.version") == (0, 1), info.supported
            assert "group.version" not in info.finalized, info.finalized
        broker = direct[1]
        proxy = start_proxy(kshim_factory, cluster.bootstrap, DEFAULT_FEATURES)
        via = features(proxy.bootstrap)
        assert {n: via.supported.get(n) for n in KAFKA_FEATURES} == {n: broker.supported.get(n) for n in KAFKA_FEATURES}
        assert {n: via.finalized.get(n) for n in KAFKA_FEATURES} == {n: broker.finalized.get(n) for n in KAFKA_FEATURES}

    def test_an_older_upstream_view_never_takes_a_level_back(self, cluster, kshim_factory):
        """group.version is upgraded through kshim while node 3 is paused (the brokers finalize
        it); then nodes 1 and 2 are paused and node 3 resumed, so that the only broker that
        answers is one with an older view (lower epoch, group.version absent) that cannot catch
        up. Sampled at 20 Hz for the whole test, kshim's epoch never decreases and moves only
        when its snapshot changes (and whenever its finalized levels do), group.version never
        goes back to 0 once seen at 1, and the ignored views are counted."""
        proxy = start_proxy(kshim_factory, cluster.bootstrap, DEFAULT_FEATURES)
        admin = proxy.admin
        node1, node3 = cluster.node(1).bootstrap, cluster.node(3).bootstrap
        assert level(features(proxy.bootstrap), "group.version") == 0
        log = []
        with FeatureSampler(proxy.bootstrap) as sampler:
            try:
                signal_nodes(cluster, signal.SIGSTOP, 3)
                log.append(sampler.mark("node 3 paused"))
                assert ke.wait_until(lambda: admin.brokers_up().get("3") == 0, 20), (
                    f"kshim does not see node 3 as down: {admin.brokers_up()}")
                wait_active_controller(node1, "group.version", 1)
                before = features(node1)

                code, message = update_once(proxy.bootstrap, "group.version", 1, timeout_ms=30000)
                log.append(sampler.mark("group.version upgraded through kshim"))
                assert code == NONE, f"the upgrade through kshim failed: {code} {message}"
                # The broker's own view (Admin.describeFeatures reads ApiVersions) has it.
                on_broker = poll(lambda: features(node1), lambda i: level(i, "group.version") == 1, 10)
                assert level(on_broker, "group.version") == 1, on_broker.finalized
                assert on_broker.finalized_epoch > before.finalized_epoch
                assert ke.wait_until(lambda: level(features(proxy.bootstrap), "group.version") == 1, 10)

                signal_nodes(cluster, signal.SIGSTOP, 1, 2)
                signal_nodes(cluster, signal.SIGCONT, 3)
                log.append(sampler.mark("nodes 1 and 2 paused, node 3 resumed"))
                # Node 3 alone answers, with its older view ...
                stale = ke.wait_until(lambda: _answers(node3), 20)
                assert stale, "node 3 does not answer ApiVersions after SIGCONT"
                assert "group.version" not in stale.finalized, stale.finalized
                assert stale.finalized_epoch < on_broker.finalized_epoch, (stale.finalized_epoch, on_broker.finalized_epoch)
                log.append(sampler.mark(f"node 3 answers with epoch {stale.finalized_epoch} "
                                        f"(nodes 1 and 2 were at {on_broker.finalized_epoch})"))
                # ... and kshim has refreshed from it alone, several times.
                assert ke.wait_until(lambda: admin.brokers_up() == {"1": 0, "2": 0, "3": 1}, 30), (
                    f"kshim never saw node 3 as the only broker up: {admin.brokers_up()}")
                refreshed = admin.metric("kshim_upstream_refreshes_total", result="ok")
                assert ke.wait_until(
                    lambda: admin.metric("kshim_upstream_refreshes_total", result="ok") >= refreshed + 3, 30), (
                    "kshim did not refresh three times from node 3 alone")
                assert admin.brokers_up() == {"1": 0, "2": 0, "3": 1}
                still_stale = features(node3)
                assert "group.version" not in still_stale.finalized, "node 3 caught up: the quorum was not lost"
                log.append(sampler.mark("kshim refreshed from node 3 alone"))
            finally:
                resume_all_and_wait_healthy(cluster)
            log.append(sampler.mark("cluster healthy again"))
            assert ke.wait_until(lambda: admin.brokers_up() == {"1": 1, "2": 1, "3": 1}, 30), admin.brokers_up()
            assert ke.wait_until(lambda: level(features(proxy.bootstrap), "group.version") == 1, 10)
            n = len(sampler.samples)
            assert ke.wait_until(lambda: len(sampler.samples) >= n + 20, 10)  # a second of the recovered cluster
        ignored = admin.metric("kshim_upstream_feature_views_ignored_total")

        samples = sampler.samples
        print("\n".join(log))
        print(f"{len(samples)} samples; changes: {excerpt(samples, 'group.version')}")
        assert len(samples) > 100 and not sampler.errors, (len(samples), sampler.errors[:5])
        first_seen = next((i for i, s in enumerate(samples) if s.level("group.version") == 1), None)
        assert first_seen is not None, f"kshim never showed group.version 1: {excerpt(samples, 'group.version')}"
        pairs = list(zip(samples, samples[1:]))
        decreases = [f"{a.epoch}->{b.epoch} at t={b.t}" for a, b in pairs if b.epoch < a.epoch]
        lost = [i for i in range(first_seen, len(samples)) if samples[i].level("group.version") == 0]
        silent = [f"t={b.t}: {dict(a.finalized)} -> {dict(b.finalized)}" for a, b in pairs
                  if b.epoch == a.epoch and b.finalized != a.finalized]
        idle = [f"{a.epoch}->{b.epoch} at t={b.t}" for a, b in pairs
                if b.epoch != a.epoch and (b.finalized, b.supported) == (a.finalized, a.supported)]
        assert {
            "epoch decreases": decreases,
            "group.version 0 again after 1": [excerpt(samples, "group.version", around=lost[0])] if lost else [],
            "finalized levels changed, epoch did not": silent[:5],
            "epoch moved, snapshot did not": idle[:5],
            "ignored upstream views counted": ignored is not None and ignored > 0,
        } == {
            "epoch decreases": [],
            "group.version 0 again after 1": [],
            "finalized levels changed, epoch did not": [],
            "epoch moved, snapshot did not": [],
            "ignored upstream views counted": True,
        }, (f"kshim_upstream_feature_views_ignored_total={ignored}; {'; '.join(log)}; "
            f"where (epoch, group.version) changed: {excerpt(samples, 'group.version')}")

    def test_the_audit_refuses_when_a_registered_broker_does_not_answer(self, cluster, kshim_factory):
        """Broker 2 is paused (still registered, still listed in Metadata) and kshim has seen
        that it does not answer: an upgrade of a feature with validators at the target level
        is refused with FEATURE_UPDATE_FAILED naming broker 2, and the level stays."""
        proxy = start_proxy(kshim_factory, cluster.bootstrap, AUDITED)
        assert level(features(proxy.bootstrap), AUDIT_FEATURE) == 1
        try:
            signal_nodes(cluster, signal.SIGSTOP, 2)
            assert ke.wait_until(lambda: proxy.admin.brokers_up().get("2") == 0, 20), (
                f"kshim does not see broker 2 as down: {proxy.admin.brokers_up()}")
            listed = sorted(b[0] for b in ke.metadata_brokers(cluster.node(1).bootstrap))
            assert listed == [1, 2, 3], f"broker 2 dropped out of Metadata: {listed}"
            raw = Raw(proxy.bootstrap)
            try:
                code, message = raw.update_feature(AUDIT_FEATURE, 2, UPGRADE)
            finally:
                raw.close()
            after = level(features(proxy.bootstrap), AUDIT_FEATURE)
        finally:
            resume_all_and_wait_healthy(cluster)
        assert code == FEATURE_UPDATE_FAILED, f"expected FEATURE_UPDATE_FAILED (96), got {code}: {message}"
        assert message is not None and "broker 2" in message.lower(), message
        assert after == 1, f"{AUDIT_FEATURE} moved to {after}"


def _answers(bootstrap: str) -> ke.ApiVersionsInfo | None:
    try:
        return features(bootstrap)
    except (OSError, ke.EnvError, AssertionError):
        return None


# --------------------------------------------------------------------------------------------
# the 1-node cluster with unstable feature versions: (e) and (c)


STREAMS_OWNED = """
[features.ownership]
kshim_owned = ["streams.version"]
[features.supported]
"streams.version" = { min = 0, max = 1 }
[features.bootstrap]
"streams.version" = 0
"""


@pytest.fixture(scope="class")
def one_node(kafka_clusters):
    """One node that advertises unstable feature versions (streams.version 0-1); its own
    finalized levels are those of 4.1-IV1 with streams.version 0, so that it also starts
    without the flag."""
    c = kafka_clusters.start(
        1,
        format_args=["--release-version", "4.1-IV1", "--feature", "streams.version=0"],
        extra_properties={UNSTABLE: "true"},
    )
    try:
        yield c
    finally:
        c.cleanup()


class TestOneNode:
    @pytest.fixture
    def cluster(self, one_node):
        return one_node

    # On a loaded machine a broker can apply a topic kshim's CreateTopics just created only
    # after a racing audit began: the audit reads from brokers that have applied everything
    # committed when it began (seen failing before that, once in four two-worker runs).
    def test_create_topics_racing_an_audited_upgrade(self, cluster, kshim_factory):
        """50 races of CreateTopics (segment.bytes=1 MiB: allowed at level 1, refused by the
        level-2 validator) against an upgrade of its feature from 1 to 2, each on its own
        connection, released together. Afterwards never both the topic with 1 MiB segments
        (asked of the broker) and the feature at level 2; and each answer says what happened."""
        proxy = start_proxy(kshim_factory, cluster.bootstrap, AUDITED)
        assert level(features(proxy.bootstrap), AUDIT_FEATURE) == 1
        creator, upgrader, broker = Raw(proxy.bootstrap), Raw(proxy.bootstrap), Raw(cluster.bootstrap)
        outcomes = {"topic won": 0, "upgrade won": 0, "both": 0, "neither": 0}
        both, inconsistent = [], []
        started = time.monotonic()
        try:
            for i in range(RACES):
                topic = f"race-{i}-{uid()}"
                gate = threading.Barrier(2)
                answers = {}

                def create():
                    gate.wait()
                    answers["create"] = creator.create_topic(topic, {"segment.bytes": BAD_SEGMENT})

                def upgrade():
                    gate.wait()
                    answers["upgrade"] = upgrader.update_feature(AUDIT_FEATURE, 2, UPGRADE)

                threads = [threading.Thread(target=create), threading.Thread(target=upgrade)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=60)
                assert set(answers) == {"create", "upgrade"}, f"race {i}: a request got no answer: {answers}"

                created = answers["create"][0] == NONE
                if created:
                    # The broker applies a new topic a moment after the controller answered.
                    ke.wait_until(lambda: broker.topic_config(topic, "segment.bytes")[0] == NONE, 10, 0.05)
                code, value = broker.topic_config(topic, "segment.bytes")
                exists = code == NONE
                at = level(features(proxy.bootstrap), AUDIT_FEATURE)
                if exists and value == BAD_SEGMENT and at == 2:
                    outcomes["both"] += 1
                    both.append(f"race {i}: {answers}")
                elif exists:
                    outcomes["topic won"] += 1
                elif at == 2:
                    outcomes["upgrade won"] += 1
                else:
                    outcomes["neither"] += 1
                if created != exists or (answers["upgrade"][0] == NONE) != (at == 2):
                    inconsistent.append(f"race {i}: answers {answers}, topic on broker: {code}/{value}, level {at}")

                if exists:
                    assert broker.delete_topic(topic) == NONE
                    assert ke.wait_until(
                        lambda: broker.topic_config(topic, "segment.bytes")[0] == UNKNOWN_TOPIC_OR_PARTITION, 15, 0.05
                    ), f"race {i}: {topic} is still on the broker"
                if at == 2:
                    code, why = upgrader.update_feature(AUDIT_FEATURE, 1, SAFE_DOWNGRADE)
                    assert code == NONE, f"race {i}: the downgrade back to 1 failed: {code} {why}"
                assert level(features(proxy.bootstrap), AUDIT_FEATURE) == 1
        finally:
            for c in (creator, upgrader, broker):
                c.close()
        print(f"\n{RACES} races in {time.monotonic() - started:.1f}s: {outcomes}")
        assert {"both": both[:5], "answers that disagree with the cluster": inconsistent[:5]} == {
            "both": [], "answers that disagree with the cluster": []}, outcomes

    def test_a_broker_that_stops_supporting_a_kshim_level_is_reported(self, cluster, kshim_factory):
        """kshim owns streams.version and finalizes it at 1 while the broker advertises 0-1.
        The broker restarted without unstable versions no longer advertises it (level 0 only):
        kshim logs it once, and the gauge, /readyz and /admin/features report it; a further
        upgrade is refused naming the broker. The broker restarted with them again clears
        every report, and the same upgrade goes through."""
        node = cluster.nodes[0]
        direct = features(node.bootstrap)
        assert direct.supported.get("streams.version") == (0, 1), direct.supported
        assert "streams.version" not in direct.finalized, direct.finalized
        proxy = start_proxy(kshim_factory, cluster.bootstrap, STREAMS_OWNED)
        admin = proxy.admin
        code, why = update_once(proxy.bootstrap, "streams.version", 1)
        assert code == NONE, f"the upgrade through kshim failed: {code} {why}"
        assert level(features(proxy.bootstrap), "streams.version") == 1
        assert "streams.version" not in features(node.bootstrap).finalized, "kshim's level reached the broker"

        def surfaces() -> dict:
            _, ready = admin.get("/readyz")
            _, described = admin.get("/admin/features")
            return {
                "gauge": admin.metric("kshim_feature_incompatibilities"),
                "readyz": ready.get("checks", {}).get("feature_incompatibilities") if isinstance(ready, dict) else ready,
                "features": described.get("incompatibilities") if isinstance(described, dict) else described,
                "log": incompatibility_lines(proxy.log_text()),
            }

        def refreshes() -> float:
            return admin.metric("kshim_upstream_refreshes_total", result="ok") or 0

        before = surfaces()
        restart(cluster, unstable=False)
        assert "streams.version" not in features(node.bootstrap).supported
        reported = poll(surfaces, lambda s: report_of(s) == REPORTED, 20)
        mark = refreshes()  # ten more refreshes: still the one log line
        assert ke.wait_until(lambda: refreshes() >= mark + 10, 30), "kshim stopped refreshing"
        reported_later = surfaces()
        further = update_once(proxy.bootstrap, "streams.version", 1)
        level_after_refusal = level(features(proxy.bootstrap), "streams.version")

        restart(cluster, unstable=True)
        assert features(node.bootstrap).supported.get("streams.version") == (0, 1)
        cleared = poll(surfaces, lambda s: report_of(s) == CLEARED, 20)
        again = update_once(proxy.bootstrap, "streams.version", 1)

        assert {
            "before": report_of(before),
            "broker without streams.version": report_of(reported),
            "ten refreshes later": report_of(reported_later),
            "further upgrade": refusal(further),
            "level after it": level_after_refusal,
            "broker at 0-1 again": report_of(cleared),
            "the same upgrade then": again[0],
        } == {
            "before": NO_REPORT,
            "broker without streams.version": REPORTED,
            "ten refreshes later": REPORTED,
            "further upgrade": REFUSED,
            "level after it": 1,
            "broker at 0-1 again": CLEARED,
            "the same upgrade then": NONE,
        }, f"surfaces: {reported_later}; further upgrade: {further}; after the broker came back: {cleared}, {again}"


LOGGED = "names streams.version, broker 1 and level 1"
# The broker advertises no range for it: null (a range text "0" or "0-0" is read as null too).
INCOMPATIBILITY = {"feature": "streams.version", "level": 1, "supporter": "Broker 1", "supported": None}
# What each surface shows, as report_of() reads them.
REPORTED = {"gauge": 1, "readyz": ["names streams.version and broker 1"], "features": [INCOMPATIBILITY],
            "log": [LOGGED]}
NO_REPORT = {"gauge": 0, "readyz": [], "features": [], "log": []}
CLEARED = {**NO_REPORT, "log": [LOGGED]}
REFUSED = {"INVALID_UPDATE_VERSION or FEATURE_UPDATE_FAILED": True, "names broker 1 and streams.version": True}


def report_of(s: dict) -> dict:
    """The surfaces in a comparable form: readyz strings and log lines by what they name; a
    broker's level-0-only support written as null, "0" or "0-0"."""
    readyz = s["readyz"]
    if isinstance(readyz, list):
        readyz = ["names streams.version and broker 1" if isinstance(x, str) and "streams.version" in x
                  and "broker 1" in x.lower() else x for x in readyz]
    found = s["features"]
    if isinstance(found, list):
        # The keys the contract names; kshim adds the message and any config findings beside them.
        found = [{k: f.get(k) for k in ("feature", "level", "supporter", "supported")} if isinstance(f, dict) else f
                 for f in found]
        found = [{**f, "supported": None} if isinstance(f, dict) and f.get("supported") in ("0", "0-0") else f
                 for f in found]
    log = []
    for line in s["log"]:
        rest = re.sub(r"broker 1", "", line, flags=re.I)
        names_level = re.search(r"(?<![\w.-])1(?![\w.-])", rest)
        log.append(LOGGED if names_level else line)
    return {"gauge": s["gauge"], "readyz": readyz, "features": found, "log": log}


def refusal(answer: tuple[int, str | None]) -> dict:
    code, why = answer
    return {
        "INVALID_UPDATE_VERSION or FEATURE_UPDATE_FAILED": code == INVALID_UPDATE_VERSION,
        "names broker 1 and streams.version": bool(why) and "broker 1" in why.lower() and "streams.version" in why,
    }


def restart(cluster: ke.KafkaCluster, *, unstable: bool) -> None:
    """Restart the 1-node cluster's node with or without unstable feature versions."""
    node = cluster.nodes[0]
    if unstable:
        cluster.extra_properties[UNSTABLE] = "true"
    else:
        cluster.extra_properties.pop(UNSTABLE, None)
    cluster.stop_node(node.node_id)
    cluster._write_properties(node)
    try:
        cluster.start_node(node.node_id)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    ke.require_or_fail(cluster.wait_brokers_registered, None, 60)


def incompatibility_lines(log: str) -> list[str]:
    """kshim's reports of a conflict naming streams.version and broker 1 (the part after the
    level). The refusal of an UpdateFeatures names it too; that is an answer, not a report."""
    out = []
    for line in log.splitlines():
        m = re.search(r"\s(WARN|ERROR)\s(.*)$", line)
        if m and "UpdateFeatures refused" in m.group(2):
            continue
        if m and "streams.version" in m.group(2) and re.search(r"broker 1(?!\d)", m.group(2), re.I):
            out.append(m.group(2))
    return out
