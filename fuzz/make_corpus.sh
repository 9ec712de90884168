#!/usr/bin/env bash
# Rewrites the committed seed corpora (fuzz/corpus/<harness>/) from the
# project's examples, test data and writers. Run it after changing a format
# or adding an example, then commit what changed. Needs the fuzz build that
# scripts/fuzz.sh configures (it builds fuzz_make_corpus there).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TFJOB_FUZZ_BUILD_DIR:-build-asan}
[[ -f "$BUILD/build.ninja" ]] || bash scripts/fuzz.sh --configure-only
cmake --build "$BUILD" --target fuzz_make_corpus
rm -rf fuzz/corpus
"$BUILD/fuzz/fuzz_make_corpus" "$PWD" fuzz/corpus
find fuzz/corpus -type f | sort | sed 's/^/  /'
