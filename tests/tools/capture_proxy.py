#!/usr/bin/env python3
"""Recording TCP proxy for the Kafka wire protocol (stdlib only).

Listens on a loopback address, forwards every byte unchanged to --target, and
writes each complete Kafka frame (4-byte big-endian size prefix + body) seen in
either direction to its own file in --out:

    req-<api_key:03d>-v<api_version>-<seq:04d>.bin
    resp-<api_key:03d>-v<api_version>-<seq:04d>.bin

A response carries no API key or version on the wire; both are taken from the
request with the same correlation id on the same connection, and the response
file reuses that request's sequence number so the pair sorts together.

Each file holds the frame exactly as it crossed the wire, size prefix included.
An index line per frame is appended to <out>/frames.jsonl:
    {"file", "direction", "api_key", "api_version", "header_version",
     "correlation_id", "client_id", "conn", "seq"}

The proxy is bounded: it exits after --seconds (default 60) or once
--max-frames frames have been written, whichever comes first.  On start it
prints "LISTENING host:port" on stdout (useful with --listen 127.0.0.1:0).

Usage:
    capture_proxy.py --listen 127.0.0.1:0 --target 127.0.0.1:9092 \
        --out /tmp/frames --seconds 30 [--max-frames 10] [--api-keys 18,57]
"""

import argparse
import json
import os
import select
import socket
import struct
import sys
import threading
import time

# First flexible version per API key (request and response), from the Apache
# Kafka message schemas.  Used only to record the header version in the index.
FLEXIBLE_FROM = {
    0: 9,    # Produce
    1: 12,   # Fetch
    2: 6,    # ListOffsets
    3: 9,    # Metadata
    8: 8,    # OffsetCommit
    9: 6,    # OffsetFetch
    10: 3,   # FindCoordinator
    11: 6,   # JoinGroup
    12: 4,   # Heartbeat
    13: 4,   # LeaveGroup
    14: 4,   # SyncGroup
    15: 5,   # DescribeGroups
    16: 3,   # ListGroups
    17: 99,  # SaslHandshake (never flexible)
    18: 3,   # ApiVersions
    19: 5,   # CreateTopics
    20: 4,   # DeleteTopics
    21: 2,   # DeleteRecords
    22: 2,   # InitProducerId
    23: 4,   # OffsetForLeaderEpoch
    24: 3,   # AddPartitionsToTxn
    25: 3,   # AddOffsetsToTxn
    26: 3,   # EndTxn
    28: 3,   # TxnOffsetCommit
    29: 2,   # DescribeAcls
    30: 2,   # CreateAcls
    31: 2,   # DeleteAcls
    32: 4,   # DescribeConfigs
    33: 2,   # AlterConfigs
    35: 2,   # DescribeLogDirs
    36: 2,   # SaslAuthenticate
    37: 2,   # CreatePartitions
    42: 2,   # DeleteGroups
    44: 1,   # IncrementalAlterConfigs
    47: 99,  # OffsetDelete (never flexible)
    48: 1,   # DescribeClientQuotas
    49: 1,   # AlterClientQuotas
    50: 0,   # DescribeUserScramCredentials
    51: 0,   # AlterUserScramCredentials
    57: 0,   # UpdateFeatures
    60: 0,   # DescribeCluster
    61: 0,   # DescribeProducers
    65: 0,   # DescribeTransactions
    66: 0,   # ListTransactions
    68: 0,   # ConsumerGroupHeartbeat
    69: 0,   # ConsumerGroupDescribe
    71: 0,   # GetTelemetrySubscriptions
    72: 0,   # PushTelemetry
    75: 0,   # DescribeTopicPartitions
}
NEVER_FLEXIBLE = {17, 47}
API_VERSIONS = 18


def request_header_version(api_key, api_version):
    if api_key in NEVER_FLEXIBLE:
        return 1
    first = FLEXIBLE_FROM.get(api_key)
    if first is not None and api_version >= first:
        return 2
    return 1


def response_header_version(api_key, api_version):
    if api_key == API_VERSIONS:
        return 0  # ApiVersions responses always use header v0
    return 1 if request_header_version(api_key, api_version) == 2 else 0


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Recorder:
    def __init__(self, out_dir, max_frames, api_keys):
        self.out_dir = out_dir
        self.max_frames = max_frames
        self.api_keys = api_keys
        self.lock = threading.Lock()
        self.seq = 0
        self.written = 0
        self.done = threading.Event()
        os.makedirs(out_dir, exist_ok=True)
        self.index = open(os.path.join(out_dir, "frames.jsonl"), "a")

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def write(self, name, frame, meta):
        if self.api_keys is not None and meta["api_key"] not in self.api_keys:
            return
        with self.lock:
            if self.done.is_set():
                return
            with open(os.path.join(self.out_dir, name), "wb") as f:
                f.write(frame)
            meta = dict(meta, file=name)
            self.index.write(json.dumps(meta, sort_keys=True) + "\n")
            self.index.flush()
            self.written += 1
            if self.max_frames and self.written >= self.max_frames:
                self.done.set()


