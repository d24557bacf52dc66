"""The Java Admin client and kafka-features.sh (FeatureCommand) against kshim and real Kafka.

Every Admin scenario runs twice, against a real Apache Kafka 4.1.1 KRaft node and against a
standalone kshim that was configured with exactly that node's supported ranges and finalized
levels; both must give the same outcome (same exception class, same message). The expected
outcomes below are the ones Kafka 4.1.1 gives.

The FeatureCommand transcript runs the same operator session against a fresh broker and a
fresh kshim with equal starting states and compares the output line for line, with the
`Epoch: N` value masked (the broker's epoch is a metadata log offset; kshim's is its own).
"""

from __future__ import annotations

import difflib
import re
import subprocess

import pytest

import kafka_env as ke

PREFIX = "The update failed for all features since the following feature had an error: "
IUVE = "InvalidUpdateVersionException"


def invalid(level: int, feature: str, reason: str) -> str:
    return f"{PREFIX}Invalid update version {level} for feature {feature}. {reason}"


def levels(describe: dict) -> dict[str, int]:
    """Finalized max levels; also checks the shipped rule that finalized min == max."""
    out = {}
    for name, rng in describe["finalized"].items():
        assert rng["min"] == rng["max"], f"finalized {name} has min {rng['min']} != max {rng['max']}"
        assert rng["max"] >= 1, f"a finalized feature at level {rng['max']} must not be listed: {name}"
        out[name] = rng["max"]
    return out


def ranges(describe: dict) -> dict[str, tuple[int, int]]:
    return {name: (r["min"], r["max"]) for name, r in describe["supported"].items()}


class Target:
    def __init__(self, kind: str, bootstrap: str, extra: tuple[str, ...] = (), proc=None):
        self.kind = kind
        self.bootstrap = bootstrap
        self.extra = extra
        self.proc = proc

    def describe(self) -> dict:
        return ke.describe_features(self.bootstrap, *self.extra)

    def levels(self) -> dict[str, int]:
        return levels(self.describe())

    def update(self, *updates: tuple[str, int, str], validate_only: bool = False) -> dict[str, dict]:
        results = ke.update_features(self.bootstrap, list(updates), validate_only=validate_only, extra=self.extra)
        if not validate_only:
            self._wait_applied({name: level for name, level, _ in updates if results[name]["result"] == "ok"})
        return results

    def _wait_applied(self, applied: dict[str, int]) -> None:
        """A broker answers UpdateFeatures once its controller has committed the change, and
        serves the new levels in ApiVersions once it has applied that record to its own
        metadata a moment later (kshim serves them before it answers): wait for that."""
        if not applied:
            return

        def served() -> bool:
            now = levels(self.describe())
            return all(now.get(name, 0) == level for name, level in applied.items())

        if not ke.wait_until(served, timeout=15, interval=0.05):
            pytest.fail(f"{self}: finalized levels {self.levels()} do not show the applied {applied} after 15 s",
                        pytrace=False)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.bootstrap}>"


def assert_ok(results: dict[str, dict]) -> None:
    bad = {k: v for k, v in results.items() if v["result"] != "ok"}
    assert not bad, f"expected every update to succeed: {bad}"


def assert_error(results: dict[str, dict], feature: str, error: str, message: str | None = None) -> None:
    r = results[feature]
    assert r["result"] == "error", f"{feature}: expected {error}, got success"
    assert r["error"] == error, f"{feature}: expected {error}, got {r['error']}: {r['message']}"
    if message is not None:
        assert r["message"] == message, f"{feature}: message differs\n  want: {message}\n  got:  {r['message']}"


# -------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def admin_broker(kafka_clusters):
    """A broker of its own: these tests change its finalized features. It has StandardAuthorizer
    too, for the authorization tests: PLAIN users on a SASL listener, no ACLs, admin is super;
    its PLAINTEXT listener, the other tests', is User:ANONYMOUS, a super user (one broker for
    both saves a broker's start, about 20 s)."""
    users = " ".join(f'user_{u}="{p}"' for u, p in SASL_USERS.items())
    cluster = kafka_clusters.start(
        1,
        extra_ports=1,
        listener_overrides={
            "listeners": "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},CLIENT://127.0.0.1:{extra0}",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:{port},CLIENT://127.0.0.1:{extra0}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        },
        extra_properties={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.client.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The plaintext listeners carry the node's own traffic and the admin tests' (ANONYMOUS).
            "super.users": "User:ANONYMOUS;User:admin",
        },
    )
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="module")
def baseline(admin_broker) -> dict:
    """What a freshly formatted Kafka 4.1.1 node finalizes and supports."""
    return ke.describe_features(admin_broker.bootstrap)


