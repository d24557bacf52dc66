#!/usr/bin/env python3
"""TLS benchmark: handshake rate, TLS produce throughput and certificate-reload cost of kshim,
against an Apache Kafka broker's own SSL listener measured in the same run.

Started by scripts/bench-tls.sh, which builds kshim and examples/tls_bench/ first.

Certificates are made with openssl and keytool: one CA, and RSA 2048 leaves for the broker and
for kshim (two for kshim, to rotate between), all with the same extensions. One Apache Kafka
4.1.1 KRaft node serves clients on an SSL listener (PKCS#12 keystore, no client certificates)
and replicates over a plaintext INTERNAL listener. In front of it run

  kshim-tls    TLS to the clients ([tls], a PKCS#12 keystore) and TLS to the broker's SSL
               listener ([upstream.tls]); its admin API on plain HTTP with a bearer token;
  kshim-plain  the same TLS to the clients, plaintext to the broker's INTERNAL listener
               (only for the third produce leg).

Three measurements, each with the broker's own listener as the baseline in the same run:

  handshakes   examples/tls_bench/ (rustls, ring, session resumption off): TCP connect +
               full TLS handshake + one ApiVersions + close, back to back at each concurrency
               level, broker and kshim-tls alternating over rounds; handshakes/s, p50/p99, and
               each server's CPU per handshake (from /proc)
  produce      org.apache.kafka.tools.ProducerPerformance over SSL, acks=all, 1 KiB records, a
               fixed record count per leg: "direct" to the broker's SSL listener, "kshim-tls"
               and "kshim-plain", the order of the legs rotating every round; MB/s medians,
               ratios to direct, and kshim's CPU per GB
  reload       examples/tls_bench/ against kshim-tls: PATCH /admin/config {"tls.keystore"}
               alternating between two stores; PATCH latency, time until a new handshake sees
               the new leaf, and the latency of an established TLS connection sending Metadata
               in windows with and without reloads (and whether that connection broke)

Exit status: 0 once the tables are printed, whatever they say; 1 with the error when anything
failed to run; 130/143 when interrupted. Every process started here is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS_DIR))

import proxy_bench as pb  # noqa: E402  (puts tests/interop on the path, imports kafka_env)
from proxy_bench import BenchError, env_int, log  # noqa: E402

import kafka_env as ke  # noqa: E402
from tls_support import (  # noqa: E402
    STORE_PASSWORD,
    Certs,
    export_pkcs12,
    issue,
    make_certs,
    ssl_only_broker,
    tls_exchange,
)

REPO_ROOT = pb.REPO_ROOT
NODE_ID = 1
RECORD_SIZE = 1024
ADMIN_TOKEN_ENV = pb.ADMIN_TOKEN_ENV
PARTS = ("handshakes", "produce", "reload")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kshim-bin", type=Path, default=ke.kshim_binary())
    p.add_argument(
        "--bench-bin",
        type=Path,
        default=Path(os.environ.get("TLS_BENCH_BIN") or REPO_ROOT / "target" / "release" / "examples" / "tls_bench"),
        help="the built examples/tls_bench/",
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"which of {','.join(PARTS)} to run")
    # handshakes
    p.add_argument("--hs-concurrency", default=os.environ.get("BENCH_HS_CONCURRENCY", "1,8"))
    p.add_argument("--hs-rounds", type=int, default=env_int("BENCH_HS_ROUNDS", 3))
    p.add_argument("--hs-secs", type=int, default=env_int("BENCH_HS_SECS", 4), help="seconds per target and round")
    p.add_argument(
        "--hs-warmup-secs",
        type=int,
        default=env_int("BENCH_HS_WARMUP_SECS", 15),
        help="unmeasured seconds per target first (the broker's JIT compiles its TLS code meanwhile)",
    )
    # produce
    p.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 3), help="produce rounds")
    p.add_argument(
        "--records",
        type=int,
        default=env_int("BENCH_RECORDS", 75_000),
        help="1 KiB records per produce leg (~5 s over TLS on 2 cores)",
    )
    p.add_argument("--no-plain-upstream", action="store_true", help="skip the kshim-plain produce leg")
    # reload
    p.add_argument("--reloads", type=int, default=env_int("BENCH_RELOADS", 20))
    p.add_argument("--window-pairs", type=int, default=env_int("BENCH_WINDOW_PAIRS", 4))
    p.add_argument("--window-secs", type=int, default=env_int("BENCH_WINDOW_SECS", 3))
    p.add_argument("--reload-every-ms", type=int, default=env_int("BENCH_RELOAD_EVERY_MS", 300))
    p.add_argument(
        "--max-seconds",
        type=int,
        default=env_int("BENCH_MAX_SECS", 900),
        help="give up (exit 1) when the run would go on past this",
    )
    p.add_argument("--keep-tmp", action="store_true", default=bool(os.environ.get("KSHIM_BENCH_KEEP_TMP")))
    args = p.parse_args(argv)
    args.parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = [x for x in args.parts if x not in PARTS]
    if unknown or not args.parts:
        p.error(f"--parts: {unknown or 'nothing'} not among {','.join(PARTS)}")
    for name in ("hs_rounds", "hs_secs", "rounds", "records", "window_secs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


# --------------------------------------------------------------------------------------------
# certificates, the broker and the two kshims


@dataclass
class Material:
    certs: Certs
    broker_store: Path
    stores: list[tuple[Path, Path]]  # (leaf PEM, PKCS#12) kshim rotates between; the first is served at start


def make_material(d: Path) -> Material:
    certs = make_certs(d)
    for name in ("broker", "server2"):
        # Same CA, same RSA 2048 key size and the same server extensions as kshim's server.pem.
        issue(d, name, "localhost", certs.ca, certs.ca_key, "server_ext")
    for name in ("server", "server2", "broker"):
        export_pkcs12(d, name, certs.ca)
    return Material(
        certs=certs,
        broker_store=d / "broker.p12",
        stores=[(d / "server.pem", d / "server.p12"), (d / "server2.pem", d / "server2.p12")],
    )


def start_broker(workdir: Path, m: Material) -> ke.KafkaCluster:
    cluster = ssl_only_broker(m.broker_store, workdir=workdir, heap=pb.BROKER_HEAP)
    resources.append(cluster.stop)
    cluster.start()
    return cluster


def kshim_config(m: Material, *, upstream: str, upstream_tls: bool, node_port: int, admin_port: int | None) -> str:
    q = json.dumps
    text = f"""
