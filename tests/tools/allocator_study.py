#!/usr/bin/env python3
"""Allocator study: kshim-A (mimalloc + glibc large blocks + kept cache + park hook) against
kshim-B (jemalloc with background thread), and B with a short decay (Bs: dirty 1000 ms,
muzzy 0 ms, through _RJEM_MALLOC_CONF). Every measurement runs on a fresh standalone kshim;
the variants alternate within each measurement, the order rotating each round.

Usage: allocator_study.py [--rounds N] [--variants A,B,Bs] [--only a,b,c,d] [--scale F]
"""
import argparse
import json
import os
import resource
import selectors
import socket
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interop"))
import kafka_env  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGESIZE")
TOKEN = "T"

# NAME -> (binary, environment), from --variant.
VARIANTS: dict = {}


def parse_variant(text):
    name, _, rest = text.partition("=")
    binary, _, env = rest.partition(",")
    settings = dict(kv.split("=", 1) for kv in env.split(";") if kv)
    return name, (Path(binary).resolve(), settings)


# ------------------------------------------------------------------ process figures

def stat_fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_s(pid):
    f = stat_fields(pid)
    return (int(f[11]) + int(f[12])) / CLK


def minflt(pid):
    return int(stat_fields(pid)[7])


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_kib(pid):
    return status_kib(pid, "VmRSS")


def threads(pid):
    names = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            names.append(open(f"/proc/{pid}/task/{t}/comm").read().strip())
        except OSError:
            pass
    return sorted(names)


def metrics(admin_port):
    """The unlabelled series of kshim's /metrics, by name (through the interop tests' admin client)."""
    status, text = kafka_env.AdminApi(admin_port, TOKEN).call("GET", "/metrics", timeout=10)
    assert status == 200, text
    out = {}
    for line in str(text).splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            out[name] = float(value)
    return out


def heap(admin_port):
    return metrics(admin_port).get("kshim_heap_allocated_bytes", float("nan"))


# ------------------------------------------------------------------ kshim

class Kshim:
    def __init__(self, variant, extra_toml=""):
        binary, env = VARIANTS[variant]
        self.admin_port = kafka_env.free_port()
        toml = f'{extra_toml}\n[admin]\nlisten = "127.0.0.1:{self.admin_port}"\ntoken = "{TOKEN}"\n'
        self.proc = kafka_env.KshimProcess(toml, binary=binary, env=env)
        self.proc.start()
        self.pid = self.proc.pid
        self.host, self.port = kafka_env.split_hostport(self.proc.bootstrap)

    def connect(self):
        s = socket.create_connection((self.host, self.port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def close(self):
        self.proc.cleanup()


def frame(body):
    return struct.pack(">i", len(body)) + body


API_VERSIONS = frame(kafka_env.api_versions_request(3, ("x", "1")))


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n}")
        buf += chunk
    return bytes(buf)


def read_frame(s):
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    return recv_exact(s, size)


def api_versions_answer_size(k):
    s = k.connect()
    s.sendall(API_VERSIONS)
    n = len(read_frame(s)) + 4
    s.close()
    return n


# ------------------------------------------------------------------ a. idle memory per connection

def m_idle_conns(variant, scale):
    n = int(2000 * scale)
    k = Kshim(variant)
    try:
        for _ in range(20):  # warm-up
            s = k.connect(); s.sendall(API_VERSIONS); read_frame(s); s.close()
        time.sleep(2)
        rss0, heap0 = rss_kib(k.pid), heap(k.admin_port)
        socks = []
        for _ in range(n):
            s = k.connect(); s.sendall(API_VERSIONS); read_frame(s)
            socks.append(s)
        time.sleep(3)
        rss1, heap1 = rss_kib(k.pid), heap(k.admin_port)
        for s in socks:
            s.close()
        return {
            "rss_kib_per_conn": (rss1 - rss0) / n,
            "heap_kib_per_conn": (heap1 - heap0) / 1024 / n,
            "rss_base_mib": rss0 / 1024,
        }
    finally:
        k.close()


# ------------------------------------------------------------------ b. idle memory after bursts

def burst(k, conns, per_conn, answer):
    payload = API_VERSIONS * per_conn
    expect = answer * per_conn
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(conns):
        s = k.connect()
        s.sendall(payload)  # ~6 KiB: fits the socket buffer
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, [0])
        socks.append(s)
    left = conns
    while left:
        for key, _ in sel.select(timeout=30):
            s, got = key.fileobj, key.data
            try:
                chunk = s.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError("kshim closed a burst connection")
            got[0] += len(chunk)
            if got[0] >= expect:
                sel.unregister(s)
                s.close()
                left -= 1
    sel.close()


