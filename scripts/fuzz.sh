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
#   FUZZ_INSTRUMENT_ALL=1  instrument every crate (kafka-protocol's decoders, serde's,
#                    toml's too), built apart from the main build, for long runs; by
#                    default only kshim and the targets are, and every dependency is
#                    the main build's
#   --write-seeds  rewrite the generated seeds (fuzz/seeds/*/gen-*) and exit
#
# Any crash, timeout (-timeout=10 per input), out-of-memory (-rss_limit_mb=1024)
# or oversized allocation fails the run: the target, the artifact and the replay
# command are printed, every target still runs, and the exit status is 1.
# Neither a nightly toolchain nor cargo-fuzz is needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
cd "$ROOT"
# The release settings `cargo test --release` builds with in the test command, whose
# dependencies the fuzz build reuses (scripts/test-profile.sh).
. "$ROOT/scripts/test-profile.sh"

FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
BIN="${KSHIM_TARGET_DIR:-$("$ROOT/scripts/cargo-target-dir")}/release"
LOGS="$FUZZ/corpus/logs"

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

# One build for every target. By default, into the main target directory with the main
# release profile: kshim-fuzz is a member of kshim's workspace (outside its default members,
# so `cargo test` never builds it), cargo runs scripts/fuzz-rustc for the workspace's own
# crates only (RUSTC_WORKSPACE_WRAPPER), which instruments kshim and the targets, and every
# dependency is the very artifact `cargo test --release` built. With FUZZ_INSTRUMENT_ALL=1,
# every crate is instrumented (RUSTFLAGS, as cargo-fuzz does), in a target directory of its
# own. No sanitizer either way: kshim is safe Rust, and the targets' allocator guard and
# -rss_limit_mb bound memory. No nightly toolchain is needed.
if [ "${FUZZ_INSTRUMENT_ALL:-0}" = 1 ]; then
  TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
  BIN="$ROOT/target/fuzz-all/$TRIPLE/release"
  flags="$("$ROOT/scripts/fuzz-rustc" --flags)"
  step "building ${#all_targets[@]} fuzz targets, every crate instrumented (target/fuzz-all)"
  build=(env RUSTFLAGS="$flags" CARGO_TARGET_DIR="$ROOT/target/fuzz-all"
    cargo build --release -p kshim-fuzz --bins --target "$TRIPLE")
else
  step "building ${#all_targets[@]} fuzz targets, kshim and the targets instrumented"
  build=(env RUSTC_WORKSPACE_WRAPPER="$ROOT/scripts/fuzz-rustc" cargo build --release -p kshim-fuzz --bins)
fi
build_started=$SECONDS
"${build[@]}" || die "cargo build of the fuzz targets failed"
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