[tls]
keystore = {q(str(m.stores[0][1]))}
keystore_password = {q(STORE_PASSWORD)}
"""
    if admin_port is not None:
        text += f"""
[admin]
listen = "127.0.0.1:{admin_port}"
token = "${{env:{ADMIN_TOKEN_ENV}}}"
"""
    text += f"""
[upstream]
bootstrap = {q(upstream)}

[upstream.listeners]
port_base = 0

[upstream.listeners.ports]
"{NODE_ID}" = {node_port}
"""
    if upstream_tls:
        text += f"""
[upstream.tls]
truststore = {q(str(m.certs.truststore))}
truststore_password = {q(STORE_PASSWORD)}
"""
    return text


@dataclass
class Kshim:
    name: str
    proc: ke.KshimProcess
    node_port: int
    upstream_port: int  # the broker listener it forwards to
    admin_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_kshim(name: str, binary: Path, workdir: Path, m: Material, *, upstream: str, upstream_tls: bool,
                with_admin: bool, token: str) -> Kshim:
    node_port, admin_port = ke.free_ports(2)
    config = kshim_config(m, upstream=upstream, upstream_tls=upstream_tls, node_port=node_port,
                          admin_port=admin_port if with_admin else None)
    proc = ke.KshimProcess(config, workdir=workdir, upstream=upstream, listener_ports={NODE_ID: node_port},
                           binary=binary, env={ADMIN_TOKEN_ENV: token})
    resources.append(proc.stop)
    # Returns once the bootstrap and the pinned per-broker listener accept; the latter is bound
    # only after kshim has discovered the broker over its upstream connection.
    proc.start()
    k = Kshim(name, proc, node_port, ke.split_hostport(upstream)[1], admin_port if with_admin else None)
    for port in (ke.split_hostport(k.bootstrap)[1], node_port):
        out = tls_exchange(port, m.certs)
        if not out["ok"] or out["error_code"] != 0:
            raise BenchError(f"{name}: no ApiVersions answer over TLS on port {port}: {out}\n"
                             f"--- {proc.log_path}:\n{ke.tail(proc.log_path)}")
    if with_admin:
        wait_admin_ready(k)
    return k


def wait_admin_ready(k: Kshim, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{k.admin_port}/readyz", timeout=5) as r:
                if r.status == 200:
                    return
                last = f"status {r.status}"
        except urllib.error.HTTPError as e:
            last = f"status {e.code}"
        except OSError as e:
            last = repr(e)
        time.sleep(0.3)
    raise BenchError(f"{k.name}: the admin API's /readyz did not turn 200 within {timeout}s ({last})\n"
                     f"--- {k.proc.log_path}:\n{ke.tail(k.proc.log_path)}")


# --------------------------------------------------------------------------------------------
# examples/tls_bench/


def run_example(bench_bin: Path, log_dir: Path, name: str, argv: list[str], *, expected_s: float,
                deadline: float, env: dict[str, str] | None = None) -> str:
    """Runs the example in its own session, stdout and stderr to files; its stdout (the tables)."""
    left = deadline - time.monotonic()
    timeout = expected_s * 1.5 + 60
    if left < min(timeout, expected_s + 30):
        raise BenchError(f"out of time before {name} (~{expected_s:.0f}s): the run is capped at --max-seconds")
    return pb.run_program([str(bench_bin), *argv], log_dir, f"tls_bench-{name}", min(timeout, left), env)


# --------------------------------------------------------------------------------------------
# produce


@dataclass
class Leg:
    name: str
    bootstrap: str
    kshim: Kshim | None


def ssl_props(m: Material) -> list[str]:
    return [
        "security.protocol=SSL",
        f"ssl.truststore.location={m.certs.truststore}",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.password={STORE_PASSWORD}",
    ]


def produce(tools: pb.ToolRunner, m: Material, leg: Leg, topic: str, records: int) -> dict:
    pid = leg.kshim.pid if leg.kshim else None
    cpu0 = pb.cpu_seconds(pid) if pid else None
    out = tools.java(
        f"produce-{leg.name}",
        [
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic,
            "--num-records", str(records),
            "--record-size", str(RECORD_SIZE),
            "--throughput", "-1",
            "--producer-props",
            f"bootstrap.servers={leg.bootstrap}",
            "acks=all",
            f"client.id=tls-bench-{leg.name}",
            *ssl_props(m),
        ],
    )
    cpu1 = pb.cpu_seconds(pid) if pid else None
    finals = pb.PRODUCER_FINAL.findall(out)
    if not finals:
        raise BenchError(f"ProducerPerformance printed no final summary for {topic} via {leg.name}:\n{out[-2000:]}")
    sent, rps, mbps, _avg, _max, p50, _p95, p99, _p999 = finals[-1]
    if int(sent) != records:
        raise BenchError(f"ProducerPerformance acknowledged {sent} of {records} records via {leg.name}")
    cpu = None if cpu0 is None else cpu1 - cpu0
    return {
        "mbs": float(mbps),
        "msgs": float(rps),
        "p50": float(p50),
        "p99": float(p99),
        "cpu_s": cpu,
        "cpu_per_gb": None if cpu is None else cpu / (records * RECORD_SIZE / pb.GIB),
        "wall": tools.last_wall_s,
    }


def check_forwarded(k: Kshim) -> None:
    """kshim's log names its upstream connections; a leg that opened none to the broker
    listener it is configured for did not go through it."""
    ports = {c.remote_port for c in k.proc.upstream_connections()}
    if k.upstream_port not in ports:
        raise BenchError(f"{k.name} logged no upstream connection to port {k.upstream_port} (saw {sorted(ports)}); "
                         "its produce leg did not pass through it")


def run_produce(args, tools: pb.ToolRunner, m: Material, broker: ke.KafkaNode, legs: list[Leg], check_alive) -> dict:
    admin_bootstrap = broker.internal_bootstrap  # plaintext, off the listeners being measured
    topics = {r: f"tls-bench-r{r}" for r in range(1, args.rounds + 1)}
    warm = "tls-bench-warmup"
    pb.create_topics(admin_bootstrap, [*topics.values(), warm], 1)
    # Fresh JVMs and a cold broker: one shorter unmeasured leg each before round 1.
    for leg in legs:
        log(f"produce warm-up via {leg.name}")
        produce(tools, m, leg, warm, max(args.records // 3, 1))
        check_alive()
    for leg in legs:
        if leg.kshim:
            check_forwarded(leg.kshim)
    pb.delete_topics(admin_bootstrap, [warm])
    results: dict[str, list[dict]] = {leg.name: [] for leg in legs}
    for rnd in range(1, args.rounds + 1):
        # Cyclic rotation: over len(legs) rounds every leg runs once in every position.
        shift = (rnd - 1) % len(legs)
        order = legs[shift:] + legs[:shift]
        for leg in order:
            r = produce(tools, m, leg, topics[rnd], args.records)
            r["round"] = rnd
            results[leg.name].append(r)
            check_alive()
            if leg.kshim and (r["cpu_s"] or 0) <= 0:
                raise BenchError(f"{leg.kshim.name} used no CPU during round {rnd}; the leg did not pass through it")
            log(f"round {rnd}/{args.rounds} produce {leg.name}: {r['mbs']:.1f} MB/s ({r['wall']:.0f}s)")
        pb.delete_topics(admin_bootstrap, [topics[rnd]])
    return results


def produce_report(args, results: dict, legs: list[Leg]) -> str:
    med = statistics.median
    lines = ["", "TLS produce: ProducerPerformance, acks=all, 1 KiB records, "
             f"{args.records:,} per leg, unthrottled; {args.rounds} round(s), leg order rotating", ""]
    lines.append("| round | leg | MB/s | msgs/s | p99 ms [a] | kshim CPU s |")
    lines.append("|---:|---|---:|---:|---:|---:|")
    for i in range(args.rounds):
        for leg in legs:
            r = results[leg.name][i]
            cpu = "—" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
            lines.append(f"| {r['round']} | {leg.name} | {r['mbs']:.1f} | {r['msgs']:,.0f} | {r['p99']:.0f} | {cpu} |")
    lines += ["", "| leg | path | MB/s (median) | msgs/s | vs direct | per-round range | kshim CPU s/GB |",
              "|---|---|---:|---:|---:|---|---:|"]
    paths = {
        "direct": "client -TLS-> broker SSL listener",
        "kshim-tls": "client -TLS-> kshim -TLS-> broker SSL listener",
        "kshim-plain": "client -TLS-> kshim -plain-> broker INTERNAL listener",
    }
    direct = results["direct"]
    d = med(r["mbs"] for r in direct)
    for leg in legs:
        rows = results[leg.name]
        v = med(r["mbs"] for r in rows)
        msgs = med(r["msgs"] for r in rows)
        if leg.name == "direct":
            vs, spread, cpu = "1.000x", "—", "—"
        else:
            per_round = [k["mbs"] / dr["mbs"] for dr, k in zip(direct, rows) if dr["mbs"] > 0]
            vs = f"{v / d:.3f}x" if d > 0 else "n/a"
            spread = f"{min(per_round):.2f}–{max(per_round):.2f}x" if per_round else "n/a"
            cpu = f"{med(r['cpu_per_gb'] for r in rows):.2f}"
        lines.append(f"| {leg.name} | {paths.get(leg.name, '')} | {v:.1f} | {msgs:,.0f} | {vs} | {spread} | {cpu} |")
    lines += [
        "",
        "[a] ProducerPerformance's own percentile, whole ms: under saturation mostly time queued in the",
        "    producer's buffer. MB = 2^20 bytes, GB = 2^30 bytes of record payload. vs direct compares",
        "    the medians; per-round range is each round's own ratio. kshim CPU: utime+stime over its legs.",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# the run


def run(args: argparse.Namespace, workdir: Path, started: float) -> int:
    deadline = started + args.max_seconds
    ke.require_jars()
    bench_bin = Path(args.bench_bin)
    if not bench_bin.is_file() or not os.access(bench_bin, os.X_OK):
        raise BenchError(f"{bench_bin} is missing: build it with `cargo build --release --example tls_bench`")
    log_dir = workdir / "logs"
    log_dir.mkdir()
    # Private copies: target/release may be rebuilt while the run goes on.
    kshim_bin = workdir / "kshim"
    shutil.copy2(ke.require_kshim_binary(args.kshim_bin), kshim_bin)
    bench_copy = workdir / "tls_bench"
    shutil.copy2(bench_bin, bench_copy)
    tools = pb.ToolRunner(log_dir, deadline)
    token = "bench-" + os.urandom(12).hex()

    log("making certificates (openssl, keytool): CA and RSA 2048 leaves")
    m = make_material(workdir / "certs")

    log("starting Apache Kafka 4.1.1 (KRaft; SSL client listener, plaintext INTERNAL listener)")
    cluster = start_broker(workdir / "kafka", m)
    broker = cluster.nodes[0]
    log(f"broker SSL on {broker.bootstrap}, INTERNAL on {broker.internal_bootstrap} (pid {broker.pid})")
    out = tls_exchange(broker.port, m.certs)
    if not out["ok"] or out["error_code"] != 0:
        raise BenchError(f"the broker's SSL listener does not answer ApiVersions over TLS: {out}")

    log("starting kshim-tls (TLS to clients and to the broker, admin API)")
    k_tls = start_kshim("kshim-tls", kshim_bin, workdir / "kshim-tls", m, upstream=broker.bootstrap,
                        upstream_tls=True, with_admin=True, token=token)
    kshims = [k_tls]
    want_plain = "produce" in args.parts and not args.no_plain_upstream
    if want_plain:
        log("starting kshim-plain (TLS to clients, plaintext to the INTERNAL listener)")
        kshims.append(start_kshim("kshim-plain", kshim_bin, workdir / "kshim-plain", m,
                                  upstream=broker.internal_bootstrap, upstream_tls=False, with_admin=False,
                                  token=token))
    for k in kshims:
        log(f"{k.name}: bootstrap {k.bootstrap}, broker listener :{k.node_port}, pid {k.pid}")

    def check_alive() -> None:
        if not broker.alive():
            raise BenchError(f"the broker exited\n--- {broker.log_path}:\n{ke.tail(broker.log_path)}")
        for k in kshims:
            if not k.proc.alive():
                raise BenchError(f"{k.name} exited with status {k.proc.proc.returncode}\n"
                                 f"--- {k.proc.log_path}:\n{ke.tail(k.proc.log_path)}")

    sections = []
    if "handshakes" in args.parts:
        levels = [c for c in args.hs_concurrency.split(",") if c.strip()]
        expected = len(levels) * args.hs_rounds * 2 * args.hs_secs + 2 * args.hs_warmup_secs + 5
        log(f"handshakes: concurrency {args.hs_concurrency}, {args.hs_rounds} round(s) x {args.hs_secs}s "
            f"per target (~{expected}s)")
        sections.append(run_example(bench_copy, log_dir, "handshakes", [
            "handshakes", "--ca", str(m.certs.ca),
            "--target", f"broker={broker.bootstrap}", "--target", f"kshim={k_tls.bootstrap}",
            "--pid", f"broker={broker.pid}", "--pid", f"kshim={k_tls.pid}",
            "--concurrency", args.hs_concurrency, "--rounds", str(args.hs_rounds),
            "--duration-secs", str(args.hs_secs), "--warmup-secs", str(args.hs_warmup_secs),
            "--baseline", "broker",
        ], expected_s=expected, deadline=deadline))
        check_alive()

    if "produce" in args.parts:
        legs = [Leg("direct", broker.bootstrap, None), Leg("kshim-tls", k_tls.bootstrap, k_tls)]
        if want_plain:
            legs.append(Leg("kshim-plain", kshims[1].bootstrap, kshims[1]))
        log(f"produce: {len(legs)} legs x {args.rounds} round(s), {args.records:,} records each")
        results = run_produce(args, tools, m, broker, legs, check_alive)
        sections.append(produce_report(args, results, legs))

    if "reload" in args.parts:
        expected = args.reloads * 0.5 + args.window_pairs * 2 * (args.window_secs + 0.2) + 5
        log(f"reload: {args.reloads} timed rotations, then {args.window_pairs} pairs of {args.window_secs}s windows "
            f"(~{expected:.0f}s)")
        stores = []
        for pem, p12 in m.stores:
            stores += ["--keystore", f"{pem}={p12}"]
        sections.append(run_example(bench_copy, log_dir, "reload", [
            "reload", "--ca", str(m.certs.ca),
            "--tls-listener", k_tls.bootstrap, "--inflight", f"127.0.0.1:{k_tls.node_port}",
            "--admin", f"127.0.0.1:{k_tls.admin_port}", *stores,
            "--reloads", str(args.reloads), "--window-pairs", str(args.window_pairs),
            "--window-secs", str(args.window_secs), "--reload-every-ms", str(args.reload_every_ms),
        ], expected_s=expected, deadline=deadline, env={ADMIN_TOKEN_ENV: token}))
        check_alive()

    elapsed = time.monotonic() - started
    print(f"TLS benchmark: Apache Kafka 4.1.1 (1 KRaft node, SSL listener, JDK {java_version()}) and kshim "
          f"on loopback, {os.cpu_count()} CPUs, load average before the run {LOAD_BEFORE}")
    for s in sections:
        print(s)
    print(f"Total run time {elapsed:.0f}s.")
    return 0


def java_version() -> str:
    try:
        cp = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    first = (cp.stderr or cp.stdout).splitlines()[:1]
    return first[0].split('"')[1] if first and '"' in first[0] else "?"


LOAD_BEFORE = "?"

# Stop functions of what run() started, newest last; called in reverse order at exit.
resources: list = []


def main(argv: list[str]) -> int:
    global LOAD_BEFORE
    args = parse_args(argv)
    try:
        LOAD_BEFORE = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass
    return pb.guarded_run("tls_bench", args, run, resources)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
