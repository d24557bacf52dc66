"""Differential test: a seeded random sequence of at least 200 UpdateFeatures requests
(v0-v2; upgrades, safe and unsafe downgrades, disables, unknown features and upgrade
types, duplicates, out-of-range levels, validate-only) sent to a real Kafka 4.1.1 broker
and to a standalone kshim that starts from the broker's supported ranges and finalized
levels. examples/differential.rs does the comparing; the deliberate divergences it
tolerates are listed in docs/compatibility.md ("Deliberate differences from Kafka 4.1.1")."""

import json
import re
import subprocess

import kafka_env

REPO = kafka_env.REPO_ROOT
DIFFERENTIAL = kafka_env.target_dir() / "release" / "examples" / "differential"


def _bootstrap_toml(levels: dict[str, int]) -> str:
    lines = ["[features.bootstrap]"]
    lines += [f'"{name}" = {level}' for name, level in sorted(levels.items())]
    return "\n".join(lines) + "\n"


def _finalized(bootstrap: str) -> dict[str, int]:
    out = subprocess.run(
        [str(kafka_env.require_kshim_binary()), "features", "describe", "--bootstrap-server", bootstrap, "--output", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    finalized = json.loads(out)["finalized_features"]
    return {k: v["max_version_level"] for k, v in finalized.items() if k != "epoch"}


def test_update_features_agrees_with_the_real_broker(kafka_clusters, kshim_factory):
    assert DIFFERENTIAL.is_file(), f"{DIFFERENTIAL} missing: run `cargo build --release --example differential`"
    # This test changes finalized features, so it gets a broker of its own.
    broker = kafka_clusters.start(1)
    try:
        levels = _finalized(broker.bootstrap)
        assert levels["metadata.version"] == 27, levels
        kshim = kshim_factory(_bootstrap_toml(levels))
        for seed, count in [(7, 200), (20261201, 60)]:
            run = subprocess.run(
                [str(DIFFERENTIAL), "--broker", broker.bootstrap, "--kshim", kshim.bootstrap,
                 "--seed", str(seed), "--count", str(count)],
                capture_output=True, text=True, timeout=600,
            )
            summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
            print(summary)
            assert run.returncode == 0, f"seed {seed}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
            m = re.search(r"(\d+) steps, (\d+) agreed", run.stdout)
            assert m and int(m.group(1)) == count, summary
            # Most steps must be plain agreements, not tolerated divergences.
            assert int(m.group(2)) >= count * 0.8, summary
            assert "unexpected 0" in run.stdout, summary
    finally:
        broker.cleanup()
