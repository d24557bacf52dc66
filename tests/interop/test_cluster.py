"""A kshim cluster: three kshim instances in front of one three-broker Kafka 4.1.1 cluster share
one feature state and one set of config overrides, kept in a compacted topic on that cluster.

  (a) UpdateFeatures at A is served by B and C with the same levels and the same epoch; the
      state topic exists, compacted, with one partition; GET /admin/cluster lists all three.
  (b) 300 random UpdateFeatures (upgrades, downgrades, validate-only, out-of-range) sent
      concurrently to all three: the applied history read back from the state topic is one
      total order (distinct, increasing epochs), each applied change was a valid decision on the
      state before it and answers exactly one acknowledged request, and every instance's
      ApiVersions series is a prefix-consistent view of that order.
  (c) A writer paused (SIGSTOP) for 20 s between writing a change and committing it, while
      another instance takes over and writes: once resumed, its change fails and nothing it
      decided appears in the state, before or after the newer writer's record.
  (d) A writer killed (SIGKILL) between writing and committing: its change is visible on no
      instance, and the others go on.
  (e) The state partition's leader broker stopped under a steady stream of updates: updates
      pause and resume, and every acknowledged update is in the state topic.
  (f) A config change (PATCH, then DELETE) at A is applied by B and C; an instance that cannot
      resolve the new value keeps its previous config and reports why in /admin/cluster.
  (g) An instance whose supported range excludes a finalized level refuses to start; an
      instance that supports only up to level 3 blocks an upgrade to 4 while it is live
      ("kshim instance ... only supports versions 0-3"), and not after it has stopped (clean
      stop: at once; SIGKILL: after the session timeout).
  (i) A second kshim cluster (another cluster.id) on the same upstream and the same topic sees
      none of the first one's state.
  (j) A writer whose connections to the state partition's leader closed while it was idle (the
      leader restarted) writes its next change at the first try.

Run: .venv/bin/python -m pytest tests/interop/test_cluster.py -p no:cacheprovider -ra
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
import time
import uuid

import pytest

import kafka_env as ke

FEATURE = "kshim.cluster.version"
TOPIC = "__kshim_state"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh
ADMIN_TOKEN = "cluster-" + "7d1c42"
SESSION_TIMEOUT_MS = 4000
NONE, CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER = 0, 31, 41
REQUEST_TIMED_OUT, INVALID_UPDATE_VERSION = 7, 95
UPGRADE, SAFE_DOWNGRADE = 1, 2


wait_until = ke.wait_until


def update_features(bootstrap: str, level: int, upgrade_type: int = UPGRADE, validate_only: bool = False,
                    feature: str = FEATURE, timeout: float = 40.0) -> tuple[int, str]:
    return ke.raw_update_features(bootstrap, feature, level, upgrade_type, validate_only, timeout)


def may_alter(bootstrap: str) -> int:
    """The error code of a validate-only update to the level in force: NONE when the caller
    may alter the cluster, whatever the level."""
    return update_features(bootstrap, served(bootstrap)[1], UPGRADE, validate_only=True)[0]


def served(bootstrap: str) -> tuple[int, int]:
    """(epoch, level of FEATURE) as ApiVersions v4 shows them."""
    info = ke.api_versions(bootstrap, version=4)
    assert info.error_code == NONE
    return info.finalized_epoch, info.finalized.get(FEATURE, (0, 0))[1]


# --------------------------------------------------------------------------------------------
# The admin API


class Admin(ke.AdminApi):
    def __init__(self, port: int):
        super().__init__(port, ADMIN_TOKEN)

    def cluster(self) -> dict:
        status, doc = self.call("GET", "/admin/cluster")
        assert status == 200, (status, doc)
        return doc

    def ready(self) -> bool:
        try:
            return self.call("GET", "/readyz")[0] == 200
        except OSError:
            return False


# --------------------------------------------------------------------------------------------
# Instances


def member_config(cluster_id: str, instance: str, admin_port: int, *, supported=(0, 5), bootstrap_level=1,
                  extra: str = "") -> str:
    return f"""
