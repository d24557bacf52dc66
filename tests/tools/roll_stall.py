"""A bounded reproduction of the soak's producer stall after a partition leader's broker stops.

In 30-minute soaks (tests/interop/soak.py, docs/operations.md runs E, I, J, L) the idempotent
bulk producer, writing through kshim, sometimes lost a burst of batches of one partition to the
delivery timeout right after that partition's leader broker was stopped in a rolling restart.
This tool does only that, with the logging to find out where the batches wait:

  - three Kafka 4.4.0 brokers (KRaft, combined nodes; replication on a listener of their own, so
    that the client listeners see only the producer or kshim), one kshim in front of them (per-broker
    listeners, plaintext) with RUST_LOG=info,kshim::server=debug,kshim::upstream=debug;
  - a topic of 6 partitions, replication factor 3, min.insync.replicas 2;
  - tests/tools/RollProducer.java: an idempotent acks=all producer (linger 5 ms, the client's
    defaults otherwise) of 1 KiB keyed records at 5 MiB/s through kshim (or with --direct, to the
    brokers), counting acknowledged and failed records per partition, printing every failed batch
    as a JSON line; the Sender, the TransactionManager, NetworkClient, the Selector and Metadata
    logged at DEBUG into producer-debug.log;
  - rolls: the leader of partition 0, 1, ... 5, 0, ... in turn stopped with SIGTERM (a controlled
    shutdown), kept down --down-s, started again, waited for until every partition is in sync,
    then --gap-s, then the next; at most --rolls and within --max-minutes all told;
  - after the last roll, --tail-s (past the producer's 120 s delivery timeout) for the batches
    stuck then to fail, then the producer stops and everything is stopped by its PID.

The brokers log every PRODUCE and INIT_PRODUCER_ID request they complete (kafka.request.logger at
DEBUG, filtered) into node*/requests.log. Every second, the TCP sockets of the producer and of
kshim (ports, state, queues) go to sockets.jsonl; partition leaders and in-sync replicas, as
the brokers report them every 0.5 s, and the rolls go to events.jsonl.

    .venv/bin/python tests/tools/roll_stall.py --out /tmp/rollstall/run1 [--direct]

Exit 0 when no record failed, 1 when some did, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True  # nothing written into the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

import kafka_env as ke  # noqa: E402
import soak  # noqa: E402  (its Metadata request and parser)

RELEASE = "4.4.0"
TOPIC = "roll-data"
PARTITIONS = 6
PRODUCER_SRC = Path(__file__).resolve().parent / "RollProducer.java"
KSHIM_RUST_LOG = "info,kshim::server=debug,kshim::upstream=debug"

PRODUCER_LOG4J = """\
status = warn
name = roll-stall-producer

appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d{{yyyy-MM-dd HH:mm:ss.SSS}}] %p %m (%c)%n
appender.err.filter.threshold.type = ThresholdFilter
appender.err.filter.threshold.level = WARN

appender.file.type = File
appender.file.name = DEBUGFILE
appender.file.fileName = {path}
appender.file.append = true
appender.file.immediateFlush = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d{{yyyy-MM-dd HH:mm:ss.SSS}}] %p [%t] %m (%c)%n

rootLogger.level = INFO
rootLogger.appenderRef.err.ref = STDERR
rootLogger.appenderRef.file.ref = DEBUGFILE

logger.internals.name = org.apache.kafka.clients.producer.internals
logger.internals.level = DEBUG
logger.network.name = org.apache.kafka.clients.NetworkClient
logger.network.level = DEBUG
logger.selector.name = org.apache.kafka.common.network.Selector
logger.selector.level = DEBUG
logger.metadata.name = org.apache.kafka.clients.Metadata
logger.metadata.level = DEBUG
"""

# The harness's broker logging, plus every completed PRODUCE / INIT_PRODUCER_ID request (with
# its response, its connection id and its times) into requests.log.
BROKER_REQUEST_LOG4J = """
appender.req.type = File
appender.req.name = REQUESTS
appender.req.fileName = ${sys:kafka.logs.dir}/requests.log
appender.req.append = true
appender.req.layout.type = PatternLayout
appender.req.layout.pattern = [%d] %m%n
appender.req.filter.produce.type = RegexFilter
# Kafka 4.x logs each request as JSON: {"isForwarded":false,"requestHeader":{"requestApiKey":0,...
appender.req.filter.produce.regex = .*"requestApiKey":(0|22),.*
appender.req.filter.produce.onMatch = ACCEPT
appender.req.filter.produce.onMismatch = DENY

