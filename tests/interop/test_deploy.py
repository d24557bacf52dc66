"""The Kubernetes manifests (deploy/kubernetes/kshim.yaml) hold together: the kshim config in
their ConfigMap passes `kshim config check` (with test certificates where the Secret would be
mounted), and the Deployment, the Services and the PodDisruptionBudget agree with that config:
ports, probe paths on the admin port, the config's and the certificate's mount paths, and a
termination grace period that covers the drain.

No kubectl is on the test machine, so the manifests are not given to an API server; their
YAML is read with PyYAML and checked here.

docker/load-balancer (HAProxy in front of two kshim instances) is run with a real HAProxy, its
files as they are but for the addresses.
"""

import json
import os
import signal
import subprocess
import tomllib
import uuid

import yaml

import kafka_env as ke
import tls_support as tls

MANIFESTS = ke.REPO_ROOT / "deploy" / "kubernetes" / "kshim.yaml"


def documents() -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for doc in yaml.safe_load_all(MANIFESTS.read_text()):
        by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_the_kubernetes_manifests_agree_with_the_config_they_ship(kshim_binary, tmp_path):
    docs = documents()
    assert sorted(docs) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"], sorted(docs)
    config_text = docs["ConfigMap"][0]["data"]["kshim.toml"]
    config = tomllib.loads(config_text)
    deployment = docs["Deployment"][0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]

    # The config passes kshim's own check, certificates from the test CA in the Secret's place.
    certs = tls.make_certs(tmp_path / "certs")
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    tls_dir = mounts["tls"]["mountPath"]
    assert config["tls"]["certificate"] == f"{tls_dir}/tls.crt" and config["tls"]["key"] == f"{tls_dir}/tls.key"
    checked = tmp_path / "kshim.toml"
    checked.write_text(config_text.replace(f"{tls_dir}/tls.crt", str(certs.server))
                       .replace(f"{tls_dir}/tls.key", str(certs.server_key))
                       .replace(config["data_dir"], str(tmp_path / "data")))
    res = subprocess.run([str(kshim_binary), "config", "check", "--config", str(checked)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "KSHIM_ADMIN_TOKEN": "t"})
    assert res.returncode == 0, res.stderr
    # The test certificate is for localhost: the check says what a real one must name.
    assert "warning: upstream.listeners.sni_host" in res.stderr, res.stderr

    # The container runs that config, from where the ConfigMap is mounted.
    config_path = container["args"][container["args"].index("--config") + 1]
    assert mounts["config"]["mountPath"] == config_path and mounts["config"]["subPath"] == "kshim.toml"
    assert mounts["data"]["mountPath"] == config["data_dir"]
    assert {"name": "config", "configMap": {"name": docs["ConfigMap"][0]["metadata"]["name"]}} in pod["volumes"]

    # Ports: the Kafka listener and the admin API, probed where kshim answers.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"kafka": port_of(config["listen"]), "admin": port_of(config["admin"]["listen"])}, ports
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "admin"}
    assert container["env"][0]["name"] == "KSHIM_ADMIN_TOKEN" and "${env:KSHIM_ADMIN_TOKEN}" == config["admin"]["token"]

    # One port for every broker: the public Service has exactly the Kafka port, and the bootstrap's
    # advertised port is it.
    services = {s["metadata"]["name"]: s for s in docs["Service"]}
    public = [s for s in services.values() if s["spec"]["type"] == "LoadBalancer"]
    assert len(public) == 1 and [p["targetPort"] for p in public[0]["spec"]["ports"]] == ["kafka"], public
    assert public[0]["spec"]["ports"][0]["port"] == port_of(config["advertised_listener"])
    assert "{node_id}" in config["upstream"]["listeners"]["sni_host"]
    assert all(s["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] for s in services.values())

    # The drain fits in the pod's termination grace period, with a margin.
    drain_ms = config["shutdown_delay_ms"] + config["shutdown_grace_ms"]
    assert pod["terminationGracePeriodSeconds"] * 1000 >= drain_ms + 5000, (pod["terminationGracePeriodSeconds"], drain_ms)
    # Replicas share their state on Kafka, and one stays up through voluntary disruptions.
    assert deployment["spec"]["replicas"] >= 2 and "cluster" in config
    assert docs["PodDisruptionBudget"][0]["spec"]["minAvailable"] >= 1
    assert docs["PodDisruptionBudget"][0]["spec"]["selector"] == deployment["spec"]["selector"]


LB_DIR = ke.REPO_ROOT / "docker" / "load-balancer"
LB_PORT = 9093  # haproxy.cfg's frontend and kshim.toml's listener, as the files give them
LB_ADMIN_PORT = 9880
LB_DOMAIN = "kafka.example.com"

LB_CLIENT = r"""
import json, sys
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
bootstrap, cafile, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
common = dict(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=cafile, request_timeout_ms=20000)
producer = KafkaProducer(acks="all", **common)
for i in range(n):
    producer.send(topic, f"{topic}-{i}".encode())
producer.flush(30)
producer.close()
consumer = KafkaConsumer(consumer_timeout_ms=15000, auto_offset_reset="earliest", **common)
partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or [0]]
consumer.assign(partitions)
consumer.seek_to_beginning(*partitions)
got = [m.value.decode() for _, m in zip(range(n), consumer)]
brokers = sorted(f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers())
consumer.close()
print(json.dumps({"brokers": brokers, "got": sorted(got)}))
"""


def test_haproxy_in_front_of_two_kshims_as_the_load_balancer_compose_file_runs_them(kafka_broker, kshim_binary,
                                                                                      tmp_path):
    """docker/load-balancer's haproxy.cfg and kshim.toml, run as they are but on loopback: the
    two instances on 127.0.0.2 and 127.0.0.3, HAProxy on 127.0.0.1, the compose network's
    names and the broker's address rewritten. kafka-python bootstraps from kafka.example.com
    through HAProxy (PROXY protocol v2, TLS passed through, brokers by server name), produces
    and consumes; after one instance is sent SIGTERM, HAProxy's /readyz check takes it out and
    a new client is served by the other."""
    haproxy = tls.require_tool("haproxy")
    certs = tls.make_certs(tmp_path / "certs")
    cert, key = tls.name_certificate(certs, LB_DOMAIN)
    resolver = tls.loopback_resolver(tmp_path, LB_DOMAIN)
    port, admin_port = ke.free_ports(2)
    hosts = ["127.0.0.2", "127.0.0.3"]
    state_topic = "__kshim_state_lb_" + uuid.uuid4().hex[:8]
    template = (LB_DIR / "kshim.toml").read_text()
    assert f'listen = "0.0.0.0:{LB_PORT}"' in template and f':{LB_ADMIN_PORT}"' in template
    instances, proxy = [], None
    try:
        for host in hosts:
            config = (template
                      .replace(f'listen = "0.0.0.0:{LB_PORT}"', f'listen = "{host}:{port}"')
                      .replace(f'"{LB_DOMAIN}:{LB_PORT}"', f'"{LB_DOMAIN}:{port}"')
                      .replace(f'listen = "0.0.0.0:{LB_ADMIN_PORT}"', f'listen = "{host}:{admin_port}"')
                      .replace('"10.0.0.0/8"]', '"10.0.0.0/8", "127.0.0.1"]')
                      .replace("/etc/kshim/tls/kshim.pem", str(cert)).replace("/etc/kshim/tls/kshim.key", str(key))
                      .replace('"kafka:9092"', json.dumps(kafka_broker.bootstrap))
                      .replace('data_dir = "/var/lib/kshim"', f"data_dir = {json.dumps(str(tmp_path / host))}")
                      .replace('id = "kshim-behind-haproxy"', f'id = "kshim-behind-haproxy"\nstate_topic = "{state_topic}"'))
            kshim = ke.KshimProcess(config, binary=kshim_binary, upstream=kafka_broker.bootstrap, host=host,
                                    port=port, workdir=tmp_path / f"kshim-{host}",
                                    env={"KSHIM_ADMIN_TOKEN": "lb-token"})
            instances.append(kshim.start())

        cfg = (LB_DIR / "haproxy.cfg").read_text()
        assert f"bind :{LB_PORT}" in cfg and f"check port {LB_ADMIN_PORT}" in cfg
        cfg = (cfg.replace(f"bind :{LB_PORT}", f"bind 127.0.0.1:{port}")
               .replace(f"check port {LB_ADMIN_PORT}", f"check port {admin_port}")
               .replace(f"kshim-1:{LB_PORT}", f"{hosts[0]}:{port}")
               .replace(f"kshim-2:{LB_PORT}", f"{hosts[1]}:{port}"))
        (tmp_path / "haproxy.cfg").write_text(cfg)
        checked = tls.run_tool([haproxy, "-c", "-f", tmp_path / "haproxy.cfg"], check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        log = tmp_path / "haproxy.log"
        with open(log, "wb") as out:
            proxy = subprocess.Popen([haproxy, "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        assert ke.wait_until(lambda: ke.port_accepts("127.0.0.1", port), 10), log.read_text()

        names = [f"broker-{n.node_id}.{LB_DOMAIN}:{port}" for n in kafka_broker.nodes]
        topic = "lb-" + uuid.uuid4().hex[:6]
        out = tls.run_python(LB_CLIENT, f"{LB_DOMAIN}:{port}", certs.ca, topic, "20", timeout=120, env=resolver)
        assert out["brokers"] == names and out["got"] == sorted(f"{topic}-{i}" for i in range(20)), out

        # Drain the first instance: HAProxy's check sees /readyz fail and sends clients to the other.
        os.kill(instances[0].pid, signal.SIGTERM)
        topic = "lb-" + uuid.uuid4().hex[:6]
        out = tls.run_python(LB_CLIENT, f"{LB_DOMAIN}:{port}", certs.ca, topic, "20", timeout=120, env=resolver)
        assert out["got"] == sorted(f"{topic}-{i}" for i in range(20)), out
        instances[0].proc.wait(45)
        assert instances[0].proc.returncode == 0, ke.tail(instances[0].log_path)
        haproxy_log = log.read_text()
        assert "kshim/kshim-1 is DOWN" in haproxy_log, haproxy_log[-3000:]
    finally:
        if proxy is not None:
            ke.stop_process(proxy)
        for kshim in instances:
            kshim.stop()