node_id = 1
[cluster]
id = "{cluster_id}"
instance_id = "{instance}"
session_timeout_ms = {SESSION_TIMEOUT_MS}
heartbeat_interval_ms = 1000
transaction_timeout_ms = 3000
write_timeout_ms = 20000
[features.ownership]
kshim_owned = ["kshim.*"]
[features.supported]
"{FEATURE}" = {{ min = {supported[0]}, max = {supported[1]} }}
[features.bootstrap]
"{FEATURE}" = {bootstrap_level}
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{ADMIN_TOKEN}"
{extra}
"""


def start_member(kshim_factory, kafka, cluster_id: str, instance: str, *, wait_ready: bool = True,
                 env: dict | None = None, **kwargs) -> ke.KshimProcess:
    admin_port = ke.free_port()
    proc = kshim_factory(member_config(cluster_id, instance, admin_port, **kwargs), upstream=kafka.bootstrap,
                         env=env)
    proc.admin = Admin(admin_port)
    proc.instance = instance
    if wait_ready:
        assert wait_until(proc.admin.ready, 60), f"{instance} not ready\n{ke.tail(proc.log_path)}"
    return proc


def live_view(member) -> set[str]:
    return {i["instance_id"] for i in member.admin.cluster()["instances"] if i["live"]}


def applied_offset(member) -> int:
    """The next state-topic offset `member` will apply: it has read everything below it."""
    return next(i["applied_offset"] for i in member.admin.cluster()["instances"] if i["self"])


def wait_live_view(member, expected: set[str]) -> None:
    """A starting instance counts every registration it reads as live for one session
    timeout (as a new KRaft controller counts every registered broker): wait until the ones
    that are gone have expired in its view."""
    assert wait_until(lambda: live_view(member) == expected, SESSION_TIMEOUT_MS / 1000 + 5), live_view(member)


def state_records(kafka, cluster_id: str) -> list[tuple[int, str, dict | None]]:
    """(offset, key without the cluster prefix, value) of every committed record of `cluster_id`."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap.split(","), isolation_level="read_committed",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for m in batch:
                    key = m.key.decode()
                    prefix = f"{cluster_id}/"
                    if key.startswith(prefix):
                        out.append((m.offset, key[len(prefix):], None if m.value is None else json.loads(m.value)))
        assert consumer.position(tp) >= end, "the state topic was not read to its end"
        return out
    finally:
        consumer.close()