logger.request.name = kafka.request.logger
logger.request.level = DEBUG
logger.request.additivity = false
logger.request.appenderRef.req.ref = REQUESTS
"""


def broker_log4j(request_log: bool) -> str:
    base = ke.BROKER_LOG4J.read_text()
    if not request_log:
        return base
    kept = [line for line in base.splitlines() if not line.startswith("logger.request.")]
    return "\n".join(kept) + "\n" + BROKER_REQUEST_LOG4J


class Log:
    """events.jsonl, and a line on stdout for each event."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, ev: str, quiet: bool = False, **fields) -> dict:
        rec = {"t": round(time.time(), 3), "ev": ev, **fields}
        with self.lock:
            with open(self.path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            if not quiet:
                detail = " ".join(f"{k}={v}" for k, v in fields.items())
                print(f"[roll_stall {time.strftime('%H:%M:%S')}] {ev} {detail}", flush=True)
        return rec


# --------------------------------------------------------------------------------------------
# Metadata v12: partition leaders and in-sync replicas, from the brokers' own listeners


def metadata(kafka: ke.KafkaCluster) -> dict:
    for node in kafka.nodes:
        if node.alive():
            try:
                seen = soak.parse_metadata(ke.exchange(node.probe_bootstrap, soak.metadata_request([TOPIC]), 5))
            except Exception:  # noqa: BLE001 - the next broker may answer
                continue
            return {"brokers": sorted(seen["brokers"]),
                    "partitions": {index: (leader, tuple(replicas), tuple(isr))
                                   for (name, index), (leader, replicas, isr) in seen["partitions"].items()
                                   if name == TOPIC}}
    raise ke.EnvError("no broker answers Metadata")


def all_in_sync(kafka: ke.KafkaCluster) -> bool:
    try:
        parts = metadata(kafka)["partitions"]
    except ke.EnvError:
        return False
    return len(parts) == PARTITIONS and all(
        leader >= 0 and len(isr) == len(replicas) for leader, replicas, isr in parts.values())


# --------------------------------------------------------------------------------------------
# watchers


class Watchers:
    """Leaders and ISRs every 0.5 s (events.jsonl, on change); the producer's and kshim's TCP
    sockets every second (sockets.jsonl)."""

    def __init__(self, kafka: ke.KafkaCluster, log: Log, sockets_path: Path):
        self.kafka, self.log, self.sockets_path = kafka, log, sockets_path
        self.stop = threading.Event()
        self.pids: dict[str, int] = {}
        self.threads = [threading.Thread(target=self._leaders, daemon=True),
                        threading.Thread(target=self._sockets, daemon=True)]

    def start(self) -> "Watchers":
        for t in self.threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)

    def _leaders(self) -> None:
        last: dict = {}
        last_brokers = None
        while not self.stop.wait(0.5):
            try:
                md = metadata(self.kafka)
            except Exception:  # noqa: BLE001 - between brokers, none may answer
                continue
            if md["brokers"] != last_brokers:
                self.log("brokers", quiet=True, live=md["brokers"])
                last_brokers = md["brokers"]
            for p, (leader, replicas, isr) in sorted(md["partitions"].items()):
                if last.get(p) != (leader, isr):
                    old = last.get(p)
                    self.log("partition", quiet=old is not None and old[0] == leader, partition=p,
                             leader=leader, isr=list(isr), was=None if old is None else old[0])
                    last[p] = (leader, isr)

    def _sockets(self) -> None:
        with open(self.sockets_path, "a") as f:
            while not self.stop.wait(1.0):
                rec = {"t": round(time.time(), 3)}
                for name, pid in list(self.pids.items()):
                    inodes = ke._socket_inodes(pid)
                    rows = []
                    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                        try:
                            lines = Path(table).read_text().splitlines()[1:]
                        except FileNotFoundError:
                            continue
                        for line in lines:
                            cols = line.split()
                            if len(cols) > 9 and cols[9] in inodes and cols[3] != "0A":
                                tx, rx = (int(x, 16) for x in cols[4].split(":"))
                                rows.append([int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16),
                                             cols[3], tx, rx])
                    rec[name] = sorted(rows)
                f.write(json.dumps(rec) + "\n")
                f.flush()


# --------------------------------------------------------------------------------------------
# the run


def read_lines(path: Path) -> list[dict]:
    out = []
    try:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except FileNotFoundError:
        pass
    return out


