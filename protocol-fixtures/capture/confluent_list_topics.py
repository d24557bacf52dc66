import sys, confluent_kafka
from confluent_kafka.admin import AdminClient
print("confluent-kafka", confluent_kafka.version(), "librdkafka", confluent_kafka.libversion())
a = AdminClient({"bootstrap.servers": sys.argv[1]})
md = a.list_topics(timeout=10)
print("brokers", {b.id: (b.host, b.port) for b in md.brokers.values()}, "controller", md.controller_id, "cluster", md.cluster_id)