def state_topic_end(kafka) -> int:
    """The state topic's high watermark: past every record written to it, committed or not."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap.split(","), enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(TOPIC, 0)
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def feature_history(kafka, cluster_id: str) -> list[dict]:
    return [v for _, k, v in state_records(kafka, cluster_id) if k == "features"]


def converged(members, timeout: float = 10.0) -> tuple[int, int]:
    """Waits until every member serves the same (epoch, level); returns it."""
    views = {}

    def same():
        views.clear()
        views.update({m.instance: served(m.bootstrap) for m in members})
        return len(set(views.values())) == 1

    assert wait_until(same, timeout), f"members did not converge: {views}"
    return next(iter(views.values()))


# --------------------------------------------------------------------------------------------
# Fixtures: the shared three-broker cluster and one kshim cluster of three for the module


@pytest.fixture(scope="module")
def kafka(kafka_trio):
    """The shared three-broker cluster; each kshim cluster here keeps to a state topic of its own."""
    return kafka_trio


@pytest.fixture(scope="module")
def cluster_id():
    return "east-" + uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def members(kafka, kshim_binary, cluster_id):
    made = []

    def factory(config_toml, **kwargs):
        proc = ke.KshimProcess(config_toml, binary=kshim_binary, **kwargs)
        made.append(proc)
        return ke.start_or_fail(proc)

    trio = [start_member(factory, kafka, cluster_id, f"kshim-{name}") for name in "abc"]
    yield trio
    for proc in made:
        proc.cleanup()


# --------------------------------------------------------------------------------------------


def test_a_change_at_one_instance_is_served_by_all(kafka, members, cluster_id):
    a, b, c = members
    # The state topic: created by kshim, compacted, one partition, replicated three times.
    rc, out, err = ke.run_java([TOPIC_COMMAND, "--bootstrap-server", kafka.bootstrap,
                                "--describe", "--topic", TOPIC], timeout=60)
    assert rc == 0, err
    assert "PartitionCount: 1" in out and "ReplicationFactor: 3" in out, out
    assert "cleanup.policy=compact" in out and "min.insync.replicas=2" in out, out

    epoch0, level0 = converged(members)
    target = 3 if level0 != 3 else 2
    kind = UPGRADE if target > level0 else SAFE_DOWNGRADE
    assert update_features(a.bootstrap, target, kind) == (NONE, "")
    # A answers only once it serves the change itself.
    assert served(a.bootstrap) == (epoch0 + 1, target)
    assert converged(members, timeout=2.0) == (epoch0 + 1, target)

    doc = a.admin.cluster()
    ids = {i["instance_id"]: i for i in doc["instances"]}
    assert set(ids) >= {"kshim-a", "kshim-b", "kshim-c"}, doc
    assert all(ids[m.instance]["live"] for m in members), doc
    assert ids["kshim-a"]["self"] and ids["kshim-a"]["epoch"] == epoch0 + 1, doc
    assert doc["caught_up"] and doc["state_topic"] == TOPIC, doc
    # Registrations are renewed asynchronously: B counts all three once it has read each one.
    def cluster_metrics():
        status, metrics = b.admin.call("GET", "/metrics")
        assert status == 200 and isinstance(metrics, str), status
        return [line for line in metrics.splitlines() if line.startswith("kshim_cluster_")]

    expected = ["kshim_cluster_caught_up 1", "kshim_cluster_state_reachable 1", "kshim_cluster_live_instances 3",
                "kshim_cluster_config_apply_failed 0"]
    assert wait_until(lambda: set(expected) <= set(cluster_metrics()), 5), cluster_metrics()


def test_concurrent_updates_form_one_total_order(kafka, members, cluster_id):
    """(b) 300 random updates over three instances at once."""
    rng = random.Random(584)
    requests = []
    for i in range(300):
        level = rng.randint(0, 6)  # 6 is outside every instance's range
        kind = rng.choice([UPGRADE, UPGRADE, SAFE_DOWNGRADE, SAFE_DOWNGRADE])
        requests.append((members[i % 3], level, kind, rng.random() < 0.15))
    results: list[tuple[str, int, int, bool, int, str]] = []
    series: dict[str, list[tuple[int, int]]] = {m.instance: [] for m in members}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            for m in members:
                series[m.instance].append(served(m.bootstrap))
            time.sleep(0.005)

    def send(batch):
        for member, level, kind, validate in batch:
            code, message = update_features(member.bootstrap, level, kind, validate)
            results.append((member.instance, level, kind, validate, code, message))

    before = len(feature_history(kafka, cluster_id))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    workers = [threading.Thread(target=send, args=(requests[i::6],)) for i in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    stop.set()
    sampler.join(timeout=10)
    assert len(results) == 300, "some requests never came back"

    codes = {code for *_, code, _ in results}
    odd = [(name, code, message) for name, _, _, _, code, message in results
           if code not in (NONE, INVALID_UPDATE_VERSION, NOT_CONTROLLER)]
    assert not odd, odd[:5]
    history = feature_history(kafka, cluster_id)
    applied = history[before - 1:] if before else history
    epochs = [r["epoch"] for r in applied]
    assert epochs == sorted(set(epochs)), f"epochs not distinct and increasing: {epochs}"

    # Every applied change was a valid decision on the state before it, and answers one
    # acknowledged, non-validate-only request for that level and direction.
    acknowledged = [(lvl, kind) for _, lvl, kind, validate, code, _ in results if code == NONE and not validate]
    changes = 0
    for prev, cur in zip(applied, applied[1:]):
        p, c = prev["levels"].get(FEATURE, 0), cur["levels"].get(FEATURE, 0)
        if p == c:
            continue  # an epoch for the upstream's levels, not for this feature
        assert 0 <= c <= 5, cur
        kind = UPGRADE if c > p else SAFE_DOWNGRADE
        assert (c, kind) in acknowledged, f"applied {p}->{c} with no acknowledged request for it"
        acknowledged.remove((c, kind))
        changes += 1
    # What is left acknowledged were no-ops (the level was already there).
    assert changes > 20, f"only {changes} changes applied out of 300 requests"
    assert not any(code == NONE and lvl == 6 for _, lvl, _, _, code, _ in results), "level 6 accepted"
    assert not any(code == NONE and validate and False for *_, validate, code, _ in results)

    # Every instance's series is a prefix-consistent view of that order.
    level_at = {r["epoch"]: r["levels"].get(FEATURE, 0) for r in history}
    for name, points in series.items():
        assert points, name
        seen_epochs = [e for e, _ in points]
        assert seen_epochs == sorted(seen_epochs), f"{name}: epoch went back"
        for epoch, lvl in points:
            assert level_at.get(epoch) == lvl, f"{name} served level {lvl} at epoch {epoch}, the log says {level_at.get(epoch)}"
    final = converged(members, timeout=3)
    assert final == (applied[-1]["epoch"], applied[-1]["levels"].get(FEATURE, 0))
    print(f"(b) {changes} changes applied; codes: "
          + ", ".join(f"{c}: {sum(1 for *_, k, _ in results if k == c)}" for c in sorted(codes)))


def test_config_changes_reach_every_instance(members, tmp_path):
    """(f) PATCH at A applies at B and C; an instance that cannot apply keeps its config."""
    a, b, c = members
    status, doc = a.admin.call("PATCH", "/admin/config", {"authorization.alter_cluster": ["User:nobody"]})
    assert status == 200, (status, doc)
    for m in members:
        assert wait_until(lambda m=m: may_alter(m.bootstrap) == CLUSTER_AUTHORIZATION_FAILED, 3), f"{m.instance} still lets everyone alter"
        status, overrides = m.admin.call("GET", "/admin/config")
        assert status == 200 and overrides.get("authorization.alter_cluster") == ["User:nobody"], overrides
    versions = {i["instance_id"]: i["config_version"] for i in a.admin.cluster()["instances"]}
    assert wait_until(lambda: len({i["config_version"] for i in a.admin.cluster()["instances"]
                                   if i["instance_id"] in versions}) == 1, 5), a.admin.cluster()
    status, doc = c.admin.call("DELETE", "/admin/config/authorization.alter_cluster")
    assert status == 200, (status, doc)
    for m in members:
        assert wait_until(lambda m=m: may_alter(m.bootstrap) == NONE, 3), m.instance


def _served_certificate(port: int, certs) -> bytes | None:
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(certs.ca))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                return s.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None


def _der(pem_path) -> bytes:
    import ssl

    text = pem_path.read_text()
    first = text[text.index("-----BEGIN CERTIFICATE-----"):text.index("-----END CERTIFICATE-----") + 25]
    return ssl.PEM_cert_to_DER_cert(first)


def test_a_certificate_rotated_at_one_instance_is_served_by_all(kafka, kshim_factory, tmp_path):
    """(f) PATCH of the listener certificate at A: new handshakes at B and C see it."""
    import tls_support as tls

    certs = tls.make_certs(tmp_path / "certs")
    trio = [start_member(kshim_factory, kafka, "tls-" + tmp_path.name[-6:], f"kshim-t{i}",
                         extra=tls.tls_table(certs)) for i in range(3)]
    old, new = _der(certs.server), _der(certs.ec_server)
    assert [_served_certificate(m.port, certs) for m in trio] == [old] * 3
    status, doc = trio[0].admin.call("PATCH", "/admin/config", {
        "tls.certificate": str(certs.ec_server), "tls.key": str(certs.ec_server_key_pkcs8)})
    assert status == 200, (status, doc)
    assert _served_certificate(trio[0].port, certs) == new, "A answered before serving the new certificate"
    for m in trio[1:]:
        assert wait_until(lambda m=m: _served_certificate(m.port, certs) == new, 5), m.instance
    for m in trio:
        m.stop()


def test_an_instance_that_cannot_apply_keeps_its_config(kafka, kshim_factory, members, cluster_id, tmp_path):
    """(f) A value that resolves on A but not on D: D keeps its config and says why."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "acl.properties").write_text("principals=User:alice\n")
    allowed = f'[config_providers]\nfile_allowed_paths = ["{secrets}"]\n'
    # D may read placeholders only from another directory: the value cannot be resolved there,
    # as a certificate file missing on one host cannot.
    other_dir = tmp_path / "elsewhere"
    elsewhere = f'[config_providers]\nfile_allowed_paths = ["{other_dir}"]\n'
    d = start_member(kshim_factory, kafka, cluster_id, "kshim-d", extra=elsewhere)
    try:
        a = members[0]
        a2 = start_member(kshim_factory, kafka, cluster_id, "kshim-a2", extra=allowed)
        value = f"${{file:{secrets}/acl.properties:principals}}"
        status, doc = a2.admin.call("PATCH", "/admin/config", {"authorization.alter_cluster": [value]})
        assert status == 200, (status, doc)

        def d_reports():
            me = [i for i in a.admin.cluster()["instances"] if i["instance_id"] == "kshim-d"]
            return me and me[0].get("apply_error")

        error = wait_until(d_reports, 10)
        assert error and "not below config_providers.file_allowed_paths" in error, a.admin.cluster()
        # D kept its previous config: everyone may still alter there.
        assert may_alter(d.bootstrap) == NONE
        assert may_alter(a2.bootstrap) == CLUSTER_AUTHORIZATION_FAILED
        status, doc = a2.admin.call("DELETE", "/admin/config/authorization.alter_cluster")
        assert status == 200, (status, doc)
        assert wait_until(lambda: not d_reports(), 10), a.admin.cluster()
        a2.stop()
    finally:
        d.stop()


