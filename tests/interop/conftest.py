"""Pytest fixtures for the interop tests: a real Kafka broker and kshim processes.

Missing prerequisites fail loudly (never skip): a missing kshim binary names the build
command, missing Kafka jars name the install command.

    --kshim-bin PATH   (or env KSHIM_BIN)   kshim binary to test; default target/release/kshim
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_env  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--kshim-bin",
        action="store",
        default=None,
        help="path of the kshim binary under test (default: $KSHIM_BIN or target/release/kshim)",
    )


def pytest_configure(config):
    path = config.getoption("--kshim-bin")
    if path:
        os.environ["KSHIM_BIN"] = str(Path(path).resolve())


@pytest.fixture(scope="session")
def kafka_jars() -> Path:
    return kafka_env.require_or_fail(kafka_env.require_jars)


@pytest.fixture(scope="session")
def kafka_broker(kafka_jars):
    """A real Apache Kafka 4.1.1 KRaft node (broker+controller) for the whole session.

    Attributes: .bootstrap ("127.0.0.1:PORT"), .log_path, .nodes, .workdir.
    Tests that change finalized features should start their own cluster instead.
    """
    cluster = kafka_env.start_or_fail(kafka_env.KafkaCluster(1))
    yield cluster
    cluster.cleanup()


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
