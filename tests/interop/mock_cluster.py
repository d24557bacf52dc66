"""Keeps a librdkafka mock cluster alive for the proxy tests (kafka_env.MockCluster runs it).

confluent-kafka's librdkafka creates an in-process mock cluster when a client is configured
with `test.mock.num.brokers`; it lives as long as that client. librdkafka announces its
address in a NOTICE log line ("Mock cluster enabled: ... replaced with HOST:PORT,...").
This program prints that list as `MOCK_BOOTSTRAP HOST:PORT,...` and then serves until
SIGTERM or until --seconds have passed.

    python mock_cluster.py [--brokers 3] [--seconds 900]
"""

from __future__ import annotations

import argparse
import logging
import queue
import signal
import sys
import threading
import time

from confluent_kafka import Producer


class _Collect(logging.Handler):
    def __init__(self, q: queue.Queue):
        super().__init__()
        self.q = q

    def emit(self, record: logging.LogRecord) -> None:
        self.q.put(record.getMessage())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=900)
    args = ap.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    lines: queue.Queue = queue.Queue()
    log = logging.getLogger("librdkafka")
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(_Collect(lines))
    producer = Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # ignored: replaced by the mock cluster's
            "test.mock.num.brokers": args.brokers,
            "logger": log,
        }
    )

    deadline = time.monotonic() + 20
    bootstrap = None
    while bootstrap is None:
        if time.monotonic() > deadline:
            print("mock_cluster: no 'Mock cluster enabled' log line within 20s", file=sys.stderr, flush=True)
            return 1
        producer.poll(0.1)
        while True:
            try:
                msg = lines.get_nowait()
            except queue.Empty:
                break
            if "Mock cluster enabled" in msg:
                bootstrap = msg.rsplit(" ", 1)[1].strip()
    print(f"MOCK_BOOTSTRAP {bootstrap}", flush=True)

    end = time.monotonic() + args.seconds
    while not stop.is_set() and time.monotonic() < end:
        producer.poll(0.2)
        while not lines.empty():
            print(lines.get_nowait(), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
