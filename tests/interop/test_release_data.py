"""The Kafka release data in data/kafka/ is what each release's own jars say.

Each data/kafka/<major.minor>.json is regenerated from the release it names
(tools/release-data/generate.py, on the kafka-clients and kafka-server-common
jars that scripts/install-deps.sh fetches into build/kafka-releases/) and must
come out byte for byte the same: nothing in it is typed by hand. A few facts
known from each release's tools are checked as well, so that a generator that
reads the jars wrongly cannot pass by writing the same wrong data twice.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "kafka"
JARS = ROOT / "build" / "kafka-releases"
GENERATOR = ROOT / "tools" / "release-data" / "generate.py"

DATA_FILES = sorted(DATA.glob("*.json"))


def load(minor: str) -> dict:
    return json.loads((DATA / f"{minor}.json").read_text())


def test_every_release_from_4_0_to_4_4_has_its_data():
    assert [p.stem for p in DATA_FILES] == ["4.0", "4.1", "4.2", "4.3", "4.4"]


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: p.stem)
def test_the_data_is_what_the_jars_say(path: Path):
    release = json.loads(path.read_text())["release"]
    assert release.rsplit(".", 1)[0] == path.stem, f"{path.name} holds release {release}"
    jars = JARS / release
    if not (jars / f"kafka-clients-{release}.jar").exists():
        pytest.fail(f"{jars} lacks the jars of Kafka {release}: run scripts/install-deps.sh")
    fresh = subprocess.run(
        [sys.executable, str(GENERATOR), "--release", release, "--jars", str(jars)],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout
    kept = path.read_text()
    if fresh != kept:
        diff = "".join(difflib.unified_diff(
            kept.splitlines(keepends=True), fresh.splitlines(keepends=True),
            fromfile=f"data/kafka/{path.name}", tofile=f"generated from Kafka {release}", n=1))
        pytest.fail(f"data/kafka/{path.name} differs from what Kafka {release}'s jars say "
                    f"(regenerate it with {GENERATOR.relative_to(ROOT)}):\n{diff[:6000]}")


def api(data: dict, key: int) -> dict:
    return next(a for a in data["apis"] if a["key"] == key)


def default_levels(data: dict) -> dict[str, int]:
    """What `kafka-features.sh version-mapping` prints for the release's own
    newest production metadata.version."""
    top = str(data["latest_production_metadata_version"])
    return {f["name"]: f["default_level_by_metadata_version"][top] for f in data["features"]}


def test_facts_known_from_the_releases_tools():
    v40, v41, v44 = load("4.0"), load("4.1"), load("4.4")
    # ApiVersions v5 (KIP-1242) is new in 4.4; the Streams group APIs arrived in 4.1.
    assert api(v41, 18)["versions"] == [0, 4]
    assert api(v44, 18)["versions"] == [0, 5]
    keys44 = {a["key"] for a in v44["apis"]}
    assert {88, 89, 93, 94} <= keys44
    assert {a["key"] for a in v40["apis"]}.isdisjoint({88, 89, 93, 94})
    assert api(v44, 78)["versions"] == [1, 2] and api(v44, 79)["versions"] == [1, 2]
    # metadata.version names and levels.
    names = {m["name"]: m["level"] for m in v44["metadata_versions"]}
    assert names["3.3-IV3"] == 7 and names["4.1-IV1"] == 27 and names["4.4-IV2"] == 33
    assert v41["latest_production_metadata_version"] == 27
    assert v44["latest_production_metadata_version"] == 33
    # kafka-features.sh version-mapping --release-version 4.1 gives share.version 0
    # and streams.version 0; 4.4's own gives share.version 2 and streams.version 1.
    assert default_levels(v41)["share.version"] == 0
    assert default_levels(v41)["streams.version"] == 0
    assert default_levels(v44)["share.version"] == 2
    assert default_levels(v44)["streams.version"] == 1
    assert "share.version" not in default_levels(v40)


def test_address_carriers_are_found_and_told_apart():
    v44 = load("4.4")
    metadata = api(v44, 3)["addresses"]
    assert metadata == [{"names_broker": True, "path": "Brokers", "versions": [0, 13]}]
    share_fetch = api(v44, 78)["addresses"]
    assert share_fetch == [{"names_broker": True, "path": "NodeEndpoints", "versions": [1, 2]}]
    # Kafka Streams' application endpoints hold a host and a port but name no
    # broker: they must reach clients as they are.
    for key in (88, 89):
        assert api(v44, key)["addresses"], key
        assert not any(c["names_broker"] for c in api(v44, key)["addresses"]), key


def test_the_compatibility_table_is_written_from_the_data():
    """docs/compatibility.md's per-release table is what tools/release-data/table.py writes
    from the data (run it with --write after changing the data)."""
    sys.path.insert(0, str(GENERATOR.parent))
    try:
        import table
    finally:
        sys.path.pop(0)
    page = table.PAGE.read_text()
    assert page == table.page_with_table(page), "run: python3 tools/release-data/table.py --write"
