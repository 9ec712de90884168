#!/usr/bin/env bash
# clang-format (Debian's, 14) over every C++ and CUDA source git tracks,
# with the repository's .clang-format. `--check` changes nothing and fails,
# naming the files, when one is not formatted (CI runs that).
#
# Usage: bash scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format > /dev/null || { echo "format: clang-format not found (Debian's clang-format; scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu')
if [[ ${1:-} == --check ]]; then
  # 64 files per clang-format, one batch per core at a time: a clang-format
  # process costs about 0.13 core-seconds to start (loading libclang-cpp),
  # so one per file was 70 core-seconds for 537 files, batches are 5. Each
  # unformatted place is a line "FILE:LINE:COL: error: code should be
  # clang-formatted"; any other failure (a file that cannot be read) is
  # printed whole.
  out=$(printf '%s\0' "${files[@]}" | xargs -0 -n 64 -P "$(nproc)" clang-format --dry-run --Werror 2>&1) && rc=0 || rc=$?
  mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<< "$out" | sort -u)
  if ((rc != 0 && ${#bad[@]} == 0)); then
    echo "format: clang-format failed (exit $rc):" >&2
    echo "$out" >&2
    exit 2
  fi
  if ((${#bad[@]})); then
    echo "format: ${#bad[@]} of ${#files[@]} files are not formatted (bash scripts/format.sh fixes them):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: all ${#files[@]} C++ and CUDA sources formatted"
else
  clang-format -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
fi