def m_bursts(variant, scale):
    conns = int(500 * scale)
    k = Kshim(variant)
    try:
        answer = api_versions_answer_size(k)
        burst(k, 20, 20, answer)  # warm-up
        time.sleep(3)
        base = rss_kib(k.pid)
        heap_base = heap(k.admin_port)
        after = []
        cpu0 = cpu_s(k.pid)
        for i in range(5):
            t0 = time.monotonic()
            burst(k, conns, 200, answer)
            dt = time.monotonic() - t0
            if i < 4:
                time.sleep(5)
                after.append(rss_kib(k.pid) - base)
        peak = status_kib(k.pid, "VmHWM")
        time.sleep(1)
        r1 = rss_kib(k.pid) - base
        time.sleep(4)
        r5 = rss_kib(k.pid) - base
        after.append(r5)
        time.sleep(5)
        r10 = rss_kib(k.pid) - base
        cpu = cpu_s(k.pid) - cpu0
        return {
            "rss_base_mib": base / 1024,
            "rss_5s_after_each_burst_mib": [round(x / 1024, 2) for x in after],
            "rss_1s_after_last_mib": r1 / 1024,
            "rss_5s_after_last_mib": r5 / 1024,
            "rss_10s_after_last_mib": r10 / 1024,
            "peak_rss_mib": peak / 1024,
            "heap_delta_kib_end": (heap(k.admin_port) - heap_base) / 1024,
            "last_burst_s": dt,
            "cpu_s_5_bursts": cpu,
        }
    finally:
        k.close()


# ------------------------------------------------------------------ c. large frames

LARGE_FRAME = None


def large_frame():
    global LARGE_FRAME
    if LARGE_FRAME is None:
        batch = b"\x00" * (100 * 1024 * 1024 - 64 * 1024)
        LARGE_FRAME = kafka_env.produce_v7(1, "big", 1, batch)
    return LARGE_FRAME


def m_large(variant, scale):
    frames = max(1, int(10 * scale))
    data = large_frame()
    k = Kshim(variant)
    try:
        s = k.connect(); s.sendall(API_VERSIONS); read_frame(s); s.close()
        time.sleep(1)
        flt0, cpu0 = minflt(k.pid), cpu_s(k.pid)
        rss0 = rss_kib(k.pid)
        outcomes = []
        t0 = time.monotonic()
        for i in range(frames):
            s = k.connect()
            view = memoryview(data)
            try:
                s.sendall(view)
                try:
                    resp = read_frame(s)
                    outcomes.append(f"answer{len(resp)}")
                except (EOFError, ConnectionResetError):
                    outcomes.append("closed")
                except socket.timeout:
                    outcomes.append("timeout")
            except (BrokenPipeError, ConnectionResetError):
                outcomes.append("reset")
            s.close()
        wall = time.monotonic() - t0
        flt, cpu = minflt(k.pid) - flt0, cpu_s(k.pid) - cpu0
        hwm = status_kib(k.pid, "VmHWM")
        time.sleep(2)
        rss_after = rss_kib(k.pid)
        return {
            "minflt_per_frame": flt / frames,
            "cpu_ms_per_frame": cpu * 1000 / frames,
            "peak_rss_mib": hwm / 1024,
            "rss_2s_after_mib": rss_after / 1024,
            "rss_before_mib": rss0 / 1024,
            "wall_s": wall,
            "outcomes": sorted(set(outcomes)),
        }
    finally:
        k.close()


# ------------------------------------------------------------------ d. CPU per GiB of Metadata

def metadata_request(correlation_id, topics):
    header = struct.pack(">hhih", 3, 12, correlation_id, 6) + b"stress" + b"\x00"
    entries = b"".join(bytes(16) + kafka_env.encode_compact_string(f"t{i:03d}" + "x" * 196) + b"\x00"
                       for i in range(topics))
    body = kafka_env.encode_uvarint(topics + 1) + entries + b"\x00\x00\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


META = metadata_request(7, 60)


