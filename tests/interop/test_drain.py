"""Stopping kshim without losing requests: two kshim instances behind one address, one drained
(SIGTERM) while a Java producer (acks=all, idempotent) and a consumer run through it.

The address is a TCP balancer of this module's own, standing for a Kubernetes Service or a
cloud load balancer: it listens on 127.0.0.1 at the ports the two instances listen on (they
listen on 127.0.0.2 and 127.0.0.3 and advertise 127.0.0.1, as pods behind a Service advertise
the Service), sends each new connection to an instance whose /readyz answered 200 at its last
check (every 100 ms), and relays bytes both ways.
"""

import json
import os
import selectors
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

import kafka_env as ke

FAILOVER_SRC = ke.REPO_ROOT / "tests" / "interop" / "java" / "ClusterFailover.java"
RECORDS = 1200
DELAY_MS = 3000
TOKEN = "drain-token"


class Balancer:
    """A TCP balancer on 127.0.0.1: for each listening port, new connections go to the same port
    of a backend host whose readiness URL answered 200 at its last check; bytes are relayed as
    they come. Counts the connections it sent to each backend, and knows which are open."""

    def __init__(self, ports: list[int], backends: dict[str, str]):
        self.backends = backends  # host -> readiness URL
        self.ready: dict[str, bool] = {h: False for h in backends}
        self.sent: dict[str, int] = {h: 0 for h in backends}
        self.open: dict[str, int] = {h: 0 for h in backends}
        self.refused = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._turn = 0
        self._listeners = []
        for port in ports:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(64)
            s.settimeout(0.2)
            self._listeners.append(s)
        self._threads = [threading.Thread(target=self._check, daemon=True)]
        self._threads += [threading.Thread(target=self._accept, args=(s,), daemon=True) for s in self._listeners]
        for t in self._threads:
            t.start()

    def _check(self) -> None:
        while not self._stop.is_set():
            for host, url in self.backends.items():
                try:
                    with urllib.request.urlopen(url, timeout=1) as r:
                        ok = r.status == 200
                except (urllib.error.URLError, OSError):
                    ok = False
                self.ready[host] = ok
            self._stop.wait(0.1)

    def _pick(self) -> str | None:
        with self._lock:
            ready = [h for h in sorted(self.backends) if self.ready[h]]
            if not ready:
                return None
            self._turn += 1
            return ready[self._turn % len(ready)]

    def _accept(self, listener: socket.socket) -> None:
        port = listener.getsockname()[1]
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            host = self._pick()
            try:
                if host is None:
                    raise ConnectionRefusedError("no backend ready")
                backend = socket.create_connection((host, port), timeout=2)
            except OSError:
                with self._lock:
                    self.refused += 1
                client.close()
                continue
            with self._lock:
                self.sent[host] += 1
                self.open[host] += 1
            threading.Thread(target=self._relay, args=(client, backend, host), daemon=True).start()

    def _relay(self, client: socket.socket, backend: socket.socket, host: str) -> None:
        sel = selectors.DefaultSelector()
        peer = {client: backend, backend: client}
        for s in peer:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(0.2):
                    try:
                        data = key.fileobj.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        return
                    out = peer[key.fileobj]
                    out.setblocking(True)
                    out.sendall(data)
                    out.setblocking(False)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            backend.close()
            with self._lock:
                self.open[host] -= 1

    def close(self) -> None:
        self._stop.set()
        for s in self._listeners:
            s.close()
        for t in self._threads:
            t.join(5)


