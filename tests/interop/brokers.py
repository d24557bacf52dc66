"""The real Kafka brokers the interop suite shares, by kind, each started once per run.

A shared broker is never reformatted or left with other finalized features by a test, and
is left running: tests keep apart by their own topics, groups, principals and kshim
instances. A test that stops one node of the trio and starts it again takes it through
conftest's `kafka_trio_faults`, which makes sure of that. A test that needs a broker
configured or formatted otherwise, or that pauses one or changes its features, takes a
cluster of its own from conftest's `kafka_clusters` (one per module where it serves
several tests).

Kinds (both formatted at the release's defaults, plaintext, with inter-broker traffic and
the harness's own probes on a listener of their own, so that the client listener sees only
the clients and proxies under test, and KIP-848 heartbeats every second):
  single   one combined node
  trio     three combined nodes, the transaction log at min ISR 2

Two ways to get them:
  - `scripts/test.sh` runs `python tests/interop/brokers.py serve --state FILE` in the
    background before it builds, so the brokers boot while cargo works; pytest, given
    KSHIM_SHARED_BROKERS=FILE, waits for FILE to name each kind it needs, ready, and
    attaches to it (kafka_env.KafkaCluster.attach).
  - Without KSHIM_SHARED_BROKERS (one module run by hand), pytest starts each kind itself,
    the first time a test asks for it, and stops it at the end of the session.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_env as ke  # noqa: E402

GROUP_PROPERTIES = {
    # KIP-848 members learn about a new target assignment only when they heartbeat; the
    # default 5 s interval would make the rebalance tests slow.
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
    "group.consumer.session.timeout.ms": "45000",
}

KINDS: dict[str, dict] = {
    "single": dict(nodes=1, separate_inter_broker=True, extra_properties=GROUP_PROPERTIES),
    "trio": dict(
        nodes=3,
        separate_inter_broker=True,
        extra_properties={**GROUP_PROPERTIES, "transaction.state.log.min.isr": "2"},
    ),
}

BACKGROUND_BOOT_TIMEOUT_S = 400.0

# How long pytest waits for the background process to report a kind ready. Booting
# three nodes on a busy 2-core machine (cargo building beside them) takes about a minute.
ATTACH_TIMEOUT_S = float(os.environ.get("KSHIM_SHARED_BROKERS_TIMEOUT", "450"))


def new_cluster(kind: str) -> ke.KafkaCluster:
    try:
        spec = KINDS[kind]
    except KeyError:
        raise ke.EnvError(f"no shared broker kind {kind!r} (kinds: {', '.join(KINDS)})") from None
    spec = dict(spec)
    return ke.KafkaCluster(spec.pop("nodes"), **spec)


def _ready(cluster: ke.KafkaCluster) -> None:
    if len(cluster.nodes) > 1:
        cluster.wait_brokers_registered()


class SharedBrokers:
    """The shared clusters of one pytest session: attached from the background process when
    KSHIM_SHARED_BROKERS names its state file, otherwise started here on first use."""

    def __init__(self, state_file: str | None = None):
        self.state_file = Path(state_file) if state_file else None
        self._lock = threading.Lock()
        self._clusters: dict[str, ke.KafkaCluster] = {}
        self._errors: dict[str, str] = {}

    def get(self, kind: str) -> ke.KafkaCluster:
        with self._lock:
            if kind in self._errors:
                raise ke.EnvError(self._errors[kind])
            if kind not in self._clusters:
                try:
                    self._clusters[kind] = self._attach(kind) if self.state_file else self._start(kind)
                except ke.EnvError as e:
                    self._errors[kind] = f"shared broker kind {kind!r}: {e}"
                    raise ke.EnvError(self._errors[kind]) from None
            return self._clusters[kind]

    def _start(self, kind: str) -> ke.KafkaCluster:
        cluster = new_cluster(kind)
        cluster.start()
        _ready(cluster)
        return cluster

    def _attach(self, kind: str) -> ke.KafkaCluster:
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        last = "the state file does not exist yet"
        while time.monotonic() < deadline:
            try:
                state = json.loads(self.state_file.read_text())
            except FileNotFoundError:
                state = None
            except json.JSONDecodeError as e:
                state, last = None, f"unreadable state file: {e}"
            if state is not None:
                entry = state.get(kind)
                if entry and entry.get("error"):
                    raise ke.EnvError(f"the background process could not start it: {entry['error']}")
                if entry and entry.get("ready"):
                    cluster = ke.KafkaCluster.attach(entry["cluster"])
                    dead = [n.node_id for n in cluster.nodes if not n.alive()]
                    if dead:
                        raise ke.EnvError(f"nodes {dead} of the shared cluster are not running")
                    cluster.on_node_started = lambda node, kind=kind: self._record_pid(kind, node)
                    return cluster
                last = f"{kind} not ready yet (state: {sorted(state)})"
            time.sleep(0.2)
        log = self.state_file.with_name("brokers.log")
        raise ke.EnvError(
            f"{kind} was not reported ready in {self.state_file} within {ATTACH_TIMEOUT_S:.0f}s ({last})\n"
            f"--- {log}:\n{ke.tail(log)}"
        )

    def _record_pid(self, kind: str, node: ke.KafkaNode) -> None:
        """A test started a node of a shared cluster again: its PID goes to the state file, so
        that the background process stops it at the end."""
        with _state_lock(self.state_file):
            state = json.loads(self.state_file.read_text())
            for n in state[kind]["cluster"]["nodes"]:
                if n["node_id"] == node.node_id:
                    n["pid"] = node.pid
            _write_state(self.state_file, state)

    def stop(self) -> None:
        with self._lock:
            for cluster in self._clusters.values():
                cluster.cleanup()
            self._clusters.clear()


# --------------------------------------------------------------------------------------------
# the background process


class _state_lock:
    """An exclusive lock on the state file's updates, across processes."""

    def __init__(self, path: Path):
        self.path = path.with_suffix(".lock")

    def __enter__(self):
        import fcntl

        self.f = open(self.path, "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.f.close()


def _write_state(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def serve(state_path: Path, kinds: list[str], lifetime_s: float) -> int:
    """Start `kinds` side by side, report each in `state_path` once ready, then keep them
    until SIGTERM (or `lifetime_s`, so that nothing outlives a killed test run)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    lock = threading.Lock()
    clusters: list[ke.KafkaCluster] = []

    def boot(kind: str) -> None:
        started = time.monotonic()
        cluster = new_cluster(kind)
        try:
            # The build shares the cores meanwhile: a boot takes several times longer than alone.
            cluster.start(timeout=BACKGROUND_BOOT_TIMEOUT_S)
            _ready(cluster)
            entry = {"ready": True, "cluster": cluster.state(), "boot_s": round(time.monotonic() - started, 1)}
            print(f"{kind}: ready at {cluster.bootstrap} in {entry['boot_s']} s", flush=True)
        except ke.EnvError as e:
            entry = {"error": str(e)}
            print(f"{kind}: FAILED: {e}", flush=True)
        with lock, _state_lock(state_path):
            clusters.append(cluster)
            current = json.loads(state_path.read_text())
            current[kind] = entry
            _write_state(state_path, current)

    with _state_lock(state_path):
        _write_state(state_path, {})
    threads = [threading.Thread(target=boot, args=(k,), daemon=True) for k in kinds]
    for t in threads:
        t.start()
    stop.wait(lifetime_s)
    print("stopping the shared brokers", flush=True)
    for t in threads:
        t.join(timeout=5)
    with lock:
        for cluster in clusters:
            cluster.cleanup()
    # Nodes that tests started again are not this process's children: stop them by the PIDs
    # the tests recorded.
    try:
        final = json.loads(state_path.read_text())
    except (OSError, json.JSONDecodeError):
        final = {}
    for entry in final.values():
        for n in entry.get("cluster", {}).get("nodes", []):
            try:
                # The PID must still be that node's JVM, not a process that reused the number.
                with open(f"/proc/{n['pid']}/cmdline", "rb") as f:
                    ours = str(Path(n["dir"]) / "server.properties").encode() in f.read()
                if ours:
                    os.kill(n["pid"], signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="start the shared brokers and keep them until SIGTERM")
    run.add_argument("--state", required=True, type=Path, help="JSON file reporting each kind once ready")
    run.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated (default: {','.join(KINDS)})")
    run.add_argument("--lifetime", type=float, default=3600.0, help="seconds before stopping by itself")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            parser.error(f"unknown kind {k!r} (kinds: {', '.join(KINDS)})")
    return serve(args.state, kinds, args.lifetime)


if __name__ == "__main__":
    sys.exit(main())
