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
  # One clang-format per file, a file per core at a time; each prints the
  # name of a file it would change.
  mapfile -t bad < <(printf '%s\0' "${files[@]}" |
    xargs -0 -P "$(nproc)" -I{} sh -c 'clang-format --dry-run --Werror "$1" > /dev/null 2>&1 || echo "$1"' _ {} | sort)
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