def readyz(admin_port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_drained_instance_loses_no_acknowledged_record(kafka_broker, kshim_binary, tmp_path):
    """SIGTERM to the instance the clients use: /readyz turns 503 at once while the instance
    still accepts; the balancer sends new connections to the other one; after
    shutdown_delay_ms it stops accepting, finishes what it had read and exits 0; every record
    the producer had acknowledged is consumed once, and no send failed."""
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "drain-" + uuid.uuid4().hex[:6]
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        admin.close()

    boot_port, *node_ports = ke.free_ports(1 + len(kafka_broker.nodes))
    listener_ports = {n.node_id: p for n, p in zip(kafka_broker.nodes, node_ports)}
    admin_ports = ke.free_ports(2)
    hosts = ["127.0.0.2", "127.0.0.3"]
    instances = []
    balancer = None
    java = None
    try:
        for host, admin_port in zip(hosts, admin_ports):
            config = f"""
shutdown_delay_ms = {DELAY_MS}

[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"

[upstream]
bootstrap = "{kafka_broker.bootstrap}"
refresh_interval_ms = 1000

[upstream.listeners]
host = "{host}"
advertised_host = "127.0.0.1"

[upstream.listeners.ports]
""" + "\n".join(f'"{node}" = {port}' for node, port in listener_ports.items())
            kshim = ke.KshimProcess(config, binary=kshim_binary, upstream=kafka_broker.bootstrap,
                                    host=host, port=boot_port, listener_ports=listener_ports,
                                    workdir=tmp_path / host)
            instances.append(kshim.start())
        for port in admin_ports:
            assert ke.wait_until(lambda: readyz(port)[0] == 200, 30), readyz(port)
        balancer = Balancer([boot_port, *node_ports],
                            {h: f"http://127.0.0.1:{p}/readyz" for h, p in zip(hosts, admin_ports)})
        assert ke.wait_until(lambda: all(balancer.ready.values()), 10), balancer.ready

        classes = ke.compile_java(FAILOVER_SRC)
        java = ke.BackgroundJava(["ClusterFailover", f"127.0.0.1:{boot_port}", topic, str(RECORDS), "10", "90000"],
                                 workdir=tmp_path, name="drain", extra_classpath=[classes])

        def progress() -> dict:
            lines = [json.loads(l) for l in java.stdout_path.read_text().splitlines() if l.startswith("{")]
            return lines[-1] if lines else {}

        assert ke.wait_until(lambda: progress().get("consumed", 0) >= 100, 60), \
            ke.tail(java.stdout_path) + ke.tail(java.stderr_path)
        victim_host = max(hosts, key=lambda h: balancer.open[h])
        assert balancer.open[victim_host] > 0, balancer.open
        victim = instances[hosts.index(victim_host)]
        other_host = next(h for h in hosts if h != victim_host)
        victim_admin = admin_ports[hosts.index(victim_host)]
        at_drain = progress()
        sent_before = dict(balancer.sent)
        drained_at = time.monotonic()
        os.kill(victim.pid, signal.SIGTERM)

        # Not ready at once, still serving: the balancer's checks take it out.
        def not_ready():
            status, body = readyz(victim_admin)
            return (status, body) if status == 503 else None

        status, body = ke.wait_until(not_ready, 2) or readyz(victim_admin)
        assert status == 503 and body["checks"]["stopping"] is True, (status, body)
        assert ke.port_accepts(victim_host, boot_port), "the instance stopped accepting before shutdown_delay_ms"
        assert ke.wait_until(lambda: not balancer.ready[victim_host], 2), balancer.ready

        # Then it stops, well within shutdown_delay_ms + shutdown_grace_ms, and cleanly.
        victim.proc.wait(DELAY_MS / 1000 + 30)
        stopped_after = time.monotonic() - drained_at
        assert victim.proc.returncode == 0, ke.tail(victim.log_path)
        assert stopped_after >= DELAY_MS / 1000, f"stopped {stopped_after:.1f} s after SIGTERM"
        log = victim.log_path.read_text()
        assert "SIGTERM: draining" in log and "shutting down" in log, ke.tail(victim.log_path)
        assert not ke.port_accepts(victim_host, boot_port), "still accepting after the drain"

        result = java.wait(120)
        assert result.rc == 0, result.stderr[-3000:]
        done = [json.loads(l) for l in result.stdout.splitlines() if l.startswith('{"done"')][-1]
        acked, consumed = set(done["acked"]), done["consumed"]
        missing = sorted(acked - set(consumed))
        twice = sorted({v for v in consumed if consumed.count(v) > 1})
        assert not missing and not twice, f"missing {missing[:10]}, consumed twice {twice[:10]}"
        assert done["failed"] == 0, f"{done['failed']} sends failed"
        assert len(acked) > at_drain["acked"] + 100, f"production did not go on: {len(acked)} vs {at_drain}"
        moved = balancer.sent[other_host] - sent_before[other_host]
        assert moved > 0, f"no connection went to {other_host} after the drain: {balancer.sent}"
        print(f"drained {victim_host} at {at_drain} (stopped after {stopped_after:.1f} s): {len(acked)} "
              f"acknowledged, {len(consumed)} consumed, 0 failed; connections to {other_host} since: {moved}")
    finally:
        if java is not None:
            java.stop()
        if balancer is not None:
            balancer.close()
        for kshim in instances:
            kshim.stop()


def test_a_standalone_kshim_stops_at_once_on_sigterm(kshim_factory):
    """A standalone kshim (most often a local discovery server) has no shutdown delay unless
    shutdown_delay_ms asks for one: SIGTERM stops it without the 5 s a load balancer needs."""
    kshim = kshim_factory()
    started = time.monotonic()
    rc = ke.stop_process(kshim.proc, sig=signal.SIGTERM)
    took = time.monotonic() - started
    assert rc == 0, (rc, kshim.log_text()[-2000:])
    assert "draining" not in kshim.log_text() and took < 4, (took, kshim.log_text()[-2000:])
