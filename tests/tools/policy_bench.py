#!/usr/bin/env python3
"""Policy benchmark driver: one Apache Kafka 4.1.1 KRaft node and two kshim proxies in front of
it, one without policies ("kshim", every request forwarded unread) and one with the create-topic
policy and a validator in force ("kshim-checked", every CreateTopics and IncrementalAlterConfigs
decoded, checked and forwarded). target/release/examples/policy_bench then times the same
requests against the broker ("direct", the baseline), "kshim" and "kshim-checked", in alternating
order, and times kshim's handlers in process. Started by scripts/bench-policy.sh.

Every process started here is stopped by its PID when the run ends.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "interop"))

import kafka_env  # noqa: E402

BENCH = REPO_ROOT / "target" / "release" / "examples" / "policy_bench"


def checked_policy() -> str:
    """The policy the example's in-process part uses, read from its source so both agree."""
    source = (REPO_ROOT / "examples" / "policy_bench.rs").read_text()
    match = re.search(r'pub const POLICY: &str = r#"(.*?)"#;', source, re.S)
    if not match:
        raise SystemExit("policy_bench.rs has no POLICY constant")
    return match.group(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--creates", type=int, default=40)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    if not BENCH.exists():
        raise SystemExit(f"{BENCH} is missing: cargo build --release --example policy_bench")
    cluster = kafka_env.KafkaCluster(1)
    plain = checked = None
    try:
        cluster.start()
        plain = kafka_env.KshimProcess("", upstream=cluster.bootstrap, rust_log="warn").start()
        checked = kafka_env.KshimProcess(checked_policy(), upstream=cluster.bootstrap, rust_log="warn").start()
        cmd = [
            str(BENCH),
            "--target", f"direct={cluster.bootstrap}",
            "--target", f"kshim={plain.bootstrap}",
            "--target", f"kshim-checked={checked.bootstrap}",
            "--rounds", str(args.rounds),
            "--creates", str(args.creates),
            "--requests", str(args.requests),
        ]
        return subprocess.run(cmd, timeout=args.timeout).returncode
    finally:
        for k in (checked, plain):
            if k is not None:
                k.stop()
                k.cleanup()
        cluster.stop()
        cluster.cleanup()


if __name__ == "__main__":
    sys.exit(main())