def roll_once(kafka: ke.KafkaCluster, n: int, args, log: Log) -> dict:
    md = metadata(kafka)
    partition = n % PARTITIONS
    leader = md["partitions"].get(partition, (-1,))[0]
    for step in range(PARTITIONS):  # a partition without a leader: the next one's
        if leader >= 0:
            break
        partition = (partition + 1) % PARTITIONS
        leader = md["partitions"].get(partition, (-1,))[0]
    if leader < 0:
        raise ke.EnvError(f"no partition of {TOPIC} has a leader: {md}")
    led = sorted(p for p, (l, _, _) in md["partitions"].items() if l == leader)
    roll = log("roll_stop", roll=n + 1, node=leader, partition=partition, leads=led)
    t_stop = time.time()
    rc = kafka.stop_node(leader, timeout=60)
    roll["stopped"] = time.time()
    log("roll_stopped", roll=n + 1, node=leader, rc=rc, took_s=round(roll["stopped"] - t_stop, 1))
    time.sleep(args.down_s)
    log("roll_start", roll=n + 1, node=leader)
    kafka.start_node(leader, timeout=120)
    kafka.wait_brokers_registered(timeout=120)
    log("roll_registered", roll=n + 1, node=leader)
    in_sync = ke.wait_until(lambda: all_in_sync(kafka), 180, 0.5)
    log("roll_in_sync" if in_sync else "roll_not_in_sync", roll=n + 1, node=leader)
    roll.update(node=leader, partition=partition, leads=led, started=t_stop, healed=time.time())
    return roll


_SEND_RE = re.compile(r"^\[(\S+ \S+)\].*Sending PRODUCE request with header RequestHeader\(.*correlationId=(\d+),"
                      r".* to node (-?\d+): \{.*partitionSizes=\[(.*)\]\}")
_RECV_RE = re.compile(r"Received PRODUCE response from node (-?\d+) for request with header RequestHeader\(.*correlationId=(\d+),")
_CANCEL_RE = re.compile(r"Cancelled in-flight PRODUCE request with correlation id (\d+) due to node (-?\d+)")


def produce_requests(debug_log: Path) -> dict:
    """From the producer's NetworkClient DEBUG lines: how many PRODUCE requests were sent,
    answered, and cancelled (their connection closed), and the ones that got neither."""
    sent: dict[int, tuple[str, int, list[str]]] = {}
    answered: set[int] = set()
    cancelled: dict[int, int] = {}
    try:
        with open(debug_log, errors="replace") as f:
            for line in f:
                if "PRODUCE" not in line:
                    continue
                m = _SEND_RE.search(line)
                if m:
                    sent[int(m.group(2))] = (m.group(1), int(m.group(3)), re.findall(r"-(\d+)=\d+", m.group(4)))
                    continue
                m = _RECV_RE.search(line)
                if m:
                    answered.add(int(m.group(2)))
                    continue
                m = _CANCEL_RE.search(line)
                if m:
                    cancelled[int(m.group(1))] = int(m.group(2))
    except FileNotFoundError:
        return {}
    unanswered = [{"correlation_id": cid, "sent": t, "node": node, "partitions": parts}
                  for cid, (t, node, parts) in sorted(sent.items()) if cid not in answered and cid not in cancelled]
    return {"sent": len(sent), "answered": len(answered & sent.keys()), "cancelled": len(cancelled),
            "unanswered": unanswered[:200]}