def reset_broker(target: Target, baseline: dict) -> None:
    """Put the broker's finalized levels back to `baseline` (kraft.version is left alone)."""
    want = levels(baseline)
    cur = target.levels()
    updates = []
    for name in ranges(baseline):
        if name == "kraft.version":
            continue
        c, w = cur.get(name, 0), want.get(name, 0)
        if c < w:
            updates.append((name, w, "UPGRADE"))
        elif c > w:
            updates.append((name, w, "SAFE_DOWNGRADE"))
    if updates:
        assert_ok(target.update(*updates))
    now = target.levels()
    now.pop("kraft.version", None)
    assert now == {k: v for k, v in want.items() if k != "kraft.version"}


def start_kshim_like(kshim_factory, baseline: dict, extra: str = ""):
    config = ke.kshim_feature_config(levels(baseline), ranges(baseline), extra=extra)
    return kshim_factory(config)


@pytest.fixture(params=["broker", "kshim"])
def target(request, admin_broker, baseline) -> Target:
    if request.param == "broker":
        t = Target("broker", admin_broker.bootstrap)
        reset_broker(t, baseline)
        return t
    kshim_factory = request.getfixturevalue("kshim_factory")
    proc = start_kshim_like(kshim_factory, baseline)
    return Target("kshim", proc.bootstrap, proc=proc)


# -------------------------------------------------------------------------------------------
# (a) Admin.describeFeatures / Admin.updateFeatures


def test_baseline_is_kafka_41(baseline):
    # Guards the assumptions the scenarios below are built on.
    assert ranges(baseline) == {
        "eligible.leader.replicas.version": (0, 1),
        "group.version": (0, 1),
        "kraft.version": (0, 1),
        "metadata.version": (7, 27),
        "share.version": (0, 1),
        "transaction.version": (0, 2),
    }
    assert levels(baseline) == {
        "eligible.leader.replicas.version": 1,
        "group.version": 1,
        "metadata.version": 27,
        "transaction.version": 2,
    }
    assert isinstance(baseline["finalized_epoch"], int) and baseline["finalized_epoch"] >= 0


def test_describe(target, baseline):
    d = target.describe()
    assert ranges(d) == ranges(baseline)
    assert levels(d) == levels(baseline)
    assert isinstance(d["finalized_epoch"], int) and d["finalized_epoch"] >= 0


def test_kshim_as_kafka_4_1_finalizes_what_its_format_does(kshim, baseline):
    """A kshim presenting Kafka 4.1 supports what the 4.1.1 broker supports, and starts with
    what `kafka-storage format` finalizes. The baseline's voters are static, which leaves its
    kraft.version at 0; kshim presents a node formatted with --standalone (kraft.version 1, as
    test_kafka_releases checks against such a broker)."""
    d = Target("kshim", kshim.bootstrap).describe()
    assert ranges(d) == ranges(baseline), "kshim presenting Kafka 4.1 supports what Kafka 4.1.1 does"
    assert levels(d) == {**levels(baseline), "kraft.version": 1}


def test_upgrade(target):
    before = target.describe()
    assert "share.version" not in before["finalized"]
    assert_ok(target.update(("share.version", 1, "UPGRADE")))
    after = target.describe()
    assert levels(after) == {**levels(before), "share.version": 1}
    assert after["finalized_epoch"] > before["finalized_epoch"]


def test_upgrade_several_at_once(target):
    assert_ok(target.update(("transaction.version", 1, "SAFE_DOWNGRADE")))
    before = target.levels()
    assert_ok(target.update(("share.version", 1, "UPGRADE"), ("transaction.version", 2, "UPGRADE")))
    assert target.levels() == {**before, "share.version": 1, "transaction.version": 2}


def test_safe_downgrade(target):
    before = target.describe()
    assert_ok(target.update(("transaction.version", 1, "SAFE_DOWNGRADE")))
    after = target.describe()
    assert levels(after) == {**levels(before), "transaction.version": 1}
    assert after["finalized_epoch"] > before["finalized_epoch"]


def test_unsafe_downgrade(target):
    before = target.levels()
    assert_ok(target.update(("transaction.version", 1, "UNSAFE_DOWNGRADE")))
    assert target.levels() == {**before, "transaction.version": 1}


@pytest.mark.parametrize("upgrade_type", ["SAFE_DOWNGRADE", "UNSAFE_DOWNGRADE"])
def test_disable(target, upgrade_type):
    before = target.levels()
    assert_ok(target.update(("group.version", 0, upgrade_type)))
    after = target.describe()
    assert "group.version" not in after["finalized"], "level 0 means disabled: not listed as finalized"
    assert "group.version" in after["supported"]
    expected = dict(before)
    del expected["group.version"]
    assert levels(after) == expected
    # A disabled feature can be enabled again.
    assert_ok(target.update(("group.version", 1, "UPGRADE")))
    assert target.levels() == before


def test_same_level_is_a_noop(target):
    before = target.describe()
    assert_ok(target.update(("group.version", 1, "UPGRADE")))
    assert_ok(target.update(("transaction.version", 2, "SAFE_DOWNGRADE")))
    after = target.describe()
    assert levels(after) == levels(before)
    if target.kind == "kshim":
        # The broker's epoch is a log offset that moves on its own; kshim's moves only on change.
        assert after["finalized_epoch"] == before["finalized_epoch"]


