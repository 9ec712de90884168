#!/usr/bin/env bash
# The first command on a fresh clone: installs the Debian packages
# (scripts/setup.sh), builds what the example needs, and runs the example
# TFJob (examples/counter/tfjob.yaml: a chief, one parameter server and three
# workers) on this machine with `tfjob run`. Exits with the job's result: 0
# when it Succeeded. Extra arguments go to `tfjob run` (e.g. --state-dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[[ -f build/build.ninja ]] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target tfjob tfjob-runtime
exec build/bin/tfjob run examples/counter/tfjob.yaml "$@"