def test_a_topic_that_cannot_hold_the_state_is_refused(kafka, kshim_binary):
    """(2) An existing state topic with more than one partition, or not compacted, stops kshim
    at startup with a message that says so."""
    from kafka.admin import KafkaAdminClient, NewTopic

    two, deleting = "state-two-" + uuid.uuid4().hex[:6], "state-delete-" + uuid.uuid4().hex[:6]
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap.split(","))
    try:
        admin.create_topics([NewTopic(two, 2, 1, topic_configs={"cleanup.policy": "compact"}),
                             NewTopic(deleting, 1, 1)])
    finally:
        admin.close()
    for topic, expected in ((two, "it has 2 partitions; a state topic must have exactly one"),
                            (deleting, 'its cleanup.policy is "delete"; a state topic must be "compact"')):
        config = member_config("refused", "kshim-r", ke.free_port()).replace(
            "[cluster]\n", f'[cluster]\nstate_topic = "{topic}"\n')
        proc = ke.KshimProcess(config, binary=kshim_binary, upstream=kafka.bootstrap)
        try:
            # Its port may accept for a moment (bound before the topic is checked): what
            # counts is that the process ends, with an error.
            try:
                proc.start()
            except ke.EnvError:
                pass
            assert wait_until(lambda: not proc.alive(), 30), "kshim kept running"
            assert proc.proc.returncode not in (0, None)
            assert expected in proc.log_text(), proc.log_text()[-2000:]
        finally:
            proc.cleanup()


