#!/usr/bin/env bash
# The committed TF.js goldens (services/model/tests/data/tfjs) are exactly
# what tools/tfjs/gen_goldens.js writes: regenerates them into a temporary
# directory and compares bytes, file by file, both ways. Exits 1 naming the
# first file that differs (or is missing, or is extra).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
tfjs="$root/tools/tfjs"
committed="$root/services/model/tests/data/tfjs"

if [[ ! -f $tfjs/node_modules/@tensorflow/tfjs/package.json ]]; then
  echo "check_goldens: $tfjs/node_modules is missing: run scripts/setup.sh (or: cd tools/tfjs && npm ci)" >&2
  exit 1
fi
if ! command -v node >/dev/null; then
  echo "check_goldens: node (Node.js) is missing: run scripts/setup.sh" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
work="$tmp/out"

node "$tfjs/gen_goldens.js" --out "$work" >"$tmp/log" 2>&1 || {
  cat "$tmp/log" >&2
  echo "check_goldens: gen_goldens.js failed" >&2
  exit 1
}

# Every generated file is committed, byte for byte ...
while IFS= read -r rel; do
  if [[ ! -f $committed/$rel ]]; then
    echo "check_goldens: services/model/tests/data/tfjs/$rel is missing (gen_goldens.js writes it)" >&2
    exit 1
  fi
  if ! cmp -s "$work/$rel" "$committed/$rel"; then
    echo "check_goldens: services/model/tests/data/tfjs/$rel differs from what gen_goldens.js writes" >&2
    exit 1
  fi
done < <(cd "$work" && find . -type f -name '*.json' | sed 's|^\./||' | LC_ALL=C sort)

# ... and nothing else is.
while IFS= read -r rel; do
  if [[ ! -f $work/$rel ]]; then
    echo "check_goldens: services/model/tests/data/tfjs/$rel is not written by gen_goldens.js" >&2
    exit 1
  fi
done < <(cd "$committed" && find . -type f -name '*.json' | sed 's|^\./||' | LC_ALL=C sort)

echo "check_goldens: services/model/tests/data/tfjs is what gen_goldens.js writes"
