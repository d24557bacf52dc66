"""Real Kafka clients through kshim in proxy mode, in front of real Apache Kafka 4.1.1 clusters
(one combined node, and three combined nodes) and in front of a librdkafka mock cluster.

Clients are given kshim's bootstrap listener only. kshim opens one listener per upstream node
and rewrites broker addresses in its responses, so every byte a client exchanges with the
cluster must pass through kshim. That is proven for every test against the real clusters:
the brokers keep their inter-broker traffic on a listener of its own and log every
connection their client listener accepts (connections.log); each such connection must come
from a local port that kshim logged as one of its upstream connections
(`upstream connection from 127.0.0.1:LOCAL to 127.0.0.1:BROKER`). For the mock cluster, which
logs nothing, the client ends of all established connections to its ports are sampled
instead.

Clients: the Java producer (idempotent; transactional), consumer (classic and
group.protocol=consumer, with a rebalance) and Admin (tests/interop/java/ProxyClients.java);
kafka-topics.sh (org.apache.kafka.tools.TopicCommand); kafka-python; confluent-kafka; kcat;
franz-go (build/bin/kshim-go-client, built by scripts/install-deps.sh).

KSHIM_PROXY_TARGET=broker points the clients straight at the real brokers instead. It exists
to check the harness itself: in that mode the no-bypass proof is inverted and must flag the
direct connections of every test, and the tests that need kshim (the --upstream and mock
ones) fail.

Run: .venv/bin/python -m pytest tests/interop/test_proxy_clients.py -p no:cacheprovider -ra
(KSHIM_KEEP_TMP=1 keeps the broker and kshim directories and logs.)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

import kafka_env as ke

REPO = Path(__file__).resolve().parents[2]
PROXY_CLIENTS_SRC = REPO / "tests" / "interop" / "java" / "ProxyClients.java"
GO_CLIENT = REPO / "build" / "bin" / "kshim-go-client"

TARGET = os.environ.get("KSHIM_PROXY_TARGET", "kshim")
assert TARGET in ("kshim", "broker"), f"KSHIM_PROXY_TARGET must be kshim or broker, not {TARGET!r}"

N = 200  # messages per client run
CLIENT_TIMEOUT_S = 60


# --------------------------------------------------------------------------------------------
# helpers


def uid() -> str:
    return uuid.uuid4().hex[:8]


def values(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def run(cmd, timeout=CLIENT_TIMEOUT_S, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {timeout}s: {cmd}\nstdout:\n{e.stdout}\nstderr:\n{e.stderr}" + kshim_excerpt(),
                    pytrace=False)


# The kshim of the running test and its log size when the test began, for failure messages.
_CURRENT: dict = {}


def kshim_excerpt(limit: int = 25) -> str:
    """kshim's WARN/ERROR lines since the current test began, repeats counted."""
    proc, start = _CURRENT.get("kshim"), _CURRENT.get("offset", 0)
    if proc is None:
        return ""
    try:
        data = proc.log_path.read_bytes()
    except FileNotFoundError:
        return ""

    def warnings(text: str) -> tuple[list[str], Counter]:
        counts: Counter = Counter()
        order = []
        for line in ke._ANSI_RE.sub("", text).splitlines():
            if " WARN " in line or " ERROR " in line or "panicked" in line:
                key = line.split("Z ", 1)[-1]  # without the timestamp
                if key not in counts:
                    order.append(key)
                counts[key] += 1
        return order, counts

    order, counts = warnings(data[start:].decode(errors="replace"))
    if not order:
        earlier, _ = warnings(data[:start].decode(errors="replace"))
        return (f"\n(kshim logged no WARN/ERROR during this test; log: {proc.log_path}; its last ones before it:\n"
                + "\n".join(f"  {k}" for k in earlier[-4:]) + ")")
    lines = [f"  {counts[k]}x {k}" if counts[k] > 1 else f"  {k}" for k in order[:limit]]
    return f"\nkshim WARN/ERROR during this test ({proc.log_path}):\n" + "\n".join(lines)


def last_json(res, what: str) -> dict:
    rc = res.returncode if hasattr(res, "returncode") else res.rc
    lines = [l for l in res.stdout.splitlines() if l.startswith("{")]
    assert lines, (f"{what}: no JSON on stdout (rc={rc})\nstdout:\n{res.stdout}\nstderr:\n{res.stderr[-6000:]}"
                   + kshim_excerpt())
    out = json.loads(lines[-1])
    assert rc == 0 and "error" not in out, (
        f"{what} failed (rc={rc}): {out.get('error')}\nstderr:\n{res.stderr[-6000:]}" + kshim_excerpt())
    return out


def run_python(code: str, *args, timeout=CLIENT_TIMEOUT_S) -> dict:
    res = run([sys.executable, "-c", code, *args], timeout=timeout, stdin=subprocess.DEVNULL)
    return last_json(res, "python client")


def java(*args: str, timeout: float = CLIENT_TIMEOUT_S) -> dict:
    """Run one ProxyClients command; its own watchdog ends it (with a report of where it was
    stuck) 10 s before the outer timeout."""
    classes = ke.compile_java(PROXY_CLIENTS_SRC)
    try:
        res = ke.run_java(
            ["ProxyClients", *[str(a) for a in args], "--timeout-ms", str(int((timeout - 10) * 1000))],
            extra_classpath=[classes],
            timeout=timeout,
            log_config=ke.CLIENTS_LOG4J,
        )
    except ke.EnvError as e:
        pytest.fail(str(e) + kshim_excerpt(), pytrace=False)
    return last_json(res, f"ProxyClients {args[0]} {args[1:4]}")