def summarize(out: Path, rolls: list[dict], events: list[dict], producer_lines: list[dict], mode: str) -> dict:
    requests = produce_requests(out / "producer-debug.log")
    end = next((x for x in reversed(producer_lines) if x.get("ev") == "end"), None)
    ticks = [x for x in producer_lines if x.get("ev") == "tick"]
    last = end or (ticks[-1] if ticks else {})
    fails = [x for x in producer_lines if x.get("ev") in ("fail", "send_error")]
    # Leader moves seen by the watcher, for "the roll (or move) before" a failed batch.
    moves = [e for e in events if e.get("ev") == "partition" and e.get("was") is not None and e["was"] != e["leader"]]
    by_partition: dict[int, dict] = {}
    for f in fails:
        p = f["partition"]
        d = by_partition.setdefault(p, {"records": 0, "batches": 0, "exceptions": {}, "bursts": []})
        d["records"] += f.get("records", 1)
        d["batches"] += 1
        key = f.get("exception", "?")
        d["exceptions"][key] = d["exceptions"].get(key, 0) + f.get("records", 1)
        created = f.get("created_ms", f["t"]) / 1000
        before = [r for r in rolls if r["started"] <= created]
        move = [m for m in moves if m["partition"] == p and m["t"] <= created + 0.5]
        d["bursts"].append({
            "created": time.strftime("%H:%M:%S", time.localtime(created)) + f".{int(created * 1000) % 1000:03d}",
            "failed_at": time.strftime("%H:%M:%S", time.localtime(f["t"] / 1000)),
            "records": f.get("records", 1), "exception": key, "message": (f.get("message") or "")[:200],
            "roll_before": None if not before else {
                "roll": before[-1]["roll"], "node": before[-1]["node"],
                "at": time.strftime("%H:%M:%S", time.localtime(before[-1]["started"])),
                "created_after_s": round(created - before[-1]["started"], 1)},
            "leader_move_before": None if not move else {
                "from": move[-1]["was"], "to": move[-1]["leader"],
                "at": time.strftime("%H:%M:%S", time.localtime(move[-1]["t"]))},
        })
    summary = {
        "mode": mode,
        "rolls_done": len(rolls),
        "rolls": [{"roll": r["roll"], "node": r["node"], "partition": r["partition"], "leads": r["leads"],
                   "at": time.strftime("%H:%M:%S", time.localtime(r["started"])),
                   "healed_after_s": round(r["healed"] - r["started"], 1)} for r in rolls],
        "sent": last.get("sent"), "acked": last.get("acked"), "failed": last.get("failed"),
        "outstanding_at_end": last.get("outstanding"),
        "producer_ended_cleanly": end is not None,
        "records_acked": sum(last.get("acked") or []), "records_failed": sum(last.get("failed") or []),
        "failures_by_partition": {str(k): v for k, v in sorted(by_partition.items())},
        "produce_requests": requests,
        "leader_moves": [{"partition": m["partition"], "from": m["was"], "to": m["leader"],
                          "at": time.strftime("%H:%M:%S", time.localtime(m["t"]))} for m in moves],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def print_summary(s: dict, out: Path) -> None:
    print("\n==== roll_stall summary ({})".format(s["mode"]))
    print(f"rolls done: {s['rolls_done']}")
    for r in s["rolls"]:
        print(f"  roll {r['roll']} at {r['at']}: node {r['node']} (leader of {r['leads']}, picked for partition "
              f"{r['partition']}), healed after {r['healed_after_s']} s")
    print(f"records acked: {s['records_acked']}  per partition {s['acked']}")
    print(f"records failed: {s['records_failed']}  per partition {s['failed']}")
    print(f"outstanding at the end: {s['outstanding_at_end']} (producer ended cleanly: {s['producer_ended_cleanly']})")
    r = s.get("produce_requests") or {}
    if r:
        print(f"PRODUCE requests (producer-debug.log): {r['sent']} sent, {r['answered']} answered, "
              f"{r['cancelled']} cancelled by a disconnect, {len(r['unanswered'])} with neither")
        for u in r["unanswered"][:10]:
            print(f"  no answer: correlation id {u['correlation_id']} sent {u['sent']} to node {u['node']}, "
                  f"partitions {u['partitions']}")
    for p, d in s["failures_by_partition"].items():
        print(f"  partition {p}: {d['records']} records in {d['batches']} batches, {d['exceptions']}")
        for b in d["bursts"][:5]:
            print(f"    made {b['created']}, failed {b['failed_at']}: {b['records']} x {b['exception']}: "
                  f"{b['message'][:120]}; roll before: {b['roll_before']}; leader move before: {b['leader_move_before']}")
        if len(d["bursts"]) > 5:
            first, lastb = d["bursts"][0], d["bursts"][-1]
            print(f"    ... {len(d['bursts'])} batches made {first['created']} .. {lastb['created']}")
    print(f"logs: {out}")


def rolls_from_events(events: list[dict]) -> list[dict]:
    """The rolls of a run, as roll_once returns them, from its events.jsonl."""
    rolls: dict[int, dict] = {}
    for e in events:
        if e.get("ev") == "roll_stop":
            rolls[e["roll"]] = {"roll": e["roll"], "node": e["node"], "partition": e["partition"],
                                "leads": e["leads"], "started": e["t"], "healed": e["t"]}
        elif e.get("ev") in ("roll_in_sync", "roll_not_in_sync") and e.get("roll") in rolls:
            rolls[e["roll"]]["healed"] = e["t"]
    return [rolls[k] for k in sorted(rolls)]


def resummarize(out: Path) -> int:
    """The summary of a finished run again, from its directory."""
    events = read_lines(out / "events.jsonl")
    mode = "through kshim" if any(e.get("ev") == "kshim_ready" for e in events) else "direct"
    summary = summarize(out, rolls_from_events(events), events, read_lines(out / "producer.out"), mode)
    print_summary(summary, out)
    return 1 if summary["records_failed"] else 0


def run(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "events.jsonl")
    t_begin = time.time()
    hard_end = t_begin + args.max_minutes * 60
    jars = Path(args.jars) if args.jars else ke.release_jars(RELEASE)
    ke.require_jars(jars)
    binary = None if args.direct else ke.require_kshim_binary(Path(args.kshim_bin) if args.kshim_bin else None)

    broker_log4j_path = out / "log4j2-broker.properties"
    broker_log4j_path.write_text(broker_log4j(not args.no_request_log))
    ke.BROKER_LOG4J = broker_log4j_path  # read by KafkaCluster._launch at each start
    producer_log4j_path = out / "log4j2-producer.properties"
    producer_log4j_path.write_text(PRODUCER_LOG4J.format(path=out / "producer-debug.log"))

    classes = ke.compile_java(PRODUCER_SRC, jars=jars)
    shutil.rmtree(out / "kafka", ignore_errors=True)
    kafka = ke.KafkaCluster(
        3, jars=jars, workdir=out / "kafka", separate_inter_broker=True, heap="1g",
        jvm_options=ke.TEST_BROKER_JVM_OPTIONS if args.lean_brokers else (),
        extra_properties={"log.retention.check.interval.ms": "30000",
                          "leader.imbalance.check.interval.seconds": str(args.rebalance_s)})
    kshim = None
    producer = None
    watchers = None
    rolls: list[dict] = []
    stop_file = out / "stop-producer"
    stop_file.unlink(missing_ok=True)
    try:
        log("kafka_start", workdir=str(kafka.workdir))
        kafka.start(timeout=180)
        kafka.wait_brokers_registered(timeout=120)
        log("kafka_ready", nodes={n.node_id: n.port for n in kafka.nodes},
            internal={n.node_id: n.internal_port for n in kafka.nodes})
        created = ke.run_java(["RollProducer", "create", "--bootstrap", kafka.internal_bootstrap, "--topic", TOPIC,
                               "--partitions", str(PARTITIONS)], extra_classpath=[classes], jars=jars,
                              timeout=120)
        if created.rc != 0:
            raise ke.EnvError(f"topic creation failed: {created.stdout}\n{created.stderr}")
        if not ke.wait_until(lambda: all_in_sync(kafka), 60, 0.5):
            raise ke.EnvError(f"{TOPIC} not in sync: {metadata(kafka)}")
        watchers = Watchers(kafka, log, out / "sockets.jsonl").start()
        if args.direct:
            bootstrap = kafka.bootstrap
        else:
            ports = dict(zip((1, 2, 3), ke.free_ports(3)))
            kshim = ke.KshimProcess(upstream=kafka.bootstrap, listener_ports=ports, rust_log=args.rust_log,
                                    binary=binary, workdir=out / "kshim")
            kshim.start()
            watchers.pids["kshim"] = kshim.pid
            bootstrap = kshim.bootstrap
            log("kshim_ready", pid=kshim.pid, bootstrap=bootstrap, node_ports=ports, log=str(kshim.log_path))
        load_s = int(hard_end - time.time() - 30)
        producer = ke.BackgroundJava(
            ["RollProducer", "produce", "--bootstrap", bootstrap, "--topic", TOPIC, "--seconds", str(load_s),
             "--records-per-s", str(int(args.mbps * 1024)), "--bytes", "1024", "--linger-ms", "5",
             "--partitions", str(PARTITIONS), "--stop-file", str(stop_file), "--drain-s", str(args.drain_s)],
            workdir=out, name="producer", extra_classpath=[classes], log_config=producer_log4j_path, jars=jars,
            jvm_args=["-Xmx1g", "-XX:TieredStopAtLevel=4"])
        watchers.pids["producer"] = producer.proc.pid
        if not ke.wait_until(lambda: any(x.get("ev") == "tick" for x in read_lines(producer.stdout_path))
                             or not producer.alive(), 120, 0.5) or not producer.alive():
            raise ke.EnvError(f"the producer did not start\n{ke.tail(producer.stdout_path)}\n"
                              f"{ke.tail(producer.stderr_path)}")
        log("producer_started", pid=producer.proc.pid, bootstrap=bootstrap, mbps=args.mbps, seconds=load_s)
        time.sleep(args.warmup_s)
        for n in range(args.rolls):
            # A roll takes about down_s + 40 s; the tail must fit after it.
            if time.time() + args.down_s + 60 + args.tail_s > hard_end - args.drain_s * 0.2:
                log("no_time_for_more_rolls", done=len(rolls))
                break
            if not producer.alive():
                log("producer_gone", rc=producer.proc.returncode)
                break
            rolls.append(roll_once(kafka, n, args, log))
            time.sleep(args.gap_s)
        tail_until = min(time.time() + args.tail_s, hard_end - 30)
        log("tail", seconds=round(tail_until - time.time()))
        while time.time() < tail_until and producer.alive():
            time.sleep(1)
        stop_file.write_text("stop\n")
        log("producer_stop_requested")
        # The producer stops sending, waits at most drain_s for what is outstanding, and exits.
        wait = max(10.0, min(args.drain_s + 30, hard_end + 60 - time.time()))
        try:
            producer.proc.wait(timeout=wait)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            log("producer_did_not_exit", waited_s=wait)
        return_code = 0
    except ke.EnvError as e:
        log("error", error=str(e)[:4000])
        return_code = 2
    except KeyboardInterrupt:
        log("interrupted")
        return_code = 2
    except Exception:  # noqa: BLE001
        log("error", error=traceback.format_exc()[-4000:])
        return_code = 2
    finally:
        if producer is not None:
            producer.stop()
        if watchers is not None:
            watchers.close()
        if kshim is not None:
            kshim.stop()
        kafka.kill()
        if not args.keep_data:
            for node in kafka.nodes:  # the logs stay, the data does not
                shutil.rmtree(node.dir / "data", ignore_errors=True)
    events = read_lines(out / "events.jsonl")
    lines = read_lines(out / "producer.out") if producer is not None else []
    summary = summarize(out, rolls, events, lines, "direct" if args.direct else "through kshim")
    print_summary(summary, out)
    if return_code:
        return return_code
    return 1 if summary["records_failed"] else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=f"/tmp/rollstall/run-{time.strftime('%H%M%S')}",
                    help="where the logs go (default /tmp/rollstall/run-HHMMSS)")
    ap.add_argument("--direct", action="store_true", help="the producer writes to the brokers, no kshim")
    ap.add_argument("--rolls", type=int, default=8, help="leader stops, at most (default 8)")
    ap.add_argument("--max-minutes", type=float, default=12, help="the whole run's cap (default 12)")
    ap.add_argument("--down-s", type=float, default=20, help="how long a stopped broker stays down (default 20)")
    ap.add_argument("--gap-s", type=float, default=10, help="after a roll healed, before the next (default 10)")
    ap.add_argument("--warmup-s", type=float, default=20, help="load before the first roll (default 20)")
    ap.add_argument("--tail-s", type=float, default=135,
                    help="load after the last roll, past the 120 s delivery timeout (default 135)")
    ap.add_argument("--drain-s", type=int, default=40,
                    help="how long the producer's close waits for outstanding records (default 40)")
    ap.add_argument("--mbps", type=float, default=5, help="MiB/s of 1 KiB records (default 5)")
    ap.add_argument("--rebalance-s", type=int, default=300,
                    help="leader.imbalance.check.interval.seconds: when the preferred leaders take their "
                         "partitions back (default 300, Kafka's)")
    ap.add_argument("--lean-brokers", action="store_true", help="brokers with C1 and the serial collector")
    ap.add_argument("--no-request-log", action="store_true", help="no requests.log at the brokers")
    ap.add_argument("--keep-data", action="store_true", help="keep the brokers' data directories")
    ap.add_argument("--kshim-bin", default=os.environ.get("KSHIM_BIN"), help="the kshim binary (default $KSHIM_BIN)")
    ap.add_argument("--jars", help="Kafka 4.4.0's jars (default build/kafka-jars-4.4.0 of this checkout)")
    ap.add_argument("--rust-log", default=KSHIM_RUST_LOG, help=f"kshim's RUST_LOG (default {KSHIM_RUST_LOG})")
    ap.add_argument("--summarize", metavar="DIR", help="only print (and rewrite) the summary of the run in DIR")
    args = ap.parse_args()
    if args.summarize:
        return resummarize(Path(args.summarize).resolve())
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
