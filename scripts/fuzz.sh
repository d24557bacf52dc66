#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted input (fuzz/fuzz_targets):
# builds all cargo-fuzz targets in one cargo invocation, then runs each from its
# committed seeds (fuzz/seeds/<target>, copied into the scratch corpus
# fuzz/corpus/<target>) for FUZZ_SECONDS seconds.
#
#   FUZZ_SECONDS   seconds per target (default 300); the test command uses 5
#   FUZZ_TARGETS   space-separated targets to run (default: every target)
#   FUZZ_KEEP_CORPUS=1  start from fuzz/corpus/<target> as a previous run left it
#                       (seeds added), instead of from the seeds alone
#   --write-seeds  rewrite the generated seeds (fuzz/seeds/*/gen-*) and exit
#
# Any crash, timeout (-timeout=10 per input), out-of-memory (-rss_limit_mb=1024)
# or oversized allocation fails the run: the target, the artifact and the replay
# command are printed, every target still runs, and the exit status is 1.
# No nightly toolchain is needed: the build runs with RUSTC_BOOTSTRAP=1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
cd "$ROOT"

FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
BIN="$FUZZ/target/$TRIPLE/release"
LOGS="$FUZZ/corpus/logs"

step() { printf '==> %s\n' "$*"; }
die() { printf 'fuzz: FAILED: %s\n' "$*" >&2; exit 1; }

[[ "$FUZZ_SECONDS" =~ ^[0-9]+$ ]] && [ "$FUZZ_SECONDS" -gt 0 ] \
  || die "FUZZ_SECONDS must be a positive number of seconds, not '$FUZZ_SECONDS'"
cargo fuzz --version >/dev/null 2>&1 || die "cargo-fuzz is not installed; run scripts/install-deps.sh"

all_targets=($(cargo fuzz list))
[ ${#all_targets[@]} -gt 0 ] || die "cargo fuzz list names no target"
if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
  for t in "${targets[@]}"; do
    [[ " ${all_targets[*]} " == *" $t "* ]] || die "unknown target '$t' (targets: ${all_targets[*]})"
  done
else
  targets=("${all_targets[@]}")
fi

# One build for every target. -s none: no sanitizer runtime (kshim is safe Rust;
# the targets' own allocator guard and -rss_limit_mb bound memory), and the
# release profile without debug assertions, 16 codegen units: a quick build.
step "building ${#all_targets[@]} fuzz targets"
build_started=$SECONDS
RUSTC_BOOTSTRAP=1 cargo fuzz build -O -s none --codegen-units 16 \
  || die "cargo fuzz build failed"
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