@pytest.mark.parametrize(
    "update",
    [
        ("share.version", 1, "UPGRADE"),
        ("transaction.version", 1, "SAFE_DOWNGRADE"),
        ("group.version", 0, "UNSAFE_DOWNGRADE"),
    ],
)
def test_validate_only_changes_nothing(target, update):
    before = target.describe()
    assert_ok(target.update(update, validate_only=True))
    after = target.describe()
    assert levels(after) == levels(before)
    if target.kind == "kshim":
        assert after["finalized_epoch"] == before["finalized_epoch"]


def test_validate_only_reports_the_same_errors(target):
    results = target.update(("group.version", 2, "UPGRADE"), validate_only=True)
    assert_error(results, "group.version", IUVE, invalid(2, "group.version", "Local controller 1 only supports versions 0-1"))


# Each case: updates, then for each feature in the batch the expected (error class, message).
FAILURES = {
    "above_supported_max": (
        [("group.version", 2, "UPGRADE")],
        IUVE,
        invalid(2, "group.version", "Local controller 1 only supports versions 0-1"),
    ),
    "metadata_version_above_max": (
        [("metadata.version", 28, "UPGRADE")],
        IUVE,
        invalid(28, "metadata.version", "Local controller 1 only supports versions 7-27"),
    ),
    "metadata_version_below_min": (
        [("metadata.version", 6, "SAFE_DOWNGRADE")],
        IUVE,
        invalid(6, "metadata.version", "Local controller 1 only supports versions 7-27"),
    ),
    "downgrade_with_upgrade_type": (
        [("transaction.version", 1, "UPGRADE")],
        IUVE,
        invalid(
            1,
            "transaction.version",
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.",
        ),
    ),
    "upgrade_with_safe_downgrade_type": (
        [("share.version", 1, "SAFE_DOWNGRADE")],
        IUVE,
        invalid(1, "share.version", "Can't downgrade to a newer version."),
    ),
    "upgrade_with_unsafe_downgrade_type": (
        [("share.version", 1, "UNSAFE_DOWNGRADE")],
        IUVE,
        invalid(1, "share.version", "Can't downgrade to a newer version."),
    ),
    "unknown_feature_upgrade": (
        [("no.such.feature", 1, "UPGRADE")],
        IUVE,
        invalid(1, "no.such.feature", "Local controller 1 does not support this feature."),
    ),
    "unknown_feature_disable": (
        [("no.such.feature", 0, "SAFE_DOWNGRADE")],
        IUVE,
        invalid(0, "no.such.feature", "Feature no.such.feature not found."),
    ),
    "batch_is_all_or_nothing": (
        [("share.version", 1, "UPGRADE"), ("transaction.version", 1, "SAFE_DOWNGRADE"), ("group.version", 5, "UPGRADE")],
        IUVE,
        invalid(5, "group.version", "Local controller 1 only supports versions 0-1"),
    ),
    "metadata_version_safe_downgrade_losing_metadata": (
        [("metadata.version", 22, "SAFE_DOWNGRADE")],
        IUVE,
        f"{PREFIX}Invalid metadata.version 22. Refusing to perform the requested downgrade because it might delete metadata information.",
    ),
    "metadata_version_unsafe_downgrade_losing_metadata": (
        [("metadata.version", 22, "UNSAFE_DOWNGRADE")],
        IUVE,
        f"{PREFIX}Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this version.",
    ),
}


@pytest.fixture(scope="module")
def broker_failures(admin_broker, baseline) -> dict[str, dict[str, dict]]:
    """Each failure case run once against the real broker, for the kshim half to match."""
    t = Target("broker", admin_broker.bootstrap)
    out = {}
    for case, (updates, _, _) in FAILURES.items():
        reset_broker(t, baseline)
        out[case] = t.update(*updates)
    reset_broker(t, baseline)
    return out


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failure(target, case, broker_failures):
    updates, error, message = FAILURES[case]
    before = target.describe()
    results = target.update(*updates)
    assert list(results) == [u[0] for u in updates]
    for name, _, _ in updates:
        # Every feature of a failed batch carries the batch's error, as the broker reports it.
        assert_error(results, name, error, message)
        assert results[name] == broker_failures[case][name], (
            f"{target.kind} differs from the broker for {case}/{name}:\n"
            f"  broker: {broker_failures[case][name]}\n  {target.kind}: {results[name]}"
        )
    after = target.describe()
    assert levels(after) == levels(before), "a failed update must change nothing"
    if target.kind == "kshim":
        assert after["finalized_epoch"] == before["finalized_epoch"]


def test_metadata_version_downgrade_without_metadata_loss(target):
    # 4.1-IV1 (27) -> 4.1-IV0 (26) changes no metadata record format, so Kafka allows it.
    assert_ok(target.update(("metadata.version", 26, "SAFE_DOWNGRADE")))
    assert target.levels()["metadata.version"] == 26
    assert_ok(target.update(("metadata.version", 27, "UPGRADE")))
    assert target.levels()["metadata.version"] == 27