def stream_metadata(k, total_bytes, chunk_reqs=64):
    """One connection: writes about total_bytes of pipelined Metadata requests while a reader
    thread reads the answers. Returns (requests, answer bytes)."""
    s = k.connect()
    n = max(1, total_bytes // len(META))
    state = {"read": 0, "bytes": 0, "err": None}

    def reader():
        try:
            while state["read"] < n:
                size = struct.unpack(">i", recv_exact(s, 4))[0]
                recv_exact(s, size)
                state["read"] += 1
                state["bytes"] += size + 4
        except Exception as e:  # noqa: BLE001
            state["err"] = e

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    chunk = META * chunk_reqs
    sent = 0
    while sent < n:
        m = min(chunk_reqs, n - sent)
        s.sendall(chunk if m == chunk_reqs else META * m)
        sent += m
    t.join(timeout=600)
    s.close()
    if state["err"] or state["read"] < n:
        raise RuntimeError(f"metadata stream: read {state['read']} of {n}: {state['err']}")
    return n, state["bytes"]


def m_metadata_one(variant, scale):
    total = int((1 << 30) * scale)
    k = Kshim(variant)
    try:
        stream_metadata(k, 2 << 20)  # warm-up
        cpu0, t0 = cpu_s(k.pid), time.monotonic()
        n, ans = stream_metadata(k, total)
        cpu, wall = cpu_s(k.pid) - cpu0, time.monotonic() - t0
        gib = n * len(META) / (1 << 30)
        return {"cpu_s_per_gib": cpu / gib, "wall_s": wall, "requests": n,
                "answer_bytes_per_req": ans / n, "peak_rss_mib": status_kib(k.pid, "VmHWM") / 1024}
    finally:
        k.close()


def m_metadata_many(variant, scale):
    conns = 200
    per = int((5 << 20) * scale)
    k = Kshim(variant)
    try:
        stream_metadata(k, 2 << 20)
        cpu0, t0 = cpu_s(k.pid), time.monotonic()
        errors = []
        results = []

        def run():
            try:
                results.append(stream_metadata(k, per, chunk_reqs=16))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=run) for _ in range(conns)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise RuntimeError(f"{len(errors)} streams failed: {errors[0]}")
        cpu, wall = cpu_s(k.pid) - cpu0, time.monotonic() - t0
        n = sum(r[0] for r in results)
        gib = n * len(META) / (1 << 30)
        return {"cpu_s_per_gib": cpu / gib, "wall_s": wall, "requests": n,
                "peak_rss_mib": status_kib(k.pid, "VmHWM") / 1024}
    finally:
        k.close()


MEASUREMENTS = {
    "a": ("idle memory per connection", m_idle_conns),
    "b": ("idle memory after bursts", m_bursts),
    "c": ("large frames", m_large),
    "d1": ("CPU per GiB Metadata, 1 connection", m_metadata_one),
    "d2": ("CPU per GiB Metadata, 200 connections", m_metadata_many),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME=BINARY[,KEY=VALUE;...]; the first is the baseline of the ratios")
    ap.add_argument("--only", default="a,b,c,d1,d2")
    ap.add_argument("--scale", type=float, default=1.0, help="for a, b, c")
    ap.add_argument("--dscale", type=float, default=1.0, help="for d1, d2")
    ap.add_argument("--out", default="allocator-study.json")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    VARIANTS.update(parse_variant(v) for v in args.variant)
    variants = list(VARIANTS)
    only = args.only.split(",")
    results = {m: {v: [] for v in variants} for m in only}
    t_start = time.monotonic()
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for m in only:
            name, fn = MEASUREMENTS[m]
            for v in order:
                t0 = time.monotonic()
                scale = args.dscale if m.startswith("d") else args.scale
                res = fn(v, scale)
                res["_s"] = round(time.monotonic() - t0, 1)
                results[m][v].append(res)
                print(f"round {r + 1} {m} ({name}) {v}: "
                      + json.dumps({k: (round(x, 3) if isinstance(x, float) else x) for k, x in res.items()}),
                      flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\ntotal {time.monotonic() - t_start:.0f} s\n")
    summarize(results, variants)


def summarize(results, variants):
    base = variants[0]
    for m, per in results.items():
        print(f"== {m}: {MEASUREMENTS[m][0]}")
        keys = [k for k, x in per[base][0].items() if isinstance(x, (int, float)) and not k.startswith("_")] if per[base] else []
        for key in keys:
            med = {}
            line = f"  {key:32s}"
            for v in variants:
                vals = [r[key] for r in per[v]]
                med[v] = statistics.median(vals)
                line += f" {v}: {med[v]:9.3f} [{min(vals):.3f}..{max(vals):.3f}]"
            for v in variants[1:]:
                ratio = med[v] / med[base] if med[base] else float("nan")
                line += f"  {v}/{base}={ratio:.2f}"
            print(line)


if __name__ == "__main__":
    main()