def test_supporters_include_every_live_instance(kafka, kshim_factory, members, cluster_id):
    """(g)"""
    a = members[0]
    epoch, level = converged(members)
    if level != 3:
        code, message = update_features(a.bootstrap, 3, UPGRADE if level < 3 else SAFE_DOWNGRADE)
        assert code == NONE, message
    # An instance that does not support the finalized level refuses to start.
    admin_port = ke.free_port()
    narrow = ke.KshimProcess(member_config(cluster_id, "kshim-narrow", admin_port, supported=(0, 2)),
                             binary=a.binary, upstream=kafka.bootstrap)
    try:
        try:
            narrow.start()
        except ke.EnvError:
            pass
        assert wait_until(lambda: not narrow.alive(), 30), "the incompatible instance kept running"
        assert narrow.proc.returncode not in (0, None)
        text = narrow.log_text()
        assert f"{FEATURE} is finalized at level 3" in text and "supports only 0-2" in text, text[-3000:]
    finally:
        narrow.cleanup()

    # A live instance that supports only up to 3 blocks an upgrade to 4.
    for stop_kind in ("clean", "kill"):
        e = start_member(kshim_factory, kafka, cluster_id, "kshim-e", supported=(0, 3))
        assert wait_until(lambda: any(i["instance_id"] == "kshim-e" and i["live"]
                                      for i in a.admin.cluster()["instances"]), 5)
        code, message = update_features(a.bootstrap, 4, UPGRADE)
        assert code == INVALID_UPDATE_VERSION, (code, message)
        assert "kshim instance kshim-e only supports versions 0-3" in message, message
        if stop_kind == "clean":
            e.stop()
            # A clean stop withdraws the registration at once.
            assert wait_until(lambda: update_features(a.bootstrap, 4, UPGRADE, True)[0] == NONE, 3)
        else:
            os.kill(e.pid, signal.SIGKILL)
            e.proc.wait(10)
            stopped = time.monotonic()
            assert update_features(a.bootstrap, 4, UPGRADE, True)[0] == INVALID_UPDATE_VERSION
            assert wait_until(lambda: update_features(a.bootstrap, 4, UPGRADE, True)[0] == NONE,
                              SESSION_TIMEOUT_MS / 1000 + 5)
            assert time.monotonic() - stopped >= SESSION_TIMEOUT_MS / 1000 - 1.5
        e.cleanup()
    assert update_features(a.bootstrap, 3, SAFE_DOWNGRADE)[0] == NONE


PAUSE_MS = 3000


def test_a_paused_writer_never_commits_after_losing_its_role(kafka, kshim_factory, members, cluster_id):
    """(c) SIGSTOP between writing and committing, 20 s, while B takes over."""
    a, b, c = members
    epoch, level = converged(members)
    if level != 1:
        assert update_features(b.bootstrap, 1, SAFE_DOWNGRADE if level > 1 else UPGRADE)[0] == NONE
    z = start_member(kshim_factory, kafka, cluster_id, "kshim-z",
                     env={"KSHIM_FAULT_PAUSE_BEFORE_COMMIT_MS": str(PAUSE_MS)})
    try:
        wait_live_view(z, {m.instance for m in members} | {"kshim-z"})
        outcome = {}
        sender = threading.Thread(target=lambda: outcome.update(r=update_features(z.bootstrap, 2, UPGRADE)))
        sender.start()
        assert wait_until(lambda: "pausing" in z.log_text(), 10), z.log_text()[-2000:]
        os.kill(z.pid, signal.SIGSTOP)
        paused = time.monotonic()
        try:
            # B takes the writer role and writes a newer change.
            assert update_features(b.bootstrap, 4, UPGRADE) == (NONE, "")
            assert converged(members, timeout=3)[1] == 4
            time.sleep(max(0.0, 20 - (time.monotonic() - paused)))
        finally:
            os.kill(z.pid, signal.SIGCONT)
        sender.join(timeout=60)
        code, message = outcome["r"]
        # Z was fenced; deciding again on the newer state, 2 is a downgrade from 4.
        assert code == INVALID_UPDATE_VERSION, (code, message)
        # Z, resumed, serves what the others serve: anything it had committed would show here.
        assert converged(members + [z], timeout=5)[1] == 4
        history = feature_history(kafka, cluster_id)
        assert not any(r["writer"] == "kshim-z" and r["levels"].get(FEATURE) == 2 for r in history), history[-5:]
        b_record = max(i for i, r in enumerate(history) if r["writer"] == "kshim-b" and r["levels"].get(FEATURE) == 4)
        assert all(r["writer"] != "kshim-z" for r in history[b_record:]), history[b_record:]
    finally:
        z.cleanup()


