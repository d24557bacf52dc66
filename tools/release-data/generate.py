#!/usr/bin/env python3
"""Writes what one Apache Kafka release defines, as kshim needs it, from the
release's own jars: data/kafka/<major.minor>.json.

- From kafka-clients: every request and response schema (common/message/*.json):
  API keys, names, listeners, valid and flexible versions, and which response
  structures carry a host and a port (with whether they name a broker by id, as
  broker addresses do, or not, as Kafka Streams' application endpoints do).
- From kafka-server-common (read by ReleaseEnums.java, by reflection):
  metadata.version levels, names, production and metadata-changed flags, and
  every production feature's levels, dependencies, bootstrap metadata.version
  and default level per metadata.version.
- Which API versions need a feature level (`feature_apis`): the APIs of each
  group protocol from the level at which its feature version's own predicate
  (GroupVersion.isConsumerRebalanceProtocolSupported, ShareVersion.supportsShareGroups,
  StreamsVersion.streamsGroupSupported) first holds, and the versions of each
  request after its LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2 (kafka-clients).
- The broker config each topic config overrides, where the names differ
  (ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS).

Usage: generate.py --release 4.4.0 --jars DIR [--out FILE]
DIR holds kafka-clients-<release>.jar, kafka-server-common-<release>.jar and slf4j-api
(scripts/install-deps.sh fetches them into build/kafka-releases/<release>/).
Without --out the data is written to stdout. The output is deterministic: the
same jars always give the same bytes, so a test can regenerate and compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def strip_comments(text: str) -> str:
    """Kafka's schema files carry // comments, which JSON does not allow."""
    out = []
    for line in text.splitlines():
        in_string = False
        escaped = False
        cut = len(line)
        for i, c in enumerate(line):
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c == "/" and line[i + 1:i + 2] == "/":
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def version_range(spec: str | None, newest: int) -> set[int]:
    """A schema's version spec ("0+", "3-5", "4", "none") as a set of versions."""
    if spec is None or spec == "none":
        return set()
    if spec.endswith("+"):
        return set(range(int(spec[:-1]), newest + 1))
    if "-" in spec:
        lo, hi = spec.split("-")
        return set(range(int(lo), int(hi) + 1))
    return {int(spec)}


def span(versions: set[int]) -> list[int] | None:
    """A contiguous set of versions as [min, max]."""
    if not versions:
        return None
    lo, hi = min(versions), max(versions)
    assert versions == set(range(lo, hi + 1)), versions
    return [lo, hi]


def carriers(schema: dict, valid: set[int]) -> list[dict]:
    """The structures of a response that hold a Host and a Port, by path, at
    the versions (of `valid`) in which they are present."""
    newest = max(valid)
    common = {s["name"]: s for s in schema.get("commonStructs", [])}
    found = []

    def walk(fields: list[dict], path: str, present: set[int], within_node: bool) -> None:
        # A Host and Port name a Kafka node (a broker or a controller) when their
        # structure, or one enclosing it, holds that node's id: DescribeQuorum's
        # Nodes.Listeners are a controller's. An application endpoint (Kafka
        # Streams' UserEndpoint) has no node id around it.
        within_node = within_node or any(f.get("entityType") == "brokerId" for f in fields)
        names = {f["name"]: f for f in fields}
        if "Host" in names and "Port" in names:
            host = names["Host"]
            at = present & version_range(host.get("versions"), newest)
            if host.get("taggedVersions"):
                at &= version_range(host.get("taggedVersions"), newest)
            names_broker = within_node
            if at:
                found.append({"path": path or "(top level)", "versions": span(at),
                              "names_broker": names_broker})
        for f in fields:
            inner = f.get("fields")
            type_name = f.get("type", "").removeprefix("[]")
            if inner is None and type_name in common:
                inner = common[type_name]["fields"]
            if inner is None:
                continue
            at = present & version_range(f.get("versions"), newest)
            if f.get("taggedVersions"):
                at &= version_range(f.get("taggedVersions"), newest)
            walk(inner, f"{path}.{f['name']}" if path else f["name"], at, within_node)

    walk(schema.get("fields", []), "", set(valid), False)
    return found


