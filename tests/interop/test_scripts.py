"""The test command's scripts find what cargo built where cargo put it: with CARGO_TARGET_DIR
set (or a cargo config's build.target-dir), the kshim binary and the examples are there, not in
./target. Needs no broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import kafka_env as ke


def test_the_binary_is_looked_for_in_cargos_target_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KSHIM_BIN", "KSHIM_TARGET_DIR")}
    env["CARGO_TARGET_DIR"] = str(tmp_path / "elsewhere")
    said = subprocess.run([str(ke.REPO_ROOT / "scripts" / "cargo-target-dir")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert said.stdout.strip() == str(tmp_path / "elsewhere"), said
    found = subprocess.run([sys.executable, "-c", "import kafka_env; print(kafka_env.kshim_binary())"],
                           capture_output=True, text=True, env=env, timeout=60, cwd=ke.REPO_ROOT / "tests" / "interop")
    assert found.stdout.strip() == str(tmp_path / "elsewhere" / "release" / "kshim"), found


def test_no_script_of_the_test_command_names_target_release_itself():
    for name in ["test.sh", "fuzz.sh", "soak.sh"]:
        text = (ke.REPO_ROOT / "scripts" / name).read_text()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(r"\$ROOT/target/release|\./target/release", code), name
