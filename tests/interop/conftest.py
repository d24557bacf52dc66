"""Pytest fixtures for the interop tests: real Kafka brokers and kshim processes.

Missing prerequisites fail loudly (never skip): a missing kshim binary names the build
command, missing Kafka jars name the install command.

Brokers come from three fixtures, and only from them:
  kafka_broker    the shared single node (tests/interop/brokers.py)
  kafka_trio      the shared three-node cluster (kafka_trio_faults: for a test that stops
                  and restarts its nodes)
  kafka_clusters  a factory of clusters of a test's (or a module's) own, for tests that stop,
                  pause or reformat brokers or change their finalized features
A test that starts brokers of its own in another process (the soak) says so with the
`own_brokers` marker. Every test that uses one of them, or has that marker, is marked `broker`; `scripts/test.sh --quick` runs the
others (`-m "not broker"`), and there a broker started any other way fails the test.

    --kshim-bin PATH      (or env KSHIM_BIN)   kshim binary to test; default target/release/kshim
    --module-times FILE   write each module's wall time (setup, tests, teardown) as TSV
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import brokers  # noqa: E402
import kafka_env  # noqa: E402

BROKER_FIXTURES = {"shared_brokers", "kafka_broker", "kafka_trio", "kafka_trio_faults", "kafka_clusters"}


def pytest_addoption(parser):
    parser.addoption(
        "--kshim-bin",
        action="store",
        default=None,
        help="path of the kshim binary under test (default: $KSHIM_BIN or target/release/kshim)",
    )
    parser.addoption(
        "--module-times",
        action="store",
        default=None,
        help="write each module's wall time in seconds and test count, tab-separated, to this file",
    )


def pytest_configure(config):
    path = config.getoption("--kshim-bin")
    if path:
        os.environ["KSHIM_BIN"] = str(Path(path).resolve())
    config.addinivalue_line("markers", "broker: needs a real Kafka broker (set from the fixtures it uses)")
    config.addinivalue_line("markers", "xdist_group(name): tests that pytest-xdist runs in one worker")
    config.addinivalue_line("markers", "own_brokers: starts Kafka brokers of its own in another process (the soak)")


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        # A test marked `broker` by hand takes the shared node at run time (getfixturevalue).
        own = item.get_closest_marker("own_brokers") is not None
        dynamic = item.get_closest_marker("broker") is not None and not BROKER_FIXTURES & used and not own
        if BROKER_FIXTURES & used or own:
            item.add_marker(pytest.mark.broker)
        # With pytest-xdist (--dist loadgroup) a group runs in one worker, one test at a time.
        # The tests of each shared cluster are one group: the no-bypass checks count every
        # connection that cluster accepts during a test. The other tests go by module, so that
        # a module's own cluster serves it in one worker.
        if {"kafka_trio", "kafka_trio_faults"} & used:
            group = "shared-trio"
        elif {"kafka_broker", "shared_brokers"} & used or dynamic:
            group = "shared-single"
        else:
            group = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


_module_seconds: dict[str, float] = defaultdict(float)
_module_tests: dict[str, int] = defaultdict(int)
# Under --dist loadgroup a test's node id ends with "@" and its group: each group runs in one
# worker, so the longest group bounds the stage's wall time however the rest is spread.
_group_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    # Called in the process that prints the summary, also for tests that xdist's workers ran.
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] += report.duration
    if "@" in report.nodeid:
        _group_seconds[report.nodeid.rsplit("@", 1)[1]] += report.duration
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _module_tests[module] += 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _module_seconds or hasattr(config, "workerinput"):
        return
    terminalreporter.section("time per module (setup, tests and teardown)")
    for module, seconds in sorted(_module_seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {_module_tests[module]:4d} tests  {module}")
    if _group_seconds:
        terminalreporter.section("time per xdist group (each runs in one worker)")
        for group, seconds in sorted(_group_seconds.items(), key=lambda kv: -kv[1])[:8]:
            terminalreporter.write_line(f"{seconds:8.1f} s  {group}")
    out = config.getoption("--module-times")
    if out:
        Path(out).write_text(
            "".join(f"{m}\t{round(s)}\t{_module_tests[m]}\n" for m, s in _module_seconds.items())
        )


@pytest.fixture(scope="session")
def kafka_jars() -> Path:
    return kafka_env.require_or_fail(kafka_env.require_jars)


@pytest.fixture(scope="session")
def shared_brokers(kafka_jars):
    pool = brokers.SharedBrokers(os.environ.get("KSHIM_SHARED_BROKERS"))
    yield pool
    pool.stop()


@pytest.fixture(scope="session")
def kafka_broker(shared_brokers):
    """The shared Apache Kafka KRaft node (broker+controller), for the whole session.

    Attributes: .bootstrap ("127.0.0.1:PORT"), .log_path, .nodes, .workdir.
    Never stop, pause or reformat it, nor change its finalized features: use
    `kafka_clusters` for that.
    """
    return kafka_env.require_or_fail(shared_brokers.get, "single")


@pytest.fixture(scope="session")
def kafka_trio(shared_brokers):
    """The shared three-node cluster (inter-broker traffic on a listener of its own);
    the same rules as `kafka_broker`."""
    return kafka_env.require_or_fail(shared_brokers.get, "trio")


@pytest.fixture
def kafka_trio_faults(kafka_trio):
    """The shared trio, for a test that stops and starts its nodes: after the test, every node
    is running again and registered, or the test fails saying which is not."""
    yield kafka_trio
    try:
        for node in kafka_trio.nodes:
            if not node.alive():
                kafka_trio.start_node(node.node_id)
        kafka_trio.wait_brokers_registered()
    except kafka_env.EnvError as e:
        pytest.fail(f"the shared trio could not be made whole again after the test: {e}", pytrace=False)


@pytest.fixture(scope="session")
def librdkafka_mock():
    """librdkafka's mock cluster of three brokers (no feature support), shared by the session:
    tests keep apart by their own topics and kshim instances."""
    mock = kafka_env.start_or_fail(kafka_env.MockCluster(3, lifetime_s=3600))
    yield mock
    mock.cleanup()


class OwnClusters:
    """Starts clusters of a test's or a module's own (kafka_env.KafkaCluster arguments);
    the caller cleans each up, and whatever is left is cleaned up at the session's end."""

    def __init__(self):
        self._made: list[kafka_env.KafkaCluster] = []

    def start(self, nodes: int = 1, **kwargs) -> kafka_env.KafkaCluster:
        return self.start_cluster(kafka_env.KafkaCluster(nodes, **kwargs))

    def start_cluster(self, cluster: kafka_env.KafkaCluster) -> kafka_env.KafkaCluster:
        """Starts a cluster made elsewhere (tls_support.ssl_only_broker, say)."""
        self._made.append(cluster)
        return kafka_env.start_or_fail(cluster)

    def cleanup(self) -> None:
        for cluster in self._made:
            cluster.cleanup()


