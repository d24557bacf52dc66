#!/usr/bin/env python3
"""The forwarding benchmark across a network: direct, kshim and a byte relay (socat) behind
links of the network lab (tests/interop/netlab.py) with a round-trip time, every TCP segment at
most 1,448 bytes, measured in one run. Started by `scripts/bench-proxy.sh --study network`.

It reuses tests/tools/proxy_bench.py's pieces (the broker, kshim and socat legs, the Java
tools, the TLS material, the goal lines); what is its own is the topology and the report.

The segments. The run takes place in a network namespace whose loopback has a 1,500-byte MTU
(`netlab.py --mtu 1500 -- ...`): started outside one, the driver runs itself again inside one
(root only), and checks the MSS of a loopback connection there (1,448) before anything else.
`--mtu 0` runs on the host's loopback (64 KiB segments) instead.

The topology. Every process under test (the broker's client listeners, kshim, socat) binds
127.0.0.2; a link of the lab listens on 127.0.0.1 at the same port and forwards to it, and only
127.0.0.1 addresses are ever handed out. So every connection a client or a forwarder makes, to
bootstrap or to a broker named in Metadata, crosses a link:

  direct  client -> link(RTT) -> broker listener DIRECT (advertised: that link)
  kshim   client -> link(RTT/2) -> kshim -> link(RTT/2) -> broker listener KSHIM (advertised:
          the link in front of it). kshim binds 127.0.0.2:K and :K1 (node 1, an explicit port)
          and advertises 127.0.0.1 at the same ports (`advertised_listener`, `[upstream.listeners]
          advertised_host`), where the two client-side links listen
  relay   client -> link(RTT/2) -> socat -> link(RTT/2) -> broker listener RELAY, which
          advertises the client-side link in front of socat

The delay is split between the two links of a forwarded leg, the larger half on the client side.
Toxiproxy delays by whole milliseconds per direction, so 20 ms is 10 ms forward and back on the
direct link and 5 ms each way on each link of the others; 1 ms is 1 ms forward (client to
broker) and nothing back, on the direct link and on the forwarders' client-side links, their
upstream links adding no delay (still a hop of the lab, so that every forwarded leg crosses as
many as the other). Before a condition is measured, Metadata through each leg (and from the
broker through kshim's upstream link) must name only that leg's link addresses.

With TLS the broker's three listeners are SSL listeners of their own; kshim speaks TLS to the
clients and to its listener, the relay carries the clients' TLS. Certificates name 127.0.0.1,
the only address anyone dials. Topics are made and filled over a plaintext INTERNAL listener.

Conditions (--conditions): wan = RTT 20 ms plaintext; lan = RTT 1 ms plaintext; lan-tls = RTT
1 ms, TLS. Per condition, after one unmeasured produce and consume per leg, --rounds rounds, the
leg order reversed every other round, each a fresh JVM per figure, 1 KiB records, 1 partition:

  produce    ProducerPerformance, acks=1, the producer's defaults otherwise (batch.size 16 KiB,
             linger.ms 5, 5 requests in flight): MB/s
  pipelined  ProducerPerformance, acks=1, linger.ms=0, max.in.flight.requests.per.connection=5:
             at 20 ms bound by round trips (one partition: a request carries one batch of 15
             records, 15,556 B, so 5 requests per round trip: at most 3.7 MiB/s); a forwarder
             that waited for one answer before passing on the next request would get a fraction
             of direct. With both producers, the producer's request-latency-avg too
  consume    ConsumerPerformance over the first --consume-records records of a topic filled once
             over the INTERNAL listener (the same bytes for every leg and round): fetch MB/s,
             which leave out the group join

CPU: the forwarder's (as proxy_bench measures it) and the lab's Toxiproxy's, per GB moved.
The report has a table per condition (medians per leg, kshim's ratio to direct and to the relay,
each round's own ratio), and goal lines: at 20 ms, pipelined produce and consume through kshim
>= 0.9 x direct; at 1 ms, produce and consume >= 0.95 x the relay, plaintext and TLS. The goals
are informational: exit 0 once the report is printed, 1 when something failed to run.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import proxy_bench as pb  # noqa: E402  (puts tests/interop on the path, imports kafka_env)
from proxy_bench import BenchError, env_int, log  # noqa: E402

import kafka_env as ke  # noqa: E402
import netlab  # noqa: E402

LEGS = ("direct", "kshim", "relay")
LINK_HOST = "127.0.0.1"  # every link listens here; nothing else is ever handed out
PROC_HOST = "127.0.0.2"  # the processes behind the links, each at its link's port
NODE_ID = 1
IN_NS_ENV = "KSHIM_NET_BENCH_NAMESPACE"
NETLAB = pb.REPO_ROOT / "tests" / "interop" / "netlab.py"
RECORD_SIZE = 1024
BATCH_BYTES = 16384  # the producer's default batch.size
IN_FLIGHT = 5
GOAL_WAN = 0.9
GOAL_LAN = 0.95
MIB, GIB = pb.MIB, pb.GIB


@dataclass(frozen=True)
class Condition:
    name: str
    rtt_ms: int
    tls: bool
    label: str


CONDITIONS = {
    "wan": Condition("wan", 20, False, "RTT 20 ms, plaintext"),
    "lan": Condition("lan", 1, False, "RTT 1 ms, plaintext"),
    "lan-tls": Condition("lan-tls", 1, True, "RTT 1 ms, TLS both sides"),
}

# (key, label): each run's figures, by workload.
WORKLOADS = [
    ("produce", "produce MB/s, acks=1"),
    ("pipelined", f"round-trip-bound produce MB/s (linger.ms=0, {IN_FLIGHT} in flight)"),
    ("consume", "consume MB/s"),
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", choices=("network",), default="network", help="(what bench-proxy.sh passes)")
    p.add_argument("--kshim-bin", type=Path, default=ke.kshim_binary())
    p.add_argument("--legs", default=",".join(LEGS), help=f"comma-separated, of {','.join(LEGS)}")
    p.add_argument("--conditions", default=",".join(CONDITIONS), help=f"comma-separated, of {','.join(CONDITIONS)}")
    p.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 3))
    p.add_argument("--records-wan", type=int, default=env_int("BENCH_NET_RECORDS_WAN", 12_000),
                   help="records per produce run at 20 ms (about 4 s at the 3 MiB/s that 5 batches per round trip give)")
    p.add_argument("--records-lan", type=int, default=env_int("BENCH_NET_RECORDS_LAN", 40_000),
                   help="records per produce run at 1 ms (3-7 s plaintext and TLS on 2 cores)")
    p.add_argument("--consume-records", type=int, default=env_int("BENCH_NET_CONSUME", 100_000),
                   help="records each consume run reads (and the topic is filled with, once)")
    p.add_argument("--mtu", type=int, default=env_int("BENCH_NET_MTU", 1500),
                   help="loopback MTU of the namespace the run takes place in (0: the host's loopback)")
    p.add_argument("--max-seconds", type=int, default=env_int("BENCH_MAX_SECS", 1800))
    p.add_argument("--keep-tmp", action="store_true", default=bool(os.environ.get("KSHIM_BENCH_KEEP_TMP")))
    p.add_argument("--no-build", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.legs = [leg for leg in LEGS if leg in {x.strip() for x in args.legs.split(",")}]
    args.conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    if not args.legs or any(c not in CONDITIONS for c in args.conditions) or not args.conditions:
        p.error(f"--legs takes {','.join(LEGS)}, --conditions {','.join(CONDITIONS)}")
    if min(args.rounds, args.records_wan, args.records_lan, args.consume_records) < 1:
        p.error("--rounds and the record counts must be at least 1")
    return args


# --------------------------------------------------------------------------------------------
# the namespace


def loopback_mss() -> int:
    """The MSS of a fresh TCP connection on this namespace's loopback."""
    with socket.create_server(("127.0.0.1", 0)) as srv, socket.create_connection(srv.getsockname()) as c:
        return c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)


