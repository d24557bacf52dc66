"""The soak's network: every kshim instance reaches every broker over a link of the network lab
(tests/interop/netlab.py) of its own, and one client reaches an instance over a link too, so that
the soak can cut, slow and heal them one at a time beside its process faults.

How an instance's traffic stays on its own links: each broker has a listener per instance
(KSHIM1, KSHIM2, ...), bound on a port of its own and advertised at the port of the link that
leads to it. An instance bootstraps at its links, and Metadata, which a broker answers with the
advertised addresses of the listener the request came in on, names only its links; so every
connection the instance makes to any broker, its state topic's writer, follower and
coordinators included, crosses a link that no other instance uses. The brokers replicate over
their INTERNAL listener and the direct clients use PLAINTEXT: neither crosses a link.

The network fault kinds (each healed, and the heal recorded for the plots and the checker):
  kshim_cut_from_brokers       an instance cut from every broker, both ways, while its clients
                               stay connected to it
  kshim_cut_from_state_leader  an instance cut from the state partition's leader only
  client_blackhole             a client's link to its instance cut both ways (no reset)
  broker_slow                  every instance's link to one broker at 200 ms round trip
  one_way_cut                  an instance hears nothing from the brokers, which still hear it
"""

from __future__ import annotations

import ssl
import threading
import time

import kafka_env as ke
import netlab

NETWORK_KINDS = ["kshim_cut_from_brokers", "kshim_cut_from_state_leader", "client_blackhole", "broker_slow",
                 "one_way_cut"]
SLOW_RTT_MS = 200
STICKY_EVERY_S = 0.5
STICKY_TIMEOUT_S = 3.0


def broker_listeners(instances: int) -> tuple[int, dict[str, str]]:
    """(extra ports per broker, listener overrides) for ke.KafkaCluster with separate_inter_broker:
    extra port i is the listener of instance i + 1, extra port instances + i the link to it."""
    names = [f"KSHIM{n}" for n in range(1, instances + 1)]
    listeners = ",".join(f"{name}://127.0.0.1:{{extra{i}}}" for i, name in enumerate(names))
    advertised = ",".join(f"{name}://127.0.0.1:{{extra{instances + i}}}" for i, name in enumerate(names))
    protocols = ",".join(f"{name}:PLAINTEXT" for name in names)
    return 2 * instances, {
        "listeners": "PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port},"
                     "CONTROLLER://127.0.0.1:{controller_port}," + listeners,
        "advertised.listeners": "PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port}," + advertised,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT," + protocols,
    }


class Links:
    """The links of every instance to every broker, and the client's link to its instance."""

    def __init__(self, lab: netlab.Lab, kafka: ke.KafkaCluster, instances: int):
        self.lab = lab
        self.to_broker: dict[tuple[int, int], netlab.Link] = {}  # (instance, node id) -> link
        for n in range(1, instances + 1):
            for node in kafka.nodes:
                self.to_broker[(n, node.node_id)] = lab.link(
                    f"kshim-{n}-to-broker-{node.node_id}", f"127.0.0.1:{node.extra_ports[n - 1]}",
                    listen_port=node.extra_ports[instances + n - 1])
        self.client: netlab.Link | None = None

    def upstream(self, instance: int) -> str:
        return ",".join(link.address for (n, _), link in sorted(self.to_broker.items()) if n == instance)

    def of_instance(self, instance: int) -> list[netlab.Link]:
        return [link for (n, _), link in sorted(self.to_broker.items()) if n == instance]

    def of_broker(self, node_id: int) -> list[netlab.Link]:
        return [link for (_, b), link in sorted(self.to_broker.items()) if b == node_id]


class StickyClient:
    """A client that keeps one TLS connection to its instance, through `link`, and asks for
    ApiVersions every STICKY_EVERY_S; a request that fails or goes unanswered for STICKY_TIMEOUT_S
    closes the connection and the next one opens another. Records (time, ok, error) in
    `results`."""

    def __init__(self, link: netlab.Link, ctx: ssl.SSLContext, connection_class):
        self.link = link
        self.conn = connection_class("127.0.0.1", link.port, ctx, timeout=STICKY_TIMEOUT_S)
        self.results: list[tuple[float, bool, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sticky-client")

    def start(self) -> "StickyClient":
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.conn.close()

    def _run(self) -> None:
        frame = ke.api_versions_request(3, ("kshim-soak-sticky", "0"))
        while not self.stop.wait(STICKY_EVERY_S):
            t = time.time()
            try:
                info = ke.parse_api_versions(self.conn.request(frame))
                self.results.append((t, info.error_code == 0, "" if info.error_code == 0 else f"error {info.error_code}"))
            except Exception as e:  # noqa: BLE001 - every failure is a result
                self.results.append((t, False, f"{type(e).__name__}: {e}"))

    def served_since(self, t: float) -> bool:
        return any(ok and at >= t for at, ok, _ in self.results[-20:])


class NetworkFaults:
    """The network fault kinds, mixed into soak.Faults (which supplies instances, rng, prof, rec,
    _metadata, _wait_ready), with `links` and `sticky` set."""

    links: Links
    sticky: StickyClient

    def _instance(self):
        inst = self.rng.choice(self.instances)
        return inst, int(inst.name.rsplit("-", 1)[1])

    def _hold(self, links: list[netlab.Link], seconds: float, direction: str = "both") -> None:
        for link in links:
            link.cut(direction)
        try:
            time.sleep(seconds)
        finally:
            for link in links:
                link.heal()

    def kshim_cut_from_brokers(self) -> str:
        inst, n = self._instance()
        self._hold(self.links.of_instance(n), self.prof.cut_s)
        self._wait_ready(inst)
        return f"{inst.name} cut from every broker (both ways, nothing reset) for {self.prof.cut_s:g} s"

    def kshim_cut_from_state_leader(self) -> str:
        inst, n = self._instance()
        leader = self._metadata()["partitions"][("__kshim_state", 0)][0]
        self._hold([self.links.to_broker[(n, leader)]], self.prof.cut_s)
        self._wait_ready(inst)
        return f"{inst.name} cut from broker {leader} (the state partition's leader) only, for {self.prof.cut_s:g} s"

    def one_way_cut(self) -> str:
        inst, n = self._instance()
        self._hold(self.links.of_instance(n), self.prof.cut_s, "back")
        self._wait_ready(inst)
        return f"{inst.name} hears nothing from the brokers, which still hear it, for {self.prof.cut_s:g} s"

    def client_blackhole(self) -> str:
        self._hold([self.sticky.link], self.prof.cut_s)
        healed = time.time()
        if not ke.wait_until(lambda: self.sticky.served_since(healed), 30, 0.2):
            raise ke.EnvError(f"the client on {self.sticky.link.name} not served within 30 s of the heal: "
                              f"{self.sticky.results[-3:]}")
        return (f"the client on {self.sticky.link.name} cut both ways (no reset) for {self.prof.cut_s:g} s, "
                f"served again {time.time() - healed:.1f} s after the heal")

    def broker_slow(self) -> str:
        node_id = self.rng.choice([n.node_id for n in self.kafka.nodes])
        links = self.links.of_broker(node_id)
        for link in links:
            link.shape(rtt_ms=SLOW_RTT_MS)
        try:
            time.sleep(self.prof.slow_s)
        finally:
            for link in links:
                link.shape()
        return f"every instance's link to broker {node_id} at {SLOW_RTT_MS} ms round trip for {self.prof.slow_s:g} s"