def test_a_killed_writer_leaves_nothing_half_visible(kafka, kshim_factory, members, cluster_id):
    """(d) SIGKILL between writing and committing."""
    a, b, c = members
    epoch, level = converged(members)
    z = start_member(kshim_factory, kafka, cluster_id, "kshim-z2",
                     env={"KSHIM_FAULT_PAUSE_BEFORE_COMMIT_MS": str(PAUSE_MS)})
    try:
        wait_live_view(z, {m.instance for m in members} | {"kshim-z2"})
        target = 5 if level != 5 else 1
        kind = UPGRADE if target > level else SAFE_DOWNGRADE
        # The change is sent again if an attempt ends before reaching the commit (a coordinator
        # still loading after an earlier test's broker restart can outlast the write timeout);
        # what each attempt answered is kept for the failure message.
        answers: list = []
        sender = None

        def reached_commit() -> bool:
            nonlocal sender
            if "pausing" in z.log_text():
                return True
            if sender is None or not sender.is_alive():
                sender = threading.Thread(
                    target=lambda: answers.append(_answer_or_cut(lambda: update_features(z.bootstrap, target, kind))),
                    daemon=True)
                sender.start()
            return False

        assert wait_until(reached_commit, 60), (
            f"kshim-z2 never reached its commit; its answers: {answers}\n{ke.tail(z.log_path)}")
        os.kill(z.pid, signal.SIGKILL)
        z.proc.wait(10)
        # Its open transaction is aborted by the coordinator once the transaction timeout has
        # passed (the broker looks for expired ones every 10 s); the members, reading
        # read_committed, get past its records only then.
        written = state_topic_end(kafka)
        applied = {}

        def read_past() -> bool:
            applied.update({m.instance: applied_offset(m) for m in members})
            return min(applied.values()) >= written

        assert wait_until(read_past, 30), (
            f"kshim-z2's open transaction was not aborted: its records end at {written}, applied: {applied}")
        for m in members:
            assert served(m.bootstrap) == (epoch, level), m.instance
        assert update_features(c.bootstrap, 2 if level != 2 else 3, UPGRADE if level < 2 else SAFE_DOWNGRADE)[0] == NONE
        converged(members, timeout=3)
        assert not any(r["writer"] == "kshim-z2" and r["levels"].get(FEATURE) == target
                       for r in feature_history(kafka, cluster_id))
    finally:
        z.cleanup()


def _answer_or_cut(call):
    """Runs a request whose connection may be cut by the kill the test makes: its answer, or
    the error that cut it."""
    try:
        return call()
    except (OSError, ke.EnvError) as e:
        return repr(e)


def test_an_instance_serves_its_kept_state_while_the_upstream_is_away(kafka, kshim_factory, members, cluster_id):
    """(4) Restarted while its upstream cannot be reached, an instance serves the state it
    applied last (kept in its data directory) and is not ready; with the upstream back, it
    catches up with what changed meanwhile."""
    f = start_member(kshim_factory, kafka, cluster_id, "kshim-f")
    kept = converged(members + [f])
    f.stop()
    target = 2 if kept[1] != 2 else 3
    code, message = update_features(members[0].bootstrap, target, UPGRADE if target > kept[1] else SAFE_DOWNGRADE)
    assert code == NONE, message
    changed = converged(members)
    live = f.config_path.read_text()
    dead = f"127.0.0.1:{ke.free_port()}"
    f.config_path.write_text(live.replace(json.dumps(kafka.bootstrap), json.dumps(dead)))
    f.start()
    assert wait_until(lambda: f.admin.call("GET", "/readyz")[0] in (200, 503), 10)
    assert served(f.bootstrap) == kept
    status, ready = f.admin.call("GET", "/readyz")
    assert status == 503 and ready["checks"]["cluster_caught_up"] is False, ready
    f.stop()
    f.config_path.write_text(live)
    f.start()
    assert wait_until(f.admin.ready, 30), ke.tail(f.log_path)
    assert served(f.bootstrap) == changed
    f.stop()


def test_two_kshim_clusters_on_one_upstream_do_not_mix(kafka, kshim_factory, members, cluster_id):
    """(i) Another cluster.id on the same upstream and topic, with an instance of the same name."""
    epoch, level = converged(members)
    west = start_member(kshim_factory, kafka, "west-" + uuid.uuid4().hex[:6], "kshim-a", bootstrap_level=5)
    try:
        # West starts from its own bootstrap, not from east's state.
        assert served(west.bootstrap)[1] == 5
        assert update_features(west.bootstrap, 0, SAFE_DOWNGRADE)[0] == NONE
        assert served(west.bootstrap)[1] == 0
        east_target = 2 if level != 2 else 3
        code, message = update_features(members[1].bootstrap, east_target,
                                         UPGRADE if east_target > level else SAFE_DOWNGRADE)
        assert code == NONE, message
        east = converged(members)
        assert east[1] == east_target
        # West reads the same topic: once it has read past east's change, it still serves its own.
        east_end = state_topic_end(kafka)
        assert wait_until(lambda: applied_offset(west) >= east_end, 10), (
            f"west did not read past east's change (offset {east_end}): it is at {applied_offset(west)}")
        assert served(west.bootstrap)[1] == 0, "west applied east's change"
        # Each sees only its own instances (east's kshim-a is not west's kshim-a).
        assert {i["instance_id"] for i in west.admin.cluster()["instances"]} == {"kshim-a"}
        assert {i["instance_id"] for i in members[1].admin.cluster()["instances"] if i["live"]} >= {
            "kshim-a", "kshim-b", "kshim-c"}
    finally:
        west.cleanup()