class FrameSplitter:
    """Accumulates a byte stream and yields whole frames (prefix included)."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        frames = []
        while len(self.buf) >= 4:
            (size,) = struct.unpack_from(">i", self.buf, 0)
            if size < 0:
                raise ValueError("negative frame size %d" % size)
            if len(self.buf) < 4 + size:
                break
            frames.append(bytes(self.buf[: 4 + size]))
            del self.buf[: 4 + size]
        return frames


class Connection:
    counter = 0
    counter_lock = threading.Lock()

    def __init__(self, client, target, recorder, deadline):
        with Connection.counter_lock:
            Connection.counter += 1
            self.conn_id = Connection.counter
        self.client = client
        self.recorder = recorder
        self.deadline = deadline
        self.upstream = socket.create_connection(target, timeout=10)
        self.pending = {}  # correlation id -> (api_key, api_version, seq)
        self.lock = threading.Lock()

    def on_request(self, frame):
        if len(frame) < 12:
            return
        api_key, api_version, corr = struct.unpack_from(">hhi", frame, 4)
        client_id = None
        if len(frame) >= 14:
            (n,) = struct.unpack_from(">h", frame, 12)
            if n >= 0 and len(frame) >= 14 + n:
                client_id = frame[14:14 + n].decode("utf-8", "replace")
        seq = self.recorder.next_seq()
        with self.lock:
            self.pending[corr] = (api_key, api_version, seq)
        name = "req-%03d-v%d-%04d.bin" % (api_key, api_version, seq)
        self.recorder.write(name, frame, {
            "direction": "request", "api_key": api_key,
            "api_version": api_version,
            "header_version": request_header_version(api_key, api_version),
            "correlation_id": corr, "client_id": client_id,
            "conn": self.conn_id, "seq": seq})

    def on_response(self, frame):
        if len(frame) < 8:
            return
        (corr,) = struct.unpack_from(">i", frame, 4)
        with self.lock:
            found = self.pending.pop(corr, None)
        if found is None:
            api_key, api_version, seq = -1, -1, self.recorder.next_seq()
            name = "resp-unknown-%04d.bin" % seq
            hv = None
        else:
            api_key, api_version, seq = found
            name = "resp-%03d-v%d-%04d.bin" % (api_key, api_version, seq)
            hv = response_header_version(api_key, api_version)
        self.recorder.write(name, frame, {
            "direction": "response", "api_key": api_key,
            "api_version": api_version, "header_version": hv,
            "correlation_id": corr, "client_id": None,
            "conn": self.conn_id, "seq": seq})

    def run(self):
        socks = [self.client, self.upstream]
        split = {self.client: FrameSplitter(), self.upstream: FrameSplitter()}
        try:
            while not self.recorder.done.is_set() and time.time() < self.deadline:
                readable, _, _ = select.select(socks, [], [], 0.2)
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    other = self.upstream if s is self.client else self.client
                    other.sendall(data)
                    handler = self.on_request if s is self.client else self.on_response
                    for frame in split[s].feed(data):
                        handler(frame)
        except (OSError, ValueError):
            pass
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--max-frames", type=int, default=0,
                    help="exit after writing this many frames (0 = no limit)")
    ap.add_argument("--api-keys", default=None,
                    help="comma-separated API keys to record (default: all)")
    args = ap.parse_args(argv)

    host, port = parse_addr(args.listen)
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        ap.error("--listen must be a loopback address")
    target = parse_addr(args.target)
    api_keys = None
    if args.api_keys:
        api_keys = {int(k) for k in args.api_keys.split(",")}
    recorder = Recorder(args.out, args.max_frames, api_keys)
    deadline = time.time() + args.seconds

    srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(64)
    srv.settimeout(0.2)
    bound = srv.getsockname()
    print("LISTENING %s:%d" % (bound[0], bound[1]), flush=True)

    threads = []
    while not recorder.done.is_set() and time.time() < deadline:
        try:
            client, _ = srv.accept()
        except socket.timeout:
            continue
        try:
            conn = Connection(client, target, recorder, deadline)
        except OSError as e:
            print("upstream connect failed: %s" % e, file=sys.stderr, flush=True)
            client.close()
            continue
        t = threading.Thread(target=conn.run, daemon=True)
        t.start()
        threads.append(t)
    srv.close()
    for t in threads:
        t.join(timeout=1.0)
    print("DONE frames=%d" % recorder.written, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