def schemas(clients_jar: str) -> dict:
    """Every request with its response, by API key."""
    requests, responses = {}, {}
    with zipfile.ZipFile(clients_jar) as jar:
        for name in jar.namelist():
            if not re.fullmatch(r"common/message/\w+\.json", name):
                continue
            schema = json.loads(strip_comments(jar.read(name).decode()))
            kind = schema.get("type")
            if kind == "request":
                requests[schema["apiKey"]] = schema
            elif kind == "response":
                responses[schema["apiKey"]] = schema
    apis = []
    for key in sorted(requests):
        req, resp = requests[key], responses[key]
        valid = version_range(req["validVersions"], 10_000)
        if not valid:
            continue  # a removed API whose schema stays ("validVersions": "none")
        newest = max(valid)
        flexible = version_range(req["flexibleVersions"], newest) & valid
        entry = {
            "key": key,
            "name": req["name"].removesuffix("Request"),
            "listeners": sorted(req.get("listeners", [])),
            "versions": span(valid),
            "first_flexible": min(flexible) if flexible else None,
            "latest_version_unstable": bool(req.get("latestVersionUnstable", False)),
            "addresses": carriers(resp, valid),
        }
        apis.append(entry)
    return {"apis": apis}


def enums(jars: str, release: str) -> dict:
    """ReleaseEnums.java's reading of the release's server-common jar."""
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "-d", classes, os.path.join(HERE, "ReleaseEnums.java")],
                       check=True)
        # server-common's config classes need slf4j-api as they load.
        slf4j = sorted(f for f in os.listdir(jars) if re.fullmatch(r"slf4j-api-[\d.]+\.jar", f))
        if not slf4j:
            raise SystemExit(f"{jars} holds no slf4j-api jar: scripts/install-deps.sh fetches it")
        classpath = os.pathsep.join([
            classes,
            os.path.join(jars, f"kafka-server-common-{release}.jar"),
            os.path.join(jars, f"kafka-clients-{release}.jar"),
            os.path.join(jars, slf4j[-1]),
        ])
        out = subprocess.run(["java", "-cp", classpath, "ReleaseEnums"], check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out)


def generate(release: str, jars: str) -> str:
    clients = os.path.join(jars, f"kafka-clients-{release}.jar")
    for jar in (clients, os.path.join(jars, f"kafka-server-common-{release}.jar")):
        if not os.path.exists(jar):
            raise SystemExit(f"{jar} is missing: scripts/install-deps.sh fetches it")
    data = {"release": release}
    data.update(schemas(clients))
    data.update(enums(jars, release))
    data["feature_apis"] = feature_apis(data.pop("protocol_levels"), data.pop("transaction_v2"), data["apis"])
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def feature_apis(protocols: list[dict], transaction_v2: dict, apis: list[dict]) -> list[dict]:
    """The API versions a client uses only once a feature is finalized at a level: every API
    of a group protocol (by its name, such as ShareFetch for the share protocol) from the
    level at which the feature's own predicate supports that protocol, and each request's
    versions after its last one before transaction.version 2."""
    by_name = {a["name"]: a for a in apis}
    out = []
    for p in protocols:
        for a in apis:
            if a["name"].startswith(p["api_name_prefix"]):
                out.append({"feature": p["feature"], "level": p["level"], "key": a["key"],
                            "min_version": a["versions"][0]})
    for r in transaction_v2["requests"]:
        api = by_name[r["request"].removesuffix("Request")]
        out.append({"feature": transaction_v2["feature"], "level": transaction_v2["level"], "key": api["key"],
                    "min_version": r["last_version_before"] + 1})
    return sorted(out, key=lambda e: (e["feature"], e["key"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", required=True, help="a Kafka release, such as 4.4.0")
    parser.add_argument("--jars", required=True, help="the folder holding the release's jars")
    parser.add_argument("--out", help="where to write the data (default: stdout)")
    args = parser.parse_args()
    text = generate(args.release, args.jars)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