FAILOVER_SRC = ke.REPO_ROOT / "tests" / "interop" / "java" / "ClusterFailover.java"
FAILOVER_RECORDS = 1200


class FailoverClient:
    """A producer and consumer pair running as a child process that prints JSON lines: progress
    {"acked": N, "consumed": M} and at the end {"done": true, "acked": [...], "consumed": [...],
    "failed": N}."""

    def __init__(self, pid: int, output, finish, stop):
        self.pid = pid
        self.output = output  # () -> the text printed so far
        self.finish = finish  # (timeout) -> the whole output, once the client has ended well
        self.stop = stop

    def lines(self, text: str | None = None) -> list[dict]:
        return [json.loads(line) for line in (text if text is not None else self.output()).splitlines()
                if line.startswith("{")]

    def progress(self) -> dict:
        lines = self.lines()
        return lines[-1] if lines else {}


def failover_topic(kafka) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "failover-" + uuid.uuid4().hex[:6]
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap.split(","))
    try:
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])
    finally:
        admin.close()
    return topic


def kill_the_instance_in_use(members, client: FailoverClient, label: str) -> None:
    """Once the clients have consumed 100 records, kills (SIGKILL) the instance their sockets are
    connected to; then every acknowledged record must be consumed exactly once, and production
    must go on well past the kill. The instance is started again however the test ends."""
    from collections import Counter

    victim = None
    try:
        assert wait_until(lambda: client.progress().get("consumed", 0) >= 100, 60), client.output()[-3000:]
        mine = ke._socket_inodes(client.pid)
        used = {m.instance: sum(1 for *_, inode in ke.established_to(m.listening_ports()) if inode in mine)
                for m in members}
        victim = max(members, key=lambda m: used[m.instance])
        assert used[victim.instance] > 0, used
        at_kill = client.progress()
        os.kill(victim.pid, signal.SIGKILL)
        victim.proc.wait(10)
        done = [line for line in client.lines(client.finish(120)) if line.get("done")][-1]
        acked, consumed = set(done["acked"]), Counter(done["consumed"])
        assert len(acked) > at_kill["acked"] + 100, f"production did not go on after the kill: {len(acked)} vs {at_kill}"
        missing = sorted(acked - set(consumed))
        twice = sorted(v for v, n in consumed.items() if n > 1)
        assert not missing and not twice, f"missing {missing[:10]}, consumed twice {twice[:10]}"
        print(f"(h) {label}: killed {victim.instance} (clients had {used[victim.instance]} connections to it) at "
              f"{at_kill}; {len(acked)} acknowledged, {sum(consumed.values())} consumed, {done['failed']} failed")
    finally:
        client.stop()
        if victim is not None:
            victim.start()
            assert wait_until(victim.admin.ready, 60), ke.tail(victim.log_path)


def test_clients_fail_over_to_another_instance(kafka, members, tmp_path):
    """(h) A Java producer and consumer bootstrapped across A, B, C keep going while the
    instance they use is killed: every acknowledged record is consumed exactly once."""
    topic = failover_topic(kafka)
    classes = ke.compile_java(FAILOVER_SRC)
    bootstrap = ",".join(m.bootstrap for m in members)
    java = ke.BackgroundJava(["ClusterFailover", bootstrap, topic, str(FAILOVER_RECORDS), "10", "90000"],
                             workdir=tmp_path, name="failover", extra_classpath=[classes])

    def finish(timeout: float) -> str:
        result = java.wait(timeout)
        assert result.rc == 0, result.stderr[-3000:]
        return result.stdout

    client = FailoverClient(java.proc.pid, java.stdout_path.read_text, finish, java.stop)
    kill_the_instance_in_use(members, client, "Java")


