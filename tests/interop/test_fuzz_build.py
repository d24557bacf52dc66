"""The fuzz targets' build shares the main build (scripts/fuzz.sh).

kshim-fuzz is a member of kshim's workspace, built into the same target directory with the
same release profile, so that every crate it does not instrument is the very artifact
`cargo test --release` compiled. That holds only while both builds ask for every shared
crate with the same features and profile: a dependency added to kshim with a feature the
fuzz crate's graph lacks (or the other way round) would silently rebuild that crate and
everything above it, minutes of CPU in every run of the test command.

This test compares cargo's unit graphs of the two builds (no compilation): every unit of
the fuzz build that is not kshim-fuzz's own, nor one of libFuzzer's crates, must be a unit
of the main build.
"""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUZZ_ONLY = {"kshim-fuzz", "libfuzzer-sys", "arbitrary"}


def unit_graph(*args):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(
        ["cargo", *args, "--release", "--unit-graph", "-Zunstable-options"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, f"cargo {' '.join(args)} --unit-graph failed:\n{out.stderr}"
    units = set()
    for unit in json.loads(out.stdout)["units"]:
        # pkg_id ends with name@version; the path part differs between checkouts.
        package = unit["pkg_id"].rsplit("#", 1)[-1]
        units.add((package, unit["target"]["name"], unit["mode"], unit["platform"],
                   tuple(unit["features"]), json.dumps(unit["profile"], sort_keys=True)))
    return units


def test_fuzz_build_shares_every_crate_it_does_not_instrument_with_the_main_build():
    main = unit_graph("test", "--no-run", "--lib", "--bins", "--tests")
    fuzz = unit_graph("build", "-p", "kshim-fuzz", "--bins")
    own = {u for u in fuzz if u[0].rsplit("@", 1)[0] in FUZZ_ONLY}
    assert own, "the fuzz build's graph holds none of kshim-fuzz's own units"
    unshared = sorted(fuzz - own - main)
    assert not unshared, (
        "the fuzz build would compile these crates again, with features or a profile the "
        "main build does not use (align fuzz/Cargo.toml's dependencies, or kshim's, so "
        "that they match):\n" + "\n".join(f"  {u[0]} {u[1]} {u[2]} features={list(u[4])}"
                                           for u in unshared))