def ensure_namespace(args: argparse.Namespace, argv: list[str]) -> int | None:
    """The loopback MSS when the run may go on here; otherwise runs this driver again inside a
    namespace of --mtu (through netlab.py, which removes it after) and does not return."""
    mss = loopback_mss()
    if args.mtu == 0 or mss == args.mtu - 52:
        return mss
    if os.environ.get(IN_NS_ENV):
        raise SystemExit(f"net_bench: inside the namespace the loopback MSS is {mss}, not {args.mtu - 52}")
    if os.geteuid() != 0:
        raise SystemExit(f"net_bench: a loopback of MTU {args.mtu} needs a network namespace, which needs root "
                         "(or pass --mtu 0 to run on this loopback)")
    cmd = [sys.executable, str(NETLAB), "--mtu", str(args.mtu), "--", sys.executable, str(Path(__file__).resolve()), *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, cmd, {**os.environ, IN_NS_ENV: "1"})
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# the topology


def split_ms(rtt_ms: int) -> tuple[int, int]:
    """(client side, upstream side) of a round trip split between two links, in whole ms."""
    return rtt_ms - rtt_ms // 2, rtt_ms // 2


class NetKshim(pb.KshimProxy):
    """kshim bound to PROC_HOST, advertising LINK_HOST at the same ports: node 1 at `node_port`."""

    def __init__(self, binary: Path, workdir: Path, upstream: str, node_port: int, tls: pb.TlsMaterial | None):
        listeners = (f'host = "{PROC_HOST}"\nadvertised_host = "{LINK_HOST}"\n'
                     f'\n[upstream.listeners.ports]\n"{NODE_ID}" = {node_port}\n')
        super().__init__(binary, workdir, upstream, 1024, extra_toml=listeners + (tls.kshim_toml() if tls else ""))
        text = self.config_path.read_text()
        old = f'listen = "127.0.0.1:{self.port}"\n'
        if old not in text:
            raise BenchError(f"proxy_bench.KshimProxy no longer writes {old!r} in {self.config_path}")
        self.config_path.write_text(text.replace(
            old, f'listen = "{PROC_HOST}:{self.port}"\nadvertised_listener = "{LINK_HOST}:{self.port}"\n'))
        self.node_port = node_port
        self.tls = tls.context if tls else None


