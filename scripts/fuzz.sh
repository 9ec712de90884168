#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with ASan + UBSan and runs each for
# SECONDS (default 10) on a copy of its committed seed corpus
# (fuzz/corpus/<harness without _fuzz>/), so a run never
# changes the tree. Exits non-zero if any harness crashes, leaks, trips a
# sanitizer, times out or breaks an invariant, printing the input that did it.
#
#   bash scripts/fuzz.sh [SECONDS]
#   bash scripts/fuzz.sh --configure-only      # just set up build-asan
#   bash scripts/fuzz.sh --build-only          # set up and build, run nothing
#
# Reproduce a crash with: build-asan/fuzz/<harness> <crash file>
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/sanitizer_build.sh

if [[ ${1:-} == --configure-only ]]; then
  configure_asan
  exit 0
fi
BUILD_ONLY=0
if [[ ${1:-} == --build-only ]]; then
  BUILD_ONLY=1
  shift
fi
SECONDS_EACH=${1:-10}
BUILD=build-asan
HARNESSES=(tf_config_fuzz job_config_fuzz tfjob_json_fuzz tfjob_yaml_fuzz tensor_fuzz checkpoint_fuzz tfrecord_fuzz
           keras_model_fuzz ps_data_fuzz)

configure_asan
cmake --build "$BUILD" --target fuzzers
((BUILD_ONLY)) && exit 0

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tfjob-fuzz.XXXXXX")
# Crash inputs outlive the run (the work dir is removed): keep them in the
# build dir, which git ignores.
ARTIFACTS="$PWD/$BUILD/fuzz-artifacts"
mkdir -p "$ARTIFACTS"
trap 'rm -rf "$WORK"' EXIT

# -timeout: an input that takes this long is a hang (a bug), not slowness.
# -rss_limit_mb (and the malloc limit that follows it): a parser that
# allocates what its input declares before checking it fails here rather
# than in production. Leak checking is off: the parsers under test keep
# nothing past a call, and LeakSanitizer needs ptrace, which containers
# (CI's among them) often refuse. libFuzzer runs every seed first, so a seed
# that crashes is caught before any mutation.
run_one() {
  local h=$1
  cp -R "fuzz/corpus/${h%_fuzz}" "$WORK/$h.corpus"
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "$BUILD/fuzz/$h" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -detect_leaks=0 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$h-" \
    "$WORK/$h.corpus" >"$WORK/$h.log" 2>&1
}

# One harness per core: a libFuzzer process runs one input at a time.
JOBS=$(nproc)
for h in "${HARNESSES[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  (if run_one "$h"; then echo 0; else echo 1; fi >"$WORK/$h.rc") &
done
wait

FAILED=()
for h in "${HARNESSES[@]}"; do
  runs=$(grep -Eo 'stat::number_of_executed_units: [0-9]+' "$WORK/$h.log" | grep -Eo '[0-9]+$' || echo '?')
  if [[ $(cat "$WORK/$h.rc") == 0 ]]; then
    echo "fuzz: $h: ok, $runs inputs in ${SECONDS_EACH}s"
  else
    FAILED+=("$h")
    echo "fuzz: $h: FAILED after $runs inputs; its log ends:"
    tail -n 60 "$WORK/$h.log"
    grep -Eo 'Test unit written to .*' "$WORK/$h.log" | sed "s|^Test unit written to |fuzz: $h: crashing input: |" || true
    echo "fuzz: reproduce with: $BUILD/fuzz/$h <crashing input>"
  fi
done

if ((${#FAILED[@]})); then
  echo "fuzz: ${#FAILED[@]} harness(es) failed: ${FAILED[*]}"
  exit 1
fi
echo "fuzz: all ${#HARNESSES[@]} harnesses ran ${SECONDS_EACH}s each with no crash"
