"""Consume alone, long enough to profile: one Kafka 4.1.1 node, one partition filled once with
--records records of --size bytes, then ConsumerPerformance over all of it through each leg
(the broker directly, kshim, a socat relay), the legs alternating for --rounds rounds. Prints
each run's fetch MB/s and the forwarder's CPU seconds per GiB; with --perf, `perf record` (call
graphs) runs on kshim during its last run, into --perf-out, for `perf report`.

    .venv/bin/python tests/tools/consume_profile.py                      # 64 KiB records, 3 rounds
    .venv/bin/python tests/tools/consume_profile.py --size 1024 --records 600000
    .venv/bin/python tests/tools/consume_profile.py --legs kshim --rounds 1 --perf
    perf report -i /tmp/kshim-consume.perf --no-children --sort sym --stdio -g none

The runs read 1.2 GiB each by default (about 3 s), where `scripts/bench-proxy.sh` reads a few
hundred MiB: long enough for a profile, and for the consume figure to settle. Every process
started here is stopped by its PID, however the run ends.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

import kafka_env as ke  # noqa: E402
import proxy_bench as pb  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kshim-bin", type=Path, default=ke.REPO_ROOT / "target" / "release" / "kshim")
    ap.add_argument("--size", type=int, default=65536, help="record size in bytes (default 65536)")
    ap.add_argument("--records", type=int, default=20000, help="records produced once, consumed per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--legs", default="direct,kshim,relay")
    ap.add_argument("--perf", action="store_true", help="perf record on kshim during its last run")
    ap.add_argument("--perf-out", type=Path, default=Path("/tmp/kshim-consume.perf"))
    args = ap.parse_args()
    legs = args.legs.split(",")
    work = Path(tempfile.mkdtemp(prefix="kshim-consume-"))
    stops: list = []
    try:
        cluster = ke.KafkaCluster(1, workdir=work / "kafka", heap=pb.BROKER_HEAP, extra_ports=2, listener_overrides={
            "listeners": "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},"
                         "RELAY://127.0.0.1:{extra0}",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:{port},RELAY://127.0.0.1:{extra1}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,RELAY:PLAINTEXT,CONTROLLER:PLAINTEXT",
        })
        pb.start_cluster(cluster, stops)
        broker = cluster.nodes[0]
        endpoints = [pb.Endpoint("direct", broker.bootstrap, None)]
        kshim = pb.KshimProxy(ke.require_kshim_binary(args.kshim_bin), work / "kshim", broker.bootstrap, 2000)
        stops.append(kshim.stop)
        kshim.start()
        endpoints.append(pb.Endpoint("kshim", kshim.bootstrap, kshim))
        relay_listener, relay_port = broker.extra_ports
        relay = pb.SocatRelay(work / "relay", relay_port, relay_listener)
        stops.append(relay.stop)
        relay.start({broker.port, relay_listener})
        endpoints.append(pb.Endpoint("relay", relay.bootstrap, relay))
        tools = pb.ToolRunner(work, time.monotonic() + 1800, None)
        pb.create_topics(broker.bootstrap, ["consume"], 1)
        pb.produce(tools, endpoints[0], "consume", args.size, args.records, "1")
        for r in range(args.rounds):
            for ep in endpoints:
                if ep.leg not in legs:
                    continue
                perf = None
                if args.perf and ep.leg == "kshim" and r == args.rounds - 1:
                    perf = subprocess.Popen(["perf", "record", "-F", "2000", "--call-graph", "dwarf,16384",
                                             "-p", str(kshim.proc.pid), "-o", str(args.perf_out)],
                                            stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                try:
                    res = pb.consume(tools, ep, "consume", args.size, args.records, f"g-{ep.leg}-{r}")
                finally:
                    if perf is not None:
                        perf.send_signal(2)
                        perf.wait(timeout=60)
                cpu = res["cpu_cons"]
                print(f"round {r + 1} {ep.leg}: {res['cons_mbs']:.1f} MB/s"
                      + (f", {cpu:.2f} CPU-s per GiB" if cpu is not None else ""), flush=True)
        return 0
    except (pb.BenchError, ke.EnvError) as e:
        print(f"consume_profile: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for stop in reversed(stops):
            stop()


if __name__ == "__main__":
    sys.exit(main())