def java_background(workdir: Path, name: str, *args: str, timeout: float) -> ke.BackgroundJava:
    classes = ke.compile_java(PROXY_CLIENTS_SRC)
    return ke.BackgroundJava(
        ["ProxyClients", *[str(a) for a in args], "--timeout-ms", str(int(timeout * 1000))],
        workdir=workdir, name=name, extra_classpath=[classes], log_config=ke.CLIENTS_LOG4J,
    )


class SteadyTraffic:
    """A ProxyClients producer (idempotent, acks=all, a record every 5 ms until stopped) and a
    consumer of the same topic, both in the background through `bootstrap`: the load under
    which a test stops, restarts or upgrades brokers. `stop()` returns the producer's report;
    `consumed()` waits until the consumer has seen every acknowledged value."""

    def __init__(self, workdir: Path, bootstrap: str, topic: str, prefix: str, group: str, timeout: float):
        self.stop_file, self.progress, self.expect = workdir / "stop", workdir / "progress", workdir / "expect"
        self.producer = java_background(
            workdir, "producer", "produce", "--bootstrap", bootstrap, "--topic", topic,
            "--count", "1", "--prefix", prefix, "--idempotent", "--interval-ms", "5",
            "--until-file", self.stop_file, "--progress-file", self.progress,
            "--prop", "delivery.timeout.ms=120000", "--prop", "request.timeout.ms=10000",
            "--prop", "linger.ms=5", timeout=timeout)
        self.consumer = java_background(
            workdir, "consumer", "consume", "--bootstrap", bootstrap, "--topic", topic,
            "--group", group, "--expect-file", self.expect, "--drain-ms", "2000", timeout=timeout + 40)

    def acked(self) -> int:
        try:
            return int(self.progress.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_acked(self, n: int, what: str, timeout: float = 90) -> int:
        """Waits until the producer has `n` acknowledged records, failing if it stalls or exits."""
        deadline = time.monotonic() + timeout
        while self.acked() < n:
            if not self.producer.alive():
                pytest.fail(f"producer exited while {what}:\n{ke.tail(self.producer.stderr_path)}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"acknowledged count stuck at {self.acked()} (< {n}) while {what}\n"
                            f"{ke.tail(self.producer.stderr_path)}", pytrace=False)
            time.sleep(0.2)
        return self.acked()

    def stop(self) -> dict:
        self.stop_file.touch()
        try:
            return last_json(self.producer.wait(timeout=150), "background producer")
        finally:
            if self.producer.alive():
                self.producer.stop()

    def consumed(self, acked_values: list[str]) -> dict:
        self.expect.write_text("\n".join(acked_values) + "\n")
        try:
            return last_json(self.consumer.wait(timeout=150), "background consumer")
        finally:
            self.consumer.stop()

    def abandon(self) -> None:
        self.stop_file.touch()
        for proc in (self.producer, self.consumer):
            if proc.alive():
                proc.stop()


def assert_exactly(got: list[str], want: list[str], what: str) -> None:
    """`got` is `want` with nothing lost, nothing added and nothing twice."""
    dups = sorted(v for v, c in Counter(got).items() if c > 1)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not (dups or missing or extra), (
        f"{what}: {len(got)} consumed for {len(want)} produced; "
        f"missing {len(missing)} {missing[:10]}, unexpected {len(extra)} {extra[:10]}, duplicated {len(dups)} {dups[:10]}"
        + kshim_excerpt()
    )


# --------------------------------------------------------------------------------------------
# the proxied cluster


class Proxied:
    """A real cluster with kshim in front of it (or, with KSHIM_PROXY_TARGET=broker, without)."""

    def __init__(self, cluster: ke.KafkaCluster, kshim: ke.KshimProcess | None, listener_ports: dict[int, int]):
        self.cluster = cluster
        self.kshim = kshim
        self.listener_ports = listener_ports
        self.suffix = uid()
        # More kshims in front of the same cluster, started by single tests.
        self.extra_kshims: list[ke.KshimProcess] = []

    @property
    def bootstrap(self) -> str:
        return self.kshim.bootstrap if self.kshim else self.cluster.bootstrap

    @property
    def nodes(self) -> int:
        return len(self.cluster.nodes)

    @property
    def rf(self) -> int:
        return min(3, self.nodes)

    def advertised(self) -> dict[int, tuple[str, int]]:
        """The address clients must be given for each node id."""
        if self.kshim:
            return {nid: ("127.0.0.1", p) for nid, p in self.listener_ports.items()}
        return {n.node_id: ("127.0.0.1", n.port) for n in self.cluster.nodes}

    def broker_ports(self) -> set[int]:
        out = set()
        for n in self.cluster.nodes:
            out |= {n.port, n.controller_port, *([n.internal_port] if n.internal_port else [])}
        return out

    def topic(self, name: str) -> str:
        return f"{name}-{self.suffix}"

    def setup_topics(self, specs: list[str]) -> None:
        """Harness-side topic creation, over the brokers' inter-broker listener so that it is not
        seen on the client listener (the clients under test create theirs through kshim)."""
        args = ["admin", "--bootstrap", self.cluster.internal_bootstrap]
        for spec in specs:
            args += ["--create", spec]
        out = java(*args)
        bad = {k: v for k, v in out["created"].items() if v != "ok"}
        assert not bad, f"creating test topics failed: {bad}"

    def stray_connections(self, marks: dict[int, int]) -> tuple[list[ke.AcceptedConnection], int]:
        accepted = self.cluster.accepted_connections(marks)
        if self.kshim is None:
            return accepted, len(accepted)
        deadline = time.monotonic() + 3
        while True:
            # kshim may log a connection a moment after the broker accepted it.
            pairs = {(c.local_port, c.remote_port)
                     for k in [self.kshim, *self.extra_kshims] for c in k.upstream_connections()}
            stray = [a for a in accepted if (a.remote_port, a.local_port) not in pairs]
            if not stray or time.monotonic() > deadline:
                return stray, len(accepted)
            time.sleep(0.3)


class Guard:
    """The no-bypass proof for one test."""

    def __init__(self, env: Proxied):
        self.env = env
        self.marks = env.cluster.connection_marks()
        self.checked = False

    def check(self) -> None:
        self.checked = True
        stray, total = self.env.stray_connections(self.marks)
        if self.env.kshim is None:
            assert stray, (
                "KSHIM_PROXY_TARGET=broker: the clients talked to the brokers directly, yet the "
                "brokers' connections.log shows no connection on the client listener"
            )
            return
        ports = sorted(self.env.kshim.upstream_local_ports())
        assert not stray, (
            f"{len(stray)} of {total} connections the brokers accepted on their client listener during "
            f"this test did not come from kshim: " + "; ".join(str(s) for s in stray[:10])
            + f"\nkshim logged {len(ports)} upstream connections (local ports {ports[:40]})"
            + f"\nfirst stray: {stray[0].line}" + kshim_excerpt()
        )


def start_proxied(cluster: ke.KafkaCluster, request) -> Proxied:
    """kshim in front of `cluster` (a shared one: the tests keep apart by their own topics)."""
    kshim = None
    ports: dict[int, int] = {}
    nodes = len(cluster.nodes)
    if TARGET == "kshim":
        try:
            ports = dict(zip((n.node_id for n in cluster.nodes), ke.free_ports(nodes)))
            kshim = ke.KshimProcess(upstream=cluster.bootstrap, listener_ports=ports, refresh_interval_ms=1000)
        except ke.EnvError as e:
            pytest.fail(str(e), pytrace=False)
        try:
            kshim.start()
        except ke.EnvError as e:
            kshim.cleanup()
            pytest.fail(str(e), pytrace=False)
    return Proxied(cluster, kshim, ports)


def stop_proxied(env: Proxied, request) -> None:
    failed = any(getattr(item, "rep_call", None) is not None and item.rep_call.failed
                 for item in request.session.items if item.cls is request.cls)
    if env.kshim:
        if failed or os.environ.get("KSHIM_KEEP_TMP"):
            sys.stderr.write(f"\n--- {env.kshim.log_path} (last lines)\n{ke.tail(env.kshim.log_path, 60)}\n")
        env.kshim.cleanup()


# --------------------------------------------------------------------------------------------
# client programs


KP_PRODUCE_CONSUME = r"""
import json, logging, os, sys, time
from kafka import KafkaProducer, KafkaConsumer
if os.environ.get("KSHIM_CLIENT_LOG"):
    logging.basicConfig(filename=os.environ["KSHIM_CLIENT_LOG"], level=logging.DEBUG)
bootstrap, topic, group, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
pin = {"api_version": tuple(int(x) for x in sys.argv[6].split("."))} if len(sys.argv) > 6 and sys.argv[6] else {}
consume_s = float(sys.argv[7]) if len(sys.argv) > 7 else 30
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                  request_timeout_ms=15000, max_block_ms=30000)
vals = [f"{prefix}-{i}" for i in range(n)]
futs = [(v, p.send(topic, v.encode())) for v in vals]
p.flush(timeout=20)
acked = [v for v, f in futs if f.get(timeout=5) is not None]
p.close(timeout=5)
c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, request_timeout_ms=20000, **pin)
got, deadline, drain = [], time.time() + consume_s, None
while time.time() < deadline and (drain is None or time.time() < drain):
    for tp, recs in c.poll(timeout_ms=500).items():
        got += [[r.partition, r.offset, r.value.decode()] for r in recs]
    if drain is None and len(got) >= n:
        drain = time.time() + 2
c.commit()
c.close()
print(json.dumps({"acked": acked, "records": got}))
"""

CK_PRODUCE_CONSUME = r"""
import json, sys, time
from confluent_kafka import Producer, Consumer
bootstrap, topic, group, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
acked, failed = [], []
def done(err, msg):
    (failed if err else acked).append(str(err) if err else msg.value().decode())
p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
              "message.timeout.ms": 20000})
for i in range(n):
    p.produce(topic, value=f"{prefix}-{i}".encode(), on_delivery=done)
    p.poll(0)
left = p.flush(25)
md = p.list_topics(timeout=10)
brokers = sorted([b.id, b.host, b.port] for b in md.brokers.values())
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
c.subscribe([topic])
got, errors, deadline, drain = [], [], time.time() + 30, None
while time.time() < deadline and (drain is None or time.time() < drain):
    m = c.poll(0.5)
    if m is None:
        pass
    elif m.error():
        errors.append(str(m.error()))
    else:
        got.append([m.partition(), m.offset(), m.value().decode()])
    if drain is None and len(got) >= n:
        drain = time.time() + 2
if got:
    c.commit(asynchronous=False)
c.close()
print(json.dumps({"acked": acked, "failed": failed, "unflushed": left, "brokers": brokers,
                  "records": got, "errors": errors}))
"""

CK_CONSUME = r"""
import json, sys, time
from confluent_kafka import Consumer
bootstrap, topic, group, n, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "enable.auto.offset.store": False})
c.subscribe([topic])
got, deadline, drain = [], time.time() + 40, None
while time.time() < deadline and (drain is None or time.time() < drain):
    m = c.poll(0.5)
    if m is not None and not m.error():
        got.append([m.partition(), m.offset(), m.value().decode()])
        c.store_offsets(m)
        if mode == "max" and len(got) >= n:
            break
    if mode == "count" and drain is None and len(got) >= n:
        drain = time.time() + 2
if got:
    c.commit(asynchronous=False)
c.close()
print(json.dumps({"records": got}))
"""


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def kcat_bin() -> str:
    path = shutil.which("kcat")
    if not path:
        pytest.fail("kcat is not installed; run: bash scripts/install-deps.sh", pytrace=False)
    return path


@pytest.fixture(scope="session")
def go_client() -> Path:
    if not os.access(GO_CLIENT, os.X_OK):
        pytest.fail(f"{GO_CLIENT} is missing; run: bash scripts/install-deps.sh", pytrace=False)
    return GO_CLIENT


TOPICS = {
    # name: partitions
    "java-idem": 3,
    "java-txn": 3,
    "rebalance-classic": 4,
    "rebalance-consumer": 4,
    "kafka-python": 3,
    "confluent": 3,
    "kcat": 3,
    "franz": 3,
    "offsets-java": 3,
    "offsets-confluent": 3,
}


def proxied_env(cluster: ke.KafkaCluster, request):
    """`cluster` (a shared one) with kshim in front, and the suite's topics."""
    nodes = len(cluster.nodes)
    env = start_proxied(cluster, request)
    try:
        specs = [f"{env.topic(name)}:{parts}:{env.rf}" for name, parts in TOPICS.items()]
        if nodes >= 3:
            specs.append(f"{env.topic('restart')}:3:3:min.insync.replicas=2")
        env.setup_topics(specs)
    except BaseException:
        stop_proxied(env, request)
        raise
    yield env
    stop_proxied(env, request)


@pytest.fixture(scope="class")
def single_env(request, kafka_broker):
    yield from proxied_env(kafka_broker, request)


@pytest.fixture(scope="class")
def trio_env(request, kafka_trio):
    yield from proxied_env(kafka_trio, request)


class ProxyClientSuite:
    """The client tests; subclasses choose the cluster (their `env`). The no-bypass proof
    counts every connection the cluster accepts during a test, so no other test may use the
    cluster meanwhile: with two pytest-xdist workers, every test of a shared cluster is in
    that cluster's group, which one worker runs one test at a time (conftest.py)."""

    @pytest.fixture(autouse=True)
    def guard(self, env, request):
        g = Guard(env)
        _CURRENT.update(kshim=env.kshim, offset=env.kshim.log_path.stat().st_size if env.kshim else 0)
        yield g
        _CURRENT.clear()
        passed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.passed
        if passed and not g.checked:
            g.check()

    # ---------------------------------------------------------------- Java producer/consumer

    def test_java_idempotent_producer_classic_consumer(self, env, guard):
        topic, prefix = env.topic("java-idem"), f"java-idem-{uid()}"
        out = java("produce", "--bootstrap", env.bootstrap, "--topic", topic, "--count", N,
                   "--prefix", prefix, "--idempotent")
        assert out["failed"] == []
        assert_exactly(out["acked"], values(prefix, N), "acknowledged")
        got = java("consume", "--bootstrap", env.bootstrap, "--topic", topic, "--group", f"g-{uid()}",
                   "--count", N, "--protocol", "classic")
        recs = got["records"]
        assert_exactly([r["value"] for r in recs], values(prefix, N), "Java classic consumer")
        # Idempotence: every value sits at exactly one offset.
        assert len({(r["partition"], r["offset"]) for r in recs}) == N
        assert sorted(got["committed"]) == [str(p) for p in range(TOPICS["java-idem"])]
        guard.check()

    def test_java_transactional_producer_read_committed(self, env, guard):
        topic, prefix = env.topic("java-txn"), f"java-txn-{uid()}"
        out = java("produce", "--bootstrap", env.bootstrap, "--topic", topic, "--prefix", prefix,
                   "--transactional-id", f"txn-{uid()}", "--txn-plan", "commit=80,abort=40,commit=80")
        assert len(out["acked"]) == 160 and len(out["aborted"]) == 40
        got = java("consume", "--bootstrap", env.bootstrap, "--topic", topic, "--group", f"g-{uid()}",
                   "--count", 160, "--read-committed", "--drain-ms", "3000")
        assert_exactly([r["value"] for r in got["records"]], out["acked"], "read_committed consumer")
        guard.check()

    @pytest.mark.parametrize("protocol", ["classic", "consumer"])
    def test_java_consumer_rebalance(self, env, guard, protocol):
        topic, prefix = env.topic(f"rebalance-{protocol}"), f"rb-{protocol}-{uid()}"
        n = 300
        out = java("produce", "--bootstrap", env.bootstrap, "--topic", topic, "--count", n,
                   "--prefix", prefix, "--idempotent")
        assert_exactly(out["acked"], values(prefix, n), "acknowledged")
        got = java("rebalance", "--bootstrap", env.bootstrap, "--topic", topic, "--group", f"g-{uid()}",
                   "--count", n, "--protocol", protocol, timeout=120)
        # A had its own assignment, then gave partitions up when B joined; B got some and
        # consumed from where A had committed.
        assert got["a_assignments"] and got["a_assignments"][0] == list(range(TOPICS[f"rebalance-{protocol}"]))
        assert len(got["a_assignments"]) >= 2, got["a_assignments"]
        assert any(got["b_assignments"]), got["b_assignments"]
        assert got["b"], "the second consumer received no records"
        assert got["a_before_join"] >= n // 3
        assert_exactly(got["a"] + got["b"], values(prefix, n), f"{protocol} group across a rebalance")
        guard.check()

    def test_committed_offsets_survive_restart_java(self, env, guard):
        topic, prefix, group = env.topic("offsets-java"), f"off-java-{uid()}", f"g-{uid()}"
        java("produce", "--bootstrap", env.bootstrap, "--topic", topic, "--count", N, "--prefix", prefix,
             "--idempotent")
        first = java("consume", "--bootstrap", env.bootstrap, "--topic", topic, "--group", group,
                     "--max-records", N // 3)
        part1 = [r["value"] for r in first["records"]]
        assert len(part1) == N // 3 and first["committed"]
        second = java("consume", "--bootstrap", env.bootstrap, "--topic", topic, "--group", group,
                      "--count", N - N // 3)
        part2 = [r["value"] for r in second["records"]]
        assert not set(part1) & set(part2), "records consumed again after the restart"
        assert_exactly(part2, sorted(set(values(prefix, N)) - set(part1)), "after restart")
        # The second run started exactly at the offsets the first one committed.
        starts = {}
        for r in second["records"]:
            starts[str(r["partition"])] = min(starts.get(str(r["partition"]), r["offset"]), r["offset"])
        for p, off in first["committed"].items():
            if p in starts:
                assert starts[p] == off, f"partition {p}: resumed at {starts[p]}, committed {off}"
        guard.check()

    def test_committed_offsets_survive_restart_confluent(self, env, guard):
        topic, prefix, group = env.topic("offsets-confluent"), f"off-ck-{uid()}", f"g-{uid()}"
        java("produce", "--bootstrap", env.bootstrap, "--topic", topic, "--count", N, "--prefix", prefix,
             "--idempotent")
        first = run_python(CK_CONSUME, env.bootstrap, topic, group, str(N // 3), "max")
        part1 = [r[2] for r in first["records"]]
        assert len(part1) == N // 3
        second = run_python(CK_CONSUME, env.bootstrap, topic, group, str(N - N // 3), "count")
        part2 = [r[2] for r in second["records"]]
        assert not set(part1) & set(part2), "records consumed again after the restart"
        assert_exactly(part2, sorted(set(values(prefix, N)) - set(part1)), "after restart")
        guard.check()

    # ---------------------------------------------------------------- other clients

    def test_kafka_python_produce_consume(self, env, guard):
        topic, prefix = env.topic("kafka-python"), f"kp-{uid()}"
        out = run_python(KP_PRODUCE_CONSUME, env.bootstrap, topic, f"g-{uid()}", prefix, str(N))
        assert_exactly(out["acked"], values(prefix, N), "kafka-python acknowledged")
        assert_exactly([r[2] for r in out["records"]], values(prefix, N), "kafka-python consumer")
        guard.check()

    def test_confluent_kafka_produce_consume(self, env, guard):
        topic, prefix = env.topic("confluent"), f"ck-{uid()}"
        out = run_python(CK_PRODUCE_CONSUME, env.bootstrap, topic, f"g-{uid()}", prefix, str(N))
        assert out["failed"] == [] and out["unflushed"] == 0
        assert_exactly(out["acked"], values(prefix, N), "confluent-kafka acknowledged")
        assert_exactly([r[2] for r in out["records"]], values(prefix, N), "confluent-kafka consumer")
        assert out["brokers"] == sorted([nid, h, p] for nid, (h, p) in env.advertised().items())
        guard.check()

    def test_kcat_produce_consume(self, env, guard, kcat_bin):
        topic, prefix = env.topic("kcat"), f"kcat-{uid()}"
        want = values(prefix, N)
        res = run([kcat_bin, "-P", "-b", env.bootstrap, "-t", topic, "-X", "enable.idempotence=true",
                   "-X", "acks=all", "-X", "message.timeout.ms=60000"],
                  input="\n".join(want) + "\n")
        assert res.returncode == 0 and "Delivery failed" not in res.stderr and "ERROR" not in res.stderr, res.stderr
        res = run([kcat_bin, "-C", "-b", env.bootstrap, "-G", f"g-{uid()}", "-o", "beginning", "-e", "-q",
                   "-f", "%s\\n", "-X", "auto.offset.reset=earliest", topic])
        assert res.returncode == 0, res.stderr
        assert_exactly([l for l in res.stdout.splitlines() if l], want, "kcat balanced consumer")
        res = run([kcat_bin, "-L", "-J", "-b", env.bootstrap, "-t", topic], timeout=30)
        assert res.returncode == 0, res.stderr
        md = json.loads(res.stdout)
        assert sorted((b["id"], b["name"]) for b in md["brokers"]) == sorted(
            (nid, f"{h}:{p}") for nid, (h, p) in env.advertised().items())
        guard.check()

    def test_franz_go_produce_consume(self, env, guard, go_client):
        topic, prefix = env.topic("franz"), f"franz-{uid()}"
        res = run([go_client, "--bootstrap", env.bootstrap, "--topic", topic, "--timeout", "45s", "produce", "--count", N,
                   "--prefix", prefix])
        out = last_json(res, "kshim-go-client produce")
        assert_exactly(out["acked"], values(prefix, N), "franz-go acknowledged")
        res = run([go_client, "--bootstrap", env.bootstrap, "--topic", topic, "--timeout", "45s", "consume", "--group",
                   f"g-{uid()}", "--count", N])
        out = last_json(res, "kshim-go-client consume")
        assert_exactly([r["value"] for r in out["records"]], values(prefix, N), "franz-go consumer")
        guard.check()

    # ---------------------------------------------------------------- Admin and tools

    def test_java_admin_create_describe(self, env, guard):
        t1, t2 = env.topic(f"admin-a-{uid()}"), env.topic(f"admin-b-{uid()}")
        out = java("admin", "--bootstrap", env.bootstrap, "--create", f"{t1}:3:{env.rf}",
                   "--create", f"{t2}:1:1:cleanup.policy=compact")
        assert out["created"] == {t1: "ok", t2: "ok"}
        advertised = env.advertised()
        broker_ports = env.broker_ports()
        listening = env.kshim.listening_ports() if env.kshim else None

        def is_listener(host: str, port: int, what: str) -> None:
            if env.kshim:
                assert port not in broker_ports, f"{what} is a broker port: {host}:{port}"
                assert port in listening, f"{what} {host}:{port} is not one of kshim's listeners {sorted(listening)}"

        nodes = out["cluster"]["nodes"]
        assert [(n["id"], n["host"], n["port"]) for n in nodes] == [
            (nid, h, p) for nid, (h, p) in sorted(advertised.items())]
        for n in nodes:
            is_listener(n["host"], n["port"], f"describeCluster node {n['id']}")
        ctl = out["cluster"]["controller"]
        assert ctl is not None and ctl["id"] in advertised
        is_listener(*ke.split_hostport(ctl["address"]), "describeCluster controller")
        assert out["cluster"]["cluster_id"] == env.cluster.cluster_id

        for name in (t1, t2):
            for part in out["topics"][name]:
                for addr in [part["leader"], *part["replicas"], *part["isr"]]:
                    is_listener(*ke.split_hostport(addr), f"{name}[{part['partition']}] replica")
        assert len(out["topics"][t1]) == 3 and all(len(p["replicas"]) == env.rf for p in out["topics"][t1])

        fin = out["features"]["finalized"]
        assert fin.get("metadata.version", {}).get("max", 0) >= 1, out["features"]
        assert all(r["min"] == r["max"] for r in fin.values()), fin
        # What the cluster itself has finalized (asked on its inter-broker listener).
        real = ke.api_versions(env.cluster.nodes[0].probe_bootstrap)
        assert {k: v["max"] for k, v in fin.items()} == {k: hi for k, (lo, hi) in real.finalized.items()}
        guard.check()

    def test_kafka_topics_command(self, env, guard):
        topic = env.topic(f"topiccmd-{uid()}")
        tool = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh in Kafka 4.1.1
        res = ke.run_java([tool, "--bootstrap-server", env.bootstrap, "--create", "--topic", topic,
                           "--partitions", "3", "--replication-factor", str(env.rf)], timeout=CLIENT_TIMEOUT_S)
        assert res.rc == 0 and f"Created topic {topic}." in res.stdout, res.stdout + res.stderr
        res = ke.run_java([tool, "--bootstrap-server", env.bootstrap, "--describe", "--topic", topic],
                          timeout=CLIENT_TIMEOUT_S)
        assert res.rc == 0, res.stdout + res.stderr
        parts = [l for l in res.stdout.splitlines() if l.strip().startswith(f"Topic: {topic}\tPartition:")]
        assert len(parts) == 3, res.stdout
        node_ids = {str(n.node_id) for n in env.cluster.nodes}
        for line in parts:
            fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
            assert fields["Leader"] in node_ids, line
            assert len(fields["Replicas"].split(",")) == env.rf, line
        res = ke.run_java([tool, "--bootstrap-server", env.bootstrap, "--list"], timeout=CLIENT_TIMEOUT_S)
        assert res.rc == 0, res.stdout + res.stderr
        listed = set(res.stdout.split())
        assert topic in listed and env.topic("java-idem") in listed, res.stdout
        guard.check()

    # ---------------------------------------------------------------- the proof itself

    def test_no_bypass_proof_detects_direct_connection(self, env, guard):
        """A connection straight to a broker's client listener is named by the proof; without
        this, a broken connections.log would make every other proof pass vacuously."""
        guard.checked = True  # this test bypasses kshim on purpose
        marks = env.cluster.connection_marks()
        node = env.cluster.nodes[-1]
        info = ke.api_versions(node.bootstrap)
        assert info.error_code == 0
        # The broker logs the accept on its own thread: wait for the line before the proof reads
        # the log (stray_connections returns at once when nothing stray is logged yet).
        ke.wait_until(lambda: env.stray_connections(marks)[0], 8)
        stray, total = env.stray_connections(marks)
        assert total >= 1, f"{node.connections_log_path} recorded no accepted connection"
        assert any(s.node_id == node.node_id and s.local_port == node.port for s in stray), stray
        # ...while one through kshim is not.
        marks = env.cluster.connection_marks()
        java("admin", "--bootstrap", env.bootstrap)
        stray, total = env.stray_connections(marks)
        if env.kshim:
            assert total >= 1, "a Java Admin session through kshim made no upstream connection"
            assert stray == []


class TestSingleNode(ProxyClientSuite):
    @pytest.fixture
    def env(self, single_env):
        return single_env

    @pytest.mark.parametrize("table", ["no-upstream-table", "upstream-table-without-bootstrap"])
    def test_cli_upstream(self, env, guard, table):
        """`kshim serve --upstream HOST:PORT` supplies the broker list: with no [upstream] table
        in the config at all, and with a table that sets only the other upstream options."""
        if env.kshim is None:
            pytest.fail("KSHIM_PROXY_TARGET=broker: this test needs kshim", pytrace=False)
        kw = {"refresh_interval_ms": None, "port_base": None}
        if table == "upstream-table-without-bootstrap":
            kw = {"refresh_interval_ms": 1000, "port_base": 0}
        try:
            proc = ke.KshimProcess(upstream=env.cluster.bootstrap, upstream_via_cli=True, **kw)
        except ke.EnvError as e:
            pytest.fail(str(e), pytrace=False)
        env.extra_kshims.append(proc)
        try:
            try:
                proc.start()
            except ke.EnvError as e:
                pytest.fail(f"kshim with --upstream and this config did not start:\n{proc.config_text}\n{e}",
                            pytrace=False)
            _CURRENT.update(kshim=proc, offset=0)
            code = r"""
import json, sys
from confluent_kafka.admin import AdminClient
md = AdminClient({"bootstrap.servers": sys.argv[1]}).list_topics(timeout=15)
print(json.dumps({"brokers": sorted([b.id, b.host, b.port] for b in md.brokers.values()),
                  "topics": sorted(md.topics)}))
"""
            out = run_python(code, proc.bootstrap)
            listening = proc.listening_ports()
            assert [b[0] for b in out["brokers"]] == [n.node_id for n in env.cluster.nodes]
            for nid, host, port in out["brokers"]:
                assert port not in env.broker_ports() and port in listening, (nid, host, port, sorted(listening))
            assert env.topic("java-idem") in out["topics"]
            guard.check()
        finally:
            proc.cleanup()


class TestThreeNodes(ProxyClientSuite):
    @pytest.fixture
    def env(self, trio_env):
        return trio_env

    def test_broker_restart_during_produce_consume(self, env, guard, tmp_path, kafka_trio_faults):
        """Node 2 is stopped and started again while a producer (acks=all, idempotent) and a
        consumer run through kshim against a topic with RF 3 and min.insync.replicas 2."""
        topic, prefix = env.topic("restart"), f"restart-{uid()}"
        traffic = SteadyTraffic(tmp_path, env.bootstrap, topic, prefix, f"g-{uid()}", timeout=240)
        try:
            traffic.wait_acked(200, "starting")
            before_stop = traffic.acked()
            env.cluster.stop_node(2)
            during = traffic.wait_acked(before_stop + 300, "node 2 was down")
            assert not env.cluster.node(2).alive()
            env.cluster.start_node(2)
            env.cluster.wait_brokers_registered()
            after = traffic.wait_acked(traffic.acked() + 300, "node 2 was back")
            prod = traffic.stop()
        except BaseException:
            traffic.abandon()
            raise

        acked_vals = prod["acked"]
        print(f"restart run: {len(acked_vals)} acknowledged ({before_stop} before node 2 stopped, "
              f"{during} by the time it was restarted), {len(prod['failed'])} failed")
        assert len(acked_vals) >= after > during > before_stop
        cons = traffic.consumed(acked_vals)
        seen = {r["value"] for r in cons["records"]}
        missing = sorted(set(acked_vals) - seen)
        assert not missing, f"{len(missing)} acknowledged records never consumed: {missing[:10]}"
        attempted = {f["value"] for f in prod["failed"]} | set(acked_vals)
        assert seen <= attempted, sorted(seen - attempted)[:10]

        # Read back everything afterwards with a fresh group: every acknowledged record is in the
        # log exactly once (the idempotent producer's retries across the outage added no copies).
        after_run = java("consume", "--bootstrap", env.bootstrap, "--topic", topic, "--group", f"g-{uid()}",
                         "--count", len(acked_vals), "--drain-ms", "3000", timeout=120)
        by_value = Counter(r["value"] for r in after_run["records"])
        assert set(acked_vals) <= set(by_value), sorted(set(acked_vals) - set(by_value))[:10]
        dups = [v for v, c in by_value.items() if c > 1]
        assert not dups, f"{len(dups)} records are in the log more than once: {dups[:10]}"
        guard.check()


# --------------------------------------------------------------------------------------------
# librdkafka's mock cluster as the upstream


@pytest.fixture(scope="class")
def mock(librdkafka_mock):
    return librdkafka_mock


@pytest.fixture(scope="class")
def mock_kshim(mock, request):
    if TARGET == "broker":
        pytest.fail("KSHIM_PROXY_TARGET=broker applies to the real clusters only; the mock tests need kshim",
                    pytrace=False)
    # The mock's brokers have no finalized features: it answers ApiVersions v0-v2 only,
    # which carry none (a v3 request gets UNSUPPORTED_VERSION).
    first = mock.bootstrap.split(",")[0]
    assert ke.api_versions(first).error_code == 35
    # port_base 0: an ephemeral listener per mock node.
    try:
        proc = ke.KshimProcess(upstream=mock.bootstrap, port_base=0)
    except ke.EnvError as e:
        pytest.fail(str(e), pytrace=False)
    ke.start_or_fail(proc)
    yield proc
    failed = any(getattr(i, "rep_call", None) is not None and i.rep_call.failed
                 for i in request.session.items if i.cls is request.cls)
    if failed:
        sys.stderr.write(f"\n--- {proc.log_path} (last lines)\n{ke.tail(proc.log_path, 60)}\n")
    proc.cleanup()


class MockGuard:
    """The no-bypass proof against the mock cluster: every client-side connection to a mock
    broker seen during the test is kshim's (or the mock helper's own client's)."""

    def __init__(self, mock: ke.MockCluster, kshim: ke.KshimProcess | None):
        self.mock = mock
        self.kshims = [kshim] if kshim else []
        self.sampler = ke.ConnectionSampler(mock.ports, own_inodes=mock.own_socket_inodes)
        self.checked = False

    def __enter__(self) -> "MockGuard":
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.sampler.__exit__(*exc)

    def stray(self) -> list[tuple[int, int]]:
        seen = dict(self.sampler.seen)
        # One more sample, taken here; kshim's log catching up is waited for below.
        for lport, rport, inode in ke.established_to(self.sampler.ports):
            seen.setdefault((lport, rport), inode)
        own = self.mock.own_socket_inodes() | self.sampler.owned
        deadline = time.monotonic() + 3
        while True:
            kshim_ports = set().union(*(k.upstream_local_ports() for k in self.kshims))
            stray = sorted((lp, rp) for (lp, rp), inode in seen.items() if lp not in kshim_ports and inode not in own)
            if not stray or time.monotonic() > deadline:
                return stray
            time.sleep(0.3)

    def check(self) -> None:
        self.checked = True
        if not self.kshims:
            return
        stray = self.stray()
        kshim_ports = set().union(*(k.upstream_local_ports() for k in self.kshims))
        assert not stray, (
            f"connections to the mock brokers that were not kshim's (local port, mock port): {stray}; "
            f"kshim upstream local ports: {sorted(kshim_ports)}" + kshim_excerpt()
        )


class TestMockCluster:
    @pytest.fixture
    def sampler(self, mock, mock_kshim, request):
        with MockGuard(mock, mock_kshim) as g:
            _CURRENT.update(kshim=mock_kshim, offset=mock_kshim.log_path.stat().st_size if mock_kshim else 0)
            yield g
        _CURRENT.clear()
        passed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.passed
        if passed and not g.checked:
            g.check()

    def bootstrap(self, mock, mock_kshim) -> str:
        return mock_kshim.bootstrap

    def test_mock_no_bypass_proof_detects_direct_connection(self, mock, mock_kshim, sampler):
        """A connection straight to a mock broker is caught by the sampler."""
        host, port = ke.split_hostport(mock.bootstrap.split(",")[1])
        with socket.create_connection((host, port), timeout=5) as s:
            mine = s.getsockname()[1]
            assert ke.wait_until(lambda: (mine, port) in sampler.sampler.seen, 5), "the sampler never saw it"
        assert (mine, port) in sampler.stray()
        sampler.checked = True

    def test_mock_api_versions_finalized_features(self, mock, mock_kshim, sampler):
        bootstrap = self.bootstrap(mock, mock_kshim)
        info = ke.api_versions(bootstrap)
        assert info.error_code == 0
        # The mock finalizes none of Apache Kafka's features and advertises none:
        # kshim invents no level (nor range) for them.
        kafka_names = {"metadata.version", "kraft.version", "group.version", "transaction.version",
                       "share.version", "eligible.leader.replicas.version", "streams.version"}
        assert not kafka_names & set(info.finalized), info.finalized
        assert not kafka_names & set(info.supported), info.supported
        assert info.finalized_epoch is not None and info.finalized_epoch >= 0
        assert all(lo == hi for lo, hi in info.finalized.values()), info.finalized
        code = r"""
import json, sys
from kafka.admin import KafkaAdminClient
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=15000)
try:
    f = a.describe_features()
finally:
    a.close()
print(json.dumps({"features": f}))
"""
        out = run_python(code, bootstrap)
        levels = {n: i["finalized"][1] for n, i in out["features"].items() if "finalized" in i}
        assert levels == {n: hi for n, (lo, hi) in info.finalized.items()}
        sampler.check()

    def test_mock_confluent_produce_consume(self, mock, mock_kshim, sampler):
        bootstrap = self.bootstrap(mock, mock_kshim)
        topic, prefix = f"mock-ck-{uid()}", f"mock-ck-{uid()}"
        out = run_python(CK_PRODUCE_CONSUME, bootstrap, topic, f"g-{uid()}", prefix, str(N))
        assert out["failed"] == [] and out["unflushed"] == 0
        assert_exactly(out["acked"], values(prefix, N), "confluent-kafka acknowledged (mock)")
        assert_exactly([r[2] for r in out["records"]], values(prefix, N), "confluent-kafka consumer (mock)")
        assert [b[0] for b in out["brokers"]] == [1, 2, 3]
        if mock_kshim:
            listening = mock_kshim.listening_ports()
            for nid, host, port in out["brokers"]:
                assert port not in mock.ports and port in listening, (nid, host, port, sorted(listening))
        sampler.check()

    def test_mock_closes_join_group_v6(self, mock, sampler):
        """The librdkafka mock drops the connection on the JoinGroup v6 request kafka-python 3.0.12
        sends (these bytes, captured on the wire between kshim and the mock, are what
        kafka-python gave kshim), also when it comes straight from a client. Hence the consumer
        below pins api_version 2.3, which makes kafka-python use JoinGroup v5."""
        sampler.checked = True  # straight to the mock, on purpose
        frame = bytes.fromhex(
            "00000067000b00060000000200136b61666b612d707974686f6e2d332e302e3132000367580000afc8"
            "000493e0010009636f6e73756d6572030672616e67650f0000000000010002743100000000000b726f"
            "756e64726f62696e0f00000000000100027431000000000000")
        with socket.create_connection(ke.split_hostport(mock.bootstrap.split(",")[0]), timeout=5) as s:
            s.sendall(frame)
            assert s.recv(4096) == b"", "the mock answered JoinGroup v6: the api_version pin below can go"

    def test_mock_kafka_python_produce_consume(self, mock, mock_kshim, sampler, tmp_path, monkeypatch):
        bootstrap = self.bootstrap(mock, mock_kshim)
        topic, prefix = f"mock-kp-{uid()}", f"mock-kp-{uid()}"
        # The mock sometimes holds the consumer's JoinGroup for about 29 s before it answers (seen
        # in the client's debug log, about once in 13 runs), so the consumer gets 60 s, not 30,
        # to see every record. The client's own debug log is shown if it still comes back short.
        client_log = tmp_path / "kafka-python.log"
        monkeypatch.setenv("KSHIM_CLIENT_LOG", str(client_log))
        out = run_python(KP_PRODUCE_CONSUME, bootstrap, topic, f"g-{uid()}", prefix, str(N), "2.3", "60",
                         timeout=120)
        assert_exactly(out["acked"], values(prefix, N), "kafka-python acknowledged (mock)")
        got = [r[2] for r in out["records"]]
        if sorted(got) != sorted(values(prefix, N)):
            sys.stderr.write(f"\n--- {client_log} (last lines)\n{ke.tail(client_log, 120)}\n")
        assert_exactly(got, values(prefix, N), "kafka-python consumer (mock)")
        sampler.check()
