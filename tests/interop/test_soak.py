"""The soak's quick run, as a user runs it: `scripts/soak.sh --quick` starts three Kafka 4.4.0
brokers, three kshim instances sharing state with TLS, and the client load, runs every kind of
fault once, back to back (about three minutes), and writes its report. Every invariant must hold, and the report
must hold what docs/operations.md says it holds. scripts/test.sh starts the run beside the
interop tests (KSHIM_SOAK_RUN), so that its four minutes are not the last the suite waits for;
run alone, this test starts it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import kafka_env as ke

pytestmark = pytest.mark.own_brokers

KINDS = {"kshim_kill", "writer_pause", "broker_roll", "state_leader_stop", "cert_rotate", "config_patch",
         "truststore_change", "client_flood", "kshim_cut_from_brokers", "kshim_cut_from_state_leader"}
# The history checker's (tests/interop/history.py), then the soak's own.
CHECKED = {"one_writer_at_a_time", "served_epochs_never_go_back", "served_state_was_committed",
           "acknowledged_updates_in_state", "converged_after_heals"}
INVARIANTS = CHECKED | {"faults_ran", "no_acknowledged_record_lost", "per_key_order", "memory_and_descriptors_flat",
              "healthy_clients_served_outside_faults", "ack_p99_within_2ms_of_direct",
              "kshim_own_time_within_1ms_p99", "no_panic"}
PLOTS = ["throughput.png", "latency.png", "memory.png", "descriptors.png", "connections.png", "epochs.png"]


def quick_soak(kshim_binary, tmp_path) -> tuple[Path, str, int]:
    """(report directory, output, exit status) of `scripts/soak.sh --quick`: the run
    scripts/test.sh started beside the interop tests (KSHIM_SOAK_RUN names its directory, with
    `log` and, once it ended, `exit`), or one started here."""
    shared = os.environ.get("KSHIM_SOAK_RUN")
    if shared:
        d = Path(shared)
        if not ke.wait_until(lambda: (d / "exit").exists(), 600, 1):
            pytest.fail(f"the quick soak started by scripts/test.sh did not end:\n{ke.tail(d / 'log')}",
                        pytrace=False)
        return d / "report", (d / "log").read_text(), int((d / "exit").read_text())
    out = tmp_path / "soak"
    env = {**os.environ, "KSHIM_BIN": str(kshim_binary)}
    try:
        run = subprocess.run(["bash", str(ke.REPO_ROOT / "scripts" / "soak.sh"), "--quick", "--out", str(out)],
                             cwd=ke.REPO_ROOT, env=env, capture_output=True, text=True, timeout=480)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the quick soak did not end within 480 s:\n{e.stdout}\n{e.stderr}", pytrace=False)
    return out, run.stdout + run.stderr, run.returncode


def test_the_quick_soak_holds_every_invariant(kshim_binary, tmp_path):
    out, log, returncode = quick_soak(kshim_binary, tmp_path)
    assert (out / "summary.json").exists(), f"no summary.json (rc {returncode}):\n{log[-6000:]}"
    summary = json.loads((out / "summary.json").read_text())
    # The quick run reports the end-to-end latency and kshim's own time without judging them
    # (soak.py, Profile.judge_performance, and no core of kshim's own beside the test command:
    # no --pin, no real-time priority); every other invariant decides. kshim's own time must
    # still have been served and sampled for both legs, outside the fault windows.
    advisory = {k for k, v in summary["invariants"].items() if v.get("advisory")}
    assert advisory == {"ack_p99_within_2ms_of_direct", "kshim_own_time_within_1ms_p99"}
    assert all(summary["invariants"][k]["detail"] for k in advisory)
    own = summary["invariants"]["kshim_own_time_within_1ms_p99"]["detail"]
    for leg in ("request", "response"):
        observed = re.search(rf"{leg} p99 <= [0-9.]+ ms, p99.9 <= [0-9.]+ ms \((\d+) observations\)", own)
        assert observed and int(observed.group(1)) > 1000, f"kshim's own time, {leg}: {own}"
    broken = {k: v["detail"] for k, v in summary["invariants"].items() if not v["held"] and k not in advisory}
    assert not broken, f"invariants broken: {json.dumps(broken, indent=1)}\n{log[-4000:]}"
    assert returncode == 0, log[-6000:]
    assert set(summary["invariants"]) == INVARIANTS
    assert {f["kind"] for f in summary["faults"]} == KINDS
    assert all(f["healed_s"] is not None and f["healed_s"] >= f["at_s"] for f in summary["faults"])
    assert summary["acked"] > 10_000 and summary["lost"] == 0 and summary["out_of_order"] == 0
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"
        assert f"![{name}]({name})" in (out / "summary.md").read_text()
    assert str(out) in log, "the report directory is not printed"
    # The history is stored with the report, and the checker run on it alone agrees.
    again = subprocess.run([str(ke.REPO_ROOT / ".venv" / "bin" / "python"), str(ke.INTEROP_DIR / "history.py"),
                            str(out)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {line.split()[1].rstrip(":") for line in again.stdout.splitlines()} == CHECKED, again.stdout