LIBRDKAFKA_FAILOVER = r"""
import json, sys, threading, time
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic, records, deadline = sys.argv[1], sys.argv[2], int(sys.argv[3]), time.time() + float(sys.argv[4])
common = {"bootstrap.servers": bootstrap, "reconnect.backoff.max.ms": 1000, "socket.timeout.ms": 10000}
acked, failed, consumed = set(), [0], []

def produce():
    p = Producer({**common, "enable.idempotence": True, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 120000})
    def done(err, msg):
        if err is None:
            acked.add(int(msg.value()))
        else:
            failed[0] += 1
    for n in range(records):
        if time.time() > deadline:
            break
        p.produce(topic, key=str(n), value=str(n), on_delivery=done)
        p.poll(0)
        time.sleep(0.01)
    p.flush(max(1.0, deadline - time.time()))

producing = threading.Thread(target=produce)
producing.start()
c = Consumer({**common, "group.id": "unused", "enable.auto.commit": False, "isolation.level": "read_committed"})
partitions = c.list_topics(topic, timeout=30).topics[topic].partitions
c.assign([TopicPartition(topic, p, -2) for p in partitions])
next_progress = 0.0
while time.time() < deadline:
    m = c.poll(0.2)
    if m is not None and m.error() is None:
        consumed.append(int(m.value()))
    if time.time() >= next_progress:
        print(json.dumps({"acked": len(acked), "consumed": len(consumed)}), flush=True)
        next_progress = time.time() + 1
    if not producing.is_alive() and acked <= set(consumed):
        break
c.close()
producing.join(5)
print(json.dumps({"done": True, "acked": sorted(acked), "consumed": consumed, "failed": failed[0]}), flush=True)
"""


def test_librdkafka_clients_fail_over_to_another_instance(kafka, members, tmp_path):
    """(h) The same with confluent-kafka (librdkafka): an idempotent producer and an assigned
    consumer bootstrapped across A, B, C carry on when the instance they use is killed."""
    import subprocess
    import sys

    topic = failover_topic(kafka)
    out_path = tmp_path / "librdkafka.out"
    bootstrap = ",".join(m.bootstrap for m in members)
    with open(out_path, "w") as out:
        child = subprocess.Popen([sys.executable, "-c", LIBRDKAFKA_FAILOVER, bootstrap, topic, "800", "90"],
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def finish(timeout: float) -> str:
        assert child.wait(timeout) == 0, out_path.read_text()[-3000:]
        return out_path.read_text()

    client = FailoverClient(child.pid, out_path.read_text, finish, lambda: ke.stop_process(child))
    kill_the_instance_in_use(members, client, "librdkafka")


def test_leader_loss_pauses_and_loses_nothing(kafka, members, cluster_id, kafka_trio_faults):
    """(e) Stop the state partition's leader under steady updates. Last: it moves brokers."""
    a, b, c = members
    acknowledged = []
    stop = threading.Event()

    def steady():
        i = 0
        while not stop.is_set():
            member = members[i % 3]
            try:
                epoch, level = served(member.bootstrap)
                target = 1 + (level % 5)
                kind = UPGRADE if target > level else SAFE_DOWNGRADE
                code, _ = update_features(member.bootstrap, target, kind)
            except OSError:
                code = -1
            if code == NONE:
                acknowledged.append(target)
            i += 1
            time.sleep(0.05)

    worker = threading.Thread(target=steady, daemon=True)
    worker.start()
    assert wait_until(lambda: len(acknowledged) > 5, 30), "updates did not flow before the leader was stopped"
    leader = _state_leader(kafka)
    kafka.stop_node(leader)
    stopped = len(acknowledged)
    try:
        assert wait_until(lambda: _state_leader(kafka) not in (leader, -1), 30), "no new leader"
        assert wait_until(lambda: len(acknowledged) > stopped + 5, 30), "updates did not resume"
    finally:
        stop.set()
        worker.join(timeout=60)
        kafka.start_node(leader)
    history = feature_history(kafka, cluster_id)
    applied = [r["levels"].get(FEATURE, 0) for r in history]
    # Every acknowledged change is in the log, in order.
    i = 0
    for level in acknowledged:
        while i < len(applied) and applied[i] != level:
            i += 1
        assert i < len(applied), f"acknowledged level {level} is not in the state topic"
    converged(members, timeout=10)


def test_a_writer_idle_through_a_leader_restart_writes_at_once(kafka, members, kafka_trio_faults):
    """(j) A change at A makes A the writer, holding connections to the state partition's leader.
    That broker restarts while A writes nothing, so each of those connections is closed under
    it. A's next change succeeds at its first try: the writer reconnects, it does not answer
    with the broken connection's error (found by the soak, after a rolling restart)."""
    a = members[0]

    def change() -> tuple[int, str]:
        _, level = served(a.bootstrap)
        target = 1 + (level % 5)
        return update_features(a.bootstrap, target, UPGRADE if target > level else SAFE_DOWNGRADE)

    assert change() == (NONE, "")
    leader = _state_leader(kafka)
    kafka.restart_node(leader)
    kafka.wait_brokers_registered()
    assert change() == (NONE, "")
    converged(members, timeout=10)


def _state_leader(kafka) -> int:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap.split(","))
    try:
        (topic,) = admin.describe_topics([TOPIC])
        (partition,) = topic["partitions"]
        return partition.get("leader", partition.get("leader_id"))
    finally:
        admin.close()