@dataclass
class Leg:
    """One leg of one security setting: where its clients bootstrap, its links (with the share
    of the round trip each carries: "full", "client" or "upstream"), the addresses Metadata
    through it may name, and its forwarder."""

    name: str
    endpoint: pb.Endpoint
    links: list[tuple[netlab.Link, str]]
    allowed: set[int]  # link ports that Metadata through the leg may name
    upstream_check: tuple[str, set[int]] | None = None  # (kshim's upstream link, ports it may name)


@dataclass
class Setting:
    """The legs of one security setting (plaintext or TLS) and the broker listeners they use."""

    tls: bool
    ports: dict[str, int]  # D, U, S, R: the broker's DIRECT, KSHIM and RELAY listeners, socat's port
    legs: dict[str, Leg] = field(default_factory=dict)


def broker_listeners(settings: dict[bool, dict[str, str]]) -> dict[str, str]:
    """KafkaCluster listener_overrides: per setting, DIRECT, KSHIM and RELAY listeners on
    PROC_HOST, advertised at the links on LINK_HOST (RELAY: the link in front of socat);
    INTERNAL and CONTROLLER on 127.0.0.1, never behind a link. `settings`: tls -> placeholder
    of each port ({port}, {extra0}, ...)."""
    listeners, advertised, protocols = [], [], ["INTERNAL:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    for tls, ph in settings.items():
        suffix, proto = ("_TLS", "SSL") if tls else ("", "PLAINTEXT")
        for name, bind, adv in (("DIRECT", ph["D"], ph["D"]), ("KSHIM", ph["U"], ph["U"]), ("RELAY", ph["S"], ph["R"])):
            listeners.append(f"{name}{suffix}://{PROC_HOST}:{bind}")
            advertised.append(f"{name}{suffix}://{LINK_HOST}:{adv}")
            protocols.append(f"{name}{suffix}:{proto}")
    return {
        "listeners": ",".join([*listeners, "INTERNAL://127.0.0.1:{internal_port}", "CONTROLLER://127.0.0.1:{controller_port}"]),
        "advertised.listeners": ",".join([*advertised, "INTERNAL://127.0.0.1:{internal_port}"]),
        "listener.security.protocol.map": ",".join(protocols),
    }


def build_setting(args, tls_on: bool, ports: dict[str, int], lab: netlab.Lab, tls: pb.TlsMaterial | None,
                  workdir: Path, stops: list) -> Setting:
    """The links and forwarders of one setting, started; links unshaped."""
    s = Setting(tls_on, ports)
    tag = "tls" if tls_on else "plain"
    client_config = tls.client_config if tls_on else None

    def link(name: str, port: int) -> netlab.Link:
        return lab.link(f"{tag}-{name}", f"{PROC_HOST}:{port}", listen_port=port)

    if "direct" in args.legs:
        d = link("direct", ports["D"])
        s.legs["direct"] = Leg("direct", pb.Endpoint("direct", d.address, None, client_config), [(d, "full")], {d.port})
    if "kshim" in args.legs:
        up = link("kshim-upstream", ports["U"])
        k = NetKshim(ke.require_kshim_binary(args.kshim_bin), workdir / f"kshim-{tag}", up.address, ke.free_port(),
                     tls if tls_on else None)
        boot, node = link("kshim-bootstrap", k.port), link("kshim-node1", k.node_port)
        stops.append(k.stop)
        log(f"starting kshim ({tag}) on {PROC_HOST}:{k.port} and :{k.node_port}, upstream {up.address} (a link)")
        k.start()  # waits until Metadata through the bootstrap link names no upstream address
        s.legs["kshim"] = Leg("kshim", pb.Endpoint("kshim", boot.address, k, client_config),
                              [(boot, "client"), (node, "client"), (up, "upstream")], {node.port},
                              (up.address, {up.port}))
    if "relay" in args.legs:
        up = link("relay-upstream", ports["S"])
        front = link("relay", ports["R"])
        r = pb.SocatRelay(workdir / f"relay-{tag}", ports["R"], up.port, bind=PROC_HOST)
        r.tls = tls.context if tls_on else None
        stops.append(r.stop)
        log(f"starting socat ({tag}) on {PROC_HOST}:{r.port} -> {up.address} (a link)")
        r.start({ports["S"], ports["D"], ports["U"]})
        s.legs["relay"] = Leg("relay", pb.Endpoint("relay", front.address, r, client_config),
                              [(front, "client"), (up, "upstream")], {front.port})
    return s


def shape(setting: Setting, rtt_ms: int) -> list[str]:
    """Shapes every link of the setting for a round trip of `rtt_ms`; a line per leg."""
    client, upstream = split_ms(rtt_ms)
    share_ms = {"full": rtt_ms, "client": client, "upstream": upstream}
    lines = []
    for leg in setting.legs.values():
        parts = {}
        for link, share in leg.links:
            link.shape(rtt_ms=share_ms[share])
            parts[share] = "+".join(map(str, netlab.one_way_ms(share_ms[share])))
        lines.append(f"{leg.name} " + ", ".join(f"{share} {ms}" for share, ms in parts.items()) + " ms")
    return lines


def check_routes(setting: Setting, tls: pb.TlsMaterial | None) -> None:
    """Metadata through each leg (and from the broker through kshim's upstream link) names only
    link addresses of that leg: no client or forwarder can reach a process past a link."""
    ctx = tls.context if setting.tls else None
    checks = [(leg.name, leg.endpoint.bootstrap, leg.allowed) for leg in setting.legs.values()]
    checks += [(f"{leg.name}'s upstream", *leg.upstream_check) for leg in setting.legs.values() if leg.upstream_check]
    for what, bootstrap, allowed in checks:
        info = ke.api_versions(bootstrap, timeout=10.0, tls=ctx)
        nodes = pb.metadata_nodes(bootstrap, info.api_keys.get(3), ctx)
        stray = [(h, p) for _, h, p in nodes if h != LINK_HOST or p not in allowed]
        if not nodes or stray:
            raise BenchError(f"Metadata through {what} ({bootstrap}) names {nodes}: "
                             f"{stray or 'nothing'} is not a link of that leg ({LINK_HOST}:{sorted(allowed)})")
        log(f"routes: Metadata through {what} at {bootstrap} names only {sorted({f'{h}:{p}' for _, h, p in nodes})}")


# --------------------------------------------------------------------------------------------
# the run


def measure(kind: str, tools: pb.ToolRunner, ep: pb.Endpoint, lab_pid: int, topic: str, records: int,
            group: str) -> dict:
    """One run of a workload: its MB/s and the forwarder's and the lab's CPU per GB."""
    lab0 = pb.cpu_seconds(lab_pid)
    if kind == "consume":
        r = pb.consume(tools, ep, topic, RECORD_SIZE, records, group)
        mbs, cpu, secs = r["cons_mbs"], r["cpu_cons"], r["cpu_cons_s"]
    else:
        props = {"linger.ms": "0", "max.in.flight.requests.per.connection": str(IN_FLIGHT)} if kind == "pipelined" else None
        r = pb.produce(tools, ep, topic, RECORD_SIZE, records, "1", props, request_latency=True)
        mbs, cpu, secs = r["prod_mbs_1"], r["cpu_prod_1"], r["cpu_prod_1_s"]
    lab_s = pb.cpu_seconds(lab_pid) - lab0
    return {"mbs": mbs, "cpu": cpu, "cpu_s": secs, "lab_cpu": lab_s / (records * RECORD_SIZE / GIB),
            "req_ms": r.get("request_latency_ms")}


def run(args: argparse.Namespace, workdir: Path, started: float) -> int:
    deadline = started + args.max_seconds
    args.load_start = load_average()  # the machine is shared: what else ran is in the report
    ke.require_jars()
    log_dir = workdir / "logs"
    log_dir.mkdir()
    tools = pb.ToolRunner(log_dir, deadline)
    conds = [CONDITIONS[c] for c in args.conditions]
    securities = sorted({c.tls for c in conds})
    tls = None
    if True in securities:
        log("making certificates (openssl, keytool): a CA and RSA 2048 leaves for the broker and kshim")
        tls = pb.make_tls_material(workdir / "certs")

    # Ports: per setting D (DIRECT), U (KSHIM), S (RELAY) and R (socat, advertised by RELAY).
    names = [f"{'t' if t else 'p'}{x}" for t in securities for x in "DUSR"]
    placeholders = {n: ("{port}" if i == 0 else f"{{extra{i - 1}}}") for i, n in enumerate(names)}
    overrides = broker_listeners({t: {x: placeholders[f"{'t' if t else 'p'}{x}"] for x in "DUSR"} for t in securities})
    cluster = ke.KafkaCluster(1, workdir=workdir / "kafka", heap="768m", separate_inter_broker=True,
                              listener_overrides=overrides, extra_ports=len(names) - 1,
                              extra_properties=tls.broker_properties() if tls else {})
    log("starting Apache Kafka 4.1.1 (KRaft, one node; client listeners on 127.0.0.2 behind links)")
    pb.start_cluster(cluster, resources)
    broker = cluster.nodes[0]
    port_of = dict(zip(names, [broker.port, *broker.extra_ports]))
    admin = broker.internal_bootstrap

    lab = netlab.Lab(workdir / "lab")
    resources.append(lab.close)
    settings = {t: build_setting(args, t, {x: port_of[f"{'t' if t else 'p'}{x}"] for x in "DUSR"}, lab, tls,
                                 workdir, resources) for t in securities}

    # The consume topic, filled once over INTERNAL: every consume run reads the same records.
    fill = pb.Endpoint("fill", admin, None)
    pb.create_topics(admin, ["net-consume"], 1)
    log(f"filling net-consume with {args.consume_records:,} records of {RECORD_SIZE} B over INTERNAL")
    pb.produce(tools, fill, "net-consume", RECORD_SIZE, args.consume_records, "1",
               {"batch.size": str(1 << 20), "linger.ms": "20"})

    results: dict[str, dict[str, dict[str, list[dict]]]] = {}
    shapes: dict[str, list[str]] = {}
    for cond in conds:
        setting = settings[cond.tls]
        shapes[cond.name] = shape(setting, cond.rtt_ms)
        log(f"condition {cond.name}: {cond.label}; " + "; ".join(shapes[cond.name]))
        check_routes(setting, tls)
        records = args.records_wan if cond.rtt_ms >= 10 else args.records_lan
        legs = list(setting.legs.values())
        topics = [f"net-{cond.name}-warmup", *(f"net-{cond.name}-{k}-r{r}" for r in range(1, args.rounds + 1)
                                               for k in ("produce", "pipelined"))]
        pb.create_topics(admin, topics, 1)
        for leg in legs:  # unmeasured: the connections, the broker's and the forwarders' paths warm
            log(f"{cond.name}: warm-up via {leg.name}")
            pb.produce(tools, leg.endpoint, topics[0], RECORD_SIZE, max(records // 5, 1), "1")
            pb.consume(tools, leg.endpoint, "net-consume", RECORD_SIZE, min(args.consume_records, 20_000),
                       f"net-{cond.name}-warmup-{leg.name}")
        res = results[cond.name] = {k: {leg.name: [] for leg in legs} for k, _ in WORKLOADS}
        for rnd in range(1, args.rounds + 1):
            order = legs if rnd % 2 else legs[::-1]
            for kind, _ in WORKLOADS:
                for leg in order:
                    n = args.consume_records if kind == "consume" else records
                    r = measure(kind, tools, leg.endpoint, lab.proc.pid, f"net-{cond.name}-{kind}-r{rnd}"
                                if kind != "consume" else "net-consume", n, f"net-{cond.name}-{leg.name}-r{rnd}")
                    r["round"] = rnd
                    res[kind][leg.name].append(r)
                    check_alive(broker, settings, lab)
                    log(f"{cond.name} round {rnd}/{args.rounds} {kind} {leg.name}: {r['mbs']:.2f} MB/s"
                        + ("" if r["cpu"] is None else f", forwarder {r['cpu']:.2f} CPU-s/GB")
                        + f", lab {r['lab_cpu']:.2f} CPU-s/GB")
        pb.delete_topics(admin, topics)
    print_report(args, conds, results, shapes, loopback_mss(), time.monotonic() - started)
    return 0


def check_alive(broker, settings: dict[bool, Setting], lab: netlab.Lab) -> None:
    if not broker.alive():
        raise BenchError(f"the broker exited\n--- {broker.log_path}:\n{ke.tail(broker.log_path)}")
    if lab.proc.poll() is not None:
        raise BenchError(f"toxiproxy-server exited\n--- {lab.log_path}:\n{ke.tail(lab.log_path)}")
    for s in settings.values():
        for leg in s.legs.values():
            p = leg.endpoint.proxy
            if p is not None and not p.alive():
                raise BenchError(f"{leg.name} exited with status {p.proc.returncode}\n--- {p.log_path}:\n{ke.tail(p.log_path)}")


# --------------------------------------------------------------------------------------------
# report


def _med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}x"


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _diff(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None else f"{a - b:+.1f}"


def _per_round(rows: list[dict], base: list[dict], key: str) -> str:
    per = [x[key] / b[key] for x, b in zip(rows, base) if x.get(key) and b.get(key)]
    return f"{min(per):.2f}-{max(per):.2f}" if per else "—"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def print_report(args, conds: list[Condition], results, shapes, mss: int, elapsed: float) -> None:
    legs = [leg for leg in LEGS if leg in args.legs]
    print()
    print(f"Load average (1, 5, 15 min) at the start: {args.load_start}; at the end: {load_average()}.")
    print(f"Network study: Apache Kafka 4.1.1, 1 node, 1 partition, {RECORD_SIZE} B records; links of the lab "
          f"(Toxiproxy {netlab.TOXIPROXY_VERSION}); loopback MSS {mss} B; median of {args.rounds} round(s), legs "
          f"alternating; records per produce run: {args.records_wan:,} at 20 ms, {args.records_lan:,} at 1 ms; "
          f"{args.consume_records:,} per consume run.")
    wan = pb.Goal(f"at 20 ms, round-trip-bound produce and consume through kshim ≥ {GOAL_WAN} x direct")
    lan = pb.Goal(f"at 1 ms, MTU 1500: produce and consume through kshim ≥ {GOAL_LAN} x the relay, plaintext and TLS")
    for cond in conds:
        res = results[cond.name]
        print()
        print(f"{cond.label} ({'; '.join(shapes[cond.name])}):")
        print()
        head = ["workload", *legs]
        if "kshim" in legs:
            head += [f"kshim/{b} (per round)" for b in ("direct", "relay") if b in legs]
        print("| " + " | ".join(head) + " |")
        print("|---|" + "---:|" * (len(head) - 1))
        for key, label in WORKLOADS:
            med = {leg: _med(res[key][leg], "mbs") for leg in legs}
            cells = [label, *(f"{med[leg]:.2f}" for leg in legs)]
            if "kshim" in legs:
                cells += [f"{_ratio(med['kshim'], med[b])} ({_per_round(res[key]['kshim'], res[key][b], 'mbs')})"
                          for b in ("direct", "relay") if b in legs]
            print("| " + " | ".join(cells) + " |")
            k, d, r = med.get("kshim"), med.get("direct"), med.get("relay")
            if k is None:
                continue
            if cond.rtt_ms >= 10 and key in ("pipelined", "consume"):
                wan.add(f"{cond.name} {key} {_ratio(k, d)} direct", None if d is None else k >= GOAL_WAN * d)
            if cond.rtt_ms < 10 and key in ("produce", "consume"):
                lan.add(f"{cond.name} {key} {_ratio(k, r)} the relay", None if r is None else k >= GOAL_LAN * r)
        cells = ["producer request latency ms (avg), produce / round-trip-bound"]
        for leg in legs:
            cells.append(" / ".join(_fmt(_med(res[k][leg], "req_ms"), ".1f") for k in ("produce", "pipelined")))
        if "kshim" in legs:
            cells += [" / ".join(_diff(_med(res[k]["kshim"], "req_ms"), _med(res[k][b], "req_ms")) for k in ("produce", "pipelined"))
                      for b in ("direct", "relay") if b in legs]
        print("| " + " | ".join(cells) + " |")
        for key, label in WORKLOADS:
            cells = [f"CPU-s/GB, {key}: forwarder / lab"]
            for leg in legs:
                f, l = _med(res[key][leg], "cpu"), _med(res[key][leg], "lab_cpu")
                cells.append(("" if f is None else f"{f:.2f} / ") + f"{l:.2f}")
            if "kshim" in legs:
                cells += ["—" if b == "direct" else _ratio(_med(res[key]["kshim"], "cpu"), _med(res[key][b], "cpu"))
                          for b in ("direct", "relay") if b in legs]
            print("| " + " | ".join(cells) + " |")
        print()
        print("Per round, MB/s (produce / round-trip-bound produce / consume):")
        for leg in legs:
            rounds = zip(*(res[k][leg] for k, _ in WORKLOADS))
            print(f"  {leg:>6}: " + "   ".join(" / ".join(f"{r['mbs']:.1f}" for r in rr) for rr in rounds))
    print()
    print("MB = 2^20 bytes, GB = 2^30 bytes of record payload; consume figures leave out the group join.")
    print("CPU: the forwarder's processes (socat with its children) and the lab's toxiproxy-server, per GB moved.")
    print("Request latency: the producer's request-latency-avg (send to answer); kshim/X columns give kshim's minus X's.")
    print()
    print("Goals (informational):")
    print(wan.line())
    print(lan.line())
    print(f"Total run time {elapsed:.0f}s.")


# --------------------------------------------------------------------------------------------
# entry point

resources: list = []


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    mss = ensure_namespace(args, argv)
    log(f"loopback MSS here: {mss} B")
    return pb.guarded_run("net_bench", args, run, resources)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