def _check_dependency_on_metadata_version(target: Target) -> None:
    # Formatted at 3.9-IV0: metadata.version 21, nothing else finalized.
    start = target.describe()
    assert levels(start) == {"metadata.version": 21}
    # eligible.leader.replicas.version=1 requires metadata.version >= 23 (4.0-IV1).
    results = target.update(("eligible.leader.replicas.version", 1, "UPGRADE"))
    assert_error(
        results,
        "eligible.leader.replicas.version",
        IUVE,
        invalid(
            1,
            "eligible.leader.replicas.version",
            "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23",
        ),
    )
    assert target.levels() == {"metadata.version": 21}
    # In one request with the metadata.version it depends on, it is accepted.
    assert_ok(target.update(("eligible.leader.replicas.version", 1, "UPGRADE"), ("metadata.version", 23, "UPGRADE")))
    assert target.levels() == {"eligible.leader.replicas.version": 1, "metadata.version": 23}


@pytest.fixture(scope="module")
def old_broker(kafka_clusters):
    """A node formatted with --release-version 3.9-IV0, and its starting state (taken before
    any test changes it)."""
    cluster = kafka_clusters.start(1, format_args=["--release-version", "3.9-IV0"])
    yield cluster, ke.describe_features(cluster.bootstrap)
    cluster.cleanup()


@pytest.fixture(scope="module")
def old_broker_start(old_broker) -> dict:
    """The starting state of a node formatted with --release-version 3.9-IV0."""
    return old_broker[1]


def test_dependency_on_metadata_version_broker(old_broker):
    _check_dependency_on_metadata_version(Target("broker", old_broker[0].bootstrap))


def test_dependency_on_metadata_version_kshim(kshim_factory, old_broker_start):
    proc = start_kshim_like(kshim_factory, old_broker_start)
    _check_dependency_on_metadata_version(Target("kshim", proc.bootstrap))


def test_kshim_state_survives_restart(kshim_factory, baseline):
    proc = start_kshim_like(kshim_factory, baseline)
    t = Target("kshim", proc.bootstrap, proc=proc)
    assert_ok(t.update(("share.version", 1, "UPGRADE"), ("transaction.version", 1, "SAFE_DOWNGRADE")))
    before = t.describe()
    proc.restart()
    after = t.describe()
    assert levels(after) == levels(before), "finalized levels must be persisted, not re-bootstrapped"
    assert after["finalized_epoch"] >= before["finalized_epoch"], "the epoch never goes back"
    assert_ok(t.update(("group.version", 0, "SAFE_DOWNGRADE")))
    assert t.describe()["finalized_epoch"] > after["finalized_epoch"]


# -------------------------------------------------------------------------------------------
# authorization: UpdateFeatures needs ALTER on the cluster

SASL_USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def sasl_props(user: str) -> tuple[str, ...]:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{SASL_USERS[user]}";'
    )
    return (
        "--prop", "security.protocol=SASL_PLAINTEXT",
        "--prop", "sasl.mechanism=PLAIN",
        "--prop", f"sasl.jaas.config={jaas}",
    )  # fmt: skip


@pytest.fixture(scope="module")
def authz_broker(admin_broker, baseline):
    """The admin tests' broker, at its baseline levels."""
    reset_broker(Target("broker", admin_broker.bootstrap), baseline)
    return admin_broker


def _check_refused_then_allowed(refused: Target, allowed: Target) -> None:
    before = refused.describe()  # describing needs no authorization
    for validate_only in (False, True):
        results = refused.update(("group.version", 0, "SAFE_DOWNGRADE"), validate_only=validate_only)
        assert_error(results, "group.version", "ClusterAuthorizationException")
    assert levels(refused.describe()) == levels(before)
    assert_ok(allowed.update(("group.version", 0, "SAFE_DOWNGRADE")))
    assert "group.version" not in allowed.describe()["finalized"]


def test_authorization_refused_broker(authz_broker):
    client = f"127.0.0.1:{authz_broker.nodes[0].extra_ports[0]}"
    _check_refused_then_allowed(
        Target("broker", client, extra=sasl_props("alice")),
        Target("broker", client, extra=sasl_props("admin")),
    )


def test_authorization_refused_kshim(kshim_factory, baseline):
    # A plaintext client is User:ANONYMOUS.
    refusing = start_kshim_like(kshim_factory, baseline, extra='[authorization]\nalter_cluster = ["User:admin"]')
    allowing = start_kshim_like(kshim_factory, baseline, extra='[authorization]\nalter_cluster = ["User:ANONYMOUS"]')
    _check_refused_then_allowed(Target("kshim", refusing.bootstrap), Target("kshim", allowing.bootstrap))


# -------------------------------------------------------------------------------------------
# (b) kafka-features.sh (FeatureCommand)

