"""The Kubernetes manifests (deploy/kubernetes/kshim.yaml) hold together: the kshim config in
their ConfigMap passes `kshim config check` (with test certificates where the Secret would be
mounted), and the Deployment, the Services and the PodDisruptionBudget agree with that config:
ports, probe paths on the admin port, the config's and the certificate's mount paths, and a
termination grace period that covers the drain.

No kubectl is on the test machine, so the manifests are not given to an API server; their
YAML is read with PyYAML and checked here.
"""

import os
import subprocess
import tomllib
from pathlib import Path

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
