"""A non-Java client for `kshim lab matrix` (test_lab_matrix.py): produces N records to a topic
of its own and reads them back in a consumer group, then exits 0; exits 2 with the error on its
last line when it cannot.

    matrix_client.py kafka-python|librdkafka BOOTSTRAP TOPIC [COUNT]

kafka-python uses the classic group protocol; librdkafka (confluent-kafka) uses
group.protocol=consumer (KIP-848) when KSHIM_GROUP_PROTOCOL=consumer is set, classic otherwise.
"""

from __future__ import annotations

import os
import sys
import time

DEADLINE_S = float(os.environ.get("MATRIX_CLIENT_DEADLINE_S", "40"))


def kafka_python(bootstrap: str, topic: str, n: int) -> int:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000)
    for i in range(n):
        producer.send(topic, f"r-{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    seen = 0
    deadline = time.monotonic() + DEADLINE_S
    while seen < n and time.monotonic() < deadline:
        seen += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
    consumer.close()
    return seen


def librdkafka(bootstrap: str, topic: str, n: int) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failures = []
    for i in range(n):
        producer.produce(topic, f"r-{i}".encode(), on_delivery=lambda err, _: err and failures.append(err))
    if producer.flush(20) or failures:
        raise KafkaException(failures[0] if failures else "records left unsent after 20 s")
    protocol = os.environ.get("KSHIM_GROUP_PROTOCOL", "classic")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "group.protocol": protocol,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + DEADLINE_S
    try:
        while seen < n and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().fatal() or not message.error().retriable():
                    raise KafkaException(message.error())
                continue
            seen += 1
    finally:
        consumer.close()
    return seen


def main() -> int:
    client, bootstrap, topic = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    try:
        seen = {"kafka-python": kafka_python, "librdkafka": librdkafka}[client](bootstrap, topic, n)
    except Exception as e:  # the error is the report
        print(f"{type(e).__name__}: {e}", flush=True)
        return 2
    if seen < n:
        print(f"read {seen} of {n} records before the deadline", flush=True)
        return 2
    print(f"produced and consumed {n}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