@pytest.fixture(scope="session")
def kafka_clusters(kafka_jars):
    own = OwnClusters()
    yield own
    own.cleanup()


@pytest.fixture(scope="session")
def kshim_binary() -> Path:
    return kafka_env.require_or_fail(kafka_env.require_kshim_binary)


@pytest.fixture
def kshim_factory(kshim_binary, request):
    """kshim_factory(config_toml="", draft_tags=True) -> a started KshimProcess.

    The returned object has .bootstrap, .data_dir, .log_path, .config_path, .stop(), .restart().
    Every process made here is stopped when the test ends; on failure its log tail is printed.
    """
    made: list[kafka_env.KshimProcess] = []

    def factory(config_toml: str = "", draft_tags: bool = True, **kwargs) -> kafka_env.KshimProcess:
        proc = kafka_env.KshimProcess(config_toml, draft_tags=draft_tags, binary=kshim_binary, **kwargs)
        made.append(proc)
        return kafka_env.start_or_fail(proc)

    yield factory

    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for proc in made:
        if failed:
            sys.stderr.write(f"\n--- {proc.log_path} (last lines)\n{kafka_env.tail(proc.log_path)}\n")
        proc.cleanup()


@pytest.fixture
def kshim(kshim_factory):
    """A standalone kshim with the default config (Kafka 4.1's supported features)."""
    return kshim_factory()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