EPOCH = re.compile(r"Epoch: \d+")


def mask(text: str) -> str:
    return EPOCH.sub("Epoch: <N>", text)


def describe_lines(**finalized: int) -> str:
    """FeatureCommand describe output for Kafka 4.1's supported set at the given levels."""
    rows = [
        ("eligible.leader.replicas.version", "0", "1"),
        ("group.version", "0", "1"),
        ("kraft.version", "0", "1"),
        ("metadata.version", "3.3-IV3", "4.1-IV1"),
        ("share.version", "0", "1"),
        ("transaction.version", "0", "2"),
    ]
    out = []
    for name, lo, hi in rows:
        level = finalized[name.replace(".", "_")]
        out.append(
            f"Feature: {name}\tSupportedMinVersion: {lo}\tSupportedMaxVersion: {hi}\t"
            f"FinalizedVersionLevel: {level}\tEpoch: <N>"
        )
    return "\n".join(out) + "\n"


def _mv(level: int) -> str:
    return {22: "4.0-IV0", 25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1"}[level]


def fail_line(verb: str, feature: str, level: int | None, message: str) -> str:
    target = f" to {level}" if level is not None else ""
    return f"Could not {verb} {feature}{target}. {message}"


START = dict(eligible_leader_replicas_version=1, group_version=1, kraft_version=0,
             metadata_version="4.1-IV1", share_version=0, transaction_version=2)  # fmt: skip
MID = dict(START, group_version=0, share_version=1, transaction_version=0)
MV26 = dict(MID, group_version=1, transaction_version=2, metadata_version="4.1-IV0")
END = dict(MV26, kraft_version=1, metadata_version="4.1-IV1", share_version=0)

# (arguments, rc, stdout, stderr) as Kafka 4.1.1 prints them, `Epoch: N` masked.
TRANSCRIPT = [
    (["describe"], 0, describe_lines(**START), ""),
    (["upgrade", "--feature", "share.version=1"], 0, "share.version was upgraded to 1.\n", ""),
    (["downgrade", "--feature", "transaction.version=1"], 0, "transaction.version was downgraded to 1.\n", ""),
    (["downgrade", "--feature", "transaction.version=0", "--unsafe"], 0, "transaction.version was downgraded to 0.\n", ""),
    (["disable", "--feature", "group.version"], 0, "group.version was disabled.\n", ""),
    (["describe"], 0, describe_lines(**MID), ""),
    (["upgrade", "--feature", "group.version=1", "--dry-run"], 0, "group.version can be upgraded to 1.\n", ""),
    (["downgrade", "--feature", "share.version=0", "--dry-run"], 0, "share.version can be downgraded to 0.\n", ""),
    (["disable", "--feature", "eligible.leader.replicas.version", "--dry-run"], 0,
     "eligible.leader.replicas.version can be disabled.\n", ""),
    (["describe"], 0, describe_lines(**MID), ""),
    (["upgrade", "--feature", "group.version=2"], 1,
     fail_line("upgrade", "group.version", 2, invalid(2, "group.version", "Local controller 1 only supports versions 0-1")) + "\n",
     "1 out of 1 operation(s) failed.\n"),
    (["upgrade", "--feature", "transaction.version=3"], 1,
     fail_line("upgrade", "transaction.version", 3,
               invalid(3, "transaction.version", "Local controller 1 only supports versions 0-2")) + "\n",
     "1 out of 1 operation(s) failed.\n"),
    # The supported range is checked before the direction.
    (["downgrade", "--feature", "share.version=2"], 1,
     fail_line("downgrade", "share.version", 2, invalid(2, "share.version", "Local controller 1 only supports versions 0-1")) + "\n",
     "1 out of 1 operation(s) failed.\n"),
    (["upgrade", "--feature", "nope=1"], 1,
     fail_line("upgrade", "nope", 1, invalid(1, "nope", "Local controller 1 does not support this feature.")) + "\n",
     "1 out of 1 operation(s) failed.\n"),
    (["disable", "--feature", "nope"], 1,
     fail_line("disable", "nope", None, invalid(0, "nope", "Feature nope not found.")) + "\n",
     "1 out of 1 operation(s) failed.\n"),
    (["upgrade", "--feature", "transaction.version=2", "--feature", "group.version=1"], 0,
     "group.version was upgraded to 1.\ntransaction.version was upgraded to 2.\n", ""),
    (["upgrade", "--feature", "share.version=1"], 0, "share.version was upgraded to 1.\n", ""),
    (["downgrade", "--feature", "metadata.version=26"], 0, "metadata.version was downgraded to 26.\n", ""),
    (["downgrade", "--feature", "metadata.version=22"], 1,
     fail_line("downgrade", "metadata.version", 22, f"{PREFIX}Invalid metadata.version 22. Refusing to perform "
               "the requested downgrade because it might delete metadata information.") + "\n",
     "1 out of 1 operation(s) failed.\n"),
    (["downgrade", "--feature", "metadata.version=22", "--unsafe"], 1,
     fail_line("downgrade", "metadata.version", 22, f"{PREFIX}Invalid metadata.version 22. Unsafe metadata "
               "downgrade is not supported in this version.") + "\n",
     "1 out of 1 operation(s) failed.\n"),
    (["describe"], 0, describe_lines(**MV26), ""),
    (["upgrade", "--release-version", "4.1-IV1"], 0,
     "eligible.leader.replicas.version was upgraded to 1.\ngroup.version was upgraded to 1.\n"
     "kraft.version was upgraded to 1.\nmetadata.version was upgraded to 27.\n"
     "transaction.version was upgraded to 2.\n", ""),
    (["disable", "--feature", "share.version"], 0, "share.version was disabled.\n", ""),
    (["upgrade", "--feature", "share.version=1", "--feature", "group.version=2"], 1,
     fail_line("upgrade", "group.version", 2, invalid(2, "group.version", "Local controller 1 only supports versions 0-1")) + "\n"
     + fail_line("upgrade", "share.version", 1, invalid(2, "group.version", "Local controller 1 only supports versions 0-1")) + "\n",
     "2 out of 2 operation(s) failed.\n"),
    (["describe"], 0, describe_lines(**END), ""),
]  # fmt: skip


# `kshim features` speaks as the newest release's kafka-features.sh.
TOOL_RELEASE = "4.4.0"


def run_transcript(bootstrap: str, jars=None) -> list[tuple[list[str], int, str, str]]:
    """TRANSCRIPT with kafka-features.sh 4.1.1, or of the release whose `jars` are given."""
    out = []
    for args, *_ in TRANSCRIPT:
        rc, stdout, stderr = ke.run_feature_command(bootstrap, *args, jars=jars)
        out.append((args, rc, mask(stdout), stderr))
    return out


@pytest.fixture(scope="module")
def broker_transcript(kafka_clusters):
    """The whole transcript against a freshly formatted broker, with its starting state."""
    cluster = kafka_clusters.start(1)
    try:
        start = ke.describe_features(cluster.bootstrap)
        steps = run_transcript(cluster.bootstrap)
    finally:
        cluster.cleanup()
    return start, steps


def _fmt(step) -> str:
    args, rc, stdout, stderr = step
    return f"$ kafka-features.sh {' '.join(args)}  (rc={rc})\n{stdout}" + (f"[stderr] {stderr}" if stderr else "")


def test_feature_command_broker_transcript(broker_transcript):
    _, steps = broker_transcript
    for (args, want_rc, want_out, want_err), got in zip(TRANSCRIPT, steps):
        _, rc, stdout, stderr = got
        assert rc == want_rc, _fmt(got)
        assert stdout == want_out, _fmt(got)
        assert stderr == want_err, _fmt(got)


def test_feature_command_kshim_matches_broker(broker_transcript, kshim_factory):
    start, broker_steps = broker_transcript
    proc = kshim_factory(ke.kshim_feature_config(levels(start), ranges(start)))
    kshim_steps = run_transcript(proc.bootstrap)
    mismatches = []
    for b, k in zip(broker_steps, kshim_steps):
        if b[1:] != k[1:]:
            diff = "\n".join(
                difflib.unified_diff(_fmt(b).splitlines(), _fmt(k).splitlines(), "broker", "kshim", lineterm="")
            )
            mismatches.append(diff)
    assert not mismatches, "kafka-features.sh output differs (Epoch masked):\n" + "\n\n".join(mismatches)


def run_kshim_transcript(binary, bootstrap: str) -> list[tuple[list[str], int, str, str]]:
    """The transcript with `kshim features` in place of kafka-features.sh (`--yes`: kshim asks
    before lowering a level when it runs on a terminal; Kafka's tool never asks)."""
    out = []
    for args, *_ in TRANSCRIPT:
        extra = ["--yes"] if args[0] in ("downgrade", "disable") else []
        cp = subprocess.run([str(binary), "features", "--bootstrap-server", bootstrap, *args, *extra],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        out.append((args, cp.returncode, mask(cp.stdout), cp.stderr.replace("kshim: ", "")))
    return out


def test_kshim_features_prints_what_kafka_features_prints(broker_transcript, kshim_factory, kshim_binary):
    """kshim's own CLI runs the operator session against a kshim started at the broker's state
    and prints, line for line, what kafka-features.sh 4.4.0 prints running it against another
    such kshim (which test_feature_command_kshim_matches_broker holds to the broker)."""
    start, broker_steps = broker_transcript
    config = ke.kshim_feature_config(levels(start), ranges(start))
    theirs = run_transcript(kshim_factory(config).bootstrap, jars=ke.release_jars(TOOL_RELEASE))
    steps = run_kshim_transcript(kshim_binary, kshim_factory(config).bootstrap)
    mismatches = [
        "\n".join(difflib.unified_diff(_fmt(b).splitlines(), _fmt(k).splitlines(), "kafka-features.sh",
                                        "kshim features", lineterm=""))
        for b, k in zip(theirs, steps) if b[1:] != k[1:]
    ]
    assert not mismatches, "kshim features differs from kafka-features.sh (Epoch masked):\n" + "\n\n".join(mismatches)
    # The tab-separated lines of kafka-features.sh 4.2 and older, behind a flag.
    proc = kshim_factory(config)
    rc, out, err = kshim_cli(kshim_binary, proc.bootstrap, "describe", "--tab-separated")
    assert (rc, mask(out), err) == broker_steps[0][1:], f"kshim: {out}{err}\nkafka-features.sh 4.1.1: {broker_steps[0]}"


# Each leaves the broker as it is: reads, refusals by the tool, and dry runs.
BROKER_STEPS = [
    ["describe"],
    ["upgrade", "--feature", "group.version=1", "--feature", "transaction.version=3", "--dry-run"],
    ["downgrade", "--feature", "metadata.version=22", "--dry-run"],
    ["disable", "--feature", "share.version", "--dry-run"],
    ["upgrade", "--release-version", "4.9"],
    ["upgrade", "--release-version", "4.1", "--feature", "group.version=1"],
    ["upgrade", "--release-version", "4.0", "--dry-run"],
    ["downgrade", "--release-version", "4.0", "--dry-run"],
    ["upgrade", "--release-version", "4.2-IV0", "--dry-run"],
    ["upgrade", "--metadata", "4.1-IV1", "--dry-run"],
    ["upgrade", "--release-version", "4.4", "--dry-run"],
    ["describe", "--node-id", "1"],
    ["describe", "--node-id", "-1"],
]


def test_kshim_features_against_the_broker(kafka_broker, kshim_binary):
    """Both tools (kafka-features.sh 4.4.0) against the shared 4.1.1 broker itself,
    --release-version included (reads, dry runs and refusals only: the broker's state does
    not change)."""
    for args in BROKER_STEPS:
        theirs = ke.run_feature_command(kafka_broker.bootstrap, *args, jars=ke.release_jars(TOOL_RELEASE))
        cp = subprocess.run([str(kshim_binary), "features", "--bootstrap-server", kafka_broker.bootstrap, *args],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        ours = (cp.returncode, mask(cp.stdout), cp.stderr.replace("kshim: ", ""))
        theirs = (theirs[0], mask(theirs[1]), theirs[2])
        assert ours == theirs, f"{args}:\nkshim features: {ours}\nkafka-features.sh: {theirs}"


def test_kshim_features_against_the_controller(kafka_broker, kshim_binary):
    """`describe --bootstrap-controller`: both tools ask the shared node's KRaft controller
    listener directly (KIP-919) and print the same lines."""
    controller = f"127.0.0.1:{kafka_broker.nodes[0].controller_port}"
    args = ["--bootstrap-controller", controller, "describe"]
    res = ke.tool_server("org.apache.kafka.tools.FeatureCommand", ke.release_jars(TOOL_RELEASE)).run(args, 60)
    cp = subprocess.run([str(kshim_binary), "features", *args], capture_output=True, text=True, timeout=60,
                        stdin=subprocess.DEVNULL)
    assert "Feature: metadata.version" in res.stdout, res
    assert (cp.returncode, mask(cp.stdout), cp.stderr) == (res.rc, mask(res.stdout), res.stderr)


# Command-line mistakes, refused before any server is asked, in Kafka's parser's words
# (no final newline, exit status 1).
USAGE_STEPS = [
    [],
    ["describe"],
    ["upgrade", "--feature", "group.version=1"],
    ["--bootstrap-server", "127.0.0.1:1"],
    ["--bootstrap-server", "127.0.0.1:1", "bogus"],
    ["--bootstrap-server", "127.0.0.1:1", "describe", "--bogus"],
    ["--bogus", "describe"],
    ["--bootstrap-server", "127.0.0.1:1", "upgrade", "--feature"],
    ["--bootstrap-server", "127.0.0.1:1", "describe", "--node-id", "abc"],
    ["--bootstrap-server", "127.0.0.1:1", "--bootstrap-controller", "127.0.0.1:2", "describe"],
    ["--bootstrap-controller", "127.0.0.1:2", "--bootstrap-server", "127.0.0.1:1", "describe"],
    ["--bootstrap-server", "127.0.0.1:1", "feature-dependencies"],
    ["version-mapping", "--bogus"],
]


def test_kshim_features_command_line_mistakes_match_kafka_features(kshim_binary):
    tool = ke.tool_server("org.apache.kafka.tools.FeatureCommand", ke.release_jars(TOOL_RELEASE))
    for args in USAGE_STEPS:
        res = tool.run(args, 60)
        cp = subprocess.run([str(kshim_binary), "features", *args], capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
        theirs = (res.rc, res.stdout, res.stderr)
        assert theirs[0] == 1 and theirs[2].startswith("Command line error: "), f"{args}: {theirs}"
        assert (cp.returncode, cp.stdout, cp.stderr) == theirs, f"{args}:\nkshim features: {cp}\nkafka-features.sh: {theirs}"


# The offline lookups: no server is asked; the same lines as Kafka 4.4.0's tool.
OFFLINE_STEPS = [
    ["version-mapping"],
    ["version-mapping", "--release-version", "3.3-IV3"],
    ["version-mapping", "--release-version", "3.9"],
    ["version-mapping", "--release-version", "4.0-IV1"],
    ["version-mapping", "--release-version", "4.2-IV1"],
    ["version-mapping", "--release-version", "4.2"],
    ["version-mapping", "--release-version", "4.4"],
    ["version-mapping", "--release-version", "4.5-IV0"],
    ["version-mapping", "--release-version", "4.5"],
    ["version-mapping", "--release-version", "9.9"],
    ["feature-dependencies", "--feature", "streams.version=1", "--feature", "share.version=2"],
    ["feature-dependencies", "--feature", "eligible.leader.replicas.version=1", "--feature", "metadata.version=28",
     "--feature", "transaction.version=2"],
    ["feature-dependencies", "--feature", "group.version=2"],
    ["feature-dependencies", "--feature", "metadata.version=6"],
    ["feature-dependencies", "--feature", "nope.version=1"],
]


def test_kshim_features_offline_lookups_match_kafka_features(kshim_binary):
    # Kafka's tool wants an address it can resolve even though it asks nobody.
    bootstrap = "127.0.0.1:1"
    for args in OFFLINE_STEPS:
        theirs = ke.run_feature_command(bootstrap, *args, jars=ke.release_jars(TOOL_RELEASE))
        cp = subprocess.run([str(kshim_binary), "features", *args], capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
        ours = (cp.returncode, cp.stdout, cp.stderr.replace("kshim: ", ""))
        assert ours == theirs, f"{args}:\nkshim features: {ours}\nkafka-features.sh: {theirs}"


def kshim_cli(binary, bootstrap: str, *args) -> tuple[int, str, str]:
    cp = subprocess.run([str(binary), "features", "--bootstrap-server", bootstrap, *args],
                        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return cp.returncode, cp.stdout, cp.stderr


def test_upgrade_all_stops_at_the_stable_release_and_downgrade_all_returns_to_it(kshim_factory, kshim_binary):
    """--all knows Kafka 4.4's stable release: upgrade --all leaves a level beyond it
    (share.version 3, which this kshim is told to support) alone unless --unstable, and raises
    a feature Kafka does not define to the top of its range; downgrade --all lowers what is
    above the stable release and nothing else."""
    supported = {"metadata.version": (7, 33), "group.version": (0, 1), "share.version": (0, 3),
                 "transaction.version": (0, 2), "acme.widgets": (1, 5)}
    start = {"metadata.version": 22, "group.version": 0, "share.version": 0, "transaction.version": 0,
             "acme.widgets": 1}
    proc = kshim_factory('kafka_release = "4.4"\n' + ke.kshim_feature_config(start, supported))
    rc, out, err = kshim_cli(kshim_binary, proc.bootstrap, "upgrade", "--all")
    assert rc == 0, err
    assert out == ("acme.widgets was upgraded to 5.\ngroup.version was upgraded to 1.\n"
                   "metadata.version was upgraded to 33.\nshare.version was upgraded to 2.\n"
                   "transaction.version was upgraded to 2.\n"), out
    rc, out, _ = kshim_cli(kshim_binary, proc.bootstrap, "upgrade", "--all")
    assert rc == 0 and out == "Every feature is already finalized at the level --all would set.\n", out
    rc, out, _ = kshim_cli(kshim_binary, proc.bootstrap, "upgrade", "--all", "--unstable", "--dry-run")
    assert rc == 0 and out == "share.version can be upgraded to 3.\n", out
    rc, out, _ = kshim_cli(kshim_binary, proc.bootstrap, "upgrade", "--all", "--unstable")
    assert rc == 0 and out == "share.version was upgraded to 3.\n", out

    rc, out, err = kshim_cli(kshim_binary, proc.bootstrap, "downgrade", "--all", "--yes")
    assert rc == 0 and out == "share.version was downgraded to 2.\n", (out, err)
    finalized = ke.api_versions(proc.bootstrap).finalized
    assert finalized["acme.widgets"][1] == 5, finalized
    assert finalized["metadata.version"][1] == 33 and finalized["share.version"][1] == 2, finalized
    rc, out, _ = kshim_cli(kshim_binary, proc.bootstrap, "downgrade", "--all", "--yes")
    assert rc == 0 and out == "No feature is finalized above the latest stable Kafka release's level.\n", out
    rc, _, err = kshim_cli(kshim_binary, proc.bootstrap, "upgrade", "--all", "--feature", "group.version=1")
    assert rc == 1 and "--all cannot be combined" in err, err
