#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted input (fuzz/fuzz_targets):
# builds all libFuzzer targets in one cargo invocation, then runs each from its
# committed seeds (fuzz/seeds/<target>, copied into the scratch corpus
# fuzz/corpus/<target>) for FUZZ_SECONDS seconds.
#
#   FUZZ_SECONDS   seconds per target (default 300); the test command uses 5
#   FUZZ_TARGETS   space-separated targets to run (default: every target)
#   FUZZ_KEEP_CORPUS=1  start from fuzz/corpus/<target> as a previous run left it
#                       (seeds added), instead of from the seeds alone
#   FUZZ_INSTRUMENT  the crates built with coverage instrumentation (default:
#                    "kshim kshim-fuzz kafka-protocol"); the others are the main
#                    build's, shared with it
#   --write-seeds  rewrite the generated seeds (fuzz/seeds/*/gen-*) and exit
#
# Any crash, timeout (-timeout=10 per input), out-of-memory (-rss_limit_mb=1024)
# or oversized allocation fails the run: the target, the artifact and the replay
# command are printed, every target still runs, and the exit status is 1.
# No nightly toolchain and no cargo-fuzz are needed: the build runs with
# RUSTC_BOOTSTRAP=1 on the stable toolchain.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
cd "$ROOT"

FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
BIN="$ROOT/target/release"
LOGS="$FUZZ/corpus/logs"
INSTRUMENT="${FUZZ_INSTRUMENT:-kshim kshim-fuzz kafka-protocol}"

step() { printf '==> %s\n' "$*"; }
die() { printf 'fuzz: FAILED: %s\n' "$*" >&2; exit 1; }

[[ "$FUZZ_SECONDS" =~ ^[0-9]+$ ]] && [ "$FUZZ_SECONDS" -gt 0 ] \
  || die "FUZZ_SECONDS must be a positive number of seconds, not '$FUZZ_SECONDS'"

# The targets are fuzz/Cargo.toml's binaries.
all_targets=($(awk '/^\[\[bin\]\]/ { bin = 1; next } /^\[/ { bin = 0 }
  bin && /^name *=/ { gsub(/[" ]/, "", $0); sub(/^name=/, "", $0); print }' "$FUZZ/Cargo.toml"))
[ ${#all_targets[@]} -gt 0 ] || die "fuzz/Cargo.toml names no [[bin]] target"
if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
  for t in "${targets[@]}"; do
    [[ " ${all_targets[*]} " == *" $t "* ]] || die "unknown target '$t' (targets: ${all_targets[*]})"
  done
else
  targets=("${all_targets[@]}")
fi

# One build for every target, into the main target directory with the main release
# profile: kshim-fuzz is a member of kshim's workspace (outside its default members, so
# `cargo test` never builds it), and every crate outside FUZZ_INSTRUMENT is the very
# artifact `cargo test --release` built. The crates in FUZZ_INSTRUMENT get libFuzzer's
# coverage instrumentation (what cargo-fuzz passes to every crate: inline 8-bit edge
# counters, the PC table, comparison tracing, stack depth, no branch folding) and
# `--cfg fuzzing`, at opt-level 1 (a quicker build; inputs run 10-20% slower than at 3).
# No sanitizer: kshim is safe Rust, and the targets' allocator guard and -rss_limit_mb
# bound memory.
SANCOV='["-Cpasses=sancov-module", "-Cllvm-args=-sanitizer-coverage-level=4",
  "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters", "-Cllvm-args=-sanitizer-coverage-pc-table",
  "-Cllvm-args=-sanitizer-coverage-trace-compares", "-Cllvm-args=-sanitizer-coverage-stack-depth",
  "-Cllvm-args=-simplifycfg-branch-fold-threshold=0", "--cfg", "fuzzing"]'
profile=()
for crate in $INSTRUMENT; do
  profile+=(--config "profile.release.package.$crate.rustflags=$SANCOV"
    --config "profile.release.package.$crate.opt-level=1")
done
step "building ${#all_targets[@]} fuzz targets (instrumented: $INSTRUMENT)"
build_started=$SECONDS
RUSTC_BOOTSTRAP=1 cargo build --release -p kshim-fuzz --bins -Zprofile-rustflags "${profile[@]}" \
  || die "cargo build of the fuzz targets failed"
step "built in $((SECONDS - build_started)) s"

# Scratch directories the targets create (data directories, state files).
KSHIM_FUZZ_TMP="$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}" )/kshim-fuzz.XXXXXX")"
export KSHIM_FUZZ_TMP
trap 'rm -rf "$KSHIM_FUZZ_TMP"' EXIT

if [ "${1:-}" = "--write-seeds" ]; then
  for t in "${targets[@]}"; do
    rm -f "$FUZZ/seeds/$t"/gen-*
    KSHIM_FUZZ_WRITE_SEEDS="$FUZZ/seeds/$t" timeout 60 "$BIN/$t" 2>/dev/null \
      || die "$t did not write its seeds"
  done
  exit 0
fi

mkdir -p "$LOGS"
failed=()
for t in "${targets[@]}"; do
  corpus="$FUZZ/corpus/$t"
  artifacts="$FUZZ/artifacts/$t"
  log="$LOGS/$t.log"
  [ -d "$FUZZ/seeds/$t" ] || die "no seeds for $t in fuzz/seeds/$t"
  [ "${FUZZ_KEEP_CORPUS:-0}" = 1 ] || rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  cp "$FUZZ/seeds/$t"/* "$corpus"/
  started=$SECONDS
  set +e
  "$BIN/$t" "$corpus" \
    -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=1024 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  # libFuzzer's last status line: cov (edges reached), ft (features), corp (corpus).
  stats="$(grep -E '^#[0-9]+\s+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -n 1 \
    | sed -E 's/^#[0-9]+\s+[A-Z]+\s+//; s/ lim: [0-9]+//' || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  if [ $rc -eq 0 ]; then
    printf '    %-20s ok, %3d s, %s inputs: %s\n' "$t" $((SECONDS - started)) "${execs:-?}" "$stats"
  else
    artifact="$(grep -oE "Test unit written to \S+" "$log" | tail -n 1 | cut -d' ' -f5)"
    report="$(grep -E -A40 '==[0-9]+==|panicked at|==kshim-fuzz==|ERROR: libFuzzer' "$log" | head -n 60 || true)"
    printf '\n*** fuzz target %s FAILED (libFuzzer exit %s) after %d s\n%s\n' \
      "$t" $rc $((SECONDS - started)) "${report:-$(tail -n 40 "$log")}" >&2
    printf '*** artifact: %s\n*** full log: %s\n*** replay:   %s %s\n\n' \
      "${artifact:-none written}" "$log" "$BIN/$t" "${artifact:-<artifact>}" >&2
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  die "crash, timeout or out-of-memory in: ${failed[*]} (artifacts under fuzz/artifacts/)"
fi
step "fuzzing passed: ${#targets[@]} targets, ${FUZZ_SECONDS} s each"
